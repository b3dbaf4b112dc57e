"""The XGrammar 0.2.8 names and behaviours its own test suite relies on (benchmarks/xgrammar_suite.py
runs that suite): recursion depth, serialization version, errors that are also RuntimeErrors,
is_terminated with terminate_without_stop_token, EBNF repetitions written after a space.
The expected values are what XGrammar 0.2.8 does with the same calls."""

from __future__ import annotations

import itertools
import json
import re

import pytest

import pushmask as pm
from pushmask.testing import _is_grammar_accept_string


def nested_schema(depth: int) -> str:
    """A schema whose (unused) keyword holds `depth` nested arrays (XGrammar's own test)."""
    return '{"unused": ' + "[" * depth + "0" + "]" * depth + "}"


def test_max_recursion_depth_bounds_the_json_text_read():
    assert pm.get_max_recursion_depth() == 10_000
    with pm.max_recursion_depth(50):
        assert pm.get_max_recursion_depth() == 50
        pm.Grammar.from_json_schema(nested_schema(40))
        with pytest.raises(pm.SchemaError, match="Maximum recursion depth exceeded") as error:
            pm.Grammar.from_json_schema(nested_schema(60))
        assert isinstance(error.value, RuntimeError)  # what XGrammar raises
    assert pm.get_max_recursion_depth() == 10_000
    for bad in (0, -1, 10**8):
        with pytest.raises(pm.InvalidArgumentError, match="depth"):
            pm.set_max_recursion_depth(bad)


def test_text_deeper_than_pythons_json_reader_is_a_schema_error():
    """json.loads recurses; 5,000 levels used to escape as a RecursionError."""
    with pytest.raises(pm.SchemaError, match="Maximum recursion depth exceeded"):
        pm.Grammar.from_json_schema(nested_schema(5000))


def test_brackets_inside_strings_do_not_count_as_nesting():
    schema = json.dumps({"type": "string", "enum": ["[" * 100 + "{" * 100]})
    with pm.max_recursion_depth(5):
        assert _is_grammar_accept_string(pm.Grammar.from_json_schema(schema), json.dumps("[" * 100 + "{" * 100))


@pytest.mark.parametrize(
    "make",
    [
        lambda: pm.Grammar.from_ebnf('root ::= "a" "'),
        lambda: pm.Grammar.from_regex("a{3,1}"),
        lambda: pm.Grammar.from_json_schema({"type": "string", "enum": []}),
        lambda: pm.Grammar.from_json_schema({"type": "integer", "minimum": 5, "maximum": 3}),
    ],
)
def test_grammar_and_schema_errors_are_runtime_errors_as_in_xgrammar(make):
    with pytest.raises(RuntimeError) as error:
        make()
    assert isinstance(error.value, (pm.GrammarError, pm.SchemaError)) and isinstance(error.value, ValueError)


def test_another_format_version_is_a_deserialize_version_error():
    info = pm.TokenizerInfo(["a", "b"])
    text = pm.GrammarCompiler(info).compile_grammar('root ::= "a"').serialize_json()
    payload = json.loads(text)
    assert f"v{payload['version']}" == pm.get_serialization_version()
    payload["version"] += 1
    with pytest.raises(pm.DeserializeVersionError, match="format version") as error:
        pm.CompiledGrammar.deserialize_json(json.dumps(payload), info)
    assert isinstance(error.value, pm.DeserializeError) and isinstance(error.value, RuntimeError)


@pytest.mark.parametrize(
    ("ebnf", "text"),
    [('root ::= "ab"', "ab"), ('root ::= "a" "b"*', "a"), ('root ::= "a" "b"*', "abb"), ('root ::= "a" "b"', "a")],
)
def test_terminate_without_stop_token_terminates_once_complete(ebnf, text):
    """XGrammar: with terminate_without_stop_token, is_terminated() is is_completed(), even when
    the grammar could go on ("a" "b"* after "a"); without it, only a stop token terminates."""
    info = pm.TokenizerInfo(["a", "b", "</s>"])
    compiled = pm.GrammarCompiler(info).compile_grammar(ebnf)
    free = pm.GrammarMatcher(compiled, terminate_without_stop_token=True)
    plain = pm.GrammarMatcher(compiled)
    assert free.accept_string(text) and plain.accept_string(text)
    assert free.is_terminated() == free.is_completed() == plain.is_completed()
    assert not plain.is_terminated()
    if plain.is_completed():
        assert plain.accept_token(2) and plain.is_terminated()


