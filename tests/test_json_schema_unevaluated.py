"""unevaluatedProperties / unevaluatedItems next to not, if/then/else, contains and oneOf.

Oracle: `jsonschema` (draft 2020-12) on a fixed random pool of small objects and arrays, fed to
the real matcher token by token (compact text) and as a string (default spacing).  No invalid
instance may be accepted; every valid one must be accepted.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import accepts_text, accepts_token_ids  # noqa: E402

from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402

KEYS = ["foo", "bar", "baz", "a"]
VALUES = ["foo", "bar", "then", "else", "x", 1, 42, None]


def object_pool(seed: int = 1, n: int = 120) -> list:
    rng = random.Random(seed)
    pool = [{}, "foo", 1, None]
    for size in (1, 2, 3):
        for keys in itertools.combinations(KEYS, size):
            pool.append({k: rng.choice(VALUES) for k in keys})
    while len(pool) < n:
        keys = rng.sample(KEYS, rng.randint(1, 3))
        pool.append({k: rng.choice(VALUES) for k in keys})
    return pool


def array_pool(seed: int = 2, n: int = 150) -> list:
    rng = random.Random(seed)
    pool = [[], "foo", 1, {}] + [[v] for v in VALUES]
    while len(pool) < n:
        pool.append([rng.choice(VALUES) for _ in range(rng.randint(2, 5))])
    return pool


OBJECT_SCHEMAS = [
    {
        "properties": {"foo": {"type": "string"}},
        "not": {"not": {"properties": {"bar": {"const": "bar"}}, "required": ["bar"]}},
        "unevaluatedProperties": False,
    },
    {
        "if": {"properties": {"foo": {"const": "then"}}, "required": ["foo"]},
        "then": {"properties": {"bar": {"type": "string"}}, "required": ["bar"]},
        "else": {"properties": {"baz": {"type": "string"}}, "required": ["baz"]},
        "unevaluatedProperties": False,
    },
    {
        "if": {"properties": {"foo": {"const": "then"}}, "required": ["foo"]},
        "else": {"properties": {"baz": {"type": "string"}}},
        "unevaluatedProperties": False,
    },
    {"if": {"properties": {"foo": {"const": "then"}}, "required": ["foo"]}, "unevaluatedProperties": False},
    {
        "anyOf": [{"not": {"required": ["foo"]}}, {"properties": {"foo": {"type": "string"}}}],
        "unevaluatedProperties": {"type": "integer"},
    },
    {
        "oneOf": [
            {"properties": {"foo": {"type": "string"}}, "required": ["foo"]},
            {"properties": {"bar": {"const": "bar"}}, "required": ["bar"]},
        ],
        "unevaluatedProperties": False,
    },
    {
        "properties": {"foo": {"type": "string"}},
        "allOf": [{"unevaluatedProperties": True}],
        "unevaluatedProperties": False,
    },
    {
        "allOf": [{"properties": {"foo": {"type": "string"}}}, {"not": {"properties": {"bar": {"type": "integer"}}}}],
        "unevaluatedProperties": {"const": "x"},
    },
    # a `not` reached through a $ref branch evaluates nothing either
    {
        "anyOf": [{"$ref": "#/$defs/x"}, {"type": "string"}],
        "unevaluatedProperties": False,
        "$defs": {"x": {"not": {"properties": {"foo": {"type": "integer"}}, "required": ["foo"]}}},
    },
]

ARRAY_SCHEMAS = [
    {
        "prefixItems": [{"const": "foo"}],
        "not": {"not": {"prefixItems": [True, {"const": "bar"}]}},
        "unevaluatedItems": False,
    },
    {
        "prefixItems": [{"const": "foo"}],
        "if": {"prefixItems": [True, {"const": "bar"}]},
        "then": {"prefixItems": [True, True, {"const": "then"}]},
        "else": {"prefixItems": [True, True, True, {"const": "else"}]},
        "unevaluatedItems": False,
    },
    {"prefixItems": [True], "contains": {"type": "string"}, "unevaluatedItems": False},
    {"contains": {"type": "string"}, "minContains": 0, "unevaluatedItems": False},
    {"contains": {"const": 1}, "unevaluatedItems": {"type": "string"}},
    {"if": {"prefixItems": [{"const": "foo"}]}, "unevaluatedItems": False},
    {"if": {"contains": {"const": "x"}}, "then": {"maxItems": 3}, "unevaluatedItems": {"type": "integer"}},
    {"not": {"prefixItems": [{"type": "string"}], "unevaluatedItems": False}},
]


def check_exact(compiler, tokenizer, schema, pool, exact=lambda value: True):
    """The matcher accepts exactly the valid instances of the pool (only the sound half for
    instances outside the documented completeness policy: `exact(value)` false)."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    compiled = compiler.compile_ir(
        json_schema_to_grammar(schema, property_order="any", additional_properties_default=True)
    )
    validator = jsonschema.Draft202012Validator(schema)
    wrong = []
    for value in pool:
        compact = json.dumps(value, separators=(",", ":"))
        by_tokens = accepts_token_ids(compiled, tokenizer.encode(compact, add_special_tokens=False))
        by_string = accepts_text(compiled, json.dumps(value))
        valid = validator.is_valid(value)
        assert by_tokens == by_string, compact
        if by_tokens != valid and (by_tokens or exact(value)):
            wrong.append(("accepted invalid" if by_tokens else "rejected valid", compact))
    assert any(validator.is_valid(v) for v in pool) and not all(validator.is_valid(v) for v in pool)
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("schema", OBJECT_SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_unevaluated_properties_next_to_not_if_one_of(schema, llama3_compiler, llama3_tokenizer):
    check_exact(llama3_compiler, llama3_tokenizer, schema, object_pool())


def test_not_of_unevaluated_properties(llama3_compiler, llama3_tokenizer):
    """`not` of a schema with unevaluatedProperties: "some member is unevaluated", met by a
    witness member that is the object's last one (the documented WITNESS policy)."""
    schema = {"not": {"anyOf": [True, {"properties": {"foo": True}}], "unevaluatedProperties": False}}
    check_exact(
        llama3_compiler,
        llama3_tokenizer,
        schema,
        object_pool(),
        exact=lambda v: not isinstance(v, dict) or not v or list(v)[-1] != "foo",
    )


@pytest.mark.parametrize("schema", ARRAY_SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_unevaluated_items_next_to_not_if_contains(schema, llama3_compiler, llama3_tokenizer):
    check_exact(llama3_compiler, llama3_tokenizer, schema, array_pool())
