"""AWRS (pushmask.samplers.asap, mode "awrs" and awrs_step) and SMC (pushmask.samplers.smc) against
exact enumeration: the toy LMs and grammars of support.py (whose Oracle walks every
grammatical sequence with a matcher), small hand-made distributions, and a grammar-mask oracle
for single steps over the real SmolLM2 vocabulary.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import pytest
from support import HashedToyLM, chi_square_p, empirical, hf_tokenizer, kl, mean_within, tiny_binary_llama, tiny_llama

from pushmask.masks.matcher import GrammarMatcher
from pushmask.samplers.asap import ASApSampler, awrs_step
from pushmask.samplers.smc import smc

PROBLEMS = ["binary", "parens"]


def _chi_square_p(counts: Counter, ids, probs) -> float:
    """Pearson's test of token counts against probabilities, bins expected < 5 times pooled."""
    from scipy.stats import chisquare

    n = sum(counts.values())
    expected = np.asarray(probs) * n
    big = expected >= 5
    observed, wanted = [counts[t] for t in np.asarray(ids)[big]], list(expected[big])
    if (~big).any():
        observed.append(sum(counts[t] for t in np.asarray(ids)[~big]))
        wanted.append(expected[~big].sum())
    return float(chisquare(observed, wanted).pvalue)


# -- one step ---------------------------------------------------------------------------------


def awrs_moments(masses, allowed):
    """E[W * 1[x = a]] for every token a, by enumerating every path of AWRS's two runs (the
    algorithm as the paper's code runs it: run 1 until an allowed draw x, run 2 from the tokens
    run 1 did not reject, W = (M - m(R1)) / (|R1| + |R2| + 1)).  Exponential: tiny inputs only."""
    total = float(sum(masses))
    out = defaultdict(float)

    def run2(live, x, kept, rejected, prob):
        norm = sum(masses[t] for t in live)
        for t in live:
            p = prob * masses[t] / norm
            if allowed[t]:
                out[x] += p * kept / (rejected + 1)
            else:
                run2(live - {t}, x, kept, rejected + 1, p)

    def run1(live, rejected_mass, rejected, prob):
        norm = sum(masses[t] for t in live)
        for t in live:
            p = prob * masses[t] / norm
            if allowed[t]:
                run2(live, t, total - rejected_mass, rejected, p)
            else:
                run1(live - {t}, rejected_mass + masses[t], rejected + 1, p)

    run1(frozenset(t for t in range(len(masses)) if masses[t] > 0), 0.0, 0, 1.0)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_the_weight_is_a_proper_weight_by_enumeration(seed):
    """E[W 1[x = a]] = P(a) for each allowed a: W is unbiased for the allowed mass, and unbiased
    given the token drawn (the property SMC relies on)."""
    rng = np.random.default_rng(seed)
    masses = rng.dirichlet(np.full(7, 0.7))
    allowed = rng.random(7) < 0.45
    allowed[rng.integers(7)] = True
    moments = awrs_moments(masses, allowed)
    for a in range(7):
        assert math.isclose(moments.get(a, 0.0), masses[a] if allowed[a] else 0.0, rel_tol=1e-9, abs_tol=1e-15)


@pytest.mark.parametrize("max_checks", [1000, 2, 0])
def test_awrs_step_samples_the_masked_distribution_with_unbiased_weights(max_checks):
    """Over a small distribution, with and without the budget cutting in: tokens follow P
    restricted to the allowed set (chi-square), and the mean weight per token is its mass."""
    masses = np.array([0.3, 0.25, 0.2, 0.1, 0.05, 0.05, 0.04, 0.01])
    allowed = np.array([0, 0, 1, 0, 1, 0, 0, 1], dtype=bool)
    z = masses[allowed].sum()
    rng = np.random.default_rng(max_checks)
    n = 6000
    tokens, weights, checks, fallbacks = [], [], 0, 0
    for _ in range(n):
        step = awrs_step(masses, lambda t: bool(allowed[t]), lambda: allowed.copy(), rng, max_checks=max_checks)
        tokens.append(step.token)
        weights.append(math.exp(step.log_weight))
        checks += step.checks
        fallbacks += step.fell_back
        assert step.checks <= max_checks
    counts = Counter(tokens)
    assert set(counts) <= set(np.flatnonzero(allowed))
    assert _chi_square_p(counts, np.flatnonzero(allowed), masses[allowed] / z) >= 1e-3
    ok, got = mean_within(weights, z)
    assert ok, got
    weights = np.array(weights)
    for t in np.flatnonzero(allowed):  # E[W | x = t] = Z as well
        ok, got = mean_within(weights[np.array(tokens) == t], z)
        assert ok, (t, got)
    if max_checks == 0:
        assert checks == 0 and fallbacks == n  # the mask decides everything
    elif max_checks == 2:
        assert 0 < fallbacks < n
    else:
        assert fallbacks == 0 and checks / n < 6  # two short runs, far from the 8-token vocabulary


