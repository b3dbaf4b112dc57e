"""A `Regex(...)` pattern pushmask cannot compile, read by `Grammar.from_ebnf`: refused when the
grammar is compiled (XGrammar's order: its tests read the grammar, then expect the error from the
first compile), with the pattern, the rule and its line and column, and never a matcher.  The
oracle: the error each pattern raises when the same grammar text is compiled directly (its
message must be in the deferred one), and the position of `Regex(` in the text."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

import pushmask as pm
from pushmask.testing import _is_grammar_accept_string

REFUSED = [
    (r'root ::= Regex("a\\b")', "Word boundary assertion", pm.GrammarError),
    (r'root ::= Regex("a\\B")', "Word boundary assertion", pm.GrammarError),
    (r'root ::= Regex("\\p{L}")', "Unicode property escape", pm.GrammarError),
    (r'root ::= Regex("(a)\\1")', "Backreference", pm.GrammarError),
    (r'root ::= Regex("(?<name>a)\\k<name>")', "Backreference", pm.GrammarError),
    ('root ::= Regex("(?<=a)b")', "Lookbehind assertion", pm.GrammarError),
    ('root ::= Regex("a(?=b)c")', "Lookahead assertion", pm.GrammarError),
    ('root ::= Regex("[]")', "Empty character class", pm.GrammarError),
    (r'root ::= Regex("\\uZZ")', "must be followed by four hexadecimal digits", pm.GrammarError),
    (r'root ::= Regex("\\x4")', "must be followed by two hexadecimal digits", pm.GrammarError),
    (r'root ::= Regex("\\u{110000}")', "beyond the Unicode range", pm.GrammarError),
    ('root ::= Regex("+a")', "invalid regex", pm.GrammarError),
]


@pytest.fixture(scope="module")
def compiler():
    return pm.GrammarCompiler(pm.TokenizerInfo(["a", "b", "c", "ab", "</s>"]))


def direct_error(compiler, ebnf: str) -> Exception:
    """The error compiling the text itself raises (no Grammar in between)."""
    with pytest.raises(RuntimeError) as error:
        compiler.compile_grammar(ebnf)
    return error.value


@pytest.mark.parametrize(("ebnf", "words", "kind"), REFUSED)
def test_refused_when_compiled_not_when_read(compiler, ebnf, words, kind):
    grammar = pm.Grammar.from_ebnf(ebnf)  # reading builds no automaton, so it does not raise
    assert isinstance(grammar.refusal, kind)
    direct = direct_error(compiler, ebnf)
    assert isinstance(direct, kind) and words in str(direct)
    for compile_it in (
        lambda: compiler.compile_grammar(grammar),
        lambda: _is_grammar_accept_string(grammar, "a"),
        lambda: compiler.compile_ir(grammar, normalize=False),
    ):
        with pytest.raises(kind) as error:
            compile_it()
        message = str(error.value)
        assert message.startswith("Failed to build the automaton for rule root: ")
        assert words in message and "(line 1, column 10)" in message  # where `Regex(` starts
        assert str(direct).split(": ", 1)[-1].split(" (line")[0] in message  # the same refusal


def test_the_first_refusal_names_its_rule_and_place(compiler):
    grammar = pm.Grammar.from_ebnf('root ::= "x" item\nitem ::= "y" | Regex("(?<=a)b") | Regex("\\\\1")')
    with pytest.raises(pm.GrammarError, match=r"rule item: in Regex\('\(\?<=a\)b'\): Lookbehind") as error:
        compiler.compile_grammar(grammar)
    assert (error.value.line, error.value.column) == (2, 16)


def test_other_errors_are_still_raised_when_read():
    with pytest.raises(pm.GrammarError, match="undefined rule 'nowhere'"):
        pm.Grammar.from_ebnf(r'root ::= Regex("a\\b") nowhere')
    with pytest.raises(pm.GrammarError, match="regular-expression flag 'm'"):
        pm.Grammar.from_ebnf('root ::= Regex("(?<=a)b") Regex("a", flags="m")')
    with pytest.raises(pm.GrammarError, match="Regex expects exactly one string argument"):
        pm.Grammar.from_ebnf("root ::= Regex()")


def test_every_grammar_built_from_it_keeps_the_refusal(compiler):
    bad = pm.Grammar.from_ebnf(r'root ::= Regex("a\\b")')
    good = pm.Grammar.from_ebnf('root ::= "a"')
    built = {
        "union": pm.Grammar.union(good, bad),
        "concat": pm.Grammar.concat(bad, good),
        "json": pm.Grammar.deserialize_json(bad.serialize_json()),
        "pickle": pickle.loads(pickle.dumps(bad)),
        "copy": bad.copy(),
        "named": pm.Grammar.from_lark("start: @bad", named_grammars={"bad": bad}),
    }
    for name, grammar in built.items():
        with pytest.raises(pm.GrammarError, match="Word boundary assertion") as error:
            compiler.compile_grammar(grammar)
        assert "Failed to build the automaton" in str(error.value), name
    with pytest.raises(pm.GrammarError, match="Word boundary assertion"):
        compiler.compile_lark("start: @bad", named_grammars={"bad": bad})
    payload = json.loads(bad.serialize_json())
    assert payload["refusal"][0] == "GrammarError" and payload["refusal"][2:] == [1, 10]


def test_a_grammar_that_lost_its_refusal_still_cannot_compile(compiler):
    """The refused pattern's place is a reference to a rule no text can define: a grammar
    rebuilt without its refusal is an undefined-rule error, never a matcher."""
    bad = pm.Grammar.from_ebnf(r'root ::= "a" | Regex("a\\b")')
    lost = dataclasses.replace(bad, refusal=None)
    with pytest.raises(pm.GrammarError, match="Regex refused at line 1, column 16"):
        compiler.compile_grammar(lost)


def test_good_patterns_are_unchanged(compiler):
    grammar = pm.Grammar.from_ebnf('root ::= "id-" Regex("[0-9]{3}") r\nr ::= Regex("(?i)x+")')
    assert grammar.refusal is None
    for text, accepted in (("id-042xX", True), ("id-42x", False), ("id-123", False)):
        assert _is_grammar_accept_string(grammar, text) == accepted


def test_a_token_id_past_every_vocabulary_is_refused_when_compiled(compiler):
    """`Token(id)` with an id no vocabulary pushmask compiles for has (2^24 or more): refused
    when the grammar is compiled, as XGrammar refuses an id outside the vocabulary."""
    grammar = pm.Grammar.from_ebnf('root ::= Token(2147483647) "c"\n')
    with pytest.raises(pm.GrammarError, match=r"Failed to build .*Token\(2147483647\): token id past") as error:
        compiler.compile_grammar(grammar)
    assert (error.value.line, error.value.column) == (1, 16)
    with pytest.raises(pm.GrammarError, match="token id"):  # EBNF text: in the same call
        compiler.compile_grammar('root ::= Token(2147483647) "c"\n')
    inside = pm.Grammar.from_ebnf("root ::= Token(1, 4)")
    assert inside.refusal is None
