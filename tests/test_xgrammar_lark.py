"""XGrammar's Lark dialect (grammar/lark_dialect.py): each construct checked against an
independent oracle -- lark's own Earley parser on the same grammar in lark's syntax, json.loads
with jsonschema, or brute force over token-id sequences -- and its errors, worded as XGrammar
words them, at the line and column of the user's text (issue 45)."""

from __future__ import annotations

import itertools
import json

import jsonschema
import lark
import pytest

import pushmask as pm

NO_VOCAB = pm.GrammarCompiler(pm.TokenizerInfo([]), cache_enabled=False)


def _accepts(grammar: pm.Grammar, text: str) -> bool:
    matcher = pm.GrammarMatcher(NO_VOCAB.compile_grammar(grammar), terminate_without_stop_token=True)
    return matcher.accept_string(text) and matcher.is_terminated()


def _lark_accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


def _strings(alphabet: str, max_len: int):
    for length in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=length):
            yield "".join(chars)


@pytest.mark.parametrize(
    ("dialect", "lark_syntax"),
    [
        ('start: "a"{2}', 'start: "a" ~ 2'),
        ('start: "a"{2,4}', 'start: "a" ~ 2..4'),
        ('start: "a"{2,}', 'start: "a" ~ 2 "a"*'),
        ('start: "a"{,2}', 'start: "a"? "a"?'),
        ('start: "a"{0} "b"', 'start: "b"'),
        ('start: ("a" | "bc"){2,3}', 'start: ("a" | "bc") ~ 2..3'),
        ('start: ITEM{1,}\nITEM: "a" | "b" "c"?', 'start: ITEM+\nITEM: "a" | "b" "c"?'),
        ('start: item{2}\nitem: "a" | "(" item ")"', 'start: item item\nitem: "a" | "(" item ")"'),
    ],
)
def test_counted_repetition_is_the_language_lark_reads_for_the_same_counts(dialect, lark_syntax):
    grammar = pm.Grammar.from_lark(dialect)
    parser = lark.Lark(lark_syntax, parser="earley", lexer="dynamic")
    for text in _strings("abc()", 5):
        assert _accepts(grammar, text) == _lark_accepts(parser, text), text


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": 2},
        {"enum": ["red", 3, None]},
        {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
    ],
)
def test_inline_json_accepts_exactly_the_instances_of_its_schema(schema):
    grammar = pm.Grammar.from_lark(f'start: "v=" %json {json.dumps(schema)} ";"')
    candidates = ['"ab"', '"abc"', '""', '"red"', "3", "null", "[]", "[true,false]", "[true,true,true]", "1.5", "x"]
    for value in candidates:
        try:
            expected = jsonschema.Draft202012Validator(schema).is_valid(json.loads(value))
        except json.JSONDecodeError:
            expected = False
        assert _accepts(grammar, f"v={value};") == expected, value


def test_nested_lark_and_named_grammars_have_their_own_names_and_ignores():
    text = 'start: item %lark {\n  start: item+\n  item: "b"\n  %ignore " "\n} @tail\nitem: "a"'
    grammar = pm.Grammar.from_lark(text, named_grammars={"tail": 'start: "[" @digit "]"', "digit": "start: /[0-9]/"})
    inlined = 'start: item inner tail\nitem: "a"\ninner: " "* "b" (" "* "b")* " "*\ntail: "[" /[0-9]/ "]"'
    parser = lark.Lark(inlined, parser="earley", lexer="dynamic")
    for text in ["ab[1]", "abb[1]", "ab b[2]", "aa[1]", "ab [1]", "a b[1]", "ab[x]", "ab", "a bb [1]"]:
        assert _accepts(grammar, text) == _lark_accepts(parser, text), text
    compiled = pm.GrammarCompiler(pm.TokenizerInfo([]), cache_enabled=False).compile_lark(
        "start: @x", named_grammars={"x": pm.Grammar.from_regex("[0-9]+")}
    )
    assert pm.GrammarMatcher(compiled, terminate_without_stop_token=True).accept_string("42")


def test_grammar_options_allow_initial_skip_false_refuses_leading_ignored_text():
    text = '%grammar_options {"allow_initial_skip": false}\nstart: "a" "b"\n%ignore " "'
    assert _accepts(pm.Grammar.from_lark(text), "a b ")
    assert not _accepts(pm.Grammar.from_lark(text), " ab")
    assert _accepts(pm.Grammar.from_lark(text.replace("false", "true")), " ab")


def test_token_sets_accept_exactly_the_ids_they_name():
    info = pm.TokenizerInfo(["a", "b", "c", "d", "e"])
    compiler = pm.GrammarCompiler(info, cache_enabled=False)
    for text, allowed in [
        ("start: <[0-1,3]>", {0, 1, 3}),
        ("start: <[^1,3]>", {0, 2, 4}),
        ("start: <[*]>", {0, 1, 2, 3, 4}),
    ]:
        compiled = compiler.compile_lark(text)
        for token in range(5):
            matcher = pm.GrammarMatcher(compiled, terminate_without_stop_token=True)
            assert (matcher.accept_token(token) and matcher.is_terminated()) == (token in allowed), (text, token)


