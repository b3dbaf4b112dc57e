"""Semantic checks on JSON values that a grammar cannot express (uniqueItems on open item types,
oneOf whose branches overlap, distinct names of the undeclared members minProperties counts).

A checked rule matches a superset of the valid values; `Grammar.checks` names it with one of the
checks below, and the matcher (masks/value_checks.py) evaluates the check on the text of each
value the rule matches, at the bytes where an array item or the value closes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = ["DistinctNames", "UniqueItems", "ValidatesSchema", "ValueCheck", "json_key", "parse_json"]


@dataclass(frozen=True)
class UniqueItems:
    """The rule matches an array whose items must be pairwise distinct (JSON equality)."""

    pointer: str = "#"
    keyword = "uniqueItems"


@dataclass(frozen=True)
class DistinctNames:
    """The rule matches an object whose member names must be pairwise distinct (as decoded
    strings): the grammar counts members for minProperties, and json.loads would count two
    members of one name once."""

    pointer: str = "#"
    keyword = "minProperties"


@dataclass(frozen=True, eq=False)
class ValidatesSchema:
    """The rule matches a value that must validate against `schema` (a subschema whose oneOf
    branches overlap; the rule itself accepts the union of the branches)."""

    schema: Any
    validator: Any  # a jsonschema validator for `schema`, with the document's registry
    pointer: str = "#"
    keyword = "oneOf"

    def holds(self, value) -> bool:
        try:
            return bool(self.validator.is_valid(value))
        except Exception:  # noqa: BLE001 -- a value jsonschema cannot evaluate is not accepted
            return False


ValueCheck = UniqueItems | DistinctNames | ValidatesSchema
"""What `Grammar.checks` (and a CompiledGrammar's `value_checks`) map a checked rule's name to."""


def parse_json(text: bytes):
    """The value of one JSON text, numbers as Decimal so that 1, 1.0 and 1e0 compare equal and
    nothing is rounded (jsonschema compares Decimals by value)."""
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def json_key(value) -> Any:
    """A hashable key equal for JSON-equal values, as uniqueItems compares them: numbers by
    value (1 == 1.0), objects regardless of key order, and true never equal to 1."""
    if value is None or isinstance(value, bool):
        return ("literal", value)
    if isinstance(value, (int, float, Decimal)):
        return ("number", Decimal(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(json_key(v) for v in value))
    return ("object", frozenset((k, json_key(v)) for k, v in value.items()))