def test_rejection_loop_never_runs_forever():
    """Nothing allowed: the loop ends once every token with mass was rejected (or the mask said
    so), with token None and weight 0; and it never checks a token twice."""
    masses = np.random.default_rng(0).random(1000)
    seen = Counter()

    def nothing(t):
        seen[t] += 1
        return False

    step = awrs_step(masses, nothing, lambda: np.zeros(1000, dtype=bool), np.random.default_rng(1), max_checks=10**9)
    assert step.token is None and step.log_weight == -math.inf and not step.fell_back
    assert step.checks == 1000 and max(seen.values()) == 1
    step = awrs_step(masses, nothing, lambda: np.zeros(1000, dtype=bool), np.random.default_rng(1), max_checks=16)
    assert step.token is None and step.fell_back and step.checks == 16
    zero = awrs_step(np.zeros(5), nothing, lambda: np.ones(5, dtype=bool), np.random.default_rng(1))
    assert zero.token is None and zero.checks == 0
    # one allowed token of tiny mass among many: found through the mask, still exact
    masses = np.full(5000, 1.0)
    masses[1234] = 1e-9
    allowed = np.zeros(5000, dtype=bool)
    allowed[1234] = True
    step = awrs_step(masses, lambda t: bool(allowed[t]), lambda: allowed, np.random.default_rng(2), max_checks=32)
    assert step.token == 1234 and step.fell_back and step.checks == 32
    assert 0 < math.exp(step.log_weight) <= masses.sum()


def _wide_lm(vocab_size, favoured, bias, seed):
    """Gaussian logits over the whole vocabulary, `bias` added on the `favoured` tokens."""
    logits = np.random.default_rng(seed).normal(0.0, 2.0, vocab_size)
    logits[favoured] += bias
    return logits


@pytest.mark.parametrize("bias", [11.0, 0.0])
def test_awrs_step_over_the_real_vocabulary(smollm2_compiler, bias):
    """One step over SmolLM2's 49,152 tokens against the grammar's mask (10 digit tokens allowed):
    when the model mostly agrees with the grammar (bias 11) a few checks do, when it does not
    (bias 0: ~0.02% allowed) the budget hands over to the mask; either way the token follows the
    masked distribution and the weight's mean is the allowed mass."""
    compiled = smollm2_compiler.compile_grammar('root ::= [0-9]+ ";"')
    matcher = GrammarMatcher(compiled)
    mask = matcher.get_next_token_mask()
    logits = _wide_lm(len(mask), np.flatnonzero(mask), bias, seed=5)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    z = probs[mask].sum()
    rng = np.random.default_rng(0)
    n = 3000 if bias > 0 else 600  # each fallback finishes its runs over the whole vocabulary
    tokens, weights, checks, fallbacks = [], [], 0, 0
    for _ in range(n):
        step = awrs_step(probs, matcher.check_token, matcher.get_next_token_mask, rng)
        tokens.append(step.token)
        weights.append(math.exp(step.log_weight))
        checks += step.checks
        fallbacks += step.fell_back
    assert all(mask[t] for t in tokens)
    ok, got = mean_within(weights, z)
    assert ok, got
    ids = np.flatnonzero(mask)
    assert len(ids) == 10
    assert _chi_square_p(Counter(tokens), ids, probs[ids] / z) >= 1e-3
    if bias > 0:
        assert z > 0.5 and checks / n < 3 and fallbacks == 0
    else:
        assert z < 0.001 and fallbacks == n


# -- the awrs mode of the sampler ------------------------------------------------------------


