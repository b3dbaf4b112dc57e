"""Grammar emission: the `Emitter` (rules, memo, layout), a subschema's rule, enums/consts as
literals, and counted repetitions; objects, arrays and scalars are functions over it
(objects.py, arrays.py, scalars.py)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ...core.errors import LimitExceededError, SchemaError, UnsupportedSchemaError
from ..ecma_regex import without_lookbehinds
from ..ir import NOTHING, Expr, Ref, alt, lit, rep, seq, star
from ..json_checks import ValidatesSchema, ValueCheck
from ..passes import expr_nodes
from .algebra import AlgebraState, SchemaAlgebra
from .arrays import UNIQUE_ENUM_MAX, array_expr
from .context import CompileContext
from .documents import uri_pointer
from .forms import RefMarker, Term
from .keywords import (
    canonical_json,
    is_true,
    json_equal,
    json_type,
    rule_hint,
)
from .layout import Layout
from .leaves import (
    ANY_STRING,
    any_string_dfa,
    budgeted_dfa_op,
    cached_leaf,
    json_string_expr,
    json_string_without,
    number_leaf,
    pattern_dfa,
    string_dfa,
    string_literal_expr,
    string_literal_without,
)
from .objects import object_expr
from .scalars import number_value, string_value

BIG_ENUM = 64
"""Enums with more values than this take each number in the spellings json.dumps writes ("5",
"5.0", "0.25"), so the whole enum is one set of literals (a trie); smaller enums take every
spelling of a number's value ("5.00", "2.5e-1")."""
COUNT_BLOCK = 64
"""Repetition counts past this (e.g. maxItems 4096) are built from blocks (see `counted`)."""


