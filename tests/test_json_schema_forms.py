"""The typed forms of flat terms (grammar/json_schema/forms.py) and the merge over them.

- parse_term checks each keyword's value type: a wrong one is a SchemaError whose JSON pointer
  is one that jsonschema's own metaschema validator (the oracle) reports an error at.
- A parsed term means what its dict meant: jsonschema accepts the same Test Suite instances
  against `Term.as_schema()` as against the flat keywords it was read from.
- merge_terms equals the dict merge it replaced (tests/merge_reference.py) on pairs of flat terms
  from the Test Suite, `unsupported` calls included, and the merged term accepts exactly the
  instances both sides accept (jsonschema) where no keyword pair was widened.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import merge_reference  # noqa: E402
from support import SUITE, require_shared  # noqa: E402

from pushmask.core.errors import SchemaError  # noqa: E402
from pushmask.grammar.json_schema.forms import TOP, Term, parse_term  # noqa: E402
from pushmask.grammar.json_schema.keywords import FLAT_KEYS, canonical_json  # noqa: E402
from pushmask.grammar.json_schema.merge import merge_terms  # noqa: E402

META = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)

BAD_VALUES = [
    ("type", 5),
    ("type", "strng"),
    ("type", ["string", 1]),
    ("enum", "x"),
    ("minimum", "1"),
    ("maximum", True),
    ("exclusiveMinimum", "0"),
    ("exclusiveMaximum", None),
    ("multipleOf", 0),
    ("multipleOf", -2),
    ("multipleOf", "2"),
    ("minLength", -1),
    ("minLength", 1.5),
    ("maxLength", "3"),
    ("minItems", -3),
    ("maxItems", 2.5),
    ("minProperties", "1"),
    ("maxProperties", -1),
    ("minContains", 0.5),
    ("maxContains", "2"),
    ("pattern", 5),
    ("format", ["date"]),
    ("properties", []),
    ("properties", {"a": 5}),
    ("patternProperties", {"^x": "string"}),
    ("required", "a"),
    ("required", ["a", 1]),
    ("additionalProperties", 5),
    ("propertyNames", "x"),
    ("items", 5),
    ("contains", []),
    ("prefixItems", {}),
    ("prefixItems", [True, 5]),
    ("uniqueItems", "yes"),
    ("unevaluatedProperties", 3),
    ("unevaluatedItems", "no"),
]


def _pointer(path) -> str:
    return "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


@pytest.mark.parametrize(("keyword", "value"), BAD_VALUES, ids=[f"{k}={v!r}" for k, v in BAD_VALUES])
def test_a_keyword_with_a_wrong_value_type_is_a_schema_error_at_its_pointer(keyword, value):
    flat = {"type": "object", keyword: value} if keyword != "type" else {keyword: value}
    oracle = {_pointer(error.absolute_path) for error in META.iter_errors(flat)}
    assert oracle, "the metaschema accepts this value: the case tests nothing"
    with pytest.raises(SchemaError) as info:
        parse_term(flat, "#")
    assert info.value.pointer in oracle
    with pytest.raises(SchemaError) as nested:  # pointers continue the term's own
        parse_term(flat, "#/$defs/a")
    assert nested.value.pointer == "#/$defs/a" + info.value.pointer[1:]


def _suite_groups():
    for path in sorted(require_shared(SUITE / "tests" / "draft2020-12").glob("*.json")):
        for group in json.loads(path.read_text()):
            yield path.name, group["schema"], [t["data"] for t in group["tests"]]


def _flat_parts(node):
    """The flat keywords of every subschema of `node` (references and applicators left out)."""
    if isinstance(node, list):
        for value in node:
            yield from _flat_parts(value)
    elif isinstance(node, dict):
        # unevaluated* never reaches a merge as such: the algebra rewrites it first
        flat = {k: v for k, v in node.items() if k in FLAT_KEYS and not k.startswith("unevaluated")}
        if flat and not any(True for _ in META.iter_errors(flat)):
            yield flat
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples"):
                yield from _flat_parts(value)


def _validates(schema, instance) -> bool | None:
    """jsonschema's verdict; None where it cannot decide (a pattern Python's `re` cannot read)."""
    try:
        return jsonschema.Draft202012Validator(schema).is_valid(instance)
    except Exception:  # noqa: BLE001
        return None


def _cases():
    """(file, flat terms, instances) per Test Suite group whose schema has flat keywords."""
    for name, schema, instances in _suite_groups():
        flats = [f for f in _flat_parts(schema) if '"$' not in json.dumps(f)]  # no references, ids or anchors
        if flats:
            yield name, flats, instances


def test_a_parsed_term_accepts_what_its_keywords_accept():
    checked = 0
    for _, flats, instances in _cases():
        for flat in flats:
            term = parse_term(flat, "#")
            for instance in instances:
                expected = _validates(flat, instance)
                if expected is not None:
                    assert _validates(term.as_schema(), instance) == expected, (flat, instance)
                    checked += 1
    assert checked > 1000


def test_terms_compare_and_hash_by_meaning():
    a = parse_term({"type": "string", "minLength": 2}, "#/a")
    b = parse_term({"minLength": 2, "type": ["string"]}, "#/b")
    assert a == b and hash(a) == hash(b) and a.pointer != b.pointer
    assert a != parse_term({"type": "string", "minLength": 3}, "#")
    assert parse_term({}, "#").is_top() and TOP.is_top() and not a.is_top()


def _merge_pairs():
    for name, flats, instances in _cases():
        for x, y in itertools.islice(itertools.product(flats, repeat=2), 40):
            yield name, x, y, instances


def test_merge_over_forms_equals_the_dict_merge_it_replaced():
    compared = 0
    for _, x, y, _ in _merge_pairs():
        old_calls, new_calls = [], []
        old = merge_reference.merge_flat(x, y, lambda *a: old_calls.append(a), "#")
        new = merge_terms(parse_term(x, "#"), parse_term(y, "#"), lambda *a: new_calls.append(a), "#")
        assert (old is None) == (new is None), (x, y)
        if old is not None:
            assert canonical_json(parse_term(old, "#").as_schema()) == canonical_json(new.as_schema()), (x, y)
        assert old_calls == new_calls
        compared += 1
    assert compared > 500


def test_merged_terms_accept_exactly_what_both_sides_accept():
    checked = 0
    for _, x, y, instances in _merge_pairs():
        widened = []
        merged = merge_terms(parse_term(x, "#"), parse_term(y, "#"), lambda *a: widened.append(a), "#")
        if widened:
            continue  # a widened pair keeps one side's keyword: checked by the test above
        for instance in instances:
            sides = (_validates(x, instance), _validates(y, instance))
            if None in sides:
                continue
            assert (merged is not None and _validates(merged.as_schema(), instance)) == all(sides), (x, y, instance)
            checked += 1
    assert checked > 1000


def test_terms_are_frozen():
    term = parse_term({"type": "array", "minItems": 1}, "#")
    with pytest.raises(AttributeError):
        term.type = frozenset({"string"})  # type: ignore[misc]
    assert isinstance(term, Term) and term.array.min_items == 1
