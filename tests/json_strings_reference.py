"""The decoded-string automata operations and the JSON string encoder as they were before the
compile speed-up of issue 18, kept verbatim as the oracle of tests/test_json_strings_identity.py:
the fast versions in pushmask.grammar (json_strings, string_kernels, json_schema's pattern keys)
must build exactly the same automata and grammars."""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import deque
from collections.abc import Callable

from partition_reference import refine_partition

from pushmask.core.limits import DEFAULT_LIMITS
from pushmask.grammar.fsm.codepoint_dfa import ALL_CHARS, Dfa, StateLimitExceeded, intersect_ranges
from pushmask.grammar.ir import MAX_CODE_POINT, alt, lit, seq
from pushmask.grammar.json_schema.leaves import budgeted_dfa_op

_SHORT_ESCAPES = {
    ord('"'): ord('"'),
    ord("\\"): ord("\\"),
    ord("/"): ord("/"),
    ord("b"): 8,
    ord("f"): 12,
    ord("n"): 10,
    ord("r"): 13,
    ord("t"): 9,
}
_RAW_OK = intersect_ranges(((0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODE_POINT)), ALL_CHARS)


class ReferenceDfa(Dfa):
    """codepoint_dfa.Dfa with its trim, minimisation and products as they were (the rest it
    inherits unchanged)."""

    # -- construction --------------------------------------------------------------------------

    def trim(self) -> ReferenceDfa:
        """Drop states that cannot reach a final state or are unreachable; renumber from 0."""
        reverse: list[list[int]] = [[] for _ in self.trans]
        for s, edges in enumerate(self.trans):
            for _, _, t in edges:
                reverse[t].append(s)
        live = set(self.finals)
        queue = deque(live)
        while queue:
            s = queue.popleft()
            for p in reverse[s]:
                if p not in live:
                    live.add(p)
                    queue.append(p)
        if 0 not in live:
            return ReferenceDfa([[]], ())
        number = {0: 0}
        order = [0]
        for s in order:
            for _, _, t in self.trans[s]:
                if t in live and t not in number:
                    number[t] = len(order)
                    order.append(t)
        trans = []
        for s in order:
            edges = []
            for lo, hi, t in self.trans[s]:
                if t in number:
                    if edges and edges[-1][2] == number[t] and edges[-1][1] + 1 == lo:
                        edges[-1] = (edges[-1][0], hi, number[t])
                    else:
                        edges.append((lo, hi, number[t]))
            trans.append(edges)
        return ReferenceDfa(trans, (number[s] for s in self.finals if s in number))

    def minimize(self) -> ReferenceDfa:
        """An equivalent minimal trimmed DFA (incremental Moore refinement, `refine_partition`)."""
        dfa = self.trim()
        n = dfa.size
        preds: list[set[int]] = [set() for _ in range(n)]
        for s, edges in enumerate(dfa.trans):
            for _, _, t in edges:
                preds[t].add(s)

        def signature(s, block):
            merged: list = []
            for lo, hi, t in dfa.trans[s]:
                b = block[t]
                if merged and merged[-1][2] == b and merged[-1][1] + 1 == lo:
                    merged[-1] = (merged[-1][0], hi, b)
                else:
                    merged.append((lo, hi, b))
            return tuple(merged)

        block = refine_partition([1 if s in dfa.finals else 0 for s in range(n)], preds, signature)
        # Rebuild with block 0 = block of the initial state.
        trans_of: dict[int, list] = {}
        for s, edges in enumerate(dfa.trans):
            b = block[s]
            if b not in trans_of:
                trans_of[b] = [(lo, hi, block[t]) for lo, hi, t in edges]
        order = {block[0]: 0}
        for b in trans_of:
            order.setdefault(b, len(order))
        trans: list = [None] * len(order)
        for b, edges in trans_of.items():
            trans[order[b]] = [(lo, hi, order[t]) for lo, hi, t in edges]
        finals = {order[block[s]] for s in dfa.finals}
        return ReferenceDfa(trans, finals).trim()

    # -- boolean operations --------------------------------------------------------------------

    def _product(
        self,
        other: ReferenceDfa,
        final: Callable[[bool, bool], bool],
        keep_dead: bool,
        budget: int,
        minimize: bool = True,
    ) -> ReferenceDfa:
        a, b = self, other

        def step(key):
            s, t = key
            ea = a.trans[s] if s is not None else []
            eb = b.trans[t] if t is not None else []
            for lo, hi, x, y in _merge_edges(ea, eb, keep_dead):
                yield lo, hi, (x, y)

        def is_final(key):
            s, t = key
            return final(s is not None and s in a.finals, t is not None and t in b.finals)

        product = ReferenceDfa.explore((0, 0), step, is_final, budget, "product automaton")
        return product.minimize() if minimize else product

    # minimize=False skips Moore refinement (whose rounds grow with the longest path) when the
    # caller builds near-minimal automata anyway; the result is then only trimmed.

    def intersect(
        self, other: ReferenceDfa, budget: int = DEFAULT_LIMITS.max_string_states, minimize: bool = True
    ) -> ReferenceDfa:
        return self._product(other, lambda x, y: x and y, False, budget, minimize)

    def union(
        self, other: ReferenceDfa, budget: int = DEFAULT_LIMITS.max_string_states, minimize: bool = True
    ) -> ReferenceDfa:
        return self._product(other, lambda x, y: x or y, True, budget, minimize)

    def difference(
        self, other: ReferenceDfa, budget: int = DEFAULT_LIMITS.max_string_states, minimize: bool = True
    ) -> ReferenceDfa:
        return self._product(other, lambda x, y: x and not y, True, budget, minimize)

    __and__ = intersect
    __or__ = union
    __sub__ = difference


