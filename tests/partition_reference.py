"""Moore partition refinement in plain Python: the minimisation of the reference automata the
tests compare the numba kernels with (rule_dfa_reference.py, json_strings_reference.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable


def refine_partition(
    block: list[int], preds: list[set[int]], signature: Callable[[int, list[int]], Hashable]
) -> list[int]:
    """Moore refinement, incremental: splits the initial blocks (block[s] = 0 or 1) until all
    states of a block have equal signature(s, block) -- their edges with targets replaced by
    block ids -- and returns the final block of every state (ids not contiguous).

    Invariant after each round: all states of a block share one signature.  When a block
    splits, its smaller parts get new ids and only their predecessors need new signatures, so
    a round costs its frontier, not the automaton (counted strings and numbers are long
    chains: one round per link).
    """
    n = len(block)
    members: dict[int, set[int]] = {}
    for s in range(n):
        members.setdefault(block[s], set()).add(s)
    sig: list = [None] * n
    dirty = set(range(n))
    next_id = max(block, default=0) + 1
    while dirty:
        for s in dirty:
            sig[s] = signature(s, block)
        by_block: dict[int, list[int]] = {}
        for s in dirty:
            by_block.setdefault(block[s], []).append(s)
        changed: list[int] = []
        for b, dirty_members in by_block.items():
            groups: dict = {}
            clean = members[b].difference(dirty_members)
            if clean:  # clean members share one signature, still valid
                groups[sig[next(iter(clean))]] = clean
            for s in dirty_members:
                groups.setdefault(sig[s], set()).add(s)
            if len(groups) == 1:
                continue
            parts = sorted(groups.values(), key=len, reverse=True)
            members[b] = parts[0]
            for part in parts[1:]:
                members[next_id] = part
                for s in part:
                    block[s] = next_id
                    changed.append(s)
                next_id += 1
        dirty = {p for s in changed for p in preds[s]}
    return block
