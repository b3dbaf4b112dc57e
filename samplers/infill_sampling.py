"""Sampling under a grammar when the output is not written left to right: masked-diffusion models
(every position starts undecided; each step decides some, in any order) and fill-in-the-middle
for autoregressive models (prefix and suffix fixed, the middle written left to right).

Both loops decide one token at a time and keep the invariant that the partial output, read as a
template (masks/infill.py), can still be completed; so the loop never gets stuck and the finished
output is a string of the grammar.  A token is chosen as plain masked sampling would choose it:
candidates come in the order of sampling without replacement (Gumbel-top-k; by logit when
temperature is 0) and the first one that keeps the template completable is taken -- the same draw
as sampling from the masked distribution.  After `max_proposals` rejections the exact mask for
the position is computed (allowed_tokens) and the draw is finished inside it.

What a run of n still undecided positions may hold: n tokens, each of which may be the
end-of-sequence token that stands for no text.  Read exactly, a run is n copies of the token trie,
so a check costs about vocabulary size x positions.  Runs longer than `exact_runs` are read as n
bytes that are tokens by themselves (or nothing): fewer strings than the model could write, so the
invariant still holds -- a completion of that kind always exists, and a token for the next position
with it -- at the cost of one byte chain.  The loops first check a proposal with every run read
that cheap way, and only if that fails with the runs up to `exact_runs` read exactly; the set of
tokens accepted is exactly the set the second reading allows, so the draw is masked sampling under
it.  exact_runs=None reads every run exactly (exact, and slow on large vocabularies); 0 reads none
exactly (fast; a token that needs the undecided positions around it to hold long tokens is refused).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import ArgumentTypeError, InvalidArgumentError
from ..masks.compiler import CompiledGrammar
from ..masks.infill import MAX_ITEMS, Gap, Template, allowed_tokens, can_complete, refuse_value_checks
from ..masks.matcher import GrammarMatcher
from .asap import _as_numpy


@dataclass
class InfillResult:
    """A finished output.  data: the whole string of the grammar (prefix + generated + suffix);
    token_ids: the generated ids (diffusion: one per position, end-of-sequence tokens included;
    fill-in-the-middle: the middle, stop token excluded).  checks: completability checks run;
    rejected: proposals that failed them; masks: exact masks computed after max_proposals
    rejections; model_calls: forward passes."""

    data: bytes
    token_ids: list[int]
    checks: int = 0
    rejected: int = 0
    masks: int = 0
    model_calls: int = 0

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


class _Chooser:
    """Picks a token for one position: proposals in sampling order, each checked, then the exact
    mask if all of them fail.  Counts the work for InfillResult."""

    def __init__(self, compiled: CompiledGrammar, temperature: float, seed: int | None, max_proposals: int):
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise InvalidArgumentError(f"temperature must be a finite number >= 0, got {temperature!r}")
        if not isinstance(max_proposals, int) or max_proposals < 0:
            raise InvalidArgumentError(f"max_proposals must be an integer >= 0, got {max_proposals!r}")
        self.info = compiled.tokenizer_info
        self.temperature = float(temperature)
        self.rng = np.random.default_rng(seed)
        self.max_proposals = max_proposals
        self.checks = self.rejected = self.masks = 0

    def keys(self, logits: np.ndarray) -> np.ndarray:
        """Sampling keys over the vocabulary: the largest key of any subset is a draw from the
        model's distribution restricted to it."""
        keys = np.full(self.info.vocab_size, -np.inf)
        n = min(len(logits), len(keys))
        if self.temperature == 0:
            keys[:n] = logits[:n]
        else:
            keys[:n] = logits[:n] / self.temperature + self.rng.gumbel(size=n)
        return keys

    def choose(self, keys: np.ndarray, check: Callable[[int], bool], mask: Callable[[], np.ndarray]) -> int:
        k = min(self.max_proposals, len(keys))
        top = np.argpartition(-keys, k - 1)[:k] if k else np.zeros(0, dtype=np.int64)
        for t in top[np.argsort(-keys[top], kind="stable")]:
            if keys[t] == -np.inf:
                break
            self.checks += 1
            if check(int(t)):
                return int(t)
            self.rejected += 1
        self.masks += 1
        allowed = mask()
        if not allowed.any():
            raise RuntimeError("no token keeps the output completable; the template invariant was broken")
        masked = np.where(allowed, keys, -np.inf)
        best = int(np.argmax(masked))
        if masked[best] == -np.inf:  # the model gives every allowed token probability 0
            best = int(np.flatnonzero(allowed)[0])
        return best


def _single_byte_alphabet(compiled: CompiledGrammar) -> bytes | None:
    """The bytes that are tokens by themselves (None: there are none)."""
    trie = compiled.compiler.trie
    single = np.flatnonzero(np.diff(trie.tok_offsets) == 1)
    return bytes(sorted(set(trie.tok_bytes[trie.tok_offsets[single]].tolist()))) or None


