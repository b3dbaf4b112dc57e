"""Grammar-aligned sampling: one trie over sampled token prefixes, three ways to walk it.

The target is Q(w) = P(w) * 1[w in L(G)] / Z over token sequences w (the stop token's
probability included in P(w)).  With c(u) = probability that the model, continuing freely from
prefix u, stops inside L(G), the exact next-token rule is Q(t | u) = P(t | u) * c(ut) / c(u).

Every node of the trie is a prefix u the sampler has reached.  Expanding it costs one model call;
the node keeps log P(. | u) (softmax over the model's full vocabulary at the given temperature,
no top-k/top-p warping) restricted to the tokens the grammar allows there (the masked mass,
1 - A(u), is all the algorithm needs of the rest; so a node costs about 12 bytes per allowed
token, 20 once a child's c~ changed), and c~(u), an over-approximation of c(u):

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
             vocabulary, and a masked token (or running out of tokens) rejects the whole attempt.
             The proposal of every attempt is P restricted to what is not yet known to be dead, so
             accepted samples are distributed exactly as Q; each rejection makes the next attempt
             likelier to succeed.

Every sample reports log P(w) and its proposal log q(w), for importance weighting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .compiler import CompiledGrammar
from .matcher import GrammarMatcher

MODES = ("gcd", "asap", "exact")

# When c~(u) = A(u) - D(u) falls below this fraction of A(u), the subtraction has lost that many
# digits, so the node recomputes c~(u) exactly from its children instead.
_CANCELLATION_GUARD = 1e-4


@dataclass
class Sample:
    """One generated sequence.

    token_ids: generated ids, stop token excluded.  text: their bytes decoded as UTF-8.
    log_p: log P(w) under the model at the sampler's temperature, including the probability of
    the stop token that ended it (`stop_token_id`) when complete.  log_q: log-probability that the sampler's proposal produced exactly this sequence
    (for ``exact``, the proposal of the accepted attempt).  complete: ended with a stop token the
    grammar allowed; False when cut off by max_new_tokens or stuck where the model gives every
    allowed token probability 0 (only ``gcd``/``asap`` return such samples).  attempts: proposals
    drawn (``exact`` counts its rejections; 1 otherwise).
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
    """A prefix the sampler reached.  Arrays cover the allowed tokens with P > 0, sorted by id."""

    __slots__ = (
        "parent", "token", "index", "depth", "ids", "logp", "log_w", "is_stop", "children",
        "log_allowed", "log_deficit", "log_c", "expanded_attempt", "cum_p", "cum_w", "visits",
    )

    def __init__(self, parent: "_Node | None", token: int | None, index: int, depth: int):
        self.parent = parent
        self.token = token
        self.index = index  # position of `token` in parent.ids
        self.depth = depth
        self.ids: np.ndarray | None = None  # None until expanded
        self.logp: np.ndarray | None = None  # log P(t | u) for t in ids
        self.log_w: np.ndarray | None = None  # log P(t | u) + log c~(ut); None while equal to logp
        self.is_stop: np.ndarray | None = None
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

    @property
    def expanded(self) -> bool:
        return self.ids is not None

    def prefix(self) -> list[int]:
        out = []
        node = self
        while node.parent is not None:
            out.append(node.token)
            node = node.parent
        return out[::-1]


