"""Longest match for %ignore'd terminals: one pass, `greedy_ignores`.

lark's Earley lexers (the oracle of the Lark front end) skip an ignored terminal with one regex
match: at position i the ignored token is the longest one, not any prefix of it.  So `--c from t`
after a SQL column is all comment, and `select a --c from t` is incomplete.  The Lark front end
inserts `skip = (I1 | ... | In)*` between symbols, where an ignored terminal could end anywhere;
this pass keeps only the ends lark's lexer allows.

An ignored match that ends in state q of its code-point DFA may not be followed by a character c
for which the DFA goes on from q: the guard C_q.  The guard is exact when every such step lands
on a final state (comments `--[^\\n]*`, whitespace `\\s+`: a longer match exists iff the next
character continues it); otherwise C_q is every character the DFA can go on with, which forbids
more than lark (sound, may reject a lark sentence).  Guards are grouped into classes k = 1..K
(class 0: no guard, e.g. a comment with a lazy `*?` that ends at its first end).

The pass is the product of the grammar with a monitor whose state is the class pending after
the last character: an ignored terminal ending with class k sets it, any character c must not be
in the pending guard and clears it, and the end of input clears every guard.  A rule X becomes
variants X[g->h] (strings of X entered with class g pending and left with class h pending; X
itself is X[0->0]); the variants no derivation needs are removed by `passes.normalize` as
unproductive or unreachable.  Terminals (upper-case lark names) are atoms: the monitor only
restricts their first character.

lark runs the regex with Python's `re`, whose match is the first way the pattern matches, not the
longest (`x|xy` ends after `x`): where a match can go on to a longer one, the DFA is
first_match.first_match_dfa's, whose final states are where `re` records a match, and a regex it
cannot model is a GrammarError naming the terminal.

Known gap (a strict xfail in tests/test_longest_match.py): an inexact guard refuses a character
that only begins a longer match which then fails (`(\\s|//[^\\n]*)+` before a lone `/`).
"""

from __future__ import annotations

from collections import deque

from ..core.errors import GrammarError, LimitExceededError
from .first_match import explore, first_match_dfa, trimmed
from .fsm.codepoint_dfa import complement_chars, intersect_ranges
from .ir import (
    EPSILON,
    MAX_CODE_POINT,
    NOTHING,
    Alt,
    ByteClass,
    Bytes,
    CharClass,
    CharFsm,
    Expr,
    Grammar,
    Ref,
    Repeat,
    Seq,
    alt,
    char_class,
    normalize_ranges,
    ref_names,
    rep,
    seq,
    star,
)
from .passes import is_nullable, nullable_rules

__all__ = ["greedy_ignores"]

MAX_GUARD_CLASSES = 16
"""Distinct guards past which the product (rules times classes squared) is refused."""

Ranges = tuple[tuple[int, int], ...]
Row = dict[int, Expr]  # monitor class on leaving -> the strings that leave with it


def is_terminal_name(name: str) -> bool:
    """lark names terminals in upper case and rules in lower case (either after leading `_`)."""
    stripped = name.lstrip("_")
    return bool(stripped) and stripped[0].isupper()


def greedy_ignores(
    grammar: Grammar, ignored: list[str], skip: Expr, max_states: int, sources: dict[str, str]
) -> Grammar:
    """The grammar where each ignored terminal in a `skip` block ends only where lark's lexer
    ends it (see the module docstring).  `skip` is the exact expression the front end put
    between symbols; `ignored` names its terminals; `max_states` bounds each one's DFA;
    `sources` holds the Python regex lark matches each ignored terminal with."""
    read = {name: _ignored_dfa(grammar, name, sources.get(name), max_states) for name in ignored}
    dfas = {name: (trans, finals) for name, (trans, finals, _) in read.items()}
    guards: list[Ranges] = [()]
    for trans, finals in dfas.values():
        for q in sorted(finals):
            if _guard(trans, q) not in guards:
                guards.append(_guard(trans, q))
    if len(guards) == 1 and all(plain for _, _, plain in read.values()):
        return grammar  # no ignored terminal can go on after any of its ends
    if len(guards) > MAX_GUARD_CLASSES:
        raise LimitExceededError(
            f"%ignore'd terminals {', '.join(ignored)} can end in {len(guards) - 1} different "
            f"ways (at most {MAX_GUARD_CLASSES - 1}); ignore fewer or simpler terminals"
        )
    return _Product(grammar, dfas, guards, skip).run()


