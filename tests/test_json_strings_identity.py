"""The fast decoded-string automata (numba kernels in grammar/fsm/string_kernels.py) against the code
they replaced, kept verbatim in tests/json_strings_reference.py: the JSON string encoder, trim,
minimisation and products must build exactly the same automata, and whole schemas exactly the
same grammars -- on random automata (astral ranges, surrogate and escape boundaries), handmade
ones (excluded names with escapes, astral classes, formats) and a sample of the dev schemas.
"""

from __future__ import annotations

import json
import random

import json_strings_reference as reference
import pytest
from json_strings_reference import ReferenceDfa, reference_encode
from support import DATA, require_shared

import pushmask
from pushmask.core.errors import UnsupportedSchemaError
from pushmask.grammar import json_schema, json_strings
from pushmask.grammar.ecma_regex import pattern_dfa
from pushmask.grammar.fsm.codepoint_dfa import (
    ALL_CHARS,
    Dfa,
    StateLimitExceeded,
    any_string_dfa,
    dfa_to_char_fsm,
    intersect_ranges,
    length_dfa,
    literal_dfa,
)
from pushmask.grammar.fsm.unicode_properties import re_class
from pushmask.grammar.ir import NOTHING, CharFsm, lit, seq
from pushmask.grammar.json_formats import format_dfa
from pushmask.grammar.json_schema import emit, objects
from pushmask.grammar.json_strings import encode_json_string

DEV = DATA / "maskbench-dev"

# Interval boundaries where the encoder's cases change: controls, '"', '\\', escapable
# characters, ASCII/Latin-1, hex-digit blocks, the surrogate gap, astral blocks of 1024.
_CUTS = sorted(
    {
        0,
        0x08,
        0x09,
        0x0A,
        0x1F,
        0x20,
        0x22,
        0x23,
        0x2F,
        0x30,
        0x5B,
        0x5C,
        0x5D,
        0x62,
        0x6E,
        0x74,
        0x75,
        0x7F,
        0x80,
        0xFF,
        0x100,
        0x7FF,
        0x800,
        0xFFF,
        0x1000,
        0x4E00,
        0xD7FF,
        0xE000,
        0xFFFD,
        0xFFFF,
        0x10000,
        0x103FF,
        0x10400,
        0x10401,
        0x107FF,
        0x1F600,
        0x1F64F,
        0xFFFFF,
        0x10FFFF,
    }
)


def _random_ranges(rng: random.Random, k: int) -> list[tuple[int, int]]:
    """Up to k sorted, disjoint ranges of decoded code points (no surrogates)."""
    points = sorted(rng.sample(_CUTS, min(len(_CUTS), 2 * k)) + [rng.randint(0, 0x10FFFF) for _ in range(k // 2)])
    ranges = []
    for lo, hi in zip(points[::2], points[1::2]):
        ranges.extend(intersect_ranges(((lo, hi),), ALL_CHARS))
    return [r for i, r in enumerate(ranges) if i == 0 or r[0] > ranges[i - 1][1]]


def random_dfa(rng: random.Random, states: int = 6, edges: int = 4, finals: float = 0.3) -> Dfa:
    """A random Dfa: sorted, disjoint edges (adjacent ones may share a target); not trimmed."""
    trans = [
        [(lo, hi, rng.randrange(states)) for lo, hi in _random_ranges(rng, rng.randint(0, edges))]
        for _ in range(states)
    ]
    return Dfa(trans, [s for s in range(states) if rng.random() < finals])


def old(dfa: Dfa) -> ReferenceDfa:
    return ReferenceDfa(dfa.trans, dfa.finals)


def same(new: Dfa, before: ReferenceDfa) -> bool:
    return new.trans == before.trans and new.finals == before.finals


def test_encoder_matches_the_reference_on_random_automata():
    rng = random.Random(18)
    for _ in range(300):
        dfa = random_dfa(rng, rng.randint(1, 10), edges=6)
        trimmed = old(dfa).trim()  # the encoder reads joined edges, as every Dfa op returns
        new = encode_json_string(Dfa(trimmed.trans, trimmed.finals))
        assert same(new, reference_encode(trimmed))


def test_encoder_matches_the_reference_on_random_excluded_names():
    # "any key but these names": the automata of additionalProperties
    rng = random.Random(81)
    alphabet = 'ab_Z09"/\n\t\x01\x7f\u00e9\u2028\ud7ff\ue000\uffff\U00010000\U000103ff\U0001f600\U0010ffff'
    for _ in range(60):
        names = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 12))]
        keys = length_dfa(0, rng.choice([None, 8])).difference(literal_dfa(names))
        assert same(encode_json_string(keys), reference_encode(old(keys)))


