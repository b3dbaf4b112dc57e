"""Fidelity tests of grammar-aligned sampling (pushmask.samplers.asap) against an exact oracle.

The model is a deterministic toy LM over the real SmolLM2 vocabulary: logits are -inf except on a
few dozen tokens, and those come from a hash of the prefix, with knobs that put mass on the stop
token and on tokens outside the grammar.  That keeps depth-first enumeration (the oracle) cheap
while leaving GCD visibly distorted.  The oracle below is written independently of the sampler:
it walks every grammatical token sequence with a GrammarMatcher and the toy LM.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter

import numpy as np
import pytest

from pushmask.grammar.ir import Grammar, alt, lit, ref, rep, seq
from pushmask.samplers.asap import ASApSampler, Sample, aligned_generate, enumerate_distributions
from pushmask.masks.matcher import GrammarMatcher

from support import hf_tokenizer

# -- the toy model ----------------------------------------------------------------------------


class HashedToyLM:
    """logits(prefix) = bias[t] + scale * N(0, 1), seeded by a hash of the prefix, on `support`;
    -inf elsewhere.  Deterministic across runs and platforms; counts its calls."""

    def __init__(self, vocab_size: int, biases: dict[int, float], *, scale: float = 1.5, salt: bytes = b""):
        self.vocab_size = vocab_size
        self.support = np.array(sorted(biases), dtype=np.int64)
        self.bias = np.array([biases[t] for t in self.support], dtype=np.float64)
        self.scale = scale
        self.salt = salt
        self.calls = 0

    def __call__(self, token_ids: list[int]) -> np.ndarray:
        self.calls += 1
        digest = hashlib.blake2b(np.asarray(token_ids, dtype=np.int64).tobytes(), key=self.salt, digest_size=8).digest()
        noise = np.random.default_rng(int.from_bytes(digest, "little")).standard_normal(len(self.support))
        logits = np.full(self.vocab_size, -np.inf)
        logits[self.support] = self.bias + self.scale * noise
        return logits


def _ids(tok, *texts: str) -> list[int]:
    out = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == 1, f"{text!r} is not one SmolLM2 token"
        out.append(ids[0])
    return out


def binary_problem(compiler):
    """{00000} U {1 followed by 4 bits}; the LM also gives mass to '2', 'a' and the stop token
    everywhere, so forced zeros lose more mass than free bits and GCD over-weights 00000."""
    tok = hf_tokenizer("smollm2")
    bit = alt(lit("0"), lit("1"))
    grammar = Grammar({"root": alt(lit("00000"), seq(lit("1"), ref("bits"))), "bits": rep(bit, 4, 4)})
    compiled = compiler.compile_ir(grammar, normalize=False)
    zero, one = _ids(tok, "0", "1")
    biases = {zero: 1.0, one: 1.0, tok.eos_token_id: 0.0}
    biases.update({t: -0.5 for t in _ids(tok, "2", "a")})
    lm = HashedToyLM(compiler.tokenizer_info.vocab_size, biases, scale=0.8, salt=b"binary")
    return lm, compiled


def balanced(n: int) -> list[str]:
    """Balanced parenthesis strings with n pairs."""
    if n == 0:
        return [""]
    return sorted({"(" + a + ")" + b for k in range(n) for a in balanced(k) for b in balanced(n - 1 - k)})


def paren_problem(compiler):
    """Balanced parentheses of length 2..6, with several tokenizations per string."""
    tok = hf_tokenizer("smollm2")
    strings = [s for n in (1, 2, 3) for s in balanced(n)]
    compiled = compiler.compile_ir(Grammar({"root": alt(*(lit(s) for s in strings))}), normalize=False)
    biases = {t: 0.5 for t in _ids(tok, "(", ")", "()")}
    biases[tok.eos_token_id] = 0.0
    biases.update({t: -0.5 for t in _ids(tok, "x", " ", "[", "]")})
    lm = HashedToyLM(compiler.tokenizer_info.vocab_size, biases, scale=1.5, salt=b"parens")
    return lm, compiled


# -- the oracle -------------------------------------------------------------------------------


def _log_softmax(x):
    top = np.max(x)
    return x - top - np.log(np.sum(np.exp(x - top)))


class Oracle:
    """Every grammatical sequence's P(w) (stop included), c(u) for every grammatical prefix, Z,
    and the exact distributions Q and Q_GCD, by depth-first search with a matcher."""

    def __init__(self, lm, compiled):
        matcher = GrammarMatcher(compiled)
        stops = set(matcher.stop_token_ids)
        self.p: dict[tuple, float] = {}
        self.gcd: dict[tuple, float] = {}
        self.c: dict[tuple, float] = {}

        def visit(prefix: tuple, p: float, g: float) -> float:
            probs = np.exp(_log_softmax(lm(list(prefix))))
            allowed = np.flatnonzero(matcher.get_next_token_mask())
            allowed = [int(t) for t in allowed if probs[t] > 0]
            mass = sum(probs[t] for t in allowed)
            c = 0.0
            for t in allowed:
                if t in stops:
                    self.p[prefix] = self.p.get(prefix, 0.0) + p * probs[t]
                    self.gcd[prefix] = self.gcd.get(prefix, 0.0) + g * probs[t] / mass
                    c += probs[t]
                else:
                    assert matcher.accept_token(t)
                    c += probs[t] * visit(prefix + (t,), p * probs[t], g * probs[t] / mass)
                    matcher.rollback(1)
            self.c[prefix] = c
            return c

        self.z = visit((), 1.0, 1.0)
        self.q = {w: p / self.z for w, p in self.p.items()}
        assert math.isclose(sum(self.gcd.values()), 1.0, rel_tol=1e-9)


def kl(p: dict, q: dict) -> float:
    """KL(p || q) in nats; p's support must lie inside q's."""
    return sum(pv * math.log(pv / q[w]) for w, pv in p.items() if pv > 0)


def empirical(samples: list[Sample]) -> dict:
    counts = Counter(tuple(s.token_ids) for s in samples)
    n = len(samples)
    return {w: k / n for w, k in counts.items()}


def chi_square_p(samples: list[Sample], q: dict) -> float:
    """Pearson chi-square goodness of fit, outcomes with expected count < 5 pooled into one bin."""
    from scipy.stats import chisquare

    n = len(samples)
    counts = Counter(tuple(s.token_ids) for s in samples)
    assert set(counts) <= set(q), "a sample outside the grammar's support"
    observed, expected = [], []
    pooled_o = pooled_e = 0.0
    for w, qw in q.items():
        if n * qw >= 5:
            observed.append(counts.get(w, 0))
            expected.append(n * qw)
        else:
            pooled_o += counts.get(w, 0)
            pooled_e += n * qw
    if pooled_e > 0:
        observed.append(pooled_o)
        expected.append(pooled_e)
    return float(chisquare(observed, expected).pvalue)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def binary(smollm2_compiler):
    lm, compiled = binary_problem(smollm2_compiler)
    return lm, compiled, Oracle(lm, compiled)


@pytest.fixture(scope="module")
def parens(smollm2_compiler):
    lm, compiled = paren_problem(smollm2_compiler)
    return lm, compiled, Oracle(lm, compiled)


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
        return torch.from_numpy(lm(ids[len(prompt_ids):]))

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


def tiny_binary_llama():
    """A tiny random-weight Llama over 320 ids that likes the binary problem's tokens ("0", "1"
    and the stop token), so samples come back quickly."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight[[2, 32, 33]] *= 8
    return model


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
    junk = HashedToyLM(compiled.tokenizer_info.vocab_size, {t: 0.0 for t in _ids(tok, "2", "a")} | {tok.eos_token_id: 0.0})
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
