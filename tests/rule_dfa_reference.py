"""The rule-DFA construction as it was in pure Python (pushmask 0.1, before the numba kernels of
automata/dfa_kernels.py), kept verbatim as the oracle of tests/test_rule_dfa.py.

The numba construction must produce the same RuleDfa, bit for bit: same states, same breadth-first
numbering, same merged byte ranges, same reference edges.  minimize_up_to was the module constant
MINIMIZE_UP_TO (DFAs with more states after trimming were left unminimised).
"""

from __future__ import annotations

import gc

from partition_reference import refine_partition

from pushmask.automata.dfa import RuleDfa
from pushmask.automata.utf8 import utf8_byte_ranges
from pushmask.core.errors import LimitExceededError
from pushmask.grammar.ir import Alt, ByteClass, Bytes, CharClass, CharFsm, Expr, Ref, Repeat, Seq


class _Nfa:
    """A Thompson NFA: epsilon, byte-range and rule-reference edges."""

    def __init__(self, max_states: int):
        self.eps: list[list[int]] = []
        self.bytes: list[list[tuple[int, int, int]]] = []
        self.refs: list[list[tuple[int, int]]] = []
        self.ref_index: dict[str, int] = {}
        self.memo: dict[tuple[int, int], tuple[int, Expr]] = {}
        self.max_states = max_states

    def new_state(self) -> int:
        if len(self.eps) >= self.max_states:
            raise LimitExceededError(
                f"rule automaton exceeds {self.max_states} NFA states; simplify large repetitions "
                "(e.g. x{0,10000}) or raise the max_rule_states limit"
            )
        self.eps.append([])
        self.bytes.append([])
        self.refs.append([])
        return len(self.eps) - 1

    def byte_path(self, start: int, ranges, end: int) -> None:
        """Edges from start to end through fresh states, one byte range per step."""
        here = start
        for i, (lo, hi) in enumerate(ranges):
            there = end if i == len(ranges) - 1 else self.new_state()
            self.bytes[here].append((lo, hi, there))
            here = there

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
                there = self.new_state()
                self.bytes[there].append((b, b, here))
                here = there
            return here
        if isinstance(expr, ByteClass):
            start = self.new_state()
            for lo, hi in expr.ranges:
                self.bytes[start].append((lo, hi, end))
            return start
        if isinstance(expr, CharClass):
            start = self.new_state()
            for lo, hi in expr.ranges:
                for byte_ranges in utf8_byte_ranges(lo, hi):
                    self.byte_path(start, byte_ranges, end)
            return start
        if isinstance(expr, Seq):
            here = end
            for item in reversed(expr.items):
                here = self.build(item, here)
            return here
        if isinstance(expr, Alt):
            start = self.new_state()
            for item in expr.items:
                self.eps[start].append(self.build(item, end))
            return start
        if isinstance(expr, Repeat):
            here = end
            if expr.max is None:
                loop = self.new_state()
                self.eps[loop].append(here)
                self.eps[loop].append(self._build(expr.item, loop))
                here = loop
            else:
                for _ in range(expr.max - expr.min):
                    optional = self.new_state()
                    self.eps[optional].append(here)
                    self.eps[optional].append(self._build(expr.item, here))
                    here = optional
            for _ in range(expr.min):
                here = self._build(expr.item, here)
            return here
        if isinstance(expr, Ref):
            index = self.ref_index.setdefault(expr.name, len(self.ref_index))
            start = self.new_state()
            self.refs[start].append((index, end))
            return start
        if isinstance(expr, CharFsm):
            states = {q: self.new_state() for q in _fsm_states(expr)}
            for q in expr.finals:
                if q in states:
                    self.eps[states[q]].append(end)
            for src, lo, hi, dst in expr.transitions:
                for byte_ranges in utf8_byte_ranges(lo, hi):
                    self.byte_path(states[src], byte_ranges, states[dst])
            return states[expr.initial]
        raise TypeError(f"not an IR expression: {expr!r}")