# ---------------------------------------------------------------------------------------------
# An ignored terminal's code-point DFA (terminals are small: plain Python)


def _ignored_dfa(grammar: Grammar, name: str, source: str | None, max_states: int):
    """(trans, finals, plain) where the final states are where Python's `re` can end the ignored
    terminal.  plain: the terminal's own DFA, exact where no match can go on to a longer one
    (then every match is the only one); otherwise first_match.first_match_dfa of its regex, and a
    GrammarError where that regex is outside what it models."""
    trans, finals = _codepoint_dfa(grammar.rules[name], grammar.rules, max_states, name)
    if not any(trans[q] for q in finals):
        return trans, finals, True
    if source is not None:
        try:
            dfa = first_match_dfa(source, max_states)
        except LimitExceededError:
            raise LimitExceededError(f"%ignore'd terminal {name}: its automaton exceeds {max_states} states") from None
        if dfa is not None:
            return (*dfa, False)
    raise GrammarError(
        f"%ignore'd terminal {name}{f' /{source}/' if source else ''} can match and then go on to a longer "
        "match, and pushmask cannot tell where Python's re (lark's lexer) ends it: the regex uses an anchor, "
        "a lookaround, a backreference, case-insensitive matching, an atomic group or a loop whose body can "
        "match nothing; rewrite it without them",
        *grammar.positions.get(name, (None, None)),
    )


def _codepoint_dfa(expr: Expr, rules: dict[str, Expr], max_states: int, name: str):
    """(trans, finals) of a trimmed DFA over code points: trans[s] lists (lo, hi, target)."""
    edges: list[list[tuple[int, int, int]]] = []  # NFA: (lo, hi, target); lo == -1 is epsilon

    def state() -> int:
        edges.append([])
        return len(edges) - 1

    def chars(ranges, start: int) -> int:
        end = state()
        edges[start].extend((lo, hi, end) for lo, hi in ranges)
        return end

    def build(e: Expr, start: int, depth: int = 0) -> int:
        if depth > 64 or len(edges) > 64 * max_states:
            raise LimitExceededError(f"%ignore'd terminal {name} is too large to find where it ends")
        if isinstance(e, Bytes):
            try:
                text = e.value.decode("utf-8")
            except UnicodeDecodeError:
                raise GrammarError(
                    f"%ignore'd terminal {name} holds bytes that are not text (a token terminal?); "
                    "ignore text terminals only"
                ) from None
            for ch in text:
                start = chars(((ord(ch), ord(ch)),), start)
            return start
        if isinstance(e, CharClass):
            return chars(e.ranges, start)
        if isinstance(e, ByteClass):
            if e.ranges and e.ranges[-1][1] >= 0x80:
                raise GrammarError(f"%ignore'd terminal {name} matches raw non-ASCII bytes; ignore text terminals only")
            return chars(e.ranges, start)
        if isinstance(e, CharFsm):
            ids = {s: state() for s in _fsm_states(e)}
            for src, lo, hi, dst in e.transitions:
                edges[ids[src]].append((lo, hi, ids[dst]))
            end = state()
            edges[start].append((-1, -1, ids[e.initial]))
            for f in e.finals:
                edges[ids[f]].append((-1, -1, end))
            return end
        if isinstance(e, Seq):
            for item in e.items:
                start = build(item, start, depth + 1)
            return start
        if isinstance(e, Alt):
            end = state()
            for item in e.items:
                edges[build(item, start, depth + 1)].append((-1, -1, end))
            return end
        if isinstance(e, Repeat):
            for _ in range(e.min):
                start = build(e.item, start, depth + 1)
            if e.max is None:
                loop = state()
                edges[start].append((-1, -1, loop))
                edges[build(e.item, loop, depth + 1)].append((-1, -1, loop))
                return loop
            end = state()
            for _ in range(e.max - e.min):
                edges[start].append((-1, -1, end))
                start = build(e.item, start, depth + 1)
            edges[start].append((-1, -1, end))
            return end
        if isinstance(e, Ref):
            return build(rules[e.name], start, depth + 1)
        raise TypeError(f"unknown IR node {e!r}")

    initial = state()
    accept = build(expr, initial)
    return _determinize(edges, initial, accept, max_states, name)


