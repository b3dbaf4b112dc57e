"""Typed forms of a flat term: what one conjunction of the DNF says, keyword family by family.

A flat term (keywords.py) is read once, by `parse_term`, into a `Term`: its type set, enum, and
one form per instance type (`NumberForm`, `StringForm`, `ObjectForm`, `ArrayForm`), plus the
leaf exclusions of a `not` and the internal WITNESS / UNANNOTATED conditions.  `parse_term`
checks every keyword's value type and raises SchemaError with the JSON pointer of the bad
keyword; past it, the algebra (merge.py, one_of.py) and the emitter read typed fields.  A DNF
term is a `Term` or a `RefMarker` (exactly one `$ref`, compiled as a reference to its rule).

Subschemas inside a form (properties, items, ...) stay plain JSON (normalised 2020-12): they are
parsed when the DNF reaches them.  Forms are frozen; equality and hashing go through the
canonical JSON of `Term.as_schema()` (the pointer, where a form came from, does not count).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

from ...core.errors import SchemaError
from .keywords import ALL_TYPES, FLAT_KEYS, UNANNOTATED, WITNESS, canonical_json

Schema = Any
"""A subschema: True, False or a keyword dict (normalised draft 2020-12), never parsed here."""
Number = int | float

EMPTY_MAP: Mapping[str, Schema] = MappingProxyType({})
"""An absent map keyword (properties, patternProperties); a present one, even empty, is another object."""


@dataclass(frozen=True)
class NumberForm:
    """minimum / maximum / exclusiveMinimum / exclusiveMaximum / multipleOf (None: absent)."""

    minimum: Number | None = None
    maximum: Number | None = None
    exclusive_minimum: Number | None = None
    exclusive_maximum: Number | None = None
    multiple_of: Number | None = None

    def range(self) -> tuple[tuple[Number | None, bool], tuple[Number | None, bool]]:
        """((low, exclusive?), (high, exclusive?)): the tighter of each pair of bounds."""
        lo: tuple[Number | None, bool] = (self.minimum, False)
        if self.exclusive_minimum is not None and (lo[0] is None or self.exclusive_minimum >= lo[0]):
            lo = (self.exclusive_minimum, True)
        hi: tuple[Number | None, bool] = (self.maximum, False)
        if self.exclusive_maximum is not None and (hi[0] is None or self.exclusive_maximum <= hi[0]):
            hi = (self.exclusive_maximum, True)
        return lo, hi


@dataclass(frozen=True)
class StringForm:
    """minLength / maxLength, the patterns every string must contain a match of (`pattern`
    first, then those merged in from allOf branches), and `format`."""

    min_length: Number | None = None
    max_length: Number | None = None
    patterns: tuple[str, ...] = ()
    format: str | None = None


@dataclass(frozen=True)
class Exclusion:
    """One leaf exclusion of a flat `not` (negation.flat_exclusion), compiled as a difference:
    strings other than `enum`, strings without a match of `pattern`, non-integral numbers
    (`integer`), numbers that are no multiple of `multiple_of`."""

    enum: tuple[Any, ...] | None = None
    pattern: str | None = None
    integer: bool = False
    multiple_of: int | None = None

    def as_schema(self) -> dict:
        if self.enum is not None:
            return {"enum": list(self.enum)}
        if self.pattern is not None:
            return {"pattern": self.pattern}
        if self.integer:
            return {"type": "integer"}
        return {"multipleOf": self.multiple_of}


@dataclass(frozen=True)
class Witness:
    """A member some object of the term must hold, as its last members (keywords.WITNESS): the
    negation of additionalProperties / patternProperties / propertyNames.  Its key matches
    `pattern` (None: any key), is none of `names`, matches none of `patterns` nor, when set,
    the names schema `key_not`; its value is valid for `value`."""

    pattern: str | None
    names: tuple[str, ...]
    patterns: tuple[str, ...]
    value: Schema
    key_not: Schema | None = None

    def as_schema(self) -> dict:
        out = {"pattern": self.pattern, "names": list(self.names), "patterns": list(self.patterns), "value": self.value}
        return out if self.key_not is None else {**out, "key_not": self.key_not}


@dataclass(frozen=True)
class ObjectForm:
    """The member keywords of a term.  `additional` / `names` are None when absent (any member
    / any name); `witnesses` are the WITNESS conditions of negated member keywords."""

    properties: Mapping[str, Schema] = field(default_factory=lambda: EMPTY_MAP)
    required: tuple[str, ...] = ()
    pattern_properties: Mapping[str, Schema] = field(default_factory=lambda: EMPTY_MAP)
    additional: Schema | None = None
    names: Schema | None = None
    min_properties: Number | None = None
    max_properties: Number | None = None
    witnesses: tuple[Witness, ...] = ()
    unevaluated: Schema | None = None  # only a true unevaluatedProperties stays in a flat term

    def has_member_keys(self) -> bool:
        """Does the term name member schemas (properties, patterns, additional, names)?"""
        return bool(
            self.properties is not EMPTY_MAP
            or self.pattern_properties is not EMPTY_MAP
            or self.additional is not None
            or self.names is not None
        )


@dataclass(frozen=True)
class ArrayForm:
    """The item keywords of a term (None: absent)."""

    prefix_items: tuple[Schema, ...] | None = None
    items: Schema | None = None
    contains: Schema | None = None
    min_contains: Number | None = None
    max_contains: Number | None = None
    min_items: Number | None = None
    max_items: Number | None = None
    unique_items: bool | None = None
    unevaluated: Schema | None = None  # only a true unevaluatedItems stays in a flat term


@dataclass(frozen=True, eq=False)
class Term:
    """One flat conjunction, typed.  `type` is the declared type set (None: no `type` keyword);
    `enum` the allowed values (const included) or None; `exclusions` the leaf `not`s;
    `unannotated` the schemas that evaluate nothing for unevaluated* (keywords.UNANNOTATED)."""

    type: frozenset[str] | None = None
    enum: tuple[Any, ...] | None = None
    number: NumberForm = NumberForm()
    string: StringForm = StringForm()
    exclusions: tuple[Exclusion, ...] = ()
    object: ObjectForm = ObjectForm()
    array: ArrayForm = ArrayForm()
    unannotated: tuple[Schema, ...] = ()
    pointer: str = field(default="#", compare=False)

    def types(self) -> set[str]:
        """Allowed JSON types; "integer" stands for integers only, "number" includes them."""
        if self.type is None:
            return set(ALL_TYPES)
        out = set(self.type)
        if "number" in out:
            out.add("integer")
        return out

    def is_top(self) -> bool:
        """No constraint at all (the empty conjunction)."""
        return not self.as_schema()

    def as_schema(self, drop: tuple[str, ...] = ()) -> dict:
        """The term as a 2020-12 schema (for jsonschema checks and negation), keywords `drop`ped;
        extra patterns become allOf [{"pattern": p}], internal keys stay (jsonschema ignores them)."""
        out: dict = {}
        if self.type is not None:
            out["type"] = sorted(self.type)
        if self.enum is not None:
            out["enum"] = list(self.enum)
        n, s, o, a = self.number, self.string, self.object, self.array
        for key, value in (
            ("minimum", n.minimum),
            ("maximum", n.maximum),
            ("exclusiveMinimum", n.exclusive_minimum),
            ("exclusiveMaximum", n.exclusive_maximum),
            ("multipleOf", n.multiple_of),
            ("minLength", s.min_length),
            ("maxLength", s.max_length),
            ("format", s.format),
        ):
            if value is not None:
                out[key] = value
        if s.patterns:
            out["pattern"] = s.patterns[0]
            if len(s.patterns) > 1:
                out["allOf"] = [{"pattern": p} for p in s.patterns[1:]]
        if self.exclusions:
            out["not"] = {"anyOf": [e.as_schema() for e in self.exclusions]}
        if o.properties is not EMPTY_MAP:
            out["properties"] = dict(o.properties)
        if o.required:
            out["required"] = list(o.required)
        if o.pattern_properties is not EMPTY_MAP:
            out["patternProperties"] = dict(o.pattern_properties)
        for key, value in (
            ("additionalProperties", o.additional),
            ("propertyNames", o.names),
            ("minProperties", o.min_properties),
            ("maxProperties", o.max_properties),
            ("unevaluatedProperties", o.unevaluated),
            ("items", a.items),
            ("contains", a.contains),
            ("minContains", a.min_contains),
            ("maxContains", a.max_contains),
            ("minItems", a.min_items),
            ("maxItems", a.max_items),
            ("uniqueItems", a.unique_items),
            ("unevaluatedItems", a.unevaluated),
        ):
            if value is not None:
                out[key] = value
        if a.prefix_items is not None:
            out["prefixItems"] = list(a.prefix_items)
        if o.witnesses:
            out[WITNESS] = [w.as_schema() for w in o.witnesses]
        if self.unannotated:
            out[UNANNOTATED] = list(self.unannotated)
        for key in drop:
            out.pop(key, None)
        return out

    @cached_property
    def canonical(self) -> str:
        return canonical_json(self.as_schema())

    def __eq__(self, other) -> bool:
        return isinstance(other, Term) and self.canonical == other.canonical

    def __hash__(self) -> int:
        return hash(self.canonical)


def ranges_disjoint(lo_x, hi_x, lo_y, hi_y) -> bool:
    """Do two numeric ranges ((bound, exclusive?) pairs, NumberForm.range) share no number?"""
    lo = max((b for b in (lo_x, lo_y) if b[0] is not None), key=lambda b: (b[0], b[1]), default=None)
    hi = min((b for b in (hi_x, hi_y) if b[0] is not None), key=lambda b: (b[0], not b[1]), default=None)
    if lo is None or hi is None:
        return False
    return lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1]))


def counts_disjoint(lo_x, hi_x, lo_y, hi_y) -> bool:
    """Do two count ranges (minLength/maxLength, minItems/maxItems, ...; None: absent) share no count?"""
    lo = max(lo_x or 0, lo_y or 0)
    his = [v for v in (hi_x, hi_y) if v is not None]
    return bool(his) and lo > min(his)


TOP = Term()
"""The empty conjunction: every instance."""


@dataclass(frozen=True)
class RefMarker:
    """A conjunction that is exactly one `$ref` (compiled as a reference to the target's rule)."""

    uri: str


def as_terms(merged) -> list:
    """What `merge` returns (a term, a list of terms, or None for unsatisfiable) as a list."""
    return merged if isinstance(merged, list) else [] if merged is None else [merged]


# -- parsing ----------------------------------------------------------------------------------


def _where(pointer: str, key: str) -> str:
    return f"{pointer}/{key}"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value, key: str, pointer: str) -> Number:
    if not _is_number(value):
        raise SchemaError(f"{key} must be a number, got {value!r}", _where(pointer, key))
    return value


