"""Array schemas: prefixItems / items positions, counted repetitions, contains counts and
uniqueItems."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...core.errors import UnsupportedSchemaError
from ..ir import EPSILON, NOTHING, Expr, Ref, alt, rep, seq
from ..json_checks import UniqueItems
from ..passes import expr_nodes
from .forms import ArrayForm
from .keywords import is_true, rule_hint
from .objects import any_order_members

if TYPE_CHECKING:
    from .emit import Emitter

UNIQUE_ENUM_MAX = 8
"""uniqueItems is exact for items from an enum of at most this many values (2^n states)."""
ITEM_RULE_SIZE = 40
"""Array items bigger than this become a rule when repeated a bounded number of times."""
MAX_CONTAINS_POSITIONS = 200
"""contains with counts is exact up to this many tracked positions (or counted matches); past it
UnsupportedSchemaError (each position x count is a grammar state)."""


@dataclass
class _ArrayShape:
    """One flat array term, read: its positions, counts and the layout tokens around items.

    `contains` is None when it constrains nothing (absent, or minContains 0 without a maximum)."""

    pointer: str
    prefix: list
    items: object
    min_i: int
    max_i: int | None
    contains: object
    min_c: int
    max_c: int | None
    child: object  # the items' indent depth
    open: Expr
    first: Expr
    nxt: Expr
    end: Expr
    close_e: Expr
    close_ne: Expr


def array_expr(em: Emitter, f: ArrayForm, pointer: str, depth) -> Expr:
    """The IR of the arrays one flat term's array form allows."""
    shape = _array_counts(em, f, pointer, depth)
    if shape is None:
        return NOTHING
    if f.unique_items is True and (shape.max_i is None or shape.max_i > 1):
        unique = _unique_array(em, f, shape, depth)
        if unique is not None:
            return unique
    if not _read_contains(em, f, shape):
        return NOTHING
    if shape.contains is None:
        return seq(shape.open, _items_in_order(em, shape))
    return seq(shape.open, _items_counting_contains(em, shape))


def _array_counts(em: Emitter, f: ArrayForm, pointer: str, depth) -> _ArrayShape | None:
    """The term's positions and item counts (None, noted as empty, when no count fits)."""
    prefix = list(f.prefix_items or ())
    items = f.items if f.items is not None else True
    min_i = int(f.min_items or 0)
    max_i = int(f.max_items) if f.max_items is not None else None
    if items is False:
        max_i = len(prefix) if max_i is None else min(max_i, len(prefix))
    if max_i is not None and min_i > max_i:
        em.ctx.note_empty(pointer, "minItems > maxItems (or more items required than allowed)")
        return None
    o, first, nxt, _, end, close_e, close_ne = em.layout.parts(depth, "[", "]")
    return _ArrayShape(
        pointer,
        prefix,
        items,
        min_i,
        max_i,
        None,
        0,
        None,
        em.layout.child(depth),
        o,
        first,
        nxt,
        end,
        close_e,
        close_ne,
    )


def _read_contains(em: Emitter, f: ArrayForm, shape: _ArrayShape) -> bool:
    """Fill in contains / minContains / maxContains; False (noted as empty) when min > max."""
    contains = f.contains
    min_c = int(f.min_contains if f.min_contains is not None else 1) if contains is not None else 0
    max_c = int(f.max_contains) if contains is not None and f.max_contains is not None else None
    if contains is not None and max_c is not None and min_c > max_c:
        em.ctx.note_empty(shape.pointer, "minContains > maxContains")
        return False
    if contains is not None and min_c == 0 and max_c is None:
        contains = None
    shape.contains, shape.min_c, shape.max_c = contains, min_c, max_c
    return True


def _unique_array(em: Emitter, f: ArrayForm, shape: _ArrayShape, depth) -> Expr | None:
    """uniqueItems: exact for items from a small enum, else a value check (or widened: None)."""
    s, pointer = shape, shape.pointer
    values = em.finite_values(s.items) if not s.prefix and f.contains is None else None
    if values is not None and s.min_i <= 1 and (s.max_i is None or s.max_i >= len(values)):
        # distinct items from a finite set: each value at most once, in any order
        members = [(seq(em.literal(v, s.child), s.end), False) for v in values]
        empty = s.close_e if s.min_i == 0 else NOTHING
        return seq(s.open, any_order_members(em, members, None, (s.first, s.nxt, empty, s.close_ne)))
    if em.ctx.value_checks_allowed():
        # any array of the items; the matcher rejects the bytes closing a duplicate item
        name = em.new_rule(f"unique_{rule_hint({}, pointer)}")
        em.rules[name] = array_expr(em, replace(f, unique_items=None), pointer, depth)
        em.checks[name] = UniqueItems(f"{pointer}/uniqueItems")
        return Ref(name)
    em.ctx.unsupported(
        "uniqueItems",
        f"{pointer}/uniqueItems",
        "a grammar cannot require distinct array items (except up to "
        f"{UNIQUE_ENUM_MAX} values of an enum); widened to allow duplicates",
    )
    return None