def _determinize(edges, initial: int, accept: int, max_states: int, name: str):
    def closure(states) -> frozenset[int]:
        seen = set(states)
        todo = list(states)
        while todo:
            for lo, _, dst in edges[todo.pop()]:
                if lo < 0 and dst not in seen:
                    seen.add(dst)
                    todo.append(dst)
        return frozenset(seen)

    def moves(subset):
        return [(lo, hi, dst) for s in subset for lo, hi, dst in edges[s] if lo >= 0]

    try:
        trans, order = explore(closure([initial]), moves, closure, max_states)
    except LimitExceededError:
        raise LimitExceededError(f"%ignore'd terminal {name}: its automaton exceeds {max_states} states") from None
    finals = frozenset(i for i, subset in enumerate(order) if accept in subset)
    return _merged(trimmed(trans, finals)), finals


def _fsm_states(fsm: CharFsm) -> set[int]:
    return {fsm.initial, *fsm.finals, *(t[0] for t in fsm.transitions), *(t[3] for t in fsm.transitions)}


def _guard(trans, q: int) -> Ranges:
    """The characters a match ending in final state q may not be followed by: every character
    the DFA can go on with from q (trans is trimmed: each edge leads on to a final state)."""
    return normalize_ranges((lo, hi) for lo, hi, _ in trans[q])


def _merged(trans):
    """Adjacent ranges to the same target merged (guards compare as range tuples)."""
    out = []
    for edges in trans:
        merged: list[tuple[int, int, int]] = []
        for lo, hi, t in edges:
            if merged and merged[-1][2] == t and merged[-1][1] + 1 == lo:
                merged[-1] = (merged[-1][0], hi, t)
            else:
                merged.append((lo, hi, t))
        out.append(merged)
    return out


# ---------------------------------------------------------------------------------------------
# The product with the guard monitor


