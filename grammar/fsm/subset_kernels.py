"""numba subset construction over letter ranges, shared by the rule DFAs (automata/dfa_kernels.py:
byte classes and rule references as letters) and the pattern automata (grammar/ecma_regex.py:
code-point intervals as letters).

An NFA is given by CSR tables: epsilon edges eps_ptr/eps_dst, letter edges edge_ptr/edges with rows
(src, first letter, last letter, dst) sorted by source (`by_source`).  The subset automaton is a
dense [state, letter] table, -1 where there is no edge.
"""

from __future__ import annotations

import numpy as np

from ...core.jit import njit

ERR_TOO_MANY_STATES = -1  # DFA states
ERR_NO_ROOM = -2
ERR_NO_POOL_ROOM = -3


@njit(cache=True, inline="always")
def _mix(x):
    """splitmix64 finaliser: a well-spread 64-bit hash of one NFA state (summed over a subset)."""
    z = np.uint64(x) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def _closure(seeds, n_seeds, eps_ptr, eps_dst, mark, stamp, out):
    """Epsilon closure of seeds[:n_seeds] into out; its members get mark == stamp. Returns its size."""
    size = 0
    for k in range(n_seeds):
        s = seeds[k]
        if mark[s] != stamp:
            mark[s] = stamp
            out[size] = s
            size += 1
    done = 0
    while done < size:  # out doubles as the work list
        s = out[done]
        done += 1
        for e in range(eps_ptr[s], eps_ptr[s + 1]):
            t = eps_dst[e]
            if mark[t] != stamp:
                mark[t] = stamp
                out[size] = t
                size += 1
    return size


@njit(cache=True, inline="always")
def _intern(closure, size, mark, stamp, is_accepting, n_dfa, max_states, pool, pool_ptr, subset_hash, accepting, table):
    """The DFA state of the subset closure[:size] (its members marked with stamp): an existing
    one, n_dfa when added as new, or an ERR_* code when it does not fit."""
    h = np.uint64(size)
    for k in range(size):
        h += _mix(closure[k])
    mask = table.shape[0] - 1
    slot = np.int64(h & np.uint64(mask))
    while table[slot] >= 0:
        d = table[slot]
        if subset_hash[d] == h and pool_ptr[d + 1] - pool_ptr[d] == size:
            same = True
            for k in range(pool_ptr[d], pool_ptr[d + 1]):
                if mark[pool[k]] != stamp:
                    same = False
                    break
            if same:
                return d
        slot = (slot + 1) & mask
    if n_dfa >= max_states:
        return ERR_TOO_MANY_STATES
    if n_dfa >= subset_hash.shape[0]:
        return ERR_NO_ROOM
    if pool_ptr[n_dfa] + size > pool.shape[0]:
        return ERR_NO_POOL_ROOM
    pool[pool_ptr[n_dfa] : pool_ptr[n_dfa] + size] = closure[:size]
    pool_ptr[n_dfa + 1] = pool_ptr[n_dfa] + size
    subset_hash[n_dfa] = h
    accepting[n_dfa] = is_accepting
    table[slot] = n_dfa
    return n_dfa


