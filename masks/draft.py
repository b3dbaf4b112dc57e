"""Masks along draft tokens (speculative decoding) in one call, the matcher left where it was.

A draft is a chain or a tree of proposed tokens: node i holds tokens[i] and hangs under
parents[i] (-1: the matcher's current state; otherwise an earlier node, parents[i] < i).  The
verifier needs the mask before every draft token and after every leaf (the bonus token), which
step by step costs an accept, a fill and a rollback per node.  Here every node's state is
computed once from its parent's (the grammar advance of one token), then the masks of all states,
of all requests of a batch, are filled by one batch fill
(masks/batch_step.py's fill_batch, one numba call over every row).

Rows: a draft of n nodes takes n + 1 bitmask rows from its first row: the root (the mask before
the first tokens), then one per node, the mask after it.  For a chain that is vLLM's layout: the
mask before each draft token, then the bonus token's.  A node whose token the grammar refuses
(or that hangs under a refused node, or follows a stop token) stops its branch: its row repeats
its parent's, as vLLM does for a rejected draft, and `accepted[i]` is False.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import InvalidArgumentError, InvalidDraftTreeError, check_integers
from .batch_step import fill_batch

if TYPE_CHECKING:
    from .matcher import GrammarMatcher, _MatchState

__all__ = ["DraftMasks", "fill_draft_bitmasks", "batch_fill_draft_bitmasks", "traverse_draft_tree"]


@dataclass
class DraftMasks:
    """The states along one draft of one matcher, and where its rows went.

    tokens, parents: the draft (int64 arrays); accepted[i]: whether the grammar takes node i's
    token after its parent's path; depth[i]: tokens from the root to node i, itself included;
    first_row: the bitmask row of the root (node i's row is first_row + 1 + i).
    """

    matcher: GrammarMatcher
    tokens: np.ndarray
    parents: np.ndarray
    accepted: np.ndarray
    depth: np.ndarray
    first_row: int
    _states: list  # by node + 1 (0: the root); None for refused nodes

    def row(self, node: int) -> int:
        """The bitmask row of the state after `node` (-1: the root)."""
        return self.first_row + 1 + node

    def node_at(self, state=None) -> int | None:
        """The node whose state the matcher (or `state`) stands at (-1: the root), else None."""
        state = self.matcher._state if state is None else state
        for k, s in enumerate(self._states):
            if s is state:
                return k - 1
        return None

    def child(self, node: int, token: int) -> int | None:
        """The accepted child of `node` (-1: the root) with this token, else None."""
        hits = np.flatnonzero((self.parents == node) & (self.tokens == token) & self.accepted)
        return int(hits[0]) if len(hits) else None

    def accept(self, node: int) -> None:
        """Advance the matcher over node's token, reusing the state computed for the masks; the
        matcher must stand at the node's parent (as after accepting the path to it)."""
        if not self.accepted[node]:
            raise InvalidArgumentError(f"draft node {node} (token {int(self.tokens[node])}) was refused by the grammar")
        if self.matcher._state is not self._states[int(self.parents[node]) + 1]:
            raise InvalidArgumentError(f"the matcher does not stand at draft node {node}'s parent")
        self.matcher._push(self._states[node + 1])

    def accepted_prefix(self) -> list[int]:
        """For a chain: the tokens the grammar takes one after the other (validate_tokens)."""
        n = 0
        while n < len(self.tokens) and self.accepted[n] and self.parents[n] == n - 1:
            n += 1
        return self.tokens[:n].tolist()


def fill_draft_bitmasks(
    matcher: GrammarMatcher, tokens: Sequence[int], bitmask, *, parents: Sequence[int] | None = None, first_row: int = 0
) -> DraftMasks:
    """Fill rows first_row .. first_row + len(tokens) of `bitmask` (int32 [rows, words], numpy or
    torch) with the masks along a draft (a chain unless `parents` is given; see the module
    docstring).  The matcher is left where it was."""
    return batch_fill_draft_bitmasks(
        [matcher], [tokens], bitmask, parents=None if parents is None else [parents], first_rows=[first_row]
    )[0]


def batch_fill_draft_bitmasks(
    matchers: Sequence[GrammarMatcher],
    drafts: Sequence[Sequence[int]],
    bitmask,
    *,
    parents: Sequence[Sequence[int] | None] | None = None,
    first_rows: Sequence[int] | None = None,
) -> list[DraftMasks]:
    """fill_draft_bitmasks for many requests in one batch fill: drafts[k] for matchers[k] (each
    matcher once), its rows from first_rows[k] (default: one after the other from row 0, the
    layout vLLM uses, len(drafts[k]) + 1 rows each)."""
    if len(drafts) != len(matchers):
        raise InvalidArgumentError(f"{len(matchers)} matchers but {len(drafts)} drafts")
    if len({id(m) for m in matchers}) != len(matchers):
        raise InvalidArgumentError("a matcher appears twice; each request needs its own matcher")
    if parents is None:
        parents = [None] * len(matchers)
    if first_rows is None:
        first_rows = np.concatenate([[0], np.cumsum([len(d) + 1 for d in drafts])[:-1]]).tolist()
    results, views, rows = [], [], []
    for matcher, draft, draft_parents, first in zip(matchers, drafts, parents, first_rows):
        result = _walk(matcher, draft, draft_parents, int(first))
        results.append(result)
        for k, state in enumerate(result._states):
            if state is not None:
                views.append(_view(matcher, state, 0 if k == 0 else int(result.depth[k - 1])))
                rows.append(result.first_row + k)
    fill_batch(views, bitmask, rows)
    for result in results:  # a refused node repeats its parent's row (parents come first)
        for node in np.flatnonzero(~result.accepted).tolist():
            bitmask[result.row(node)] = bitmask[result.row(int(result.parents[node]))]
    return results


def _walk(matcher: GrammarMatcher, tokens, parents, first_row: int) -> DraftMasks:
    """Each node's state from its parent's (None where refused), without moving the matcher."""
    tokens = np.array(check_integers(tokens, "draft tokens", "fill_draft_bitmasks"), dtype=np.int64)
    n = len(tokens)
    if parents is None:
        parents = np.arange(-1, n - 1, dtype=np.int64)
    else:
        parents = np.asarray(parents, dtype=np.int64).reshape(-1)
        if len(parents) != n:
            raise InvalidArgumentError(f"{n} draft tokens but {len(parents)} parent indices")
        bad = np.flatnonzero((parents < -1) | (parents >= np.arange(n)))
        if len(bad):
            i = int(bad[0])
            raise InvalidArgumentError(
                f"draft node {i}: parent {int(parents[i])} must be -1 (the root) or an earlier node"
            )
    if first_row < 0:
        raise InvalidArgumentError(f"first_row must be >= 0, got {first_row}")
    states: list = [matcher._state]
    accepted = np.zeros(n, dtype=bool)
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        p = int(parents[i])
        parent_state = states[p + 1]
        depth[i] = 1 if p < 0 else depth[p] + 1
        state = None
        token = int(tokens[i])
        # Ids past the tokenizer (a model's padded vocabulary) and tokens after a stop are refused.
        if parent_state is not None and not parent_state.terminated and 0 <= token < matcher.vocab_size:
            state = matcher._state_after_token(token, parent_state)
        accepted[i] = state is not None
        states.append(state)
    return DraftMasks(matcher, tokens, parents, accepted, depth, first_row, states)


def _view(matcher: GrammarMatcher, state: _MatchState, depth: int) -> GrammarMatcher:
    """A matcher standing at `state`, `depth` tokens past `matcher` (its budget counts them),
    sharing everything else (see GrammarMatcher.fork); only filled, never advanced."""
    if depth == 0:
        return matcher
    view = copy.copy(matcher)
    view._state = state
    view._history = []
    view._n_tokens = matcher._n_tokens + depth
    view._row_cache = None
    return view


# -- XGrammar's draft tree: first-child and next-sibling links -------------------------------


def traverse_draft_tree(
    matcher: GrammarMatcher,
    next_token,
    next_sibling,
    draft_tokens,
    bitmask,
    time_threshold: float = -1.0,
    temperatures=None,
) -> bool:
    """XGrammar's `GrammarMatcher.traverse_draft_tree`: row i of `bitmask` gets the mask after the
    path from node 0 (the matcher's current state; its own token is already accepted) to node i.
    next_token[i] is node i's first child, next_sibling[i] its next sibling (-1: none); all three
    are int64 vectors of one length, the bitmask has one row per node.  A node whose token the
    grammar refuses, or after which the match has ended, gets a zero row and its subtree is not
    visited.  False when more than `time_threshold` seconds (> 0) passed before the walk ended
    (the root's row is always filled); the matcher is not moved.  `temperatures` (a 1-D float32
    tensor of one entry per node, or None) gets the temperature at each filled node (the matcher's
    after the path to it: GrammarMatcher.temperature_at) and -1 elsewhere (and where none is set)."""
    links = [_tree_vector(a, name) for a, name in ((next_token, "next_token"), (next_sibling, "next_sibling"))]
    tokens = _tree_vector(draft_tokens, "draft_tokens")
    n = len(tokens)
    if any(len(a) != n for a in links) or n == 0:
        raise InvalidDraftTreeError(
            f"traverse_draft_tree: the three vectors need one equal, nonzero length, got {[len(a) for a in (*links, tokens)]}"
        )
    shape = tuple(getattr(bitmask, "shape", ()))
    if len(shape) != 2 or shape[0] != n:
        raise InvalidDraftTreeError(f"traverse_draft_tree: the bitmask needs one row per node ({n}), got shape {shape}")
    first_child, sibling = links
    _check_tree(first_child, sibling)
    if temperatures is not None:
        check_temperature_vector(temperatures, n, "traverse_draft_tree")
        temperatures[...] = -1.0
    bitmask[...] = 0
    started = time.monotonic()
    pending = [(0, matcher._state, 0)]  # (node, its parent's state (the root: its own), its depth)
    while pending:
        node, state, depth = pending.pop()
        if node != 0:
            if 0 < time_threshold < time.monotonic() - started:
                return False
            token = int(tokens[node])
            after = matcher._state_after_token(token, state) if 0 <= token < matcher.vocab_size else None
            if after is None:
                continue  # refused: a zero row and nothing below
            state = after
        if state.terminated or (matcher.terminate_without_stop_token and state.can_end):
            continue  # the match ended: a zero row and nothing below
        _view(matcher, state, depth).fill_next_token_bitmask(bitmask, node)
        if temperatures is not None:
            temperature = matcher.temperature_at(state)
            temperatures[node] = -1.0 if temperature is None else temperature
        pending.extend((child, state, depth + 1) for child in _children(node, first_child, sibling))
    return True


def check_temperature_vector(temperatures, length: int, where: str) -> None:
    """A temperatures tensor XGrammar's way: 1-D, float32, on the CPU, `length` entries at least."""
    shape = tuple(getattr(temperatures, "shape", ()))
    dtype = str(getattr(temperatures, "dtype", ""))
    device = str(getattr(temperatures, "device", "cpu"))
    if len(shape) != 1 or dtype not in ("float32", "torch.float32") or device != "cpu" or shape[0] < length:
        raise InvalidArgumentError(
            f"{where}: the temperatures tensor must be a 1-D float32 CPU tensor of at least {length} entries, "
            f"got shape {shape}, dtype {dtype}, device {device}"
        )


def _tree_vector(values, name: str) -> np.ndarray:
    """One of the tree's int64 vectors (torch or numpy) as numpy."""
    if str(getattr(values, "dtype", "")) not in ("int64", "torch.int64") or len(getattr(values, "shape", ())) != 1:
        raise InvalidDraftTreeError(f"traverse_draft_tree: {name} must be a 1-D int64 tensor")
    return np.asarray(values.cpu() if hasattr(values, "cpu") else values)


def _children(node: int, first_child: np.ndarray, sibling: np.ndarray) -> Iterator[int]:
    child = int(first_child[node])
    while child != -1:
        yield child
        child = int(sibling[child])


def _check_tree(first_child: np.ndarray, sibling: np.ndarray) -> None:
    """Every link is -1 or a node, the root has no sibling, and the walk from the root reaches
    each node at most once (no cycles: the walk ends)."""
    n = len(first_child)
    bad = np.flatnonzero((first_child < -1) | (first_child >= n) | (sibling < -1) | (sibling >= n))
    if len(bad):
        raise InvalidDraftTreeError(f"traverse_draft_tree: node {int(bad[0])} links outside the {n} nodes")
    if sibling[0] != -1:
        raise InvalidDraftTreeError("traverse_draft_tree: the root (node 0) cannot have a sibling")
    seen = np.zeros(n, dtype=bool)
    pending = [0]
    while pending:
        node = pending.pop()
        for child in _children(node, first_child, sibling):
            if seen[child] or child == 0:
                raise InvalidDraftTreeError(f"traverse_draft_tree: node {child} is reached twice (a cycle)")
            seen[child] = True
            pending.append(child)
