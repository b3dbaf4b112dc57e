"""Tests of the grammar front ends: regex (interegular), EBNF/GBNF, Lark.

Oracles: Python's `re.fullmatch` for regexes, `json.loads` for JSON grammars, lark's own Earley
parser for Lark grammars, and the brute-force IR matchers of test_passes (`ir_accepts`,
`bounded_language`).  The last section compiles the test grammars with the real engine
(pushmask.GrammarCompiler, SmolLM2 tokenizer) and checks `GrammarMatcher.accept_string`
against the same oracles.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import interegular
import lark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import accepts_text, all_strings, bounded_language, ir_accepts

from pushmask.core.errors import GrammarError
from pushmask.grammar.ebnf import parse_ebnf
from pushmask.grammar.ir import (
    NOTHING,
    CharClass,
    CharFsm,
    Grammar,
    Ref,
    alt,
    char_class,
    lit,
    opt,
    plus,
    rep,
    seq,
    star,
)
from pushmask.grammar.lark_frontend import parse_lark
from pushmask.grammar.passes import left_recursive_rules, normalize
from pushmask.grammar.regex import fsm_to_char_fsm, parse_regex, regex_to_ir

GRAMMARS = Path(__file__).parent / "grammars"
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def regex_accepts(pattern: str, text: str) -> bool:
    return ir_accepts(parse_regex(pattern), text)


# =============================================================================================
# Regex


REGEX_CASES = [  # (pattern, alphabet for random strings, one string it matches)
    (r"[a-c]+@x\.(com|org)", "abc@x.orgm", "ab@x.com"),
    (r"\d{2,4}-?\d*", "0123-a", "012-3"),
    (r"(ab|a)*b?", "ab", "aabab"),
    (r"[^a-c\n]x.", "abcx\nz", "zxa"),
    (r"(?i)sel(ect)?", "selectSELCT", "SeLecT"),
    (r"a{3}|b{0,2}c{2,}", "abc", "bccc"),
    (r"\w+\s\W", "a_1 !\t", "a_1\t!"),
    (r"[\]\\-]+", "]\\-a", "]-\\"),
    (r"(?:x|y)+?z", "xyz", "xyxz"),
    (r"\u00e9[\u0100-\u0102]\x41", "\u00e9\u0100\u0101\u0102Aa", "\u00e9\u0101A"),
    # large classes take the interval-compression path
    (
        r"[\u0100-\u2000]+\u0150[^\u0080-\uffff\d]",
        "\u00ff\u0100\u0150\u2000\u2001\U0001f6001a\uffff",
        "\u0100\u2000\u0150\U0001f600",
    ),
    (r"[\x00-\u07ff]{2}|[^\x00-\u00ff]", "\x00\xff\u0100\u07ff\u0800\U0010ffffab", "\x00\u07ff"),
]


@pytest.mark.parametrize("pattern, alphabet, example", REGEX_CASES)
@FAST
@given(data=st.data())
def test_regex_matches_python_fullmatch(pattern, alphabet, example, data):
    matching = st.from_regex(re.compile(pattern, re.ASCII), fullmatch=True)
    text = data.draw(st.one_of(st.text(alphabet=alphabet, max_size=8), matching))
    expected = re.fullmatch(pattern, text, re.ASCII) is not None
    assert regex_accepts(pattern, text) == expected


@pytest.mark.parametrize("pattern, alphabet, example", REGEX_CASES)
def test_regex_examples(pattern, alphabet, example):
    assert re.fullmatch(pattern, example, re.ASCII)
    assert regex_accepts(pattern, example)
    assert not regex_accepts(pattern, example + "\n")


def test_regex_anything_else_is_the_complement_without_surrogates():
    fsm = regex_to_ir("[^ab]")
    assert isinstance(fsm, CharFsm)
    ranges = sorted((lo, hi) for _, lo, hi, _ in fsm.transitions)
    assert ranges == [(0, 0x60), (0x63, 0xD7FF), (0xE000, 0x10FFFF)]
    for ch in ["\x00", "\n", "é", "\U0001f600", "\U0010ffff"]:
        assert regex_accepts("[^ab]", ch)
    assert not regex_accepts("[^ab]", "a")
    # `.` excludes only newline
    assert regex_accepts(".", "\U0001f600") and not regex_accepts(".", "\n")


def test_regex_large_classes_stay_intervals():
    # Classes are kept as code-point intervals, not one edge per character (a counted repetition
    # makes the pattern an IR tree; automaton=True asks for interegular's automaton).
    fsm = regex_to_ir(r"[\x00-\U0010FFFF]*[\u4e00-\u9fff]{1,3}", automaton=True)
    assert len(fsm.transitions) < 50
    tree = regex_to_ir(r"[\x00-\U0010FFFF]*[\u4e00-\u9fff]{1,3}")
    assert tree.items[1] == rep(CharClass(((0x4E00, 0x9FFF),)), 1, 3)
    g = Grammar({"root": fsm})
    assert ir_accepts(g, "\U0001f600\u4e00\u9fff") and not ir_accepts(g, "\u4e00\ua000")


def test_regex_dead_states_are_dropped_and_states_renumbered():
    fsm = regex_to_ir("ab|ac")
    states = {s for t in fsm.transitions for s in (t[0], t[3])} | {fsm.initial}
    assert fsm.initial == 0 and states == set(range(len(states)))
    # every state reaches a final state
    for state in states:
        seen, todo = {state}, [state]
        while todo:
            s = todo.pop()
            for src, _, _, dst in fsm.transitions:
                if src == s and dst not in seen:
                    seen.add(dst)
                    todo.append(dst)
        assert seen & fsm.finals


def test_regex_structure_and_anchors():
    g = parse_regex("^ab$")
    assert g.root == "root" and list(g.rules) == ["root"]
    assert regex_accepts("^ab$", "ab") and not regex_accepts("^ab$", "ab\n")
    assert regex_accepts(r"a\$", "a$")
    with pytest.raises(GrammarError, match="unterminated"):  # as in Python, `[]...` needs a closing ']'
        regex_to_ir("a[]")
    assert regex_accepts("[]a]", "]") and regex_accepts("[^]a]", "b") and not regex_accepts("[^]a]", "]")


def test_fsm_to_char_fsm_on_products():
    """Other front ends build FSMs with interegular operations and convert them."""
    words = interegular.parse_pattern("[a-z]{1,4}").to_fsm()
    keywords = interegular.parse_pattern("if|in").to_fsm()
    identifiers = fsm_to_char_fsm(words.difference(keywords))
    g = Grammar({"root": identifiers})
    for s in ["i", "if", "in", "int", "abcd", "abcde", "", "I"]:
        assert ir_accepts(g, s) == (re.fullmatch("[a-z]{1,4}", s) is not None and s not in ("if", "in")), s
    assert fsm_to_char_fsm(words & interegular.parse_pattern("[0-9]").to_fsm()) == NOTHING


@pytest.mark.parametrize(
    "pattern, column, words",
    [
        (r"(a)\1", 4, "backreference"),
        (r"ab(?=c)", 3, "lookaround"),
        (r"x(?<!y)z", 2, "lookaround"),
        (r"(?P<n>a)(?P=n)", 9, "backreference"),
        (r"a\bc", 2, "boundary"),
        (r"\p{L}", 1, "property"),
        (r"a^b", 2, "'^'"),
        (r"a$b", 2, "'$'"),
        (r"(ab", 4, "invalid"),
        (r"ab)", 3, "invalid"),
        (r"[z-a]", 4, "range"),
        (r"[abc", 5, "unterminated"),
        (r"\u12", 1, "hex"),
        (r"(?x)a", 4, "Flag x"),
        ("a{3,1}", 1, "repetition"),
    ],
)
def test_regex_errors_have_column_and_hint(pattern, column, words):
    with pytest.raises(GrammarError) as info:
        regex_to_ir(pattern)
    assert info.value.line == 1 and info.value.column == column, str(info.value)
    assert words in str(info.value)


REGEX_FUZZ_PIECES = list("ab()[]\\|*+?{},.^$-dwsxu0123:=!<Pki") + [
    "\\u00e9",
    "[\\u0100-\\u2000]",
    "(?i)",
    "(?<",
    "\\x4",
]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(REGEX_FUZZ_PIECES), max_size=10))
def test_regex_fuzz_never_crashes(pieces):
    """Any pattern either converts or raises GrammarError with a position, never another exception."""
    try:
        regex_to_ir("".join(pieces))
    except GrammarError as exc:
        assert exc.line == 1 and exc.column is not None and exc.column >= 1


def test_regex_case_folding_with_multichar_uppercase():
    # "\u0149".upper() is two characters; interegular puts that string in its alphabet
    assert regex_accepts("(?i)x[\u0100-\u0150]", "X\u0149")
    assert not regex_accepts("(?i)x[\u0100-\u0150]", "X\u02bcN")


# =============================================================================================
# EBNF / GBNF


def test_ebnf_structure():
    g = parse_ebnf(
        """
        # a comment
        root ::= item ("," item)* # trailing comment
        item ::= [a-z_] [a-z0-9-]{0,3} | "\\u00e9\\t" | . | 'x'{2} "y"{1,} "z"?
        """
    )
    assert list(g.rules) == ["root", "item"]
    assert g.positions == {"root": (3, 9), "item": (4, 9)}
    assert g.rules["root"] == seq(Ref("item"), star(seq(lit(","), Ref("item"))))
    assert g.rules["item"] == alt(
        seq(
            char_class([(ord("_"), ord("_")), (ord("a"), ord("z"))]),
            rep(char_class([(ord("-"), ord("-")), (ord("0"), ord("9")), (ord("a"), ord("z"))]), 0, 3),
        ),
        lit("\u00e9\t"),
        char_class([(0, 0x10FFFF)]),
        seq(rep(lit("x"), 2, 2), plus(lit("y")), opt(lit("z"))),
    )


def test_ebnf_escapes_in_strings_and_classes():
    g = parse_ebnf(r'root ::= "\n\r\t\\\"\'\x41\u00e9\U0001F600" [\]\-\\^a\x00-\x1F] [^"\\]')
    items = g.rules["root"].items
    assert items[0] == lit("\n\r\t\\\"'A\u00e9\U0001f600")
    assert items[1] == CharClass(((0, 0x1F), (0x2D, 0x2D), (0x5C, 0x5E), (0x61, 0x61)))
    assert items[2] == char_class([(0x22, 0x22), (0x5C, 0x5C)], negated=True)


def test_ebnf_multiline_rules_and_empty_alternatives():
    text = 'root ::= "a"\n    "b"\n  | "c"\nws ::= | " " | "\\n" [ \\t]{0,2}\nother ::= (\n "x"\n |\n "y"\n)'
    g = parse_ebnf(text)
    assert g.rules["root"] == alt(lit("ab"), lit("c"))
    assert bounded_language(Grammar(g.rules, "ws"), " \n\t", 3) == {
        "",
        " ",
        "\n",
        "\n ",
        "\n\t",
        "\n  ",
        "\n \t",
        "\n\t ",
        "\n\t\t",
    }
    assert g.rules["other"] == alt(lit("x"), lit("y"))
    assert g.positions["other"] == (5, 1)


def test_ebnf_custom_root_and_xgrammar_lookahead_suffix():
    g = parse_ebnf('main ::= "a" b\nb ::= "b" (= "c")', root="main")
    assert g.root == "main" and g.rules["b"] == lit("b")


@pytest.mark.parametrize(
    "text, line, column, words",
    [
        ("root ::= foo", 1, 10, "undefined rule 'foo'"),
        ('root ::= "a"\n  | bar "b"', 2, 5, "undefined rule 'bar'"),
        ('root ::= ("a" | "b"', 1, 10, "unbalanced '('"),
        ('root ::= "a")', 1, 13, "unbalanced ')'"),
        ("root ::= [a-z", 1, 10, "unbalanced '['"),
        ('root ::= "abc', 1, 10, "unbalanced quote"),
        ("root ::= 'abc\n", 1, 10, "unbalanced quote"),
        ('root ::= "\\q"', 1, 11, "bad escape \\q"),
        ("root ::= [\\x4]", 1, 11, "bad escape \\x"),
        ('root ::= "\\uD800"', 1, 11, "not a Unicode scalar"),
        ('foo ::= "a"', 1, 1, "no root rule 'root'"),
        ('root ::= "a"\nroot ::= "b"', 2, 1, "defined twice"),
        ('root "a"', 1, 6, "expected '::='"),
        ('root ::= "a"{3,1}', 1, 13, "max < min"),
        ('root ::= "a"{x}', 1, 13, "expected a number"),
        ('root ::= "a"{2', 1, 13, "unbalanced '{'"),
        ('root ::= * "a"', 1, 10, "nothing to repeat"),
        ("root ::= [z-a]", 1, 11, "bad character range"),
        ('root ::= "a" @', 1, 14, "unexpected"),
    ],
)
def test_ebnf_errors_have_line_and_column(text, line, column, words):
    with pytest.raises(GrammarError) as info:
        parse_ebnf(text)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert words in str(info.value)


EBNF_FUZZ_PIECES = list("root::=|()[]\"\\ax*+?{},.#\n -^'") + ["root ::= ", "\\x4", "\\u00e9", "a ::= ", "{2,3}", "(="]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(EBNF_FUZZ_PIECES), max_size=12))
def test_ebnf_fuzz_never_crashes(pieces):
    """Any text either parses and normalizes, or raises GrammarError (never another exception)."""
    try:
        normalize(parse_ebnf("".join(pieces)))
    except GrammarError:
        pass


def test_ebnf_empty_language_error_through_pipeline():
    g = parse_ebnf('root ::= "x" inf\ninf ::= "y" inf')
    with pytest.raises(GrammarError, match="accepts no string") as info:
        normalize(g)
    assert (info.value.line, info.value.column) == (1, 1)


EBNF_FILE_CASES = {  # file -> (strings in the language, strings outside it)
    "llama_json.gbnf": (
        ['{"a": [1, 2.5, "x\\n"], "b": {"c": null}}', '{\n  "k": true}'],
        ['{"a": [1, 2,]}', "[1]"],
    ),  # llama.cpp's root is an object
    "llama_json_legacy.gbnf": (['{ "a" :\t[1, {"b": "\\u00e9\\/"}] }'], ['{"a": 01}']),
    "chess.gbnf": (["1. e4 e5\n2. Nf3 Nc6\n3. O-O exd4\n"], ["1. e4 e9\n2. Nf3 Nc6\n", "1. e4 e5\n"]),
    "arithmetic.gbnf": (["x=(y+1)\na +b = 2\n"], ["x=(y+1)*2\n", "x=1"]),  # one term after '='
    "list.gbnf": (["- milk\n- eggs \u00e9\n"], ["- milk\u2028\n", "", "-milk\n"]),
    "c.gbnf": (
        ["int main(){int x = 1;x = x*2+f(x);return x;}", "float f(int a){while(a<3){a = a+1;}/* done */}"],
        ["int main(){x = ;}", "int main(){x = x + 1;}"],
    ),  # no spaces inside expressions
    "json.gbnf": (['{"a": [1, -2.5e3, "\\u00e9"], "b": null}', "0", ' "x" '], ["{'a': 1}", "[1,]", "01", '"\\x"']),
    "parens.ebnf": (["", "()", "[()[]]"], ["(", ")(", "(]", "( )"]),
}


@pytest.mark.parametrize("file", sorted(EBNF_FILE_CASES))
def test_llama_cpp_and_test_grammars_mean_what_they_say(file):
    """Each grammar file loads with root "root" and derives its sample outputs and nothing
    near them (ir_accepts, a brute-force matcher over the normalized grammar)."""
    g = parse_ebnf((GRAMMARS / file).read_text())
    assert g.root == "root"
    normalized = normalize(g)
    good, bad = EBNF_FILE_CASES[file]
    for text in good:
        assert ir_accepts(normalized, text), text
    for text in bad:
        assert not ir_accepts(normalized, text), text


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8,
)


@st.composite
def json_documents(draw):
    value = draw(json_values)
    indent = draw(st.sampled_from([None, 0, 2, "\t"]))
    separators = draw(st.sampled_from([None, (",", ":"), (", ", ": ")]))
    return json.dumps(value, indent=indent, separators=separators, ensure_ascii=draw(st.booleans()))


@pytest.fixture(scope="module")
def strict_json():
    return normalize(parse_ebnf((GRAMMARS / "json.gbnf").read_text()))


@FAST
@given(doc=json_documents())
def test_json_gbnf_accepts_serialized_json(strict_json, doc):
    assert ir_accepts(strict_json, doc)


@FAST
@given(text=st.text(alphabet='{}[]":,1-0.e \\nu', max_size=10))
def test_json_gbnf_agrees_with_json_loads(strict_json, text):
    try:
        json.loads(text)
        valid = True
    except ValueError:
        valid = False
    assert ir_accepts(strict_json, text) == valid


def test_json_gbnf_bounded_language_equals_json_loads(strict_json):
    alphabet = '[]{}":,1 '
    language = bounded_language(strict_json, alphabet, 4)
    for s in all_strings(alphabet, 4):
        try:
            json.loads(s)
            valid = True
        except ValueError:
            valid = False
        assert (s in language) == valid, s


# =============================================================================================
# Lark


def lark_oracle(text: str, start: str = "start") -> lark.Lark:
    # dynamic_complete considers every split of the input into terminals, like our scannerless IR
    return lark.Lark(text, start=start, parser="earley", lexer="dynamic_complete")


def lark_accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def test_lark_structure_terminals_and_helper_rules():
    g = parse_lark('start: "a"i NAME+ | "b"\nNAME: /[x-z]+/\n')
    assert g.root == "start"
    assert any(name.startswith("__start_plus") for name in g.rules)
    # EBNF operators become left-recursive helper rules, removed by normalize
    assert left_recursive_rules(g)
    assert left_recursive_rules(normalize(g)) == []
    # case-insensitive literal: one class per character
    assert any(body == char_class([(ord("A"), ord("A")), (ord("a"), ord("a"))]) for body in g.rules.values())
    assert isinstance(g.rules["NAME"], CharFsm)
    # and the language is lark's, on every short string
    oracle = lark_oracle('start: "a"i NAME+ | "b"\nNAME: /[x-z]+/\n')
    language = bounded_language(normalize(g), "aAbxz", 4)
    assert {"b", "ax", "Azx", "axz"} <= language
    for s in all_strings("aAbxz", 4):
        assert (s in language) == lark_accepts(oracle, s), s


def test_lark_templates_ranges_priorities_and_keep_tokens_match_oracle():
    text = """
