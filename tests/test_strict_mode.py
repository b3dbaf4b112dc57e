"""Strict mode (the default, additional_properties_default="declared") only narrows: whatever it
accepts validates against the schema as the JSON Schema spec reads it (jsonschema is the oracle).

- closing in negative positions (not, if, oneOf's "the others fail", contains counted by
  maxContains, $refs from there) would accept invalid instances: each case below is one;
- strict mode never turns a satisfiable schema into an error;
- a seeded sample of MaskBench-dev schemas and Test Suite groups, compiled with the generation
  defaults: no invalid test instance is accepted, and random mask-guided outputs validate.
  benchmarks/strict_soundness.py runs the same over the whole sets.
"""

from __future__ import annotations

import json
import random
import sys
import warnings
from pathlib import Path

import jsonschema
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import (  # noqa: E402
    DATA,
    DRAFTS,
    accepts_text,
    compile_with_timeout,
    grammar_compiler,
    groups,
    json_prefix_completes,
    mask_walk,
    require_shared,
    retrieve,
    short_structural_tokens,
)

from pushmask.core.errors import UnsupportedSchemaError  # noqa: E402
from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402

MASKBENCH = DATA / "maskbench-dev"


def compile_default(schema, **options):
    """compile_json_schema's defaults (strict mode, definition order, flexible whitespace)."""
    return grammar_compiler("llama3").compile_ir(json_schema_to_grammar(schema, retrieve=retrieve, **options))


def suite_validator(schema):
    """jsonschema's validator for the schema's draft, with the Test Suite's remote documents."""
    from referencing import Registry, Resource
    from referencing.jsonschema import specification_with

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    draft = specification_with(cls.META_SCHEMA["$schema"])
    registry = Registry(retrieve=lambda uri: Resource.from_contents(retrieve(uri), default_specification=draft))
    return cls(schema, registry=registry)


# (schema, instances jsonschema rejects, instances it accepts that strict mode keeps)
NEGATIVE_POSITIONS = {
    "if-condition": (
        {
            "type": "object",
            "additionalProperties": True,
            "properties": {"kind": {"enum": ["static", "dynamic"]}},
            "allOf": [
                {
                    "if": {"properties": {"kind": {"const": "static"}}},
                    "then": {"properties": {"routing": {"enum": ["react", "none"]}}},
                }
            ],
        },
        [{"kind": "static", "extra": 1, "routing": "bogus"}],
        [{"kind": "dynamic", "extra": 1}],
    ),
    "not": (
        {
            "type": "object",
            "additionalProperties": True,
            "properties": {"p": {}},
            "not": {"properties": {"a": {"const": 1}}},
        },
        [{"a": 1, "b": 2}, {"a": 1}],
        [{"a": 2, "b": 2}],
    ),
    "contains-maxContains": (
        {"type": "array", "contains": {"properties": {"a": {"const": 1}}, "required": ["a"]}, "maxContains": 1},
        [[{"a": 1, "b": 2}, {"a": 1}]],
        [[{"a": 1}, {"a": 2}]],
    ),
    "ref-from-not": (  # one $def in both polarities: closed under p, the spec's inside `not`
        {
            "$defs": {"A": {"properties": {"a": {"const": 1}}}},
            "type": "object",
            "additionalProperties": True,
            "properties": {"p": {"$ref": "#/$defs/A"}},
            "not": {"$ref": "#/$defs/A"},
        },
        [{"a": 1, "b": 2, "p": {"a": 1}}],
        [{"a": 2, "p": {"a": 1}}],
    ),
    "oneOf-others-fail": (  # B' alone matches closed, but A matches too as the spec reads it
        {
            "oneOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "required": ["b"], "properties": {"a": {}, "b": {}}},
            ]
        },
        [{"a": 1, "b": 2}],
        [{"b": 2}, {"a": 1}],
    ),
    "oneOf-issue": (  # every closed branch matches both spec branches: the spec language, warned
        {
            "oneOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}},
                {"type": "object", "properties": {"b": {"type": "integer"}}},
            ]
        },
        [{"a": 1}, {}],
        [{"a": "x"}],
    ),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE_POSITIONS))
