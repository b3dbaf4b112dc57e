"""IR passes, each a function Grammar -> Grammar, composed by `normalize`.

After `normalize(grammar)` the engine may rely on this CONTRACT:
  * every Ref names a defined rule;
  * every rule is reachable from the root and productive (derives at least one string), except
    in a grammar marked `allow_empty` whose root derives nothing: that is the root alone, NOTHING;
  * no rule can derive itself at its left edge (no direct, indirect or hidden left recursion),
    so a top-down PDA never loops without consuming input.
Recursion elsewhere (middle recursion, like balanced parentheses) stays as Refs; a rule that
reaches itself only at the end of its alternatives becomes a loop (`loop_tail_recursion`).

Rule bodies are regular expressions over terminals and Refs, so "the left edge" is computed
with nullability: in `Seq(a, b)` the left corners of `b` count when `a` can be empty.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Set

from ..core.errors import CompileClock, GrammarError
from .ir import (
    EPSILON,
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
    map_refs,
    ref_names,
    rep,
    seq,
    star,
)

__all__ = [
    "PIPELINE",
    "normalize",
    "check_references",
    "remove_unreachable",
    "check_productive",
    "eliminate_left_recursion",
    "loop_tail_recursion",
    "split_large_repeats",
    "inline_small_rules",
    "nullable_rules",
    "left_corners",
    "left_recursive_rules",
]


# ---------------------------------------------------------------------------------------------
# Generic helpers


def _fsm_nonempty(fsm: CharFsm) -> bool:
    """Does the automaton accept any string?  Kept on the node: every productivity check of every
    pass asks again, and string automata run to thousands of transitions."""
    try:
        return fsm._nonempty
    except AttributeError:
        nonempty = _search_final(fsm)
        object.__setattr__(fsm, "_nonempty", nonempty)
        return nonempty


def _search_final(fsm: CharFsm) -> bool:
    edges: dict[int, list[int]] = {}
    for src, _, _, dst in fsm.transitions:
        edges.setdefault(src, []).append(dst)
    seen = {fsm.initial}
    stack = [fsm.initial]
    while stack:
        state = stack.pop()
        if state in fsm.finals:
            return True
        for nxt in edges.get(state, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def is_nullable(expr: Expr, nullable: set[str] | dict[str, bool], known: set[int] | None = None) -> bool:
    """Can `expr` match the empty string, given which rules can?  (`known`: see `_holds`.)"""
    return _holds(expr, nullable, set() if known is None else known, _leaf_nullable)


def is_productive(expr: Expr, productive: set[str], known: set[int] | None = None) -> bool:
    """Does `expr` match at least one string, given which rules do?  (`known`: see `_holds`.)"""
    return _holds(expr, productive, set() if known is None else known, _leaf_productive)


def _leaf_nullable(expr: Expr) -> bool:
    if isinstance(expr, Bytes):
        return not expr.value
    if isinstance(expr, (CharClass, ByteClass)):
        return False
    if isinstance(expr, CharFsm):
        return expr.initial in expr.finals
    raise TypeError(f"unknown IR node {expr!r}")


def _leaf_productive(expr: Expr) -> bool:
    if isinstance(expr, Bytes):
        return True
    if isinstance(expr, (CharClass, ByteClass)):
        return bool(expr.ranges)
    if isinstance(expr, CharFsm):
        return _fsm_nonempty(expr)
    raise TypeError(f"unknown IR node {expr!r}")


def _holds(expr: Expr, names: set[str] | dict[str, bool], known: set[int], leaf: Callable[[Expr], bool]) -> bool:
    """A property closed like nullability and productivity (a sequence has it when all items do,
    an alternation when one does, x{0,n} always, a reference when its rule is in `names`).
    `known` holds the ids of nodes found to have it: the answer only grows with `names`, so a
    caller that keeps `known` across calls (a fixpoint) walks each shared sub-expression once.

    Iterative (an explicit stack of open nodes), so deep nesting cannot exhaust Python's stack;
    like `all` / `any`, a sequence stops at its first item without the property, an alternation
    at its first item with it."""
    lacking: set[int] = set()  # ids of nodes found not to have it (valid for this call's `names` only)
    open_nodes: list[list] = []  # Seq / Alt / Repeat nodes being decided: [node, index of the next item]
    node = expr
    while True:
        key = id(node)
        if key in known:
            verdict: bool | None = True
        elif key in lacking:
            verdict = False
        elif (type(node) is Seq or type(node) is Alt) and node.items or type(node) is Repeat and node.min > 0:
            verdict = None
            open_nodes.append([node, 0])
        elif type(node) is Seq or type(node) is Repeat:  # x{0,n}
            verdict = True
        elif type(node) is Alt:  # NOTHING
            verdict = False
        elif type(node) is Ref:
            verdict = bool(names.get(node.name, False)) if isinstance(names, dict) else node.name in names
        else:
            verdict = leaf(node)
        if verdict and key not in known:
            known.add(key)
        while open_nodes:  # hand the verdict to the open nodes until one needs its next item
            frame = open_nodes[-1]
            parent, index = frame
            parent_kind = type(parent)
            items = (parent.item,) if parent_kind is Repeat else parent.items
            if verdict is not None and (verdict is (parent_kind is Alt) or index == len(items)):
                open_nodes.pop()  # decided: an Alt by an item that has it, the others by one that lacks it
                if verdict:
                    known.add(id(parent))
                else:
                    lacking.add(id(parent))
                continue
            frame[1] = index + 1
            node = items[index]
            break
        else:
            return bool(verdict)


def _fixpoint(rules: dict[str, Expr], holds: Callable[[Expr, set[str], set[int]], bool]) -> set[str]:
    """Least set S of rule names with name in S iff holds(body, S) (monotone predicates).

    A worklist re-checks a rule only when a rule it references joins S, and sub-expressions
    found to hold (`known`, by id: the bodies stay alive meanwhile) are not walked again, so the
    cost is linear in the grammar size rather than quadratic.
    """
    known: set[int] = set()
    users: dict[str, set[str]] = {}
    for name, body in rules.items():
        for target in ref_names(body):
            users.setdefault(target, set()).add(name)
    result: set[str] = set()
    queue = deque(rules)
    queued = set(rules)
    while queue:
        name = queue.popleft()
        queued.discard(name)
        if name in result or not holds(rules[name], result, known):
            continue
        result.add(name)
        for user in users.get(name, ()):
            if user not in result and user not in queued:
                queued.add(user)
                queue.append(user)
    return result


def nullable_rules(grammar: Grammar) -> set[str]:
    """Names of the rules that can derive the empty string."""
    return _fixpoint(grammar.rules, is_nullable)


def left_corners(expr: Expr, nullable: set[str] | dict[str, bool]) -> set[str]:
    """Rules referenced at the left edge of `expr` (preceded only by nullable material).
    Iterative, so deep nesting cannot exhaust Python's stack."""
    corners: set[str] = set()
    nullable_known: set[int] = set()  # one memo for every nullability check of this walk
    visited: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if type(node) is Ref:
            corners.add(node.name)
        elif type(node) is Seq:
            for item in node.items:
                stack.append(item)
                if not is_nullable(item, nullable, nullable_known):
                    break
        elif type(node) is Alt:
            stack.extend(node.items)
        elif type(node) is Repeat:
            stack.append(node.item)
    return corners


