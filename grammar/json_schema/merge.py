"""The conjunction of two flat terms (forms.py), form by form: pure functions over `Term`s; the
one effect, a pair of keywords that cannot be merged exactly, is reported through the
`unsupported` callback the caller passes (it raises, or widens under lenient)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from types import MappingProxyType

from .forms import EMPTY_MAP, ArrayForm, NumberForm, ObjectForm, StringForm, Term
from .keywords import canonical_json, is_true, json_equal
from .leaves import pattern_search

Unsupported = Callable[[str, str, str], None]
"""unsupported(keyword, pointer, detail): raise UnsupportedSchemaError or warn and widen."""


def merge_terms(a: Term, b: Term, unsupported: Unsupported, pointer: str) -> Term | None:
    """The conjunction of two flat terms: a term, or None when no instance satisfies both.
    A pair of keywords the merged term cannot state exactly goes to `unsupported(keyword, pointer,
    detail)`, which raises or (lenient) widens by keeping `a`'s."""
    if a.is_top():
        return b
    if b.is_top():
        return a
    types = a.type if b.type is None else b.type if a.type is None else _common_types(a, b)
    enum = a.enum if b.enum is None else b.enum if a.enum is None else _common_values(a.enum, b.enum)
    if (types is not None and not types) or (enum is not None and not enum):
        return None
    return Term(
        type=types,
        enum=enum,
        number=_merge_numbers(a.number, b.number, unsupported, pointer),
        string=_merge_strings(a.string, b.string),
        exclusions=a.exclusions + b.exclusions,
        object=_merge_objects(a.object, b.object, unsupported, pointer),
        array=_merge_arrays(a.array, b.array, unsupported, pointer),
        unannotated=a.unannotated + b.unannotated,
        pointer=a.pointer,
    )


def _common_types(a: Term, b: Term) -> frozenset[str]:
    common = a.types() & b.types()
    if "number" in common:
        common.discard("integer")
    return frozenset(common)


def _common_values(mine: tuple, other: tuple) -> tuple:
    return tuple(v for v in mine if any(json_equal(v, w) for w in other))


def _tighter(x, y, pick):
    """`pick` (max for lower bounds, min for upper ones) of two optional bounds."""
    return y if x is None else x if y is None else pick(x, y)


def _merge_numbers(a: NumberForm, b: NumberForm, unsupported: Unsupported, pointer: str) -> NumberForm:
    return NumberForm(
        minimum=_tighter(a.minimum, b.minimum, max),
        maximum=_tighter(a.maximum, b.maximum, min),
        exclusive_minimum=_tighter(a.exclusive_minimum, b.exclusive_minimum, max),
        exclusive_maximum=_tighter(a.exclusive_maximum, b.exclusive_maximum, min),
        multiple_of=_merge_multiple_of(a.multiple_of, b.multiple_of, unsupported, pointer),
    )


def _merge_multiple_of(mine, value, unsupported: Unsupported, pointer: str):
    """The multipleOf both imply: the lcm of integers, the larger of two that divide; else
    `unsupported` (kept: the first)."""
    if mine is None or value is None or mine == value:
        return value if mine is None else mine
    if isinstance(mine, int) and isinstance(value, int):
        return mine * value // math.gcd(mine, value)
    fa, fb = Fraction(str(mine)), Fraction(str(value))
    ratio = fa / fb if fa >= fb else fb / fa
    if ratio.denominator == 1:
        return max(mine, value)
    unsupported("allOf", pointer, "two non-integer multipleOf values that do not divide")
    return mine


def _merge_strings(a: StringForm, b: StringForm) -> StringForm:
    """Lengths tighten; every pattern must find a match (`b`'s first is dropped when it is
    `a`'s); format only narrows strings, so keeping one of two is still sound."""
    patterns = a.patterns + (b.patterns[1:] if a.patterns and b.patterns[:1] == a.patterns[:1] else b.patterns)
    return StringForm(
        min_length=_tighter(a.min_length, b.min_length, max),
        max_length=_tighter(a.max_length, b.max_length, min),
        patterns=patterns if a.patterns else b.patterns,
        format=a.format if a.format is not None else b.format,
    )


def _same_or_unsupported(mine, value, keyword: str, unsupported: Unsupported, pointer: str):
    """A keyword that merges only with an equal copy of itself (else `unsupported`, kept: mine)."""
    if mine is None or value is None:
        return value if mine is None else mine
    if canonical_json(mine) != canonical_json(value):
        unsupported("allOf", pointer, f"cannot combine two {keyword!r} keywords")
    return mine


def both(x, y):
    """The schema of instances valid against x and y (None: no constraint on either side)."""
    if x is None or is_true(x):
        return y
    if y is None or is_true(y):
        return x
    if x is False or y is False:
        return False
    if canonical_json(x) == canonical_json(y):
        return x
    return {"allOf": [x, y]}


def applicable(o: ObjectForm, name: str, pointer: str):
    """The schema `o` applies to a member called `name` that its own `properties` do not list."""
    matching = [s for p, s in o.pattern_properties.items() if pattern_search(p, name, pointer)]
    if matching:
        out = None
        for s in matching:
            out = both(out, s)
        return out
    return o.additional


