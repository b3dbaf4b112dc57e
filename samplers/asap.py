"""Grammar-aligned sampling: one trie over sampled token prefixes, four ways to walk it.

The target is Q(w) = P(w) * 1[w in L(G)] / Z over token sequences w (the stop token's
probability included in P(w)).  With c(u) = probability that the model, continuing freely from
prefix u, stops inside L(G), the exact next-token rule is Q(t | u) = P(t | u) * c(ut) / c(u).

Every node of the trie is a prefix u the sampler has reached.  Reaching it costs one model call;
once its grammar mask is known ("expanded") the node keeps log P(. | u) (softmax over the model's
full vocabulary at the given temperature, no top-k/top-p warping) restricted to the tokens the
grammar allows there (the masked mass, 1 - A(u), is all the algorithm needs of the rest; so a
node costs about 12 bytes per allowed token, 20 once a child's c~ changed), and c~(u), an
over-approximation of c(u):

    c~(u) = sum over allowed t of P(t | u) * c~(ut),   unexpanded children count 1,
            masked tokens count 0, a stop token counts 1, a prefix at max_new_tokens counts 0.

Stored as c~(u) = A(u) - D(u), with A(u) the allowed mass and D(u) the "deficit" sum over
expanded children of P(t | u) * (1 - c~(ut)), all in log space, so that when a new node is
expanded the update runs bottom-up along one path in O(depth) (when A - D cancels badly the node
falls back to an exact log-sum-exp over its children, see `_propagate`).  c~ only ever decreases
and stays >= c; on a fully explored subtree it equals c.

Modes (the same trie, the same bookkeeping; only the proposal at a node differs):

- ``gcd``:   plain grammar-constrained decoding, t ~ P(t | u) * 1[t allowed].
- ``asap``:  ASAp (Park et al., NeurIPS 2024, "Grammar-Aligned Decoding"),
             t ~ P(t | u) * c~(ut); the first sample is distributed as GCD, later ones tend to Q.
- ``exact``: rejection sampling on the trie (CARS-style).  At nodes expanded before the current
             attempt t ~ P(t | u) * c~(ut); at nodes expanded during it, t ~ P(t | u) over the full
             vocabulary, kept with probability c~(ut) (a masked token rejects the whole attempt, as
             does running out of tokens).  The proposal of every attempt is P restricted to what is
             not yet known to be dead, so accepted samples are distributed exactly as Q; each
             rejection makes the next attempt likelier to succeed.
- ``awrs``:  adaptive weighted rejection sampling (Lipkin et al., COLM 2025, "Fast Controlled
             Generation from Language Models with Adaptive Weighted Rejection Sampling"): the same
             proposal as ``gcd``, but at a node whose mask is not known the token is found by
             drawing from P(. | u) and checking only the drawn tokens against the grammar
             (`awrs_step`), which also gives an unbiased estimate of A(u) as the step's weight.
             Such a node keeps the model's distribution over the tokens a grammar could allow
             (12 bytes per token with P > 0; 16 more, for the cumulative sums, from the second
             visit on) and the grammar's verdicts on the tokens checked there, and counts c~ = 1
             until another mode needs its mask (or the check budget runs out and the mask is
             computed), which turns it into an expanded node at no extra model call.

Every sample reports log P(w) and its proposal log q(w), for importance weighting (``awrs``
reports log P(w) - log W(w), W the product of its step weights, whose mean is P(w) / q(w)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import ArgumentTypeError, InvalidArgumentError, LimitExceededError
from ..masks.compiler import CompiledGrammar
from ..masks.matcher import GrammarMatcher
from .kv_cache import kv_cache_name

if TYPE_CHECKING:
    from transformers import DynamicCache

MODES = ("gcd", "asap", "exact", "awrs")

# When c~(u) = A(u) - D(u) falls below this fraction of A(u), the subtraction has lost that many
# digits, so the node recomputes c~(u) exactly from its children instead.
_CANCELLATION_GUARD = 1e-4

_UNEXPANDED = np.empty(0)  # a node's arrays until its mask is known

AWRS_MAX_CHECKS = 32
"""Grammar checks one AWRS step may make before it computes the full mask instead: 32 checks cost
about what the mask and finishing the step over the whole vocabulary cost."""


@dataclass
class Sample:
    """One generated sequence.

    token_ids: generated ids, stop token excluded.  text: their bytes decoded as UTF-8.
    log_p: log P(w) under the model at the sampler's temperature, including the probability of
    the stop token that ended it (`stop_token_id`) when complete.  log_q: log-probability that the
    sampler's proposal produced exactly this sequence (for ``exact``, the proposal of the accepted
    attempt; for ``awrs``, log P(w) minus the log of its weight estimate, so that log_weight is
    that estimate).  complete: ended with a stop token the grammar allowed; False when cut off by
    max_new_tokens or stuck where the model gives every allowed token probability 0 (only
    ``gcd``/``asap``/``awrs`` return such samples).  attempts: proposals drawn (``exact`` counts
    its rejections; 1 otherwise).
    """

    token_ids: list[int]
    text: str
    log_p: float
    log_q: float
    complete: bool = True
    stop_token_id: int | None = None
    attempts: int = 1
    mode: str = "asap"

    @property
    def log_weight(self) -> float:
        """log P(w) - log q(w): the importance weight of this sample (self-normalise over a batch)."""
        return self.log_p - self.log_q


class _Node:
    """A prefix the sampler reached.  Once expanded, arrays cover the allowed tokens with P > 0,
    sorted by id (empty before); before that, an awrs walk may have left the model's distribution
    and verdicts."""

    __slots__ = (
        "parent",
        "index",
        "depth",
        "expanded",
        "ids",
        "logp",
        "log_w",
        "is_stop",
        "children",
        "log_allowed",
        "log_deficit",
        "log_c",
        "expanded_attempt",
        "cum_p",
        "cum_w",
        "visits",
        "candidates",
        "cand_cum",
        "verdicts",
    )

    def __init__(self, parent: _Node | None, index: int, depth: int):
        self.parent = parent
        self.index = index  # position of the node's token in parent.ids (-1 while the parent is not expanded)
        self.depth = depth
        self.expanded = False  # True once the grammar mask is known (`_mask`)
        self.ids: np.ndarray = _UNEXPANDED
        self.logp: np.ndarray = _UNEXPANDED  # log P(t | u) for t in ids
        self.log_w: np.ndarray | None = None  # log P(t | u) + log c~(ut); None while equal to logp
        self.is_stop: np.ndarray = _UNEXPANDED
        self.children: dict[int, _Node] = {}
        self.log_allowed = 0.0
        self.log_deficit = -math.inf
        self.log_c = 0.0  # an unexpanded prefix counts 1
        self.expanded_attempt = -1
        # (cumulative weights, log normaliser) for drawing by P alone / by P * c~, cached from the
        # second visit on (until the weights change), so revisiting a node costs a binary search
        self.cum_p: tuple[np.ndarray, float] | None = None
        self.cum_w: tuple[np.ndarray, float] | None = None
        self.visits = 0
        # Until expanded: the tokens a grammar could allow that have P > 0, sorted, with log P(t | u)
        # (the model call's result: ids, log P), and for awrs from the second visit on (P, its
        # cumulative sums)
        self.candidates: tuple[np.ndarray, np.ndarray] | None = None
        self.cand_cum: tuple[np.ndarray, np.ndarray] | None = None
        self.verdicts: dict[int, bool] | None = None  # awrs: grammar verdicts, by position in candidates


class ASApSampler:
    """Grammar-aligned sampler for one (prompt, grammar, model, temperature); the trie persists
    across `sample()` calls, so later samples are cheaper (no forward pass on revisited prefixes)
    and, in ``asap``/``exact`` modes, closer to / exactly the grammar-conditioned distribution.

    model: a transformers causal LM, or any callable f(token_ids) -> logits for the next token
    (1-D numpy array or torch tensor over the model vocabulary; token_ids include the prompt).
    prompt: a string (tokenized with `tokenizer`) or a list of token ids (possibly empty).
    max_new_tokens counts the stop token, as transformers' generate does.  max_checks: grammar
    checks an ``awrs`` step may make before it computes the full mask.

    Counters: forward_passes (model calls), steps (tokens drawn over all walks: what sampling
    would cost in model calls without the trie), grammar_checks and mask_fallbacks (``awrs``).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        compiled_grammar: CompiledGrammar,
        prompt: str | Sequence[int],
        *,
        mode: str = "asap",
        temperature: float = 1.0,
        max_new_tokens: int = 256,
        seed: int | None = None,
        max_attempts: int = 10_000,
        max_checks: int = AWRS_MAX_CHECKS,
    ):
        self.mode = _check_mode(mode)
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
            raise InvalidArgumentError(
                f"temperature must be a positive number, got {temperature!r} (use plain decoding for greedy)"
            )
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise InvalidArgumentError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts must be >= 1, got {max_attempts!r}")
        _check_max_checks(max_checks)
        if not isinstance(compiled_grammar, CompiledGrammar):
            raise ArgumentTypeError(
                f"compiled_grammar must be a CompiledGrammar, got {type(compiled_grammar).__name__}"
            )
        self.compiled_grammar = compiled_grammar
        self.tokenizer_info = compiled_grammar.tokenizer_info
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.max_new_tokens = max_new_tokens
        self.max_attempts = max_attempts
        self.max_checks = max_checks
        self.prompt_ids = _prompt_ids(prompt, tokenizer)
        self._logits_fn = _logits_function(model, self.prompt_ids)
        self._rng = np.random.default_rng(seed)
        self._matcher = GrammarMatcher(compiled_grammar)
        self._matcher_path: list[int] = []
        self._stop_ids = np.array(self._matcher.stop_token_ids, dtype=np.int64)
        self._stop_set = frozenset(self._matcher.stop_token_ids)
        self._candidates = candidate_tokens(self.tokenizer_info, self._matcher.stop_token_ids)
        self.root = _Node(None, -1, 0)
        self._attempt = 0
        self.forward_passes = 0
        self.num_nodes = 1
        self.rejections = 0
        self.steps = 0
        self.grammar_checks = 0
        self.mask_fallbacks = 0

    # -- public -------------------------------------------------------------------------------

    def sample(self, mode: str | None = None) -> Sample:
        """Draw one sample (mode defaults to the sampler's; any mode may walk the shared trie)."""
        mode = self.mode if mode is None else _check_mode(mode)
        if mode != "exact":
            self._attempt += 1
            got = self._draw(mode)
            assert got is not None  # only exact mode rejects an attempt
            return got
        for attempts in range(1, self.max_attempts + 1):
            self._attempt += 1
            got = self._draw("exact")
            if got is not None:
                got.attempts = attempts
                return got
            self.rejections += 1
            if self.root.expanded and self.root.log_c == -math.inf:
                raise InvalidArgumentError(
                    "the model cannot produce any string of the grammar within "
                    f"max_new_tokens={self.max_new_tokens} (every branch was rejected)"
                )
        raise LimitExceededError(
            f"exact mode drew no grammatical sample in {self.max_attempts} attempts "
            f"(known upper bound on the acceptance probability: {self.upper_bound_z():.3g}); "
            "raise max_attempts or use mode='asap'"
        )

    def sample_many(self, n: int, mode: str | None = None) -> list[Sample]:
        if n < 0:
            raise InvalidArgumentError(f"n must be >= 0, got {n}")
        return [self.sample(mode) for _ in range(n)]

    def expand(self, prefix: Sequence[int]) -> float:
        """Expand every node along `prefix` (generated ids the grammar allows), without sampling:
        warm-starts the trie from known outputs, or finishes exploring a small grammar.  Returns
        c~(prefix)."""
        self._attempt += 1
        node = self.root
        path: list[int] = []
        if not node.expanded:
            self._expand(node, path)
        for t in prefix:
            t = int(t)
            if not node.expanded:
                raise InvalidArgumentError(f"prefix {list(prefix)} runs past max_new_tokens={self.max_new_tokens}")
            pos = int(np.searchsorted(node.ids, t))
            if pos >= len(node.ids) or node.ids[pos] != t or node.is_stop[pos]:
                raise InvalidArgumentError(
                    f"token {t} after {path} is not an allowed continuation (or has probability 0)"
                )
            path.append(t)
            node = node.children.get(t) or self._add_child(node, t, path, masked=True)
            if not node.expanded and node.depth < self.max_new_tokens:  # only awrs had reached it
                self._expand(node, path)
        return math.exp(node.log_c)

    def upper_bound_z(self) -> float:
        """c~(root): an upper bound on Z = P(the model's output is in the grammar), exact once the
        trie is fully explored."""
        return math.exp(self.root.log_c)

    def c_tilde(self, prefix: Sequence[int]) -> float:
        """c~ of a prefix of generated ids, as the trie counts it: 1 for an allowed prefix not
        reached yet, 0 for one the grammar forbids (or that extends a cut-off prefix).  A node only
        awrs walks reached gets its mask on the way (no model call)."""
        node = self.root
        path: list[int] = []
        for t in prefix:
            t = int(t)
            child = node.children.get(t)
            if child is None:
                if not node.expanded and node.candidates is not None:
                    self._mask(node, node.candidates, path)
                if not node.expanded:
                    return 0.0 if node.log_c == -math.inf else 1.0
                pos = int(np.searchsorted(node.ids, t))
                allowed = pos < len(node.ids) and node.ids[pos] == t and not node.is_stop[pos]
                return 1.0 if allowed else 0.0
            path.append(t)
            node = child
        return math.exp(node.log_c)

    def iter_nodes(self) -> Iterator[tuple[tuple[int, ...], float]]:
        """(prefix, log c~) for every node in the trie (reached prefixes and cut-off leaves)."""
        stack: list[tuple[_Node, tuple[int, ...]]] = [(self.root, ())]
        while stack:
            node, prefix = stack.pop()
            yield prefix, node.log_c
            for t, child in node.children.items():
                stack.append((child, prefix + (t,)))

    def is_fully_explored(self) -> bool:
        """True when every allowed non-stop continuation of every node has been expanded, so
        every c~ in the trie is exact."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            if not node.expanded:
                if node.depth < self.max_new_tokens:
                    return False
                continue
            if int((~node.is_stop).sum()) != len(node.children):
                return False
            stack.extend(node.children.values())
        return True

    # -- one walk from the root ---------------------------------------------------------------

    def _draw(self, mode: str) -> Sample | None:
        """Walk from the root to a stop token (a Sample), or, in exact mode, to a rejection (None)."""
        node = self.root
        path: list[int] = []
        log_p = 0.0
        log_q = 0.0
        while True:
            if node.depth >= self.max_new_tokens:  # cut off: no room left for a stop token
                return None if mode == "exact" else self._make_sample(path, log_p, log_q, None, mode)
            self.steps += 1
            if mode == "awrs" and not node.expanded:
                token, token_logp, log_weight = self._awrs_choice(node, path)
                if token is None:  # no allowed token has probability > 0 here: the step's weight is 0
                    return self._make_sample(path, log_p, math.inf, None, mode)
                log_p += token_logp
                log_q += token_logp - log_weight
                is_stop = token in self._stop_set
            else:
                if not node.expanded:
                    self._expand(node, path)
                if len(node.ids) == 0:  # a dead end: the model gives every allowed token probability 0
                    return None if mode == "exact" else self._make_sample(path, log_p, log_q, None, mode)
                i, log_q = self._choose_expanded(node, mode, log_q)
                if i is None:  # exact mode rejected the attempt
                    return None
                token = int(node.ids[i])
                log_p += float(node.logp[i])
                is_stop = bool(node.is_stop[i])
            if is_stop:
                return self._make_sample(path, log_p, log_q, token, mode)
            path.append(token)
            node = node.children.get(token) or self._add_child(node, token, path, masked=mode != "awrs")

    def _choose_expanded(self, node: _Node, mode: str, log_q: float) -> tuple[int | None, float]:
        """An index into node.ids drawn by the mode's proposal, and log_q updated; None when exact
        mode rejects the attempt here."""
        fresh = node.expanded_attempt == self._attempt
        node.visits += 1
        log_w = node.logp if node.log_w is None else node.log_w
        if mode in ("gcd", "awrs"):  # awrs where the mask is known: the exact step (its weight is A(u))
            cum, norm = self._cumulative_p(node)
            i = self._choose(cum)
            return i, log_q + float(node.logp[i]) - norm
        if mode == "asap" or not fresh:
            cum, norm = node.cum_w or _cumulative(log_w)
            if node.visits > 1:
                node.cum_w = (cum, norm)
            if norm == -math.inf:  # only at the root: the trie proved nothing grammatical is left
                if mode == "exact":
                    return None, log_q
                raise InvalidArgumentError(
                    "the model cannot produce any string of the grammar within "
                    f"max_new_tokens={self.max_new_tokens} (every branch is known to fail)"
                )
            i = self._choose(cum)
            return i, log_q + float(log_w[i]) - norm
        # exact mode at a node expanded in this attempt: c~ there counted 1 when the attempt began,
        # so draw t ~ P(. | u) over the full vocabulary and keep it with probability c~(ut) (a
        # masked token, c~ = 0, rejects; children an awrs walk explored may have c~ < 1).
        if self._rng.random() >= math.exp(node.log_c):
            return None, log_q
        cum, _ = _cumulative(log_w) if node.log_w is not None else self._cumulative_p(node)
        i = self._choose(cum)
        return i, log_q + float(log_w[i])

    def _awrs_choice(self, node: _Node, path: list[int]) -> tuple[int | None, float, float]:
        """One `awrs_step` at a node whose mask is unknown: (token, log P(token | u), log weight)."""
        ids, logp = node.candidates or self._probe(node, path)
        if node.cand_cum is not None:
            masses, cum = node.cand_cum
        else:
            masses, cum = np.exp(logp), None
            if node.verdicts is not None:  # the second visit: keep them
                cum = np.cumsum(masses)
                node.cand_cum = (masses, cum)
        if node.verdicts is None:
            node.verdicts = {}
        computed = []

        def is_allowed(i: int) -> bool:
            self._sync_matcher(path)
            return self._matcher.check_token(int(ids[i]))

        def full_mask() -> np.ndarray:
            self._sync_matcher(path)
            computed.append(self._matcher.get_next_token_mask())
            return computed[0][ids]

        step = awrs_step(
            masses, is_allowed, full_mask, self._rng, max_checks=self.max_checks, verdicts=node.verdicts, cum=cum
        )
        self.grammar_checks += step.checks
        if step.fell_back:  # the mask is known now: later visits draw exactly
            self.mask_fallbacks += 1
            self._mask(node, (ids, logp), path, computed[0])
        if step.token is None:
            return None, -math.inf, -math.inf
        return int(ids[step.token]), float(logp[step.token]), step.log_weight

    @staticmethod
    def _cumulative_p(node: _Node) -> tuple[np.ndarray, float]:
        cum = node.cum_p or _cumulative(node.logp)
        if node.visits > 1:
            node.cum_p = cum
        return cum

    def _choose(self, cum: np.ndarray) -> int:
        """An index drawn with probability proportional to its weight, given cumulative weights
        (side="right" never lands on a zero-weight entry)."""
        i = int(np.searchsorted(cum, self._rng.random() * cum[-1], side="right"))
        return min(i, len(cum) - 1)

    def _make_sample(self, path: list[int], log_p: float, log_q: float, stop: int | None, mode: str) -> Sample:
        text = self.tokenizer_info.decode_tokens(path).decode("utf-8", errors="replace")
        return Sample(list(path), text, log_p, log_q, stop is not None, stop, 1, mode)

    # -- trie maintenance ---------------------------------------------------------------------

    def _add_child(self, node: _Node, token: int, path: list[int], *, masked: bool) -> _Node:
        """Create the child reached by `path` (whose last token is `token`) and make its model
        call; with `masked`, expand it (its grammar mask too)."""
        index = int(np.searchsorted(node.ids, token)) if node.expanded else -1
        child = _Node(node, index, node.depth + 1)
        node.children[token] = child
        self.num_nodes += 1
        if child.depth >= self.max_new_tokens:
            # no room left for a stop token: this prefix counts 0
            old = child.log_c
            child.log_c = -math.inf
            self._propagate(child, old)
        elif masked:
            self._expand(child, path)
        else:
            self._probe(child, path)
        return child

    def _expand(self, node: _Node, path: list[int]) -> None:
        """Model call (unless an awrs walk made it) and grammar mask: the node becomes expanded."""
        self._mask(node, node.candidates or self._probe(node, path), path)

    def _probe(self, node: _Node, path: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """One model call: keep (and return) log P(t | u) of the tokens a grammar could allow that
        have P > 0, with their ids."""
        node.candidates = candidate_log_probs(self._logits_fn(path), self.temperature, self._candidates)
        self.forward_passes += 1
        return node.candidates

    def _mask(
        self, node: _Node, candidates: tuple[np.ndarray, np.ndarray], path: list[int], mask: np.ndarray | None = None
    ) -> None:
        """Store the allowed part of the node's distribution (`candidates`: its model call's) and set
        c~(u) from it and from the children an awrs walk may have made; the full distribution is
        dropped."""
        if mask is None:
            self._sync_matcher(path)
            mask = self._matcher.get_next_token_mask()
        cand_ids, cand_logp = candidates
        keep = mask[cand_ids]
        node.ids = cand_ids[keep]
        node.logp = cand_logp[keep]
        node.is_stop = np.zeros(len(node.ids), dtype=bool)
        for stop in self._stop_ids:
            pos = int(np.searchsorted(node.ids, stop))
            if pos < len(node.ids) and node.ids[pos] == stop:
                node.is_stop[pos] = True
        node.log_allowed = _logsumexp(node.logp)
        node.candidates = node.cand_cum = node.verdicts = node.cum_p = node.cum_w = None
        node.expanded = True
        node.expanded_attempt = self._attempt
        node.log_w = None
        for token, child in node.children.items():  # found by awrs walks before the mask was known
            pos = int(np.searchsorted(node.ids, token))
            if pos >= len(node.ids) or node.ids[pos] != token:
                raise RuntimeError(f"internal error: token {token} passed a grammar check but is not in the mask")
            child.index = pos
            if child.log_c < 0.0:
                if node.log_w is None:
                    node.log_w = node.logp.copy()
                node.log_w[pos] = node.logp[pos] + child.log_c
        old = node.log_c
        if node.log_w is None:
            node.log_c, node.log_deficit = node.log_allowed, -math.inf
        else:
            node.log_c = _logsumexp(node.log_w)
            node.log_deficit = node.log_allowed + _log1mexp(node.log_c - node.log_allowed)
        self._propagate(node, old)

    def _propagate(self, node: _Node, old_log_c: float) -> None:
        """c~(node) dropped from exp(old_log_c): update the deficit sums of its ancestors, O(depth).
        Stops below a parent that is not expanded: its c~ stays 1 until its mask is known."""
        while node.parent is not None and node.log_c < old_log_c and node.parent.expanded:
            parent = node.parent
            i = node.index
            lp = float(parent.logp[i])
            if parent.log_w is None:
                parent.log_w = parent.logp.copy()
            parent.log_w[i] = lp + node.log_c
            parent.cum_w = None
            # D(parent) += P(t | parent) * (c~_old - c~_new), the difference taken without cancellation
            drop = old_log_c + _log1mexp(node.log_c - old_log_c)
            parent.log_deficit = np.logaddexp(parent.log_deficit, lp + drop)
            previous = parent.log_c
            ratio = parent.log_deficit - parent.log_allowed
            if ratio < math.log1p(-_CANCELLATION_GUARD):
                parent.log_c = parent.log_allowed + _log1mexp(ratio)
            else:  # A - D has lost too many digits: sum the children exactly
                parent.log_c = _logsumexp(parent.log_w)
                parent.log_deficit = parent.log_allowed + _log1mexp(parent.log_c - parent.log_allowed)
            node, old_log_c = parent, previous

    def _sync_matcher(self, path: list[int]) -> None:
        """Bring the matcher to `path` by rolling back to the common prefix and replaying the rest."""
        held = self._matcher_path
        common = 0
        limit = min(len(held), len(path))
        while common < limit and held[common] == path[common]:
            common += 1
        if common < len(held):
            self._matcher.rollback(len(held) - common)
            del held[common:]
        for t in path[common:]:
            if not self._matcher.accept_token(t):
                raise RuntimeError(f"internal error: the grammar rejected token {t} it allowed before")
            held.append(t)


# -- adaptive weighted rejection sampling: one step ----------------------------------------------


@dataclass
class AWRSStep:
    """One AWRS draw at a prefix u.  token: distributed as P(. | u) restricted to the allowed
    tokens (None when no allowed token has probability > 0; then log_weight is -inf).
    log_weight: log of an unbiased estimate of the allowed mass A(u) = sum of P(t | u) over allowed
    t.  checks: grammar checks run (known verdicts and mask lookups are free).  fell_back: the
    check budget ran out and the full mask answered the rest."""

    token: int | None
    log_weight: float
    checks: int
    fell_back: bool


def awrs_step(
    masses: np.ndarray,
    is_allowed: Callable[[int], bool],
    full_mask: Callable[[], np.ndarray],
    rng: np.random.Generator,
    *,
    max_checks: int = AWRS_MAX_CHECKS,
    verdicts: dict[int, bool] | None = None,
    cum: np.ndarray | None = None,
) -> AWRSStep:
    """Adaptive weighted rejection sampling (Lipkin et al., COLM 2025), as in the authors' code
    for the paper's experiments: two adaptive rejection runs and the weight
    W = (M - m(R1)) / (|R1| + |R2| + 1).

    masses: m_t = P(t | u) for the tokens the grammar might allow (0 for the rest: specials,
    padding); M is their sum.  is_allowed(t): one grammar check.  full_mask(): the grammar's whole
    mask (bool, len(masses)); called at most once, when `max_checks` checks were not enough.
    verdicts: answers known from earlier visits (updated).  cum: np.cumsum(masses), if at hand.

    Run 1 draws tokens in proportion to m without replacement (a rejected token is removed) and
    stops at the first allowed one, x, having rejected the set R1.  Run 2 starts again from the
    tokens outside R1 (x among them) and stops at its first allowed draw, having rejected R2.
    x follows m restricted to the allowed set A exactly (adaptive rejection).

    Unbiasedness: for every f, E[W f(x)] = F := sum over a in A of m_a f(a); with f = 1, E[W] =
    m(A), and W is a proper importance weight for x (what SMC needs).  Proof: write 1/(k+1) as
    the integral over t in [0, 1] of t^k.  For a token set U (tokens of positive mass, A inside
    it) let phi_U(t) = E[t^|R|] for one run over U, and H_U(t) = E[m(U - R1) t^|R1| phi_{U-R1}(t)
    f(x)] for run 1 over U, so that E[W f(x)] = integral of H_V.  Splitting on the first draw (an
    allowed a, with probability m_a / m(U), or a rejected b outside A):
        phi_U = m(A)/m(U) + sum_b (m_b/m(U)) t phi_{U-b},
        H_U   = F phi_U   + sum_b (m_b/m(U)) t H_{U-b}.
    Claim: H_U = F (t phi_U)'.  For U = A both sides are F.  Otherwise differentiate
    t phi_U = t m(A)/m(U) + sum_b (m_b/m(U)) t^2 phi_{U-b}:
        (t phi_U)' = phi_U + sum_b (m_b/m(U)) t (t phi_{U-b})',
    and F times this is the recursion for H_U with the claim for each U - b.  Hence the
    integral of H_V over [0, 1] is F [t phi_V(t)] from 0 to 1 = F phi_V(1) = F.  QED.

    The budget: after `max_checks` checks the full mask answers every further check, so the
    procedure, and with it the distribution of (x, W), is unchanged (switching to the exact A(u)
    instead would bias W); the rest of a run is then taken at once from exponential races
    (ordering tokens by m_t / E_t, E_t ~ Exp(1), is drawing them without replacement).
    """
    sampler = _WithoutReplacement(masses, is_allowed, full_mask, rng, max_checks, verdicts, cum)
    total = sampler.total
    token, n1, m1 = sampler.run()
    if token is None:
        return AWRSStep(None, -math.inf, sampler.checks, sampler.mask is not None)
    # M - m(R1), the subtraction avoided where it would cancel
    kept = total - m1 if m1 <= 0.5 * total else float(np.sum(masses[~sampler.removed]))
    _, n2, _ = sampler.run()  # x is still there and allowed, so this run ends too
    log_weight = math.log(kept) - math.log(n1 + n2 + 1)
    return AWRSStep(token, log_weight, sampler.checks, sampler.mask is not None)


class _WithoutReplacement:
    """Draws tokens in proportion to their masses, never one removed before (a rejected one), and
    checks them against the grammar (see awrs_step)."""

    # Redraws (landing on a removed token) needed in a row before the cumulative sums are rebuilt
    # without the removed tokens; a rebuild also happens once they hold half the mass, so each
    # draw succeeds with probability >= 1/2 and a step never loops for long.
    MAX_REDRAWS = 32

    def __init__(self, masses, is_allowed, full_mask, rng, max_checks, verdicts, cum):
        self.masses = masses
        self.cum = np.cumsum(masses) if cum is None else cum
        self.total = float(self.cum[-1]) if len(self.cum) else 0.0
        self.live_total = self.total  # mass self.cum covers
        self.pending = 0.0  # mass of removed tokens still inside self.cum
        self.removed = np.zeros(len(masses), dtype=bool)
        self.is_allowed = is_allowed
        self.full_mask = full_mask
        self.rng = rng
        self.max_checks = max_checks
        self.verdicts = {} if verdicts is None else verdicts
        self.checks = 0
        self.lookups = 0  # verdicts read off the mask, once it is known
        self.mask: np.ndarray | None = None

    def run(self) -> tuple[int | None, int, float]:
        """Draw until an allowed token: (it or None when none is left, tokens rejected, their mass)."""
        rejected, rejected_mass = 0, 0.0
        while True:
            if self.mask is not None and self.lookups >= self.max_checks:
                token, n, mass = self._finish_with_mask(self.mask)
                return token, rejected + n, rejected_mass + mass
            token = self._draw()
            if token is None:
                return None, rejected, rejected_mass
            if self._verdict(token):
                return token, rejected, rejected_mass
            self.removed[token] = True
            self.pending += float(self.masses[token])
            rejected += 1
            rejected_mass += float(self.masses[token])

    def _draw(self) -> int | None:
        misses = 0
        while True:
            if misses >= self.MAX_REDRAWS or self.pending > 0.5 * self.live_total:
                if misses >= 4 * self.MAX_REDRAWS:  # only rounding could cause this
                    raise RuntimeError("internal error: AWRS could not draw a token")
                self._rebuild()
            if not self.live_total > 0.0:
                return None
            token = int(np.searchsorted(self.cum, self.rng.random() * self.live_total, side="right"))
            if token < len(self.masses) and not self.removed[token] and self.masses[token] > 0.0:
                return token
            misses += 1

    def _rebuild(self) -> None:
        self.cum = np.cumsum(np.where(self.removed, 0.0, self.masses))
        self.live_total = float(self.cum[-1]) if len(self.cum) else 0.0
        self.pending = 0.0

    def _verdict(self, token: int) -> bool:
        known = self.verdicts.get(token)
        if known is not None:
            return known
        if self.mask is None and self.checks >= self.max_checks:
            self.mask = self.full_mask()
        if self.mask is not None:
            self.lookups += 1
            verdict = bool(self.mask[token])
        else:
            self.checks += 1
            verdict = bool(self.is_allowed(token))
        self.verdicts[token] = verdict
        return verdict

    def _finish_with_mask(self, mask: np.ndarray) -> tuple[int | None, int, float]:
        """The rest of the run at once: the tokens left, in the order of an exponential race; the
        allowed token first in it ends the run, every token before it is rejected."""
        live = np.flatnonzero((self.masses > 0.0) & ~self.removed)
        allowed = mask[live]
        if not allowed.any():
            return None, 0, 0.0
        keys = self.masses[live] / self.rng.standard_exponential(len(live))
        best = int(np.argmax(np.where(allowed, keys, -1.0)))
        ahead = live[keys > keys[best]]  # none of them is allowed, or it would be first
        self.removed[ahead] = True
        mass = float(np.sum(self.masses[ahead]))
        self.pending += mass
        return int(live[best]), len(ahead), mass


def candidate_tokens(info, stop_token_ids: Sequence[int]) -> np.ndarray:
    """Bool array over the vocabulary: the tokens a grammar can allow (text tokens and the stop
    tokens); the rest are rejected without a check."""
    out = np.zeros(info.vocab_size, dtype=bool)
    out[info.grammar_token_ids] = True
    out[list(stop_token_ids)] = True
    return out


def candidate_log_probs(
    logits: np.ndarray, temperature: float, candidates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, log P(id | u)) of the candidate tokens with P > 0, ids sorted (int32); the softmax runs
    over the model's full logits (tokens past it have probability 0)."""
    scaled = logits / temperature
    log_norm = _logsumexp(scaled)
    if log_norm == -math.inf:
        raise InvalidArgumentError("the model gave every token logit -inf")
    n = min(len(scaled), len(candidates))
    ids = np.flatnonzero(candidates[:n] & (scaled[:n] > -np.inf)).astype(np.int32)
    return ids, scaled[ids] - log_norm


