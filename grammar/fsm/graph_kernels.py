"""Small numba building blocks the automaton kernels share: growing work arrays, grouping edges
by target, and backward reachability (which states can reach a final state, which parse facts
lead to a root)."""

from __future__ import annotations

import numpy as np

from ...core.jit import njit


@njit(cache=True)
def grown(arr, need):
    """`arr` (1-d or 2-d) with room for at least `need` rows, contents kept."""
    size = arr.shape[0]
    while size < need:
        size = 2 * size + 16
    out = np.empty((size,) + arr.shape[1:], arr.dtype)
    out[: arr.shape[0]] = arr
    return out


@njit(cache=True)
def grouped(keys, values, n):
    """values[k] grouped by keys[k] in 0..n-1, as CSR: the values with key v are
    out[ptr[v]:ptr[v + 1]], in input order.  Edges src -> dst grouped by target
    (`grouped(dst, src, n)`) give each node's predecessors; by source, its successors."""
    ptr = np.zeros(n + 1, np.int64)
    for k in range(keys.shape[0]):
        ptr[keys[k] + 1] += 1
    for v in range(n):
        ptr[v + 1] += ptr[v]
    out = np.empty(ptr[n], np.int64)
    fill = ptr[:n].copy()
    for k in range(keys.shape[0]):
        out[fill[keys[k]]] = values[k]
        fill[keys[k]] += 1
    return ptr, out


@njit(cache=True)
def mark_reaching(marked, ptr, sources):
    """Mark, in place, every node from which a marked node can be reached, walking the edges
    backwards (`ptr` / `sources`: each node's predecessors, as `grouped` returns them); returns `marked`."""
    queue = np.empty(marked.shape[0], np.int64)
    tail = 0
    for v in range(marked.shape[0]):
        if marked[v]:
            queue[tail] = v
            tail += 1
    head = 0
    while head < tail:
        v = queue[head]
        head += 1
        for k in range(ptr[v], ptr[v + 1]):
            u = sources[k]
            if not marked[u]:
                marked[u] = True
                queue[tail] = u
                tail += 1
    return marked
