"""Where Python's `re` ends a match: one entry point, `first_match_dfa`.

lark's lexer skips an %ignore'd terminal with `pattern.match(text, i)`: a backtracking match that
tries alternatives in order and greedy loops before their exits, and stops at the first way the
pattern matches; `x|xy` ends after `x` even when `xy` follows.  For regexes without
backreferences or lookarounds that first match is the leftmost-first ("Perl") match, which a DFA
over priority-ordered thread lists computes exactly (as RE2 does): threads are NFA states in the
order the backtracker would try them, a thread that reaches the end of the pattern records a
match and drops every thread of lower priority, and the match ends where the last match was
recorded when no thread is left.

The DFA's final states are the points where a match is recorded; its edges leave a final state
only through the threads of higher priority.  So `re.match` ends at a final state q exactly when
the text after it never takes q's threads to another final state: the longest-match guards of
longest_match.py apply unchanged.

Regexes outside the modelled subset (anchors, lookarounds, backreferences, case-insensitive
matching, possessive or atomic groups, a loop whose body can match the empty string, where
Python's backtracker and a Pike VM disagree) give None.
"""

from __future__ import annotations

import re

from ..core.errors import LimitExceededError
from .fsm.unicode_properties import re_class
from .ir import MAX_CODE_POINT, complement_ranges, normalize_ranges, remove_surrogates

try:  # Python 3.11+ (typeshed does not describe re's private parser modules)
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

__all__ = ["explore", "first_match_dfa", "trimmed"]

Ranges = tuple[tuple[int, int], ...]


class _Unsupported(Exception):
    """The regex uses a construct whose first-match ends this module does not model."""


_ASCII_CLASSES = {
    "d": ((0x30, 0x39),),
    "s": ((0x09, 0x0D), (0x20, 0x20)),
    "w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
}


class _Nfa:
    """Thompson NFA built backwards from a continuation: nodes are ("char", ranges, next),
    ("split", nexts in priority order) or ("match",)."""

    def __init__(self, max_nodes: int):
        self.nodes: list[tuple] = [("match",)]
        self.max_nodes = max_nodes

    def add(self, node: tuple) -> int:
        if len(self.nodes) >= self.max_nodes:
            raise LimitExceededError("too many NFA states")
        self.nodes.append(node)
        return len(self.nodes) - 1

    def chars(self, ranges: Ranges, nxt: int) -> int:
        ranges = remove_surrogates(normalize_ranges(ranges))
        return self.add(("char", ranges, nxt)) if ranges else -1  # -1: a dead end

    def sequence(self, items, nxt: int, flags: int) -> int:
        for op, av in reversed(list(items)):
            nxt = self.item(op, av, nxt, flags)
        return nxt

    def item(self, op, av, nxt: int, flags: int) -> int:
        c = sre_constants
        if op is c.LITERAL:
            return self.chars(((av, av),), nxt)
        if op is c.NOT_LITERAL:
            return self.chars(complement_ranges(((av, av),)), nxt)
        if op is c.ANY:
            return self.chars(
                ((0, MAX_CODE_POINT),) if flags & sre_parse.SRE_FLAG_DOTALL else complement_ranges(((10, 10),)), nxt
            )
        if op is c.IN:
            return self.chars(_class_ranges(av, flags), nxt)
        if op is c.BRANCH:
            return self.split([self.sequence(branch, nxt, flags) for branch in av[1]])
        if op is c.SUBPATTERN:
            _, add, remove, body = av
            if (add | remove) & (sre_parse.SRE_FLAG_IGNORECASE | sre_parse.SRE_FLAG_LOCALE):
                raise _Unsupported
            return self.sequence(body, nxt, (flags | add) & ~remove)
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            lo, hi, body = av
            if _nullable(body):
                raise _Unsupported  # Python's backtracker stops an empty iteration; a Pike VM does not
            greedy = op is c.MAX_REPEAT
            if hi == sre_constants.MAXREPEAT:
                loop = self.add(("split", ()))  # patched below: the loop's body needs its own start
                start = self.sequence(body, loop, flags)
                self.nodes[loop] = ("split", (start, nxt) if greedy else (nxt, start))
                tail = loop
            else:
                tail = nxt
                for _ in range(hi - lo):
                    start = self.sequence(body, tail, flags)
                    tail = self.split([start, nxt] if greedy else [nxt, start])
            for _ in range(lo):
                tail = self.sequence(body, tail, flags)
            return tail
        raise _Unsupported  # anchors, lookarounds, backreferences, atomic groups, possessive loops

    def split(self, nexts) -> int:
        nexts = tuple(n for n in nexts if n >= 0)
        if not nexts:
            return -1
        return nexts[0] if len(nexts) == 1 else self.add(("split", nexts))