@pytest.mark.parametrize("name", PROBLEMS)
def test_awrs_mode_draws_gcd_and_weights_estimate_z(request, name):
    """The awrs walk proposes exactly what GCD does (chi-square against the enumerated GCD
    distribution), every output is in the language with its true log P, and the mean weight
    P(w) / q(w) estimate is Z."""
    lm, compiled, oracle = request.getfixturevalue(name)
    sampler = ASApSampler(lm, None, compiled, [], mode="awrs", seed=3)
    samples = sampler.sample_many(3000)
    assert all(s.complete and tuple(s.token_ids) in oracle.q for s in samples)
    for s in samples[:50]:
        assert math.isclose(math.exp(s.log_p), oracle.p[tuple(s.token_ids)], rel_tol=1e-9)
    assert chi_square_p(samples, oracle.gcd) >= 1e-3
    ok, got = mean_within([math.exp(s.log_weight) for s in samples], oracle.z)
    assert ok, got
    assert sampler.forward_passes <= len(oracle.c)  # revisits reuse the stored distribution
    assert sampler.grammar_checks < 4 * sampler.steps
    # self-normalised importance weights correct GCD's distortion
    weighted = defaultdict(float)
    for s in samples:
        weighted[tuple(s.token_ids)] += math.exp(s.log_weight)
    total = sum(weighted.values())
    assert kl({w: v / total for w, v in weighted.items()}, oracle.q) < kl(empirical(samples), oracle.q) / 5


def test_fresh_awrs_samples_are_unbiased(binary):
    """Weights of first samples from fresh samplers (nothing cached): their mean is Z."""
    lm, compiled, oracle = binary
    weights = [
        math.exp(ASApSampler(lm, None, compiled, [], mode="awrs", seed=s).sample().log_weight) for s in range(600)
    ]
    ok, got = mean_within(weights, oracle.z)
    assert ok, got


def test_awrs_budget_falls_back_to_the_mask(binary):
    """With a budget of one check most nodes hand over to the mask, become expanded (later visits
    draw exactly, weight A(u)), and the samples still follow GCD with unbiased weights."""
    lm, compiled, oracle = binary
    sampler = ASApSampler(lm, None, compiled, [], mode="awrs", max_checks=1, seed=8)
    samples = sampler.sample_many(2000)
    assert sampler.mask_fallbacks > 0 and sampler.grammar_checks <= sampler.steps
    assert chi_square_p(samples, oracle.gcd) >= 1e-3
    ok, got = mean_within([math.exp(s.log_weight) for s in samples], oracle.z)
    assert ok, got


def test_modes_share_the_trie_with_awrs(binary):
    """awrs walks leave nodes whose mask is unknown; asap/exact/gcd walks then mask them without a
    new model call, c~ stays an upper bound, and exact mode on that trie is still exact."""
    lm, compiled, oracle = binary
    sampler = ASApSampler(lm, None, compiled, [], mode="awrs", seed=13)
    sampler.sample_many(300)
    calls = sampler.forward_passes
    assert calls >= 30 and not sampler.root.expanded
    exact = sampler.sample_many(2500, mode="exact")
    assert sampler.forward_passes - calls <= len(oracle.c) - calls  # masks added, calls only for new prefixes
    assert chi_square_p(exact, oracle.q) >= 1e-3
    for prefix, log_c in sampler.iter_nodes():
        if prefix in oracle.c:
            assert math.exp(log_c) >= oracle.c[prefix] - 1e-12
    asap = sampler.sample_many(3000, mode="asap")[500:]
    assert kl(empirical(asap), oracle.q) <= 0.01
    more = sampler.sample_many(500, mode="awrs")  # awrs on expanded nodes: the exact step
    assert chi_square_p(more, oracle.gcd) >= 1e-3
    assert all(
        math.isclose(s.log_weight, s.log_p - math.log(oracle.gcd[tuple(s.token_ids)]), rel_tol=1e-9) for s in more
    )