def _fsm_states(fsm: CharFsm) -> list[int]:
    seen = {fsm.initial}
    for src, _, _, dst in fsm.transitions:
        seen.add(src)
        seen.add(dst)
    return sorted(seen)


def construct_rule_dfa_python(body: Expr, max_states: int, minimize_up_to: int = 2000) -> RuleDfa:
    """Thompson NFA -> subset construction -> trim -> minimise -> breadth-first numbering."""
    # The construction allocates many small lists that never form cycles: pausing the cyclic
    # garbage collector avoids repeated full scans of them.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        nfa = _Nfa(max_states)
        final = nfa.new_state()
        start = nfa.build(body, final)
        accepting, byte_edges, ref_edges = _determinize(nfa, start, final, max_states)
        accepting, byte_edges, ref_edges = _trim(accepting, byte_edges, ref_edges)
        if not accepting:
            # The empty language: one dead start state (callers reject empty grammars before this).
            return RuleDfa([False], [[]], [[]], list(nfa.ref_index))
        if len(accepting) <= minimize_up_to:
            accepting, byte_edges, ref_edges = _minimize(accepting, byte_edges, ref_edges)
        accepting, byte_edges, ref_edges = _bfs_renumber(accepting, byte_edges, ref_edges)
        return RuleDfa(accepting, byte_edges, ref_edges, list(nfa.ref_index))
    finally:
        if gc_was_enabled:
            gc.enable()


def _determinize(nfa: _Nfa, start: int, final: int, max_states: int):
    closure_memo: dict[int, frozenset[int]] = {}

    def closure_of(state: int) -> frozenset[int]:
        got = closure_memo.get(state)
        if got is None:
            seen = {state}
            stack = [state]
            while stack:
                for nxt in nfa.eps[stack.pop()]:
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            got = closure_memo[state] = frozenset(seen)
        return got

    def closure_of_set(states) -> frozenset[int]:
        out: set[int] = set()
        for s in states:
            out |= closure_of(s)
        return frozenset(out)

    first = closure_of(start)
    index = {first: 0}
    order = [first]
    accepting: list[bool] = []
    byte_edges: list[list[tuple[int, int, int]]] = []
    ref_edges: list[list[tuple[int, int]]] = []

    def state_id(subset: frozenset[int]) -> int:
        got = index.get(subset)
        if got is None:
            if len(order) >= max_states:
                raise LimitExceededError(
                    f"rule automaton exceeds {max_states} DFA states; the rule mixes too many overlapping "
                    "alternatives or large repetitions -- split it into separate rules or raise max_rule_states"
                )
            got = index[subset] = len(order)
            order.append(subset)
        return got

    i = 0
    while i < len(order):
        subset = order[i]
        i += 1
        accepting.append(final in subset)
        edges = [edge for s in subset for edge in nfa.bytes[s]]
        byte_edges.append(_split_intervals(edges, closure_of_set, state_id))
        by_ref: dict[int, set[int]] = {}
        for s in subset:
            for ref_index, dst in nfa.refs[s]:
                by_ref.setdefault(ref_index, set()).add(dst)
        ref_edges.append(sorted((r, state_id(closure_of_set(dsts))) for r, dsts in by_ref.items()))
    return accepting, byte_edges, ref_edges


def _split_intervals(edges, closure_of_set, state_id) -> list[tuple[int, int, int]]:
    """Overlapping (lo, hi, nfa_target) ranges -> disjoint (lo, hi, dfa_target) ranges (a sweep)."""
    if not edges:
        return []
    if len(edges) == 1:
        lo, hi, dst = edges[0]
        return [(lo, hi, state_id(closure_of_set((dst,))))]
    events: dict[int, list] = {}
    for lo, hi, dst in edges:
        events.setdefault(lo, []).append((1, dst))
        events.setdefault(hi + 1, []).append((-1, dst))
    active: dict[int, int] = {}
    out: list[tuple[int, int, int]] = []
    points = sorted(events)
    for a, b in zip(points, points[1:]):
        for delta, dst in events[a]:
            count = active.get(dst, 0) + delta
            if count:
                active[dst] = count
            else:
                active.pop(dst, None)
        if not active:
            continue
        target = state_id(closure_of_set(active))
        if out and out[-1][2] == target and out[-1][1] == a - 1:
            out[-1] = (out[-1][0], b - 1, target)
        else:
            out.append((a, b - 1, target))
    return out


