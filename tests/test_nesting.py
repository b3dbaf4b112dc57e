"""Deeply nested groups: EBNF, Lark and regex groups nested 100 to 1,000 deep compile (every
parser and pass walks nesting with an explicit stack) and match what an independent oracle matches.

The nested language is `L_n`, with L_0 = "m" and L_k = ("a" L_(k-1) "b")*: one group and one
repetition per level.  Its oracle is a depth counter (`_step`), checked against lark's Earley
parser and Python's `re` where they can read the grammar (lark's loader and `re` recurse per
level and reach Python's recursion limit at about 400 levels), and used alone deeper down.
"""

from __future__ import annotations

import itertools
import random
import re

import lark
import pytest
from hostile_inputs import _compiler

import pushmask as pm
from pushmask.grammar import lark_frontend
from pushmask.grammar import regex as regex_module
from pushmask.grammar.ir import Alt, Expr, Grammar, Repeat, Seq, alt, lit, to_text

DEPTHS = (100, 500, 1_000)
ORACLE_DEPTH = 100
"""Deep enough to need the explicit stacks (Python's limit is 1,000 frames, several per level
before), shallow enough for lark's loader and Python's `re` to read as oracles."""


def _nested(depth: int, kind: str) -> str:
    """L_depth as grammar text of `kind` ("ebnf", "lark", "regex" or "regex_noncapturing")."""
    if kind == "ebnf":
        return "root ::= " + '("a" ' * depth + '"m"' + ' "b")*' * depth
    if kind == "lark":
        return "start: " + '("a" ' * depth + '"m"' + ' "b")*' * depth
    opening = "(a" if kind == "regex" else "(?:a"
    return opening * depth + "m" + "b)*" * depth


def _compile(compiler: pm.GrammarCompiler, kind: str, text: str) -> pm.CompiledGrammar:
    if kind == "ebnf":
        return compiler.compile_grammar(text)
    if kind == "lark":
        return compiler.compile_lark(text)
    return compiler.compile_regex(text)


def _step(depth: int, level: int, previous: str, char: str) -> int | None:
    """The level after `char` at `level` (previous character `previous`), or None if L_depth has
    no string going on so: "m" only right after the deepest "a", "b" closes a level (the deepest
    only after its "m")."""
    if char == "a" and level < depth:
        return level + 1
    if char == "m" and level == depth and previous == "a":
        return level
    if char == "b" and level > 0 and (level < depth or previous == "m"):
        return level - 1
    return None


def _oracle(depth: int, text: str) -> tuple[bool, bool]:
    """(is `text` a prefix of a string of L_depth, is it a string of L_depth)."""
    level, previous = 0, ""
    for char in text:
        after = _step(depth, level, previous, char)
        if after is None:
            return False, False
        level, previous = after, char
    return True, level == 0


def _samples(depth: int, seed: int) -> list[str]:
    """Random walks of L_depth that dive to the bottom and come back part way or all the way,
    each also with one character changed, inserted or dropped (mostly outside the language)."""
    rng = random.Random(seed)
    walks = ["", "m", "ab", "amb", "a" * depth + "m" + "b" * depth]
    for _ in range(12):
        text, level, previous = [], 0, ""
        dive = rng.random() < 0.5
        for _ in range(rng.randrange(2 * depth + 4)):
            allowed = [c for c in "abm" if _step(depth, level, previous, c) is not None]
            if dive and "a" in allowed and rng.random() < 0.9:
                allowed = ["a"]
            char = rng.choice(allowed)
            level, previous = _step(depth, level, previous, char), char  # type: ignore[assignment]
            text.append(char)
        walks.append("".join(text) + "b" * (level if rng.random() < 0.7 else 0))
    mutated = []
    for walk in walks:
        at = rng.randrange(len(walk) + 1)
        char = rng.choice("abmx")
        mutated += [walk[:at] + char + walk[at + 1 :], walk[:at] + char + walk[at:], walk[:at] + walk[at + 1 :]]
    return walks + mutated


def _matcher_verdict(compiled: pm.CompiledGrammar, text: str) -> tuple[bool, bool]:
    matcher = pm.GrammarMatcher(compiled)
    prefix_ok = matcher.accept_string(text)
    return prefix_ok, prefix_ok and matcher.can_end()