@pytest.mark.parametrize(
    ("ebnf", "counts"),
    [
        ('root ::= "a" {2, 3}', {2, 3}),
        ('root ::= "a"{ 2 , 3 }', {2, 3}),
        ('root ::= "a"\n  {2}', {2}),
        ('root ::= "a" {2,}', {2, 3, 4, 5}),
        ('root ::= "a" *', {0, 1, 2, 3, 4, 5}),
        ('root ::= "a" ?', {0, 1}),
        ('root ::= ("a" "a") +', {2, 4}),
    ],
)
def test_a_repetition_may_follow_a_space(ebnf, counts):
    """Brute force over "a" * k, k <= 5, against the counts the repetition means."""
    grammar = pm.Grammar.from_ebnf(ebnf)
    for k in range(6):
        assert _is_grammar_accept_string(grammar, "a" * k) == (k in counts), (ebnf, k)


def test_a_repetition_after_a_space_still_needs_something_to_repeat():
    for ebnf in ("root ::= {2}", 'root ::= "a" | *', 'root ::= ( * "a")'):
        with pytest.raises(pm.GrammarError, match="nothing to repeat"):
            pm.Grammar.from_ebnf(ebnf)


def test_next_rule_after_a_space_is_not_a_repetition():
    grammar = pm.Grammar.from_ebnf('root ::= "a" x\nx ::= "b"')
    assert [_is_grammar_accept_string(grammar, "".join(t)) for t in itertools.product("ab", repeat=2)] == [
        False,
        True,
        False,
        False,
    ]


@pytest.mark.parametrize(
    ("pattern", "greedy", "text", "column"),
    [
        ("a++a", "a+a", "aa", 2),
        ("a*+a", "a*a", "aa", 2),
        ("a?+a", "a?a", "a", 2),
        ("a{1,3}+a", "a{1,3}a", "aa", 2),
        ("(a)++a", "(a)+a", "aa", 4),
    ],
)
def test_possessive_quantifiers_are_refused(pattern, greedy, text, column):
    """Python's re reads `x++` as possessive, which matches less than `x+`: read as greedy it
    would allow text outside the language, so it is refused (as XGrammar refuses it)."""
    assert re.fullmatch(pattern, text) is None and re.fullmatch(greedy, text)
    with pytest.raises(pm.GrammarError, match="possessive quantifier") as error:
        pm.Grammar.from_regex(pattern)
    assert error.value.column == column


@pytest.mark.parametrize("pattern", ["a+?a", "[+]+", r"\++", "a+b+", "a{2}"])
def test_quantifier_followed_by_a_literal_plus_is_not_possessive(pattern):
    grammar = pm.Grammar.from_regex(pattern)
    for text in ["", "a", "aa", "aaa", "+", "++", "ab", "aabb"]:
        assert _is_grammar_accept_string(grammar, text) == bool(re.fullmatch(pattern, text)), (pattern, text)


def test_structural_tag_models_compile_as_their_plain_data():
    """pushmask.structural_tag (XGrammar's module): a model, its dict and its JSON text are one
    grammar; the legacy items become a triggered_tags format."""
    st = pytest.importorskip("pushmask.structural_tag")
    tag = st.StructuralTag(
        format=st.TriggeredTagsFormat(
            triggers=["<f"],
            tags=[st.TagFormat(begin="<f>", content=st.JSONSchemaFormat(json_schema={"type": "integer"}), end="</f>")],
        )
    )
    legacy = st.StructuralTag.from_legacy_structural_tag(
        [st.StructuralTagItem(begin="<f>", schema='{"type": "integer"}', end="</f>")], ["<f"]
    )
    assert legacy == tag and st.StructuralTag.from_json(tag.model_dump_json()) == tag
    for spelled in (tag, tag.model_dump(), tag.model_dump_json()):
        grammar = pm.Grammar.from_structural_tag(spelled)
        assert _is_grammar_accept_string(grammar, "say <f>12</f> ok")
        assert not _is_grammar_accept_string(grammar, "say <f>x</f>")
    assert pm.StructuralTag is st.StructuralTag


def test_structural_tag_models_refuse_what_xgrammar_refuses():
    st = pytest.importorskip("pushmask.structural_tag")
    pydantic = pytest.importorskip("pydantic")
    with pytest.raises(pydantic.ValidationError):
        st.StructuralTag.from_json({"type": "structural_tag", "format": {"type": "no_such_format"}})
    with pytest.raises(pydantic.ValidationError):
        st.AnyTextFormat(max_tokens=-1)
    with pytest.raises(pydantic.ValidationError):
        st.JSONSchemaFormat(json_schema={}, style="yaml")


