"""Deterministic automata over Unicode code points (`Dfa`) and the range sets they are made of.

A `Dfa` is the *decoded* language of a JSON string or number leaf: the values a JSON Schema
keyword allows, before they are spelled as JSON text.  The leaf builders combine them --
`json_strings` (lengths, literals, encoding as JSON text), `ecma_regex` (`pattern`),
`json_formats` (`format`), `json_numbers` (bounds, multipleOf) -- and `dfa_to_char_fsm` hands
the result to the grammar IR as one `CharFsm`.

Every construction is bounded by a state budget, `Limits.max_string_states` (20,000 by default)
unless the caller passes another; past it, `StateLimitExceeded` is raised, which the schema
front end reports as UnsupportedSchemaError naming the keyword (`budgeted`).  Trim, minimisation
and the products run as numba kernels over the automaton's flat arrays (`string_kernels`).

Range sets are tuples of inclusive, sorted, disjoint (lo, hi) code-point pairs (`Ranges`);
`ALL_CHARS` is every code point a decoded string may contain.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable
from itertools import chain

import numpy as np

from ...core.errors import UnsupportedSchemaError
from ...core.limits import DEFAULT_LIMITS
from ..ir import (
    MAX_CODE_POINT,
    NOTHING,
    SURROGATES,
    Expr,
    char_fsm_of_columns,
    complement_ranges,
    normalize_ranges,
)
from . import string_kernels

__all__ = [
    "Dfa",
    "StateLimitExceeded",
    "budgeted",
    "any_string_dfa",
    "length_dfa",
    "literal_dfa",
    "without_strings",
    "dfa_to_char_fsm",
    "Ranges",
    "ALL_CHARS",
    "union_ranges",
    "intersect_ranges",
    "complement_chars",
    "char_ranges",
]

Ranges = tuple[tuple[int, int], ...]
"""A code-point set: inclusive, sorted, disjoint (lo, hi) pairs."""

ALL_CHARS: Ranges = ((0, SURROGATES[0] - 1), (SURROGATES[1] + 1, MAX_CODE_POINT))
"""Every code point a decoded string may contain: all of Unicode except the surrogates."""


# ---------------------------------------------------------------------------------------------
# Range-set helpers (inclusive, sorted, disjoint tuples).


def union_ranges(*sets: Iterable[tuple[int, int]]) -> Ranges:
    """The code points in any of the sets (which need not be sorted or disjoint)."""
    return normalize_ranges(r for s in sets for r in s)


def complement_chars(ranges: Ranges) -> Ranges:
    """The code points of `ALL_CHARS` not in `ranges` (surrogates are never in the result)."""
    return intersect_ranges(complement_ranges(ranges), ALL_CHARS)


def intersect_ranges(a: Ranges, b: Ranges) -> Ranges:
    """The code points in both sets (one merge-like pass over the two sorted tuples)."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def char_ranges(text: str) -> Ranges:
    """The code points of the characters of `text`."""
    return normalize_ranges((ord(c), ord(c)) for c in text)


# ---------------------------------------------------------------------------------------------
# Deterministic automata over code-point ranges.