def test_encoder_retries_with_more_room_and_keeps_the_result():
    rng = random.Random(7)
    for _ in range(20):
        dfa = old(random_dfa(rng, 5)).trim()
        dfa = Dfa(dfa.trans, dfa.finals)
        assert all(
            (a == b).all()
            for a, b in zip(json_strings._encode(dfa, 100_000, capacity=1), json_strings._encode(dfa, 100_000))
        )


@pytest.mark.parametrize("budget", [3, 8, 20, 60])
def test_encoder_budget_is_the_reference_one(budget):
    rng = random.Random(budget)
    for _ in range(40):
        trimmed = old(random_dfa(rng, 4)).trim()
        try:
            expected = reference_encode(trimmed, budget)
        except StateLimitExceeded:
            expected = None
        try:
            got = encode_json_string(Dfa(trimmed.trans, trimmed.finals), budget)
        except StateLimitExceeded:
            got = None
        # both count the same states and edges; which of the two limits trips first may differ
        assert (got is None) == (expected is None)
        if got is not None:
            assert same(got, expected)


def _handmade() -> list[Dfa]:
    names = [
        "id",
        "name",
        'quo"te',
        "back\\slash",
        "tab\there",
        "ctl\x01",
        "slash/",
        "caf\u00e9",
        "\u2028line",
        "\U0001f600",
        "a\U0001f600b",
        "\uffff",
        "\U0010ffff",
        "\U00010400",
        "",
    ]
    return [
        any_string_dfa(),
        literal_dfa(names),
        any_string_dfa().difference(literal_dfa(names)),
        length_dfa(1, 3).difference(literal_dfa(names)),
        pattern_dfa("^[\U00010000-\U0001ffff]+$"),
        pattern_dfa("^[\U00010005-\U00010800\U00010a00-\U00010aff]x"),
        pattern_dfa("^[^\U0001f600]*\U0001f600$").difference(literal_dfa(["\U0001f600"])),
        pattern_dfa("^[\u4e00-\u9fff]{2,3}$"),
        pattern_dfa(r"^\w+$"),
        pattern_dfa("^x-").union(pattern_dfa("^[0-9]+$")),
        format_dfa("email"),
        format_dfa("date-time"),
    ]


@pytest.mark.parametrize("index", range(12))
def test_encoder_matches_the_reference_on_handmade_automata(index):
    dfa = _handmade()[index]
    assert same(encode_json_string(dfa), reference_encode(old(dfa)))


def test_products_trim_and_minimize_match_the_reference_on_random_automata():
    rng = random.Random(1818)
    for _ in range(300):
        a = random_dfa(rng, rng.randint(1, 9), finals=0.4)
        b = random_dfa(rng, rng.randint(1, 9), finals=0.4)
        assert same(a.trim(), old(a).trim())
        assert same(a.minimize(), old(a).minimize())
        for op in ("intersect", "union", "difference"):
            for minimal in (True, False):
                assert same(getattr(a, op)(b, minimize=minimal), getattr(old(a), op)(old(b), minimize=minimal))
        assert a.intersects(b) == (not old(a).intersect(old(b)).is_empty())


