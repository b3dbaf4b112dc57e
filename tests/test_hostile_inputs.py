"""Hostile and huge inputs (tests/hostile_inputs.py lists them): each compiles and takes /
refuses its sample texts, or raises the documented pushmask error it names, without hanging or
blowing up.  A case's `limit` is its speed target (measured by `python tests/hostile_inputs.py`,
README "Limits, budgets and errors"); the test asserts no time: a case with no result after
GUARD_FACTOR times its limit plus SLACK seconds of wall time counts as hung.  The cases run in one
worker subprocess, watched case by case: a case that hangs is killed (and reported) and the
worker restarts with the cases after it."""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import jsonschema
import pytest
from hostile_inputs import CASES, _compiler
from rule_dfa_reference import construct_rule_dfa_python
from support import accepts_text as accepts

import pushmask
from pushmask.automata.dfa import _construct_rule_dfa
from pushmask.grammar.ir import Alt, CharFsm, alt, lit, ref, rep, seq
from pushmask.grammar.regex import regex_to_ir

HERE = Path(__file__).resolve().parent
STARTUP_S = 300.0  # importing pushmask and the numba kernels (compiled when their disk cache is cold)
SLACK = 60.0  # wall time over a case's own limit before it counts as hung (input building, checks)
GUARD_FACTOR = 20  # wall seconds past GUARD_FACTOR x a case's limit (plus SLACK): a hang, not noise


def _run_all() -> dict[str, dict]:
    """Results by case id; a case killed for running too long gets outcome "hang"."""
    results: dict[str, dict] = {}
    pending = [case.id for case in CASES]
    limits = {case.id: case.limit for case in CASES}
    while pending:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "hostile_inputs.py"), *pending],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        lines: queue.Queue = queue.Queue()
        threading.Thread(
            target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)], daemon=True
        ).start()
        first = True
        while pending:
            wait = (STARTUP_S if first else 0.0) + SLACK + GUARD_FACTOR * limits[pending[0]]
            try:
                line = lines.get(timeout=wait)
            except queue.Empty:
                proc.kill()
                results[pending.pop(0)] = {"outcome": "hang", "message": f"no result after {wait:.0f} s"}
                break
            if line is None:  # the worker died (a crash, not an exception)
                proc.wait()
                results[pending.pop(0)] = {"outcome": "crash", "message": proc.stderr.read()[-2000:]}
                break
            first = False
            record = json.loads(line)
            assert record["id"] == pending[0]
            results[pending.pop(0)] = record
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return results


@pytest.fixture(scope="module")
def results():
    return _run_all()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input(results, case):
    got = results[case.id]
    assert got["outcome"] == case.expect, got["message"]
    if case.expect != "ok":
        assert issubclass(getattr(pushmask, case.expect), pushmask.PushmaskError)
        assert got["message"], "an error must say what went wrong"
    assert not got["problems"], got["problems"]


# -- the pieces behind the corpus, in process ---------------------------------------------------


@pytest.fixture(scope="module")
def compiler():
    return _compiler()


TREE_PATTERNS = [
    "(a|b)*a(a|b){3}",
    "(?i)[a-c]{2,3}x",
    "(?s).{2}",
    "[^ab]{1,2}",
    r"\d{2,}-\w{0,3}",
    "(ab|cd){2}|e{3}",
    "[\u00e9-\u00ff]{2}a?",
    "(?i:ab){2}C",
    "x[\u0100-\U0010ffff]{1,2}",
    "|".join(f"w{i}" for i in range(300)),
]


@pytest.mark.parametrize("pattern", TREE_PATTERNS)
def test_regex_trees_equal_interegular_automata(compiler, pattern):
    """Patterns with counted repetitions (or many nodes) become IR trees built by the numba
    kernels; their minimal rule DFA is the one of interegular's automaton, and they match what
    re.fullmatch matches."""
    tree = regex_to_ir(pattern)
    assert not isinstance(tree, CharFsm)
    automaton = regex_to_ir(pattern, automaton=True)
    assert isinstance(automaton, CharFsm)
    assert _construct_rule_dfa(tree, 100_000) == _construct_rule_dfa(automaton, 100_000)
    compiled = compiler.compile_regex(pattern)
    for n in range(4):
        for chars in itertools.product("aAbCxw-\n\u00e91", repeat=n):
            text = "".join(chars)
            assert accepts(compiled, text) == bool(re.fullmatch(pattern, text, re.ASCII)), (pattern, text)


