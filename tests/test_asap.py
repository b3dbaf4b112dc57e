"""Fidelity tests of grammar-aligned sampling (pushmask.samplers.asap) against an exact oracle.

The model is a deterministic toy LM over the real SmolLM2 vocabulary: logits are -inf except on a
few dozen tokens, and those come from a hash of the prefix, with knobs that put mass on the stop
token and on tokens outside the grammar.  That keeps depth-first enumeration (the oracle) cheap
while leaving GCD visibly distorted.  The toy problems and the oracle live in support.py (the
binary and parens fixtures in conftest.py); the oracle is written independently of the sampler:
it walks every grammatical token sequence with a GrammarMatcher and the toy LM.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support import (
    HashedToyLM,
    balanced,
    chi_square_p,
    empirical,
    hf_tokenizer,
    kl,
    single_token_ids,
    tiny_binary_llama,
)

from pushmask.samplers.asap import ASApSampler, aligned_generate, enumerate_distributions

PROBLEMS = ["binary", "parens"]


def _problem(request, name):
    return request.getfixturevalue(name)


# -- tests ------------------------------------------------------------------------------------


def test_oracle_sees_gcd_distortion(binary, parens):
    """The toy problems are meaningful: GCD's exact distribution is far from Q."""
    _, _, oracle = binary
    assert len(oracle.q) == 17
    assert kl(oracle.q, oracle.gcd) >= 0.3
    assert kl(oracle.gcd, oracle.q) >= 0.25
    _, _, poracle = parens
    tok = hf_tokenizer("smollm2")
    strings = {tok.decode(list(w)) for w in poracle.q}
    assert strings == {s for n in (1, 2, 3) for s in balanced(n)}
    assert len(poracle.q) >= 3 * len(strings)  # several tokenizations per string
    assert kl(poracle.q, poracle.gcd) >= 0.3


@pytest.mark.parametrize("name", PROBLEMS)
def test_enumerate_distributions_matches_oracle(request, name):
    lm, compiled, oracle = _problem(request, name)
    enum = enumerate_distributions(lm, None, compiled, [])
    assert set(enum.target) == set(oracle.q)
    for w, q in oracle.q.items():
        assert math.isclose(math.exp(enum.target[w]), q, rel_tol=1e-9)
        assert math.isclose(math.exp(enum.gcd[w]), oracle.gcd[w], rel_tol=1e-9)
    assert math.isclose(math.exp(enum.log_z), oracle.z, rel_tol=1e-9)


@pytest.mark.parametrize("name", PROBLEMS)
def test_asap_bounds_and_exact_when_explored(request, name):
    """After every sample c~ >= c and no c~ increased; once fully explored, c~ == c everywhere.

    ASAp (then GCD, on the same trie) visits most prefixes; the rare rest are expanded directly
    with `expand`, which updates c~ through the same code, before the final comparison.
    """
    lm, compiled, oracle = _problem(request, name)
    sampler = ASApSampler(lm, None, compiled, [], mode="asap", seed=7)
    previous: dict[tuple, float] = {}

    def check(step):
        nonlocal previous
        current = dict(sampler.iter_nodes())
        for prefix, log_c in current.items():
            c_tilde = math.exp(log_c)
            assert c_tilde >= oracle.c[prefix] - 1e-12, (step, prefix)
            before = previous.get(prefix, 0.0)  # unreached prefixes counted 1 before
            assert c_tilde <= math.exp(before) * (1 + 1e-12), (step, prefix)
        previous = current

    for k in range(2000):
        sample = sampler.sample(mode="asap" if k < 1000 else "gcd")
        assert sample.complete and tuple(sample.token_ids) in oracle.q
        check(k)
    assert sampler.num_nodes >= 0.75 * len(oracle.c)  # sampling did most of the exploring
    rest = [p for p in oracle.c if p not in previous]
    for j in np.random.default_rng(0).permutation(len(rest)):
        sampler.expand(rest[j])
        check(("expand", rest[j]))
    assert sampler.is_fully_explored()
    assert abs(sampler.upper_bound_z() - oracle.z) <= 1e-9
    for prefix, log_c in sampler.iter_nodes():
        assert abs(math.exp(log_c) - oracle.c[prefix]) <= 1e-9