class _Product:
    def __init__(self, grammar: Grammar, dfas: dict, guards: list[Ranges], skip: Expr):
        self.grammar = grammar
        self.rules = grammar.rules
        self.guards = guards
        self.allowed = [complement_chars(g) for g in guards]  # first characters each class allows
        self.classes = range(len(guards))
        self.skip = skip
        self.nullable = nullable_rules(grammar)
        self.out_rules: dict[str, Expr] = {}
        self.variants: dict[tuple[str, int, int], str] = {}
        self.origin: dict[str, str] = {}
        self.todo: list[tuple[str, int, int]] = []
        self.restricted: dict[tuple[Expr, int], Expr] = {}
        self.memo: dict[tuple[Expr, int], Row] = {}
        self.atoms: dict[Expr, bool] = {}
        self.firsts = self._first_sets()
        self.events = self._event_matrix(dfas)
        self.skip_rows = self._skip_rows()
        self.outs = self._exit_classes()

    # -- names

    def _name(self, origin: str, suffix: str) -> str:
        """A fresh rule name for a copy of `origin` (errors point at origin's position)."""
        name = origin + suffix
        while name in self.rules or name in self.out_rules:
            name += "_"
        self.origin[name] = origin
        return name

    def variant(self, rule: str, g: int, h: int) -> str:
        """The rule name of rule[g->h] (rule itself for 0->0), its body made later."""
        key = (rule, g, h)
        if key not in self.variants:
            self.variants[key] = rule if (g, h) == (0, 0) else self._name(rule, f"__ignored{g}to{h}")
            self.todo.append(key)
        return self.variants[key]

    # -- ignored terminals: the events that set a guard class

    def _event_matrix(self, dfas) -> list[list[Expr]]:
        """events[g][h]: one ignored token, entered with class g pending and ending with class h."""
        events: list[list[Expr]] = [[NOTHING] * len(self.guards) for _ in self.guards]
        for name, (trans, finals) in dfas.items():
            by_class: dict[int, set[int]] = {}
            for q in finals:
                by_class.setdefault(self.guards.index(_guard(trans, q)), set()).add(q)
            for h, ends in by_class.items():
                edges = tuple((s, lo, hi, t) for s, out in enumerate(trans) for lo, hi, t in out)
                fsm = CharFsm(0, frozenset(ends), edges)
                token = self._name(name, f"__ends{h}")
                self.out_rules[token] = fsm
                for g in self.classes:
                    events[g][h] = alt(events[g][h], self.restrict(Ref(token), g))
        return events

    def _skip_rows(self) -> list[Row]:
        """Rows of the `skip` block; each non-empty part is a rule of its own, so the rule
        bodies that hold a gap stay small."""
        rows = _closure(self.events, len(self.guards))
        for g, row in enumerate(rows):
            for h, part in row.items():
                if part != EPSILON:
                    name = self._name(self.grammar.root, f"__gap{g}to{h}")
                    self.out_rules[name] = part
                    row[h] = Ref(name)
            row[g] = alt(EPSILON, row.get(g, NOTHING))  # no ignored token at all
        return rows

    # -- which classes a rule's non-empty strings can leave with (entering class g only passes
    # through the empty string: any character clears it), a fixpoint over the rules

    def _exit_classes(self) -> dict[str, frozenset[int]]:
        ending = frozenset(h for h in self.classes if any(row[h] != NOTHING for row in self.events))
        zero = frozenset({0})

        def leaving(e: Expr, outs) -> frozenset[int]:
            if e == self.skip:
                return ending
            if isinstance(e, Ref):
                return outs.get(e.name, zero) if not is_terminal_name(e.name) else zero
            if isinstance(e, (CharClass, ByteClass, Bytes, CharFsm)):
                return zero
            if isinstance(e, Repeat):
                return leaving(e.item, outs) if e.max != 0 else frozenset()
            assert isinstance(e, (Seq, Alt)), e
            found: set[int] = set()
            for i in reversed(range(len(e.items))) if isinstance(e, Seq) else range(len(e.items)):
                found |= leaving(e.items[i], outs)
                if isinstance(e, Seq) and not is_nullable(e.items[i], self.nullable):
                    break
            return frozenset(found)

        names = [name for name in self.rules if not is_terminal_name(name)]
        return _fixpoint(self.rules, names, leaving, frozenset())

    def exits(self, rule: str, g: int) -> list[int]:
        """The classes rule[g->h] may leave with: h."""
        found = set(self.outs[rule])
        if rule in self.nullable:
            found.add(g)
        return sorted(found)

    # -- first characters: where the guard of a class cannot change a rule, no variant is needed

    def _first_sets(self) -> dict[str, tuple[Ranges, bool]]:
        """Per rule (terminals included): the code points its strings can begin with, and whether
        some begin with a byte that starts no character (a token terminal)."""
        return _fixpoint(self.rules, list(self.rules), self._first, ((), False))

    def _first(self, e: Expr, firsts) -> tuple[Ranges, bool]:
        if isinstance(e, Bytes):
            cp = _first_code_point(e.value)
            return (((cp, cp),), False) if cp is not None else ((), bool(e.value))
        if isinstance(e, CharClass):
            return e.ranges, False
        if isinstance(e, ByteClass):
            return intersect_ranges(e.ranges, ((0, 0x7F),)), bool(e.ranges) and e.ranges[-1][1] >= 0x80
        if isinstance(e, CharFsm):
            return normalize_ranges((lo, hi) for src, lo, hi, _ in e.transitions if src == e.initial), False
        if isinstance(e, Ref):
            return firsts.get(e.name) or self._first(self.out_rules[e.name], firsts)
        if isinstance(e, Repeat):
            return self._first(e.item, firsts) if e.max != 0 else ((), False)
        assert isinstance(e, (Seq, Alt)), e
        items = e.items
        parts = []
        for item in items:
            parts.append(self._first(item, firsts))
            if isinstance(e, Seq) and not is_nullable(item, self.nullable):
                break
        return normalize_ranges(r for ranges, _ in parts for r in ranges), any(opaque for _, opaque in parts)

    def bites(self, e: Expr, g: int) -> bool | None:
        """Does class g's guard change the non-empty strings of `e`?  False: no string begins
        with a guarded character; None: every string does (and `e` is not nullable); True: some."""
        if g == 0:
            return False
        ranges, opaque = self._first(e, self.firsts)
        if not intersect_ranges(ranges, self.guards[g]):
            return False
        if not opaque and not is_nullable(e, self.nullable) and not intersect_ranges(ranges, self.allowed[g]):
            return None
        return True

    # -- atoms: expressions with no ignored terminal and no rule inside (only terminals)

    def is_atom(self, e: Expr) -> bool:
        known = self.atoms.get(e)
        if known is None:
            if e == self.skip:
                known = False
            elif isinstance(e, Ref):
                known = is_terminal_name(e.name)
            elif isinstance(e, (Seq, Alt)):
                known = all(self.is_atom(item) for item in e.items)
            elif isinstance(e, Repeat):
                known = self.is_atom(e.item)
            else:
                known = True
            self.atoms[e] = known
        return known

    def restrict(self, e: Expr, g: int) -> Expr:
        """The non-empty strings of atom `e` whose first character class g allows."""
        key = (e, g)
        if key in self.restricted:
            return self.restricted[key]
        allowed = self.allowed[g]
        bites = self.bites(e, g)
        if bites is not True:
            out = NOTHING if bites is None else _nonempty(e, self.nullable)
            if out is not None:
                self.restricted[key] = out
                return out
        if isinstance(e, Bytes):
            out = e if e.value and _first_allowed(e.value, allowed) else NOTHING
        elif isinstance(e, CharClass):
            out = char_class(intersect_ranges(e.ranges, allowed))
        elif isinstance(e, ByteClass):
            # a raw byte from 0x80 may begin any non-ASCII character: kept only if the guard has none
            high = () if intersect_ranges(self.guards[g], ((0x80, MAX_CODE_POINT),)) else ((0x80, 0xFF),)
            ranges = intersect_ranges(e.ranges, intersect_ranges(allowed, ((0, 0x7F),)) + high)
            out = ByteClass(ranges) if ranges else NOTHING
        elif isinstance(e, CharFsm):
            start = max(_fsm_states(e)) + 1
            first = tuple(
                (start, lo, hi, dst)
                for src, a, b, dst in e.transitions
                if src == e.initial
                for lo, hi in intersect_ranges(((a, b),), allowed)
            )
            out = CharFsm(start, e.finals, e.transitions + first) if first else NOTHING
        elif isinstance(e, Alt):
            out = alt(*(self.restrict(item, g) for item in e.items))
        elif isinstance(e, Seq):
            options = []
            for i, item in enumerate(e.items):
                options.append(seq(self.restrict(item, g), *e.items[i + 1 :]))
                if not is_nullable(item, self.nullable):
                    break
            out = alt(*options)
        elif isinstance(e, Repeat):
            if e.max == 0:
                out = NOTHING
            else:
                lo = 0 if is_nullable(e.item, self.nullable) else max(e.min - 1, 0)
                out = seq(self.restrict(e.item, g), rep(e.item, lo, None if e.max is None else e.max - 1))
        else:
            assert isinstance(e, Ref), e
            if g == 0 and not is_nullable(e, self.nullable):
                out = e
            else:
                name = self._name(e.name, f"__after{g}")
                self.out_rules[name] = NOTHING  # reserve the name (terminals may be recursive)
                self.restricted[key] = Ref(name)
                self.out_rules[name] = self.restrict(
                    self.rules[e.name] if e.name in self.rules else self.out_rules[e.name], g
                )
                return Ref(name)
        self.restricted[key] = out
        return out

    # -- rows: T(e, g) = {h: the strings of e entered with class g pending, leaving with h}

    def row(self, e: Expr, g: int) -> Row:
        key = (e, g)
        if key in self.memo:
            return self.memo[key]
        if e == self.skip:
            out = dict(self.skip_rows[g])
        elif isinstance(e, Ref) and not is_terminal_name(e.name):
            bites = self.bites(e, g)
            if bites is None:
                out = {}
            else:
                # the empty string of a nullable rule leaves the guard pending: keep class g
                entered = g if bites or e.name in self.nullable else 0
                out = {h: Ref(self.variant(e.name, entered, h)) for h in self.exits(e.name, entered)}
        elif self.is_atom(e):
            out = _row(((0, e if g == 0 else self.restrict(e, g)),))
            if g and is_nullable(e, self.nullable):
                out[g] = EPSILON
        elif isinstance(e, Alt):
            options: dict[int, list[Expr]] = {}
            for item in e.items:
                for h, part in self.row(item, g).items():
                    options.setdefault(h, []).append(part)
            out = _row((h, alt(*parts)) for h, parts in options.items())
        elif isinstance(e, Seq):
            out = self.seq_row(e.items, g)
        else:
            assert isinstance(e, Repeat), e
            if e.max is None:
                head = self.seq_row((e.item,) * e.min, g)
                loop = _closure(
                    [[self.row(e.item, s).get(h, NOTHING) for h in self.classes] for s in self.classes],
                    len(self.guards),
                )
                for s_ in self.classes:
                    loop[s_][s_] = alt(EPSILON, loop[s_].get(s_, NOTHING))
                out = {}
                for s, prefix in head.items():
                    _merge(out, {h: seq(prefix, tail) for h, tail in loop[s].items()})
            else:
                tail: Expr = EPSILON
                for _ in range(e.max - e.min):
                    tail = alt(EPSILON, seq(e.item, tail))
                out = self.seq_row((e.item,) * e.min + (tail,), g)
        self.memo[key] = out
        return out

    def seq_row(self, items, g: int) -> Row:
        """Rows of a sequence; where one class is left, the part so far is fixed, so rows stay
        linear in the sequence instead of branching at every item."""
        fixed: list[Expr] = []
        current: Row = {g: EPSILON}
        for item in items:
            if len(current) == 1 and EPSILON in current.values():  # the common case, nothing to join
                (s,) = current
                following = self.row(item, s)
                if len(following) == 1:
                    ((h, part),) = following.items()
                    fixed.append(part)
                    current = {h: EPSILON}
                    continue
                if not following:
                    return {}
                current = following
                continue
            joins: dict[int, dict[Expr, list[Expr]]] = {}  # h -> part -> what may come before it
            for s, before in current.items():
                for h, part in self.row(item, s).items():
                    joins.setdefault(h, {}).setdefault(part, []).append(before)
            following = {
                h: alt(*(seq(alt(*befores), part) for part, befores in parts.items())) for h, parts in joins.items()
            }
            if not following:
                return {}
            if len(following) == 1:
                ((h, part),) = following.items()
                fixed.append(part)
                following = {h: EPSILON}
            current = following
        return _row((h, seq(*fixed, part)) for h, part in current.items())

    def run(self) -> Grammar:
        root = self.grammar.root
        ends = [Ref(self.variant(root, 0, h)) for h in self.exits(root, 0)]
        while self.todo:
            rule, g, h = self.todo.pop()
            self.out_rules[self.variants[(rule, g, h)]] = self.row(self.rules[rule], g).get(h, NOTHING)
        new_root = self._name(root, "__end")
        rules = {new_root: alt(*ends)}
        for name, body in self.rules.items():
            rules[name] = self.out_rules.get(name, body)
        rules.update(self.out_rules)
        positions = dict(self.grammar.positions)
        for name, origin in self.origin.items():
            if origin in positions:
                positions[name] = positions[origin]
        temperatures = dict(self.grammar.temperatures)  # a copy of a rule keeps its temperature
        temperatures.update(
            {name: temperatures[origin] for name, origin in self.origin.items() if origin in temperatures}
        )
        return Grammar(
            rules,
            new_root,
            positions,
            self.grammar.allow_empty,
            dict(self.grammar.checks),
            temperatures={name: t for name, t in temperatures.items() if name in rules},
            refusal=self.grammar.refusal,
        )