class _Runs:
    """Gaps for runs of undecided positions: `exact` reads runs up to exact_runs exactly, `cheap`
    reads every run as single-byte tokens (only where the vocabulary has some: `alphabet`)."""

    def __init__(self, compiled: CompiledGrammar, exact_runs: int | None):
        if exact_runs is not None and (not isinstance(exact_runs, int) or exact_runs < 0):
            raise InvalidArgumentError(f"exact_runs must be None or an integer >= 0, got {exact_runs!r}")
        self.limit = exact_runs
        self.alphabet = _single_byte_alphabet(compiled)
        if self.alphabet is None and exact_runs is not None:
            raise InvalidArgumentError(
                "the vocabulary has no single-byte tokens; pass exact_runs=None (read every run exactly)"
            )

    def exact(self, n: int) -> Gap:
        if self.limit is None or n <= self.limit:
            return Gap.tokens(n)
        return Gap.bytes(n, alphabet=self.alphabet)

    def cheap(self, n: int) -> Gap:
        return Gap.bytes(n, alphabet=self.alphabet)


def _text(value: str | bytes, name: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise ArgumentTypeError(f"{name} must be str or bytes, got {type(value).__name__}")


_SLOT = -2  # the position whose first token a mask is for


def diffusion_generate(
    compiled: CompiledGrammar,
    model: Callable[[np.ndarray], Any],
    length: int,
    *,
    prefix: str | bytes = b"",
    suffix: str | bytes = b"",
    temperature: float = 0.0,
    seed: int | None = None,
    tokens_per_step: int = 1,
    exact_runs: int | None = 1,
    eos_token_id: int | None = None,
    max_proposals: int = 8,
    max_items: int = MAX_ITEMS,
) -> InfillResult:
    """Masked-diffusion sampling of `length` token positions between fixed `prefix` and `suffix`.

    Each step calls model(ids) -- ids an int64 array of `length` token ids, -1 where undecided --
    for logits of shape [length, vocab], and decides the `tokens_per_step` undecided positions the
    model is most confident about (largest probability of its top token), each to a token drawn as
    the module docstring says.  The end-of-sequence token (default: the tokenizer's first stop
    token) stands for no text, wherever it lands.
    """
    if not isinstance(length, int) or length < 1:
        raise InvalidArgumentError(f"length must be a positive integer, got {length!r}")
    if not isinstance(tokens_per_step, int) or tokens_per_step < 1:
        raise InvalidArgumentError(f"tokens_per_step must be a positive integer, got {tokens_per_step!r}")
    info = compiled.tokenizer_info
    if eos_token_id is None:
        if not info.stop_token_ids:
            raise InvalidArgumentError(
                "the tokenizer has no stop token; pass eos_token_id (the token that stands for no text)"
            )
        eos_token_id = info.stop_token_ids[0]
    if not 0 <= eos_token_id < info.vocab_size:
        raise InvalidArgumentError(f"eos_token_id {eos_token_id} is outside the vocabulary (size {info.vocab_size})")
    refuse_value_checks(compiled)
    prefix, suffix = _text(prefix, "prefix"), _text(suffix, "suffix")
    runs = _Runs(compiled, exact_runs)
    vocab = info.decoded_vocab
    chooser = _Chooser(compiled, temperature, seed, max_proposals)

    def template(ids: np.ndarray, gap_of: Callable[[int], Gap]) -> tuple[Template, int]:
        """The template of a partial output, and the index of its _SLOT part (-1: none)."""
        parts: list = [prefix]
        slot, run = -1, 0
        for value in ids.tolist():
            if value == -1:
                run += 1
                continue
            if run:
                parts.append(gap_of(run))
                run = 0
            if value == _SLOT:
                slot = len(parts)
                parts.append(Gap.tokens(1, min=1))
            else:
                parts.append(b"" if value == eos_token_id else vocab[value])
        if run:
            parts.append(gap_of(run))
        parts.append(suffix)
        return Template(parts), slot

    def completable(ids: np.ndarray) -> bool:
        """Completable with every run read cheaply, or else with short runs read exactly."""
        if runs.alphabet is not None and can_complete(compiled, template(ids, runs.cheap)[0], max_items=max_items):
            return True
        return runs.limit != 0 and can_complete(compiled, template(ids, runs.exact)[0], max_items=max_items)

    ids = np.full(length, -1, dtype=np.int64)
    if not completable(ids):
        raise InvalidArgumentError(
            f"no string of the grammar fits {length} positions between the prefix and the suffix"
        )
    model_calls = 0
    while (ids == -1).any():
        logits = _logits_2d(model(ids.copy()), length)
        model_calls += 1
        undecided = np.flatnonzero(ids == -1)
        confidence = _top_probability(logits[undecided], chooser.temperature)
        for pos in undecided[np.argsort(-confidence, kind="stable")][:tokens_per_step].tolist():

            def fits(t: int) -> bool:
                if t != eos_token_id and not vocab[t]:
                    return False  # special and padding ids stand for no text only as the end token
                trial = ids.copy()
                trial[pos] = t
                return completable(trial)

            def mask() -> np.ndarray:
                trial = ids.copy()
                trial[pos] = _SLOT
                tpl, slot = template(trial, runs.exact)
                allowed = allowed_tokens(compiled, tpl, slot, max_items=max_items)
                allowed[eos_token_id] = fits(eos_token_id)
                return allowed

            ids[pos] = chooser.choose(chooser.keys(logits[pos]), fits, mask)
    data = prefix + b"".join(b"" if t == eos_token_id else vocab[t] for t in ids.tolist()) + suffix
    return InfillResult(data, ids.tolist(), chooser.checks, chooser.rejected, chooser.masks, model_calls)


def fill_in_the_middle(
    compiled: CompiledGrammar,
    model: Callable[[list[int]], Any],
    prefix: str | bytes,
    suffix: str | bytes,
    *,
    max_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    exact_runs: int | None = 1,
    max_proposals: int = 8,
    max_items: int = MAX_ITEMS,
) -> InfillResult:
    """Autoregressive fill-in-the-middle: model(middle_ids) -> logits for the next middle token
    (the callable builds the model's FIM prompt around the ids).  At most `max_tokens` middle
    tokens, then a stop token (any of the tokenizer's) or the budget ends the middle; each token
    keeps prefix + middle + (a run of the tokens left) + suffix completable.  The prefix is parsed
    once; each check picks up from the matcher's stacks."""
    if not isinstance(max_tokens, int) or max_tokens < 0:
        raise InvalidArgumentError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    refuse_value_checks(compiled)
    prefix, suffix = _text(prefix, "prefix"), _text(suffix, "suffix")
    runs = _Runs(compiled, exact_runs)
    matcher = GrammarMatcher(compiled)
    if not matcher.accept_string(prefix):
        raise InvalidArgumentError("the prefix does not start any string of the grammar")

    def completable(left: int) -> bool:
        """The matcher's text, then at most `left` more tokens, then the suffix."""
        if runs.alphabet is not None and can_complete(
            matcher, Template([runs.cheap(left), suffix]), max_items=max_items
        ):
            return True
        return runs.limit != 0 and can_complete(matcher, Template([runs.exact(left), suffix]), max_items=max_items)

    if not completable(max_tokens):
        raise InvalidArgumentError(f"no middle of at most {max_tokens} tokens joins the prefix to the suffix")
    info = compiled.tokenizer_info
    stops = set(info.stop_token_ids)
    chooser = _Chooser(compiled, temperature, seed, max_proposals)
    middle: list[int] = []
    for step in range(max_tokens):
        left = max_tokens - step - 1  # tokens the middle may still take after this one

        def fits(t: int) -> bool:
            if t in stops:
                return completable(0)
            if not matcher.accept_token(t):
                return False
            ok = completable(left)
            matcher.rollback(1)
            return ok

        def mask() -> np.ndarray:
            slot = Template([Gap.tokens(1, min=1), runs.exact(left), suffix])
            allowed = allowed_tokens(matcher, slot, 0, max_items=max_items)
            allowed[list(stops)] = completable(0)
            return allowed

        t = chooser.choose(chooser.keys(_as_numpy(model(list(middle)))), fits, mask)
        if t in stops:
            break
        if not matcher.accept_token(t):
            raise RuntimeError(f"token {t} passed the check but the matcher refused it")
        middle.append(t)
    data = prefix + b"".join(info.decoded_vocab[t] for t in middle) + suffix
    calls = len(middle) + (1 if len(middle) < max_tokens else 0)
    return InfillResult(data, middle, chooser.checks, chooser.rejected, chooser.masks, calls)


def _logits_2d(logits: Any, length: int) -> np.ndarray:
    if hasattr(logits, "detach"):  # torch tensor
        logits = logits.detach().to("cpu").double().numpy()
    arr = np.asarray(logits, dtype=np.float64)
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 2 or arr.shape[0] != length:
        raise InvalidArgumentError(f"the model must return logits of shape [{length}, vocab], got {arr.shape}")
    if not (arr < np.inf).all():
        raise InvalidArgumentError("the model returned NaN or +inf logits")
    return arr


def _top_probability(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Per row, the softmax probability of the most likely token (temperature 0: of the logits);
    0 for a row that is -inf throughout."""
    scaled = logits / (temperature if temperature > 0 else 1.0)
    top = scaled.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        confidence = 1.0 / np.exp(scaled - top).sum(axis=1)
    return np.nan_to_num(confidence, nan=0.0)
