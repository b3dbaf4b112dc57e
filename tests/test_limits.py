"""`pushmask.Limits`: every budget is wired to the compile or the matcher it bounds.

For each field, an input that a small value of that one field refuses with an error naming it
(`Limits.<field>`), while the same input compiles (and, for the matcher budgets, runs) under the
defaults: so the budget, not the input, is what stops it.  A field added to Limits without a
case here fails `test_every_limit_has_a_case`."""

from __future__ import annotations

import dataclasses
import gc
import threading

import pytest
from hostile_inputs import _compiler

import pushmask
from pushmask.core.gc_pause import paused_gc


def _deep_parens(matcher) -> None:
    for _ in range(300):
        matcher.accept_string("(")


def _ambiguous_run(matcher) -> None:
    for _ in range(40):
        matcher.accept_string("x")


# field: (small value, entry point, input, error type, what runs the matcher afterwards or None)
CASES = {
    "max_rule_states": (50, "regex", "a{51}", pushmask.LimitExceededError, None),
    "max_total_states": (
        40,
        "ebnf",
        'root ::= a b\na ::= "' + "x" * 30 + '"\nb ::= "' + "y" * 30 + '"',
        pushmask.LimitExceededError,
        None,
    ),
    "max_stack_tops": (
        16,
        "ebnf",
        'root ::= a\na ::= "x" a "y" | "x" a | ""',
        pushmask.LimitExceededError,
        _ambiguous_run,
    ),
    "max_stack_frames": (64, "ebnf", 'root ::= "(" root ")" | "x"', pushmask.LimitExceededError, _deep_parens),
    "max_nesting": (4, "ebnf", "root ::= " + "(" * 5 + '"a"' + ")" * 5, pushmask.GrammarError, None),
    "max_repeat": (10, "ebnf", 'root ::= "a"{0,11}', pushmask.GrammarError, None),
    "max_schema_depth": (
        3,
        "schema",
        {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {}}}},
        pushmask.LimitExceededError,
        None,
    ),
    "max_schema_rules": (
        5,
        "schema",
        {
            "type": "object",
            "properties": {
                f"p{i}": {"type": "object", "properties": {"q": {"type": "array", "items": {"type": "string"}}}}
                for i in range(10)
            },
        },
        pushmask.LimitExceededError,
        None,
    ),
    "max_schema_branches": (
        4,
        "schema",
        {"allOf": [{"anyOf": [{"minimum": i} for i in range(3)]}, {"anyOf": [{"maximum": 10 + i} for i in range(3)]}]},
        pushmask.LimitExceededError,
        None,
    ),
    "max_object_expr": (
        50,
        "schema",
        {
            "type": "object",
            "minProperties": 2,
            "maxProperties": 4,
            "properties": {f"p{i}": {"type": "integer"} for i in range(8)},
            "additionalProperties": False,
        },
        pushmask.LimitExceededError,
        None,
    ),
    "max_dynamic_copies": (
        1,
        "schema",
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://example.com/root",
            "$dynamicAnchor": "node",
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/strict"}, "b": {"$dynamicRef": "#node"}},
            "$defs": {
                "strict": {
                    "$id": "https://example.com/strict",
                    "$dynamicAnchor": "node",
                    "type": "object",
                    "properties": {"c": {"$dynamicRef": "#node"}},
                    "additionalProperties": False,
                }
            },
        },
        pushmask.LimitExceededError,
        None,
    ),
    "max_string_states": (10, "schema", {"type": "string", "pattern": "^[a-z]{30}$"}, pushmask.PushmaskError, None),
    "max_encoded_string_states": (
        10,
        "schema",
        {"type": "string", "pattern": "^[a-z]{5}$"},
        pushmask.PushmaskError,
        None,
    ),
    "compile_time_limit_s": (
        0.0,
        "schema",
        {"type": "object", "properties": {"a": {"type": "string"}}},
        pushmask.LimitExceededError,
        None,
    ),
}


def _run(field: str, value) -> None:
    small, kind, spec, _, drive = CASES[field]
    compiler = _compiler(pushmask.Limits(**{field: value}) if value is not None else None)
    if kind == "ebnf":
        compiled = compiler.compile_grammar(spec)
    elif kind == "regex":
        compiled = compiler.compile_regex(spec)
    else:
        compiled = compiler.compile_json_schema(spec, strict_mode=False)
    if drive is not None:
        drive(pushmask.GrammarMatcher(compiled))


def test_every_limit_has_a_case():
    assert set(CASES) == {f.name for f in dataclasses.fields(pushmask.Limits)}


@pytest.mark.parametrize("field", sorted(CASES))
def test_limit_refuses_past_its_value_and_names_itself(field):
    small, _, _, error, _ = CASES[field]
    _run(field, None)  # the defaults take it
    with pytest.raises(error, match=rf"\b{field}\b"):
        _run(field, small)


def test_limits_are_checked():
    with pytest.raises(ValueError, match="max_rule_states must be a positive int"):
        pushmask.Limits(max_rule_states=0)
    with pytest.raises(ValueError, match="max_nesting must be a positive int"):
        pushmask.Limits(max_nesting=True)
    with pytest.raises(ValueError, match="compile_time_limit_s"):
        pushmask.Limits(compile_time_limit_s=-1)
    info = _compiler().tokenizer_info
    with pytest.raises(pushmask.ArgumentTypeError, match="limits must be Limits"):
        pushmask.GrammarCompiler(info, limits={"max_rule_states": 10})
    assert pushmask.GrammarCompiler(info, limits=pushmask.Limits(max_nesting=7)).limits.max_nesting == 7


def test_paused_gc_nests_and_restores_across_threads():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()

    inside, release = threading.Barrier(2), threading.Event()

    def other_thread():
        with paused_gc():
            inside.wait()
            release.wait()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with paused_gc():
        inside.wait()
    assert not gc.isenabled()  # the other thread's pause outlives this one
    release.set()
    thread.join()
    assert gc.isenabled()

    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()