def test_awrs_mode_dead_end_and_cut_off(binary):
    lm, compiled, _ = binary
    tok = hf_tokenizer("smollm2")
    junk = HashedToyLM(
        compiled.tokenizer_info.vocab_size, {tok.encode(t, add_special_tokens=False)[0]: 0.0 for t in ("2", "a")}
    )
    s = ASApSampler(junk, None, compiled, [], mode="awrs", seed=0).sample()
    assert not s.complete and s.token_ids == [] and s.log_weight == -math.inf
    cut = ASApSampler(lm, None, compiled, [], mode="awrs", max_new_tokens=5, seed=0).sample_many(20)
    assert all(not s.complete and len(s.token_ids) == 5 for s in cut)


# -- SMC --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROBLEMS)
def test_smc_marginal_likelihood_is_unbiased(request, name):
    lm, compiled, oracle = request.getfixturevalue(name)
    estimates = []
    for seed in range(200):
        result = smc(lm, None, compiled, [], num_particles=4, seed=seed)
        estimates.append(math.exp(result.log_marginal_likelihood))
        assert all(tuple(p.token_ids) in oracle.q for p in result.particles if p.complete)
        mean_weight = np.mean([math.exp(p.log_weight) for p in result.particles])
        assert math.isclose(mean_weight, estimates[-1], rel_tol=1e-9)
    ok, got = mean_within(estimates, oracle.z)
    assert ok, got


@pytest.mark.parametrize("name", PROBLEMS)
def test_smc_converges_to_q(request, name):
    """The weighted particles approach Q as N grows, far closer than GCD's distortion."""
    lm, compiled, oracle = request.getfixturevalue(name)
    small = [kl(smc(lm, None, compiled, [], num_particles=20, seed=s).distribution(), oracle.q) for s in range(5)]
    big = smc(lm, None, compiled, [], num_particles=3000, seed=0)
    assert all(p.complete and tuple(p.token_ids) in oracle.q for p in big.particles if p.log_weight > -math.inf)
    kl_big = kl(big.distribution(), oracle.q)
    assert kl_big <= 0.03 and kl_big < np.mean(small) / 3
    assert kl_big < kl(oracle.gcd, oracle.q) / 10
    assert big.model_calls <= len(oracle.c) * big.steps  # distinct prefixes only, one call each
    assert abs(big.log_marginal_likelihood - math.log(oracle.z)) < 0.2


def test_smc_resampling_and_threshold(binary):
    lm, compiled, oracle = binary
    never = smc(lm, None, compiled, [], num_particles=16, ess_threshold=0.0, seed=1)
    always = smc(lm, None, compiled, [], num_particles=16, ess_threshold=1.0, seed=1)
    assert never.num_resamples == 0 and always.num_resamples >= 3
    assert len(never.ess) == never.steps and all(0 < e <= 16 + 1e-9 for e in never.ess)
    # without resampling SMC is importance sampling with AWRS proposals: particles are independent
    # awrs samples, so their mean weight is the estimate
    assert math.isclose(
        math.exp(never.log_marginal_likelihood),
        np.mean([math.exp(p.log_weight) for p in never.particles]),
        rel_tol=1e-9,
    )
    assert sum(always.weights()) == pytest.approx(1.0)
    drawn = always.sample(np.random.default_rng(0))
    assert drawn.complete and tuple(drawn.token_ids) in oracle.q


def test_smc_last_slot_allows_only_stop_tokens(binary):
    lm, compiled, oracle = binary
    result = smc(lm, None, compiled, [], num_particles=8, max_new_tokens=6, seed=2)
    assert result.steps == 6 and all(p.complete for p in result.particles)
    # five tokens and the stop fill 6 slots exactly; 5 slots cannot hold any string
    dead = smc(lm, None, compiled, [], num_particles=8, max_new_tokens=5, seed=2)
    assert dead.log_marginal_likelihood == -math.inf and not dead.weights().any()
    with pytest.raises(ValueError, match="every particle died"):
        dead.sample()


