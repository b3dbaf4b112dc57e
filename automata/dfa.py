"""One rule body (an IR expression) -> a trimmed, minimised byte-level DFA with rule-reference edges.

Rule references are letters of the alphabet like bytes: a DFA state has at most one edge per
referenced rule.  References are numbered locally (order in which the construction meets them),
so the construction never depends on rule names and two rules with the same body and the same
referenced rules produce the same DFA, which is what lets masks be shared across grammars.

The body is walked once in Python (`_structure_digest`), written as a pre-order integer stream
that is both the cache key and the input of the numba construction (Thompson NFA, subset
construction, trim, minimise, breadth-first numbering: automata/thompson_kernels.py,
automata/dfa_kernels.py).

Alternations of many literals (enums, word lists, property names) enter the NFA as a trie, built
in linear time and already deterministic, so their size is bounded by the literals' bytes
instead of by the determinisation limit (see TRIE_STATES_FACTOR).
"""

from __future__ import annotations

import hashlib
import itertools
import weakref
from array import array

import numpy as np

from ..core.caches import BoundedCache
from ..core.errors import LimitExceededError
from ..grammar.ir import Alt, ByteClass, Bytes, CharClass, CharFsm, Expr, Ref, Repeat, Seq, char_fsm_table
from . import dfa_kernels, thompson_kernels
from .thompson_kernels import ALT, BACK, BYTE_RANGES, BYTES, CHARS, FSM, REF, REPEAT, SEQ


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

    def __init__(
        self,
        accepting: list[bool],
        byte_edges: list[list[tuple[int, int, int]]],
        ref_edges: list[list[tuple[int, int]]],
        refs: list[str],
    ):
        self._lists: tuple | None = (list(accepting), byte_edges, ref_edges)
        self._arrays: tuple[np.ndarray, ...] | None = None
        self.refs = refs
        self._digest: bytes | None = None

    @classmethod
    def from_arrays(cls, arrays: tuple[np.ndarray, ...], refs: list[str], digest: bytes | None = None) -> RuleDfa:
        """The DFA of these arrays; `digest`, when given, is theirs (`digest()`), from a DFA that
        holds the same arrays."""
        dfa = cls.__new__(cls)
        dfa._lists, dfa._arrays, dfa.refs, dfa._digest = None, tuple(arrays), refs, digest
        return dfa

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        if self._arrays is None:
            accepting, byte_edges, ref_edges = self._edge_lists()
            byte_rows = [edge for edges in byte_edges for edge in edges]
            ref_rows = [edge for edges in ref_edges for edge in edges]
            byte_cols = np.array(byte_rows, dtype=np.int32).reshape(-1, 3).T
            ref_cols = np.array(ref_rows, dtype=np.int32).reshape(-1, 2).T
            self._arrays = (
                np.array(accepting, dtype=np.bool_),
                np.cumsum([0] + [len(edges) for edges in byte_edges]),
                *byte_cols,
                np.cumsum([0] + [len(edges) for edges in ref_edges]),
                *ref_cols,
            )
        return self._arrays

    def _edge_lists(self) -> tuple:
        if self._lists is None:
            accepting, byte_ptr, lo, hi, dst, ref_ptr, ref_index, ref_dst = (a.tolist() for a in self.arrays)
            byte_edges = list(zip(lo, hi, dst))
            ref_edges = list(zip(ref_index, ref_dst))
            n = len(accepting)
            self._lists = (
                accepting,
                [byte_edges[byte_ptr[s] : byte_ptr[s + 1]] for s in range(n)],
                [ref_edges[ref_ptr[s] : ref_ptr[s + 1]] for s in range(n)],
            )
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

    def nbytes(self) -> int:
        """Bytes of the flat arrays (what a cached DFA holds once its edge lists are dropped)."""
        return sum(table.nbytes for table in self.arrays)

    @property
    def num_states(self) -> int:
        return len(self._arrays[0]) if self._arrays is not None else len(self.accepting)

    def signature(self) -> tuple:
        """A hashable structural description (references by local index)."""
        return (
            tuple(self.accepting),
            tuple(tuple(edges) for edges in self.byte_edges),
            tuple(tuple(edges) for edges in self.ref_edges),
        )

    def digest(self) -> bytes:
        """A digest of the structure (references by local index): equal for equal automata."""
        if self._digest is None:
            h = hashlib.blake2b(digest_size=16)
            for table in self.arrays:
                h.update(np.ascontiguousarray(table, dtype=np.int64).tobytes())
                h.update(b"|")
            self._digest = h.digest()
        return self._digest

    def __eq__(self, other) -> bool:
        if not isinstance(other, RuleDfa):
            return NotImplemented
        return self.refs == other.refs and all(np.array_equal(a, b) for a, b in zip(self.arrays, other.arrays))

    def __repr__(self) -> str:
        return f"RuleDfa(states={self.num_states}, refs={self.refs})"


