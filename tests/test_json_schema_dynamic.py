"""$dynamicRef / $recursiveRef with several dynamic anchors: references specialised per scope.

Oracle: `jsonschema` on pools of small instances, fed to the real matcher token by token; plus
structural checks that one reference site reached through two scopes gets two expansions and
that recursion through one scope reuses its copy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import accepts_text, accepts_token_ids  # noqa: E402

from pushmask.grammar.json_options import JsonOptions  # noqa: E402
from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402
from pushmask.grammar.json_schema.convert import _Compiler  # noqa: E402

D2020 = "https://json-schema.org/draft/2020-12/schema"

# A generic list whose item type the referring schema chooses through the dynamic scope.
GENERIC_LISTS = {
    "$schema": D2020,
    "$id": "https://example.test/main",
    "type": "object",
    "properties": {
        "numbers": {"$ref": "numberList"},
        "strings": {"$ref": "stringList"},
        "anything": {"$ref": "genericList"},
    },
    "$defs": {
        "genericList": {
            "$id": "genericList",
            "type": "array",
            "items": {"$dynamicRef": "#itemType"},
            "$defs": {"default": {"$dynamicAnchor": "itemType"}},
        },
        "numberList": {
            "$id": "numberList",
            "$ref": "genericList",
            "$defs": {"itemType": {"$dynamicAnchor": "itemType", "type": "number"}},
        },
        "stringList": {
            "$id": "stringList",
            "$ref": "genericList",
            "$defs": {"itemType": {"$dynamicAnchor": "itemType", "type": "string", "maxLength": 3}},
        },
    },
}

# A recursive tree and a strict extension of it that forbids unknown members at every level.
TREE = {
    "$schema": D2020,
    "$id": "https://example.test/strict-tree",
    "$dynamicAnchor": "node",
    "$ref": "tree",
    "unevaluatedProperties": False,
    "$defs": {
        "tree": {
            "$id": "tree",
            "$dynamicAnchor": "node",
            "type": "object",
            "properties": {
                "data": {"type": "integer"},
                "children": {"type": "array", "items": {"$dynamicRef": "#node"}},
            },
        }
    },
}

# The outermost resource with the anchor wins, and a scope left behind is not used.
OUTERMOST = {
    "$schema": D2020,
    "$id": "https://example.test/outer",
    "type": "object",
    "properties": {"a": {"$ref": "middle"}, "b": {"$ref": "inner"}},
    "$defs": {
        "middle": {"$id": "middle", "$ref": "inner", "$defs": {"t": {"$dynamicAnchor": "t", "type": "boolean"}}},
        "inner": {
            "$id": "inner",
            "type": "array",
            "items": {"$dynamicRef": "#t"},
            "$defs": {"t": {"$dynamicAnchor": "t", "type": "null"}},
        },
    },
}

# draft 2019-09: $recursiveRef follows the run of $recursiveAnchor resources.
RECURSIVE = {
    "$schema": "https://json-schema.org/draft/2019-09/schema",
    "$id": "https://example.test/rec-root",
    "$recursiveAnchor": True,
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "$ref": "rec-base",
    "unevaluatedProperties": False,
    "$defs": {
        "base": {
            "$id": "rec-base",
            "$recursiveAnchor": True,
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$recursiveRef": "#"}}},
        }
    },
}

POOLS = {
    "GENERIC_LISTS": [
        {},
        {"numbers": [1, 2.5]},
        {"numbers": ["a"]},
        {"strings": ["ab", "xyz"]},
        {"strings": ["long"]},
        {"strings": [1]},
        {"anything": [1, "a", None]},
        {"numbers": [], "strings": []},
        {"numbers": [1], "strings": ["a"], "anything": [{}]},
        [],
    ],
    "TREE": [
        {},
        {"data": 1},
        {"data": 1, "x": 2},
        {"children": [{"data": 2}]},
        {"children": [{"daat": 2}]},
        {"children": [{"children": [{"data": 3}]}]},
        {"children": [{"children": [{"bad": 3}]}]},
        {"children": [1]},
        1,
    ],
    "OUTERMOST": [
        {},
        {"a": [True]},
        {"a": [None]},
        {"b": [None]},
        {"b": [True]},
        {"a": [True, False], "b": [None]},
        {"a": [True], "b": [True]},
    ],
    "RECURSIVE": [
        {},
        {"name": "x"},
        {"kids": [{"name": "y"}]},
        {"kids": [{"name": 1}]},
        {"kids": [{"extra": 1}]},
        {"kids": [{"kids": [{"name": "z"}]}]},
        {"kids": [{"kids": [{"other": "z"}]}]},
        {"extra": 1},
    ],
}
SCHEMAS = {"GENERIC_LISTS": GENERIC_LISTS, "TREE": TREE, "OUTERMOST": OUTERMOST, "RECURSIVE": RECURSIVE}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_dynamic_references_agree_with_jsonschema(name, llama3_compiler, llama3_tokenizer):
    schema = SCHEMAS[name]
    compiled = llama3_compiler.compile_ir(json_schema_to_grammar(schema, JsonOptions.validation()))
    validator = jsonschema.validators.validator_for(schema)(schema)
    verdicts = []
    for value in POOLS[name]:
        compact = json.dumps(value, separators=(",", ":"))
        got = accepts_token_ids(compiled, llama3_tokenizer.encode(compact, add_special_tokens=False))
        assert got == accepts_text(compiled, json.dumps(value))
        verdicts.append(validator.is_valid(value))
        assert got == verdicts[-1], (name, compact, verdicts[-1])
    assert any(verdicts) and not all(verdicts)


def specialised_copies(schema) -> dict:
    """The scope-specialised copies the compiler registers, by URI."""
    comp = _Compiler(schema, JsonOptions.validation(), dynamic_scopes=True)
    out, todo = {}, [comp.ctx.root]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            uri = node.get("$ref")
            if isinstance(uri, str) and uri not in out:
                out[uri] = comp.ctx.lookup(uri, "#")
                todo.append(out[uri])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return out


def test_one_site_two_scopes_two_expansions_and_recursion_reuses_its_copy():
    copies = specialised_copies(GENERIC_LISTS)
    item_types = sorted(json.dumps(c.get("items")) for c in copies.values() if c.get("type") == "array")
    # genericList's items, once per scope: numbers, strings, and the default (any value)
    targets = [json.dumps(copies[json.loads(t)["$ref"]], sort_keys=True) for t in item_types]
    assert sorted(targets) == sorted(
        [
            json.dumps({}),
            json.dumps({"type": "number"}, sort_keys=True),
            json.dumps({"maxLength": 3, "type": "string"}, sort_keys=True),
        ]
    )
    tree = specialised_copies(TREE)
    assert len(tree) <= 3, tree  # the tree copy refers back to itself: no unbounded unrolling
