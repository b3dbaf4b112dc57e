"""The fast metaschema pre-check (grammar/json_schema/metaschema.py) never calls valid what
jsonschema's check rejects, and calls valid nearly all that it accepts.

Oracle: jsonschema's own `check_schema` (with pushmask's format "regex").  Inputs: every schema of
the JSON Schema Test Suite (five drafts), MaskBench dev schemas, and mutants of both with one
keyword of one subschema set to a value of a random type (most of them invalid).
"""

from __future__ import annotations

import copy
import json
import random
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import DATA  # noqa: E402
from test_metaschema_memo import oracle_valid, suite_schemas  # noqa: E402

from pushmask.grammar.json_schema import metaschema  # noqa: E402
from pushmask.grammar.json_schema.documents import _inlined_metaschema, _metaschema_formats  # noqa: E402

KEYWORDS = (
    "type enum const minLength maxLength pattern format minimum maximum exclusiveMinimum exclusiveMaximum "
    "multipleOf items prefixItems additionalItems contains minContains maxContains minItems maxItems uniqueItems "
    "properties patternProperties additionalProperties propertyNames required minProperties maxProperties "
    "dependentRequired dependentSchemas dependencies allOf anyOf oneOf not if then else $ref $id id $anchor $defs "
    "definitions $dynamicRef $dynamicAnchor $recursiveRef $recursiveAnchor unevaluatedItems unevaluatedProperties "
    "$comment title description default examples deprecated readOnly writeOnly contentSchema contentEncoding "
    "contentMediaType $vocabulary"
).split()
VALUES = (5, -1, 0, 1.5, 1.0, "x", "(", "#a", "string", "^a", [], ["string", "string"], ["a", 1], [{}], [5])
VALUES += ({}, {"a": 5}, {"a": []}, {"a": {}}, {"(": {}}, True, False, None, [1, 1.0], ["a", "a"], [True, 1])


def fast(schema) -> bool:
    if isinstance(schema, bool):
        return True
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return metaschema.fast_valid(schema, cls, _inlined_metaschema, _metaschema_formats(cls))


def mutant(schema, rng: random.Random):
    """`schema` with one keyword of one of its objects set to a value from VALUES."""
    out = copy.deepcopy(schema)
    objects, pending = [], [out]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            objects.append(node)
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    rng.choice(objects)[rng.choice(KEYWORDS)] = copy.deepcopy(rng.choice(VALUES))
    return out


def dev_schemas(every: int):
    return [json.loads(path.read_text())["schema"] for path in sorted((DATA / "maskbench-dev").glob("*.json"))[::every]]


def test_never_valid_where_jsonschema_rejects():
    rng = random.Random(0)
    verdicts = {(True, True): 0, (False, True): 0, (False, False): 0}
    for schema in suite_schemas() + dev_schemas(40):
        candidates = [schema] + ([mutant(schema, rng) for _ in range(3)] if isinstance(schema, dict) else [])
        for candidate in candidates:
            ours, theirs = fast(candidate), oracle_valid(candidate)
            assert not ours or theirs, candidate
            verdicts[ours, theirs] += 1
    assert verdicts[False, False] > 1000  # the mutants do reach invalid schemas
    # and the pre-check is worth having: it answers for nearly every valid schema
    assert verdicts[True, True] > 20 * verdicts[False, True], verdicts


def test_non_json_values_are_left_to_jsonschema():
    """A value the pre-check cannot type exactly (a tuple, a Decimal) is "not known", not valid."""
    from decimal import Decimal

    assert fast({"minLength": 2})
    assert not fast({"minLength": Decimal(2)})
    assert not fast({"enum": ("a", "b")})
    assert not fast({"properties": {"a": {"type": ("string",)}}})


@pytest.mark.parametrize(
    "cls", [jsonschema.Draft4Validator, jsonschema.Draft7Validator, jsonschema.Draft202012Validator]
)
def test_metaschema_with_an_unmodelled_keyword_is_not_compiled(cls):
    """A metaschema using a keyword the pre-check does not model is left to jsonschema whole."""
    odd = {**_inlined_metaschema(cls), "maxProperties": 3}
    with pytest.raises(metaschema._NotModelled):
        metaschema.FastMetaschema(cls, odd, _metaschema_formats(cls))
    metaschema.FastMetaschema(cls, _inlined_metaschema(cls), _metaschema_formats(cls))


@pytest.mark.parametrize("value", [5, ["x"], {"a": 1}, None])
def test_a_schema_uri_that_is_not_a_string_is_a_schema_error(value):
    """jsonschema's look-up of `$schema` crashes on a non-string (AttributeError, TypeError); the
    2020-12 metaschema refuses it, and so does the compile, at #/$schema."""
    from pushmask.core.errors import SchemaError
    from pushmask.grammar.json_schema.documents import check_metaschema

    schema = {"$schema": value, "type": "string"}
    assert not jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA).is_valid(schema)
    with pytest.raises(SchemaError, match="is not of type 'string'") as info:
        check_metaschema(schema)
    assert info.value.pointer == "#/$schema"