FSM_LAYOUT_TRANSITIONS = 1_000_000
"""Transitions of the CharFsm layouts kept per process (least recently used first out; 16 bytes
each): key-exclusion automata have tens of thousands of transitions.  An entry names its
automaton by a weak reference: holding it would keep its transition tuples (about ten times the
layout's bytes) alive for nothing, as a dead automaton is never looked up again."""
_fsm_layouts: BoundedCache[int, tuple[weakref.ref[CharFsm], tuple[int, np.ndarray, np.ndarray, int]]] = BoundedCache(
    FSM_LAYOUT_TRANSITIONS, cost=lambda entry: len(entry[1][1]), name="automaton layouts (automata/dfa.py)"
)


def _fsm_layout(fsm: CharFsm) -> tuple[int, np.ndarray, np.ndarray, int]:
    """(number of states, transitions as a [k, 4] array, final states, initial state) with the
    automaton's states renumbered 0.. in increasing order (finals that no transition or the
    initial state mentions are dropped).  Cached per object: regex and key-exclusion automata
    have up to tens of thousands of transitions, and string automata recur in many rules."""
    got = _fsm_layouts.get(id(fsm))
    if got is not None and got[0]() is fsm:
        return got[1]
    transitions = char_fsm_table(fsm)  # read-only: renumbered into a copy below if need be
    if transitions is None:
        transitions = np.fromiter(
            itertools.chain.from_iterable(fsm.transitions), dtype=np.int32, count=4 * len(fsm.transitions)
        ).reshape(-1, 4)
    ends = transitions[:, [0, 3]]
    top = max(int(ends.max(initial=0)), fsm.initial)
    if top < 16 * (len(transitions) + 1):  # the states that a transition or the initial state mentions
        mentioned = np.zeros(top + 1, dtype=np.bool_)
        mentioned[ends.ravel()] = mentioned[fsm.initial] = True
        states = np.flatnonzero(mentioned)  # linear, unlike sorting
    else:  # sparse state numbers
        states = np.unique(np.append(ends, fsm.initial))
    if states[0] != 0 or states[-1] != len(states) - 1:  # else the numbering is already 0..n-1
        transitions = transitions.copy()
        transitions[:, 0] = np.searchsorted(states, transitions[:, 0])
        transitions[:, 3] = np.searchsorted(states, transitions[:, 3])
    finals = np.array(sorted(fsm.finals), dtype=np.int64)
    at = np.minimum(np.searchsorted(states, finals), len(states) - 1)
    finals = at[states[at] == finals]  # the numbers of the finals that are states, ascending
    layout = (len(states), transitions, finals, int(np.searchsorted(states, fsm.initial)))
    # a dead automaton's entry under a reused id is replaced (its weak reference names nothing)
    _fsm_layouts.put(id(fsm), (weakref.ref(fsm), layout))
    return layout


TRIE_STATES_FACTOR = 10
"""Literal tries may hold this many times `max_rule_states` states.  A trie cannot blow up (its
states are at most the literals' bytes), so its states are counted apart from the
`max_rule_states` budget, which guards against determinisation's exponential cases."""
TRIE_MIN_LITERALS = 16
"""Alternations with at least this many literals build them as a trie (fewer: one path each):
one state per distinct prefix, built in one pass over the sorted literals
(`dfa_kernels.literal_trie`), so enums and word lists of any size cost linear time and their
automaton is already deterministic."""


def _nfa_budget_error(max_states: int, what: str = "") -> LimitExceededError:
    return LimitExceededError(
        f"rule automaton exceeds {max_states} NFA states{' (' + what + ')' if what else ''}; simplify large "
        "repetitions (e.g. x{0,10000}) or raise the max_rule_states limit"
    )


DFA_CACHE_BYTES = 64 << 20
"""Bytes of the rule DFAs' arrays kept per process (least recently used first out).  300
MaskBench schemas leave 3,000 rule DFAs of about 38 MiB; the bound was 2,000,000 states (about
60 bytes each with their edges, so ~120 MiB) before it was weighed in bytes."""
_dfa_cache: BoundedCache[tuple[bytes, int], tuple[RuleDfa, tuple[int, ...]]] = BoundedCache(
    DFA_CACHE_BYTES, cost=lambda entry: entry[0].nbytes(), name="rule DFAs (automata/dfa.py)"
)