@pytest.mark.parametrize("pattern", ["[0-9]{5}", "[a-f]{2,3}", "(ab|c)*d?", r"\d+\.\d*"])
def test_regex_macro_in_ebnf_matches_what_re_fullmatches(pattern):
    """XGrammar's EBNF macro Regex("..."), alone and inside a sequence; oracle: re.fullmatch."""
    alone = pm.Grammar.from_ebnf(f"root ::= Regex({json.dumps(pattern)})")
    framed = pm.Grammar.from_ebnf(f'root ::= "<" Regex({json.dumps(pattern)}) ">"')
    for text in ["", "12345", "1234", "ab", "abc", "abcd", "ababcd", "d", "3.", "3.14", "x"]:
        expected = re.fullmatch(pattern, text) is not None
        assert _is_grammar_accept_string(alone, text) == expected, (pattern, text)
        assert _is_grammar_accept_string(framed, f"<{text}>") == expected, (pattern, text)


def test_regex_macro_errors_name_the_macro_and_its_place():
    grammar = pm.Grammar.from_ebnf('root ::= "x" Regex("a++")')  # the pattern is refused when compiled
    with pytest.raises(pm.GrammarError, match=r"in Regex\('a\+\+'\): possessive") as error:
        _is_grammar_accept_string(grammar, "xa")
    assert (error.value.line, error.value.column) == (1, 14)
    with pytest.raises(pm.GrammarError, match="Regex does not support the named argument stop") as error:
        pm.Grammar.from_ebnf('root ::= Regex("a+", stop=true)')
    assert (error.value.line, error.value.column) == (1, 27)
    assert _is_grammar_accept_string(pm.Grammar.from_ebnf('root ::= Regex\nRegex ::= "a"'), "a")  # a plain rule name


def test_grammar_from_lark_matches_what_lark_parses():
    lark = pytest.importorskip("lark")
    text = 'start: "a" NUMBER ("," NUMBER)*\nNUMBER: /[0-9]+/'
    grammar = pm.Grammar.from_lark(text)
    parser = lark.Lark(text, parser="earley", lexer="dynamic")
    for candidate in ["a1", "a12,3", "a", "a1,", "b1", "a1,2,33"]:
        try:
            parser.parse(candidate)
            expected = True
        except lark.exceptions.LarkError:
            expected = False
        assert _is_grammar_accept_string(grammar, candidate) == expected, candidate
        named = pm.Grammar.from_lark("start: @inner", named_grammars={"inner": text})
        assert _is_grammar_accept_string(named, candidate) == expected, candidate


def test_batch_rollback_rolls_each_matcher_back_its_count():
    info = pm.TokenizerInfo(["a", "b", "</s>"])
    compiled = pm.GrammarCompiler(info).compile_grammar('root ::= ("a" | "b")*')
    matchers = [pm.GrammarMatcher(compiled) for _ in range(3)]
    for matcher in matchers:
        assert all(matcher.accept_token(token) for token in [0, 1, 0])
    pm.BatchGrammarMatcher.batch_rollback(matchers, [0, 1, 3])
    assert [m.num_accepted_tokens for m in matchers] == [3, 2, 0]
    assert matchers[1].accept_token(0) and matchers[1].num_accepted_tokens == 3
    pm.BatchGrammarMatcher.batch_rollback(matchers[:2])  # one token each, XGrammar's default
    assert [m.num_accepted_tokens for m in matchers[:2]] == [2, 2]
    with pytest.raises(pm.InvalidArgumentError):
        pm.BatchGrammarMatcher.batch_rollback(matchers, [1, 1])


def test_xgrammar_error_names_are_the_family():
    with pytest.raises(pm.InvalidJSONError, match="not valid JSON") as error:
        pm.Grammar.from_json_schema('{"type": ')
    assert isinstance(error.value, pm.SchemaError) and isinstance(error.value, RuntimeError)
    with pytest.raises(pm.DeserializeFormatError, match="not a serialized pushmask CompiledGrammar"):
        pm.CompiledGrammar.deserialize_json("[]", pm.TokenizerInfo(["a"]))


def test_xgrammar_internals_import_and_refuse_clearly():
    """A test module importing XGrammar's internals loads; calling one says it is not provided."""
    from pushmask.testing import XGRAMMAR_INTERNALS, _json_schema_to_ebnf

    assert "_json_schema_to_ebnf" in XGRAMMAR_INTERNALS
    with pytest.raises(pm.NotProvidedError, match="XGrammar's internal") as error:
        _json_schema_to_ebnf({"type": "string"})
    assert isinstance(error.value, NotImplementedError)


def test_tokenizer_info_module_has_xgrammars_names():
    from pushmask.tokenizer_info import _BYTE_LEVEL_CHARSET, TokenizerInfo, VocabType

    assert TokenizerInfo is pm.TokenizerInfo and VocabType is pm.VocabType
    assert len(_BYTE_LEVEL_CHARSET) == 256 and {"Ġ", "Ċ", "a"} <= _BYTE_LEVEL_CHARSET
    decoded = TokenizerInfo(sorted(_BYTE_LEVEL_CHARSET), VocabType.BYTE_LEVEL).decoded_vocab
    assert sorted(decoded) == [bytes([b]) for b in range(256)]  # one character per byte


