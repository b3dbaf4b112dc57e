"""Sequential Monte Carlo over token sequences with AWRS proposals.

Target: Q(w) = P(w) * 1[w in L(G)] / Z, as in `pushmask.samplers.asap`, with outputs limited to
max_new_tokens tokens (the stop token included).  N particles grow one token per step in
lockstep.  Each step draws every live particle's next token with `awrs_step` (the same step the
``awrs`` mode of ASApSampler takes): the token follows P restricted to the grammar, and the
particle's weight is multiplied by an unbiased estimate of the allowed mass, which is exactly the
factor that turns locally constrained decoding into Q (its importance weight is the product of
the allowed masses along the way).  When the effective sample size falls below
ess_threshold * N the particles are resampled (systematic resampling), so the budget moves to
prefixes the grammar leaves room for.  The average weight, times the averages at each
resampling, is an unbiased estimate of Z (the log marginal likelihood is its log); the weighted
particles approximate Q and converge to it as N grows.

The next-token distributions of a step come from one batched forward pass with a transformers
model: each distinct particle prefix is one row, and the key/value cache follows the particles
(rows gathered by ancestor after each step and resampling), so a step runs the model on one
new token per row.  With a plain callable f(token_ids) -> logits, each distinct prefix is one
call.  Particles that share a prefix (after resampling) share the row and the grammar verdicts.
In the last token slot only a stop token is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import ArgumentTypeError, InvalidArgumentError
from ..masks.compiler import CompiledGrammar
from ..masks.matcher import GrammarMatcher
from .asap import (
    AWRS_MAX_CHECKS,
    _as_numpy,
    _check_max_checks,
    _is_torch_module,
    _logsumexp,
    _prompt_ids,
    awrs_step,
    candidate_log_probs,
    candidate_tokens,
)
from .kv_cache import kv_cache_name


@dataclass
class Particle:
    """One particle at the end.  log_weight: its unnormalised log importance weight, scaled so
    that the mean of the weights over the particles is the estimate of Z.  log_p: log P(w) with
    the stop token.  complete: ended with a stop token the grammar allowed (else its weight is 0:
    no allowed token had probability > 0, or it ran out of tokens)."""

    token_ids: list[int]
    text: str
    log_weight: float
    log_p: float
    complete: bool
    stop_token_id: int | None


@dataclass
class SMCResult:
    """Particles with weights, and the estimate of log Z = log P(the model's output is in the
    grammar, within max_new_tokens).  Counters: steps (token slots run), model_calls (next-token
    distributions computed: one per distinct prefix per step), forward_passes (model invocations),
    tokens_sampled (AWRS steps), grammar_checks and mask_fallbacks (over all AWRS steps)."""

    particles: list[Particle]
    log_marginal_likelihood: float
    num_resamples: int
    ess: list[float]
    steps: int
    model_calls: int
    forward_passes: int
    tokens_sampled: int
    grammar_checks: int
    mask_fallbacks: int

    def weights(self) -> np.ndarray:
        """Normalised weights of the particles (all 0 when every particle died)."""
        log_w = np.array([p.log_weight for p in self.particles])
        top = np.max(log_w)
        if top == -math.inf:
            return np.zeros(len(log_w))
        w = np.exp(log_w - top)
        return w / w.sum()

    def distribution(self) -> dict[tuple[int, ...], float]:
        """The weighted particles as a distribution over outputs (token ids, stop excluded)."""
        out: dict[tuple[int, ...], float] = {}
        for particle, w in zip(self.particles, self.weights()):
            if w > 0:
                key = tuple(particle.token_ids)
                out[key] = out.get(key, 0.0) + float(w)
        return out

    def sample(self, rng: np.random.Generator | None = None) -> Particle:
        """One particle drawn in proportion to its weight."""
        weights = self.weights()
        if not weights.any():
            raise ValueError("every particle died: the model gives the grammar's strings probability 0 here")
        rng = rng or np.random.default_rng()
        return self.particles[int(rng.choice(len(weights), p=weights))]


class _Walker:
    """A particle while it runs: its tokens, its matcher, its log weight and log P."""

    __slots__ = ("tokens", "matcher", "log_w", "log_p", "done", "stop", "prefix")

    def __init__(self, matcher: GrammarMatcher):
        self.tokens: list[int] = []
        self.matcher = matcher
        self.log_w = 0.0
        self.log_p = 0.0
        self.done = False
        self.stop: int | None = None
        self.prefix = 0  # id of its token prefix: equal prefixes, equal ids

    def copy(self, fork: bool) -> _Walker:
        other = _Walker(self.matcher.fork() if fork else self.matcher)
        other.tokens = list(self.tokens)
        other.log_p, other.done, other.stop, other.prefix = self.log_p, self.done, self.stop, self.prefix
        return other


def smc(
    model: Any,
    tokenizer: Any,
    compiled_grammar: CompiledGrammar,
    prompt: str | Sequence[int],
    *,
    num_particles: int = 8,
    ess_threshold: float = 0.5,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    seed: int | None = None,
    max_checks: int = AWRS_MAX_CHECKS,
) -> SMCResult:
    """SMC with `num_particles` particles and AWRS proposals (see the module docstring).

    model: a transformers causal LM (batched over particles, key/value cache reused) or any
    callable f(token_ids) -> next-token logits (token_ids include the prompt).  prompt: a string
    (tokenized with `tokenizer`) or token ids.  ess_threshold: resample when the effective sample
    size falls below this fraction of num_particles (0: never, 1: every step).  max_checks:
    grammar checks per AWRS step before the full mask is computed.
    """
    if not isinstance(num_particles, int) or num_particles < 1:
        raise InvalidArgumentError(f"num_particles must be a positive integer, got {num_particles!r}")
    if not 0.0 <= ess_threshold <= 1.0:
        raise InvalidArgumentError(f"ess_threshold must be between 0 and 1, got {ess_threshold!r}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise InvalidArgumentError(f"temperature must be a positive number, got {temperature!r}")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise InvalidArgumentError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    _check_max_checks(max_checks)
    if not isinstance(compiled_grammar, CompiledGrammar):
        raise ArgumentTypeError(f"compiled_grammar must be a CompiledGrammar, got {type(compiled_grammar).__name__}")
    info = compiled_grammar.tokenizer_info
    rng = np.random.default_rng(seed)
    first = GrammarMatcher(compiled_grammar)
    stops = frozenset(first.stop_token_ids)
    candidates = candidate_tokens(info, first.stop_token_ids)
    stop_only = np.zeros(info.vocab_size, dtype=bool)  # the last slot: only a stop token may come
    stop_only[list(stops)] = True
    source = _particle_logits(model, _prompt_ids(prompt, tokenizer))
    walkers = [_Walker(first if i == 0 else first.fork()) for i in range(num_particles)]
    prefixes = _PrefixTable()
    log_z = 0.0  # log of the product of the mean weights at the resamplings so far
    ess_history: list[float] = []
    resamples = sampled = checks = fallbacks = steps = 0

    for slot in range(max_new_tokens):
        live = [w for w in walkers if not w.done]
        if not live:
            break
        steps += 1
        groups: dict[int, list[_Walker]] = {}
        for walker in live:
            groups.setdefault(walker.prefix, []).append(walker)
        rows = source([(p, prefixes.parent[p], prefixes.token[p], members[0].tokens) for p, members in groups.items()])
        allowed_here = stop_only if slot == max_new_tokens - 1 else candidates
        for row, members in zip(rows, groups.values()):
            ids, logp = candidate_log_probs(row, temperature, allowed_here)
            masses, cum = np.exp(logp), None  # shared by the particles of this prefix, as are the verdicts
            verdicts: dict[int, bool] = {}
            if len(members) > 1:
                cum = np.cumsum(masses)
            for walker in members:
                step = _awrs_for(walker.matcher, ids, masses, cum, verdicts, rng, max_checks)
                sampled += 1
                checks += step.checks
                fallbacks += step.fell_back
                if step.token is None:  # no allowed token has probability > 0: the particle dies
                    walker.log_w, walker.done = -math.inf, True
                    continue
                token = int(ids[step.token])
                walker.log_w += step.log_weight
                walker.log_p += float(logp[step.token])
                if token in stops:
                    walker.done, walker.stop = True, token
                else:
                    if not walker.matcher.accept_token(token):
                        raise RuntimeError(f"internal error: token {token} passed its check but was not accepted")
                    walker.tokens.append(token)
                    walker.prefix = prefixes.child(walker.prefix, token)
        log_w = np.array([w.log_w for w in walkers])
        if np.max(log_w) == -math.inf:
            break  # every particle died
        ess = _effective_sample_size(log_w)
        ess_history.append(ess)
        if ess < ess_threshold * num_particles and not all(w.done for w in walkers):
            log_z += _logsumexp(log_w) - math.log(num_particles)
            walkers = _resample(walkers, log_w, rng)
            resamples += 1
    for walker in walkers:
        if not walker.done or walker.stop is None:  # ran out of tokens, or died
            walker.log_w = -math.inf
    log_w = np.array([w.log_w for w in walkers])
    log_ml = log_z + _logsumexp(log_w) - math.log(num_particles)
    particles = [
        Particle(
            list(w.tokens),
            info.decode_tokens(w.tokens).decode("utf-8", errors="replace"),
            log_z + w.log_w,
            w.log_p,
            w.stop is not None and w.log_w > -math.inf,
            w.stop,
        )
        for w in walkers
    ]
    return SMCResult(
        particles, log_ml, resamples, ess_history, steps, source.calls, source.passes, sampled, checks, fallbacks
    )


def _awrs_for(matcher: GrammarMatcher, ids, masses, cum, verdicts, rng, max_checks):
    """One AWRS step for a particle, checking with its matcher (positions index `ids`)."""

    def full_mask() -> np.ndarray:
        return matcher.get_next_token_mask()[ids]

    return awrs_step(
        masses,
        lambda i: matcher.check_token(int(ids[i])),
        full_mask,
        rng,
        max_checks=max_checks,
        verdicts=verdicts,
        cum=cum,
    )


def _effective_sample_size(log_w: np.ndarray) -> float:
    top = np.max(log_w)
    w = np.exp(log_w - top)
    return float(w.sum() ** 2 / np.sum(w * w))


def _resample(walkers: list[_Walker], log_w: np.ndarray, rng: np.random.Generator) -> list[_Walker]:
    """Systematic resampling: each particle gets N * (its normalised weight) copies in
    expectation, and every copy the mean weight (log weight 0 after the caller took the mean)."""
    n = len(walkers)
    w = np.exp(log_w - np.max(log_w))
    cum = np.cumsum(w / w.sum())
    ancestors = np.minimum(np.searchsorted(cum, (rng.random() + np.arange(n)) / n, side="right"), n - 1)
    out = []
    used: set[int] = set()
    for a in ancestors.tolist():
        # the first copy keeps the ancestor's matcher; later copies fork it
        out.append(walkers[a].copy(fork=a in used))
        used.add(a)
    return out


class _PrefixTable:
    """Interned token prefixes: id 0 is the empty prefix; child(p, t) is the id of p + [t]."""

    def __init__(self):
        self.parent: list[int] = [-1]
        self.token: list[int] = [-1]
        self._ids: dict[tuple[int, int], int] = {}

    def child(self, prefix: int, token: int) -> int:
        key = (prefix, token)
        got = self._ids.get(key)
        if got is None:
            got = self._ids[key] = len(self.parent)
            self.parent.append(prefix)
            self.token.append(token)
        return got


def _particle_logits(model: Any, prompt_ids: list[int]):
    """The next-token logits of a step's distinct prefixes: a callable taking
    [(prefix id, parent prefix id, last token, tokens)] (parent -1 for the empty prefix) and
    returning one row per entry, from a transformers model (batched, cached) or a plain callable."""
    if _is_torch_module(model):
        if not prompt_ids:
            raise InvalidArgumentError(
                "a transformers model needs at least one input token; give a prompt (e.g. the BOS token id)"
            )
        return _BatchedHFLogits(model, prompt_ids)
    if not callable(model):
        raise ArgumentTypeError(f"model must be a transformers causal LM or a callable, got {type(model).__name__}")
    return _CallableLogits(model, prompt_ids)


class _CallableLogits:
    def __init__(self, fn, prompt_ids: list[int]):
        self.fn = fn
        self.prompt_ids = prompt_ids
        self.calls = self.passes = 0

    def __call__(self, entries) -> list[np.ndarray]:
        self.calls += len(entries)
        self.passes += len(entries)
        return [_as_numpy(self.fn(self.prompt_ids + tokens)) for _, _, _, tokens in entries]


class _BatchedHFLogits:
    """One forward pass per step over the step's distinct prefixes (all of one length, so no
    padding).  The key/value cache holds one row per prefix of the previous step; before a pass
    its rows are gathered by parent (rows repeat when particles were resampled), so the pass
    runs one new token per row.  Falls back to full forward passes for a cache that cannot be
    gathered."""

    def __init__(self, model: Any, prompt_ids: list[int]):
        import torch

        self.model = model
        self.prompt_ids = prompt_ids
        self.device = next(model.parameters()).device
        self.torch = torch
        self.cache: Any = None  # the model's key/value cache (a transformers Cache) from its last output
        self.rows: dict[int, int] = {}  # prefix id -> its cache row (the previous step's prefixes)
        self.incremental = True
        self.calls = self.passes = 0

    def __call__(self, entries) -> np.ndarray:
        torch = self.torch
        self.calls += len(entries)
        self.passes += 1
        with torch.no_grad():
            if self.incremental:
                try:
                    return self._incremental(entries)
                except (AttributeError, TypeError, ValueError, NotImplementedError, RuntimeError):
                    self.incremental = False  # an unusual cache: full forward passes from now on
                    self.cache = None
            ids = torch.tensor(
                [self.prompt_ids + tokens for _, _, _, tokens in entries], dtype=torch.long, device=self.device
            )
            logits = self.model(input_ids=ids).logits[:, -1]
        return logits.double().cpu().numpy()

    def _incremental(self, entries) -> np.ndarray:
        torch = self.torch
        if entries[0][1] == -1:  # the first step: the prompt itself
            out = self.model(
                input_ids=torch.tensor([self.prompt_ids], dtype=torch.long, device=self.device), use_cache=True
            )
        else:
            parents = [self.rows[parent] for _, parent, _, _ in entries]
            if parents != list(range(len(self.rows))):
                self.cache.reorder_cache(torch.tensor(parents, dtype=torch.long, device=self.device))
            new = torch.tensor([[token] for _, _, token, _ in entries], dtype=torch.long, device=self.device)
            out = self.model(input_ids=new, use_cache=True, **{kv_cache_name(): self.cache})
        self.cache = getattr(out, kv_cache_name())
        self.rows = {prefix: i for i, (prefix, _, _, _) in enumerate(entries)}
        return out.logits[:, -1].double().cpu().numpy()