def build_rule_dfa(body: Expr, max_states: int = 100_000) -> RuleDfa:
    """The rule's DFA; bodies equal up to the names of the rules they reference share one
    construction per process (JSON strings, numbers and members recur across schemas)."""
    walk = _structure_digest(body)
    digest, position, _ = walk
    names = list(position)
    key = (digest, max_states)
    got = _dfa_cache.get(key)
    if got is None:
        dfa = _construct_rule_dfa(body, max_states, walk)
        # the cache keeps a copy made of the arrays alone: edge lists built on `dfa` later stay out
        kept = RuleDfa.from_arrays(dfa.arrays, dfa.refs)
        _dfa_cache.put(key, (kept, tuple(position[name] for name in dfa.refs)))
        return dfa
    dfa, ref_positions = got
    return RuleDfa.from_arrays(dfa.arrays, [names[i] for i in ref_positions], dfa.digest())


def _structure_digest(body: Expr) -> tuple[bytes, dict[str, int], tuple]:
    """A 128-bit digest of the body's structure with each reference replaced by the position of
    its rule among the referenced rules (in order of first occurrence), those positions by name,
    and the encoding the digest hashes (what `_construct_rule_dfa` builds the automaton from):
    equal digests mean equal bodies up to the names of the referenced rules.

    The body is written out once in pre-order as fixed-width integers (tags, counts, bounds,
    lengths, positions: the stream thompson_kernels.py reads) plus the literal bytes they
    announce, and the two streams are hashed together; the integers say where each literal
    starts, so the encoding is unambiguous.  A node shared by several parents (the DAGs the JSON
    Schema compiler builds) is written once and referred back to by its visit number after
    that, so the walk stays linear in the DAG's size.  Two equal trees shared differently digest
    differently, which only costs a cache miss.  An automaton (CharFsm) is written as the number
    of its content in this process (`_fsm_number`), so the digest is a key within one process
    only.

    The encoding: (the integers as an array("q"), the literal bytes, the CharFsm nodes in visit
    order, (visit number, node) of the alternations with enough items to hold a literal trie).
    """
    numbers: list[int] = []
    literals: list[bytes] = []
    fsms: list[CharFsm] = []
    wide_alts: list[tuple[int, Alt]] = []
    visit: dict[int, int] = {}
    ref_position: dict[str, int] = {}
    stack = [body]
    while stack:
        node = stack.pop()
        seen = visit.get(id(node))
        if seen is not None:
            numbers += (BACK, seen)
            continue
        visit[id(node)] = len(visit)
        if type(node) is Seq:
            numbers += (SEQ, len(node.items))
            stack.extend(reversed(node.items))
        elif type(node) is Alt:
            numbers += (ALT, len(node.items))
            stack.extend(reversed(node.items))
            if len(node.items) >= TRIE_MIN_LITERALS:
                wide_alts.append((len(visit) - 1, node))
        elif type(node) is Bytes:
            numbers += (BYTES, len(node.value))
            literals.append(node.value)
        elif type(node) is Repeat:
            numbers += (REPEAT, node.min, -1 if node.max is None else node.max)
            stack.append(node.item)
        elif type(node) is Ref:
            numbers += (REF, ref_position.setdefault(node.name, len(ref_position)))
        elif type(node) is CharClass or type(node) is ByteClass:
            numbers += (CHARS if type(node) is CharClass else BYTE_RANGES, len(node.ranges))
            for lo, hi in node.ranges:
                numbers += (lo, hi)
        elif type(node) is CharFsm:  # no references inside: its digest is kept on it
            try:
                data = node._digest
            except AttributeError:
                data = _fsm_number(node)
                object.__setattr__(node, "_digest", data)
            numbers += (FSM, len(data))
            literals.append(data)
            fsms.append(node)
        else:
            raise TypeError(f"not an IR expression: {node!r}")
    stream = array("q", numbers)
    literal_bytes = b"".join(literals)
    digest = hashlib.blake2b(stream.tobytes(), digest_size=16)
    digest.update(literal_bytes)
    return digest.digest(), ref_position, (stream, literal_bytes, fsms, wide_alts)


FSM_NUMBERS_TRANSITIONS = 1_000_000
"""Transitions of the automata numbered by content kept per process (least recently used first out)."""
_fsm_numbers: BoundedCache[tuple, tuple[bytes, int]] = BoundedCache(
    FSM_NUMBERS_TRANSITIONS, cost=lambda entry: entry[1], name="automaton content numbers (automata/dfa.py)"
)
_fsm_counter = itertools.count()


def _fsm_number(fsm: CharFsm) -> bytes:
    """The number of the automaton's content (initial state, finals, transitions) in this process,
    as 8 bytes: equal automata built apart share it, and a number is never given to other
    content (the counter never restarts, so forgetting an entry only costs cache misses).
    Hashing and comparing the transition tuples runs in C, unlike writing them out to digest."""
    table = char_fsm_table(fsm)
    # an automaton built from arrays is keyed by a 128-bit digest of them (hashing bytes is far
    # cheaper than hashing tuples): equal content in the two forms gets two numbers, which only
    # costs cache misses
    content = fsm.transitions if table is None else hashlib.blake2b(table.tobytes(), digest_size=16).digest()
    key = (fsm.initial, frozenset(fsm.finals), content)
    entry = _fsm_numbers.get(key)
    if entry is None:
        # two threads numbering the same content at once give it two numbers: cache misses only
        entry = (next(_fsm_counter).to_bytes(8, "little"), len(fsm.transitions))
        _fsm_numbers.put(key, entry)
    return entry[0]


