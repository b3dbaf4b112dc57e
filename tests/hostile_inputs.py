"""The hostile-input corpus: huge and malformed grammars and schemas, each with the outcome it
must have (it compiles, or it raises one of pushmask's documented errors) and a time limit.

`python tests/hostile_inputs.py [case ids]` runs the cases one after the other in this process
and prints one JSON line per case (id, outcome, message, wall and CPU seconds, problems); the test
(tests/test_hostile_inputs.py) runs it in a subprocess so that a hang fails the case instead of
hanging the suite.  Without ids it runs every case.  Times are of the compile call alone, after a
warm-up (numba kernels loaded), on a small byte vocabulary (masks are computed lazily, so the
vocabulary does not change compile time).
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Case:
    """`make` builds the input; `kind` says which entry point takes it; `expect` is "ok" or the
    name of the pushmask error it must raise within `limit` seconds.  `accepts` / `rejects` are
    texts a compiled grammar must take whole / refuse (checked through a GrammarMatcher)."""

    id: str
    kind: str  # "ebnf", "lark", "regex", "schema"
    make: Callable[[], Any]
    expect: str
    limit: float
    accepts: tuple[str, ...] = field(default=())
    rejects: tuple[str, ...] = field(default=())


def _words(n: int, seed: int = 0, lo: int = 4, hi: int = 10) -> list[str]:
    """n distinct pseudo-random lower-case words (a hard, realistic enum: little shared structure)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(lo, hi)))] = None
    return list(out)