@pytest.fixture(scope="module")
def compiler():
    return _compiler()


def test_the_oracle_agrees_with_lark_and_re():
    text = _nested(ORACLE_DEPTH, "lark")
    parser = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    pattern = re.compile(_nested(ORACLE_DEPTH, "regex_noncapturing"))
    checked = 0
    for sample in _samples(ORACLE_DEPTH, seed=7):
        if set(sample) - set("abm"):
            continue
        try:
            parser.parse(sample)
            lark_accepts = True
        except lark.exceptions.LarkError:
            lark_accepts = False
        assert lark_accepts == _oracle(ORACLE_DEPTH, sample)[1] == bool(pattern.fullmatch(sample)), sample
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("kind", ["ebnf", "lark", "regex", "regex_noncapturing"])
def test_nested_repetitions_match_the_oracle(compiler, kind, depth):
    compiled = _compile(compiler, kind, _nested(depth, kind))
    samples = _samples(depth, seed=depth)
    for sample in samples:
        assert _matcher_verdict(compiled, sample) == _oracle(depth, sample), sample[:80]
    assert any(_oracle(depth, sample)[1] and "m" in sample for sample in samples)  # a walk reached the bottom


GROUP_CASES = {  # id: (kind, grammar text of depth n, strings it takes, strings it refuses)
    "ebnf": ("ebnf", lambda n: "root ::= " + "(" * n + '"a" | "b"' + ")" * n, ["a", "b"], ["", "ab", "c"]),
    "lark_ignore": (
        "lark",
        lambda n: "start: " + "(" * n + '"a" | "b"' + ")" * n + '\n%ignore " "',
        ["a", " b ", "  a"],
        ["", "ab", "c"],
    ),
    "lark_optional": (
        "lark",
        lambda n: 'start: "x" ' + "[" * n + '"a" | "b"' + "]" * n,
        ["x", "xa", "xb"],
        ["", "a", "xab"],
    ),
    "regex": ("regex", lambda n: "(" * n + "a|b" + ")" * n, ["a", "b"], ["", "ab", "c"]),
}


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("case", GROUP_CASES)
def test_nested_groups_compile(compiler, case, depth):
    kind, make, accepted, refused = GROUP_CASES[case]
    compiled = _compile(compiler, kind, make(depth))
    for sample in accepted:
        assert _matcher_verdict(compiled, sample)[1], sample
    for sample in refused:
        assert not _matcher_verdict(compiled, sample)[1], sample


def test_lark_groups_nested_past_its_loader_match_the_plain_reader(compiler):
    """lark's loader recurses past Python's limit at 1,000 levels: the plain reader reads the
    grammar, with the %ignore'd terminals between symbols as lark would put them."""
    text = "start: " + '("a" ' * 1000 + '"m"' + ' "b")*' * 1000 + '\n%ignore " "\n'
    compiled = compiler.compile_lark(text)
    deep = "a" * 1000 + "m" + "b" * 1000
    assert _matcher_verdict(compiled, " ".join(deep))[1]
    assert _matcher_verdict(compiled, "a b  ab")[1]
    assert not _matcher_verdict(compiled, "a m b")[1]


@pytest.mark.parametrize("kind", ["ebnf", "lark", "regex"])
def test_max_nesting_refuses_deeper_groups_with_their_position(kind, monkeypatch):
    """Lark grammars are held to it where pushmask's plain reader reads them (long grammars, and
    groups nested past what lark's loader can read); lark's loader reads the others itself."""
    monkeypatch.setattr(lark_frontend, "FAST_READER_MIN_CHARS", 0)
    atom = "a" if kind == "regex" else '"a"'
    prefix = {"ebnf": 'root ::= "x" | ', "lark": 'start: "x"\n  | ', "regex": "x|"}[kind]
    text = prefix + "(" * 5 + atom + ")" * 5
    with pytest.raises(pm.GrammarError, match="deeper than 4 levels.*max_nesting") as info:
        _compile(_compiler(pm.Limits(max_nesting=4)), kind, text)
    assert (info.value.line, info.value.column) == {"ebnf": (1, 20), "lark": (2, 9), "regex": (1, 7)}[kind]
    assert _matcher_verdict(_compile(_compiler(pm.Limits(max_nesting=5)), kind, text), "a")[1]