def test_literal_trie_equals_the_reference_construction():
    words = [
        lit(w) for w in ["", "a", "ab", "abc", "abd", "b", "ba", "\u00e9t\u00e9", "zz"] + [f"k{i}" for i in range(40)]
    ]
    bodies = [
        alt(*words),
        seq(lit("<"), alt(*words, rep(lit("q"), 1, 3), ref("r")), lit(">")),
        rep(alt(*words), 0, None),
    ]
    for body in bodies:
        assert isinstance(alt(*words), Alt)
        assert _construct_rule_dfa(body, 100_000) == construct_rule_dfa_python(body, 100_000, minimize_up_to=10**9)


def test_big_enum_numbers_are_sound_and_take_json_dumps_spellings(compiler):
    values = [*range(-40, 40, 3), *(i / 4 for i in range(-20, 20)), 2**60, 1e300, 2.5e-8, -0.0]
    schema = {"enum": values}
    compiled = compiler.compile_json_schema(schema)
    for v in values:
        assert accepts(compiled, json.dumps(v)), v
    candidates = (
        [json.dumps(v) for v in values]
        + [f"{v}.0" for v in range(-45, 45)]
        + ["1.00", "2.5e-08", "1e300", "-0", "0.0", str(2**60) + ".0", "7.25", "41", "2.50"]
    )
    validator = jsonschema.Draft202012Validator(schema)
    for text in candidates:
        if accepts(compiled, text):
            assert validator.is_valid(json.loads(text)), text  # soundness


def test_lone_surrogates_in_json_literals(compiler):
    compiled = compiler.compile_json_schema({"const": "a\ud800b"})
    assert accepts(compiled, '"a\\ud800b"') and json.loads('"a\\ud800b"') == "a\ud800b"
    assert not accepts(compiled, '"ab"')
    # a high and a low surrogate in a row: json.loads joins their escapes, so nothing decodes to it
    with pytest.raises(pushmask.SchemaError, match="unsatisfiable"):
        compiler.compile_json_schema({"const": "\ud83d\ude00"})
    with pytest.raises(pushmask.GrammarError) as info:
        compiler.compile_grammar('root ::= "x"\n  | "\ud800"')
    assert (info.value.line, info.value.column) == (2, 6)


def test_argument_types_are_named(compiler):
    with pytest.raises(pushmask.ArgumentTypeError, match="ebnf must be str, got NoneType"):
        compiler.compile_grammar(None)
    with pytest.raises(TypeError, match=r"pattern must be str, got bytes.*decode"):
        compiler.compile_regex(b"a+")
    with pytest.raises(pushmask.ArgumentTypeError, match="start must be str"):
        compiler.compile_lark('start: "a"', start=1)
    with pytest.raises(pushmask.ArgumentTypeError, match="grammar must be Grammar"):
        compiler.compile_ir('root ::= "a"')
    with pytest.raises(pushmask.SchemaError, match="a set is not JSON data") as info:
        compiler.compile_json_schema({"properties": {"a": {"enum": [{1}]}}})
    assert info.value.pointer == "#/properties/a/enum/0"


def test_budgets_name_themselves_and_can_be_raised():
    deep = {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {}}}}
    compiler = _compiler(pushmask.Limits(max_schema_depth=3))
    with pytest.raises(pushmask.LimitExceededError, match="deeper than 3 levels.*max_schema_depth"):
        compiler.compile_json_schema(deep)
    compiler = _compiler(pushmask.Limits(max_schema_depth=6))
    assert accepts(compiler.compile_json_schema(deep), "[[[1]]]")

    nested = "root ::= " + "(" * 5 + '"a"' + ")" * 5
    compiler = _compiler(pushmask.Limits(max_nesting=4))
    with pytest.raises(pushmask.GrammarError, match="deeper than 4 levels.*max_nesting"):
        compiler.compile_grammar(nested)
    with pytest.raises(pushmask.GrammarError, match="deeper than 4 levels.*max_nesting"):
        compiler.compile_regex("(((((a)))))")
    compiler = _compiler(pushmask.Limits(max_nesting=5))
    assert accepts(compiler.compile_grammar(nested), "a") and accepts(compiler.compile_regex("(((((a)))))"), "a")

    compiler = _compiler(pushmask.Limits(max_rule_states=50))
    with pytest.raises(pushmask.LimitExceededError, match="51 character positions.*max_rule_states limit of 50"):
        compiler.compile_regex("a{51}")
    compiler = _compiler(pushmask.Limits(compile_time_limit_s=0.0))
    with pytest.raises(pushmask.LimitExceededError, match="compile_time_limit_s=0.0"):
        compiler.compile_json_schema({"type": "object", "properties": {"a": {"type": "string"}}})