def _merge_edges(ea, eb, keep_dead):
    """Overlay two sorted edge lists: yields (lo, hi, target_a|None, target_b|None)."""
    points = set()
    for lo, hi, _ in ea:
        points.add(lo)
        points.add(hi + 1)
    for lo, hi, _ in eb:
        points.add(lo)
        points.add(hi + 1)
    pts = sorted(points)
    i = j = 0
    for k in range(len(pts) - 1):
        lo, hi = pts[k], pts[k + 1] - 1
        while i < len(ea) and ea[i][1] < lo:
            i += 1
        while j < len(eb) and eb[j][1] < lo:
            j += 1
        x = ea[i][2] if i < len(ea) and ea[i][0] <= lo else None
        y = eb[j][2] if j < len(eb) and eb[j][0] <= lo else None
        if x is None and y is None:
            continue
        if not keep_dead and (x is None or y is None):
            continue
        yield lo, hi, x, y


_HEX_DIGIT_CHARS = [
    [(ord("0") + d, ord("0") + d)]
    if d < 10
    else [(ord("A") + d - 10, ord("A") + d - 10), (ord("a") + d - 10, ord("a") + d - 10)]
    for d in range(16)
]


class ReferenceEncoder:
    """Builds the JSON-text DFA of a decoded-language DFA, sharing hex-digit subtrees."""

    def __init__(self, dfa: ReferenceDfa, budget: int):
        self.dfa = dfa
        self.budget = budget
        self.edge_budget = 2 * budget
        self.edges = 0
        self.trans: list[list[tuple[int, int, int]]] = [[] for _ in range(dfa.size)]  # decoded states first
        self.memo: dict = {}

    def set_edges(self, state: int, edges: list) -> None:
        merged: list = []
        for lo, hi, t in sorted(edges):  # adjacent ranges to the same target become one edge
            if merged and merged[-1][2] == t and merged[-1][1] + 1 == lo:
                merged[-1] = (merged[-1][0], hi, t)
            else:
                merged.append((lo, hi, t))
        self.edges += len(merged)
        if self.edges > self.edge_budget:
            raise StateLimitExceeded("JSON string automaton", self.edge_budget, "edges")
        self.trans[state] = merged

    def new_state(self) -> int:
        if len(self.trans) >= self.budget:
            raise StateLimitExceeded("JSON string automaton", self.budget)
        self.trans.append([])
        return len(self.trans) - 1

    def target_state(self, key) -> int:
        """The encoder state reached after a complete code unit/point with `key`."""
        kind, value = key
        if kind == "D":
            return value
        # ("P", residual): after a high surrogate; expect \uDC00-\uDFFF
        memo_key = ("pair", value)
        if memo_key not in self.memo:
            s = self.new_state()
            self.memo[memo_key] = s
            u = self.new_state()
            self.set_edges(s, [(ord("\\"), ord("\\"), u)])
            segs = [(0xDC00 + lo, 0xDC00 + hi, ("D", t)) for lo, hi, t in value]
            root = self.hex_tree(4, 0, tuple(segs))
            if root is not None:
                self.set_edges(u, [(ord("u"), ord("u"), root)])
        return self.memo[memo_key]

    def hex_tree(self, level: int, base: int, segs: tuple) -> int | None:
        """State reading `level` hex digits of a code unit in [base, base + 16**level)."""
        size = 16**level
        inside = tuple(
            (max(lo, base) - base, min(hi, base + size - 1) - base, k)
            for lo, hi, k in segs
            if hi >= base and lo < base + size
        )
        if not inside:
            return None
        if level == 0:
            return self.target_state(inside[0][2])
        if len(inside) == 1 and inside[0][0] == 0 and inside[0][1] == size - 1:
            memo_key = ("uniform", level, inside[0][2])
        else:
            memo_key = ("tree", level, inside)
        if memo_key in self.memo:
            return self.memo[memo_key]
        s = self.new_state()
        self.memo[memo_key] = s
        child_size = size // 16
        edges = []
        for d in range(16):
            lo = d * child_size
            sub = tuple((a, b, k) for a, b, k in inside if b >= lo and a < lo + child_size)
            child = self.hex_tree(level - 1, d * child_size, sub) if sub else None
            if child is not None:
                edges.extend((a, b, child) for a, b in _HEX_DIGIT_CHARS[d])
        self.set_edges(s, edges)
        return s

    def bmp_segments(self, state: int) -> tuple:
        """Code unit -> key for the \\uXXXX escape from `state` (high surrogates lead to pairs)."""
        edges = self.dfa.trans[state]
        segs = [(lo, min(hi, 0xFFFF), ("D", t)) for lo, hi, t in edges if lo <= 0xFFFF]
        high: list = []
        h = 0
        while h < 1024:
            block_lo = 0x10000 + h * 1024
            k = bisect_right(edges, (block_lo, MAX_CODE_POINT + 1, 0)) - 1
            if k >= 0 and edges[k][0] <= block_lo <= edges[k][1]:
                lo, hi, t = edges[k]
                full = (hi - block_lo + 1) // 1024
                if full >= 1:
                    high.append((h, h + full - 1, ((0, 1023, t),)))
                    h += full
                    continue
            else:
                nxt = edges[k + 1][0] if k + 1 < len(edges) else MAX_CODE_POINT + 1
                empty = (nxt - block_lo) // 1024
                if empty >= 1:
                    h += empty
                    continue
            residual = tuple(
                (max(lo, block_lo) - block_lo, min(hi, block_lo + 1023) - block_lo, t)
                for lo, hi, t in edges
                if hi >= block_lo and lo <= block_lo + 1023
            )
            high.append((h, h, residual))
            h += 1
        for a, b, residual in high:
            segs.append((0xD800 + a, 0xD800 + b, ("P", residual)))
        segs.sort(key=lambda x: x[0])
        merged: list = []
        for seg in segs:
            if merged and merged[-1][2] == seg[2] and merged[-1][1] + 1 == seg[0]:
                merged[-1] = (merged[-1][0], seg[1], seg[2])
            else:
                merged.append(seg)
        return tuple(merged)

    def run(self) -> Dfa:
        dfa = self.dfa
        for s in range(dfa.size):
            edges = dfa.trans[s]
            raw = []
            for lo, hi, t in _merge_ranges_with_targets(edges, _RAW_OK):
                raw.append((lo, hi, t))
            if edges:
                esc = self.new_state()
                esc_edges = []
                for ch, cp in _SHORT_ESCAPES.items():
                    t = dfa.step(s, cp)
                    if t is not None:
                        esc_edges.append((ch, ch, t))
                root = self.hex_tree(4, 0, self.bmp_segments(s))
                if root is not None:
                    esc_edges.append((ord("u"), ord("u"), root))
                self.set_edges(esc, esc_edges)
                raw.append((ord("\\"), ord("\\"), esc))
            self.set_edges(s, raw)
        return ReferenceDfa(self.trans, dfa.finals).trim()


