"""One rule body (an IR expression) -> a trimmed, minimised byte-level DFA with rule-reference edges.

Rule references are letters of the alphabet like bytes: a DFA state has at most one edge per
referenced rule.  References are numbered locally (order of first appearance in the body), so the
construction never depends on rule names and two rules with the same body and the same referenced
rules produce the same DFA, which is what lets masks be shared across grammars.

Alternations of many literals (enums, word lists, property names) enter the NFA as a trie, built
in linear time and already deterministic, so their size is bounded by the literals' bytes
instead of by the determinisation budget (see _Nfa._build_trie).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

import numpy as np

from ..grammar import caches
from ..grammar.errors import BudgetExceededError
from ..grammar.gc_pause import paused_gc
from ..grammar.ir import Alt, ByteClass, Bytes, CharClass, CharFsm, Expr, Ref, Repeat, Seq
from . import dfa_kernels


class RuleDfa:
    """A DFA numbered in breadth-first order from its start state 0, held as the flat arrays the
    kernels return (`arrays`: accepting[n], byte_ptr[n + 1], byte_lo, byte_hi, byte_dst,
    ref_ptr[n + 1], ref_index, ref_dst), so that automata of hundreds of thousands of states
    (big literal sets) are packed into the PDA without a Python object per edge.

    The per-state lists are built on first use:
    byte_edges[s]: sorted, disjoint (lo, hi, target) byte ranges.
    ref_edges[s]: (local reference index, target), sorted by reference index.
    refs: rule names by local reference index.
    """

    def __init__(self, accepting: list[bool], byte_edges: list[list[tuple[int, int, int]]],
                 ref_edges: list[list[tuple[int, int]]], refs: list[str]):
        self._lists: tuple | None = (list(accepting), byte_edges, ref_edges)
        self._arrays: tuple[np.ndarray, ...] | None = None
        self.refs = refs

    @classmethod
    def from_arrays(cls, arrays: tuple[np.ndarray, ...], refs: list[str]) -> "RuleDfa":
        dfa = cls.__new__(cls)
        dfa._lists, dfa._arrays, dfa.refs = None, tuple(arrays), refs
        return dfa

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        if self._arrays is None:
            accepting, byte_edges, ref_edges = self._lists
            byte_rows = [edge for edges in byte_edges for edge in edges]
            ref_rows = [edge for edges in ref_edges for edge in edges]
            byte_cols = np.array(byte_rows, dtype=np.int32).reshape(-1, 3).T
            ref_cols = np.array(ref_rows, dtype=np.int32).reshape(-1, 2).T
            self._arrays = (np.array(accepting, dtype=np.bool_),
                            np.cumsum([0] + [len(edges) for edges in byte_edges]), *byte_cols,
                            np.cumsum([0] + [len(edges) for edges in ref_edges]), *ref_cols)
        return self._arrays

    def _edge_lists(self) -> tuple:
        if self._lists is None:
            accepting, byte_ptr, lo, hi, dst, ref_ptr, ref_index, ref_dst = (a.tolist() for a in self._arrays)
            byte_edges = list(zip(lo, hi, dst))
            ref_edges = list(zip(ref_index, ref_dst))
            n = len(accepting)
            self._lists = (accepting, [byte_edges[byte_ptr[s]: byte_ptr[s + 1]] for s in range(n)],
                           [ref_edges[ref_ptr[s]: ref_ptr[s + 1]] for s in range(n)])
        return self._lists

    @property
    def accepting(self) -> list[bool]:
        return self._edge_lists()[0]

    @property
    def byte_edges(self) -> list[list[tuple[int, int, int]]]:
        return self._edge_lists()[1]

    @property
    def ref_edges(self) -> list[list[tuple[int, int]]]:
        return self._edge_lists()[2]

    @property
    def num_states(self) -> int:
        return len(self._arrays[0]) if self._arrays is not None else len(self._lists[0])

    def signature(self) -> tuple:
        """A hashable structural description (references by local index)."""
        return (
            tuple(self.accepting),
            tuple(tuple(edges) for edges in self.byte_edges),
            tuple(tuple(edges) for edges in self.ref_edges),
        )

    def digest(self) -> bytes:
        """A digest of the structure (references by local index): equal for equal automata."""
        h = hashlib.blake2b(digest_size=16)
        for table in self.arrays:
            h.update(np.ascontiguousarray(table, dtype=np.int64).tobytes())
            h.update(b"|")
        return h.digest()

    def __eq__(self, other) -> bool:
        if not isinstance(other, RuleDfa):
            return NotImplemented
        return self.refs == other.refs and all(np.array_equal(a, b) for a, b in zip(self.arrays, other.arrays))

    __hash__ = None

    def __repr__(self) -> str:
        return f"RuleDfa(states={self.num_states}, refs={self.refs})"


class _Nfa:
    """A Thompson NFA kept as flat edge lists: epsilon, byte-range, code-point-range (expanded to
    UTF-8 byte paths by the kernel) and rule-reference edges."""

    def __init__(self, max_states: int):
        self.num_states = 0
        self.eps_edges: list[tuple[int, int]] = []  # (src, dst)
        self.byte_edges: list[tuple[int, int, int, int]] = []  # (src, lo, hi, dst)
        self.code_point_edges: list[tuple[int, int, int, int]] = []  # (src, lo, hi, dst)
        self.code_point_blocks: list[np.ndarray] = []  # more of them, [k, 4] arrays
        self.byte_blocks: list[np.ndarray] = []  # more byte edges, [k, 4] arrays (literal tries)
        self.eps_blocks: list[np.ndarray] = []  # more epsilon edges, [k, 2] arrays
        self.ref_edges: list[tuple[int, int, int]] = []  # (src, local reference index, dst)
        self.ref_index: dict[str, int] = {}
        self.memo: dict[tuple[int, int], tuple[int, Expr]] = {}
        self.max_states = max_states
        self.trie_states = 0  # states of literal tries (see _build_trie), outside max_states

    def new_states(self, count: int = 1) -> int:
        """The first of `count` fresh states."""
        if self.num_states - self.trie_states + count > self.max_states:
            raise _nfa_budget_error(self.max_states)
        self.num_states += count
        return self.num_states - count

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The edges as int32 arrays, one row per edge (as `dfa_kernels.construct` takes them)."""
        code_points = [np.array(self.code_point_edges, dtype=np.int32).reshape(-1, 4), *self.code_point_blocks]
        eps = [np.array(self.eps_edges, dtype=np.int32).reshape(-1, 2), *self.eps_blocks]
        byte = [np.array(self.byte_edges, dtype=np.int32).reshape(-1, 4), *self.byte_blocks]
        return (
            np.concatenate(eps).astype(np.int32, copy=False),
            np.concatenate(byte).astype(np.int32, copy=False),
            np.concatenate(code_points).astype(np.int32, copy=False),
            np.array(self.ref_edges, dtype=np.int32).reshape(-1, 3),
        )

    def build(self, expr: Expr, end: int) -> int:
        """Add `expr` leading into state `end`; return its start state.

        Built right to left and memoised on (expression object, end): a sub-expression that
        occurs several times in front of the same continuation (shared suffixes, as in chains of
        optional members) becomes one fragment instead of one copy per occurrence.  Sharing is
        exact because both occurrences continue identically.
        """
        key = (id(expr), end)
        got = self.memo.get(key)
        if got is not None:
            return got[0]
        start = self._build(expr, end)
        self.memo[key] = (start, expr)  # holding expr keeps its id from being reused
        return start

    def _build(self, expr: Expr, end: int) -> int:
        if isinstance(expr, Bytes):
            here = end
            for b in reversed(expr.value):
                there = self.new_states()
                self.byte_edges.append((there, b, b, here))
                here = there
            return here
        if isinstance(expr, ByteClass):
            start = self.new_states()
            for lo, hi in expr.ranges:
                self.byte_edges.append((start, lo, hi, end))
            return start
        if isinstance(expr, CharClass):
            start = self.new_states()
            for lo, hi in expr.ranges:
                self.code_point_edges.append((start, lo, hi, end))
            return start
        if isinstance(expr, Seq):
            here = end
            for item in reversed(expr.items):
                here = self.build(item, here)
            return here
        if isinstance(expr, Alt):
            start = self.new_states()
            literals = [item.value for item in expr.items if isinstance(item, Bytes)]
            trie = len(literals) >= TRIE_MIN_LITERALS
            if trie:
                self._build_trie(start, literals, end)
            for item in expr.items:
                if not (trie and isinstance(item, Bytes)):
                    self.eps_edges.append((start, self.build(item, end)))
            return start
        if isinstance(expr, Repeat):
            here = end
            if expr.max is None:
                loop = self.new_states()
                self.eps_edges.append((loop, here))
                self.eps_edges.append((loop, self._build(expr.item, loop)))
                here = loop
            else:
                # x{0,k} as (x (x ...)?)?: every optional copy skips straight to the end, so
                # epsilon closures stay O(1) instead of spanning the remaining copies (which
                # made subset construction quadratic in k)
                for _ in range(expr.max - expr.min):
                    optional = self.new_states()
                    self.eps_edges.append((optional, end))
                    self.eps_edges.append((optional, self._build(expr.item, here)))
                    here = optional
            for _ in range(expr.min):
                here = self._build(expr.item, here)
            return here
        if isinstance(expr, Ref):
            index = self.ref_index.setdefault(expr.name, len(self.ref_index))
            start = self.new_states()
            self.ref_edges.append((start, index, end))
            return start
        if isinstance(expr, CharFsm):
            return self._build_fsm(expr, end)
        raise TypeError(f"not an IR expression: {expr!r}")

    def _build_trie(self, root: int, literals: list[bytes], end: int) -> None:
        """The literals as a trie below state `root`, each leading into `end`: one state per
        distinct prefix, built in one pass over the sorted literals (`dfa_kernels.literal_trie`),
        so enums and word lists of any size cost linear time and their automaton is already
        deterministic.

        A trie cannot blow up (its states are at most the literals' bytes), so its states are
        counted apart from the `max_states` budget, which guards against determinisation's
        exponential cases; they stay bounded by TRIE_STATES_FACTOR times it."""
        words = sorted(set(literals))
        offsets = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum([len(word) for word in words], out=offsets[1:])
        data = np.frombuffer(b"".join(words), dtype=np.uint8)
        n_states, edges, ends = dfa_kernels.literal_trie(data, offsets, root, self.num_states)
        self.trie_states += n_states - self.num_states
        if self.trie_states > TRIE_STATES_FACTOR * self.max_states:
            raise _nfa_budget_error(self.max_states, f"a set of literals has more than "
                                    f"{TRIE_STATES_FACTOR * self.max_states} distinct prefixes")
        self.num_states = n_states
        self.byte_blocks.append(edges)
        self.eps_blocks.append(np.stack((ends, np.full_like(ends, end)), axis=1))

    def _build_fsm(self, fsm: CharFsm, end: int) -> int:
        """One NFA state per automaton state, its transitions as code-point edges and an
        epsilon edge from each final state into `end`."""
        n_states, transitions, finals, initial = _fsm_layout(fsm)
        first = self.new_states(n_states)
        block = transitions.copy()
        block[:, 0] += first
        block[:, 3] += first
        self.code_point_blocks.append(block)
        self.eps_edges += [(first + q, end) for q in finals]
        return first + initial