def aligned_generate(
    model: Any,
    tokenizer: Any,
    compiled_grammar: CompiledGrammar,
    prompt: str | Sequence[int],
    mode: str = "asap",
    num_samples: int = 1,
    **kw: Any,
) -> list[Sample]:
    """`num_samples` samples from one sampler (so ASAp's trie learns across them); what
    `pushmask generate --aligned gcd|asap|exact|awrs --num-samples N` calls.  kw: temperature,
    max_new_tokens, seed, max_attempts, max_checks."""
    sampler = ASApSampler(model, tokenizer, compiled_grammar, prompt, mode=mode, **kw)
    return sampler.sample_many(num_samples)


@dataclass
class Enumeration:
    """The exact distributions over a finite grammar (keys: generated ids, stop token excluded)."""

    target: dict[tuple[int, ...], float]  # log Q(w)
    gcd: dict[tuple[int, ...], float]  # log of GCD's probability of w
    log_z: float  # log P(model output in the grammar, within max_new_tokens)
    forward_passes: int = 0
    log_p: dict[tuple[int, ...], float] = field(default_factory=dict)  # log P(w), summed over stop tokens


def enumerate_distributions(
    model: Any,
    tokenizer: Any,
    compiled_grammar: CompiledGrammar,
    prompt: str | Sequence[int],
    *,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    max_sequences: int = 100_000,
) -> Enumeration:
    """Depth-first enumeration of every grammatical token sequence (one model call per prefix):
    the exact target Q and the GCD distribution, for checking samplers on small finite grammars."""
    prompt_ids = _prompt_ids(prompt, tokenizer)
    logits_fn = _logits_function(model, prompt_ids)
    matcher = GrammarMatcher(compiled_grammar)
    stops = set(matcher.stop_token_ids)
    log_p: dict[tuple[int, ...], float] = {}
    log_gcd: dict[tuple[int, ...], float] = {}
    calls = 0

    def visit(prefix: list[int], lp: float, lg: float) -> None:
        nonlocal calls
        logp_full = _log_softmax(_as_numpy(logits_fn(prefix)) / temperature)
        calls += 1
        mask = matcher.get_next_token_mask()
        n = min(len(mask), len(logp_full))
        ids = [int(t) for t in np.flatnonzero(mask[:n]) if np.isfinite(logp_full[t])]
        if not ids:
            return
        log_allowed = _logsumexp(logp_full[ids])
        for t in ids:
            step_p, step_g = lp + logp_full[t], lg + logp_full[t] - log_allowed
            if t in stops:
                key = tuple(prefix)
                log_p[key] = float(np.logaddexp(log_p.get(key, -math.inf), step_p))
                log_gcd[key] = float(np.logaddexp(log_gcd.get(key, -math.inf), step_g))
                if len(log_p) > max_sequences:
                    raise InvalidArgumentError(
                        f"the grammar has more than {max_sequences} token sequences; too many to enumerate"
                    )
            elif len(prefix) + 2 <= max_new_tokens:  # room for this token and a stop token
                if not matcher.accept_token(t):
                    raise RuntimeError(f"internal error: token {t} was in the mask but not accepted")
                prefix.append(t)
                visit(prefix, step_p, step_g)
                prefix.pop()
                matcher.rollback(1)

    visit([], 0.0, 0.0)
    if not log_p:
        raise InvalidArgumentError("the model gives probability 0 to every string of the grammar")
    log_z = _logsumexp(np.array(list(log_p.values())))
    target = {w: v - log_z for w, v in log_p.items()}
    return Enumeration(target, log_gcd, log_z, calls, log_p)