def _first(x, y):
    """A keyword of one side (the first when both have it)."""
    return y if x is None else x


def _first_map(x, y):
    """A map keyword of one side (present: not EMPTY_MAP; the first when both have it)."""
    return y if x is EMPTY_MAP else x


def _merge_objects(a: ObjectForm, b: ObjectForm, unsupported: Unsupported, pointer: str) -> ObjectForm:
    if a.required and b.required:
        required = tuple(dict.fromkeys([*a.required, *b.required]))
    else:
        required = a.required or b.required
    merged = ObjectForm(
        properties=_first_map(a.properties, b.properties),
        required=required,
        pattern_properties=_first_map(a.pattern_properties, b.pattern_properties),
        additional=_first(a.additional, b.additional),
        names=_first(a.names, b.names),
        min_properties=_tighter(a.min_properties, b.min_properties, max),
        max_properties=_tighter(a.max_properties, b.max_properties, min),
        witnesses=a.witnesses + tuple(c for c in b.witnesses if c not in a.witnesses),
        unevaluated=_same_or_unsupported(a.unevaluated, b.unevaluated, "unevaluatedProperties", unsupported, pointer),
    )
    if not a.has_member_keys() or not b.has_member_keys():
        return merged
    props = {}
    for name in list(a.properties) + [n for n in b.properties if n not in a.properties]:
        left = a.properties[name] if name in a.properties else applicable(a, name, pointer)
        right = b.properties[name] if name in b.properties else applicable(b, name, pointer)
        joined = both(left, right)
        props[name] = True if joined is None else joined
    qa, qb = a.pattern_properties, b.pattern_properties
    pats = dict(qa)
    for p, s in qb.items():
        pats[p] = both(pats.get(p), s) if p in pats else s
    for own, other in ((a, b), (b, a)):
        for p in own.pattern_properties:
            if p not in other.pattern_properties and not is_true(
                other.additional if other.additional is not None else True
            ):
                _pattern_under_additional(p, pats, own, other, unsupported, pointer)
    return replace(
        merged,
        properties=MappingProxyType(props) if props else merged.properties,
        # (every pattern gone: _pattern_under_additional removed them all)
        pattern_properties=MappingProxyType(pats) if pats else EMPTY_MAP if qa or qb else merged.pattern_properties,
        additional=_first(both(a.additional, b.additional), merged.additional),
        names=_first(both(a.names, b.names), merged.names),
    )


def _pattern_under_additional(
    p: str, pats: dict, own: ObjectForm, other: ObjectForm, unsupported: Unsupported, pointer: str
) -> None:
    """Make the merged `pats` exact for pattern p of `own` next to `other`'s additionalProperties,
    where `other` has no patterns: a name matching p that `other` does not declare must meet its
    additionalProperties too.  p's merged schema takes it when no name `other` declares matches
    p (those must not); else, with additionalProperties false and no name `own` declares
    matching p, p goes: every name it still allows is one only `other` declares, whose merged
    schema holds p's through `applicable`."""
    if not other.pattern_properties:
        if not any(pattern_search(p, name, pointer) for name in other.properties):
            joined = both(pats[p], other.additional)
            pats[p] = True if joined is None else joined
            return
        if other.additional is False and not any(pattern_search(p, name, pointer) for name in own.properties):
            del pats[p]
            return
    unsupported("allOf", pointer, "patternProperties combined with another branch's additionalProperties")


def _merge_arrays(a: ArrayForm, b: ArrayForm, unsupported: Unsupported, pointer: str) -> ArrayForm:
    if a.contains is not None and b.contains is not None and canonical_json(a.contains) != canonical_json(b.contains):
        unsupported("allOf", pointer, "two different 'contains' keywords; kept the first")
    merged = ArrayForm(
        prefix_items=_first(a.prefix_items, b.prefix_items),
        items=_first(a.items, b.items),
        contains=_first(a.contains, b.contains),
        min_contains=_tighter(a.min_contains, b.min_contains, max),
        max_contains=_tighter(a.max_contains, b.max_contains, min),
        min_items=_tighter(a.min_items, b.min_items, max),
        max_items=_tighter(a.max_items, b.max_items, min),
        unique_items=(bool(a.unique_items) or bool(b.unique_items))
        if a.unique_items is not None and b.unique_items is not None
        else _first(a.unique_items, b.unique_items),
        unevaluated=_same_or_unsupported(a.unevaluated, b.unevaluated, "unevaluatedItems", unsupported, pointer),
    )
    if a.prefix_items is None and b.prefix_items is None and (a.items is None or b.items is None):
        return merged
    pa, pb = a.prefix_items or (), b.prefix_items or ()
    ia = a.items if a.items is not None else True
    ib = b.items if b.items is not None else True
    prefix = []
    for i in range(max(len(pa), len(pb))):
        joined = both(pa[i] if i < len(pa) else ia, pb[i] if i < len(pb) else ib)
        prefix.append(True if joined is None else joined)
    items = both(ia, ib)
    return replace(
        merged,
        prefix_items=tuple(prefix) if prefix else merged.prefix_items,
        items=None if items is None or is_true(items) else items,
    )
