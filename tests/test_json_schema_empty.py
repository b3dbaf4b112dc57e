"""Unsatisfiable JSON Schemas: SchemaError by default, the empty language with
unsatisfiable="empty" (validation use), and unsatisfiable subschemas that drop out of a
satisfiable schema.

Oracles: `jsonschema` says every probe instance is invalid for the unsatisfiable schemas (and
decides validity for the others); the empty language is checked on the real matcher through
every entry point (masks, batch fill, accept_token on every token, EOS, jump-forward).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import accepts_text, accepts_token_ids  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.core.errors import GrammarError, SchemaError, UnsupportedSchemaError  # noqa: E402
from pushmask.grammar.ir import NOTHING, Grammar  # noqa: E402
from pushmask.grammar.json_options import JsonOptions  # noqa: E402
from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402
from pushmask.grammar.passes import normalize  # noqa: E402

PROBES = [None, True, False, 0, 1, -2.5, "", "a", "abc", [], [1], [1, "a"], {}, {"a": 1}, {"a": "x", "b": None}]

UNSATISFIABLE = [
    False,
    {"not": {}},
    {"allOf": [{"type": "string"}, {"type": "integer"}]},
    {"anyOf": [False, {"not": True}]},
    {"oneOf": [{"type": "integer"}, {"type": "number"}], "type": "integer"},
    {"enum": [1, 2], "type": "string"},
    {"const": "a", "minLength": 2},
    {"type": "string", "minLength": 3, "maxLength": 2},
    {"type": "integer", "minimum": 5, "maximum": 4},
    {"type": "object", "required": ["a"], "properties": {"a": False}},
    {"type": "array", "minItems": 1, "items": False},
    {"$ref": "#/$defs/never", "$defs": {"never": False}},
    {
        "$defs": {"loop": {"type": "object", "required": ["next"], "properties": {"next": {"$ref": "#/$defs/loop"}}}},
        "$ref": "#/$defs/loop",
    },
]


@pytest.mark.parametrize("schema", UNSATISFIABLE, ids=lambda s: json.dumps(s)[:50])
def test_unsatisfiable_schema_is_an_error_by_default_and_the_empty_language_on_request(schema, llama3_compiler):
    validator = jsonschema.Draft202012Validator(schema)
    assert not any(validator.is_valid(v) for v in PROBES), "test bug: the schema accepts a probe"
    with pytest.raises(SchemaError) as info:
        json_schema_to_grammar(schema)
    assert not isinstance(info.value, UnsupportedSchemaError)
    assert "unsatisfiable" in str(info.value)

    assert json_schema_to_grammar(schema, unsatisfiable="empty").rules == {"root": NOTHING}
    compiled = llama3_compiler.compile_json_schema(schema, unsatisfiable="empty")
    for value in PROBES:
        for text in (json.dumps(value), json.dumps(value, separators=(",", ":"))):
            assert not accepts_text(compiled, text), text


def test_empty_language_matcher_allows_nothing(llama3_compiler, llama3_tokenizer):
    compiled = llama3_compiler.compile_json_schema({"not": {}}, unsatisfiable="empty")
    vocab = compiled.tokenizer_info.vocab_size
    matcher = pm.GrammarMatcher(compiled)
    bitmask = pm.allocate_token_bitmask(2, vocab)
    matcher.fill_next_token_bitmask(bitmask, 1)
    assert not bitmask[1].any(), "a token (or EOS) is allowed in the empty language"
    assert (bitmask[0] != 0).any()  # the other row is untouched
    assert not matcher.can_end() and not matcher.is_terminated()
    assert matcher.find_jump_forward_string() == ""
    # brute force: no token of the vocabulary is accepted, stop tokens included
    assert not any(matcher.check_token(t) for t in range(vocab))
    for t in [*compiled.tokenizer_info.stop_token_ids, *llama3_tokenizer.encode('{"a": 1}', add_special_tokens=False)]:
        assert not matcher.accept_token(t)
    assert not matcher.is_terminated() and not matcher.can_end()
    matcher.rollback(0)
    matcher.reset()
    # batch fill over several matchers: every row empty
    batch = pm.allocate_token_bitmask(3, vocab)
    pm.batch_fill_next_token_bitmask([pm.GrammarMatcher(compiled) for _ in range(3)], batch)
    assert not np.asarray(batch).any()
    assert not accepts_text(compiled, "")


def test_unsatisfiable_option_is_checked():
    with pytest.raises(ValueError, match="unsatisfiable"):
        json_schema_to_grammar({}, unsatisfiable="ignore")


def test_empty_root_needs_the_flag():
    """Only a grammar marked allow_empty may derive nothing; other grammars still get GrammarError."""
    with pytest.raises(GrammarError):
        normalize(Grammar({"root": NOTHING}, "root"))
    assert normalize(Grammar({"root": NOTHING}, "root", allow_empty=True)).rules == {"root": NOTHING}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": False, "b": {"type": "integer"}}},
        {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"type": "null"}]}}},
        {"type": "object", "additionalProperties": {"not": {}}, "properties": {"a": True}},
        {"anyOf": [{"type": "string", "minLength": 3, "maxLength": 2}, {"type": "integer"}]},
        {"anyOf": [False, {"enum": [1, 2], "type": "string"}, {"const": "a"}]},
        {"oneOf": [False, {"type": "integer"}, {"not": {}}]},
        {"type": "array", "prefixItems": [{"type": "integer"}, False]},
        {"type": "array", "items": {"type": "integer", "minimum": 3, "maximum": 2}},
        {"$defs": {"never": False}, "type": "object", "properties": {"x": {"$ref": "#/$defs/never"}}},
    ],
    ids=lambda s: json.dumps(s)[:50],
)
def test_unsatisfiable_subschemas_drop_out(schema, llama3_compiler, llama3_tokenizer):
    """A subschema no instance satisfies removes its branch/member/item; the rest compiles in
    both modes, to the same grammar, and agrees with jsonschema."""
    grammar = json_schema_to_grammar(schema, property_order="any", additional_properties_default=True)
    assert grammar == json_schema_to_grammar(schema, JsonOptions.validation())
    compiled = llama3_compiler.compile_ir(grammar)
    validator = jsonschema.Draft202012Validator(schema)
    probes = PROBES + [{"a": None}, {"b": 3}, {"a": 1, "b": 2}, {"x": 1}, [1, 2], [4], [1, 2, 3], "abcd", 7]
    assert any(validator.is_valid(v) for v in probes)
    for value in probes:
        compact = json.dumps(value, separators=(",", ":"))
        by_tokens = accepts_token_ids(compiled, llama3_tokenizer.encode(compact, add_special_tokens=False))
        assert by_tokens == validator.is_valid(value) == accepts_text(compiled, json.dumps(value)), compact