def _group_patterns(seed: int, count: int) -> list[str]:
    """Random patterns over a, b, A with every group kind the grouped reader handles: capturing,
    non-capturing, named, scoped flags, comments, global flags first, and group quantifiers."""
    rng = random.Random(seed)

    def pattern(depth: int) -> str:
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(["a", "b", "ab", "[ab]", "a*", "b?", ".", "\\x61", "A", "[^a]", "[(|)]", "\\("])
        options = ["".join(pattern(depth - 1) for _ in range(rng.choice([1, 2]))) for _ in range(rng.choice([1, 2, 3]))]
        opening = rng.choice(["(", "(?:", f"(?P<g{rng.randrange(10**6)}>", "(?i:", "(?#c)(", "(?s:"])
        quantifier = rng.choice(["", "", "*", "+", "?", "{2}", "{1,2}", "{,2}", "{2,}", "*?", "{0}"])
        return opening + "|".join(options) + ")" + quantifier

    return [("(?i)" if rng.random() < 0.2 else "") + pattern(3) for _ in range(count)]


def test_the_grouped_regex_reader_matches_re(monkeypatch):
    """Patterns nesting deeper than INTEREGULAR_MAX_NESTING are read group by group; forced on
    shallow patterns, that reading matches exactly what `re.fullmatch` matches."""
    from support import ir_accepts

    monkeypatch.setattr(regex_module, "INTEREGULAR_MAX_NESTING", 0)
    texts = [""] + ["".join(chars) for n in range(1, 5) for chars in itertools.product("abA(", repeat=n)]
    checked = 0
    for source in _group_patterns(seed=41, count=80):
        try:
            pattern = re.compile(source)
        except re.error:
            continue
        grammar = Grammar({"root": regex_module.regex_to_ir(source)}, "root")
        for text in texts:
            assert ir_accepts(grammar, text) == bool(pattern.fullmatch(text)), (source, text)
        checked += 1
    assert checked > 60


@pytest.mark.parametrize(
    "pattern, message, column",
    [
        ("(a", "unbalanced '\\('", 1),
        ("((a)|b", "unbalanced '\\('", 1),
        ("(?>a)", "unsupported group", 1),
        ("(a)(?i)", "global flags", 4),
        ("(a){3,1}", "max < min", 3),
        ("(a)**", "invalid regex", 5),
    ],
)
def test_the_grouped_regex_reader_refuses_with_a_column(monkeypatch, pattern, message, column):
    monkeypatch.setattr(regex_module, "INTEREGULAR_MAX_NESTING", 0)
    with pytest.raises(pm.GrammarError, match=message) as info:
        regex_module.regex_to_ir(pattern)
    assert info.value.column == column


def _repeat_chain(depth: int, bottom: str) -> Expr:
    """(...((bottom "b")* "b")* ...)*, `depth` levels, built without the simplifying constructors."""
    expr: Expr = lit(bottom)
    for _ in range(depth):
        expr = Repeat(Seq((expr, lit("b"))), 0, None)
    return expr


def test_deep_expressions_hash_compare_and_print_without_recursion():
    same, twin, other = _repeat_chain(5_000, "a"), _repeat_chain(5_000, "a"), _repeat_chain(5_000, "c")
    assert same == twin and hash(same) == hash(twin) and same is not twin
    assert same != other and not (same == other)
    assert alt(same, twin) is same and alt(same, other) == Alt((same, other))  # alternation drops the twin
    assert to_text(_repeat_chain(2, "a")) == "(('a' 'b'){0,} 'b'){0,}"
    assert to_text(same).count("{0,}") == 5_000


def test_a_deep_alternative_written_twice_compiles_once(compiler):
    """Both copies are equal trees 1,000 levels deep: the alternation compares them (iteratively)."""
    half = _nested(1_000, "ebnf").removeprefix("root ::= ")
    compiled = compiler.compile_grammar(f"root ::= {half} | {half}")
    for sample in _samples(1_000, seed=3)[:10]:
        assert _matcher_verdict(compiled, sample) == _oracle(1_000, sample), sample[:80]
