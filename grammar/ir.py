"""The grammar IR every front end produces: named rules whose bodies are regular expressions
over bytes, Unicode character classes (matched as UTF-8) and references to other rules.

Expressions are immutable and hashable, so passes can memoise on them and rule bodies can be
compared structurally.  The empty sequence matches the empty string; the empty alternative
matches nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import GrammarError

if TYPE_CHECKING:
    from . import grammar_api, serialization
    from .json_checks import ValueCheck

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)


class Expr:
    """Base class of IR expressions."""

    # computed on first use (`_hash_once`, `ref_names`, automata/dfa.py's structure digest of a
    # CharFsm, passes' emptiness check of a CharFsm), or kept from construction (a CharFsm's
    # transitions as an array and its emptiness, `char_fsm_of_columns`); not part of the value
    __slots__ = ("_hash", "_refs", "_digest", "_nonempty", "_table")
    _hash: int
    _refs: frozenset[str]
    _digest: bytes
    _nonempty: bool
    _table: np.ndarray


def _hash_once(cls):
    """Give an expression class a hash computed once per node: expressions are trees that share
    subtrees (an object member's key automaton sits under many alternatives), and the generated
    dataclass hash walks the whole tree on every set or dict lookup."""
    structural = cls.__hash__

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:  # not hashed yet (or unpickled: the slot is not pickled)
            _hash_inner_nodes(self)
            h = structural(self)
            object.__setattr__(self, "_hash", h)
            return h

    cls.__hash__ = __hash__
    return cls


def _hash_inner_nodes(node: Expr) -> None:
    """Hash the not yet hashed Seq / Alt / Repeat nodes below `node`, deepest first, so that
    hashing `node` reads its children's stored hashes instead of recursing down a deep tree."""
    unhashed: list[Expr] = []  # in pre-order: a parent before its children
    stack = [node]
    while stack:
        parent = stack.pop()
        children: tuple[Expr, ...] = (
            (parent.item,)
            if type(parent) is Repeat
            else parent.items
            if type(parent) is Seq or type(parent) is Alt
            else ()
        )
        for child in children:
            child_kind = type(child)
            if (child_kind is Seq or child_kind is Alt or child_kind is Repeat) and not hasattr(child, "_hash"):
                unhashed.append(child)
                stack.append(child)
    for inner in reversed(unhashed):
        hash(inner)


@_hash_once
@dataclass(frozen=True, slots=True)
class Bytes(Expr):
    """A literal byte string; b"" is epsilon."""

    value: bytes


@_hash_once
@dataclass(frozen=True, slots=True)
class CharClass(Expr):
    """One Unicode code point from `ranges` (inclusive, sorted, disjoint, no surrogates), as UTF-8."""

    ranges: tuple[tuple[int, int], ...]


@_hash_once
@dataclass(frozen=True, slots=True)
class ByteClass(Expr):
    """One raw byte from `ranges` (inclusive, sorted, disjoint, within 0..255)."""

    ranges: tuple[tuple[int, int], ...]


@_hash_once
@dataclass(frozen=True, slots=True)
class Seq(Expr):
    items: tuple[Expr, ...]


@_hash_once
@dataclass(frozen=True, slots=True)
class Alt(Expr):
    """Alternation; Alt(()) is the empty language."""

    items: tuple[Expr, ...]


@_hash_once
@dataclass(frozen=True, slots=True)
class Repeat(Expr):
    """`item` repeated min..max times; max None means unbounded."""

    item: Expr
    min: int
    max: int | None


def _tree_eq(self: Expr, other: object) -> bool:
    """Structural equality of Seq / Alt / Repeat nodes, walked with an explicit stack (the
    generated dataclass __eq__ recurses once per nesting level) and cut short by the stored hashes."""
    if type(other) is not type(self):
        return NotImplemented
    pairs: list[tuple[Expr, Expr]] = [(self, other)]  # type: ignore[list-item]
    while pairs:
        a, b = pairs.pop()
        if a is b:
            continue
        kind = type(a)
        if kind is not type(b) or hash(a) != hash(b):
            return False
        if kind is Seq or kind is Alt:
            if len(a.items) != len(b.items):  # type: ignore[attr-defined]
                return False
            pairs.extend(zip(a.items, b.items))  # type: ignore[attr-defined]
        elif kind is Repeat:
            if a.min != b.min or a.max != b.max:  # type: ignore[attr-defined]
                return False
            pairs.append((a.item, b.item))  # type: ignore[attr-defined]
        elif a != b:
            return False
    return True


Seq.__eq__ = Alt.__eq__ = Repeat.__eq__ = _tree_eq  # type: ignore[assignment,method-assign]


@_hash_once
@dataclass(frozen=True, slots=True)
class Ref(Expr):
    """A reference to the rule called `name`."""

    name: str


class _WeaklyReferable(Expr):
    """An expression a weak reference may name: automata/dfa.py keeps a CharFsm's layout by the
    automaton's identity without keeping the automaton (its transition tuples) alive."""

    __slots__ = ("__weakref__",)


class TransitionRows(Sequence):
    """The transitions of a CharFsm built from arrays (`char_fsm_of_columns`), read as the tuple
    of (source, lo, hi, target) rows they stand for, written out on first use only: a JSON
    string automaton's thousands of row tuples cost more than the rest of its compile, and the
    compiler itself reads the array (`_table`).  Equal to that tuple, and pickled as it."""

    __slots__ = ("_table", "_rows")

    def __init__(self, table: np.ndarray):
        self._table = table
        self._rows: tuple[tuple[int, int, int, int], ...] | None = None

    def rows(self) -> tuple[tuple[int, int, int, int], ...]:
        if self._rows is None:
            # zip builds the row tuples directly (a third faster than tuples of tolist's row lists)
            self._rows = tuple(zip(*(column.tolist() for column in self._table.T)))
        return self._rows

    def __len__(self) -> int:
        return self._table.shape[0]

    def __getitem__(self, index):
        return self.rows()[index]

    def __iter__(self):
        return iter(self.rows())

    def __add__(self, other):
        return self.rows() + tuple(other)

    def __radd__(self, other):
        return tuple(other) + self.rows()

    def __eq__(self, other) -> bool:
        if isinstance(other, TransitionRows):
            return self._table.shape == other._table.shape and bool(np.array_equal(self._table, other._table))
        return self.rows() == other

    def __hash__(self) -> int:
        return hash(self.rows())

    def __repr__(self) -> str:
        return repr(self.rows())

    def __reduce__(self):
        return tuple, (self.rows(),)


def _fsm_content(fsm: CharFsm) -> bytes:
    """The transitions as int64 bytes: the one form two CharFsms compare by when either keeps
    its rows as an array (equal rows, equal bytes)."""
    table = getattr(fsm, "_table", None)
    if table is not None:
        return table.astype(np.int64).tobytes()
    rows = fsm.transitions
    return np.fromiter(chain.from_iterable(rows), np.int64, 4 * len(rows)).tobytes()


def _fsm_sample(fsm: CharFsm) -> tuple:
    """The number of rows and the first, middle and last row, read alike from either form: what
    a CharFsm hashes by, in constant time (equal automata give equal samples; automata that
    share one compare their rows)."""
    rows = fsm.transitions
    count = len(rows)
    picks = (0, count // 2, count - 1) if count else ()
    table = getattr(fsm, "_table", None)
    if table is not None:
        return (count, *(tuple(table[i].tolist()) for i in picks))
    return (count, *(tuple(rows[i]) for i in picks))


@_hash_once
@dataclass(frozen=True, slots=True)
class CharFsm(_WeaklyReferable):
    """A finite automaton over code points, inlined as UTF-8 (how regex front ends hand over).

    transitions: (source, lo, hi, target) with inclusive code-point ranges; states are ints.
    Hashed by a sample of its rows and compared by all of them, without writing out the rows
    of one built from arrays.
    """

    initial: int
    finals: frozenset[int]
    transitions: tuple[tuple[int, int, int, int], ...]

    def __hash__(self) -> int:
        return hash((self.initial, self.finals, _fsm_sample(self)))

    def __eq__(self, other: object) -> bool:
        if type(other) is not CharFsm:
            return NotImplemented
        if self is other:
            return True
        if self.initial != other.initial or self.finals != other.finals:
            return False
        if len(self.transitions) != len(other.transitions):
            return False
        if type(self.transitions) is tuple and type(other.transitions) is tuple:
            return self.transitions == other.transitions
        return _fsm_content(self) == _fsm_content(other)


def char_fsm_of_columns(
    initial: int, finals: frozenset[int], source, lo, hi, target, nonempty: bool | None = None
) -> CharFsm:
    """The CharFsm of transitions given as four integer arrays (numpy, one row per transition),
    which it also keeps as one read-only int32 [k, 4] array (the `_table` slot): automata/dfa.py
    reads that instead of converting thousands of tuples back, and its row tuples are written
    out only if something reads them (`TransitionRows`).  `nonempty`: whether it accepts
    some string, when the caller knows (a trimmed automaton with a final state does), which the
    passes' emptiness check then takes instead of searching the transitions."""
    table = np.stack([source, lo, hi, target], axis=1).astype(np.int32)
    table.flags.writeable = False
    fsm = CharFsm(initial, finals, TransitionRows(table))  # type: ignore[arg-type]  # reads as the tuple
    object.__setattr__(fsm, "_table", table)
    if nonempty is not None:
        object.__setattr__(fsm, "_nonempty", nonempty)
    return fsm


def char_fsm_table(fsm: CharFsm):
    """The transitions of `fsm` as an int32 [k, 4] array when it was built from arrays
    (`char_fsm_of_columns`), else None."""
    return getattr(fsm, "_table", None)


EPSILON = Bytes(b"")
NOTHING: Expr = Alt(())


@dataclass
class Grammar:
    """Rules in definition order; `root` names the start rule.

    positions maps a rule name to the (line, column) where the source defined it, for errors.
    allow_empty: the empty language is intended (a JSON Schema no instance satisfies, compiled
    for validation): the passes keep a root that derives nothing instead of raising GrammarError.
    checks maps a rule name to a semantic check (grammar/json_checks.py) on the one JSON value the
    rule matches: the rule's language is a superset and the matcher rejects the bytes that close
    a value failing it.  Passes keep checked rules as rules (never inlined), so the automaton says
    where each checked value starts and ends.
    token_limits maps a rule name to the most tokens a generation may spend inside it (a thinking
    budget: structural tags' any_text max_tokens); passes keep these rules as rules too, and the
    matcher closes the rule once they are spent (masks/token_regions.py).
    token_classes maps the id of a token-class terminal (token_class_terminal) to the token ids
    it excludes: the terminal stands for any one token of the vocabulary but those.
    temperatures maps a rule name to XGrammar's sampling temperature inside it (`name[temperature=t]`):
    it changes no language; passes keep these rules as rules, so the automaton's `state_rule`
    says which rule a stack is in, and the matcher reports the innermost rule's temperature.
    productive: passes.check_productive found every rule productive (and left these rules as
    they are): running it again can be skipped.  Grammars are not modified in place, and copy()
    with new rules clears it.
    refusal: why the grammar cannot be compiled, found when it was read but raised only when it
    is compiled, as XGrammar raises it (a `Regex(...)` pattern pushmask cannot hold, read by
    `Grammar.from_ebnf`): every compile calls check_compilable first, and copies, unions,
    concatenations and serialized forms keep it.
    """

    rules: dict[str, Expr]
    root: str = "root"
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    allow_empty: bool = False
    checks: dict[str, ValueCheck] = field(default_factory=dict)
    token_limits: dict[str, int] = field(default_factory=dict)
    token_classes: dict[int, frozenset[int]] = field(default_factory=dict)
    temperatures: dict[str, float] = field(default_factory=dict)
    productive: bool = field(default=False, compare=False, repr=False)
    refusal: Exception | None = field(default=None, compare=False, repr=False)

    def check_compilable(self) -> None:
        """Raise the grammar's refusal, if it has one (before anything is built from it)."""
        if self.refusal is not None:
            raise self.refusal.with_traceback(None)

    def references(self, name: str) -> set[str]:
        return set(ref_names(self.rules[name]))

    def copy(self, rules: dict[str, Expr] | None = None) -> Grammar:
        rules = dict(self.rules if rules is None else rules)
        return Grammar(
            rules,
            self.root,
            dict(self.positions),
            self.allow_empty,
            {name: check for name, check in self.checks.items() if name in rules},
            {name: n for name, n in self.token_limits.items() if name in rules},
            dict(self.token_classes),
            {name: t for name, t in self.temperatures.items() if name in rules},
            refusal=self.refusal,
        )

    def kept_rules(self) -> set[str]:
        """The rules passes must keep as rules (never inline or rewrite into a loop): checked
        rules, token-limited rules and rules with a temperature, whose instances the matcher
        follows by their automaton's rule."""
        return self.checks.keys() | self.token_limits.keys() | self.temperatures.keys()

    def __str__(self) -> str:
        """The rules as EBNF-like text, `name ::= body` a line (ir.to_text), a rule with a token
        budget or a temperature as `name[max_tokens=n, temperature=t] ::= body`."""
        return "\n".join(
            f"{rule}{self._attributes_text(rule)} ::= {to_text(body)}" for rule, body in self.rules.items()
        )

    def _attributes_text(self, rule: str) -> str:
        """The attribute list `str` writes after a rule's name ("" without attributes)."""
        attributes = [f"max_tokens={self.token_limits[rule]}"] if rule in self.token_limits else []
        if rule in self.temperatures:
            attributes.append(f"temperature={self.temperatures[rule]!r}")
        return f"[{', '.join(attributes)}]" if attributes else ""

    if TYPE_CHECKING:
        # XGrammar's constructors and serialization, as static methods (and serialize_json as a
        # method): grammar_api.py sets them on this class, since they are written with the front ends
        # and the serialized form, which build on this module (pushmask's __init__ imports it).
        from_ebnf = staticmethod(grammar_api.from_ebnf)
        from_lark = staticmethod(grammar_api.from_lark)
        from_json_schema = staticmethod(grammar_api.from_json_schema)
        from_regex = staticmethod(grammar_api.from_regex)
        from_structural_tag = staticmethod(grammar_api.from_structural_tag)
        builtin_json_grammar = staticmethod(grammar_api.builtin_json_grammar)
        union = staticmethod(grammar_api.union)
        concat = staticmethod(grammar_api.concat)
        serialize_json = serialization.serialize_json
        deserialize_json = staticmethod(serialization.grammar_from_json)


# ---------------------------------------------------------------------------------------------
# Constructors that simplify as they go (flatten nested Seq/Alt, drop epsilons).


def lit(text: str | bytes) -> Expr:
    """A literal; text is encoded as UTF-8 (a lone surrogate, which UTF-8 cannot encode, is a
    GrammarError: front ends that can say where it is check first)."""
    if isinstance(text, str):
        try:
            return Bytes(text.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise GrammarError(
                f"literal {text[:40]!r} holds a lone surrogate (U+{ord(text[exc.start]):04X}), "
                "which UTF-8 cannot encode"
            ) from None
    return Bytes(bytes(text))


def seq(*items: Expr) -> Expr:
    flat: list[Expr] = []
    literals = 0  # Bytes items kept: two or more may be adjacent
    for item in items:
        if type(item) is Seq:
            flat.extend(item.items)
            literals += 2  # its items may hold literals at either end
        elif type(item) is Bytes:
            if item.value:
                flat.append(item)
                literals += 1
        elif type(item) is Alt and not item.items:  # NOTHING
            return NOTHING
        else:
            flat.append(item)
    if literals > 1:  # adjacent literals merge, which keeps automata small
        merged: list[Expr] = []
        for item in flat:
            if merged and type(item) is Bytes and type(last := merged[-1]) is Bytes:
                merged[-1] = Bytes(last.value + item.value)
            else:
                merged.append(item)
        flat = merged
    if not flat:
        return EPSILON
    if len(flat) == 1:
        return flat[0]
    return Seq(tuple(flat))


def alt(*items: Expr) -> Expr:
    flat: list[Expr] = []
    seen: set[Expr] = set()
    for item in items:
        for sub in item.items if type(item) is Alt else (item,):
            if sub not in seen:
                seen.add(sub)
                flat.append(sub)
    if len(flat) == 1:
        return flat[0]
    return Alt(tuple(flat))


def rep(item: Expr, lo: int, hi: int | None) -> Expr:
    if hi is not None and (hi < lo or hi < 0):
        raise ValueError(f"bad repetition bounds {{{lo},{hi}}}")
    if hi == 0 or item == EPSILON:
        return EPSILON
    if lo == 1 and hi == 1:
        return item
    if item == NOTHING:
        return EPSILON if lo == 0 else NOTHING
    return Repeat(item, lo, hi)


def opt(item: Expr) -> Expr:
    return rep(item, 0, 1)


def star(item: Expr) -> Expr:
    return rep(item, 0, None)


def plus(item: Expr) -> Expr:
    return rep(item, 1, None)


def ref(name: str) -> Ref:
    return Ref(name)


def normalize_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort and merge inclusive ranges."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if lo > hi:
            continue
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def complement_ranges(ranges: Iterable[tuple[int, int]], top: int = MAX_CODE_POINT) -> tuple[tuple[int, int], ...]:
    """Complement within 0..top."""
    out = []
    nxt = 0
    for lo, hi in normalize_ranges(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= top:
        out.append((nxt, top))
    return tuple(out)


def remove_surrogates(ranges: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The ranges without U+D800..U+DFFF, which UTF-8 cannot encode."""
    out = []
    for lo, hi in ranges:
        if hi < SURROGATES[0] or lo > SURROGATES[1]:
            out.append((lo, hi))
            continue
        if lo < SURROGATES[0]:
            out.append((lo, SURROGATES[0] - 1))
        if hi > SURROGATES[1]:
            out.append((SURROGATES[1] + 1, hi))
    return tuple(out)


def char_class(ranges: Iterable[tuple[int, int]], negated: bool = False) -> Expr:
    """A code-point class (surrogates removed, since UTF-8 cannot encode them)."""
    norm = normalize_ranges(ranges)
    if negated:
        norm = complement_ranges(norm)
    without_surrogates = remove_surrogates(norm)
    if not without_surrogates:
        return NOTHING
    return CharClass(without_surrogates)


def iter_nodes(*exprs: Expr) -> Iterator[Expr]:
    """Every node inside `exprs`, in a fixed order.  A sub-expression shared by several parents (a
    DAG, as the JSON Schema compiler builds) is visited once, so the walk is linear in size."""
    stack = list(exprs)
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        if isinstance(node, (Seq, Alt)):
            stack.extend(node.items)
        elif isinstance(node, Repeat):
            stack.append(node.item)


_NO_REFS: frozenset[str] = frozenset()


def ref_names(expr: Expr) -> frozenset[str]:
    """The names of the rules referenced inside `expr`, kept on every node once computed: the
    passes ask for them again and again, and a rule body can be an alternation of 50,000
    literals.  Iterative (post-order), so deep expressions cannot exhaust the stack."""
    known = getattr(expr, "_refs", None)
    if known is not None:
        return known
    keep = object.__setattr__
    stack = [expr]
    while stack:
        node = stack[-1]
        children: tuple[Expr, ...]
        if type(node) is Seq or type(node) is Alt:
            children = node.items
        elif type(node) is Repeat:
            children = (node.item,)
        else:
            keep(node, "_refs", frozenset((node.name,)) if type(node) is Ref else _NO_REFS)
            stack.pop()
            continue
        pending = False
        parts = []
        for child in children:
            names = getattr(child, "_refs", None)
            if names is None:
                if type(child) is Seq or type(child) is Alt or type(child) is Repeat:
                    stack.append(child)  # done before `node` is taken up again
                    pending = True
                    continue
                names = frozenset((child.name,)) if type(child) is Ref else _NO_REFS
                keep(child, "_refs", names)
            if names:
                parts.append(names)
        if pending:
            continue
        # most nodes hold one child's references or none: share that set instead of copying
        keep(node, "_refs", _NO_REFS if not parts else parts[0] if len(parts) == 1 else frozenset().union(*parts))
        stack.pop()
    return expr._refs


def map_refs(expr: Expr, fn: Callable[[Ref], Expr], _done: dict[int, Expr] | None = None) -> Expr:
    """Rebuild `expr` with every Ref replaced by fn(ref), simplifying through the IR constructors
    (see map_leaves)."""
    return map_leaves(expr, lambda node: fn(node) if type(node) is Ref else node, _done)


def map_leaves(expr: Expr, fn: Callable[[Expr], Expr], _done: dict[int, Expr] | None = None) -> Expr:
    """Rebuild `expr` with every leaf (anything but a Seq, a nonempty Alt or a Repeat) replaced
    by fn(leaf), simplifying through the IR constructors.

    A sub-expression shared by several parents (the JSON Schema compiler builds such DAGs) is
    rebuilt once and stays shared, so the result is no bigger than the input.  Iterative (an
    explicit stack of the nodes being rebuilt), so deep nesting cannot exhaust Python's stack.
    """
    done = {} if _done is None else _done
    open_nodes: list[tuple[Seq | Alt | Repeat, list[Expr]]] = []  # (Seq / Alt / Repeat node, its items rebuilt so far)
    node = expr
    while True:
        if id(node) in done:
            out = done[id(node)]
        else:
            if type(node) is Seq or type(node) is Alt and node.items:
                open_nodes.append((node, []))
                node = node.items[0]
                continue
            if type(node) is Repeat:
                open_nodes.append((node, []))
                node = node.item
                continue
            out = done[id(node)] = fn(node)
        while open_nodes:  # hand `out` to the open nodes until one has an item left to rebuild
            parent, parts = open_nodes[-1]
            parts.append(out)
            if isinstance(parent, Repeat):
                out = rep(parts[0], parent.min, parent.max)
            elif len(parts) < len(parent.items):
                node = parent.items[len(parts)]
                break
            else:
                out = seq(*parts) if type(parent) is Seq else alt(*parts)
            open_nodes.pop()
            done[id(parent)] = out
        else:
            return out


def to_text(expr: Expr) -> str:
    """A readable EBNF-like rendering, for error messages and debugging.  Iterative (a stack of
    the nodes and punctuation still to write), so deep nesting cannot exhaust Python's stack."""
    parts: list[str] = []
    pending: list[Expr | str] = [expr]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, (Seq, Alt)) and item.items:
            separator = " " if isinstance(item, Seq) else " | "
            pieces: list[Expr | str] = ["("]
            for k, child in enumerate(item.items):
                pieces += [separator, child] if k else [child]
            pieces.append(")")
            pending.extend(reversed(pieces))
        elif isinstance(item, Repeat):
            pending += ["{" + f"{item.min},{'' if item.max is None else item.max}" + "}", item.item]
        else:
            parts.append(_leaf_text(item))
    return "".join(parts)


def _leaf_text(expr: Expr) -> str:
    if isinstance(expr, Bytes):
        return repr(expr.value.decode("utf-8", "backslashreplace")) if expr.value else '""'
    if isinstance(expr, CharClass):
        return "[" + "".join(f"{lo:#x}-{hi:#x}," for lo, hi in expr.ranges) + "]"
    if isinstance(expr, ByteClass):
        return "b[" + "".join(f"{lo:#x}-{hi:#x}," for lo, hi in expr.ranges) + "]"
    if isinstance(expr, Alt):
        return "NOTHING"
    if isinstance(expr, Ref):
        return expr.name
    if isinstance(expr, CharFsm):
        return f"<fsm {len(expr.transitions)} edges>"
    return repr(expr)


# ---------------------------------------------------------------------------------------------
# Token terminals: one vocabulary token, matched by its id (a special token such as
# <|python_tag|>, whose bytes no text spells).  The automata stay byte-level: a token terminal is
# the literal TOKEN_MARK + four id bytes.  No front end produces the byte 0xFF otherwise (text is
# UTF-8, where 0xFF never occurs), the token trie leaves out every ordinary token containing it,
# and the matcher advances over these bytes only for the token id itself -- so the edge is taken
# exactly when that token is sampled.

TOKEN_MARK = 0xFF
TOKEN_ID_LIMIT = 1 << 24
_TOKEN_BYTES = 5


def token_terminal(token_id: int) -> Bytes:
    """The literal standing for the token `token_id` (see TOKEN_MARK)."""
    if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < TOKEN_ID_LIMIT:
        raise GrammarError(f"token id {token_id!r} must be an integer in [0, {TOKEN_ID_LIMIT})")
    return Bytes(bytes([TOKEN_MARK] + [0x80 | ((token_id >> shift) & 0x3F) for shift in (18, 12, 6, 0)]))


TOKEN_CLASS_BASE = TOKEN_ID_LIMIT - (1 << 16)
"""Terminal ids from here up name token classes (Grammar.token_classes), never vocabulary tokens."""


def token_class_terminal(index: int) -> Bytes:
    """The terminal of a grammar's `index`-th token class (its id is TOKEN_CLASS_BASE + index)."""
    if not 0 <= index < TOKEN_ID_LIMIT - TOKEN_CLASS_BASE:
        raise GrammarError(f"too many token classes ({index + 1})")
    return token_terminal(TOKEN_CLASS_BASE + index)


def token_terminal_bytes(token_id: int) -> bytes:
    return token_terminal(token_id).value


def token_terminal_ids(grammar: Grammar) -> frozenset[int]:
    """The ids of every token terminal in the grammar's literals."""
    found: set[int] = set()
    for node in iter_nodes(*grammar.rules.values()):
        if isinstance(node, Bytes):
            data = node.value
            at = data.find(TOKEN_MARK)
            while at >= 0:
                code = data[at + 1 : at + _TOKEN_BYTES]
                found.add((code[0] & 0x3F) << 18 | (code[1] & 0x3F) << 12 | (code[2] & 0x3F) << 6 | (code[3] & 0x3F))
                at = data.find(TOKEN_MARK, at + _TOKEN_BYTES)
    return frozenset(found)