def test_serialized_text_that_is_not_json_is_also_invalid_json_error():
    """XGrammar raises InvalidJSONError for text that is not JSON or nests past the recursion
    depth; pushmask's error is that and a DeserializeFormatError."""
    for read in (pm.Grammar.deserialize_json, pm.TokenizerInfo.deserialize_json):
        with pytest.raises(pm.InvalidJSONError, match="not JSON") as error:
            read("not a valid json string")
        assert isinstance(error.value, pm.DeserializeFormatError) and isinstance(error.value, RuntimeError)
    with pm.max_recursion_depth(50):
        with pytest.raises(
            pm.InvalidJSONError, match="Maximum recursion depth exceeded: the serialized Grammar nests 60"
        ):
            pm.Grammar.deserialize_json("[" * 60 + "]" * 60)
    grammar = pm.Grammar.from_ebnf('root ::= "a" [0-9]*')
    with pm.max_recursion_depth(50):  # pushmask's own payloads nest a few levels only
        assert pm.Grammar.deserialize_json(grammar.serialize_json()) == grammar


@pytest.mark.parametrize(
    ("version", "error", "words"),
    [
        ("v1", pm.DeserializeVersionError, "XGrammar's format version 'v1'"),
        ("v16", pm.DeserializeFormatError, "XGrammar's own JSON layout (v16), which pushmask does not read"),
    ],
)
def test_xgrammar_layout_is_refused_by_name(version, error, words):
    """JSON in XGrammar's own layout (keyed by `__VERSION__`) is refused saying whose it is: an
    old version as XGrammar refuses it, its current one because pushmask does not read it."""
    xgrammar_json = {"rules": [["root", 1, -1, False, -1, -1, "", False, None]], "grammar_expr_data": [0, 1, 97],
                     "grammar_expr_indptr": [0], "root_rule_id": 0, "__VERSION__": version}  # fmt: skip
    with pytest.raises(error, match=re.escape(words)):
        pm.Grammar.deserialize_json(json.dumps(xgrammar_json))
    with pytest.raises(error, match=re.escape(words)):
        pm.CompiledGrammar.deserialize_json(
            json.dumps({"grammar": {}, "__VERSION__": version}), pm.TokenizerInfo(["a"])
        )


def test_debug_print_internal_state_describes_the_parse():
    matcher = pm.GrammarMatcher(
        pm.GrammarCompiler(pm.TokenizerInfo(["a", "b", "</s>"])).compile_grammar('root ::= "a"+')
    )
    assert matcher._debug_print_internal_state().startswith(
        "GrammarMatcher(accepted_tokens=0, terminated=False, can_end=False"
    )
    assert matcher.accept_token(0)
    state = matcher._debug_print_internal_state()
    assert "accepted_tokens=1" in state and "can_end=True" in state and "stack_tops=" in state


@pytest.mark.parametrize(
    "compile_it, inside, outside",
    [
        (lambda c: c.compile_json_schema({"type": "integer", "maximum": 9}), "7", "10"),
        (lambda c: c.compile_regex("a+b"), "aab", "ba"),
        (lambda c: c.compile_grammar('root ::= "x" [0-9]'), "x1", "xx"),
        (
            lambda c: c.compile_structural_tag(
                {
                    "type": "structural_tag",
                    "format": {
                        "type": "tag",
                        "begin": "<a>",
                        "content": {"type": "any_text", "max_chars": 2},
                        "end": "</a>",
                    },
                }
            ),
            "<a>hi</a>",
            "<a>hey</a>",
        ),
    ],
)
def test_compiled_grammar_gives_back_the_grammar_it_was_compiled_from(compile_it, inside, outside):
    """XGrammar's CompiledGrammar.grammar: the IR is not kept but built again from the constraint,
    so it matches the language the matcher enforces (checked by walking the matcher itself)."""
    info = pm.TokenizerInfo(["a", "b"])
    compiler = pm.GrammarCompiler(info, cache_enabled=False)
    compiled = compile_it(compiler)
    grammar = compiled.grammar
    assert isinstance(grammar, pm.Grammar)
    for text, accepted in ((inside, True), (outside, False)):
        assert _is_grammar_accept_string(grammar, text) is accepted
        matcher = pm.GrammarMatcher(compiled, terminate_without_stop_token=True)
        assert (matcher.accept_string(text) and matcher.is_terminated()) is accepted
    own = pm.Grammar.from_ebnf('root ::= "q"')
    assert compiler.compile_grammar(own).grammar is own
    assert pm.CompiledGrammar.deserialize_json(compiled.serialize_json(), info).grammar is None