FSM_LAYOUT_TRANSITIONS = 1_000_000
"""Transitions of the CharFsm layouts kept per process (least recently used first out): an entry
holds its automaton alive, and key-exclusion automata have tens of thousands of transitions."""
_fsm_layouts: OrderedDict[int, tuple[CharFsm, tuple[int, np.ndarray, list[int], int]]] = OrderedDict()
_fsm_layout_transitions = 0


def _fsm_layout(fsm: CharFsm) -> tuple[int, np.ndarray, list[int], int]:
    """(number of states, transitions as a [k, 4] array, final states, initial state) with the
    automaton's states renumbered 0.. in increasing order (finals that no transition or the
    initial state mentions are dropped).  Cached per object: regex and key-exclusion automata
    have up to tens of thousands of transitions, and string automata recur in many rules."""
    global _fsm_layout_transitions
    got = _fsm_layouts.get(id(fsm))
    if got is not None and got[0] is fsm:
        _fsm_layouts.move_to_end(id(fsm))
        return got[1]
    transitions = np.array(fsm.transitions, dtype=np.int32).reshape(-1, 4)
    states = np.unique(np.append(transitions[:, [0, 3]], fsm.initial))
    transitions[:, 0] = np.searchsorted(states, transitions[:, 0])
    transitions[:, 3] = np.searchsorted(states, transitions[:, 3])
    number = {q: i for i, q in enumerate(states.tolist())}
    finals = sorted(number[q] for q in fsm.finals if q in number)
    layout = (len(states), transitions, finals, number[fsm.initial])
    if got is not None:  # a dead automaton's id reused: drop its entry
        _fsm_layout_transitions -= len(_fsm_layouts.pop(id(fsm))[1][1])
    _fsm_layouts[id(fsm)] = (fsm, layout)  # holding fsm keeps its id from being reused
    _fsm_layout_transitions += len(transitions)
    while _fsm_layout_transitions > FSM_LAYOUT_TRANSITIONS and len(_fsm_layouts) > 1:
        _fsm_layout_transitions -= len(_fsm_layouts.popitem(last=False)[1][1][1])
    return layout