def test_smc_bad_arguments(binary):
    lm, compiled, _ = binary
    for kw, match in [
        ({"num_particles": 0}, "num_particles"),
        ({"ess_threshold": 1.5}, "ess_threshold"),
        ({"temperature": 0}, "temperature"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_checks": -1}, "max_checks"),
    ]:
        with pytest.raises(ValueError, match=match):
            smc(lm, None, compiled, [], **kw)
    with pytest.raises(TypeError, match="CompiledGrammar"):
        smc(lm, None, "root ::= 'a'", [])
    with pytest.raises(TypeError, match="callable"):
        smc(42, None, compiled, [])
    with pytest.raises(ValueError, match="max_checks"):
        ASApSampler(lm, None, compiled, [], mode="awrs", max_checks=-2)


def test_smc_with_a_transformers_model(binary):
    """A tiny random Llama: one batched forward pass per step over the distinct prefixes, the
    key/value cache gathered across resamplings; every particle's log P matches full forward
    passes, and the run matches the same model called as a plain function."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    _, compiled, _ = binary
    model = tiny_binary_llama()
    prompt = [1, 5, 7]

    def full_forward(ids):
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0, -1].double()

    result = smc(model, None, compiled, prompt, num_particles=6, ess_threshold=1.0, seed=0)
    assert result.num_resamples >= 2 and result.forward_passes == result.steps
    assert result.model_calls > result.steps  # several distinct prefixes per pass
    for p in result.particles:
        assert p.complete
        ids = p.token_ids + [p.stop_token_id]
        expected = sum(float(torch.log_softmax(full_forward(prompt + ids[:k]), -1)[ids[k]]) for k in range(len(ids)))
        assert math.isclose(p.log_p, expected, rel_tol=1e-5, abs_tol=1e-5)
    plain = smc(lambda ids: full_forward(ids), None, compiled, prompt, num_particles=6, ess_threshold=1.0, seed=0)
    assert [p.token_ids for p in plain.particles] == [p.token_ids for p in result.particles]
    assert plain.log_marginal_likelihood == pytest.approx(result.log_marginal_likelihood, rel=1e-5)
    with pytest.raises(ValueError, match="at least one input token"):
        smc(model, None, compiled, [])


# -- the matcher's part -------------------------------------------------------------------------


def test_check_token_agrees_with_accept_token_and_fork_is_independent(smollm2_compiler):
    compiled = smollm2_compiler.compile_grammar('root ::= "[" ([0-9]+ ("," [0-9]+)*)? "]"')
    matcher = GrammarMatcher(compiled)
    tok = hf_tokenizer("smollm2")
    for text in ["", "[", "[1", "[12,", "[12,3]"]:
        matcher.reset()
        assert matcher.accept_string(text)
        mask = matcher.get_next_token_mask()
        rng = np.random.default_rng(len(text))
        for t in list(rng.choice(len(mask), 300, replace=False)) + list(np.flatnonzero(mask)[:50]) + [tok.eos_token_id]:
            assert matcher.check_token(int(t)) == bool(mask[t])
        assert matcher.num_accepted_tokens == (1 if text else 0)
    matcher.reset()
    assert matcher.accept_string("[1")
    fork = matcher.fork()
    assert fork.accept_string(",2]") and fork.can_end() and not matcher.can_end()
    assert matcher.accept_string("]") and matcher.can_end()
    fork.rollback(1)
    assert not fork.can_end() and fork.check_token(tok.encode("]", add_special_tokens=False)[0])
    matcher.rollback(2)
    assert matcher.num_accepted_tokens == 0 and fork.num_accepted_tokens == 1


# -- the command line ---------------------------------------------------------------------------


def test_cli_awrs_and_smc(tmp_path, capsys):
    pytest.importorskip("transformers")
    from pushmask.cli import main

    tok = hf_tokenizer("smollm2")
    model_dir = tmp_path / "tiny"
    tiny_llama(5).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    base = ["generate", "--regex", "[01]{3}", "--model", str(model_dir), "--seed", "1", "Bits"]
    status = main(base + ["--aligned", "awrs", "--num-samples", "3"])
    out = capsys.readouterr().out.strip().splitlines()
    assert status == 0 and len(out) == 3
    for line in out:
        text, note = line.split("\t# ")
        assert len(text) == 3 and set(text) <= {"0", "1"} and note.startswith("log P ") and ", log w " in note
    status = main(base + ["--aligned", "smc", "--particles", "5", "--json-only"])
    out = capsys.readouterr().out.strip().splitlines()
    assert status == 0 and len(out) == 5 and all(len(t) == 3 and set(t) <= {"0", "1"} for t in out)
    status = main(base + ["--aligned", "smc", "--particles", "0"])
    assert status == 2