start: _sep{item, ","} | pair
_sep{x, sep}: x (sep x)*
!pair.2: "(" item ~ 2..3 ")"
item: LETTER | _INNER
_INNER: "b".."c"
LETTER.2: "a"i
%import common (WS_INLINE)
"""
    g = normalize(parse_lark(text))
    oracle = lark_oracle(text)
    language = bounded_language(g, "aAb,()", 5)
    assert len(language) > 20
    for s in all_strings("aAb,()", 5):
        assert (s in language) == lark_accepts(oracle, s), s


def test_lark_declared_terminal_is_an_error():
    with pytest.raises(GrammarError, match="declare") as info:
        parse_lark('start: "a" _INDENT\n%declare _INDENT\n')
    assert info.value.line == 1


def test_lark_ignore_goes_between_symbols_not_inside_terminals():
    text = 'start: WORD "," WORD\nWORD: /[a-z]+/\n%ignore " "\n'
    g = normalize(parse_lark(text))
    assert ir_accepts(g, " ab ,  cd ")
    assert ir_accepts(g, "ab,cd")
    assert not ir_accepts(g, "a b,cd")  # no skip inside a terminal
    oracle = lark_oracle(text)
    for s in all_strings("a, ", 5):
        assert ir_accepts(g, s) == lark_accepts(oracle, s), s


def test_lark_escaped_string_and_comment_follow_lexer_semantics():
    text = (
        'start: item*\nitem: ESCAPED_STRING | C_COMMENT | "x"\n'
        "%import common.ESCAPED_STRING\n%import common.C_COMMENT\n"
    )
    g = normalize(parse_lark(text))
    assert ir_accepts(g, r'"a\"b"') and ir_accepts(g, r'"a\\"')
    assert not ir_accepts(g, r'"a\"')
    assert ir_accepts(g, '"a""b"')  # two strings
    assert ir_accepts(g, "/* a */x/* b */") and ir_accepts(g, "/**/")
    oracle = lark_oracle(text)
    for s in all_strings('"\\ax', 5):
        assert ir_accepts(g, s) == lark_accepts(oracle, s), s
    for s in all_strings("/*x", 6):
        assert ir_accepts(g, s) == lark_accepts(oracle, s), s


@pytest.mark.parametrize(
    "text, line, column, words",
    [
        ('start: "a" (b\nb: "x"\n', 1, 14, "syntax error"),
        ('start "a"\n', 1, 7, "expected ':' after rule name"),
        ("start: a\n", 1, 1, "unknown name 'a'"),
        ("start: A\nA: /a(?=b)/\n", 2, 1, "lookaround"),
        ('start: "a"\n\nstart: "b"\n', 1, 1, "duplicate rule or terminal 'start'"),
        ('start: "a\n', 1, 8, "unterminated string literal"),
    ],
)
def test_lark_errors_have_line_and_column(text, line, column, words):
    with pytest.raises(GrammarError) as info:
        parse_lark(text)
    assert (info.value.line, info.value.column) == (line, column), str(info.value)
    assert words in str(info.value)


def test_lark_bad_regex_is_a_grammar_error():
    with pytest.raises(GrammarError, match="invalid lark grammar"):
        parse_lark("start: /a(/\n")


def test_lark_missing_start_rule():
    with pytest.raises(GrammarError):
        parse_lark('begin: "a"\n')


@pytest.fixture(scope="module")
def sql():
    text = (GRAMMARS / "sql.lark").read_text()
    return normalize(parse_lark(text)), lark_oracle(text)


SQL_TOKENS = [
    "SELECT",
    "select",
    " ",
    "a",
    "b1",
    "*",
    ",",
    "FROM",
    "t",
    "WHERE",
    "=",
    "<>",
    "1",
    "-2.5",
    "'x'",
    "AND",
    "or",
    "NOT",
    "(",
    ")",
    ";",
    "--c\n",
    "AS",
    "ORDER BY",
    "DESC",
    "LIMIT",
    ".",
    "+",
    "JOIN",
    "ON",
]


@st.composite
def sql_queries(draw):
    """Mostly-valid SELECT statements with random case, spacing and comments."""

    def kw(word):
        return "".join(c.upper() if draw(st.booleans()) else c.lower() for c in word)

    def gap():
        return draw(st.sampled_from([" ", "  ", "\n", " --note\n", "\t"]))

    names = st.sampled_from(["a", "b_2", "t", "users", "x1"])
    column = draw(names) + (("." + draw(names)) if draw(st.booleans()) else "")
    cols = draw(st.sampled_from(["*", column, f"{column}{gap()},{gap()}{draw(names)}", f"count(*) {kw('as')} n"]))
    query = f"{kw('select')}{gap()}{cols}{gap()}{kw('from')}{gap()}{draw(names)}"
    if draw(st.booleans()):
        query += f"{gap()}{kw('where')}{gap()}{draw(names)}{gap()}={gap()}{draw(st.sampled_from(['1', chr(39) + 'v' + chr(39), '-3.5']))}"
    if draw(st.booleans()):
        query += f"{gap()}{kw('limit')} {draw(st.integers(0, 99))}"
    return query + draw(st.sampled_from(["", ";", " ;"]))


@FAST
@given(query=sql_queries())
def test_sql_lark_accepts_generated_queries(sql, query):
    grammar, oracle = sql
    assert lark_accepts(oracle, query), query  # the generator itself produces valid SQL
    assert ir_accepts(grammar, query)


@FAST
@given(tokens=st.lists(st.sampled_from(SQL_TOKENS), max_size=9))
def test_sql_lark_agrees_with_lark_on_token_soup(sql, tokens):
    grammar, oracle = sql
    text = "".join(tokens)
    assert ir_accepts(grammar, text) == lark_accepts(oracle, text), text


@pytest.fixture(scope="module")
def json_lark():
    text = (GRAMMARS / "json.lark").read_text()
    return normalize(parse_lark(text)), lark_oracle(text)


@FAST
@given(doc=json_documents())
def test_json_lark_accepts_serialized_json(json_lark, doc):
    grammar, oracle = json_lark
    assert ir_accepts(grammar, doc) == lark_accepts(oracle, doc)
    if "\\u" not in doc and "\n" not in doc.replace("\\n", ""):  # ESCAPED_STRING forbids raw newlines
        assert ir_accepts(grammar, doc)


# =============================================================================================
# The real engine: compile with SmolLM2's tokenizer and match strings with GrammarMatcher.


@pytest.fixture(scope="module")
def compiler(request):
    """The session-wide SmolLM2 compiler from conftest (shares the mask cache with other tests)."""
    return request.getfixturevalue("smollm2_compiler")


@pytest.fixture(scope="module")
def engine_json(compiler):
    return compiler.compile_grammar((GRAMMARS / "json.gbnf").read_text())


@FAST
@given(doc=json_documents())
def test_engine_json_gbnf_accepts_serialized_json(engine_json, doc):
    assert accepts_text(engine_json, doc)


@FAST
@given(text=st.text(alphabet='{}[]":,1-0.e \\nu', max_size=10))
def test_engine_json_gbnf_agrees_with_json_loads(engine_json, text):
    try:
        json.loads(text)
        valid = True
    except ValueError:
        valid = False
    assert accepts_text(engine_json, text) == valid, text


@FAST
@given(tokens=st.lists(st.sampled_from(SQL_TOKENS), max_size=9))
def test_engine_sql_lark_agrees_with_lark(compiler, sql, tokens):
    compiled = _compiled_sql(compiler)
    text = "".join(tokens)
    assert accepts_text(compiled, text) == lark_accepts(sql[1], text), text


_SQL_CACHE: dict = {}


def _compiled_sql(compiler):
    if "sql" not in _SQL_CACHE:
        _SQL_CACHE["sql"] = compiler.compile_lark((GRAMMARS / "sql.lark").read_text())
    return _SQL_CACHE["sql"]


@FAST
@given(query=sql_queries())
def test_engine_sql_lark_accepts_generated_queries(compiler, query):
    assert accepts_text(_compiled_sql(compiler), query), query


@pytest.mark.parametrize("file, alphabet, max_len", [("arithmetic.lark", "1+*(- ", 4), ("parens.lark", "()[]", 5)])
def test_engine_lark_grammars_match_lark_exhaustively(compiler, file, alphabet, max_len):
    text = (GRAMMARS / file).read_text()
    compiled = compiler.compile_lark(text)
    oracle = lark_oracle(text)
    accepted = 0
    for s in all_strings(alphabet, max_len):
        expected = lark_accepts(oracle, s)
        accepted += expected
        assert accepts_text(compiled, s) == expected, s
    assert accepted > 0


def test_engine_indirect_left_recursion_matches_source_language(compiler):
    """The helper rules of indirect left-recursion elimination compile and keep the language."""
    text = "\n".join(["root ::= a0"] + [f'a{i} ::= a{(i + 1) % 4} "o" | a0 "p" | "x{i % 2}"' for i in range(4)])
    compiled = compiler.compile_grammar(text)
    language = bounded_language(parse_ebnf(text), "opx01", 4)  # from the left-recursive source
    assert len(language) >= 7
    for s in all_strings("opx01", 4):
        assert accepts_text(compiled, s) == (s in language), s


@pytest.mark.parametrize(
    "file, good, bad",
    [
        ("llama_json.gbnf", ['{"a": [1, 2.5, "x\\n"], "b": {"c": null}}', "{}"], ['{"a": [1, 2,]}', "[1]"]),
        ("chess.gbnf", ["1. e4 e5\n2. Nf3 Nc6\n"], ["1. e4 e9\n2. Nf3 Nc6\n", "1. e4 e5\n"]),
        ("arithmetic.gbnf", ["x=(y+1)\n", "a +b = 2\n"], ["x=\n", "(x=1\n", "x=(y+1)*2\n"]),
        ("list.gbnf", ["- milk\n- eggs \u00e9\n"], ["- milk\u2028\n", "milk\n"]),
        ("parens.ebnf", ["", "()[()]", "[[]]()"], ["(]", "(()", ")("]),
        ("llama_json_legacy.gbnf", ['{ "a" :\t[1, {"b": "\\u00e9"}] }'], ['{"a": 01}', '{"a" 1}']),
        ("c.gbnf", ["int main(){int x = 1;x = x*2+f(x);return x;}"], ["int main(){x = x + 1;}"]),
    ],
)
def test_engine_ebnf_grammars(compiler, file, good, bad):
    compiled = compiler.compile_grammar((GRAMMARS / file).read_text())
    ir = normalize(parse_ebnf((GRAMMARS / file).read_text()))
    for s in good:
        assert ir_accepts(ir, s), s  # the expectations themselves are right
        assert accepts_text(compiled, s), s
    for s in bad:
        assert not ir_accepts(ir, s), s
        assert not accepts_text(compiled, s), s


@FAST
@given(data=st.data())
@pytest.mark.parametrize("pattern, alphabet, example", REGEX_CASES[:6])
def test_engine_regex_matches_python(compiler, pattern, alphabet, example, data):
    compiled = _compiled_regex(compiler, pattern)
    matching = st.from_regex(re.compile(pattern, re.ASCII), fullmatch=True)
    text = data.draw(st.one_of(st.text(alphabet=alphabet, max_size=8), matching))
    assert accepts_text(compiled, text) == (re.fullmatch(pattern, text, re.ASCII) is not None), text


_REGEX_CACHE: dict = {}


def _compiled_regex(compiler, pattern):
    if pattern not in _REGEX_CACHE:
        _REGEX_CACHE[pattern] = compiler.compile_regex(pattern)
    return _REGEX_CACHE[pattern]


# ---------------------------------------------------------------------------------------------
# to_grammar: the one dispatch, and the Limits it threads to each front end


def test_to_grammar_dispatches_every_kind_to_its_front_end():
    from pushmask.grammar.frontends import to_grammar

    cases = [
        ("ebnf", 'root ::= "a" [0-9]{2}', {}, ["a12"], ["a1", "b12"]),
        ("ebnf", 'top ::= "x"+', {"root": "top"}, ["xxx"], [""]),
        ("lark", 'start: "a" B\nB: /[0-9]{2}/', {}, ["a12"], ["a123"]),
        ("regex", "(ab)+c?", {}, ["abab", "abc"], ["abcc", ""]),
        ("choice", ["yes", "no"], {}, ["yes", "no"], ["yesno", "maybe"]),
        ("json_schema", {"type": "integer", "minimum": 10}, {}, ["10", "123"], ["9", "1.5"]),
    ]
    for kind, spec, options, good, bad in cases:
        grammar = to_grammar(kind, spec, **options)
        for text in good:
            assert ir_accepts(grammar, text), (kind, text)
        for text in bad:
            assert not ir_accepts(grammar, text), (kind, text)
    with pytest.raises(ValueError, match="unknown grammar kind 'gbnf'"):
        to_grammar("gbnf", 'root ::= "a"')


def test_to_grammar_holds_each_front_end_to_the_limits():
    from pushmask import LimitExceededError, Limits
    from pushmask.grammar.frontends import to_grammar

    assert ir_accepts(to_grammar("ebnf", 'root ::= "a"{5}', limits=Limits(max_repeat=5)), "aaaaa")
    with pytest.raises(GrammarError, match="max_repeat"):
        to_grammar("ebnf", 'root ::= "a"{5}', limits=Limits(max_repeat=4))
    nested = "(" * 6 + "a" + ")" * 6
    to_grammar("regex", nested, limits=Limits(max_nesting=7))
    for kind, spec in (("regex", nested), ("ebnf", f"root ::= {nested.replace('a', chr(34) + 'a' + chr(34))}")):
        with pytest.raises(GrammarError):
            to_grammar(kind, spec, limits=Limits(max_nesting=4))
    with pytest.raises(LimitExceededError):
        to_grammar("regex", "a{5000}", limits=Limits(max_rule_states=1000))
    with pytest.raises(LimitExceededError):
        to_grammar("lark", "start: /a{5000}/", limits=Limits(max_rule_states=1000))
    tag = {"type": "structural_tag", "format": {"type": "regex", "pattern": "a{5000}"}}
    assert ir_accepts(to_grammar("structural_tag", tag), "a" * 5000)
    with pytest.raises(LimitExceededError):
        to_grammar("structural_tag", tag, limits=Limits(max_rule_states=1000))
    deep = {"type": "array", "items": {"type": "array", "items": {"type": "array"}}}
    to_grammar("json_schema", deep, limits=Limits(max_schema_depth=8))
    with pytest.raises(LimitExceededError):
        to_grammar("json_schema", {"type": "array", "items": deep}, limits=Limits(max_schema_depth=2))