def test_revisited_nodes_reuse_the_cached_distribution(binary):
    lm, compiled, oracle = binary
    lm.calls = 0
    sampler = ASApSampler(lm, None, compiled, [], mode="asap", seed=3)
    sampler.sample_many(300)
    expanded = sum(1 for _ in sampler.iter_nodes())
    assert lm.calls == sampler.forward_passes == expanded
    assert expanded <= len(oracle.c)  # one forward pass per distinct grammatical prefix at most


def test_first_asap_sample_is_gcd(binary):
    """With a fresh trie ASAp proposes exactly what GCD does."""
    lm, compiled, oracle = binary
    for seed in range(20):
        s = ASApSampler(lm, None, compiled, [], mode="asap", seed=seed).sample()
        assert math.isclose(math.exp(s.log_q), oracle.gcd[tuple(s.token_ids)], rel_tol=1e-9)
        assert math.isclose(math.exp(s.log_p), oracle.p[tuple(s.token_ids)], rel_tol=1e-9)


@pytest.mark.parametrize("name", PROBLEMS)
def test_asap_converges_and_gcd_does_not(request, name):
    lm, compiled, oracle = _problem(request, name)
    asap = ASApSampler(lm, None, compiled, [], mode="asap", seed=11).sample_many(4000)[1000:]
    assert kl(empirical(asap), oracle.q) <= 0.01
    assert chi_square_p(asap, oracle.q) >= 1e-3
    gcd = ASApSampler(lm, None, compiled, [], mode="gcd", seed=11).sample_many(4000)[1000:]
    assert kl(empirical(gcd), oracle.q) >= 0.2
    for s in asap[:50] + gcd[:50]:
        w = tuple(s.token_ids)
        assert math.isclose(math.exp(s.log_p), oracle.p[w], rel_tol=1e-9)
    for s in gcd[:50]:
        assert math.isclose(math.exp(s.log_q), oracle.gcd[tuple(s.token_ids)], rel_tol=1e-9)


@pytest.mark.parametrize("name", PROBLEMS)
def test_exact_mode_is_exact_from_the_first_sample(request, name):
    lm, compiled, oracle = _problem(request, name)
    sampler = ASApSampler(lm, None, compiled, [], mode="exact", seed=5)
    samples = sampler.sample_many(3000)
    assert kl(empirical(samples), oracle.q) <= 0.01
    assert chi_square_p(samples, oracle.q) >= 1e-3
    assert sampler.rejections > 0  # the toy LM leaves the grammar often; rejection had work to do
    # the first sample of many fresh samplers: exact from the very first draw
    firsts = [ASApSampler(lm, None, compiled, [], mode="exact", seed=1000 + i).sample() for i in range(300)]
    assert chi_square_p(firsts, oracle.q) >= 1e-3


def test_exact_log_q_is_the_attempt_proposal(binary):
    """log q of an accepted sample is P(w) / c~(root) as c~ stood when its attempt began."""
    lm, compiled, oracle = binary
    sampler = ASApSampler(lm, None, compiled, [], mode="exact", seed=2)
    checked = 0
    for _ in range(40):
        root_before = sampler.upper_bound_z()
        s = sampler.sample()
        # every proposal has q(w) = P(w) / c~(root at the start of its attempt), and Z <= c~ <= 1
        assert s.log_p - 1e-12 <= s.log_q <= s.log_p - math.log(oracle.z) + 1e-12
        if s.attempts == 1:
            assert math.isclose(s.log_q, s.log_p - math.log(root_before), rel_tol=1e-9)
            checked += 1
    assert checked >= 10