def _item_exprs(em: Emitter, s: _ArrayShape, i: int) -> tuple[Expr, Expr]:
    """(unmarked, marked) IR for position i: marked items satisfy `contains`."""
    schema = s.prefix[i] if i < len(s.prefix) else s.items
    ptr = f"{s.pointer}/prefixItems/{i}" if i < len(s.prefix) else f"{s.pointer}/items"
    if s.contains is None:
        return em.value(schema, ptr, s.child), NOTHING
    marked = em.value(
        {"allOf": [schema, s.contains]} if not is_true(schema) else s.contains, f"{s.pointer}/contains", s.child
    )
    if s.max_c is None:
        return em.value(schema, ptr, s.child), marked
    unmarked = em.value({"allOf": [schema, {"not": s.contains}]}, f"{s.pointer}/contains", s.child)
    return unmarked, marked


def _items_in_order(em: Emitter, s: _ArrayShape) -> Expr:
    """Without contains: positions before S = max(P, 1) one by one, then a counted repetition."""
    P = len(s.prefix)
    S = max(P, 1)
    rest = None if s.max_i is not None and s.max_i <= S else _item_exprs(em, s, S)[0] if s.items is not False else None
    lo = max(0, s.min_i - S)
    hi = None if s.max_i is None else s.max_i - S
    if rest is None or rest == NOTHING:
        tail = s.close_ne if lo == 0 else NOTHING
    else:
        if max(lo, hi or 0) > 2 and expr_nodes(rest, fsm_edges=True) > ITEM_RULE_SIZE:
            # a rule, so counted copies of the item are references, not automaton copies
            rest = em.rule_ref("item", rest)
        tail = seq(em.counted(seq(s.nxt, rest, s.end), lo, hi, "items_block"), s.close_ne)
    expr = tail
    for i in range(S - 1, -1, -1):
        unmarked = _item_exprs(em, s, i)[0] if i < P or s.items is not False else NOTHING
        take = NOTHING
        if (s.max_i is None or i < s.max_i) and unmarked != NOTHING:
            take = seq(s.first if i == 0 else s.nxt, unmarked, s.end, expr)
        stop = (s.close_e if i == 0 else s.close_ne) if i >= s.min_i else NOTHING
        expr = alt(stop, take)
    return expr


def _items_counting_contains(em: Emitter, s: _ArrayShape) -> Expr:
    """With contains: states (position, count of items matching `contains`)."""
    P, min_i, max_i, min_c, max_c = len(s.prefix), s.min_i, s.max_i, s.min_c, s.max_c
    limit = max_i if max_i is not None else max(P, min_i, 1)
    if limit > MAX_CONTAINS_POSITIONS or (max_c or min_c) > MAX_CONTAINS_POSITIONS:
        raise UnsupportedSchemaError(
            "contains", f"{s.pointer}/contains", f"contains with more than {MAX_CONTAINS_POSITIONS} counted positions"
        )
    c_cap = max_c if max_c is not None else min_c
    ex = {i: _item_exprs(em, s, i) for i in range(min(limit, P) + 1)}

    def items_at(i):
        if i in ex:
            return ex[i]
        if s.items is False:
            return NOTHING, NOTHING
        return ex.setdefault(i, _item_exprs(em, s, i)) if i < P else ex.setdefault(P, _item_exprs(em, s, P))

    memo: dict = {}

    def loop_tail(c: int) -> Expr:
        """Unbounded items after `limit` (>= 1 written) holding `c` marked items so far."""
        key = ("loop", c)
        if key not in memo:
            unmarked, marked = items_at(limit)
            u = rep(seq(s.nxt, unmarked, s.end), 0, None) if unmarked != NOTHING else EPSILON
            options = []
            if c >= min_c:
                options.append(s.close_ne)
            if marked != NOTHING and (max_c is not None and c + 1 <= max_c or max_c is None and c < min_c):
                options.append(seq(s.nxt, marked, s.end, loop_tail(c + 1)))
            memo[key] = seq(u, alt(*options)) if options else NOTHING
        return memo[key]

    def state(i: int, c: int) -> Expr:
        key = (i, c)
        if key in memo:
            return memo[key]
        if i == limit and max_i is None:
            result = loop_tail(c) if i > 0 else NOTHING
            memo[key] = result
            return result
        options = []
        if i >= min_i and c >= min_c:
            options.append(s.close_e if i == 0 else s.close_ne)
        if max_i is None or i < max_i:
            unmarked, marked = items_at(i)
            prefix_sep = s.first if i == 0 else s.nxt
            if unmarked != NOTHING:
                options.append(seq(prefix_sep, unmarked, s.end, state(i + 1, c)))
            if marked != NOTHING and (max_c is None or c + 1 <= max_c):
                nc = c + 1 if max_c is not None else min(c + 1, c_cap)
                options.append(seq(prefix_sep, marked, s.end, state(i + 1, nc)))
        result = alt(*options) if options else NOTHING
        memo[key] = result
        return result

    return state(0, 0)