def _trim(accepting, byte_edges, ref_edges):
    """Drop states from which no accepting state is reachable (so every kept state can still finish)."""
    n = len(accepting)
    reverse: list[list[int]] = [[] for _ in range(n)]
    for s in range(n):
        for _, _, t in byte_edges[s]:
            reverse[t].append(s)
        for _, t in ref_edges[s]:
            reverse[t].append(s)
    live = [False] * n
    stack = [s for s in range(n) if accepting[s]]
    for s in stack:
        live[s] = True
    while stack:
        for p in reverse[stack.pop()]:
            if not live[p]:
                live[p] = True
                stack.append(p)
    if not live[0]:
        return [], [], []
    if all(live):
        return accepting, byte_edges, ref_edges
    new_id = {}
    for s in range(n):
        if live[s]:
            new_id[s] = len(new_id)
    keep = [s for s in range(n) if live[s]]
    return (
        [accepting[s] for s in keep],
        [[(lo, hi, new_id[t]) for lo, hi, t in byte_edges[s] if live[t]] for s in keep],
        [[(r, new_id[t]) for r, t in ref_edges[s] if live[t]] for s in keep],
    )


def _minimize(accepting, byte_edges, ref_edges):
    """Moore partition refinement over interval-labelled edges (`refine_partition`)."""
    n = len(accepting)
    preds: list[set[int]] = [set() for _ in range(n)]
    for s in range(n):
        for _, _, t in byte_edges[s]:
            preds[t].add(s)
        for _, t in ref_edges[s]:
            preds[t].add(s)

    def signature(s, block):
        merged: list[list[int]] = []
        for lo, hi, t in byte_edges[s]:
            bt = block[t]
            if merged and merged[-1][2] == bt and merged[-1][1] == lo - 1:
                merged[-1][1] = hi
            else:
                merged.append([lo, hi, bt])
        return tuple(map(tuple, merged)), tuple((r, block[t]) for r, t in ref_edges[s])

    block = refine_partition([1 if a else 0 for a in accepting], preds, signature)
    representative: dict[int, int] = {}
    for s in range(n):
        representative.setdefault(block[s], s)
    start_block = block[0]
    # Renumber blocks so that the start state's block is 0; edges re-merged after mapping.
    ordered = [start_block] + sorted(set(block) - {start_block})
    new_id = {b: i for i, b in enumerate(ordered)}
    out_accepting, out_bytes, out_refs = [], [], []
    for b in ordered:
        s = representative[b]
        out_accepting.append(accepting[s])
        merged: list[tuple[int, int, int]] = []
        for lo, hi, t in byte_edges[s]:
            nt = new_id[block[t]]
            if merged and merged[-1][2] == nt and merged[-1][1] == lo - 1:
                merged[-1] = (merged[-1][0], hi, nt)
            else:
                merged.append((lo, hi, nt))
        out_bytes.append(merged)
        out_refs.append([(r, new_id[block[t]]) for r, t in ref_edges[s]])
    return out_accepting, out_bytes, out_refs


def _bfs_renumber(accepting, byte_edges, ref_edges):
    order = [0]
    new_id = {0: 0}
    i = 0
    while i < len(order):
        s = order[i]
        i += 1
        for t in [t for _, _, t in byte_edges[s]] + [t for _, t in ref_edges[s]]:
            if t not in new_id:
                new_id[t] = len(order)
                order.append(t)
    return (
        [accepting[s] for s in order],
        [[(lo, hi, new_id[t]) for lo, hi, t in byte_edges[s]] for s in order],
        [[(r, new_id[t]) for r, t in ref_edges[s]] for s in order],
    )