TRIE_STATES_FACTOR = 10
"""Literal tries may hold this many times `max_rule_states` states (see _Nfa._build_trie)."""
TRIE_MIN_LITERALS = 16
"""Alternations with at least this many literals build them as a trie (fewer: one path each)."""


def _nfa_budget_error(max_states: int, what: str = "") -> BudgetExceededError:
    return BudgetExceededError(
        f"rule automaton exceeds {max_states} NFA states{' (' + what + ')' if what else ''}; simplify large "
        "repetitions (e.g. x{0,10000}) or raise the max_rule_states budget"
    )


DFA_CACHE_STATES = 2_000_000
"""Total states of the rule DFAs kept per process (least recently used first out)."""
_dfa_cache: OrderedDict[tuple[bytes, int], tuple[RuleDfa, tuple[int, ...]]] = OrderedDict()
_dfa_cache_states = 0


def build_rule_dfa(body: Expr, max_states: int = 100_000) -> RuleDfa:
    """The rule's DFA; bodies equal up to the names of the rules they reference share one
    construction per process (JSON strings, numbers and members recur across schemas)."""
    digest, position = _structure_digest(body)
    names = list(position)
    key = (digest, max_states)
    got = _dfa_cache.get(key)
    if got is None:
        global _dfa_cache_states
        dfa = _construct_rule_dfa(body, max_states)
        _dfa_cache[key] = (dfa, tuple(position[name] for name in dfa.refs))
        _dfa_cache_states += dfa.num_states
        while _dfa_cache_states > DFA_CACHE_STATES and len(_dfa_cache) > 1:
            _dfa_cache_states -= _dfa_cache.popitem(last=False)[1][0].num_states
        return dfa
    _dfa_cache.move_to_end(key)
    dfa, ref_positions = got
    return RuleDfa.from_arrays(dfa.arrays, [names[i] for i in ref_positions])