def test_negative_positions_keep_the_spec_meaning(case):
    schema, invalid, valid = NEGATIVE_POSITIONS[case]
    validator = jsonschema.Draft202012Validator(schema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = compile_default(schema, property_order="any")
    for value in invalid:
        assert not validator.is_valid(value)
        assert not accepts_text(compiled, json.dumps(value)), f"{case}: strict mode accepted invalid {value}"
    for value in valid:
        assert validator.is_valid(value)
        assert accepts_text(compiled, json.dumps(value)), f"{case}: {value} should stay accepted"


def test_positive_positions_stay_closed():
    """The $def under `p` is closed (strict), though `not` reaches it with its spec meaning."""
    schema, _, _ = NEGATIVE_POSITIONS["ref-from-not"]
    compiled = compile_default(schema, property_order="any")
    assert not accepts_text(compiled, json.dumps({"a": 2, "p": {"a": 1, "x": 0}}))
    oneof, _, _ = NEGATIVE_POSITIONS["oneOf-others-fail"]
    compiled = compile_default(oneof, property_order="any")
    assert not accepts_text(compiled, json.dumps({"a": 1, "c": 3}))  # valid by the spec, closed out


@pytest.mark.parametrize(
    "draft,file,description",
    [
        ("draft2020-12", "unevaluatedItems.json", "unevaluatedItems with if/then/else"),
        ("draft2020-12", "unevaluatedProperties.json", "dynamic evalation inside nested refs"),
    ],
)
def test_suite_groups_strict_mode_accepted_wrongly(draft, file, description):
    path = require_shared(DATA / "json-schema-test-suite" / "tests" / draft / file)
    group = next(g for g in json.loads(path.read_text()) if g["description"] == description)
    validator = suite_validator(group["schema"])
    try:
        compiled = compile_default(group["schema"], property_order="any")
    except UnsupportedSchemaError:  # sound; only as long as the spec language does not compile either
        with pytest.raises(UnsupportedSchemaError):
            compile_default(group["schema"], property_order="any", additional_properties_default=True)
        return
    for test in group["tests"]:
        assert validator.is_valid(test["data"]) == test["valid"]
        if not test["valid"]:
            assert not accepts_text(compiled, json.dumps(test["data"])), test["description"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "schema,valid",
    [
        ({"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2}, {"a": 1, "b": 2}),
        ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b"]}, {"b": 1}),
        ({"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 2}, [1, 2]),
    ],
)
def test_strict_mode_keeps_satisfiable_schemas_compiling(schema, valid):
    with pytest.warns(UserWarning, match="strict mode leaves the object schema"):
        compiled = compile_default(schema)
    assert accepts_text(compiled, json.dumps(valid))
    validator = jsonschema.Draft202012Validator(schema)
    rng = np.random.default_rng(7)
    with pytest.warns(UserWarning, match="strict mode leaves the object schema"):
        compiled = compile_default(schema, whitespace="compact")  # fewer states for the walks to mask
    short = short_structural_tokens(compiled.tokenizer_info)
    outputs = [mask_walk(compiled, rng, short, prefix_viable=json_prefix_completes) for _ in range(4)]
    finished = [out for out in outputs if out is not None]
    assert finished
    for out in finished:
        assert validator.is_valid(json.loads(out)), out


def test_the_spec_language_when_strict_mode_leaves_nothing():
    schema, _, _ = NEGATIVE_POSITIONS["oneOf-issue"]
    with pytest.warns(UserWarning, match="without closing them"):
        compile_default(schema)


# ---------------------------------------------------------------------------------------------
# The property test: a seeded sample of both corpora under the generation defaults.

SAMPLE_SEED = 27
DEV_SAMPLE = 5
DEV_MAX_BYTES = 3000
SUITE_SAMPLE = 24
WALKS = 3
COMPILE_SECONDS = 20


def dev_cases(count: int | None, seed: int = SAMPLE_SEED, max_bytes: int | None = None):
    """(name, schema, tests) for `count` seeded MaskBench-dev files (None: all), of at most
    `max_bytes` each if given (small schemas keep the walks' mask work short)."""
    files = sorted(
        p
        for p in require_shared(MASKBENCH).iterdir()
        if p.is_file() and (max_bytes is None or p.stat().st_size <= max_bytes)
    )
    if count is not None:
        files = random.Random(seed).sample(files, count)
    for path in files:
        entry = json.loads(path.read_text())
        yield path.name, entry["schema"], entry.get("tests", [])


def suite_cases(count: int | None, seed: int = SAMPLE_SEED):
    """(name, schema, tests) for `count` seeded Test Suite groups of every draft (None: all)."""
    cases = [(f"{draft}/{gid}", schema, tests) for draft in DRAFTS for gid, schema, tests in groups(draft)]
    if count is not None:
        cases = random.Random(seed).sample(cases, count)
    yield from cases


def check_case(name, schema, tests, walks: int, rng, counts: dict) -> list[str]:
    """Compile with the generation defaults; the invalid test instances accepted and the walk
    outputs jsonschema rejects (as messages), counting into `counts`."""
    compiled = compile_with_timeout(lambda: compile_default(schema), COMPILE_SECONDS)
    counts["schemas"] += 1
    if isinstance(compiled, str):
        counts[compiled] += 1
        return []
    counts["compiled"] += 1
    validator = suite_validator(schema)
    # jsonschema is the oracle where it agrees with the corpus's own verdicts (it does not on a
    # few Test Suite groups, e.g. 2019-09 unevaluatedProperties next to a non-boolean
    # additionalProperties): elsewhere the walks still run, but their outputs are not judged
    trusted = all(validator.is_valid(test["data"]) == test["valid"] for test in tests)
    counts["oracle_disagrees"] += not trusted
    bad = []
    for test in tests:
        if not test["valid"] and accepts_text(compiled, json.dumps(test["data"], ensure_ascii=False)):
            bad.append(f"{name}: accepted the invalid test instance {test['description']!r}")
    counts["invalid_tests"] += sum(not test["valid"] for test in tests)
    short = short_structural_tokens(compiled.tokenizer_info)
    for _ in range(walks):
        counts["walks"] += 1
        out = mask_walk(compiled, rng, short, prefix_viable=json_prefix_completes)
        if out is None:
            continue
        counts["outputs"] += 1
        if trusted and not validator.is_valid(json.loads(out)):
            bad.append(f"{name}: generated {out[:200]!r}, which the schema rejects")
    return bad


def new_counts() -> dict:
    return {
        "schemas": 0,
        "compiled": 0,
        "unsupported": 0,
        "timeout": 0,
        "oracle_disagrees": 0,
        "invalid_tests": 0,
        "walks": 0,
        "outputs": 0,
    }


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["maskbench-dev", "test-suite"])
def test_generation_defaults_only_narrow(corpus):
    cases = dev_cases(DEV_SAMPLE, max_bytes=DEV_MAX_BYTES) if corpus == "maskbench-dev" else suite_cases(SUITE_SAMPLE)
    counts, bad = new_counts(), []
    rng = np.random.default_rng(SAMPLE_SEED)
    for case in cases:
        bad += check_case(*case, WALKS, rng, counts)
    print(corpus, counts)
    assert not bad, "\n".join(bad)
    assert counts["compiled"] >= counts["schemas"] // 2, counts  # the sample does test something
    assert counts["outputs"] >= counts["compiled"], counts  # most walks finish


def test_the_closing_decision_only_narrows():
    """closing.closing_keywords (a pure function of one schema object): what it adds to a Test
    Suite schema only removes instances, by jsonschema's verdict on the group's instances."""
    from pushmask.grammar.json_schema.closing import closing_keywords

    closed = 0
    for _, schema, tests in groups("draft2020-12"):
        if not isinstance(schema, dict):
            continue
        for only_declared in (True, False):
            added, _ = closing_keywords(schema, only_declared)
            if not added:
                continue
            spec, narrowed = (
                jsonschema.Draft202012Validator(schema),
                jsonschema.Draft202012Validator({**schema, **added}),
            )
            for test in tests:
                try:
                    if narrowed.is_valid(test["data"]):
                        assert spec.is_valid(test["data"]), (schema, added, test)
                except Exception:  # noqa: BLE001 -- a remote $ref or a pattern `re` cannot read: no verdict
                    break
                closed += 1
    assert closed > 50


def test_polarity_keeps_negated_and_counted_positions_spec():
    """closing.polarity: the subschemas whose closing could accept more (not, if, contains next
    to maxContains) keep the spec meaning; oneOf gets both; data is left alone."""
    from pushmask.grammar.json_schema.closing import polarity

    node = {"not": {}, "if": {}, "contains": {}, "maxContains": 2, "oneOf": [{}], "enum": [{}], "properties": {}}
    assert [polarity(node, k) for k in node] == [
        "negative",
        "negative",
        "negative",
        "positive",
        "one_of",
        "value",
        "map",
    ]
    assert polarity({"contains": {}}, "contains") == "positive"  # fewer matches still reach minContains