@njit(cache=True)
def determinize(
    start,
    final,
    eps_ptr,
    eps_dst,
    edge_ptr,
    edges,
    max_states,
    pool,
    pool_ptr,
    subset_hash,
    accepting,
    trans,
    table,
    n_dfa,
    i,
):
    """Subset construction into the given arrays, from n_dfa states found and i swept.
    Returns (status, n_dfa, i): status 0 when done, ERR_TOO_MANY_STATES when more than
    max_states are reachable, ERR_NO_ROOM / ERR_NO_POOL_ROOM when the state arrays / the pool
    are full: the caller grows them and calls again to resume (arrays replaced inside the loops
    would cost reference counting on every letter).

    Subsets are whole epsilon closures (sets of NFA states), interned in a flat pool
    (pool[pool_ptr[d]:pool_ptr[d + 1]]) behind an open-addressing table keyed by an
    order-independent hash; states are numbered in discovery order.  A subset's member edges
    are bucketed by the letters where they start and stop covering, so one sweep over the
    letters finds every target, recomputed only where it may change.
    """
    n_nfa = eps_ptr.shape[0] - 1
    n_letters = trans.shape[1]
    mark = np.zeros(n_nfa, np.int64)
    stamp = 0
    closure = np.empty(n_nfa, np.int32)
    covering = np.empty(n_nfa, np.int32)  # NFA targets of the member edges covering the letter
    covering_pos = np.empty(n_nfa, np.int32)
    covering_edges = np.zeros(n_nfa, np.int32)  # member edges per covering target (they overlap)
    bucket_ptr = np.zeros(n_letters + 3, np.int64)
    events = np.empty(2 * edges.shape[0], np.int32)  # dst + 1: starts covering; -(dst + 1): stops

    if n_dfa == 0:
        covering[0] = start
        stamp = 1
        size = _closure(covering, 1, eps_ptr, eps_dst, mark, stamp, closure)
        status = _intern(
            closure,
            size,
            mark,
            stamp,
            mark[final] == stamp,
            0,
            max_states,
            pool,
            pool_ptr,
            subset_hash,
            accepting,
            table,
        )
        if status < 0:
            return status, n_dfa, i
        n_dfa = 1
    while i < n_dfa:
        # events of letter x go to events[bucket_ptr[x] : bucket_ptr[x + 1]] (counted, summed,
        # then placed); letter n_letters only retires edges that cover the last letter
        bucket_ptr[:] = 0
        for k in range(pool_ptr[i], pool_ptr[i + 1]):
            s = pool[k]
            for e in range(edge_ptr[s], edge_ptr[s + 1]):
                bucket_ptr[edges[e, 1] + 2] += 1
                bucket_ptr[edges[e, 2] + 3] += 1
        for b in range(3, n_letters + 3):
            bucket_ptr[b] += bucket_ptr[b - 1]
        for k in range(pool_ptr[i], pool_ptr[i + 1]):
            s = pool[k]
            for e in range(edge_ptr[s], edge_ptr[s + 1]):
                t = edges[e, 3]
                events[bucket_ptr[edges[e, 1] + 1]] = t + 1
                bucket_ptr[edges[e, 1] + 1] += 1
                events[bucket_ptr[edges[e, 2] + 2]] = -(t + 1)
                bucket_ptr[edges[e, 2] + 2] += 1
        n_covering = 0
        target = -1
        for a in range(n_letters + 1):
            if bucket_ptr[a] == bucket_ptr[a + 1]:  # same covering edges as the letter before
                if a < n_letters:
                    trans[i, a] = target
                continue
            for k in range(bucket_ptr[a], bucket_ptr[a + 1]):
                ev = events[k]
                if ev > 0:
                    t = ev - 1
                    if covering_edges[t] == 0:
                        covering_pos[t] = n_covering
                        covering[n_covering] = t
                        n_covering += 1
                    covering_edges[t] += 1
                else:
                    t = -ev - 1
                    covering_edges[t] -= 1
                    if covering_edges[t] == 0:
                        last = covering[n_covering - 1]
                        covering[covering_pos[t]] = last
                        covering_pos[last] = covering_pos[t]
                        n_covering -= 1
            if a == n_letters:
                break
            target = -1
            if n_covering > 0:
                stamp += 1
                size = _closure(covering, n_covering, eps_ptr, eps_dst, mark, stamp, closure)
                target = _intern(
                    closure,
                    size,
                    mark,
                    stamp,
                    mark[final] == stamp,
                    n_dfa,
                    max_states,
                    pool,
                    pool_ptr,
                    subset_hash,
                    accepting,
                    table,
                )
                if target < 0:
                    return target, n_dfa, i
                if target == n_dfa:
                    n_dfa += 1
            trans[i, a] = target
        i += 1
    return 0, n_dfa, i


@njit(cache=True)
def _hash_table(subset_hash, n, capacity):
    """An open-addressing table of the states 0..n-1 with room for capacity (load <= 1/2)."""
    size = 1
    while size < 2 * capacity:
        size *= 2
    table = np.full(size, -1, np.int32)
    for d in range(n):
        slot = np.int64(subset_hash[d] & np.uint64(size - 1))
        while table[slot] >= 0:
            slot = (slot + 1) & (size - 1)
        table[slot] = d
    return table