# -- helpers -------------------------------------------------------------------------------------


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InvalidArgumentError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    return mode


def _check_max_checks(max_checks: int) -> None:
    if not isinstance(max_checks, int) or max_checks < 0:
        raise InvalidArgumentError(
            f"max_checks must be a non-negative integer (0: always the full mask), got {max_checks!r}"
        )


def _prompt_ids(prompt: str | Sequence[int], tokenizer: Any) -> list[int]:
    if isinstance(prompt, str):
        if tokenizer is None:
            raise InvalidArgumentError("a string prompt needs a tokenizer; pass one or give token ids")
        ids = tokenizer.encode(prompt)
        return [int(t) for t in ids]
    try:
        ids = [int(t) for t in prompt]
    except (TypeError, ValueError):
        raise ArgumentTypeError(
            f"prompt must be a string or a sequence of token ids, got {type(prompt).__name__}"
        ) from None
    if any(t < 0 for t in ids):
        raise InvalidArgumentError("prompt token ids must be non-negative")
    return ids


def _logits_function(model: Any, prompt_ids: list[int]) -> Callable[[list[int]], np.ndarray]:
    """f(generated ids) -> float64 logits, from a transformers model or a plain callable."""
    if _is_torch_module(model):
        return _hf_logits_function(model, prompt_ids)
    if not callable(model):
        raise ArgumentTypeError(f"model must be a transformers causal LM or a callable, got {type(model).__name__}")

    def logits(path: list[int]) -> np.ndarray:
        return _as_numpy(model(prompt_ids + path))

    return logits