def _fixpoint(rules: dict[str, Expr], names: list[str], evaluate, bottom) -> dict:
    """The least solution of value[name] = evaluate(rules[name], value) over `names`, by a
    first-in first-out worklist that re-evaluates a rule's callers when its value changes (a
    caller waiting in it is evaluated once for all the changes it waited for)."""
    values = {name: bottom for name in names}
    callers: dict[str, set[str]] = {}
    for name in names:
        for target in ref_names(rules[name]):
            callers.setdefault(target, set()).add(name)
    todo = deque(reversed(names))  # callees (defined later, as a rule) mostly first
    queued = set(todo)
    while todo:
        name = todo.popleft()
        queued.discard(name)
        new = evaluate(rules[name], values)
        if new != values[name]:
            values[name] = new
            for caller in callers.get(name, ()):
                if caller in values and caller not in queued:
                    queued.add(caller)
                    todo.append(caller)
    return values


def _row(pairs) -> Row:
    return {h: e for h, e in pairs if e != NOTHING}


def _merge(into: Row, more: Row) -> None:
    for h, e in more.items():
        if e != NOTHING:
            into[h] = alt(into[h], e) if h in into else e


def _closure(matrix: list[list[Expr]], n: int) -> list[Row]:
    """Rows of the transitive closure (one or more steps) of a matrix of expressions between n
    classes (Kleene's algorithm; n is tiny)."""
    paths = [row[:] for row in matrix]
    for k in range(n):
        loop = star(paths[k][k]) if paths[k][k] != NOTHING else EPSILON
        nxt = [row[:] for row in paths]
        for i in range(n):
            if paths[i][k] == NOTHING:
                continue
            for j in range(n):
                if paths[k][j] != NOTHING:
                    nxt[i][j] = alt(nxt[i][j], seq(paths[i][k], loop, paths[k][j]))
        paths = nxt
    return [_row((j, paths[i][j]) for j in range(n)) for i in range(n)]


def _first_code_point(data: bytes) -> int | None:
    """The first character of `data`; None when it starts with no UTF-8 character (a token
    terminal's mark, which no guard holds)."""
    for size in range(1, 5):
        try:
            return ord(data[:size].decode("utf-8")[0])
        except (UnicodeDecodeError, IndexError):
            continue
    return None


def _first_allowed(data: bytes, allowed: Ranges) -> bool:
    cp = _first_code_point(data)
    return cp is None or any(lo <= cp <= hi for lo, hi in allowed)


def _nonempty(e: Expr, nullable) -> Expr | None:
    """`e` when it cannot match the empty string (else None: the caller strips it)."""
    return None if is_nullable(e, nullable) else e
