"""The JSON Schema budgets of `Limits` are the ones the compile obeys.

Oracle: each schema compiles under the default limits (so the error below comes from the budget
and not from the schema), and raises the documented error naming `Limits.<field>` when that one
field is set below what the schema needs; `max_depth` still maps onto `max_schema_depth`.
"""

from __future__ import annotations

import pytest

import pushmask as pm
from pushmask.grammar.errors import BudgetExceededError, UnsupportedSchemaError
from pushmask.grammar.json_schema import json_schema_to_grammar
from pushmask.grammar.limits import Limits

D2020 = "https://json-schema.org/draft/2020-12/schema"

MANY_OBJECTS = {"type": "object", "properties": {
    f"p{i}": {"type": "object", "properties": {"x": {"const": i}, "y": {"type": "array"}}} for i in range(30)}}
MULTIPLIED = {"allOf": [{"anyOf": [{"minimum": i} for i in range(4)]},
                        {"anyOf": [{"maximum": 10 + i} for i in range(4)]}]}
OPTIONAL_COUNTED = {"type": "object", "properties": {f"o{i}": {"type": "integer"} for i in range(12)},
                    "minProperties": 3, "maxProperties": 8, "additionalProperties": False}
# a box whose content type the referring schema picks through the dynamic scope
BOXES = {
    "$schema": D2020, "$id": "https://example.test/pair", "type": "array",
    "prefixItems": [{"$ref": "int-box"}, {"$ref": "str-box"}],
    "$defs": {
        "box": {"$id": "box", "type": "object", "properties": {"v": {"$dynamicRef": "#content"}},
                "$defs": {"any": {"$dynamicAnchor": "content"}}},
        "int-box": {"$id": "int-box", "$ref": "box", "$defs": {"c": {"$dynamicAnchor": "content", "type": "integer"}}},
        "str-box": {"$id": "str-box", "$ref": "box", "$defs": {"c": {"$dynamicAnchor": "content", "type": "string"}}},
    },
}
# the 9th character from the end is an "a": 2^9 states in any deterministic automaton
LATE_A = {"type": "string", "pattern": "a[ab]{8}$", "maxLength": 20}


@pytest.mark.parametrize("schema, field, small", [
    (MANY_OBJECTS, "max_schema_rules", 10),
    (MULTIPLIED, "max_schema_branches", 8),
    (OPTIONAL_COUNTED, "max_object_expr", 50),
    (BOXES, "max_dynamic_copies", 1),
])
def test_schema_budget_fires_with_its_name(schema, field, small):
    json_schema_to_grammar(schema)
    with pytest.raises(BudgetExceededError, match=rf"Limits\.{field}"):
        json_schema_to_grammar(schema, limits=Limits(**{field: small}))


def test_string_state_budget_reaches_the_automaton_builders():
    json_schema_to_grammar(LATE_A)
    with pytest.raises(UnsupportedSchemaError):
        json_schema_to_grammar(LATE_A, limits=Limits(max_string_states=300))


def test_max_depth_maps_onto_max_schema_depth():
    deep = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "array"}}}}}
    json_schema_to_grammar(deep)
    for options in ({"max_depth": 3}, {"limits": Limits(max_schema_depth=3)}):
        with pytest.raises(BudgetExceededError, match="max_schema_depth"):
            json_schema_to_grammar(deep, **options)


def test_compiler_passes_its_limits(smollm2_compiler):
    strict = pm.GrammarCompiler(smollm2_compiler.tokenizer_info, limits=Limits(max_schema_rules=10),
                                cache_enabled=False)
    with pytest.raises(BudgetExceededError, match=r"Limits\.max_schema_rules"):
        strict.compile_json_schema(MANY_OBJECTS)
