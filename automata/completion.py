"""Shortest completions of the pushdown automaton: for every state, the fewest bytes that finish
its rule from there, and one such byte string.

A stack (top, return states of its frames) finishes the input with the concatenation of each
level's completion, so these per-state strings bound what any configuration still needs; the
token budget (masks/budget.py) turns them into token counts.

The distances solve a grammar's shortest-derivation problem with Knuth's generalisation of
Dijkstra: a byte edge costs 1 plus its target's distance, a reference edge the referenced rule's
shortest string plus its return state's distance.  Both are monotone in their arguments, so a
state is final when it leaves the heap, and each state's recorded choice points at states that
became final before it: following choices always ends.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..core.jit import njit
from . import kernels

UNREACHABLE = np.int64(1) << np.int64(40)
"""Distance of a state whose rule can never end (kept far below int64 overflow when summed)."""

CHOICE_END = 0  # the state accepts: the empty string finishes its rule
CHOICE_BYTE = 1  # a byte edge (choice_arg: the byte), then the completion of choice_next
CHOICE_REF = 2  # a reference edge (choice_arg: the rule), then the completion of choice_next


@njit(cache=True)
def _csr(keys, n_keys):
    """Positions of `keys` grouped by key: (ptr[n_keys + 1], order)."""
    ptr = np.zeros(n_keys + 1, dtype=np.int64)
    for k in keys:
        ptr[k + 1] += 1
    for k in range(n_keys):
        ptr[k + 1] += ptr[k]
    fill = ptr[:-1].copy()
    order = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        order[fill[keys[i]]] = i
        fill[keys[i]] += 1
    return ptr, order


@njit(cache=True)
def _shortest(pda):
    """(dist, choice_kind, choice_arg, choice_next) per state, and the reachable states in the
    order they became final (each one's choice points at earlier ones); see the module docstring."""
    accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start = kernels.pda_views(pda)
    n = accept.shape[0]
    n_rules = rule_start.shape[0]
    state_rule = kernels.blob_section(pda, kernels.PDA_STATE_RULE)
    byte_src = np.empty(byte_dst.shape[0], dtype=np.int64)
    for s in range(n):
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            byte_src[e] = s
    ref_src = np.empty(ref_dst.shape[0], dtype=np.int64)
    for s in range(n):
        for e in range(ref_ptr[s], ref_ptr[s + 1]):
            ref_src[e] = s
    by_dst_ptr, by_dst = _csr(byte_dst.astype(np.int64), n)
    by_ret_ptr, by_ret = _csr(ref_dst.astype(np.int64), n)
    by_rule_ptr, by_rule = _csr(ref_rule.astype(np.int64), n_rules)

    dist = np.full(n, UNREACHABLE, dtype=np.int64)
    kind = np.zeros(n, dtype=np.int8)
    arg = np.full(n, -1, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)
    final = np.zeros(n, dtype=np.bool_)
    order = np.empty(n, dtype=np.int64)
    n_final = 0
    heap = [(np.int64(0), np.int64(0))]
    heap.pop()
    for s in range(n):
        if accept[s]:
            dist[s] = 0
            heap.append((np.int64(0), np.int64(s)))
    heapq.heapify(heap)

    while heap:
        d, s = heapq.heappop(heap)
        if final[s] or d != dist[s]:
            continue
        final[s] = True
        order[n_final] = s
        n_final += 1
        for i in range(by_dst_ptr[s], by_dst_ptr[s + 1]):
            e = by_dst[i]
            u = byte_src[e]
            if not final[u] and d + 1 < dist[u]:
                dist[u] = d + 1
                kind[u] = CHOICE_BYTE
                arg[u] = byte_lo[e]
                nxt[u] = s
                heapq.heappush(heap, (d + 1, u))
        for i in range(by_ret_ptr[s], by_ret_ptr[s + 1]):  # s returns a reference edge
            e = by_ret[i]
            u = ref_src[e]
            callee = rule_start[ref_rule[e]]
            if final[callee] and not final[u] and dist[callee] + d < dist[u]:
                dist[u] = dist[callee] + d
                kind[u] = CHOICE_REF
                arg[u] = ref_rule[e]
                nxt[u] = s
                heapq.heappush(heap, (dist[u], u))
        rule = state_rule[s]
        if rule_start[rule] == s:  # s starts a rule: its callers may now go through it
            for i in range(by_rule_ptr[rule], by_rule_ptr[rule + 1]):
                e = by_rule[i]
                u = ref_src[e]
                t = ref_dst[e]
                if final[t] and not final[u] and d + dist[t] < dist[u]:
                    dist[u] = d + dist[t]
                    kind[u] = CHOICE_REF
                    arg[u] = rule
                    nxt[u] = t
                    heapq.heappush(heap, (dist[u], u))
    return dist, kind, arg, nxt, order[:n_final]


@njit(cache=True)
def expand(pda, kind, arg, nxt, state, out):
    """Write the recorded shortest completion of `state` (a reachable one) into `out`; returns
    its length, or -1 when it does not fit."""
    rule_start = kernels.blob_section(pda, kernels.PDA_RULE_START)
    pending = np.empty(64, dtype=np.int64)  # return states still to finish, innermost last
    n_pending = 0
    n = 0
    s = state
    while True:
        k = kind[s]
        if k == CHOICE_BYTE:
            if n >= out.shape[0]:
                return -1
            out[n] = arg[s]
            n += 1
            s = nxt[s]
        elif k == CHOICE_REF:
            if n_pending == pending.shape[0]:
                grown = np.empty(2 * n_pending, dtype=np.int64)
                grown[:n_pending] = pending
                pending = grown
            pending[n_pending] = nxt[s]
            n_pending += 1
            s = rule_start[arg[s]]
        else:  # CHOICE_END (callers check that `state` is reachable: dist < UNREACHABLE)
            if n_pending == 0:
                return n
            n_pending -= 1
            s = pending[n_pending]


class ShortestCompletions:
    """Per PDA state: `dist` (bytes of the shortest completion of its rule) and, through
    `completion(state)`, one such string; `order`: the reachable states, each after the states
    its completion's first step leads to."""

    def __init__(self, pda):
        self.pda = pda
        self.dist, self._kind, self._arg, self._next, self.order = _shortest(pda.blob)

    def completion(self, state: int, max_bytes: int = 1 << 16) -> bytes | None:
        """The recorded shortest completion of `state`'s rule (None past max_bytes or unreachable)."""
        if self.dist[state] >= UNREACHABLE:
            return None
        out = np.empty(max_bytes, dtype=np.uint8)
        n = expand(self.pda.blob, self._kind, self._arg, self._next, state, out)
        return None if n < 0 else out[:n].tobytes()

    @property
    def choices(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(kind, arg, next) per state: the first step of its recorded completion (CHOICE_*)."""
        return self._kind, self._arg, self._next