class Emitter:
    """The grammar of one compile: its rules, the memo of subschema rules, the layout and the
    value checks; values and literals here, objects, arrays, strings and numbers in objects.py /
    arrays.py / scalars.py (functions of the emitter).  It reads the documents, options and
    diagnostics through `ctx` and schemas through its `algebra` (DNF, merge, oneOf, not; with the
    emitter's `algebra_state`), which never emits."""

    def __init__(self, ctx: CompileContext):
        self.ctx = ctx
        options = ctx.options
        self.layout = Layout(
            options.whitespace, options.indent, options.max_whitespace, options.separators, options.root_whitespace
        )
        self.rules: dict[str, Expr] = {}
        self.memo: dict[tuple, Expr] = {}  # keys start with what they memoise (see `value`)
        self.names: dict[str, int] = {}  # rule name stem -> rules named with it so far
        self.recursed: set[str] = set()  # rules a subschema reached again while being compiled
        self.escape_rule: Ref | None = None  # the shared escape rule of counted strings (json_char)
        self.checks: dict[str, ValueCheck] = {}  # rule name -> value check (grammar/json_checks.py)
        self.algebra_state = AlgebraState()
        self.algebra = SchemaAlgebra(ctx, self.algebra_state)

    def new_rule(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]+", "_", hint).strip("_")[:40] or "r"
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        name = base if n == 0 else f"{base}_{n}"
        while name in self.rules or name == "root":  # "root" is the grammar's start rule, added last
            n += 1
            name = f"{base}_{n}"
        budget = self.ctx.limits.max_schema_rules
        if len(self.rules) >= budget:
            raise LimitExceededError(
                f"JSON Schema compiles to more than {budget} rules (Limits.max_schema_rules); "
                "simplify the schema or split it, or raise the limit"
            )
        self.rules[name] = NOTHING
        return name

    def rule_ref(self, hint: str, body: Expr) -> Ref:
        """A new rule holding `body`, referenced: copies of the reference stay one automaton."""
        name = self.new_rule(hint)
        self.rules[name] = body
        return Ref(name)

    def dfa_op(self, fn, other, keyword: str, pointer: str):
        """`fn(other)` (a product of string automata) within Limits.max_string_states."""
        return budgeted_dfa_op(fn, other, keyword, pointer, self.ctx.limits.max_string_states)

    def pattern_dfa(self, pattern: str, pointer: str):
        """The strings an ECMA pattern finds a match in, within Limits.max_string_states."""
        return pattern_dfa(pattern, pointer, self.ctx.limits.max_string_states)

    def string_pattern(self, pattern: str, pointer: str) -> str:
        """A string's `pattern` as compiled: itself, or under lenient=True with its lookbehinds
        dropped (a wider language, with the widening warning), which pattern_dfa cannot read.
        Only where a wider pattern widens the value: not under `not` or in patternProperties."""
        if not self.ctx.mode.lenient or not isinstance(pattern, str):
            return pattern
        widened = without_lookbehinds(pattern)
        if widened != pattern:
            self.ctx.unsupported("pattern", pointer, f"lookbehind dropped from {pattern!r} (a wider language)")
        return widened

    def string_dfa(self, **constraints):
        """json_strings.string_dfa (length, pattern, format) within Limits.max_string_states."""
        return string_dfa(**constraints, budget=self.ctx.limits.max_string_states)

    def string_literal(self, value: str) -> Expr:
        """The JSON string token of a const / enum value or a property name: `string_literal_expr`,
        less the spellings holding one of JsonOptions.string_excludes."""
        excludes = self.ctx.options.string_excludes
        return string_literal_without(value, excludes) if excludes else string_literal_expr(value)

    def string_token(self, dfa, pointer: str, keyword: str, filtered: bool = True) -> Expr:
        """The JSON string tokens of the decoded strings `dfa` accepts (None: any string); when
        `filtered`, less the spellings holding one of JsonOptions.string_excludes (a string held
        to a pattern or a known format is not filtered, as in XGrammar)."""
        budget = self.ctx.limits.max_encoded_string_states
        excludes = self.ctx.options.string_excludes
        if excludes and filtered:
            return json_string_without(any_string_dfa() if dfa is None else dfa, excludes, pointer, budget)
        return ANY_STRING if dfa is None else json_string_expr(dfa, pointer, keyword, budget)

    def value(self, schema, pointer: str, depth) -> Expr:
        """The IR for any JSON text valid against `schema` at indent depth `depth`."""
        self.ctx.clock.check(f"the subschema at {pointer}")
        if schema is True or (isinstance(schema, dict) and is_true(schema)):
            return self.generic(depth)
        if schema is False:
            self.ctx.note_empty(pointer, "false schema")
            return NOTHING
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {schema!r}", pointer)
        key = (canonical_json(schema), depth, self.ctx.mode)  # the rule depends on the mode too (see Mode)
        hit = self.memo.get(key)
        if hit is not None:
            if isinstance(hit, Ref):
                self.recursed.add(hit.name)
            return hit
        name = self.new_rule(rule_hint(schema, pointer))
        self.memo[key] = Ref(name)
        overlapping = self.algebra_state.overlapping_one_ofs
        branches = self.algebra.dnf(schema, pointer)
        if self.algebra_state.overlapping_one_ofs != overlapping:
            # a oneOf here compiled to the union of its branches: the value is checked against
            # this whole subschema when it closes, so the rule stays a rule (never inlined)
            self.checks[name] = ValidatesSchema(
                schema, self.ctx.validator_cls(schema, registry=self.ctx.registry), pointer
            )
        exprs = []
        structural = False
        for branch in branches:
            if isinstance(branch, RefMarker):
                target = self.ctx.lookup(branch.uri, pointer)
                exprs.append(self.value(target, uri_pointer(branch.uri), depth))
                structural = True
            else:
                expr, is_struct = self.flat(branch, pointer, depth)
                exprs.append(expr)
                structural |= is_struct
        body = alt(*exprs) if exprs else NOTHING
        if body == NOTHING and not branches:
            self.ctx.note_empty(pointer, "no instance satisfies all the constraints")
        if (
            name not in self.recursed
            and name not in self.checks
            and (isinstance(body, Ref) or (not structural and expr_nodes(body, fsm_edges=True) <= 60))
        ):
            del self.rules[name]
            self.memo[key] = body
            return body
        self.rules[name] = body
        return Ref(name)

    def generic(self, depth) -> Expr:
        """Shared rules for any JSON value."""
        key = ("generic", depth)
        if key in self.memo:
            return self.memo[key]
        names = {
            k: self.new_rule(f"json_{k}" + ("" if depth is None else f"_d{depth}"))
            for k in ("value", "object", "array")
        }
        self.memo[key] = Ref(names["value"])
        if ("json_string",) not in self.memo:
            sname = self.new_rule("json_string")
            self.rules[sname] = self.string_token(None, "#", "excludes")
            self.memo[("json_string",)] = Ref(sname)
            nname = self.new_rule("json_number")
            self.rules[nname] = number_leaf(pointer="#", budget=self.ctx.limits.max_string_states)
            self.memo[("json_number",)] = Ref(nname)
        string, number = self.memo[("json_string",)], self.memo[("json_number",)]
        child = self.generic(self.layout.child(depth)) if self.layout.child(depth) != depth else Ref(names["value"])
        o_open, o_first, o_next, colon, end, close_e, close_ne = self.layout.parts(depth, "{", "}")
        member = seq(string, colon, child, end)
        self.rules[names["object"]] = alt(
            seq(o_open, close_e), seq(o_open, o_first, member, rep(seq(o_next, member), 0, None), close_ne)
        )
        a_open, a_first, a_next, _, end, close_e, close_ne = self.layout.parts(depth, "[", "]")
        item = seq(child, end)
        self.rules[names["array"]] = alt(
            seq(a_open, close_e), seq(a_open, a_first, item, rep(seq(a_next, item), 0, None), close_ne)
        )
        self.rules[names["value"]] = alt(
            Ref(names["object"]), Ref(names["array"]), string, number, lit("true"), lit("false"), lit("null")
        )
        return Ref(names["value"])

    def flat(self, f: Term, pointer: str, depth) -> tuple[Expr, bool]:
        """(IR, structural?) for one flat conjunction."""
        types = f.types()
        if not types:
            self.ctx.note_empty(pointer, "no type satisfies every 'type' constraint")
            return NOTHING, False
        if f.enum is not None:
            values = self.ctx.enum_values(f)
            if not values:
                self.ctx.note_empty(pointer, "no enum/const value satisfies the other constraints")
            if len(values) > BIG_ENUM:  # numbers as json.dumps writes them: a literal set (a trie)
                exprs = [
                    alt(*map(lit, _number_spellings(v)))
                    if json_type(v) in ("integer", "number")
                    else self.literal(v, depth)
                    for v in values
                ]
            else:
                exprs = [self.literal(v, depth) for v in values]
            return alt(*exprs) if exprs else NOTHING, any(isinstance(v, (list, dict)) for v in values)
        exprs = []
        structural = False
        for t in ("object", "array", "string", "number", "integer", "boolean", "null"):
            if t not in types or (t == "integer" and "number" in types):
                continue
            if t == "object":
                exprs.append(object_expr(self, f.object, pointer, depth))
                structural = True
            elif t == "array":
                exprs.append(array_expr(self, f.array, pointer, depth))
                structural = True
            elif t == "string":
                exprs.append(string_value(self, f, pointer))
            elif t in ("number", "integer"):
                exprs.append(number_value(self, f, pointer, integer=(t == "integer")))
            elif t == "boolean":
                exprs.append(alt(lit("true"), lit("false")))
            else:
                exprs.append(lit("null"))
        return alt(*exprs) if exprs else NOTHING, structural

    def literal(self, value, depth) -> Expr:
        """Every accepted spelling of one JSON value (objects keep their key order)."""
        if value is None:
            return lit("null")
        if isinstance(value, bool):
            return lit("true" if value else "false")
        if isinstance(value, (int, float)):
            return cached_leaf("literal", {"value": value})
        if isinstance(value, str):
            return self.string_literal(value)
        child = self.layout.child(depth)
        if isinstance(value, list):
            o, first, nxt, _, end, close_e, close_ne = self.layout.parts(depth, "[", "]")
            if not value:
                return seq(o, close_e)
            items = [seq(first if i == 0 else nxt, self.literal(v, child), end) for i, v in enumerate(value)]
            return seq(o, *items, close_ne)
        o, first, nxt, colon, end, close_e, close_ne = self.layout.parts(depth, "{", "}")
        if not value:
            return seq(o, close_e)
        items = [
            seq(first if i == 0 else nxt, self.string_literal(k), colon, self.literal(v, child), end)
            for i, (k, v) in enumerate(value.items())
        ]
        return seq(o, *items, close_ne)

    def counted(self, item: Expr, lo: int, hi: int | None, hint: str, block: int = COUNT_BLOCK) -> Expr:
        """item{lo,hi}, where no automaton grows past `block` copies of `item`.

        Past that, B = item{b} (b = block) becomes a rule and, for n = q*b + r,
        item{0,n} = B{0,q-1} item{0,b-1} | B{q} item{0,r}; so a text is parsed at most two ways
        at once per level (inside a block, or in the final partial run), and the states of B and
        of the partial run (a rule too) are shared by every block, so are their masks.  Counts
        past b*b nest the same way.
        """
        return self._bounded_repeat("counted", item, lo, hi, hint, block, self._counted_blocks)

    def _bounded_repeat(
        self, kind: str, item: Expr, lo: int, hi: int | None, hint: str, block: int, past_block: Callable
    ) -> Expr:
        """item{lo,hi}, memoised per `kind`: a plain repetition up to `block` copies, else what
        `past_block(item, lo, hi, hint, block)` builds."""
        key = (kind, item, lo, hi, block)
        if key not in self.memo:
            self.memo[key] = rep(item, lo, hi) if max(lo, hi or 0) <= block else past_block(item, lo, hi, hint, block)
        return self.memo[key]

    def _counted_blocks(self, item: Expr, lo: int, hi: int | None, hint: str, b: int) -> Expr:
        """`counted` past one block of b copies."""
        unit = self.rule_ref(hint, rep(item, b, b))
        at_least = seq(self.counted(unit, lo // b, lo // b, hint, b), rep(item, lo % b, lo % b))
        if hi is None:
            return seq(at_least, star(item))
        if hi - lo <= b:
            return seq(at_least, rep(item, 0, hi - lo))
        q, r = divmod(hi - lo, b)
        partial = self.rule_ref(hint, rep(item, 0, b - 1))
        return seq(
            at_least,
            alt(
                seq(self.counted(unit, 0, q - 1, hint, b), partial),
                seq(self.counted(unit, q, q, hint, b), rep(item, 0, r)),
            ),
        )

    def chained(self, item: Expr, lo: int, hi: int | None, hint: str, block: int) -> Expr:
        """item{lo,hi} as a chain: past `block` copies, item{block} then a call of a rule for
        the rest, item{lo-block, hi-block} built the same way.

        Unlike `counted`'s blocks, which a token leaves by returning from a rule (a step only the
        real stack decides, so masks there defer every token that crosses), a chain is left by a
        call at the end of a rule: tokens across the boundary stay context-independent.  The
        chain's rules have one body shape, so their DFA is built once.
        """
        return self._bounded_repeat("chained", item, lo, hi, hint, block, self._chain_link)

    def _chain_link(self, item: Expr, lo: int, hi: int | None, hint: str, block: int) -> Expr:
        """`chained` past one block: item{block}, then a rule for the rest (or fewer than a block)."""
        rest = self.rule_ref(
            hint, self.chained(item, max(lo - block, 0), None if hi is None else hi - block, hint, block)
        )
        result = seq(rep(item, block, block), rest)
        return alt(rep(item, lo, block - 1), result) if lo < block else result

    def finite_values(self, schema) -> list | None:
        """The distinct values a schema allows when it is an enum (or const) of at most
        UNIQUE_ENUM_MAX values, else None."""
        try:
            terms = self.algebra.exact_dnf(schema, "#")
        except (SchemaError, UnsupportedSchemaError, LimitExceededError):
            return None
        values: list = []
        for term in terms:
            if not isinstance(term, Term) or term.enum is None:
                return None
            for v in self.ctx.enum_values(term):
                if not any(json_equal(v, w) for w in values):
                    values.append(v)
                    if len(values) > UNIQUE_ENUM_MAX:
                        return None
        return values or None


def _number_spellings(value) -> list[str]:
    """Texts json.loads reads as a number equal to `value` (as jsonschema compares), the ones
    json.dumps writes: the int and, up to 2**53 where the float is exact, its float spelling
    (1 and 1.0); a float's repr and, when integral and exact, its int spelling."""
    exact = abs(value) <= 2**53
    if isinstance(value, float):
        if not math.isfinite(value):
            return []
        return [repr(value), str(int(value))] if value.is_integer() and exact else [repr(value)]
    return [str(value), f"{value}.0"] if exact else [str(value)]