def _structure_digest(body: Expr) -> tuple[bytes, dict[str, int]]:
    """A 128-bit digest of the body's structure with each reference replaced by the position of
    its rule among the referenced rules (in order of first occurrence), and those positions by
    name: equal digests mean equal bodies up to the names of the referenced rules.

    The body is written out once in pre-order as fixed-width integers (tags, counts, bounds,
    lengths, positions) plus the literal bytes they announce, and the two streams are hashed
    together; the integers say where each literal starts, so the encoding is unambiguous.  A
    node shared by several parents (the DAGs the JSON Schema compiler builds) is written once and
    referred back to by its visit number after that, so the walk stays linear in the DAG's size.
    Two equal trees shared differently digest differently, which only costs a cache miss.
    """
    numbers: list[int] = []
    literals: list[bytes] = []
    visit: dict[int, int] = {}
    ref_position: dict[str, int] = {}
    stack = [body]
    while stack:
        node = stack.pop()
        seen = visit.get(id(node))
        if seen is not None:
            numbers += (_BACK, seen)
            continue
        visit[id(node)] = len(visit)
        kind = type(node)
        if kind is Seq or kind is Alt:
            numbers += (_SEQ if kind is Seq else _ALT, len(node.items))
            stack.extend(reversed(node.items))
        elif kind is Bytes:
            numbers += (_BYTES, len(node.value))
            literals.append(node.value)
        elif kind is Repeat:
            numbers += (_REPEAT, node.min, -1 if node.max is None else node.max)
            stack.append(node.item)
        elif kind is Ref:
            numbers += (_REF, ref_position.setdefault(node.name, len(ref_position)))
        elif kind is CharClass or kind is ByteClass:
            numbers += (_CHARS if kind is CharClass else _BYTE_RANGES, len(node.ranges))
            for lo, hi in node.ranges:
                numbers += (lo, hi)
        elif kind is CharFsm:  # no references inside: its digest is kept on it
            try:
                data = node._digest
            except AttributeError:
                data = hashlib.blake2b(repr((node.initial, sorted(node.finals), node.transitions)).encode(),
                                       digest_size=16).digest()
                object.__setattr__(node, "_digest", data)
            numbers += (_FSM, len(data))
            literals.append(data)
        else:
            raise TypeError(f"not an IR expression: {node!r}")
    digest = hashlib.blake2b(array("q", numbers).tobytes(), digest_size=16)
    digest.update(b"".join(literals))
    return digest.digest(), ref_position


