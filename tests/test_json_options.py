"""JsonOptions (grammar/json_options.py): one frozen object for every JSON Schema compile option.

Checked: bad options are clear errors; XGrammar's keyword names build the same object as
pushmask's; the defaults are one language everywhere; and the same schema with the same options
gives the same automaton (its packed arrays, compared byte for byte) through every entry point
of the main install: GrammarCompiler.compile_json_schema, json_schema_to_grammar + compile_ir,
GrammarCompiler.compile("json_schema", ...) and `pushmask.generate`'s compile path.  (The vLLM
backend's path is compared in tests/vllm, which needs vLLM.)
"""

from __future__ import annotations

import hashlib

import pytest

import pushmask as pm
from pushmask import JsonOptions
from pushmask.core.errors import ArgumentTypeError, SchemaError
from pushmask.grammar.json_schema import json_schema_to_grammar
from pushmask.integrations.generate import compile_constraint

SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}},
        "required": ["a"],
    },
    {"type": "object", "properties": {"x": {"enum": ["p", "q"]}}, "additionalProperties": {"type": "number"}},
    {"type": "array", "prefixItems": [{"type": "boolean"}], "maxItems": 3},
    {"type": "integer", "multipleOf": 1000, "minimum": -5000},
]

OPTIONS = [
    JsonOptions(),
    JsonOptions.xgrammar(),
    JsonOptions.generation(),
    JsonOptions.validation(),
    JsonOptions.generation(indent=2, property_order="any"),
    JsonOptions(whitespace="compact", max_whitespace=2),
]


def digest(compiled) -> str:
    return hashlib.sha1(compiled.pda.blob.tobytes()).hexdigest()


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="whitespace must be one of"):
        JsonOptions(whitespace="pretty")
    with pytest.raises(ArgumentTypeError, match="max_whitespace"):
        JsonOptions(max_whitespace="2")
    with pytest.raises(ValueError, match="separators"):
        JsonOptions(separators=(";", ":"))
    with pytest.raises(ValueError, match="additional_properties_default"):
        JsonOptions(additional_properties_default="closed")
    with pytest.raises(ArgumentTypeError, match="lenient"):
        JsonOptions(lenient=1)
    with pytest.raises(TypeError, match="unknown JSON option 'strict'"):
        JsonOptions.generation(strict=False)
    with pytest.raises(TypeError, match="unknown JSON option 'ident'"):
        json_schema_to_grammar({}, ident=2)
    with pytest.raises(ValueError, match="strict_mode=False contradicts"):
        JsonOptions.from_xgrammar(strict_mode=False, additional_properties_default="declared")
    with pytest.raises(ArgumentTypeError, match="must be a pushmask.JsonOptions"):
        json_schema_to_grammar({}, {"whitespace"})


def test_frozen_hashable_and_equal_by_value():
    a, b = JsonOptions.generation(), JsonOptions(separators=[", ", ": "])
    assert a == b and hash(a) == hash(b) and len({a, b, JsonOptions()}) == 2
    with pytest.raises(AttributeError):
        a.indent = 2  # type: ignore[misc]
    assert a.replace(indent=2).indent == 2 and a.indent is None


def test_xgrammar_names_build_the_same_object():
    assert JsonOptions.from_xgrammar() == JsonOptions()
    assert JsonOptions.from_xgrammar(strict_mode=True) == JsonOptions()
    assert JsonOptions.from_xgrammar(strict_mode=False) == JsonOptions(additional_properties_default=True)
    assert JsonOptions.from_xgrammar(any_order=True, max_whitespace_cnt=3) == JsonOptions(
        property_order="any", max_whitespace=3
    )
    assert JsonOptions.from_xgrammar(any_whitespace=False) == JsonOptions(separators=(", ", ": "))
    assert JsonOptions.from_xgrammar(any_whitespace=False, indent=2) == JsonOptions(indent=2, separators=(",", ": "))
    assert JsonOptions.from_xgrammar(any_whitespace=True, indent=2) == JsonOptions()
    assert JsonOptions.validation() == JsonOptions.from_xgrammar(
        strict_mode=False, any_order=True, unsatisfiable="empty"
    )


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_entry_point_gives_the_same_automaton(schema, llama3_tokenizer):
    compiler = pm.GrammarCompiler(pm.TokenizerInfo.from_huggingface(llama3_tokenizer))
    for options in OPTIONS:
        want = digest(compiler.compile_json_schema(schema, options))
        assert digest(compiler.compile_ir(json_schema_to_grammar(schema, options))) == want, options
        assert digest(compiler.compile("json_schema", schema, json_options=options)) == want, options
        assert digest(compile_constraint(llama3_tokenizer, schema=schema, json_options=options)) == want, options
    # the defaults are one language: the library's, the IR front end's, and XGrammar's names
    want = digest(compiler.compile_json_schema(schema))
    assert digest(compiler.compile_ir(json_schema_to_grammar(schema))) == want
    assert digest(compiler.compile_json_schema(schema, strict_mode=True)) == want
    assert digest(compile_constraint(llama3_tokenizer, schema=schema)) == digest(
        compiler.compile_json_schema(schema, JsonOptions.generation())
    )


def test_strict_is_the_default_everywhere():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    closed = json_schema_to_grammar(schema)
    assert closed == json_schema_to_grammar(schema, JsonOptions(additional_properties_default="declared"))
    assert closed != json_schema_to_grammar(
        schema, JsonOptions.validation(property_order="definition", unsatisfiable="error")
    )
    with pytest.raises(SchemaError):  # unsatisfiable="error" by default, "empty" for validation
        json_schema_to_grammar(False)
    json_schema_to_grammar(False, JsonOptions.validation())


def test_cli_generate_strict_flag(tmp_path):
    """`pushmask generate --no-strict` compiles the schema's own language; the default is strict."""
    import argparse
    import json

    from pushmask.integrations import model_cli

    schema_file = tmp_path / "s.json"
    schema_file.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}}))
    parser = argparse.ArgumentParser()
    model_cli.add_arguments(parser)
    got = {}
    for flags in ([], ["--no-strict"], ["--strict", "--indent", "2"], ["--no-strict", "--whitespace", "compact"]):
        args = parser.parse_args(["--schema", str(schema_file), *flags, "prompt"])
        got[tuple(flags)] = model_cli._read_constraint(args)[0]["json_options"]
    assert got[()] == JsonOptions.generation()
    assert got[("--no-strict",)] == JsonOptions.generation(additional_properties_default=True)
    assert got[("--strict", "--indent", "2")] == JsonOptions.from_xgrammar(indent=2)
    assert got[("--no-strict", "--whitespace", "compact")] == JsonOptions(
        whitespace="compact", additional_properties_default=True
    )
    assert "--no-strict" in parser.format_help()