def _nested_schema(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def _lark_alternatives(n: int) -> str:
    """A Lark grammar of n rules, each one word, all alternatives of one rule."""
    return (
        "start: item+\nitem: "
        + " | ".join(f"r{i}" for i in range(n))
        + "\n"
        + "".join(f'r{i}: "{w}"\n' for i, w in enumerate(WORDS_10K[:n]))
    )


def _lark_chain(n: int) -> str:
    """A Lark grammar of n rules, each calling the next: k^i (e | z at the end)."""
    return "start: r0\n" + "".join(f'r{i}: "k" r{i + 1} | "e"\n' for i in range(n - 1)) + f'r{n - 1}: "z"\n'


WORDS_10K = _words(10_000, seed=1)
WORDS_50K = _words(50_000, seed=2)
MIXED = [
    *_words(400, seed=3),
    *range(-200, 200),
    *(i / 8 for i in range(100)),
    True,
    False,
    None,
    *({"k": i} for i in range(50)),
    *([i, "x"] for i in range(48)),
]

CASES: list[Case] = [
    # -- EBNF -----------------------------------------------------------------------------------
    Case(
        "ebnf_a_0_4000",
        "ebnf",
        lambda: 'root ::= "a"{0,4000}',
        "ok",
        2.0,
        accepts=("", "a" * 4000),
        rejects=("a" * 4001,),
    ),
    Case(
        "ebnf_x_0_10000",
        "ebnf",
        lambda: 'root ::= x{0,10000}\nx ::= "x" | "yz"',
        "ok",
        2.0,
        accepts=("x" * 10_000, "yzx"),
        rejects=("x" * 10_001, "y"),
    ),
    Case("ebnf_repeat_past_limit", "ebnf", lambda: 'root ::= "a"{0,1000000}', "GrammarError", 1.0),
    Case(
        "ebnf_words_10000",
        "ebnf",
        lambda: "root ::= " + " | ".join(f'"{w}"' for w in WORDS_10K),
        "ok",
        2.0,
        accepts=(WORDS_10K[0], WORDS_10K[-1]),
        rejects=(WORDS_10K[0] + "q", ""),
    ),
    # nesting is walked with explicit stacks: 1,000 levels compile (max_nesting is 50,000)
    Case(
        "ebnf_nested_parens_1000",
        "ebnf",
        lambda: "root ::= " + "(" * 1000 + '"a"' + ")" * 1000,
        "ok",
        2.0,
        accepts=("a",),
        rejects=("", "aa"),
    ),
    Case(
        "ebnf_nested_repeats_1000",
        "ebnf",
        lambda: "root ::= " + '("a" ' * 1000 + ")*" * 1000,
        "ok",
        2.0,
        accepts=("", "a" * 5),
        rejects=("b",),
    ),
    Case(
        "lark_nested_repeats_1000",
        "lark",
        lambda: "start: " + '("a" ' * 1000 + ")*" * 1000,
        "ok",
        2.0,
        accepts=("", "a" * 5),
        rejects=("b",),
    ),
    Case(
        "regex_nested_repeats_1000",
        "regex",
        lambda: "(a" * 1000 + ")*" * 1000,
        "ok",
        2.0,
        accepts=("", "a" * 5),
        rejects=("b",),
    ),
    Case(
        "ebnf_nested_past_limit",
        "ebnf",
        lambda: "root ::= " + "(" * 50_001 + '"a"' + ")" * 50_001,
        "GrammarError",
        1.0,
    ),
    Case("ebnf_lone_surrogate", "ebnf", lambda: 'root ::= "a\ud800"', "GrammarError", 1.0),
    Case("ebnf_bytes_text", "ebnf", lambda: b'root ::= "a"', "ArgumentTypeError", 1.0),
    Case("ebnf_none_text", "ebnf", lambda: None, "ArgumentTypeError", 1.0),
    # -- regexes --------------------------------------------------------------------------------
    Case(
        "regex_exponential_15",
        "regex",
        lambda: "(a|b)*a(a|b){15}",
        "ok",
        2.0,
        accepts=("a" * 16, "b" + "a" + "b" * 15),
        rejects=("b" * 16,),
    ),
    Case("regex_exponential_20", "regex", lambda: "[01]*1[01]{20}", "LimitExceededError", 1.0),
    Case(
        "regex_digits_1_10000",
        "regex",
        lambda: "[0-9]{1,10000}",
        "ok",
        2.0,
        accepts=("0", "7" * 10_000),
        rejects=("", "1" * 10_001),
    ),
    Case("regex_digits_1_100000", "regex", lambda: r"\d{1,100000}", "LimitExceededError", 1.0),
    Case("regex_a_1000000", "regex", lambda: "a{1000000}", "LimitExceededError", 1.0),
    Case(
        "regex_words_10000",
        "regex",
        lambda: "(" + "|".join(WORDS_10K) + ")",
        "ok",
        2.0,
        accepts=(WORDS_10K[1], WORDS_10K[-2]),
        rejects=(WORDS_10K[1] + WORDS_10K[2],),
    ),
    Case("regex_none", "regex", lambda: None, "ArgumentTypeError", 1.0),
    # -- Lark -----------------------------------------------------------------------------------
    Case(
        "lark_rules_10000_alternatives",
        "lark",
        lambda: _lark_alternatives(10_000),
        "ok",
        2.0,
        accepts=(WORDS_10K[5] + WORDS_10K[9999],),
        rejects=("", WORDS_10K[9999] + "!"),
    ),
    Case(
        "lark_rules_10000_chain",
        "lark",
        lambda: _lark_chain(10_000),
        "ok",
        2.0,
        accepts=("k" * 9_999 + "z", "kke"),
        rejects=("k" * 10_000 + "z",),
    ),
    Case("lark_bytes_text", "lark", lambda: b'start: "a"', "ArgumentTypeError", 1.0),
    # -- JSON Schema ----------------------------------------------------------------------------
    Case(
        "schema_enum_5000_strings",
        "schema",
        lambda: {"enum": WORDS_50K[:5_000]},
        "ok",
        2.0,
        accepts=('"%s"' % WORDS_50K[0], '"%s"' % WORDS_50K[4_999]),
        rejects=('"%s"' % WORDS_50K[5_000],),
    ),
    Case(
        "schema_enum_50000_strings",
        "schema",
        lambda: {"enum": WORDS_50K},
        "ok",
        2.0,
        accepts=('"%s"' % WORDS_50K[0], '"%s"' % WORDS_50K[-1]),
        rejects=('"%sq"' % WORDS_50K[0],),
    ),
    Case(
        "schema_enum_1000_mixed",
        "schema",
        lambda: {"enum": MIXED},
        "ok",
        2.0,
        accepts=("-200", "0.125", '{"k": 3}', "null", '"%s"' % MIXED[0]),
        rejects=("200", "0.126", '{"k": 50}'),
    ),
    Case(
        "schema_array_of_enum_3000_ints",
        "schema",
        lambda: {"type": "array", "items": {"enum": list(range(0, 30_000, 10))}},
        "ok",
        2.0,
        accepts=("[0, 10, 29990]", "[]"),
        rejects=("[5]", "[30000]"),
    ),
    Case(
        "schema_properties_10000",
        "schema",
        lambda: {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(10_000)}},
        "ok",
        2.0,
        accepts=('{"p0": 1, "p9999": 2}', '{"other": "x"}'),
        rejects=('{"p5": "x"}', '{"p9999": 1, "p0": 2}'),
    ),
    Case("schema_depth_1000", "schema", lambda: _nested_schema(1_000), "LimitExceededError", 1.0),
    Case(
        "schema_const_lone_surrogate",
        "schema",
        lambda: {"const": "a\ud800"},
        "ok",
        1.0,
        accepts=('"a\\ud800"',),
        rejects=('"a"',),
    ),
    Case(
        "schema_enum_lone_surrogate",
        "schema",
        lambda: {"enum": ["\udc00", "b"]},
        "ok",
        1.0,
        accepts=('"\\udc00"', '"b"'),
        rejects=('"c"',),
    ),
    Case(
        "schema_property_lone_surrogate",
        "schema",
        lambda: {
            "type": "object",
            "properties": {"\ud800k": {"type": "integer"}},
            "required": ["\ud800k"],
            "additionalProperties": False,
        },
        "ok",
        1.0,
        accepts=('{"\\ud800k": 1}',),
        rejects=('{"k": 1}',),
    ),
    Case("schema_tuple_const", "schema", lambda: {"const": (1, 2)}, "SchemaError", 1.0),
    Case("schema_set_enum", "schema", lambda: {"enum": [{1, 2}]}, "SchemaError", 1.0),
    Case("schema_none", "schema", lambda: None, "SchemaError", 1.0),
]