def test_long_chains_minimise_like_the_reference():
    # incremental refinement: one link per round, and blocks that split many times
    for dfa in (
        length_dfa(0, 300),
        length_dfa(5, 200).intersect(pattern_dfa("^(ab|cd)*$")),
        length_dfa(0, 40).difference(literal_dfa(["a" * k for k in range(0, 41, 3)])),
    ):
        assert same(dfa.minimize(), old(dfa).minimize())


@pytest.mark.parametrize("budget", [2, 5, 12])
def test_product_budget_is_the_reference_one(budget):
    rng = random.Random(budget)
    for _ in range(60):
        a, b = random_dfa(rng, 5), random_dfa(rng, 5)
        for op in ("intersect", "union", "difference"):
            try:
                expected = getattr(old(a), op)(old(b), budget)
            except StateLimitExceeded as exc:
                expected = str(exc)
            try:
                got = getattr(a, op)(b, budget)
            except StateLimitExceeded as exc:
                got = str(exc)
            assert got == expected if isinstance(got, str) else same(got, expected)


def test_python_classes_are_what_str_methods_say():
    # re_class asks `re` for its \d \w \s runs; Python's own per-character predicates agree
    tests = {"d": str.isdecimal, "w": lambda c: c.isalnum() or c == "_", "s": str.isspace}
    for name, test in tests.items():
        inside = {cp for lo, hi in re_class(name) for cp in range(lo, hi + 1)}
        assert inside == {cp for lo, hi in ALL_CHARS for cp in range(lo, hi + 1) if test(chr(cp))}


def test_string_literals_match_the_reference():
    rng = random.Random(5)
    chars = [c for c in map(chr, _CUTS) if not 0xD800 <= ord(c) <= 0xDFFF] + list('abc"\\/\b\f\n\r\t\x7f\u2028é')
    for _ in range(2000):
        value = "".join(rng.choice(chars) for _ in range(rng.randint(0, 5)))
        assert json_strings.string_literal_expr(value) == reference.reference_string_literal_expr(value)


def _with_reference(monkeypatch):
    """Route the compiler through the reference code: Dfa trim/minimize/products, the encoder,
    string literals and the per-pattern keys of patternProperties."""

    def to_new(r: ReferenceDfa) -> Dfa:
        return Dfa(r.trans, r.finals)

    def product(self, other, rule, keep_dead, budget, minimize=True):
        final = {0: lambda x, y: x and y, 1: lambda x, y: x or y, 2: lambda x, y: x and not y}[rule]
        return to_new(old(self)._product(old(other), final, keep_dead, budget, minimize))

    def string_expr(dfa, pointer="", keyword="pattern", budget=100_000):
        if dfa.is_empty():
            return NOTHING
        try:
            body = reference_encode(old(dfa), budget)
        except StateLimitExceeded as exc:
            raise UnsupportedSchemaError(keyword, pointer, f"{exc}; simplify the constraint") from None
        return seq(lit('"'), dfa_to_char_fsm(to_new(body)), lit('"'))

    monkeypatch.setattr(Dfa, "trim", lambda self: to_new(old(self).trim()))
    monkeypatch.setattr(Dfa, "minimize", lambda self: to_new(old(self).minimize()))
    monkeypatch.setattr(Dfa, "_product", product)
    monkeypatch.setattr(json_strings, "json_string_expr", string_expr)
    monkeypatch.setattr(json_strings, "string_literal_expr", reference.reference_string_literal_expr)
    # where the schema compiler looks the encoders up (a name that moves fails the setattr)
    encoders = {"json_string_expr": string_expr, "string_literal_expr": reference.reference_string_literal_expr}
    for name in encoders:  # the emitter's string_literal / string_token call them
        monkeypatch.setattr(emit, name, encoders[name])
    monkeypatch.setattr(objects, "_keys_by_patterns", reference.reference_keys_by_patterns)