_SEQ, _ALT, _BYTES, _REPEAT, _REF, _CHARS, _BYTE_RANGES, _FSM, _BACK = range(-9, 0)
"""Tags of _structure_digest's integer stream (negative: never a count or a position)."""


def clear_dfa_cache() -> None:
    """Forget every cached rule DFA and automaton layout (for cold-start measurements)."""
    global _dfa_cache_states, _fsm_layout_transitions
    _dfa_cache.clear()
    _dfa_cache_states = 0
    _fsm_layouts.clear()
    _fsm_layout_transitions = 0


caches.register(clear_dfa_cache, "rule DFAs and automaton layouts (automata/dfa.py)")


def _construct_rule_dfa(body: Expr, max_states: int) -> RuleDfa:
    """Thompson NFA (Python) -> subset construction -> trim -> minimise -> breadth-first
    numbering (numba, `dfa_kernels.construct`)."""
    # The NFA's memo and the result's edge lists are many small objects that never form cycles.
    with paused_gc():
        nfa = _Nfa(max_states)
        final = nfa.new_states()
        start = nfa.build(body, final)
        status, *arrays = dfa_kernels.construct(
            nfa.num_states, start, final, *nfa.arrays(), len(nfa.ref_index), max_states + nfa.trie_states
        )
        refs = list(nfa.ref_index)
        if status == dfa_kernels.ERR_TOO_MANY_NFA_STATES:
            raise _nfa_budget_error(max_states)
        if status == dfa_kernels.ERR_TOO_MANY_STATES:
            raise BudgetExceededError(
                f"rule automaton exceeds {max_states} DFA states; the rule mixes too many overlapping "
                "alternatives or large repetitions -- split it into separate rules or raise max_rule_states"
            )
        if status == 0:
            # The empty language: one dead start state (callers reject empty grammars before this).
            return RuleDfa([False], [[]], [[]], refs)
        # copies: the kernel returns slices of its larger work buffers, which a view would keep alive
        return RuleDfa.from_arrays(tuple(np.array(array) for array in arrays), refs)
