"""The JSON Schema vocabulary the compiler works in, and helpers on JSON values and flat terms.

A *flat term* is a keyword dict without applicators (allOf/anyOf/oneOf/not/if/...): one
conjunction of the disjunctive normal form that `algebra.py` builds, which `forms.parse_term`
reads once into a typed `Term`.
"""

from __future__ import annotations

import json

ALL_TYPES = ("null", "boolean", "object", "array", "number", "string", "integer")
# Keywords that constrain nothing (annotations, containers of definitions, identifiers).
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "$schema",
        "$id",
        "$anchor",
        "$defs",
        "definitions",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "$vocabulary",
        "discriminator",
        "nullable",
    }
)
WITNESS = "\x00witness"
"""Internal flat keyword (no schema can spell it: JSON Schema keys never start with NUL) for the
negation of additionalProperties / patternProperties / propertyNames: a list of conditions
{"pattern": p or None, "names": [...], "patterns": [...], "value": schema, ["key_not": schema]},
each met by a 'witness' member: a key matching p (None: any key) that is none of `names`,
matches none of `patterns` (nor `key_not`, a propertyNames schema), with a value valid for
`value`.  The witnesses are the object's last members, with
keys that no later witness can have, because json.loads keeps the last of repeated names: so
the parsed object really holds each witness's value."""
UNANNOTATED = "\x00unannotated"
"""Internal flat keyword: a list of schemas a term must also satisfy that evaluate no member or
item for unevaluatedProperties/Items (the `not`s in its scope, `if` conditions that failed)."""
# Keywords that stay in a flat conjunction (read by `forms.parse_term`, merged by `merge.merge_terms`).
FLAT_KEYS = frozenset(
    {
        "type",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "prefixItems",
        "items",
        "contains",
        "minContains",
        "maxContains",
        "minItems",
        "maxItems",
        "uniqueItems",
        "unevaluatedProperties",
        "unevaluatedItems",
        WITNESS,
        UNANNOTATED,
    }
)
APPLICATORS = (
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "$dynamicRef",
    "$recursiveRef",
)
KNOWN = FLAT_KEYS | ANNOTATIONS | set(APPLICATORS) | {"const"}


def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_equal(a, b) -> bool:
    """JSON Schema equality: 1 == 1.0, but True != 1; objects ignore key order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def is_true(schema) -> bool:
    return schema is True or (isinstance(schema, dict) and not (set(schema) & (KNOWN - ANNOTATIONS)))


def types_of(flat: dict) -> set[str]:
    """Allowed JSON types; "integer" stands for integers only, "number" includes them."""
    t = flat.get("type")
    if t is None:
        return set(ALL_TYPES)
    out = set([t] if isinstance(t, str) else t)
    if "number" in out:
        out.add("integer")
    return out


def positive_whole(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0 and value == int(value)


def rule_hint(schema: dict, pointer: str) -> str:
    tail = pointer.rsplit("/", 1)[-1] if "/" in pointer else "value"
    if isinstance(schema.get("title"), str):
        tail = schema["title"]
    return tail if tail and not tail[0].isdigit() else f"item_{tail}"