def clear_dfa_cache() -> None:
    """Forget every cached rule DFA and automaton layout (for cold-start measurements)."""
    _dfa_cache.clear()
    _fsm_layouts.clear()
    _fsm_numbers.clear()  # the counter goes on: a number stays with its content


def _construct_rule_dfa(body: Expr, max_states: int, walk: tuple | None = None) -> RuleDfa:
    """Thompson NFA -> subset construction -> trim -> minimise -> breadth-first numbering, in
    numba (`thompson_kernels.rule_dfa`) from the body's encoding; `walk` is the body's
    `_structure_digest`, when the caller has it."""
    _, position, (stream, literal_bytes, fsms, wide_alts) = walk or _structure_digest(body)
    status, ref_order, *arrays = thompson_kernels.rule_dfa(
        np.frombuffer(stream, dtype=np.int64),
        np.frombuffer(literal_bytes, dtype=np.uint8),
        *_fsm_tables(fsms),
        *_trie_tables(wide_alts),
        len(position),
        max_states,
        TRIE_STATES_FACTOR * max_states,
    )
    names = list(position)
    refs = [names[i] for i in ref_order.tolist()]
    if status == dfa_kernels.ERR_TOO_MANY_NFA_STATES:
        raise _nfa_budget_error(max_states)
    if status == thompson_kernels.ERR_TOO_MANY_TRIE_STATES:
        raise _nfa_budget_error(
            max_states, f"a set of literals has more than {TRIE_STATES_FACTOR * max_states} distinct prefixes"
        )
    if status == dfa_kernels.ERR_TOO_MANY_STATES:
        raise LimitExceededError(
            f"rule automaton exceeds {max_states} DFA states; the rule mixes too many overlapping "
            "alternatives or large repetitions -- split it into separate rules or raise max_rule_states"
        )
    if status == 0:
        # The empty language: one dead start state (callers reject empty grammars before this).
        return RuleDfa([False], [[]], [[]], refs)
    # copies: the kernel returns slices of its larger work buffers, which a view would keep alive
    return RuleDfa.from_arrays(tuple(np.array(array) for array in arrays), refs)


def _fsm_tables(fsms: list[CharFsm]) -> tuple[np.ndarray, ...]:
    """The layouts of the CharFsm nodes (visit order) as thompson_kernels.thompson_nfa takes them:
    (transition offsets, transitions, (number of states, initial) rows, final offsets, finals)."""
    if not fsms:
        return _NO_FSMS
    layouts = [_fsm_layout(fsm) for fsm in fsms]
    return (
        _offsets([len(transitions) for _, transitions, _, _ in layouts]),
        np.concatenate([transitions for _, transitions, _, _ in layouts]),
        np.array([(n_states, initial) for n_states, _, _, initial in layouts], dtype=np.int64),
        _offsets([len(finals) for _, _, finals, _ in layouts]),
        np.concatenate([finals for _, _, finals, _ in layouts]),
    )


def _trie_tables(wide_alts: list[tuple[int, Alt]]) -> tuple[np.ndarray, ...]:
    """The alternations with at least TRIE_MIN_LITERALS literal items, as thompson_kernels.thompson_nfa
    takes them: (their visit numbers, word offsets per alternation, byte offsets per word, the
    sorted distinct words of each, concatenated)."""
    nodes: list[int] = []
    words: list[bytes] = []
    word_counts: list[int] = []
    for node, alt in wide_alts:
        literals = [item.value for item in alt.items if isinstance(item, Bytes)]
        if len(literals) >= TRIE_MIN_LITERALS:
            distinct = sorted(set(literals))
            nodes.append(node)
            words += distinct
            word_counts.append(len(distinct))
    if not nodes:
        return _NO_TRIES
    return (
        np.array(nodes, dtype=np.int64),
        _offsets(word_counts),
        _offsets([len(word) for word in words]),
        np.frombuffer(b"".join(words), dtype=np.uint8),
    )


def _offsets(lengths: list[int]) -> np.ndarray:
    """Start offsets of consecutive pieces of these lengths, and the end."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


_NO_FSMS = (
    np.zeros(1, np.int64),
    np.empty((0, 4), np.int32),
    np.empty((0, 2), np.int64),
    np.zeros(1, np.int64),
    np.empty(0, np.int64),
)
_NO_TRIES = (np.empty(0, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64), np.frombuffer(b"", dtype=np.uint8))