class Dfa:
    """A deterministic automaton over code points; state 0 is initial.

    trans[s] is a sorted list of disjoint (lo, hi, target) edges; a code point with no edge
    goes to an implicit dead state.  Operations return trimmed automata (every state is
    reachable and can reach a final state), so an empty language has exactly one state and no
    finals.  A Dfa is immutable: the operations (numba kernels, `string_kernels`) work on its
    flat arrays, made once, and the automata they return build `trans` only when it is read.
    """

    __slots__ = ("_trans", "_arrays", "finals", "minimal")

    def __init__(self, trans: list[list[tuple[int, int, int]]], finals: Iterable[int]):
        self._trans: list[list[tuple[int, int, int]]] | None = trans
        self._arrays: tuple | None = None
        self.finals = frozenset(finals)
        self.minimal = False  # known to be minimal and trimmed (then `minimize` returns it as is)

    @classmethod
    def from_arrays(cls, start, count, lo, hi, target, final) -> Dfa:
        """The Dfa of flat arrays (see `arrays`); no states is the empty language."""
        if start.shape[0] == 0:
            return cls([[]], ())
        dfa = cls.__new__(cls)
        dfa._trans = None
        dfa._arrays = (start, count, lo, hi, target, final)
        dfa.finals = frozenset(np.flatnonzero(final).tolist())
        dfa.minimal = False
        return dfa

    @property
    def trans(self) -> list[list[tuple[int, int, int]]]:
        """Per state, its sorted (lo, hi, target) edges (built from the arrays on first read)."""
        if self._trans is None:
            start, count, lo, hi, target, _ = self.arrays()
            edges = list(zip(lo.tolist(), hi.tolist(), target.tolist()))
            self._trans = [edges[a : a + c] for a, c in zip(start.tolist(), count.tolist())]
        return self._trans

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The flat form of `string_kernels`: (start, count, lo, hi, target, final), where the
        edges of state s are start[s] .. start[s] + count[s] - 1 of lo, hi, target."""
        if self._arrays is None:
            trans = self.trans
            count = np.array(list(map(len, trans)), np.int64)
            edges = np.fromiter(chain.from_iterable(chain.from_iterable(trans)), np.int64, 3 * int(count.sum()))
            lo, hi, target = edges.reshape(-1, 3).T.copy()
            final = np.zeros(len(trans), np.bool_)
            final[list(self.finals)] = True
            self._arrays = (np.cumsum(count) - count, count, lo, hi, target, final)
        return self._arrays

    @property
    def size(self) -> int:
        """The number of states."""
        return len(self._trans) if self._trans is not None else self.arrays()[0].shape[0]

    def is_empty(self) -> bool:
        """Accepts no string (trimmed automata of the empty language have no finals)."""
        return not self.finals

    def is_universal(self) -> bool:
        """Accepts every string (as minimized automata of e.g. unanchored "a?" or "" do)."""
        reachable = {0}
        stack = [0]
        while stack:
            s = stack.pop()
            if (
                s not in self.finals
                or intersect_ranges(tuple((lo, hi) for lo, hi, _ in self.trans[s]), ALL_CHARS) != ALL_CHARS
            ):
                return False
            for _, _, t in self.trans[s]:
                if t not in reachable:
                    reachable.add(t)
                    stack.append(t)
        return True

    def step(self, state: int, cp: int) -> int | None:
        """The state after reading code point `cp` in `state`, or None for the dead state."""
        edges = self.trans[state]
        k = bisect_right(edges, (cp, MAX_CODE_POINT + 1, 0)) - 1
        if k >= 0 and edges[k][0] <= cp <= edges[k][1]:
            return edges[k][2]
        return None

    def accepts(self, text: str) -> bool:
        """Whether the automaton accepts the whole of `text`."""
        state = 0
        for ch in text:
            next_state = self.step(state, ord(ch))
            if next_state is None:
                return False
            state = next_state
        return state in self.finals

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def explore(
        cls,
        initial,
        step: Callable,
        is_final: Callable,
        budget: int = DEFAULT_LIMITS.max_string_states,
        what: str = "automaton",
    ) -> Dfa:
        """Build a trimmed DFA from hashable state keys, breadth first from `initial`:
        step(key) yields (lo, hi, next_key) edges; StateLimitExceeded(`what`) past `budget` keys."""
        index = {initial: 0}
        keys = [initial]
        trans: list[list[tuple[int, int, int]]] = []
        for key in keys:  # grows while we walk it
            edges = []
            for lo, hi, nxt in step(key):
                if nxt not in index:
                    if len(keys) >= budget:
                        raise StateLimitExceeded(what, budget)
                    index[nxt] = len(keys)
                    keys.append(nxt)
                edges.append((lo, hi, index[nxt]))
            edges.sort()
            trans.append(edges)
        finals = [i for i, k in enumerate(keys) if is_final(k)]
        return cls(trans, finals).trim()

    def trim(self) -> Dfa:
        """Drop states that cannot reach a final state or are unreachable; renumber from 0 in
        breadth-first order (edges in order), joining adjacent ranges to one target."""
        return Dfa.from_arrays(*string_kernels.trim(*self.arrays()))

    def minimize(self) -> Dfa:
        """An equivalent minimal trimmed DFA (the shared minimiser, partition_kernels.py; numbered
        as `trim` does, so equal languages give equal automata); itself when known minimal (built
        minimal by construction: a minimiser pass over 10**5 states costs most of a second)."""
        if self.minimal:
            return self
        dfa = Dfa.from_arrays(*string_kernels.minimize(*string_kernels.trim(*self.arrays())))
        dfa.minimal = True
        return dfa

    # -- boolean operations --------------------------------------------------------------------

    def _product(self, other: Dfa, rule: int, keep_dead: bool, budget: int, minimize: bool = True) -> Dfa:
        """The product automaton: finals by `rule` (string_kernels.AND, OR, AND_NOT); pairs with
        one side dead are kept when `keep_dead`; StateLimitExceeded past `budget` reachable pairs."""
        status, *arrays = string_kernels.product(*self.arrays(), *other.arrays(), rule, keep_dead, budget, minimize)
        if status == string_kernels.STATES:
            raise StateLimitExceeded("product automaton", budget)
        return Dfa.from_arrays(*arrays)

    # minimize=False skips minimisation when the caller builds near-minimal automata anyway;
    # the result is then only trimmed.

    def intersect(self, other: Dfa, budget: int = DEFAULT_LIMITS.max_string_states, minimize: bool = True) -> Dfa:
        """The strings both accept; StateLimitExceeded past `budget` reachable state pairs."""
        return self._product(other, string_kernels.AND, False, budget, minimize)

    def intersects(self, other: Dfa, budget: int = DEFAULT_LIMITS.max_string_states) -> bool:
        """Do the languages share a string?  (`intersect` without minimising: same budget.)"""
        return not self.intersect(other, budget, minimize=False).is_empty()

    def union(self, other: Dfa, budget: int = DEFAULT_LIMITS.max_string_states, minimize: bool = True) -> Dfa:
        """The strings either accepts; StateLimitExceeded past `budget` reachable state pairs."""
        return self._product(other, string_kernels.OR, True, budget, minimize)

    def difference(self, other: Dfa, budget: int = DEFAULT_LIMITS.max_string_states, minimize: bool = True) -> Dfa:
        """The strings `self` accepts and `other` does not (a complement is `any_string_dfa() - other`);
        StateLimitExceeded past `budget` reachable state pairs."""
        return self._product(other, string_kernels.AND_NOT, True, budget, minimize)

    __and__ = intersect
    __or__ = union
    __sub__ = difference


class StateLimitExceeded(Exception):
    """A code-point automaton ran past its state limit (`Limits.max_string_states` unless the
    caller passed another): "`what` exceeds `budget` `unit`".  Not a PushmaskError: the leaf
    builders turn it into UnsupportedSchemaError naming the keyword (see `budgeted`)."""

    def __init__(self, what: str, budget: int, unit: str = "states"):
        super().__init__(f"{what} exceeds {budget} {unit}")


def budgeted(
    keyword: str,
    pointer: str,
    fn: Callable,
    /,
    *args,
    hint: str = "simplify the constraint or raise Limits.max_string_states",
    **kwargs,
):
    """fn(*args, **kwargs), with StateLimitExceeded reported as UnsupportedSchemaError(keyword,
    pointer) whose message ends with `hint`, how to fix the input."""
    try:
        return fn(*args, **kwargs)
    except StateLimitExceeded as exc:
        raise UnsupportedSchemaError(keyword, pointer, f"{exc}; {hint}") from None


# ---------------------------------------------------------------------------------------------
# Basic decoded languages.


def any_string_dfa() -> Dfa:
    """Every string of `ALL_CHARS` (one state)."""
    return Dfa([[(lo, hi, 0) for lo, hi in ALL_CHARS]], [0])


def length_dfa(
    min_length: int = 0, max_length: int | None = None, budget: int = DEFAULT_LIMITS.max_string_states
) -> Dfa:
    """Strings of min_length..max_length code points (max_length None: no upper bound);
    StateLimitExceeded when that takes more than `budget` states."""
    top = max_length if max_length is not None else min_length
    if top + 1 > budget:
        raise StateLimitExceeded("length automaton", budget)
    trans = []
    for n in range(top + 1):
        if n < top:
            trans.append([(lo, hi, n + 1) for lo, hi in ALL_CHARS])
        elif max_length is None:
            trans.append([(lo, hi, n) for lo, hi in ALL_CHARS])
        else:
            trans.append([])
    return Dfa(trans, range(min_length, top + 1)).trim()


def literal_dfa(values: Iterable[str]) -> Dfa:
    """Exactly the given strings (a trie)."""
    trans: list[dict[int, int]] = [{}]
    finals = set()
    for value in values:
        s = 0
        for ch in value:
            cp = ord(ch)
            if SURROGATES[0] <= cp <= SURROGATES[1]:
                break  # a string with a lone surrogate is never produced by the grammar
            if cp not in trans[s]:
                trans[s][cp] = len(trans)
                trans.append({})
            s = trans[s][cp]
        else:
            finals.add(s)
    return Dfa([sorted((cp, cp, t) for cp, t in d.items()) for d in trans], finals).trim()


def without_strings(strings: Iterable[str]) -> Dfa:
    """Every string of `ALL_CHARS` that contains none of `strings` (non-empty): the Aho-Corasick
    automaton of the strings with the states that complete one left without edges (dead, not
    final).  Free text in structural tags, and the text of JSON / XML strings under excludes."""
    strings = list(dict.fromkeys(strings))
    goto: list[dict[int, int]] = [{}]
    done = [False]
    for text in strings:
        state = 0
        for ch in text:
            code = ord(ch)
            if code not in goto[state]:
                goto.append({})
                done.append(False)
                goto[state][code] = len(goto) - 1
            state = goto[state][code]
        done[state] = True
    alphabet = sorted({ord(ch) for text in strings for ch in text})
    # Breadth-first: fail links, then the full transition function on the strings' characters.
    delta: list[dict[int, int]] = [dict() for _ in goto]
    fail = [0] * len(goto)
    queue = []
    for code in alphabet:
        target = goto[0].get(code, 0)
        delta[0][code] = target
        if target:
            queue.append(target)
    for state in queue:
        done[state] = done[state] or done[fail[state]]
        for code in alphabet:
            child = goto[state].get(code)
            if child is None:
                delta[state][code] = delta[fail[state]][code]
            else:
                fail[child] = delta[fail[state]][code]
                delta[state][code] = child
                queue.append(child)
    others = complement_chars(tuple((code, code) for code in alphabet))  # in no string: back to the start
    trans: list[list[tuple[int, int, int]]] = []
    for state, row in enumerate(delta):
        edges = [] if done[state] else [(code, code, target) for code, target in row.items() if not done[target]]
        trans.append(sorted(edges + ([] if done[state] else [(lo, hi, 0) for lo, hi in others])))
    return Dfa(trans, (state for state in range(len(goto)) if not done[state]))


# ---------------------------------------------------------------------------------------------
# To the grammar IR.


def dfa_to_char_fsm(dfa: Dfa) -> Expr:
    """The automaton as one grammar-IR `CharFsm` (NOTHING for the empty language), built from its
    trimmed flat arrays in numpy passes (a multipleOf automaton has a million edges): transitions
    sorted by (source, lo), the array kept for automata/dfa.py, and the emptiness known (a
    trimmed automaton with states accepts something)."""
    start, count, lo, hi, target, final = string_kernels.trim(*dfa.arrays())
    if start.shape[0] == 0:
        return NOTHING
    source = np.repeat(np.arange(start.shape[0], dtype=np.int64), count)
    first = np.cumsum(count) - count
    edge = np.repeat(start, count) + np.arange(source.shape[0]) - np.repeat(first, count)
    order = np.lexsort((lo[edge], source))  # the edges of one state are disjoint ranges: lo orders them
    edge = edge[order]
    finals = frozenset(np.flatnonzero(final).tolist())
    return char_fsm_of_columns(0, finals, source[order], lo[edge], hi[edge], target[edge], nonempty=True)