def _merge_ranges_with_targets(edges, allowed):
    for lo, hi, t in edges:
        for a, b in intersect_ranges(((lo, hi),), allowed):
            yield a, b, t


def reference_encode(dfa: ReferenceDfa, budget: int = 100_000) -> ReferenceDfa:
    return ReferenceEncoder(dfa, budget).run()


def reference_string_literal_expr(value: str):
    """json_strings.string_literal_expr before its one-literal shortcut for plain strings."""
    parts = [lit('"')]
    for ch in value:
        spellings = {json.dumps(ch)[1:-1], json.dumps(ch, ensure_ascii=False)[1:-1]}
        parts.append(alt(*(lit(s) for s in sorted(spellings))))
    parts.append(lit('"'))
    return seq(*parts)


def reference_keys_by_patterns(key_dfa, pdfas, overlapping, wanted, pointer, budget=None):
    """The keys of each mask as json_schema.unnamed_members computed them before issue 18: every
    mask from key_dfa, pattern by pattern (intersect or subtract), unwanted masks dropped after."""
    masks = range(1 << len(pdfas)) if overlapping else [0] + [1 << i for i in range(len(pdfas))]
    found = []
    for mask in masks:
        dfa = key_dfa
        for i, pdfa in enumerate(pdfas):
            dfa = budgeted_dfa_op(
                dfa.intersect if mask >> i & 1 else dfa.difference, pdfa, "patternProperties", pointer
            )
            if dfa.is_empty():
                break
        if not dfa.is_empty() and mask in wanted:
            found.append((mask, dfa))
    return found
