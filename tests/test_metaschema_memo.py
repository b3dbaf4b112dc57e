"""The metaschema check with its process-wide memo of valid subschemas gives jsonschema's verdict.

Oracle: jsonschema's own `check_schema` on the whole document (with pushmask's format "regex",
which takes ECMA-262 property escapes).  The memo is warmed with every
schema of the JSON Schema Test Suite (all five drafts) first, then every schema and mutants of
it (one subschema at a time replaced by an invalid one) are checked again: a subschema
remembered as valid must never hide an invalid one, in any draft, including subschemas under
keywords a draft does not check (a later draft's keywords), which a document in that draft may
hold anything under.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import DRAFTS, METASCHEMAS, groups  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.core.errors import SchemaError  # noqa: E402
from pushmask.grammar.json_schema.documents import (  # noqa: E402
    _inlined_metaschema,
    _metaschema_formats,
    check_metaschema,
)

BAD = ({"type": 5}, {"minLength": -1}, {"required": "name"}, {"pattern": "("}, {"properties": {"a": 3}})
SUBSCHEMA_KEYS = (
    "items",
    "not",
    "additionalProperties",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "additionalItems",
    "contentSchema",
    "unevaluatedItems",
)
MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
LIST_KEYS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def oracle_valid(schema) -> bool:
    if isinstance(schema, bool):
        return True
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema, format_checker=_metaschema_formats(cls))  # format regex: ECMA-262
    except jsonschema.exceptions.SchemaError:
        return False
    return True


def ours_valid(schema) -> bool:
    try:
        check_metaschema(schema)
    except SchemaError:
        return False
    return True


def places(node, out, path=()):
    """Paths of the object values at keywords that may hold subschemas (in some draft)."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in SUBSCHEMA_KEYS and isinstance(value, dict):
            out.append(path + (key,))
            places(value, out, path + (key,))
        elif key in MAP_KEYS and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, dict):
                    out.append(path + (key, name))
                    places(sub, out, path + (key, name))
        elif key in LIST_KEYS and isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, dict):
                    out.append(path + (key, i))
                    places(sub, out, path + (key, i))


def replaced(node, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, list):
        return [replaced(item, rest, value) if i == head else item for i, item in enumerate(node)]
    return {k: (replaced(v, rest, value) if k == head else v) for k, v in node.items()}


def suite_schemas():
    return [schema for draft in DRAFTS for _, schema, _ in groups(draft)]


def test_memo_matches_jsonschema_on_the_suite_and_mutants():
    pm.clear_caches()
    schemas = suite_schemas()
    for schema in schemas:  # warm the memo (and check the cold verdicts)
        assert ours_valid(schema) == oracle_valid(schema), schema
    rng = random.Random(0)
    mutants = 0
    for schema in schemas:
        assert ours_valid(schema) == oracle_valid(schema), schema
        paths: list = []
        places(schema, paths)
        for path in rng.sample(paths, min(3, len(paths))):
            mutant = replaced(schema, path, rng.choice(BAD))
            assert ours_valid(mutant) == oracle_valid(mutant), (schema, path)
            mutants += 1
    assert mutants > 500


@pytest.mark.parametrize("draft", ["draft4", "draft7", "draft2020-12"])
def test_a_subschema_unchecked_under_an_unknown_keyword_is_not_remembered(draft):
    """Draft-04 ignores "$defs" and draft-2020-12 ignores "additionalItems": an invalid subschema
    there passes, and must still fail where the draft checks it."""
    pm.clear_caches()
    meta = METASCHEMAS[draft]
    bad = {"type": 5, "minLength": 1}
    unknown = {"draft4": "$defs", "draft7": "$defs", "draft2020-12": "additionalItems"}[draft]
    holder = {unknown: {"x": bad}} if unknown == "$defs" else {unknown: bad}
    assert ours_valid({"$schema": meta, **holder}) and oracle_valid({"$schema": meta, **holder})
    with pytest.raises(SchemaError, match="invalid schema"):
        check_metaschema({"$schema": meta, "properties": {"a": bad}})


def test_error_is_jsonschemas_after_the_memo_holds_the_valid_parts():
    pm.clear_caches()
    good = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    check_metaschema(good)
    with pytest.raises(SchemaError, match="invalid schema") as info:
        check_metaschema({**good, "properties": {**good["properties"], "c": {"minLength": -1}}})
    assert info.value.pointer == "#/properties/c/minLength"


@pytest.mark.parametrize("cls", [jsonschema.Draft201909Validator, jsonschema.Draft202012Validator])
def test_inlined_metaschema_judges_as_the_original(cls):
    """The vocabularies copied into one document and made one schema (no allOf) give every suite
    schema and mutant of the draft the verdict of the original metaschema (both ways, not only
    through the fallback)."""
    inlined = _inlined_metaschema(cls)
    text = json.dumps(inlined)
    assert (
        inlined is not cls.META_SCHEMA and '"$dynamicRef": "#meta"' not in text and '"$recursiveRef": "#"' not in text
    )
    assert "allOf" not in inlined
    formats = _metaschema_formats(cls)
    ours, theirs = cls(inlined, format_checker=formats), cls(cls.META_SCHEMA, format_checker=formats)
    draft = "draft2020-12" if cls is jsonschema.Draft202012Validator else "draft2019-09"
    rng = random.Random(1)
    checked = 0
    for _, schema, _ in groups(draft):
        paths: list = []
        places(schema, paths)
        at_root = [{**schema, **rng.choice(BAD)}] if isinstance(schema, dict) else []
        for candidate in [schema, *at_root] + [
            replaced(schema, p, rng.choice(BAD)) for p in rng.sample(paths, min(3, len(paths)))
        ]:
            assert ours.is_valid(candidate) == theirs.is_valid(candidate), candidate
            checked += 1
    assert checked > 300