def _is_torch_module(model: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return isinstance(model, torch.nn.Module)


def _hf_logits_function(model: Any, prompt_ids: list[int]) -> Callable[[list[int]], np.ndarray]:
    if not prompt_ids:
        raise InvalidArgumentError(
            "a transformers model needs at least one input token; give a prompt (e.g. the BOS token id)"
        )
    return _HFLogits(model, prompt_ids)


class _HFLogits:
    """Next-token logits from a transformers causal LM, reusing the key/value cache of the last
    call: the trie expands prefixes mostly one token deeper than the last one, so each expansion
    runs the model on one new token instead of the whole prompt and prefix.  Falls back to full
    forward passes for models whose cache cannot be cropped."""

    def __init__(self, model: Any, prompt_ids: list[int]):
        import torch

        self.model = model
        self.prompt_ids = prompt_ids
        self.device = next(model.parameters()).device
        self.cache: DynamicCache | None = None
        self.cached_ids: list[int] = []  # the ids whose keys and values self.cache holds
        self.incremental = True
        self._torch = torch

    def __call__(self, path: list[int]) -> np.ndarray:
        ids = self.prompt_ids + path
        torch = self._torch
        with torch.no_grad():
            if self.incremental:
                try:
                    return self._incremental(ids)
                except (AttributeError, TypeError, ValueError, NotImplementedError, RuntimeError):
                    self.incremental = False  # an unusual cache: plain forward passes from now on
                    self.cache, self.cached_ids = None, []
            out = self.model(input_ids=torch.tensor([ids], dtype=torch.long, device=self.device))
        return _as_numpy(out.logits[0, -1])

    def _incremental(self, ids: list[int]) -> np.ndarray:
        held = self.cached_ids
        common = 0
        limit = min(len(held), len(ids) - 1)  # keep at least one token to run, for its logits
        while common < limit and held[common] == ids[common]:
            common += 1
        if self.cache is None or common == 0:
            from transformers import DynamicCache

            self.cache, common = DynamicCache(), 0
        elif common < len(held):
            self.cache.crop(common - len(held))  # a negative count drops that many (old and new API)
            if self.cache.get_seq_length() != common:
                raise InvalidArgumentError("the key/value cache did not crop")
        self.cached_ids = []  # in case the call below fails half way
        new = self._torch.tensor([ids[common:]], dtype=self._torch.long, device=self.device)
        out = self.model(input_ids=new, use_cache=True, **{kv_cache_name(): self.cache})
        self.cache = getattr(out, kv_cache_name())
        self.cached_ids = list(ids)
        return _as_numpy(out.logits[0, -1])


def _as_numpy(logits: Any) -> np.ndarray:
    if hasattr(logits, "detach"):  # torch tensor
        logits = logits.detach().to("cpu").double().numpy()
    arr = np.asarray(logits, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidArgumentError(f"the model must return 1-D logits over its vocabulary, got shape {arr.shape}")
    if not (arr < np.inf).all():  # NaN compares False too
        raise InvalidArgumentError("the model returned NaN or +inf logits")
    return arr


def _log_softmax(x: np.ndarray) -> np.ndarray:
    top = np.max(x)
    if not np.isfinite(top):
        raise InvalidArgumentError("the model gave every token logit -inf")
    shifted = x - top
    return shifted - math.log(np.sum(np.exp(shifted)))


def _cumulative(log_weights: np.ndarray) -> tuple[np.ndarray, float]:
    """Cumulative sums of exp(log_weights - max) and log of the total."""
    top = float(np.max(log_weights))
    if top == -math.inf:
        return np.zeros(len(log_weights)), -math.inf
    cum = np.cumsum(np.exp(log_weights - top))
    return cum, top + math.log(float(cum[-1]))


def _logsumexp(x: np.ndarray) -> float:
    if len(x) == 0:
        return -math.inf
    top = float(np.max(x))
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.sum(np.exp(x - top))))


def _log1mexp(x: float) -> float:
    """log(1 - exp(x)) for x <= 0, accurate near both ends."""
    if x >= 0:
        return -math.inf
    if x > -0.6931471805599453:
        return math.log(-math.expm1(x))
    return math.log1p(-math.exp(x))
