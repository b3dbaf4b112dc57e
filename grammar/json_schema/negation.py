"""`not`: a positive schema for the negation of a schema, keyword by keyword."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.errors import SchemaError, UnsupportedSchemaError
from .context import MAX_INLINE_DEPTH
from .forms import RefMarker
from .keywords import (
    ANNOTATIONS,
    KNOWN,
    UNANNOTATED,
    WITNESS,
    is_true,
    json_type,
    positive_whole,
    types_of,
)

if TYPE_CHECKING:
    from .algebra import SchemaAlgebra


def negate(alg: SchemaAlgebra, schema, pointer: str):
    """A positive schema for `not schema`, or UnsupportedSchemaError."""
    if schema is True:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict):
        raise SchemaError(f"a schema must be an object or a boolean, got {schema!r}", pointer)
    if is_true(schema):
        return False
    if alg.state.no_negation:  # in the scope of unevaluated*: `not` evaluates nothing
        return {UNANNOTATED: [{"not": schema}]}
    unevaluated = ("unevaluatedProperties", "unevaluatedItems")
    if any(not is_true(schema.get(k, True)) for k in unevaluated):
        # unevaluated* depends on its siblings: negate the whole schema's terms, which hold none
        terms = alg.dnf(schema, pointer)
        return negate(alg, {"anyOf": [term_schema(t) for t in terms]}, pointer)
    if "$ref" in schema and [k for k in schema if k in KNOWN and k not in ANNOTATIONS] == ["$ref"]:
        if alg.state.inline_depth > MAX_INLINE_DEPTH:
            raise UnsupportedSchemaError("not", pointer, "negation of a recursive reference")
        alg.state.inline_depth += 1
        try:
            return negate(alg, alg.ctx.lookup(schema["$ref"], pointer), pointer)
        finally:
            alg.state.inline_depth -= 1
    parts: list = []
    for key, value in schema.items():
        if key in ANNOTATIONS or key not in KNOWN or key == "format" or key in unevaluated:
            continue  # (unevaluated* true always holds)
        part = _negate_keyword(key, value, schema, alg, pointer)
        if part is _WIDEN:
            continue
        parts.append(part)
    return {"anyOf": parts} if parts else False


_WIDEN = object()
_NUMERIC_NEG = {
    "minimum": "exclusiveMaximum",
    "exclusiveMinimum": "maximum",
    "maximum": "exclusiveMinimum",
    "exclusiveMaximum": "minimum",
}
_COUNT_NEG = {
    "minLength": ("string", "maxLength", -1),
    "maxLength": ("string", "minLength", 1),
    "minItems": ("array", "maxItems", -1),
    "maxItems": ("array", "minItems", 1),
    "minProperties": ("object", "maxProperties", -1),
    "maxProperties": ("object", "minProperties", 1),
}


def _negate_keyword(key: str, value, schema: dict, alg: SchemaAlgebra, pointer: str):
    """A positive schema for `not {key: value}` (with `schema`, the keyword's siblings, for the
    keywords that read them), or _WIDEN after `alg.ctx.unsupported` when there is none."""
    for negate_keyword in (_negate_scalar_keyword, _negate_object_keyword, _negate_array_keyword, _negate_applicator):
        part = negate_keyword(key, value, schema, alg, pointer)
        if part is not None:
            return part
    alg.ctx.unsupported(
        "not",
        f"{pointer}/{key}",
        f"the negation of {key!r} cannot be expressed; widened by ignoring this part of 'not'",
    )
    return _WIDEN


def _negate_scalar_keyword(key: str, value, schema: dict, alg: SchemaAlgebra, pointer: str):
    """type, enum/const and the string/number/count keywords; None for other keywords."""
    if key == "type":
        allowed = types_of({"type": value})
        rest = [t for t in ("null", "boolean", "object", "array", "string") if t not in allowed]
        parts: list[dict[str, object]] = [{"type": rest}] if rest else []
        if "integer" in allowed and "number" not in allowed:
            parts.append({"type": "number", "not": {"type": "integer"}})  # the non-integral numbers
        elif "number" not in allowed:
            parts.append({"type": "number"})
        return {"anyOf": parts} if parts else False
    if key in ("enum", "const"):
        return _negate_enum(value if key == "enum" else [value], alg, pointer)
    if key == "pattern":
        return {"type": "string", "not": {"pattern": value}}
    if key == "multipleOf" and positive_whole(value):
        return {"type": "number", "not": {"multipleOf": int(value)}}
    if key in _NUMERIC_NEG:
        return {"type": "number", _NUMERIC_NEG[key]: value}
    if key in _COUNT_NEG:
        t, other, delta = _COUNT_NEG[key]
        bound = int(value) + delta
        return False if bound < 0 else {"type": t, other: bound}
    return None


def _negate_object_keyword(key: str, value, schema: dict, alg: SchemaAlgebra, pointer: str):
    """required, properties and the member keywords that need a WITNESS; None for others."""
    if key == "required":
        return {"type": "object", "anyOf": [{"properties": {n: False}} for n in value]} if value else False
    if key == "properties":
        parts = [
            {"type": "object", "required": [n], "properties": {n: {"not": s}}}
            for n, s in value.items()
            if s is not True
        ]
        return {"anyOf": parts} if parts else False
    if key == "additionalProperties":  # some member outside properties/patternProperties breaks it
        return {
            "type": "object",
            WITNESS: [
                {
                    "pattern": None,
                    "names": sorted(schema.get("properties") or {}),
                    "patterns": sorted(schema.get("patternProperties") or {}),
                    "value": True if value is False else {"not": value},
                }
            ],
        }
    if key == "propertyNames":  # some member name breaks it
        if value is True or is_true(value):
            return False
        return {
            "type": "object",
            WITNESS: [{"pattern": None, "names": [], "patterns": [], "value": True, "key_not": value}],
        }
    if key == "patternProperties":  # some member matching a pattern has a value its schema rejects
        parts = [
            {"type": "object", WITNESS: [{"pattern": p, "names": [], "patterns": [], "value": {"not": s}}]}
            for p, s in value.items()
            if s is not True
        ]
        return {"anyOf": parts} if parts else False
    return None


def _negate_array_keyword(key: str, value, schema: dict, alg: SchemaAlgebra, pointer: str):
    """prefixItems, items and contains (without min/maxContains); None for others."""
    if key == "prefixItems":  # some item has a value its position's schema rejects
        parts = [
            {"type": "array", "minItems": i + 1, "prefixItems": [True] * i + [{"not": s}]}
            for i, s in enumerate(value)
            if s is not True
        ]
        return {"anyOf": parts} if parts else False
    if key == "items" and value is False:  # more items than prefixItems lists
        return {"type": "array", "minItems": len(schema.get("prefixItems") or []) + 1}
    if key == "items" and "prefixItems" not in schema:
        return False if value is True else {"type": "array", "contains": {"not": value}}
    if key == "contains" and "minContains" not in schema and "maxContains" not in schema:
        return {"type": "array", "items": {"not": value}}
    return None


def _negate_applicator(key: str, value, schema: dict, alg: SchemaAlgebra, pointer: str):
    """allOf / anyOf / oneOf (up to 8 branches) / not / $ref; None for others."""
    if key == "allOf":
        return {"anyOf": [{"not": s} for s in value]}
    if key == "anyOf":
        return {"allOf": [{"not": s} for s in value]}
    if key == "oneOf" and len(value) <= 8:
        # not exactly one: none of the branches, or two of them at once
        pairs = [{"allOf": [value[i], value[j]]} for i in range(len(value)) for j in range(i + 1, len(value))]
        return {"anyOf": [{"allOf": [{"not": s} for s in value]}, *pairs]}
    if key == "not":
        return value
    if key == "$ref":
        return negate(alg, alg.ctx.lookup(value, pointer), pointer)
    return None


def _negate_enum(values: list, alg: SchemaAlgebra, pointer: str):
    kinds = {json_type(v) for v in values}
    parts: list = []
    rest = [t for t in ("null", "boolean", "object", "array", "string") if t not in kinds]
    numbers = sorted({v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if not numbers:
        rest.append("number")
    if rest:
        parts.append({"type": rest})
    strings = [v for v in values if isinstance(v, str)]
    if strings:
        parts.append({"type": "string", "not": {"enum": strings}})
    bools = {v for v in values if isinstance(v, bool)}
    if bools and len(bools) < 2:
        parts.append({"enum": [not next(iter(bools))]})
    if numbers:
        ranges = [{"exclusiveMaximum": numbers[0]}]
        for lo, hi in zip(numbers, numbers[1:]):
            ranges.append({"exclusiveMinimum": lo, "exclusiveMaximum": hi})
        ranges.append({"exclusiveMinimum": numbers[-1]})
        parts.extend({"type": "number", **r} for r in ranges)
    for kind, excluding in (("array", _not_this_array), ("object", _not_this_object)):
        excluded = [v for v in values if json_type(v) == kind]
        if excluded:
            parts.append({"type": kind, "allOf": [excluding(v) for v in excluded]})
    return {"anyOf": parts}


def _not_this_array(value: list) -> dict:
    """Arrays other than `value`: another length, or another item at some position."""
    n = len(value)
    parts: list = [{"minItems": n + 1}]
    if n:
        parts.append({"maxItems": n - 1})
    parts += [
        {"minItems": n, "maxItems": n, "prefixItems": [True] * i + [{"not": {"const": item}}]}
        for i, item in enumerate(value)
    ]
    return {"anyOf": parts}


def _not_this_object(value: dict) -> dict:
    """Objects other than `value`: a member missing, a member with another value, or (with all
    of them present) one more member.  No branch lets a named member repeat, so json.loads
    cannot turn an accepted text into `value`."""
    names = list(value)
    parts: list = [{"properties": {name: False}} for name in names]
    parts += [{"required": [name], "properties": {name: {"not": {"const": v}}}} for name, v in value.items()]
    parts.append({"required": names, "minProperties": len(names) + 1} if names else {"minProperties": 1})
    return {"anyOf": parts}


def term_schema(term) -> dict:
    """A DNF term as a schema: a flat term's keywords, a reference's `$ref`."""
    return {"$ref": term.uri} if isinstance(term, RefMarker) else term.as_schema()


def flat_exclusion(schema, parent: dict) -> bool:
    """`not` that the leaf automata compile as a difference: `{enum: [strings]}`, `{pattern: p}`
    next to `type: string`, `{type: integer}` next to `type: number`.  (Non-strings satisfy the
    first negation; the others reject other types, hence the sibling type.)"""
    if not isinstance(schema, dict):
        return False
    keys = set(schema) - ANNOTATIONS
    if keys == {"enum"}:
        return bool(schema["enum"]) and all(isinstance(v, str) for v in schema["enum"])
    if keys == {"type"}:  # not integer next to type number: the non-integral numbers
        return schema["type"] == "integer" and parent.get("type") == "number"
    if keys == {"multipleOf"}:  # next to a numeric type: the numbers that are no multiple of k
        return positive_whole(schema["multipleOf"]) and parent.get("type") in ("number", "integer")
    return keys == {"pattern"} and isinstance(schema["pattern"], str) and parent.get("type") == "string"