def _count(value, key: str, pointer: str) -> Number:
    """A non-negative integer (1.0 counts as one, as JSON Schema's integer type does)."""
    if not _is_number(value) or value < 0 or value != int(value):
        raise SchemaError(f"{key} must be a non-negative integer, got {value!r}", _where(pointer, key))
    return value


def _schema(value, key: str, pointer: str) -> Schema:
    if not isinstance(value, (bool, dict)):
        raise SchemaError(f"{key} must be a schema (an object or a boolean), got {value!r}", _where(pointer, key))
    return value


def _schema_map(value, key: str, pointer: str) -> Mapping[str, Schema]:
    if not isinstance(value, dict):
        raise SchemaError(f"{key} must be an object of schemas, got {value!r}", _where(pointer, key))
    for name, sub in value.items():
        _schema(sub, f"{key}/{name.replace('~', '~0').replace('/', '~1')}", pointer)
    return MappingProxyType(dict(value))


def _schema_list(value, key: str, pointer: str) -> tuple[Schema, ...]:
    if not isinstance(value, list):
        raise SchemaError(f"{key} must be an array of schemas, got {value!r}", _where(pointer, key))
    for i, sub in enumerate(value):
        _schema(sub, f"{key}/{i}", pointer)
    return tuple(value)


def _string(value, key: str, pointer: str) -> str:
    if not isinstance(value, str):
        raise SchemaError(f"{key} must be a string, got {value!r}", _where(pointer, key))
    return value


