"""oneOf: exact when its branches are provably disjoint (per type), when two branches accept a
type wholesale (then it is excluded), or by negation; otherwise a value check or unsupported.

In strict mode a positive oneOf also carries its closed branches (closing.CLOSED_ONE_OF): the spec
branches decide "exactly one matches" (disjointness, excluded types, the negations of the
others), the closed ones are what is emitted, so the result is the instances some closed branch
accepts among those exactly one spec branch accepts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...core.errors import LimitExceededError, SchemaError, UnsupportedSchemaError
from .closing import CLOSED_ONE_OF
from .forms import (
    NumberForm,
    ObjectForm,
    RefMarker,
    StringForm,
    Term,
    as_terms,
    counts_disjoint,
    ranges_disjoint,
)
from .keywords import is_true
from .leaves import StateLimitExceeded, pattern_dfa, pattern_search
from .merge import applicable
from .negation import negate

if TYPE_CHECKING:
    from .algebra import SchemaAlgebra

MAX_DISJOINT_CHECKS = 2000
"""Pairwise disjointness checks one oneOf (with the oneOfs its branches reach) may make; past
it branches count as overlapping (conservative: the oneOf is then negated or unsupported)."""


def one_of(alg: SchemaAlgebra, schema: dict, siblings: Term, pointer: str) -> list:
    """oneOf as anyOf when its branches (with their siblings) are provably disjoint."""
    if alg.state.one_of_depth == 0:
        alg.state.disjoint_checks = 0
    alg.state.one_of_depth += 1
    try:
        return _one_of(alg, schema, siblings, pointer)
    finally:
        alg.state.one_of_depth -= 1


def _branch_terms(alg: SchemaAlgebra, branches: list, siblings: Term, pointer: str) -> list[list]:
    """Each branch's DNF terms merged with the oneOf's siblings."""
    groups = []
    for i, sub in enumerate(branches):
        terms = []
        for term in alg.dnf(sub, f"{pointer}/oneOf/{i}"):
            merged = alg.merge(siblings, term, pointer)
            terms.extend(as_terms(merged))
        groups.append(terms)
    return groups


def _one_of(alg: SchemaAlgebra, schema: dict, siblings: Term, pointer: str) -> list:
    groups = _branch_terms(alg, schema["oneOf"], siblings, pointer)
    # Decide type by type: a type on which the branches are disjoint is exact; a type that two
    # branches accept without any constraint is excluded (every such instance matches both).
    excluded = []
    doubled_values: list[object] = []  # null/true/false/[] values that two or more branches accept

    def accepting(groups, value) -> int:
        return sum(1 for g in groups if any(alg.accepts_value(x, value, pointer) for x in g))

    for t in ("null", "boolean", "object", "array", "string", "number"):
        restricted = []
        for g in groups:
            terms = []
            for term in g:
                terms.extend(as_terms(alg.restrict_type(term, t, pointer)))
            restricted.append(terms)
        live = [g for g in restricted if g]
        if len(live) < 2:
            continue
        if all(disjoint(alg, x, y, 0) for i, gi in enumerate(live) for gj in live[i + 1 :] for x in gi for y in gj):
            continue
        if t in ("null", "boolean"):  # few values: count the branches accepting each one
            doubled_values += [v for v in ((None,) if t == "null" else (True, False)) if accepting(live, v) >= 2]
            continue
        if t == "array" and disjoint_when_non_empty(alg, live):
            # the branches share only [] (at most): it is invalid when two or more accept it
            if accepting(live, []) >= 2:
                doubled_values.append([])
            continue
        total = sum(1 for g in live if any(isinstance(x, Term) and _total_on(x, t) for x in g))
        if total >= 2:
            excluded.append(t)
            continue
        exact = one_of_by_negation(alg, schema, siblings, pointer)
        if exact is not None:
            return exact
        if t != "number" and alg.ctx.value_checks_allowed():
            # the union of the branches; `value` checks the closed value against the schema
            # (a number's end is only known from the byte after it, outside the value's rule)
            alg.state.overlapping_one_ofs += 1
            continue
        alg.ctx.unsupported(
            "oneOf",
            f"{pointer}/oneOf",
            f"branches may overlap on {t} values, so 'exactly one' cannot be expressed"
            + ("; widened to anyOf" if alg.ctx.mode.lenient else ""),
        )
        break
    emitted = groups if CLOSED_ONE_OF not in schema else _branch_terms(alg, schema[CLOSED_ONE_OF], siblings, pointer)
    out = [t for g in emitted for t in g]
    if excluded:
        keep = [t for t in ("null", "boolean", "object", "array", "string", "number") if t not in excluded]
        out = alg.merge_all(out, [Term(type=frozenset(keep))], pointer) if keep else []
    for value in doubled_values:
        out = alg.merge_all(out, alg.dnf(negate(alg, {"const": value}, pointer), pointer), pointer)
    return out


def disjoint_when_non_empty(alg: SchemaAlgebra, groups: list) -> bool:
    """Are the branches' array terms disjoint on non-empty arrays (their first items cannot
    match two branches)?"""

    def first_item(term):
        if not isinstance(term, Term):
            return None
        prefix, items = term.array.prefix_items, term.array.items
        return prefix[0] if prefix else items if items is not None else True

    for i, gi in enumerate(groups):
        for gj in groups[i + 1 :]:
            for x in gi:
                for y in gj:
                    a, b = first_item(x), first_item(y)
                    if a is None or b is None or not _schemas_disjoint(alg, a, b, 1):
                        return False
    return True


def one_of_by_negation(alg: SchemaAlgebra, schema: dict, siblings: Term, pointer: str) -> list | None:
    """oneOf [B1..Bn] = anyOf_i (Bi and not Bj for every j != i), when each `not` has a
    positive form; None when some negation cannot be expressed (or the expansion is too big).
    In strict mode the first Bi is the closed branch, the negated ones the spec branches."""
    branches = schema["oneOf"]
    emitted = schema.get(CLOSED_ONE_OF, branches)
    try:
        with alg.ctx.narrowed(lenient=False, value_checks=False):  # a widened negation would not be exact
            out = []
            for i, branch in enumerate(emitted):
                others = [{"not": other} for j, other in enumerate(branches) if j != i]
                for term in alg.dnf({"allOf": [branch, *others]}, f"{pointer}/oneOf/{i}"):
                    merged = alg.merge(siblings, term, pointer)
                    out.extend(as_terms(merged))
                if len(out) > alg.limits.max_schema_branches:
                    return None
            return out
    except (UnsupportedSchemaError, LimitExceededError):
        return None


def disjoint(alg: SchemaAlgebra, x, y, level: int) -> bool:
    """True only when no instance can satisfy both terms (conservative)."""
    alg.state.disjoint_checks += 1
    if level > 6 or alg.state.disjoint_checks > MAX_DISJOINT_CHECKS:
        return False
    if isinstance(x, RefMarker) or isinstance(y, RefMarker):
        try:
            xs = alg.inline_ref(x.uri, "#") if isinstance(x, RefMarker) else [x]
            ys = alg.inline_ref(y.uri, "#") if isinstance(y, RefMarker) else [y]
        except (SchemaError, LimitExceededError):
            return False
        return all(disjoint(alg, a, b, level + 1) for a in xs for b in ys)
    tx, ty = x.types(), y.types()
    common = tx & ty
    if not common:
        return True
    if x.enum is not None and not alg.ctx.valid_values(y.as_schema(), list(x.enum)):
        return True
    if y.enum is not None and not alg.ctx.valid_values(x.as_schema(), list(y.enum)):
        return True
    return all(_disjoint_on(alg, t, x, y, level) for t in common)


def _disjoint_on(alg: SchemaAlgebra, t: str, x: Term, y: Term, level: int) -> bool:
    if t in ("integer", "number"):
        lo_x, hi_x = x.number.range()
        lo_y, hi_y = y.number.range()
        return ranges_disjoint(lo_x, hi_x, lo_y, hi_y)
    if t == "string":
        return counts_disjoint(x.string.min_length, x.string.max_length, y.string.min_length, y.string.max_length)
    if t == "array":
        ax, ay = x.array, y.array
        if counts_disjoint(ax.min_items, ax.max_items, ay.min_items, ay.max_items):
            return True
        px, py = ax.prefix_items or (), ay.prefix_items or ()
        need = math.ceil(max(ax.min_items or 0, ay.min_items or 0))  # minItems may be written 2.0
        for i in range(min(len(px), len(py), need)):
            if _schemas_disjoint(alg, px[i], py[i], level):
                return True
        return False
    if t == "object":
        ox, oy = x.object, y.object
        if counts_disjoint(ox.min_properties, ox.max_properties, oy.min_properties, oy.max_properties):
            return True
        req_x, req_y = set(ox.required), set(oy.required)
        for name in req_x | req_y:
            sx, sy = _property_schema(ox, name), _property_schema(oy, name)
            if (name in req_y and sx is False) or (name in req_x and sy is False):
                return True
            # one side has the member (required), and its value can satisfy only one side
            if sx is not None and sy is not None and _schemas_disjoint(alg, sx, sy, level):
                return True
        # both closed (additionalProperties false), one needs a member, no name fits both
        needs_member = any(o.required or (o.min_properties or 0) >= 1 for o in (ox, oy))
        return needs_member and closed_names_disjoint(ox, oy)
    return False


def closed_names_disjoint(x: ObjectForm, y: ObjectForm) -> bool:
    """Both terms are closed objects and no member name is allowed by both (conservative:
    a name excluded by other keywords still counts as allowed)."""
    sources = []
    for o in (x, y):
        if o.additional is not False:
            return False
        names = [n for n, sub in o.properties.items() if sub is not False]
        patterns = [p for p, sub in o.pattern_properties.items() if sub is not False]
        sources.append((set(names), patterns))
    (names_x, patterns_x), (names_y, patterns_y) = sources
    if names_x & names_y:
        return False
    if any(pattern_search(p, n, "#") for p in patterns_y for n in names_x) or any(
        pattern_search(p, n, "#") for p in patterns_x for n in names_y
    ):
        return False
    try:
        return all(
            pattern_dfa(p, "#").intersect(pattern_dfa(q, "#")).is_empty() for p in patterns_x for q in patterns_y
        )
    except (StateLimitExceeded, UnsupportedSchemaError):
        return False


def _schemas_disjoint(alg: SchemaAlgebra, a, b, level: int) -> bool:
    try:
        xs, ys = alg.exact_dnf(a, "#"), alg.exact_dnf(b, "#")
    except (SchemaError, LimitExceededError):
        return False
    return all(disjoint(alg, p, q, level + 1) for p in xs for q in ys)


def _total_on(f: Term, t: str) -> bool:
    """Does the flat term accept every value of type t?"""
    types = f.types()
    if f.enum is not None or t not in types or (t == "number" and "number" not in types):
        return False
    if t == "object":
        o = f.object
        return (
            all(is_true(sub) for sub in o.properties.values())
            and all(is_true(sub) for sub in o.pattern_properties.values())
            and not o.required
            and all(s is None or is_true(s) for s in (o.additional, o.names, o.unevaluated))
            and o.min_properties is None
            and o.max_properties is None
            and not o.witnesses
        )
    if t == "array":
        a = f.array
        return (
            a.prefix_items is None
            and all(s is None or is_true(s) for s in (a.items, a.contains, a.unevaluated))
            and (a.min_items, a.max_items, a.unique_items) == (None, None, None)
        )
    if t == "string":
        return f.string == StringForm() and not f.exclusions
    if t == "number":
        return f.number == NumberForm() and not f.exclusions
    return True


def _property_schema(o: ObjectForm, name: str):
    if name in o.properties:
        return o.properties[name]
    return applicable(o, name, "#")