def _strongly_connected(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """Tarjan's SCCs (iterative), returned sinks first: an SCC comes after every SCC it reaches."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(component)
    return result


def _cyclic_components(graph: Mapping[str, Set[str]]) -> list[list[str]]:
    """SCCs that contain a cycle (more than one rule, or a rule with an edge to itself)."""
    return [c for c in _strongly_connected(graph) if len(c) > 1 or c[0] in graph.get(c[0], ())]


def left_corner_graph(grammar: Grammar) -> dict[str, set[str]]:
    nullable = nullable_rules(grammar)
    return {name: left_corners(body, nullable) & grammar.rules.keys() for name, body in grammar.rules.items()}


def left_recursive_rules(grammar: Grammar) -> list[list[str]]:
    """Groups of rules that can derive themselves at their left edge (empty list: none)."""
    return _cyclic_components(left_corner_graph(grammar))


def _position(grammar: Grammar, name: str) -> tuple[int | None, int | None]:
    return grammar.positions.get(name, (None, None))


# ---------------------------------------------------------------------------------------------
# Passes


def check_references(grammar: Grammar) -> Grammar:
    """Every Ref must name a rule, and the root must exist."""
    if grammar.root not in grammar.rules:
        raise GrammarError(f"root rule {grammar.root!r} is not defined; add `{grammar.root} ::= ...`", 1, 1)
    for name, body in grammar.rules.items():
        for target in sorted(ref for ref in ref_names(body) if ref not in grammar.rules):
            raise GrammarError(
                f"rule {name!r} references undefined rule {target!r}; define it", *_position(grammar, name)
            )
    return grammar


def _reachable(grammar: Grammar) -> set[str]:
    seen = {grammar.root}
    todo = [grammar.root]
    while todo:
        for target in ref_names(grammar.rules[todo.pop()]):
            if target not in seen and target in grammar.rules:
                seen.add(target)
                todo.append(target)
    return seen


def remove_unreachable(grammar: Grammar) -> Grammar:
    """Drop rules the root cannot reach (definition order is kept)."""
    keep = _reachable(grammar)
    out = grammar.copy({name: body for name, body in grammar.rules.items() if name in keep})
    out.positions = {name: pos for name, pos in grammar.positions.items() if name in keep}
    out.productive = grammar.productive  # a kept rule references kept rules only
    return out


def check_productive(grammar: Grammar) -> Grammar:
    """Remove rules that derive no string; references to them become NOTHING.

    If the root derives nothing the grammar accepts no string, which is an error unless the
    grammar says the empty language is intended (`allow_empty`): then the root becomes NOTHING.
    """
    if grammar.productive:
        return grammar
    productive = _fixpoint(grammar.rules, is_productive)
    if grammar.root not in productive and grammar.allow_empty:
        out = grammar.copy({grammar.root: NOTHING})
        out.positions = {name: pos for name, pos in grammar.positions.items() if name == grammar.root}
        return out
    if grammar.root not in productive:
        raise GrammarError(
            f"grammar accepts no string: rule {grammar.root!r} can never finish "
            "(every alternative needs an infinite derivation or an empty class); "
            "add a non-recursive alternative",
            *_position(grammar, grammar.root),
        )
    if len(productive) == len(grammar.rules):
        out = grammar.copy()
        out.productive = True
        return out
    rules = {
        name: map_refs(body, lambda r: r if r.name in productive else NOTHING)
        for name, body in grammar.rules.items()
        if name in productive
    }
    out = grammar.copy(rules)
    out.positions = {name: pos for name, pos in grammar.positions.items() if name in productive}
    out.productive = True  # no productive rule needed the ones dropped
    return out


# ---------------------------------------------------------------------------------------------
# Left recursion


class _LeftRecursionEliminator:
    """Paull's algorithm applied to each left-recursive SCC, on bodies in "leading normal form".

    A rule body becomes a list of alternatives, each a list of items; the first item (the head)
    is expanded until it is either a Ref into the SCC being processed, or the whole alternative
    cannot reach the SCC at its left edge.  Nullable heads are split into "absent" and a
    non-empty version (new rules `X__nonempty` for nullable rules), which exposes left recursion
    hidden behind optional prefixes such as `A ::= ws? A "x"`.
    """

    def __init__(self, grammar: Grammar):
        self.grammar = grammar
        self.rules = dict(grammar.rules)
        self.nullable: dict[str, bool] = {name: True for name in nullable_rules(grammar)}
        self.nonempty_rules: dict[str, str] = {}
        self.new_rules: dict[str, str] = {}  # helper rule -> the rule it came from (for positions)
        self._reach_memo: dict[str, bool] = {}

    # --- languages minus the empty string -----------------------------------------------------

    def nonempty(self, expr: Expr) -> Expr:
        """An expression for L(expr) without the empty string.  Iterative (an explicit stack of
        the nodes being rewritten), so deep nesting cannot exhaust Python's stack."""
        nullable_known: set[int] = set()  # one memo for every nullability check of this call
        done: dict[int, Expr] = {}  # id of a node below `expr` -> its language without ""
        stack = [expr]
        while stack:
            node = stack[-1]
            if id(node) in done:
                stack.pop()
                continue
            if not is_nullable(node, self.nullable, nullable_known):
                done[id(node)] = node
                stack.pop()
                continue
            parts: tuple[Expr, ...] = (
                (node.item,) if type(node) is Repeat else node.items if type(node) is Seq or type(node) is Alt else ()
            )
            missing = [part for part in parts if id(part) not in done]
            if missing:
                stack.extend(missing)  # rewritten first; `node` is taken up again after them
                continue
            stack.pop()
            done[id(node)] = self._nonempty_node(node, done)
        return done[id(expr)]

    def _nonempty_node(self, expr: Expr, done: dict[int, Expr]) -> Expr:
        """L(expr) without "" for a nullable `expr` whose items' rewrites are in `done`."""
        if isinstance(expr, Bytes):
            return NOTHING
        if isinstance(expr, CharFsm):
            fresh = max([expr.initial] + [max(t[0], t[3]) for t in expr.transitions]) + 1
            copied = tuple((fresh, lo, hi, dst) for src, lo, hi, dst in expr.transitions if src == expr.initial)
            return CharFsm(fresh, expr.finals, tuple(sorted(expr.transitions + copied)))
        if isinstance(expr, Alt):
            return alt(*(done[id(item)] for item in expr.items))
        if isinstance(expr, Seq):
            # every item is nullable: a non-empty string has a first item that matches non-empty text
            items = expr.items
            return alt(*(seq(done[id(item)], *items[k + 1 :]) for k, item in enumerate(items)))
        if isinstance(expr, Repeat):
            hi = None if expr.max is None else expr.max - 1
            # x{m,n} with x nullable or m == 0: a non-empty string starts with a non-empty x.
            return seq(done[id(expr.item)], rep(expr.item, 0, hi))
        if isinstance(expr, Ref):
            return Ref(self.nonempty_rule(expr.name))
        raise TypeError(f"unknown IR node {expr!r}")

    def nonempty_rule(self, name: str) -> str:
        if name not in self.nonempty_rules:
            new = f"{name}__nonempty"
            while new in self.rules:
                new += "_"
            self.nonempty_rules[name] = new
            self.nullable[new] = False
            self.rules[new] = NOTHING  # placeholder so recursive references resolve
            self.rules[new] = self.nonempty(self.rules[name])
        return self.nonempty_rules[name]

    # --- reaching the SCC at the left edge ----------------------------------------------------

    def reaches(self, expr: Expr, scc: set[str]) -> bool:
        return any(self.rule_reaches(name, scc) for name in left_corners(expr, self.nullable))

    def rule_reaches(self, name: str, scc: set[str]) -> bool:
        if name in scc:
            return True
        if name not in self._reach_memo:
            seen = {name}
            todo = [name]
            found = False
            while todo and not found:
                for corner in left_corners(self.rules[todo.pop()], self.nullable):
                    if corner in scc:
                        found = True
                        break
                    if corner not in seen and corner in self.rules:
                        seen.add(corner)
                        todo.append(corner)
            self._reach_memo[name] = found
        return self._reach_memo[name]

    def leading_form(self, sequences: Iterable[list[Expr]], scc: set[str]) -> list[list[Expr]]:
        """Expand heads until each alternative starts with an SCC Ref or cannot reach the SCC."""
        done: list[list[Expr]] = []
        todo = [list(s) for s in sequences]
        steps = 0
        while todo:
            steps += 1
            if steps > 100_000:
                raise GrammarError(
                    f"left-recursion elimination does not converge; simplify the recursive rules {sorted(scc)}",
                    *_position(self.grammar, sorted(scc)[0]),
                )
            items = todo.pop()
            if not items:
                done.append(items)
                continue
            head, rest = items[0], items[1:]
            if head == NOTHING:
                continue
            if isinstance(head, Seq):
                todo.append(list(head.items) + rest)
                continue
            if isinstance(head, Alt):
                todo.extend([item] + rest for item in head.items)
                continue
            if isinstance(head, Bytes) and not head.value:
                todo.append(rest)
                continue
            if isinstance(head, Ref) and head.name in scc:
                done.append(items)
                continue
            if not self.reaches(seq(*items), scc):
                done.append(items)
                continue
            if is_nullable(head, self.nullable):
                todo.append(rest)
                todo.append([self.nonempty(head)] + rest)
                continue
            if isinstance(head, Repeat):  # min >= 1 here
                hi = None if head.max is None else head.max - 1
                todo.append([head.item, rep(head.item, head.min - 1, hi)] + rest)
                continue
            # A non-nullable head outside the SCC that reaches it would itself be in the SCC.
            done.append(items)
        done.reverse()
        return done

    # --- Paull's algorithm --------------------------------------------------------------------

    def remove_epsilon(self, scc_names: list[str]) -> list[str]:
        """Make the SCC epsilon-free, which Paull's algorithm needs.

        Each nullable rule X of the SCC gets a non-empty twin X__nonempty; inside the SCC every
        `X` becomes `(X__nonempty | "")` and X itself becomes `X__nonempty | ""`.  The twins
        (with the non-nullable members) form the new, epsilon-free recursive group.
        """
        nullable_members = [name for name in scc_names if self.nullable.get(name)]
        if not nullable_members:
            return scc_names
        twins = {}
        for name in nullable_members:
            twin = f"{name}__nonempty"
            while twin in self.rules:
                twin += "_"
            twins[name] = twin
            self.nonempty_rules[name] = twin
            self.nullable[twin] = False
        rewritten = {
            name: map_refs(self.rules[name], lambda r: alt(Ref(twins[r.name]), EPSILON) if r.name in twins else r)
            for name in scc_names
        }
        group = []
        for name in scc_names:
            if name in twins:
                self.rules[twins[name]] = self.nonempty(rewritten[name])
                self.rules[name] = alt(Ref(twins[name]), EPSILON)
                group.append(twins[name])
            else:
                self.rules[name] = rewritten[name]
                group.append(name)
        return group

    def helper_rule(self, origin: str, suffix: str, body: Expr) -> Ref:
        """A new rule `origin__suffix` (named after the rule it came from, for positions)."""
        name = f"{origin}__{suffix}"
        while name in self.rules:
            name += "_"
        self.rules[name] = body
        self.nullable[name] = is_nullable(body, self.nullable)
        self.new_rules[name] = origin
        return Ref(name)

    def compact(self, name: str, alternatives: list[list[Expr]], scc: set[str]) -> list[list[Expr]]:
        """Group alternatives so that later substitutions copy Refs, not whole expressions.

        Paull's algorithm copies the alternatives of earlier rules into later ones, which grows
        exponentially along chains of rules.  Here the alternatives that are finished (their
        head cannot reach the group) become one helper rule, and the alternatives sharing an
        SCC head `B` become `B name__after_B` with the rests in a helper rule.
        """
        done: list[list[Expr]] = []
        by_head: dict[str, list[list[Expr]]] = {}
        for items in alternatives:
            if items and isinstance(items[0], Ref) and items[0].name in scc:
                by_head.setdefault(items[0].name, []).append(items[1:])
            else:
                done.append(items)
        out: list[list[Expr]] = []
        if len(done) == 1:
            out.append(done[0])
        elif done:
            out.append([self.helper_rule(name, "base", alt(*(seq(*items) for items in done)))])
        for head, rests in by_head.items():
            rest = alt(*(seq(*items) for items in rests))
            if len(rests) == 1 and expr_size(rest, limit=TINY_RULE_SIZE) <= TINY_RULE_SIZE:
                out.append([Ref(head)] + rests[0])
            else:
                out.append([Ref(head), self.helper_rule(name, f"after_{head}", rest)])
        return out

    def eliminate(self, scc_names: list[str]) -> None:
        scc_names = self.remove_epsilon(scc_names)
        scc = set(scc_names)
        indirect = len(scc_names) > 1
        self._reach_memo.clear()
        forms: dict[str, list[list[Expr]]] = {}
        for i, name in enumerate(scc_names):
            alternatives = self.leading_form([[self.rules[name]]], scc)
            for earlier in scc_names[:i]:
                substituted: list[list[Expr]] = []
                for items in alternatives:
                    if items and items[0] == Ref(earlier):
                        substituted.extend(form + items[1:] for form in forms[earlier])
                    else:
                        substituted.append(items)
                alternatives = self.leading_form(substituted, scc)
            recursive = [items[1:] for items in alternatives if items and items[0] == Ref(name)]
            base = [items for items in alternatives if not (items and items[0] == Ref(name))]
            if indirect:
                base = self.compact(name, base, scc)
            tails = [seq(*items) for items in recursive if items]  # `A ::= A` adds nothing
            if tails:
                loop = star(alt(*tails))
                if indirect:  # later rules copy this loop: keep it a Ref
                    loop = self.helper_rule(name, "loop", loop)
                base = [items + [loop] for items in base]
            forms[name] = base
            self.rules[name] = alt(*(seq(*items) for items in base))

    def run(self) -> Grammar:
        for component in _cyclic_components(left_corner_graph(self.grammar)):
            order = [name for name in self.grammar.rules if name in component]  # definition order
            hot = [name for name in order if name in self.grammar.temperatures]
            if len(order) > 1 and hot:  # Paull's substitution copies one rule's text into another
                raise GrammarError(
                    f"rule {hot[0]!r} has a temperature and is left-recursive through rules "
                    f"{', '.join(order)}: its text would be copied into other rules; make the recursion "
                    "direct (`r ::= r x | y`) or move the temperature to a rule outside the cycle",
                    *_position(self.grammar, hot[0]),
                )
            self.eliminate(order)
        out = self.grammar.copy(self.rules)
        for original, new in self.nonempty_rules.items():
            self.new_rules[new] = original
        for new, original in self.new_rules.items():
            if original in out.positions:
                out.positions[new] = out.positions[original]
        remaining = left_recursive_rules(out)
        if remaining:
            names = sorted(set(remaining[0]) & set(self.grammar.rules)) or sorted(remaining[0])
            raise GrammarError(
                f"cannot eliminate left recursion through rules {', '.join(names)}: a rule reaches itself "
                "at its left edge behind a nullable prefix; make that prefix non-empty or move it after "
                "the recursive reference",
                *_position(self.grammar, names[0]),
            )
        return out


def eliminate_left_recursion(grammar: Grammar) -> Grammar:
    """Remove direct, indirect and (where possible) hidden left recursion.

    `A ::= A a | b` becomes `A ::= b a*`; indirect recursion is made direct by substituting
    earlier rules of the same SCC (Paull).  The language is unchanged.  Left recursion that
    survives (through nullable rules of the SCC itself) is a GrammarError naming the rules.
    """
    if not left_recursive_rules(grammar):
        return grammar
    return _LeftRecursionEliminator(grammar).run()


# ---------------------------------------------------------------------------------------------
# Tail recursion


def loop_tail_recursion(grammar: Grammar) -> Grammar:
    """Turn a rule that reaches itself only at the end of its alternatives into a loop.

    `R ::= x R | y R | z` becomes `R ::= (x | y)* z` (Arden's lemma: the least solution of
    R = X R | Z is X* Z, whatever rules X and Z use besides R), so the language is unchanged.  As
    a reference, each character of `x` would push a frame, and where `z` can be empty every
    pushed frame can return at once: text of n characters then holds n live stacks (XGrammar's
    right-recursive JSON string rule ran out of stack tops on 10,000 characters).  Rules with a
    value check or a token limit keep their shape: their instances are what those count.  A
    rule with a temperature may loop: its text is inside it either way.
    """
    rules = dict(grammar.rules)
    changed = False
    for name, body in grammar.rules.items():
        if name in grammar.checks or name in grammar.token_limits or name not in ref_names(body):
            continue
        tail = Ref(name)
        prefixes: list[Expr] = []
        bases: list[Expr] = []
        for option in body.items if type(body) is Alt else (body,):
            items = option.items if type(option) is Seq else (option,)
            if items[-1] == tail and name not in ref_names(seq(*items[:-1])):
                prefixes.append(seq(*items[:-1]))
            elif name not in ref_names(option):
                bases.append(option)
            else:  # the rule reaches itself elsewhere (middle recursion): it stays a reference
                break
        else:
            if prefixes and bases:
                rules[name] = seq(star(alt(*prefixes)), alt(*bases))
                changed = True
    return grammar.copy(rules) if changed else grammar


# ---------------------------------------------------------------------------------------------
# Inlining

TINY_RULE_SIZE = 6  # rules this small are inlined wherever they are used
MAX_INLINED_SIZE = 256  # bigger single-use rules stay rules, which keeps bodies shallow


def expr_size(expr: Expr, _memo: dict[int, int] | None = None, limit: int = sys.maxsize) -> int:
    """Rough size of an expression's automaton (nodes; an automaton counts its edges, a bounded
    repetition its copies), counted as a tree; a sub-expression shared by several parents (the
    JSON Schema compiler builds such DAGs) is measured once.  Counting stops past `limit`: a
    result above it only says "bigger" (for callers that compare with a threshold)."""
    return _tree_measure(expr, {} if _memo is None else _memo, _copies, lambda fsm: 1 + len(fsm.transitions), limit)


def expr_nodes(expr: Expr, fsm_edges: bool = False) -> int:
    """Nodes of an expression counted as a tree, a repetition once (unlike `expr_size`, which
    counts its copies); an automaton is one node, or with `fsm_edges` as many as its edges.  A
    shared sub-expression is measured once.  The JSON Schema compiler's thresholds use it."""
    fsm_size = (lambda fsm: len(fsm.transitions)) if fsm_edges else (lambda fsm: 1)
    return _tree_measure(expr, {}, lambda rep: 1, fsm_size, sys.maxsize)


def expr_positions(expr: Expr, limit: int = sys.maxsize, _memo: dict[int, int] | None = None) -> int:
    """Like `expr_size`, but a byte string counts its bytes: about the positions (NFA states) of
    the expression's automaton, which `max_rule_states` bounds.  `_memo` may be shared by the
    walks of one grammar's rules (it holds exact sizes only)."""
    return _tree_measure(
        expr,
        {} if _memo is None else _memo,
        _copies,
        lambda fsm: 1 + len(fsm.transitions),
        limit,
        lambda leaf: max(1, len(leaf.value)),
    )


def _tree_measure(
    expr: Expr, memo: dict[int, int], copies, fsm_size, limit: int, bytes_size: Callable[[Bytes], int] | None = None
) -> int:
    """Nodes of `expr` as a tree: Seq/Alt 1 + their items, Repeat 1 + its item times `copies(rep)`,
    a CharFsm `fsm_size(fsm)`, any other leaf 1; memoised by node identity in `memo`, which
    holds exact sizes only: a walk cut short past `limit` returns a partial count above it.
    Iterative (an explicit stack of open nodes), so deep nesting cannot exhaust Python's stack."""

    def leaf_size(leaf: Expr) -> int:
        if type(leaf) is CharFsm:
            return fsm_size(leaf)
        return bytes_size(leaf) if bytes_size is not None and type(leaf) is Bytes else 1

    got = memo.get(id(expr))
    if got is not None:
        return got
    if type(expr) not in (Seq, Alt, Repeat):
        size = memo[id(expr)] = leaf_size(expr)
        return size
    open_nodes: list[list] = [[expr, 0, 1]]  # [Seq / Alt / Repeat node, index of the next item, size so far]
    while True:
        frame = open_nodes[-1]
        node, index, size = frame
        repeat = type(node) is Repeat
        items = (node.item,) if repeat else node.items
        if index == len(items):
            memo[id(node)] = size
            open_nodes.pop()
            if not open_nodes:
                return size
            continue
        item = items[index]
        got = memo.get(id(item))
        if got is None:
            if type(item) in (Seq, Alt, Repeat):
                open_nodes.append([item, 0, 1])  # measured first; this frame then finds it in the memo
                continue
            got = memo[id(item)] = leaf_size(item)
        frame[1] = index + 1
        frame[2] = size = size + got * (copies(node) if repeat else 1)  # the automaton holds max copies
        if size > limit:
            return size


def _copies(expr: Repeat) -> int:
    return max(1, expr.max if expr.max is not None else expr.min)


def _built_once(bodies: Iterable[Expr], names: set[str]) -> set[str]:
    """Those of `names` whose rule the automata would build exactly once: referenced once in all
    `bodies` counted as trees, where a reference inside x{m,n} counts n times (m if unbounded)
    because the automaton holds that many copies -- inlining the rule there copies its body.

    The walk descends only into sub-expressions that still reference an undecided name and
    drops a name at its second copy, so each node is visited a bounded number of times however
    widely the bodies share sub-expressions (a tree walk of a DAG can be exponential)."""
    copies_of = dict.fromkeys(names, 0)
    undecided = set(names)
    for body in bodies:
        stack = [(body, 1)]
        while stack and undecided:
            node, copies = stack.pop()
            if undecided.isdisjoint(ref_names(node)):
                continue
            if type(node) is Ref:
                copies_of[node.name] += copies
                if copies_of[node.name] > 1:
                    undecided.discard(node.name)
            elif type(node) is Repeat:
                stack.append((node.item, copies * _copies(node)))
            elif type(node) is Seq or type(node) is Alt:  # only they hold references below them
                stack.extend((item, copies) for item in node.items)
    return {name for name, copies in copies_of.items() if copies == 1}


def inline_small_rules(grammar: Grammar, tiny: int = TINY_RULE_SIZE) -> Grammar:
    """Inline non-recursive rules that are referenced once, or tiny, to save stack operations.

    The root is kept.  Inlining a rule that is in no reference cycle cannot create recursion,
    so the left-recursion contract still holds afterwards.  Single-use rules bigger than
    MAX_INLINED_SIZE stay rules, so long chains do not build one very deep expression.
    """
    rules = dict(grammar.rules)
    graph = {name: ref_names(body) & rules.keys() for name, body in rules.items()}
    recursive = {name for component in _cyclic_components(graph) for name in component}
    kept = recursive | grammar.kept_rules() | {grammar.root}
    used_once = _built_once(rules.values(), rules.keys() - kept)

    # Leaves first: every rule a body references comes earlier (or is in its own cycle, never
    # inlined), so one rewrite per body substitutes final bodies; rewriting each user once per
    # inlined rule instead would be quadratic (an alternation of 10,000 tiny rules).
    inlined: dict[str, Expr] = {}
    # One size memo for the whole pass (a body holds the bodies inlined into it, so fresh memos
    # would re-measure a chain of single-use rules quadratically); `measured` keeps every measured
    # body alive so that no id in the memo is reused by a new node.
    size_memo: dict[int, int] = {}
    measured: list[Expr] = []
    for component in _strongly_connected(graph):
        for name in component:
            if graph[name] & inlined.keys():
                rules[name] = map_refs(rules[name], lambda r: inlined.get(r.name, r))
        name = component[0]
        if len(component) > 1 or name in kept:
            continue
        measured.append(rules[name])
        size = expr_size(rules[name], size_memo, max(tiny, MAX_INLINED_SIZE))
        if size <= tiny or (name in used_once and size <= MAX_INLINED_SIZE):
            inlined[name] = rules[name]
    return remove_unreachable(grammar.copy(rules))


# ---------------------------------------------------------------------------------------------
# Counted repetitions too big for one rule automaton

SPLIT_REPEAT_SIZE = 50_000
"""A `Regex(...)` whose automaton holds more positions than this (half the default
`max_rule_states`) has its repetitions of more positions than this split into helper rules."""
REPEAT_BLOCK_SIZE = 4_096
"""The positions of one block rule of a split repetition (a block is x{B}, B of them fit)."""


def split_large_repeats(expr: Expr, origin: str, rules: dict[str, Expr]) -> Expr:
    """`expr` (a rule's part: EBNF's `Regex(...)`) with each bounded repetition x{m,n} (or
    x{m,}) too big for one rule automaton split into helper rules, added to `rules` (named
    `origin.blockN`, which no grammar text can define; the reader gives them `origin`'s
    position): a block rule `b ::= x{B}` and counts of blocks, so no automaton holds more than
    a block or a count of block references (XGrammar makes such counts grammar-level repeats):

        x{n}   = b{q} x{r}                          (n = qB + r, r < B)
        x{0,n} = b{0,q-1} x{0,B-1} | b{q} x{0,r}
        x{m,n} = x{m} x{0,n-m},  x{m,} = x{m} x*

    The same strings (each count k <= n is q'B + r' one way), read with a few stacks at a time.
    A count of blocks too big for one automaton is split again.  An expression of at most
    SPLIT_REPEAT_SIZE positions is returned as it is."""
    if expr_positions(expr, SPLIT_REPEAT_SIZE) <= SPLIT_REPEAT_SIZE:
        return expr
    return _RepeatSplitter(origin, rules).rewrite(expr)


class _RepeatSplitter:
    """Rewrites an expression bottom-up, adding the helper rules of `split_large_repeats`."""

    def __init__(self, origin: str, rules: dict[str, Expr]):
        self.origin = origin
        self.rules = rules

    def helper(self, body: Expr) -> Ref:
        number = 1
        while f"{self.origin}.block{number}" in self.rules:
            number += 1
        name = f"{self.origin}.block{number}"
        self.rules[name] = body
        return Ref(name)

    def rewrite(self, expr: Expr) -> Expr:
        """`expr` with every repetition too big for one automaton split (iterative post-order,
        shared sub-expressions rewritten once)."""
        done: dict[int, Expr] = {}
        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            node, children_done = stack.pop()
            if id(node) in done:
                continue
            if type(node) is Seq or type(node) is Alt:
                children = node.items
            elif type(node) is Repeat:
                children = (node.item,)
            else:
                done[id(node)] = node
                continue
            if not children_done:
                stack.append((node, True))
                stack.extend((child, False) for child in children if id(child) not in done)
                continue
            new = [done[id(child)] for child in children]
            if type(node) is Repeat:
                done[id(node)] = self.counted(new[0], node.min, node.max, node)
            elif all(a is b for a, b in zip(new, children)):
                done[id(node)] = node
            else:
                done[id(node)] = seq(*new) if type(node) is Seq else alt(*new)
        return done[id(expr)]

    def counted(
        self, item: Expr, low: int, high: int | None, original: Expr | None = None, limit: int | None = None
    ) -> Expr:
        """x{low,high}, split if its copies hold more than `limit` positions (SPLIT_REPEAT_SIZE;
        for a count of blocks, a block's)."""
        limit = SPLIT_REPEAT_SIZE if limit is None else limit
        size = expr_positions(item, limit=limit)
        if size * max(1, high if high is not None else low) <= limit:
            if original is not None and item is getattr(original, "item", None):
                return original
            return rep(item, low, high)
        block_count = max(2, REPEAT_BLOCK_SIZE // max(size, 1))
        block = self.helper(rep(item, block_count, block_count))

        def exact(n: int) -> Expr:
            q, r = divmod(n, block_count)
            return seq(self.counted(block, q, q, limit=REPEAT_BLOCK_SIZE), rep(item, r, r))

        def up_to(n: int) -> Expr:
            q, r = divmod(n, block_count)
            if q == 0:
                return rep(item, 0, r)
            return alt(
                seq(self.counted(block, 0, q - 1, limit=REPEAT_BLOCK_SIZE), rep(item, 0, block_count - 1)),
                seq(self.counted(block, q, q, limit=REPEAT_BLOCK_SIZE), rep(item, 0, r)),
            )

        return seq(exact(low), star(item) if high is None else up_to(high - low))


# ---------------------------------------------------------------------------------------------

PIPELINE: list[Callable[[Grammar], Grammar]] = [
    check_references,
    remove_unreachable,
    check_productive,
    remove_unreachable,
    eliminate_left_recursion,
    check_productive,  # elimination may create empty helper rules (the non-empty part of "")
    loop_tail_recursion,
    inline_small_rules,  # ends with remove_unreachable
]


def normalize(grammar: Grammar, clock: CompileClock | None = None) -> Grammar:
    """Run every pass of PIPELINE in order; the result satisfies the module's CONTRACT.
    `clock` (a wall-clock limit) is checked before each pass."""
    for step in PIPELINE:
        if clock is not None:
            clock.check(f"the {step.__name__} pass")
        grammar = step(grammar)
    return grammar