BY_ID = {case.id: case for case in CASES}


def _compiler(limits=None):
    """A compiler for a small byte vocabulary (every byte, a few longer tokens, a stop token)."""
    import pushmask as pm

    vocab = [bytes([b]) for b in range(256)] + [b'"a', b"ab", b"xyz", b"</s>"]
    info = pm.TokenizerInfo.from_vocab(vocab, "raw", stop_token_ids=[len(vocab) - 1])
    return pm.GrammarCompiler(info, limits=limits)


def _compile(compiler, kind: str, value):
    if kind == "ebnf":
        return compiler.compile_grammar(value)
    if kind == "lark":
        return compiler.compile_lark(value)
    if kind == "regex":
        return compiler.compile_regex(value)
    return compiler.compile_json_schema(value, strict_mode=False)  # the spec's language, which jsonschema checks


def _check(compiled, case: Case) -> list[str]:
    """Problems found when feeding the case's accepted and rejected texts (empty: none)."""
    import pushmask as pm

    problems = []
    for text, wanted in [*((t, True) for t in case.accepts), *((t, False) for t in case.rejects)]:
        matcher = pm.GrammarMatcher(compiled)
        got = matcher.accept_string(text) and matcher.can_end()
        if got != wanted:
            problems.append(f"{'refused' if wanted else 'accepted'} {text[:40]!r}")
    bitmask = pm.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    pm.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask)  # a first mask can be computed
    return problems


def run(ids: list[str]) -> None:
    compiler = _compiler()
    for kind, value in (
        ("ebnf", 'root ::= "a"{0,3} [0-9]'),
        ("lark", 'start: "a"'),
        ("regex", "a|b"),
        ("schema", {"enum": ["a", 1]}),
    ):  # warm-up: load the numba kernels
        _check(_compile(compiler, kind, value), Case("warm", kind, lambda: None, "ok", 0))
    for case_id in ids:
        case = BY_ID[case_id]
        value = case.make()
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            compiled = _compile(compiler, case.kind, value)
            outcome, message = "ok", ""
        except Exception as exc:  # noqa: BLE001 -- the outcome is what we report
            compiled, outcome, message = None, type(exc).__name__, str(exc)[:300]
        seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        problems = _check(compiled, case) if compiled is not None else []
        states = compiled.num_states if compiled is not None else None
        print(
            json.dumps(
                {
                    "id": case_id,
                    "outcome": outcome,
                    "message": message,
                    "seconds": round(seconds, 3),
                    "cpu": round(cpu, 3),
                    "states": states,
                    "problems": problems,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    run(sys.argv[1:] or [case.id for case in CASES])