def _types(value, pointer: str) -> frozenset[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(t, str) and t in ALL_TYPES for t in names):
        raise SchemaError(
            f"type must be one of {', '.join(ALL_TYPES)} or an array of them, got {value!r}", _where(pointer, "type")
        )
    return frozenset(names)


def _string_list(value, key: str, pointer: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise SchemaError(f"{key} must be an array of strings, got {value!r}", _where(pointer, key))
    for i, name in enumerate(value):
        _string(name, f"{key}/{i}", pointer)
    return tuple(value)


def _exclusions(value, pointer: str) -> tuple[Exclusion, ...]:
    """The flat `not` ({"anyOf": [leaf exclusions]}, built by the algebra, see flat_exclusion)."""
    parts = value.get("anyOf") if isinstance(value, dict) else None
    if not isinstance(parts, list):
        raise SchemaError(f"a flat 'not' must be {{'anyOf': [...]}}, got {value!r}", _where(pointer, "not"))
    out = []
    for part in parts:
        if "enum" in part:
            out.append(Exclusion(enum=tuple(part["enum"])))
        elif "pattern" in part:
            out.append(Exclusion(pattern=_string(part["pattern"], "not/pattern", pointer)))
        elif part.get("type") == "integer":
            out.append(Exclusion(integer=True))
        else:
            out.append(Exclusion(multiple_of=part["multipleOf"]))
    return tuple(out)


_NUMBER_KEYS = {
    "minimum": "minimum",
    "maximum": "maximum",
    "exclusiveMinimum": "exclusive_minimum",
    "exclusiveMaximum": "exclusive_maximum",
}
_COUNT_KEYS = {
    "minLength": ("string", "min_length"),
    "maxLength": ("string", "max_length"),
    "minProperties": ("object", "min_properties"),
    "maxProperties": ("object", "max_properties"),
    "minContains": ("array", "min_contains"),
    "maxContains": ("array", "max_contains"),
    "minItems": ("array", "min_items"),
    "maxItems": ("array", "max_items"),
}
_SCHEMA_KEYS = {
    "additionalProperties": ("object", "additional"),
    "propertyNames": ("object", "names"),
    "unevaluatedProperties": ("object", "unevaluated"),
    "items": ("array", "items"),
    "contains": ("array", "contains"),
    "unevaluatedItems": ("array", "unevaluated"),
}


def parse_term(flat: dict, pointer: str) -> Term:
    """The typed form of a flat term (a dict of FLAT_KEYS, plus "x-patterns" from merges), each
    keyword's value checked: SchemaError at `pointer`/keyword for a value of the wrong type."""
    top: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {"number": {}, "string": {}, "object": {}, "array": {}}
    for key, value in flat.items():
        if key == "type":
            top["type"] = _types(value, pointer)
        elif key == "enum":
            if not isinstance(value, list):
                raise SchemaError(f"enum must be an array, got {value!r}", _where(pointer, key))
            top["enum"] = tuple(value)
        elif key in _NUMBER_KEYS:
            parts["number"][_NUMBER_KEYS[key]] = _number(value, key, pointer)
        elif key == "multipleOf":
            if not _is_number(value) or value <= 0:
                raise SchemaError(f"multipleOf must be a number > 0, got {value!r}", _where(pointer, key))
            parts["number"]["multiple_of"] = value
        elif key in _COUNT_KEYS:
            family, name = _COUNT_KEYS[key]
            parts[family][name] = _count(value, key, pointer)
        elif key == "pattern":
            parts["string"]["patterns"] = (_string(value, key, pointer), *parts["string"].get("patterns", ()))
        elif key == "x-patterns":
            parts["string"]["patterns"] = (*parts["string"].get("patterns", ()), *value)
        elif key == "format":
            parts["string"]["format"] = _string(value, key, pointer)
        elif key == "not":
            top["exclusions"] = _exclusions(value, pointer)
        elif key in ("properties", "patternProperties"):
            parts["object"]["properties" if key == "properties" else "pattern_properties"] = _schema_map(
                value, key, pointer
            )
        elif key == "required":
            parts["object"]["required"] = _string_list(value, key, pointer)
        elif key in _SCHEMA_KEYS:
            family, name = _SCHEMA_KEYS[key]
            parts[family][name] = _schema(value, key, pointer)
        elif key == "prefixItems":
            parts["array"]["prefix_items"] = _schema_list(value, key, pointer)
        elif key == "uniqueItems":
            if not isinstance(value, bool):
                raise SchemaError(f"uniqueItems must be a boolean, got {value!r}", _where(pointer, key))
            parts["array"]["unique_items"] = value
        elif key == WITNESS:
            parts["object"]["witnesses"] = tuple(
                Witness(c["pattern"], tuple(c["names"]), tuple(c["patterns"]), c["value"], c.get("key_not"))
                for c in value
            )
        elif key == UNANNOTATED:
            top["unannotated"] = tuple(value)
        elif key not in FLAT_KEYS:
            raise SchemaError(f"{key!r} is not a keyword of a flat term", _where(pointer, key))
    return Term(
        number=NumberForm(**parts["number"]) if parts["number"] else NumberForm(),
        string=StringForm(**parts["string"]) if parts["string"] else StringForm(),
        object=ObjectForm(**parts["object"]) if parts["object"] else ObjectForm(),
        array=ArrayForm(**parts["array"]) if parts["array"] else ArrayForm(),
        pointer=pointer,
        **top,
    )


__all__ = [
    "ArrayForm",
    "Exclusion",
    "NumberForm",
    "ObjectForm",
    "Schema",
    "StringForm",
    "TOP",
    "RefMarker",
    "as_terms",
    "Term",
    "Witness",
    "parse_term",
]