class ASApSampler:
    """Grammar-aligned sampler for one (prompt, grammar, model, temperature); the trie persists
    across `sample()` calls, so later samples are cheaper (no forward pass on revisited prefixes)
    and, in ``asap``/``exact`` modes, closer to / exactly the grammar-conditioned distribution.

    model: a transformers causal LM, or any callable f(token_ids) -> logits for the next token
    (1-D numpy array or torch tensor over the model vocabulary; token_ids include the prompt).
    prompt: a string (tokenized with `tokenizer`) or a list of token ids (possibly empty).
    max_new_tokens counts the stop token, as transformers' generate does.
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
    ):
        self.mode = _check_mode(mode)
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a positive number, got {temperature!r} (use plain decoding for greedy)")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts!r}")
        if not isinstance(compiled_grammar, CompiledGrammar):
            raise TypeError(f"compiled_grammar must be a CompiledGrammar, got {type(compiled_grammar).__name__}")
        self.compiled_grammar = compiled_grammar
        self.tokenizer_info = compiled_grammar.tokenizer_info
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.max_new_tokens = max_new_tokens
        self.max_attempts = max_attempts
        self.prompt_ids = _prompt_ids(prompt, tokenizer)
        self._logits_fn = _logits_function(model, self.prompt_ids)
        self._rng = np.random.default_rng(seed)
        self._matcher = GrammarMatcher(compiled_grammar)
        self._matcher_path: list[int] = []
        self._stop_ids = np.array(self._matcher.stop_token_ids, dtype=np.int64)
        self.root = _Node(None, None, -1, 0)
        self._attempt = 0
        self.forward_passes = 0
        self.num_nodes = 1
        self.rejections = 0

    # -- public -------------------------------------------------------------------------------

    def sample(self, mode: str | None = None) -> Sample:
        """Draw one sample (mode defaults to the sampler's; any mode may walk the shared trie)."""
        mode = self.mode if mode is None else _check_mode(mode)
        if mode != "exact":
            self._attempt += 1
            return self._draw(mode)
        for attempts in range(1, self.max_attempts + 1):
            self._attempt += 1
            got = self._draw("exact")
            if got is not None:
                got.attempts = attempts
                return got
            self.rejections += 1
            if self.root.expanded and self.root.log_c == -math.inf:
                raise ValueError(
                    "the model cannot produce any string of the grammar within "
                    f"max_new_tokens={self.max_new_tokens} (every branch was rejected)"
                )
        raise RuntimeError(
            f"exact mode drew no grammatical sample in {self.max_attempts} attempts "
            f"(known upper bound on the acceptance probability: {self.upper_bound_z():.3g}); "
            "raise max_attempts or use mode='asap'"
        )

    def sample_many(self, n: int, mode: str | None = None) -> list[Sample]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return [self.sample(mode) for _ in range(n)]

    def expand(self, prefix: Sequence[int]) -> float:
        """Expand every node along `prefix` (generated ids the grammar allows), without sampling:
        warm-starts the trie from known outputs, or finishes exploring a small grammar.  Returns
        c~(prefix)."""
        self._attempt += 1
        node = self.root
        if not node.expanded:
            self._expand(node, [])
        path: list[int] = []
        for t in prefix:
            t = int(t)
            if not node.expanded:
                raise ValueError(f"prefix {list(prefix)} runs past max_new_tokens={self.max_new_tokens}")
            pos = int(np.searchsorted(node.ids, t))
            if pos >= len(node.ids) or node.ids[pos] != t or node.is_stop[pos]:
                raise ValueError(f"token {t} after {path} is not an allowed continuation (or has probability 0)")
            path.append(t)
            node = node.children.get(t) or self._add_child(node, t, pos, path)
        return math.exp(node.log_c)

    def upper_bound_z(self) -> float:
        """c~(root): an upper bound on Z = P(the model's output is in the grammar), exact once the
        trie is fully explored."""
        return math.exp(self.root.log_c)

    def c_tilde(self, prefix: Sequence[int]) -> float:
        """c~ of a prefix of generated ids, as the trie counts it: 1 for an allowed prefix not
        reached yet, 0 for one the grammar forbids (or that extends a cut-off prefix)."""
        node = self.root
        for t in prefix:
            t = int(t)
            child = node.children.get(t)
            if child is None:
                if not node.expanded:
                    return 0.0 if node.log_c == -math.inf else 1.0
                pos = int(np.searchsorted(node.ids, t))
                allowed = pos < len(node.ids) and node.ids[pos] == t and not node.is_stop[pos]
                return 1.0 if allowed else 0.0
            node = child
        return math.exp(node.log_c)

    def iter_nodes(self) -> Iterator[tuple[tuple[int, ...], float]]:
        """(prefix, log c~) for every node in the trie (expanded prefixes and cut-off leaves)."""
        stack = [(self.root, ())]
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
        if not node.expanded:
            self._expand(node, [])
        path: list[int] = []
        log_p = 0.0
        log_q = 0.0
        while True:
            if not node.expanded or len(node.ids) == 0:  # cut off by max_new_tokens, or a dead end
                if mode == "exact":
                    return None
                return self._make_sample(path, log_p, log_q, None, mode)
            fresh = node.expanded_attempt == self._attempt
            node.visits += 1
            if mode == "gcd":
                cum, norm = self._cumulative_p(node)
                i = self._choose(cum)
                log_q += float(node.logp[i]) - norm
            elif mode == "asap" or not fresh:
                log_w = node.logp if node.log_w is None else node.log_w
                cum, norm = node.cum_w or _cumulative(log_w)
                if node.visits > 1:
                    node.cum_w = (cum, norm)
                if norm == -math.inf:  # only at the root: the trie proved nothing grammatical is left
                    if mode == "exact":
                        return None
                    raise ValueError(
                        "the model cannot produce any string of the grammar within "
                        f"max_new_tokens={self.max_new_tokens} (every branch is known to fail)"
                    )
                i = self._choose(cum)
                log_q += float(log_w[i]) - norm
            else:
                # exact mode at a node first expanded in this attempt: its masked tokens were not
                # known when the attempt began, so draw from the full P(. | u); a masked token
                # (probability 1 - A(u)) rejects the attempt.
                if self._rng.random() >= math.exp(node.log_allowed):
                    return None
                i = self._choose(self._cumulative_p(node)[0])
                log_q += float(node.logp[i])
            token = int(node.ids[i])
            log_p += float(node.logp[i])
            if node.is_stop[i]:
                return self._make_sample(path, log_p, log_q, token, mode)
            path.append(token)
            node = node.children.get(token) or self._add_child(node, token, i, path)

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

    def _add_child(self, node: _Node, token: int, index: int, path: list[int]) -> _Node:
        """Create and expand the child reached by `path` (whose last token is `token`)."""
        child = _Node(node, token, index, node.depth + 1)
        node.children[token] = child
        self.num_nodes += 1
        if child.depth >= self.max_new_tokens:
            # no room left for a stop token: this prefix counts 0
            old = child.log_c
            child.log_c = -math.inf
            self._propagate(child, old)
        else:
            self._expand(child, path)
        return child

    def _expand(self, node: _Node, path: list[int]) -> None:
        """One model call: store the allowed part of log P(. | u) and set c~(u) to the allowed mass."""
        self._sync_matcher(path)
        scaled = self._logits_fn(path) / self.temperature
        log_norm = _logsumexp(scaled)  # the softmax runs over the model's full vocabulary
        if log_norm == -math.inf:
            raise ValueError("the model gave every token logit -inf")
        mask = self._matcher.get_next_token_mask()
        n = min(len(mask), len(scaled))  # tokens the model has no logit for have probability 0
        ids = np.flatnonzero(mask[:n])
        logp = scaled[ids] - log_norm
        keep = np.isfinite(logp)
        node.ids = ids[keep].astype(np.int32)
        node.logp = logp[keep]
        node.log_w = None
        node.is_stop = np.zeros(len(node.ids), dtype=bool)
        for stop in self._stop_ids:
            pos = int(np.searchsorted(node.ids, stop))
            if pos < len(node.ids) and node.ids[pos] == stop:
                node.is_stop[pos] = True
        node.log_allowed = _logsumexp(node.logp)
        node.log_deficit = -math.inf
        node.expanded_attempt = self._attempt
        self.forward_passes += 1
        old = node.log_c
        node.log_c = node.log_allowed
        self._propagate(node, old)

    def _propagate(self, node: _Node, old_log_c: float) -> None:
        """c~(node) dropped from exp(old_log_c): update the deficit sums of its ancestors, O(depth)."""
        while node.parent is not None and node.log_c < old_log_c:
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
    `pushmask generate --aligned asap|exact|gcd --num-samples N` calls.  kw: temperature,
    max_new_tokens, seed, max_attempts."""
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
                    raise ValueError(f"the grammar has more than {max_sequences} token sequences; too many to enumerate")
            elif len(prefix) + 2 <= max_new_tokens:  # room for this token and a stop token
                if not matcher.accept_token(t):
                    raise RuntimeError(f"internal error: token {t} was in the mask but not accepted")
                prefix.append(t)
                visit(prefix, step_p, step_g)
                prefix.pop()
                matcher.rollback(1)

    visit([], 0.0, 0.0)
    if not log_p:
        raise ValueError("the model gives probability 0 to every string of the grammar")
    log_z = _logsumexp(np.array(list(log_p.values())))
    target = {w: v - log_z for w, v in log_p.items()}
    return Enumeration(target, log_gcd, log_z, calls, log_p)


# -- helpers -------------------------------------------------------------------------------------


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    return mode


def _prompt_ids(prompt: str | Sequence[int], tokenizer: Any) -> list[int]:
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("a string prompt needs a tokenizer; pass one or give token ids")
        ids = tokenizer.encode(prompt)
        return [int(t) for t in ids]
    try:
        ids = [int(t) for t in prompt]
    except (TypeError, ValueError):
        raise TypeError(f"prompt must be a string or a sequence of token ids, got {type(prompt).__name__}") from None
    if any(t < 0 for t in ids):
        raise ValueError("prompt token ids must be non-negative")
    return ids


def _logits_function(model: Any, prompt_ids: list[int]) -> Callable[[list[int]], np.ndarray]:
    """f(generated ids) -> float64 logits, from a transformers model or a plain callable."""
    if _is_torch_module(model):
        return _hf_logits_function(model, prompt_ids)
    if not callable(model):
        raise TypeError(f"model must be a transformers causal LM or a callable, got {type(model).__name__}")

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
        raise ValueError("a transformers model needs at least one input token; give a prompt (e.g. the BOS token id)")
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
        self.cache = None
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
                raise ValueError("the key/value cache did not crop")
        self.cached_ids = []  # in case the call below fails half way
        new = self._torch.tensor([ids[common:]], dtype=self._torch.long, device=self.device)
        out = self.model(input_ids=new, past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        self.cached_ids = list(ids)
        return _as_numpy(out.logits[0, -1])


def _as_numpy(logits: Any) -> np.ndarray:
    if hasattr(logits, "detach"):  # torch tensor
        logits = logits.detach().to("cpu").double().numpy()
    arr = np.asarray(logits, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"the model must return 1-D logits over its vocabulary, got shape {arr.shape}")
    if not (arr < np.inf).all():  # NaN compares False too
        raise ValueError("the model returned NaN or +inf logits")
    return arr


def _log_softmax(x: np.ndarray) -> np.ndarray:
    top = np.max(x)
    if not np.isfinite(top):
        raise ValueError("the model gave every token logit -inf")
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