def _class_ranges(items, flags: int) -> Ranges:
    """The code points a [...] class matches."""
    c = sre_constants
    table = _ASCII_CLASSES if flags & sre_parse.SRE_FLAG_ASCII else None
    out: list[tuple[int, int]] = []
    negate = False
    for op, av in items:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            out.append((av, av))
        elif op is c.RANGE:
            out.append(av)
        elif op is c.CATEGORY:
            name = str(av)
            letter = {"DIGIT": "d", "SPACE": "s", "WORD": "w"}.get(name.rsplit("_", 1)[-1])
            if letter is None:
                raise _Unsupported
            ranges = table[letter] if table else re_class(letter)
            out.extend(complement_ranges(ranges) if "_NOT_" in name else ranges)
        else:
            raise _Unsupported
    ranges = normalize_ranges(out)
    return complement_ranges(ranges) if negate else ranges


def _nullable(items) -> bool:
    """Can this sre_parse sequence match the empty string?"""
    c = sre_constants
    for op, av in items:
        if op is c.BRANCH:
            if not any(_nullable(branch) for branch in av[1]):
                return False
        elif op is c.SUBPATTERN:
            if not _nullable(av[3]):
                return False
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            if av[0] > 0 and not _nullable(av[2]):
                return False
        elif op in (c.LITERAL, c.NOT_LITERAL, c.ANY, c.IN):
            return False
        else:
            raise _Unsupported
    return True


def first_match_dfa(source: str, max_states: int):
    """(trans, finals) of a trimmed DFA over code points whose final states are where
    `re.match(source, text)` records a match (see the module docstring), its initial state 0;
    trans[s] lists (lo, hi, target).  None when the regex is outside the modelled subset.
    LimitExceededError past `max_states` DFA states."""
    try:
        parsed = sre_parse.parse(source)
        flags = parsed.state.flags
        if flags & (sre_parse.SRE_FLAG_IGNORECASE | sre_parse.SRE_FLAG_LOCALE):
            raise _Unsupported
        nfa = _Nfa(64 * max_states)
        start = nfa.sequence(parsed, 0, flags)
    except (_Unsupported, re.error):
        return None
    nodes = nfa.nodes

    def closure(starts) -> tuple[int, ...]:
        """The char and match nodes reachable over splits, in priority order, cut after a match."""
        out: list[int] = []
        seen: set[int] = set()
        stack = list(reversed(starts))
        while stack:
            n = stack.pop()
            if n < 0 or n in seen:  # -1: a dead end
                continue
            seen.add(n)
            node = nodes[n]
            if node[0] == "split":
                stack.extend(reversed(node[1]))
                continue
            out.append(n)
            if node[0] == "match":
                break  # lower-priority threads can never be the match
        return tuple(out)

    def moves(threads):
        return [
            (lo, hi, node[2]) for node in (nodes[n] for n in threads if nodes[n][0] == "char") for lo, hi in node[1]
        ]

    trans, order = explore(closure([start]), moves, closure, max_states)
    finals = frozenset(i for i, threads in enumerate(order) if threads and nodes[threads[-1]][0] == "match")
    return trimmed(trans, finals), finals


def explore(first, moves, closure, max_states: int):
    """(trans, order): the DFA whose states are the keys reachable from `first`, in order of
    discovery; moves(key) lists the NFA's (lo, hi, target) edges out of a state, closure(targets)
    the next key (empty: no state).  LimitExceededError past `max_states` states."""
    index = {first: 0}
    order = [first]
    trans: list[list[tuple[int, int, int]]] = []
    for key in order:  # grows while we walk it
        edges = moves(key)
        cuts = sorted({lo for lo, _, _ in edges} | {hi + 1 for _, hi, _ in edges})
        out = []
        for lo, nxt in zip(cuts, cuts[1:]):
            target = closure([dst for a, b, dst in edges if a <= lo and nxt - 1 <= b])
            if not target:
                continue
            if target not in index:
                if len(order) >= max_states:
                    raise LimitExceededError(f"the automaton exceeds {max_states} states")
                index[target] = len(order)
                order.append(target)
            out.append((lo, nxt - 1, index[target]))
        trans.append(out)
    return trans, order


def trimmed(trans, finals):
    """The DFA's edges without those into states that reach no final state (dead states keep
    no edges), so every edge left leads on to a final state."""
    live = set(finals)
    changed = True
    while changed:
        changed = False
        for s, out in enumerate(trans):
            if s not in live and any(t in live for _, _, t in out):
                live.add(s)
                changed = True
    return [[(lo, hi, t) for lo, hi, t in out if t in live] if s in live else [] for s, out in enumerate(trans)]