@pytest.mark.parametrize(
    "chunks",
    [["ab", "c", "ab"], ["a", "", "b", "a"], ["x\0", "é🙂", "(/", "*\\"]],
)
@pytest.mark.parametrize("in_terminal", [False, True])
def test_structured_regex_is_every_run_of_consecutive_chunks(chunks, in_terminal):
    # The oracle: the runs c_i ... c_j (i <= j) and the empty run, by brute force; XGrammar's
    # substring_chunks, in a rule (EBNF's Substring) and in a terminal (a regex of the runs).
    runs = {""} | {"".join(chunks[i : j + 1]) for i in range(len(chunks)) for j in range(i, len(chunks))}
    spec = json.dumps({"substring_chunks": chunks})
    text = f'start: "<" RUN ">"\nRUN: %regex {spec}' if in_terminal else f'start: "<" %regex {spec} ">"'
    grammar = pm.Grammar.from_lark(text)
    assert all(_accepts(grammar, f"<{run}>") for run in runs)
    for length in range(4):
        for pieces in itertools.product({ch for chunk in chunks for ch in chunk}, repeat=length):
            candidate = "".join(pieces)
            assert _accepts(grammar, f"<{candidate}>") == (candidate in runs), candidate
    chars = pm.Grammar.from_lark('start: %regex {"substring_chars": "a🙂b"}')
    assert all(_accepts(chars, run) for run in ["", "a", "🙂", "a🙂", "🙂b", "a🙂b"])
    assert not any(_accepts(chars, text) for text in ["ab", "ba", "a🙂🙂"])


@pytest.mark.parametrize(
    ("text", "words", "line", "column"),
    [
        ('start: "a"{3,2}', "repetition end must be greater than or equal to start", 1, 11),
        ('start: "a"\nnext: "b"{-1,}', "invalid repetition count", 2, 10),
        ("start: %json {", "failed to parse JSON value after %json", 1, 14),
        ('start: "x"\n   | %json []', "failed to compile inline JSON schema", 2, 6),
        ('start: %lark { item: "a" }', "failed to compile nested Lark grammar", 1, 8),
        ("start: @missing", "unknown named grammar '@missing'", 1, 8),
        ('start: "a"\nA: "a" & "b"', "intersection '&' is not supported", 2, 8),
        ('start: x\nx[max_tokens=3]: "a"', "attribute 'max_tokens' is supported on a rule whose text may end", 2, 20),
        ("start: r\nr[max_tokens=3]: /([a-z]* )+/", "rule 'r' cannot end everywhere", 2, 20),
        ('start: "z".."a"', "range start must not exceed end", 1, 13),
        ('# comment\r\nstart: "a"\r\nitem missing', "expected ':' after rule name", 3, 6),
        ('start: "a" %json {"type": "string"} oops', "unknown name 'oops'", 1, 1),
        ("start: <[3-1]>", "invalid numeric special-token range", 1, 8),
        ("start: TOKEN\nTOKEN: <[1]>", "special tokens cannot be used in terminals", 2, 8),
        ('start: "a"\n  | %regex {"unknown": "a"}', "unknown field 'unknown' in %regex", 2, 5),
        ('start: %regex {"substring_chunks": ["a", 1]}', "substring_chunks must be an array of strings", 1, 8),
        ('start: %regex {"substring_words": "a b"}', "substring_words is not supported yet", 1, 8),
        ("start: /a\\b/", "Word boundary assertion", 1, 8),
        ("start: /\\p{L}/", "Unicode property escape", 1, 8),
        ("start: /[]/", "Empty character class", 1, 8),
        ('start: "a"\n  | /x\\uZZ/', "must be followed by four hexadecimal digits", 2, 7),
    ],
)
def test_dialect_errors_say_what_and_where_in_the_users_text(text, words, line, column):
    with pytest.raises(pm.GrammarError) as caught:
        pm.Grammar.from_lark(text)
    assert (caught.value.line, caught.value.column) == (line, column), str(caught.value)
    assert words in str(caught.value)
    assert str(caught.value).startswith(f"Lark error at line {line}, column {column}: ")


def test_named_grammars_are_checked_and_cycles_refused():
    with pytest.raises(pm.GrammarError, match="circular named grammar reference: @a -> @b -> @a"):
        pm.Grammar.from_lark("start: @a", named_grammars={"a": "start: @b", "b": "start: @a"})
    with pytest.raises(TypeError, match="must be a dictionary"):
        pm.Grammar.from_lark("start: @a", named_grammars=["start: x"])
    with pytest.raises(TypeError, match="values must be Grammar instances or Lark strings"):
        pm.Grammar.from_lark("start: @a", named_grammars={"a": 1})


def test_inline_json_nests_no_deeper_than_the_recursion_depth():
    with pm.max_recursion_depth(5):
        assert _accepts(pm.Grammar.from_lark('start: %json {"type": "array"}\n// [[[[[[[[[[[['), "[]")
        with pytest.raises(pm.GrammarError, match="Maximum recursion depth exceeded: the %json value nests 6 levels"):
            pm.Grammar.from_lark("start: %json " + "[" * 6 + "]" * 6)