def _compile(schema):
    pushmask.clear_caches()
    try:
        return json_schema.json_schema_to_grammar(
            schema, property_order="any", additional_properties_default=True
        ).rules
    except Exception as exc:  # noqa: BLE001 - the same error is expected both ways
        return f"{type(exc).__name__}: {exc}"


# Dev schemas: every 150th file (most have "any other key" members), and some with
# patternProperties, propertyNames or "not" members that the reference compiles quickly.
_SAMPLE = sorted(DEV.glob("*.json"))[7::150] if DEV.exists() else []
_KEYED = [
    "Github_hard---o12335.json",
    "Github_easy---o10318.json",
    "Github_hard---o21191.json",
    "Github_easy---o21847.json",
    "Github_easy---o82716.json",
    "Github_hard---o20390.json",
    "Github_hard---o57433.json",
    "Github_medium---o15221.json",
    "Github_medium---o45264.json",
    "Github_medium---o58622.json",
    "Github_medium---o74562.json",
    "Github_trivial---o53909.json",
    "Handwritten---allany21.json",
    "Handwritten---notnames10.json",
    "JsonSchemaStore---lego.json",
    "JsonSchemaStore---azure-iot-edgeagent-deployment-1.1.json",
    "Snowplow---sp_227_Normalized.json",
    "Synthesized---draft2019_09_valid_patternProperties_id11_subschema1_not_2.json",
    "Synthesized---draft2019_09_nonvalid_oneOf_id5_subschema1_not_2.json",
]
# Overlapping and disjoint patterns (some with false schemas), names with escapes, propertyNames,
# members a "not" asks for.
_HANDMADE = [
    {
        "type": "object",
        "properties": {"a": {}, "x1": {"type": "integer"}},
        "patternProperties": {"^x": {"type": "integer"}, "y$": False, "^x.*y$": {"type": "string"}, "^z": True},
        "additionalProperties": {"type": "boolean"},
    },
    {
        "type": "object",
        "patternProperties": {"^a": {}, "^b": {"type": "null"}, "[0-9]": False},
        "additionalProperties": False,
    },
    {
        "type": "object",
        "patternProperties": {"^name:(en|nl)$": {}, "^id:[0-9]$": {"type": "integer"}},
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {'quo"te': {}, "back\\slash": {}, "caf\u00e9": {}, "\U0001f600": {}},
        "additionalProperties": {"type": "string", "maxLength": 3},
    },
    {"type": "object", "propertyNames": {"pattern": "^[a-z\U00010000-\U0001ffff]{1,6}$"}, "properties": {"ab": {}}},
    {"type": "object", "propertyNames": {"maxLength": 4, "format": "hostname"}, "required": ["a"]},
    {
        "type": "object",
        "properties": {"a": {}},
        "not": {"patternProperties": {"^x": {"type": "string"}}, "additionalProperties": False},
    },
]


def _sample() -> list:
    require_shared(DEV)
    files = _SAMPLE + [DEV / name for name in _KEYED if (DEV / name).exists()]
    return [(f.name, json.loads(f.read_text())["schema"]) for f in files] + [
        (f"handmade {i}", schema) for i, schema in enumerate(_HANDMADE)
    ]


def test_schemas_compile_to_the_reference_grammars(monkeypatch):
    schemas = _sample()
    fast = [_compile(schema) for _, schema in schemas]
    with monkeypatch.context() as patched:
        _with_reference(patched)
        slow = [_compile(schema) for _, schema in schemas]
    pushmask.clear_caches()
    for (name, _), a, b in zip(schemas, fast, slow):
        assert a == b, name
    fsms = [e for rules in fast if isinstance(rules, dict) for e in _walk(rules) if isinstance(e, CharFsm)]
    assert len(fsms) > 100 and max(len(f.transitions) for f in fsms) > 2000, "the sample exercises the encoder"


def _walk(rules: dict):
    """Every sub-expression of the rules (shared ones once)."""
    seen: set[int] = set()
    stack = list(rules.values())
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack.extend(getattr(e, "items", ()) or ([e.item] if hasattr(e, "item") else []))
