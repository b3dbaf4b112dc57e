"""Reference for tests/test_json_schema_forms.py: the conjunction of two flat terms as plain
keyword dicts, keyword by keyword -- the compiler's merge before it worked over typed forms
(grammar/json_schema/merge.py `merge_terms`), kept as an independent oracle for it."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from pushmask.grammar.json_schema.keywords import UNANNOTATED, WITNESS, canonical_json, is_true, json_equal, types_of
from pushmask.grammar.json_schema.leaves import pattern_search

Unsupported = Callable[[str, str, str], None]
"""unsupported(keyword, pointer, detail): raise UnsupportedSchemaError or warn and widen."""

_MAX_KEYS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
_MIN_KEYS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")


def merge_flat(a: dict, b: dict, unsupported: Unsupported, pointer: str):
    """The conjunction of two flat terms: a flat term, or None when no instance satisfies both.
    A pair of keywords the merged term cannot state exactly goes to `unsupported(keyword, pointer,
    detail)`, which raises or (lenient) widens by keeping one of them."""
    if not a:
        return dict(b)
    if not b:
        return dict(a)
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
            continue
        mine = out[key]
        if key == "type":
            ta = types_of({"type": mine})
            tb = types_of({"type": value})
            both = ta & tb
            if "number" in both:
                both.discard("integer")
            out[key] = sorted(both)
        elif key == "enum":
            out[key] = [v for v in mine if any(json_equal(v, w) for w in value)]
        elif key in _MAX_KEYS:
            out[key] = max(mine, value)
        elif key in _MIN_KEYS:
            out[key] = min(mine, value)
        elif key == "multipleOf":
            if mine == value:
                continue
            if isinstance(mine, int) and isinstance(value, int):
                out[key] = mine * value // math.gcd(mine, value)
            else:
                fa, fb = Fraction(str(mine)), Fraction(str(value))
                ratio = fa / fb if fa >= fb else fb / fa
                if ratio.denominator == 1:
                    out[key] = max(mine, value)
                else:
                    unsupported("allOf", pointer, "two non-integer multipleOf values that do not divide")
        elif key == "pattern":
            if mine != value:
                out["x-patterns"] = [*out.get("x-patterns", []), value]
        elif key == "x-patterns":
            out[key] = [*mine, *value]
        elif key == "format":
            continue  # format only narrows strings: keeping one of two is still sound
        elif key == "not":  # both are leaf exclusions (see flat_exclusion): {"anyOf": [...]}
            out[key] = {"anyOf": [*mine["anyOf"], *value["anyOf"]]}
        elif key == "required":
            out[key] = list(dict.fromkeys([*mine, *value]))
        elif key == "uniqueItems":
            out[key] = bool(mine) or bool(value)
        elif key == WITNESS:
            out[key] = [*mine, *(c for c in value if c not in mine)]
        elif key == UNANNOTATED:
            out[key] = [*mine, *value]
        elif key in (
            "properties",
            "patternProperties",
            "additionalProperties",
            "propertyNames",
            "prefixItems",
            "items",
            "contains",
        ):
            continue  # handled below
        else:
            if canonical_json(mine) != canonical_json(value):
                unsupported("allOf", pointer, f"cannot combine two {key!r} keywords")
    _merge_object_keys(out, a, b, unsupported, pointer)
    _merge_array_keys(out, a, b, unsupported, pointer)
    if "type" in out and not out["type"]:
        return None
    if "enum" in out and not out["enum"]:
        return None
    return out


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


def applicable(f: dict, name: str, pointer: str):
    """The schema `f` applies to a member called `name` that its own `properties` do not list."""
    matching = [s for p, s in (f.get("patternProperties") or {}).items() if pattern_search(p, name, pointer)]
    if matching:
        out = None
        for s in matching:
            out = both(out, s)
        return out
    return f.get("additionalProperties")


def _merge_object_keys(out: dict, a: dict, b: dict, unsupported: Unsupported, pointer: str) -> None:
    keys = ("properties", "patternProperties", "additionalProperties", "propertyNames")
    if not any(k in a for k in keys) or not any(k in b for k in keys):
        return
    pa, pb = a.get("properties") or {}, b.get("properties") or {}
    props = {}
    for name in list(pa) + [n for n in pb if n not in pa]:
        left = pa[name] if name in pa else applicable(a, name, pointer)
        right = pb[name] if name in pb else applicable(b, name, pointer)
        merged = both(left, right)
        props[name] = True if merged is None else merged
    if props:
        out["properties"] = props
    qa, qb = a.get("patternProperties") or {}, b.get("patternProperties") or {}
    if qa or qb:
        pats = dict(qa)
        for p, s in qb.items():
            pats[p] = both(pats.get(p), s) if p in pats else s
        for own, other in ((qa, b), (qb, a)):
            for p in own:
                other_pats = other.get("patternProperties") or {}
                if p not in other_pats and not is_true(other.get("additionalProperties", True)):
                    unsupported(
                        "allOf", pointer, "patternProperties combined with another branch's additionalProperties"
                    )
        out["patternProperties"] = pats
    addl = both(a.get("additionalProperties"), b.get("additionalProperties"))
    if addl is not None:
        out["additionalProperties"] = addl
    names = both(a.get("propertyNames"), b.get("propertyNames"))
    if names is not None:
        out["propertyNames"] = names


def _merge_array_keys(out: dict, a: dict, b: dict, unsupported: Unsupported, pointer: str) -> None:
    if "prefixItems" in a or "prefixItems" in b or ("items" in a and "items" in b):
        pa, pb = a.get("prefixItems") or [], b.get("prefixItems") or []
        ia, ib = a.get("items", True), b.get("items", True)
        n = max(len(pa), len(pb))
        prefix = []
        for i in range(n):
            left = pa[i] if i < len(pa) else ia
            right = pb[i] if i < len(pb) else ib
            merged = both(left, right)
            prefix.append(True if merged is None else merged)
        if prefix:
            out["prefixItems"] = prefix
        items = both(ia, ib)
        if items is None or is_true(items):
            out.pop("items", None)
        else:
            out["items"] = items
    if "contains" in a and "contains" in b and canonical_json(a["contains"]) != canonical_json(b["contains"]):
        unsupported("allOf", pointer, "two different 'contains' keywords; kept the first")