def test_importance_weights_estimate_z(binary):
    """GCD's proposal never changes, so the mean of P(w)/q(w) over its samples estimates Z."""
    lm, compiled, oracle = binary
    sampler = ASApSampler(lm, None, compiled, [], mode="gcd", seed=4)
    weights = [math.exp(s.log_weight) for s in sampler.sample_many(3000)]
    assert abs(np.mean(weights) - oracle.z) <= 4 * np.std(weights) / math.sqrt(len(weights))


def test_max_new_tokens_cuts_off_and_counts_zero(binary):
    lm, compiled, oracle = binary
    # the strings need 5 tokens plus the stop token; 5 leaves no room for it
    asap = ASApSampler(lm, None, compiled, [], mode="asap", max_new_tokens=5, seed=0)
    samples = []
    with pytest.raises(ValueError, match="max_new_tokens=5"):
        for _ in range(100):  # ASAp learns that every branch is cut off, then says so
            samples.append(asap.sample())
    assert 1 <= len(samples) <= 17
    assert all(not s.complete and len(s.token_ids) == 5 and s.stop_token_id is None for s in samples)
    assert asap.upper_bound_z() == 0.0
    gcd = ASApSampler(lm, None, compiled, [], mode="gcd", max_new_tokens=5, seed=0).sample_many(50)
    assert all(not s.complete and len(s.token_ids) == 5 for s in gcd)  # GCD ignores what the trie knows
    with pytest.raises(ValueError, match="max_new_tokens"):
        ASApSampler(lm, None, compiled, [], mode="exact", max_new_tokens=5, seed=0).sample_many(1)
    ok = ASApSampler(lm, None, compiled, [], mode="exact", max_new_tokens=6, seed=0).sample()
    assert ok.complete and len(ok.token_ids) == 5


def test_modes_share_one_trie(binary):
    """The trie ASAp built serves exact mode too (its c~ is exactly what is not known dead)."""
    lm, compiled, oracle = binary
    sampler = ASApSampler(lm, None, compiled, [], mode="asap", seed=9)
    sampler.sample_many(100)
    calls = sampler.forward_passes
    samples = sampler.sample_many(2500, mode="exact")
    assert chi_square_p(samples, oracle.q) >= 1e-3
    assert sampler.forward_passes - calls <= len(oracle.c) - calls


def test_aligned_generate_and_text(binary):
    lm, compiled, oracle = binary
    samples = aligned_generate(lm, None, compiled, [], mode="asap", num_samples=5, seed=1)
    assert len(samples) == 5
    for s in samples:
        assert s.complete and s.stop_token_id is not None
        assert s.text in {"00000"} | {"1" + format(i, "04b") for i in range(16)}
        assert s.text == "".join(hf_tokenizer("smollm2").decode([t]) for t in s.token_ids)


def test_torch_logits_and_string_prompt(binary):
    torch = pytest.importorskip("torch")
    lm, compiled, oracle = binary
    tok = hf_tokenizer("smollm2")
    prompt = "Bits:"
    prompt_ids = tok.encode(prompt)

    def torch_lm(ids):  # the same toy LM, reading the prompt off the front, returning a tensor
        assert ids[: len(prompt_ids)] == prompt_ids
        return torch.from_numpy(lm(ids[len(prompt_ids) :]))

    a = ASApSampler(torch_lm, tok, compiled, prompt, seed=3).sample_many(20)
    b = ASApSampler(lm, None, compiled, [], seed=3).sample_many(20)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.log_q for s in a] == pytest.approx([s.log_q for s in b], rel=1e-12)


