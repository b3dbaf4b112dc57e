"""XGrammar 0.2.8's minProperties cases (tests/python/test_json_schema_converter.py): every schema
with minProperties that test_object_with_property_numbers checks instances against, with those
instances, and the two of the any_order tests, compiled as those tests compile them
(Grammar.from_json_schema, strict mode, no whitespace) and judged by jsonschema, not by
XGrammar's expectations.  (The one more schema with minProperties there, in
test_object_error_handle, is unsatisfiable under strict mode: XGrammar raises on it.)

    python benchmarks/xgrammar_min_properties.py        # counts: cases, compiled, agree, refused

Strict mode closes an object without additionalProperties (no undeclared members), so the
oracle validates against the schema with `additionalProperties: false` filled in where absent.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

import jsonschema

import pushmask as pm
from pushmask.testing import _is_grammar_accept_string

PROPERTIES = {f"key{i}": {"type": "string"} for i in range(1, 5)}
_VALUE = "value"
INSTANCES = [
    {},
    {"key1": _VALUE},
    {"key4": _VALUE},
    {"additional_key": _VALUE},
    {"key1": _VALUE, "additional_key": _VALUE},
    {"key1": _VALUE, "key2": _VALUE},
    {"key1": _VALUE, "key4": _VALUE},
    {"key2": _VALUE, "key3": _VALUE},
    {"key1": _VALUE, "key2": _VALUE, "additional_key": _VALUE},
    {"key1": _VALUE, "key4": _VALUE, "additional_key": _VALUE},
    {"key3": _VALUE, "key4": _VALUE, "additional_key": _VALUE},
    {"key1": _VALUE, "key2": _VALUE, "key3": _VALUE},
    {"key2": _VALUE, "key3": _VALUE, "key4": _VALUE},
    {"key1": _VALUE, "key2": _VALUE, "key3": _VALUE, "additional_key": _VALUE},
    {"key2": _VALUE, "key3": _VALUE, "key4": _VALUE, "additional_key": _VALUE},
    {"key1": _VALUE, "key2": _VALUE, "key3": _VALUE, "key4": _VALUE},
    {"key1": _VALUE, "key2": _VALUE, "key3": _VALUE, "key4": _VALUE, "additional_key": _VALUE},
    {"additional_key1": _VALUE, "additional_key2": _VALUE},
    {"key1": _VALUE, "key2": _VALUE, "additional_key1": _VALUE, "additional_key2": _VALUE},
    {"key1": _VALUE, "key2": _VALUE, "key3": _VALUE, "additional_key1": _VALUE, "additional_key2": _VALUE},
    {**{f"key{i}": _VALUE for i in range(1, 5)}, "additional_key1": _VALUE, "additional_key2": _VALUE},
    {f"additional_key{i}": _VALUE for i in range(1, 4)},
    {f"additional_key{i}": _VALUE for i in range(1, 7)},
]
REQUIRED_SETS = [
    [],
    ["key1"],
    ["key3"],
    ["key4"],
    ["key1", "key2"],
    ["key1", "key4"],
    ["key3", "key4"],
    ["key1", "key2", "key3"],
    ["key2", "key3", "key4"],
    ["key1", "key2", "key3", "key4"],
]
BOUND = 8  # the bounds XGrammar's test takes: 0..7


ANY_ORDER_CASES = [
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
            "required": ["a"],
            "additionalProperties": False,
            "minProperties": 2,
            "maxProperties": 3,
        },
        [
            '{"a": 1, "b": "x"}',
            '{"a": 1, "c": true}',
            '{"a": 1, "b": "x", "c": true}',
            '{"a": 1, "c": true, "b": "x"}',
            '{"a": 1}',
        ],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"],
            "additionalProperties": True,
            "minProperties": 3,
        },
        ['{"a": 1, "b": "x"}', '{"a": 1, "b": "x", "z": 5}', '{"a": 1, "z": 5, "y": 6, "w": 7}'],
    ),
]
"""test_any_order_min_max_properties and test_any_order_min_properties_with_additional (any_order=True)."""


def cases() -> list[dict]:
    """Every schema with minProperties that test_object_with_property_numbers checks instances
    against (a schema whose every instance it skips is left out: it never compiles there)."""
    out = []
    declared = len(PROPERTIES)

    def add(schema: dict, skipped: bool) -> None:
        if not skipped:
            out.append(schema)

    open_members = {"additionalProperties": {"type": "string"}}
    for extra, skip_min in (({}, True), (open_members, False)):  # cases 1.1 and 1.2
        for low in range(BOUND):
            add({"properties": PROPERTIES, "minProperties": low, **extra}, skip_min and low > declared)
            for high in range(low, BOUND):
                add({"properties": PROPERTIES, "minProperties": low, "maxProperties": high, **extra}, low > declared)
    for extra in ({}, open_members):  # cases 2.1 and 2.2
        for required in REQUIRED_SETS:
            for low in range(BOUND):
                base = {"properties": PROPERTIES, "minProperties": low, "required": required, **extra}
                add(base, low > declared)
                for high in range(low, BOUND):
                    add({**base, "maxProperties": high}, low > declared or high < len(required))
    for low in range(BOUND):  # case 3
        add({"type": "object", "minProperties": low, **open_members}, False)
        for high in range(low, BOUND):
            add({"type": "object", "minProperties": low, "maxProperties": high, **open_members}, False)
    return out


def oracle(schema: dict, instance: dict) -> bool:
    """jsonschema's verdict under strict mode (no undeclared members unless allowed)."""
    closed = {"additionalProperties": False, **schema}
    return jsonschema.Draft202012Validator(closed).is_valid(instance)


def check(schema: dict, texts: list[str], any_order: bool = False) -> tuple[str, list[str]]:
    """("agree" | "refused" | "disagree", the texts pushmask judged otherwise than jsonschema)."""
    try:
        grammar = pm.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False, any_order=any_order)
    except pm.UnsupportedSchemaError:
        return "refused", []
    wrong = [text for text in texts if _is_grammar_accept_string(grammar, text) != oracle(schema, json.loads(text))]
    return ("disagree" if wrong else "agree"), wrong


def all_cases() -> list[tuple[dict, list[str], bool]]:
    """(schema, test strings, any_order) for every case."""
    texts = [json.dumps(instance) for instance in INSTANCES]
    return [(schema, texts, False) for schema in cases()] + [(s, t, True) for s, t in ANY_ORDER_CASES]


def main() -> None:
    start = time.time()
    schemas = all_cases()
    counts: Counter = Counter()
    for schema, texts, any_order in schemas:
        verdict, wrong = check(schema, texts, any_order)
        counts[verdict] += 1
        if wrong:
            print("DISAGREE", json.dumps(schema), wrong[:3], file=sys.stderr)
    print(f"{len(schemas)} schemas with minProperties: {dict(counts)} ({time.time() - start:.1f}s)")


if __name__ == "__main__":
    main()