@njit(cache=True)
def _resized(arr, n, used):
    """A copy of arr with room for n rows, of which the first `used` are kept."""
    out = np.empty((n,) + arr.shape[1:], arr.dtype)
    out[:used] = arr[:used]
    return out


@njit(cache=True)
def subset_automaton(start, final, eps_ptr, eps_dst, edge_ptr, edges, n_letters, max_states):
    """`determinize` with arrays grown as needed.  Returns (status, transitions[n, n_letters],
    accepting[n]); status is n or ERR_TOO_MANY_STATES."""
    capacity = min(max_states, eps_ptr.shape[0] + 63)  # subset automata rarely outgrow their NFA
    pool = np.empty(16 * capacity, np.int32)
    pool_ptr = np.zeros(capacity + 1, np.int64)
    subset_hash = np.empty(capacity, np.uint64)
    accepting = np.zeros(capacity, np.bool_)
    trans = np.empty((capacity, n_letters), np.int32)  # rows are written whole by the sweep
    table = _hash_table(subset_hash, 0, capacity)
    n_dfa = 0
    i = 0
    while True:
        status, n_dfa, i = determinize(
            start,
            final,
            eps_ptr,
            eps_dst,
            edge_ptr,
            edges,
            max_states,
            pool,
            pool_ptr,
            subset_hash,
            accepting,
            trans,
            table,
            n_dfa,
            i,
        )
        if status == ERR_NO_POOL_ROOM:
            pool = _resized(pool, 2 * pool.shape[0], pool_ptr[n_dfa])
        elif status == ERR_NO_ROOM:
            capacity = min(max_states, 2 * capacity)
            pool_ptr = _resized(pool_ptr, capacity + 1, n_dfa + 1)
            subset_hash = _resized(subset_hash, capacity, n_dfa)
            accepting = _resized(accepting, capacity, n_dfa)
            trans = _resized(trans, capacity, n_dfa)
            table = _hash_table(subset_hash, n_dfa, capacity)
        elif status == ERR_TOO_MANY_STATES:
            return status, trans[:0], accepting[:0]
        else:
            return n_dfa, trans[:n_dfa], accepting[:n_dfa]


@njit(cache=True)
def by_source(n, edges):
    """Edge rows sorted by their source (column 0): rows ptr[s]..ptr[s + 1] leave state s."""
    ptr = np.zeros(n + 1, np.int64)
    for e in range(edges.shape[0]):
        ptr[edges[e, 0] + 1] += 1
    for s in range(n):
        ptr[s + 1] += ptr[s]
    fill = ptr[:-1].copy()
    out = np.empty_like(edges)
    for e in range(edges.shape[0]):
        row = fill[edges[e, 0]]
        fill[edges[e, 0]] += 1
        for c in range(edges.shape[1]):
            out[row, c] = edges[e, c]
    return ptr, out


@njit(cache=True)
def dense_runs(trans, bounds):
    """The dense table as code-point edges, in `Dfa.from_arrays`' flat form (start, count, lo, hi,
    target): one edge per run of equal targets over consecutive letters, letter a standing for
    bounds[a] .. bounds[a + 1] - 1.  Two passes over the table (count, then write) allocate only
    the edges, not an index per table entry: a `format: regex` table holds ~1.9M entries in
    ~100k runs."""
    n, n_letters = trans.shape
    count = np.zeros(n, np.int64)
    for s in range(n):
        previous = -1
        for a in range(n_letters):
            t = trans[s, a]
            if t >= 0 and t != previous:  # a run starts after a gap or where the target changes
                count[s] += 1
            previous = t
    start = np.cumsum(count) - count
    total = int(count.sum())
    lo = np.empty(total, np.int64)
    hi = np.empty(total, np.int64)
    target = np.empty(total, np.int64)
    e = -1
    for s in range(n):
        previous = -1
        for a in range(n_letters):
            t = trans[s, a]
            if t >= 0:
                if t != previous:
                    e += 1
                    lo[e] = bounds[a]
                    target[e] = t
                hi[e] = bounds[a + 1] - 1
            previous = t
    return start, count, lo, hi, target
