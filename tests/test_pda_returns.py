"""The PDA's return table (automata/pda.py: _returns): each rule's distinct return states, against
a plain Python grouping of the reference edges."""

from __future__ import annotations

import numpy as np

from pushmask.automata.pda import _returns


def test_returns_are_each_rules_distinct_return_states_ascending():
    rng = np.random.default_rng(3)
    for n_edges in (0, 1, 7, 300):
        n_rules = 5
        ref_rule = rng.integers(0, n_rules, n_edges).astype(np.int32)
        ref_dst = rng.choice([0, 1, 2, 40, 2**31 - 1], n_edges).astype(np.int32)
        ptr, returns = _returns(ref_rule, ref_dst, n_rules)
        assert ptr.dtype == np.int32 and returns.dtype == np.int32 and len(ptr) == n_rules + 1
        for rule in range(n_rules):
            want = sorted({int(d) for r, d in zip(ref_rule, ref_dst) if r == rule})
            assert returns[ptr[rule] : ptr[rule + 1]].tolist() == want
