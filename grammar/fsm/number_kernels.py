"""Numba kernels for the digit automata of json_numbers (flat arrays in the `string_kernels` layout).

`natural_range` explores the states of `json_numbers.natural_range_dfa`: a bounded integer with
multipleOf tracks n mod m for every digit position and bound comparison, so a schema such as
"integer, multiple of 420, not a multiple of 1260, minimum 10000" reaches hundreds of thousands
of states, which a Python exploration walked at about a microsecond per edge.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.typed import Dict

from ...core.jit import njit
from .graph_kernels import grown

OK = 0
OVER_BUDGET = 1

ZERO_UNSEEN = 0  # state keys 0 and 1: "no digit yet" / "only zeros so far"
ZERO_SEEN = 1


@njit(cache=True)
def _key(m, c_lo, c_hi, r, modulus):
    """Key of the state "m digits read, comparisons c_lo / c_hi with the bounds' prefixes
    (-1, 0, 1), remainder r"; keys 0 and 1 are the zero states."""
    return 2 + (((m - 1) * 3 + (c_lo + 1)) * 3 + (c_hi + 1)) * modulus + r


@njit(cache=True)
def natural_range(lo_digits, hi_digits, has_hi, cap, wanted, modulus, excluded, lo_is_zero, leading_zeros, budget):
    """(status, start, count, lo, hi, target, final) of the automaton that
    `json_numbers.natural_range_dfa` describes, states numbered in discovery order (breadth first
    from the initial "no digit yet" state, edges by digit); status OVER_BUDGET past `budget` states.

    lo_digits / hi_digits: the bounds' decimal digits (hi only when has_hi); cap: the digit count
    past which only "more digits" matters; wanted: the multipleOf the value must have; modulus:
    lcm of wanted and the `excluded` divisors, the remainder tracked.
    """
    index = Dict.empty(key_type=types.int64, value_type=types.int64)
    # per state: its decoded parts (m, c_lo, c_hi, r); m = -1 marks the zero states
    part_m = np.empty(16, np.int64)
    part_lo = np.empty(16, np.int64)
    part_hi = np.empty(16, np.int64)
    part_r = np.empty(16, np.int64)
    edge_lo = np.empty(160, np.int64)
    edge_tgt = np.empty(160, np.int64)
    start = np.empty(16, np.int64)
    count = np.empty(16, np.int64)
    n_states = 1
    n_edges = 0
    index[ZERO_UNSEEN] = 0
    part_m[0] = -1
    part_r[0] = ZERO_UNSEEN
    n_lo_digits = lo_digits.shape[0]
    n_hi_digits = hi_digits.shape[0]
    s = 0
    while s < n_states:
        start = grown(start, s + 1)
        count = grown(count, s + 1)
        start[s] = n_edges
        count[s] = 0
        m = part_m[s]
        if m == -1 and part_r[s] == ZERO_SEEN and not leading_zeros:
            s += 1
            continue
        for d in range(10):
            # the state after digit d, as its parts
            if m == -1 and d == 0:
                nm, nlo, nhi, nr = -1, 0, 0, ZERO_SEEN
            else:
                cm, clo, chi, cr = (0, 0, 0, 0) if m == -1 else (m, part_lo[s], part_hi[s], part_r[s])
                if has_hi and cm >= n_hi_digits:
                    continue
                if cm < n_lo_digits:
                    nlo = clo if clo != 0 else (1 if d > lo_digits[cm] else (-1 if d < lo_digits[cm] else 0))
                else:
                    nlo = 1
                nhi = 0
                if has_hi:
                    nhi = chi if chi != 0 else (1 if d > hi_digits[cm] else (-1 if d < hi_digits[cm] else 0))
                nm = min(cm + 1, cap)
                nr = (cr * 10 + d) % modulus
            key = nr if nm == -1 else _key(nm, nlo, nhi, nr, modulus)
            target = index.get(key, -1)
            if target < 0:
                if n_states >= budget:
                    return OVER_BUDGET, start, count, edge_lo, edge_lo, edge_tgt, np.zeros(0, np.bool_)
                target = n_states
                index[key] = target
                part_m = grown(part_m, n_states + 1)
                part_lo = grown(part_lo, n_states + 1)
                part_hi = grown(part_hi, n_states + 1)
                part_r = grown(part_r, n_states + 1)
                part_m[target] = nm
                part_lo[target] = nlo
                part_hi[target] = nhi
                part_r[target] = nr
                n_states += 1
            edge_lo = grown(edge_lo, n_edges + 1)
            edge_tgt = grown(edge_tgt, n_edges + 1)
            edge_lo[n_edges] = 48 + d
            edge_tgt[n_edges] = target
            n_edges += 1
            count[s] += 1
        s += 1
    final = np.zeros(n_states, np.bool_)
    for s in range(n_states):
        m = part_m[s]
        if m == -1:
            final[s] = lo_is_zero and part_r[s] == ZERO_SEEN and excluded.shape[0] == 0
            continue
        r = part_r[s]
        ok = r % wanted == 0
        for k in excluded:
            if r % k == 0:
                ok = False
        ok_lo = m > n_lo_digits or (m == n_lo_digits and part_lo[s] >= 0)
        ok_hi = (not has_hi) or m < n_hi_digits or (m == n_hi_digits and part_hi[s] <= 0)
        final[s] = ok and ok_lo and ok_hi
    edges_lo = edge_lo[:n_edges].copy()
    return (
        OK,
        start[:n_states].copy(),
        count[:n_states].copy(),
        edges_lo,
        edges_lo.copy(),
        edge_tgt[:n_edges].copy(),
        final,
    )
