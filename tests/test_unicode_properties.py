"""Unicode property escapes (`\\p{...}`, `\\P{...}`) in JSON Schema `pattern`, ECMA-262 'u' mode.

Oracles: the `regex` package's own matcher on sampled code points for the property tables
(general categories are built from `unicodedata`, so `regex` is independent of them), `regex`'s
search for whole patterns fed through the real matcher, and the official Test Suite's optional
ecmascript-regex groups that use property escapes (ECMA semantics).
"""

from __future__ import annotations

import json
import random
import sys
import unicodedata
from pathlib import Path

import jsonschema
import pytest
import regex

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import DATA, accepts_token_ids, require_shared  # noqa: E402

from pushmask.core.errors import SchemaError, UnsupportedSchemaError  # noqa: E402
from pushmask.grammar.ecma_regex import pattern_dfa  # noqa: E402
from pushmask.grammar.fsm.unicode_properties import property_ranges  # noqa: E402
from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402

CATEGORY_CHANGED = {0x0295, 0x1171E}
"""Assigned code points whose general category changed after Python's Unicode version (14.0)."""

SPECS = [
    "L",
    "Letter",
    "Lu",
    "Ll",
    "gc=Nd",
    "General_Category=Punctuation",
    "LC",
    "Cased_Letter",
    "digit",
    "Zs",
    "So",
    "Script=Greek",
    "sc=Cyrl",
    "scx=Grek",
    "Script_Extensions=Latin",
    "sc=Han",
    "Alphabetic",
    "White_Space",
    "ASCII",
    "Any",
    "Emoji",
    "ID_Start",
]


def sample_code_points(seed: str, n: int) -> list[int]:
    rng = random.Random(seed)
    points = (
        list(range(0x80))
        + [rng.randrange(0x10000) for _ in range(n)]
        + [rng.randrange(0x10000, 0x110000) for _ in range(n // 4)]
    )
    return [cp for cp in points if not 0xD800 <= cp <= 0xDFFF]


@pytest.mark.parametrize("spec", SPECS)
def test_property_ranges_agree_with_regex(spec):
    ranges = property_ranges(spec)
    oracle = regex.compile(rf"\p{{{spec}}}")
    edges = [cp for lo, hi in ranges[:200] for cp in (lo - 1, lo, hi, hi + 1) if 0 <= cp <= 0x10FFFF]
    mismatches = []
    for cp in sample_code_points(spec, 3000) + edges:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ours = any(lo <= cp <= hi for lo, hi in ranges)
        if ours != bool(oracle.fullmatch(chr(cp))):
            mismatches.append(cp)
    # general categories come from Python's older Unicode tables: they may differ only where
    # Python has no character yet, or for the few characters whose category changed since
    general = spec.split("=")[-1] in (
        "L",
        "Letter",
        "Lu",
        "Ll",
        "Nd",
        "Punctuation",
        "LC",
        "Cased_Letter",
        "digit",
        "Zs",
        "So",
    )
    if general:
        mismatches = [cp for cp in mismatches if unicodedata.category(chr(cp)) != "Cn" and cp not in CATEGORY_CHANGED]
    assert not mismatches, [hex(cp) for cp in mismatches[:10]]
    assert all(not (lo <= 0xDFFF and hi >= 0xD800) for lo, hi in ranges), "surrogates included"


PATTERNS = [
    r"^\p{L}+$",
    r"^\P{L}+$",
    r"[\p{Lu}\d]x",
    r"^[^\p{Script=Greek}]*$",
    r"\p{Letter}cole",
    r"^\p{digit}+$",
    r"^\p{sc=Cyrl}{2,3}$",
    r"^[\p{N}\P{Alphabetic}]+$",
    r"^\p{gc=Zs}?[a-z\p{Ll}]+$",
]
WORDS = [
    "Hello",
    "π",
    "123",
    "ab1",
    "école",
    "l'école",
    "L'ÉCOLE",
    "Ωx",
    "AbC",
    "Bx",
    "৪২",
    "42",
    "-%#",
    "мир",
    "миру",
    "Привет",
    "αβγ",
    "a b",
    "\u00a0abc",
    " abc",
    "日本",
    "ǅx",
    "x\u0301",
    "",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_with_property_escapes_match_like_regex(pattern, llama3_compiler, llama3_tokenizer):
    compiled = llama3_compiler.compile_json_schema({"type": "string", "pattern": pattern})
    oracle = regex.compile(pattern)
    rng = random.Random(pattern)
    words = WORDS + ["".join(rng.choice(WORDS[:-1]) for _ in range(2)) for _ in range(20)]
    for word in words:
        expected = bool(oracle.search(word))
        for text in (json.dumps(word), json.dumps(word, ensure_ascii=False)):
            got = accepts_token_ids(compiled, llama3_tokenizer.encode(text, add_special_tokens=False))
            assert got == expected, (pattern, text)


def test_test_suite_property_escape_groups(llama3_compiler, llama3_tokenizer):
    """The optional ecmascript-regex groups of the official suite that use \\p (ECMA semantics)."""
    path = require_shared(
        DATA / "json-schema-test-suite" / "tests" / "draft2020-12" / "optional" / "ecmascript-regex.json"
    )
    groups = [g for g in json.loads(path.read_text()) if "\\p" in json.dumps(g["schema"])]
    assert len(groups) >= 4
    for group in groups:
        compiled = llama3_compiler.compile_json_schema(group["schema"], property_order="any")
        for test in group["tests"]:
            text = json.dumps(test["data"], ensure_ascii=False)
            ok = accepts_token_ids(compiled, llama3_tokenizer.encode(text, add_special_tokens=False))
            assert ok == test["valid"], (group["description"], test["description"])


@pytest.mark.parametrize(
    "pattern", [r"\p{Greek}", r"\p{gc=Greek}", r"\p{Script=L}", r"\pL", r"\p{L", r"\p{Foo}", r"\p{Block=Basic_Latin}"]
)
def test_unknown_or_malformed_properties_are_refused(pattern):
    """Names ECMA-262 does not define (a lone script name, a script as a category, blocks) and
    malformed escapes: a clear error, never a guess."""
    with pytest.raises(UnsupportedSchemaError) as info:
        pattern_dfa(pattern, "#/pattern")
    assert info.value.keyword == "pattern"
    with pytest.raises(SchemaError):
        json_schema_to_grammar({"type": "string", "pattern": pattern})


def test_metaschema_check_still_rejects_bad_regexes():
    with pytest.raises(SchemaError, match="regex"):
        json_schema_to_grammar({"type": "string", "pattern": "(unclosed"})
    with pytest.raises(SchemaError, match="regex"):
        json_schema_to_grammar({"type": "string", "pattern": r"\p{L}("})
    assert jsonschema.Draft202012Validator({"pattern": r"^\p{L}$"})  # the schema itself is fine