def test_temperature_scales_the_distribution(binary):
    lm, compiled, _ = binary
    hot = enumerate_distributions(lambda ids: lm(ids) * 0.5, None, compiled, [])
    via_t = enumerate_distributions(lm, None, compiled, [], temperature=2.0)
    for w, v in hot.target.items():
        assert math.isclose(v, via_t.target[w], rel_tol=1e-9)
    s = ASApSampler(lm, None, compiled, [], temperature=2.0, seed=0).sample()
    assert math.isclose(s.log_p, via_t.log_p[tuple(s.token_ids)], rel_tol=1e-9)


def test_bad_arguments(binary):
    lm, compiled, _ = binary
    with pytest.raises(ValueError, match="mode"):
        ASApSampler(lm, None, compiled, [], mode="greedy")
    with pytest.raises(ValueError, match="temperature"):
        ASApSampler(lm, None, compiled, [], temperature=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        ASApSampler(lm, None, compiled, [], max_new_tokens=0)
    with pytest.raises(ValueError, match="tokenizer"):
        ASApSampler(lm, None, compiled, "a prompt")
    with pytest.raises(TypeError, match="CompiledGrammar"):
        ASApSampler(lm, None, "root ::= 'a'", [])
    with pytest.raises(ValueError, match="1-D logits"):
        ASApSampler(lambda ids: np.zeros((2, 3)), None, compiled, []).sample()
    with pytest.raises(ValueError, match="NaN"):
        ASApSampler(lambda ids: np.full(49152, np.nan), None, compiled, []).sample()


def test_transformers_model_with_key_value_cache(binary):
    """A (tiny, random) transformers causal LM: the sampler reuses its key/value cache across
    expansions, and the log-probabilities it reports match full forward passes."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    _, compiled, _ = binary
    model = tiny_binary_llama()
    prompt = [1, 5, 7]

    def full_forward(ids):
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0, -1]

    def log_p(ids, stop):  # log P(ids, stop | prompt) by full forward passes
        total = 0.0
        for k, t in enumerate(list(ids) + [stop]):
            total += float(torch.log_softmax(full_forward(prompt + list(ids[:k])).double(), -1)[t])
        return total

    sampler = ASApSampler(model, None, compiled, prompt, mode="asap", seed=0)
    samples = sampler.sample_many(60)
    assert sampler._logits_fn.incremental, "the key/value cache path fell back to full forward passes"
    assert sampler.forward_passes > 10  # the walk moved around the trie, cropping the cache
    for s in samples[:20]:
        assert s.complete
        assert math.isclose(s.log_p, log_p(s.token_ids, s.stop_token_id), rel_tol=1e-5, abs_tol=1e-5)
    with pytest.raises(ValueError, match="at least one input token"):
        ASApSampler(model, None, compiled, [])


def test_model_that_never_enters_the_grammar(binary):
    """A model giving the grammar's tokens probability 0: GCD/ASAp report an incomplete sample,
    exact mode proves there is nothing to accept and says so."""
    _, compiled, _ = binary
    tok = hf_tokenizer("smollm2")
    junk = HashedToyLM(
        compiled.tokenizer_info.vocab_size, {t: 0.0 for t in single_token_ids(tok, "2", "a")} | {tok.eos_token_id: 0.0}
    )
    for mode in ("gcd", "asap"):
        s = ASApSampler(junk, None, compiled, [], mode=mode, seed=0).sample()
        assert not s.complete and s.token_ids == [] and s.text == ""
    with pytest.raises(ValueError, match="cannot produce any string"):
        ASApSampler(junk, None, compiled, [], mode="exact", seed=0).sample()


def test_exact_mode_gives_up_after_max_attempts(binary):
    lm, compiled, oracle = binary
    outcomes = []
    for seed in range(10):  # the first attempt succeeds with probability Z < 1%
        try:
            ASApSampler(lm, None, compiled, [], mode="exact", seed=seed, max_attempts=1).sample()
            outcomes.append("accepted")
        except RuntimeError as err:
            assert "max_attempts" in str(err)
            outcomes.append("gave up")
    assert outcomes.count("gave up") >= 8
