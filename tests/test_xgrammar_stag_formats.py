"""Structural-tag formats as XGrammar 0.2.8 defines them (issue 45): any_text with max_chars
inside a tag or beside excluded strings, the deprecated qwen_xml_parameter format, repeat bounds,
how deeply formats nest, and the wording of errors about the document (XGrammar's tests match it).

The max_chars language is checked by brute force: every token of a small vocabulary at every step
of random walks against a plain-Python oracle of the format's meaning."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import pushmask as pm
from pushmask.core.errors import GrammarError
from pushmask.testing import _is_grammar_accept_string

_A_TAG = {"begin": "[", "content": {"type": "const_string", "value": "a"}, "end": "]"}

PIECES = ["a", "b", "ab", "ba", "<", ">", "x>", "<a", "中", "中a"]
STOP = len(PIECES)


@pytest.fixture(scope="module")
def compiler():
    vocab = [p.encode() for p in PIECES] + [b"</s>"]
    return pm.GrammarCompiler(pm.TokenizerInfo.from_vocab(vocab, "raw", stop_token_ids=[STOP]))


def tag(content: dict) -> dict:
    return {"type": "structural_tag", "format": {"type": "tag", "begin": "<", "content": content, "end": ">"}}


def content_ok(content: str, max_chars: int, excludes: list[str]) -> bool:
    """The oracle: a tag's any_text content stops before the end ">" and holds no excluded string."""
    return len(content) <= max_chars and ">" not in content and not any(e in content for e in excludes)


def viable(text: str, max_chars: int, excludes: list[str]) -> bool:
    """`text` is a prefix of "<" CONTENT ">" with CONTENT as content_ok says (a prefix-closed
    condition: a content prefix is viable iff it is itself a content)."""
    if not text:
        return True
    if text[0] != "<":
        return False
    rest = text[1:]
    if ">" in rest:
        return rest.index(">") == len(rest) - 1 and content_ok(rest[:-1], max_chars, excludes)
    return content_ok(rest, max_chars, excludes)


@pytest.mark.parametrize("max_chars, excludes", [(0, []), (3, []), (3, ["ab"]), (2, ["ba", "中"])])
def test_any_text_max_chars_in_a_tag_is_exact(compiler, max_chars, excludes):
    # XGrammar counts code points; the end tag and the excluded strings are never content.
    content = {"type": "any_text", "max_chars": max_chars, "excludes": excludes}
    compiled = compiler.compile_structural_tag(tag(content))
    rng = random.Random(max_chars)
    checked = 0
    for _ in range(30):
        matcher = pm.GrammarMatcher(compiled)
        text = ""
        for _ in range(8):
            mask = matcher.get_next_token_mask()
            for token, piece in enumerate(PIECES):
                assert mask[token] == viable(text + piece, max_chars, excludes), (text, piece)
            complete = text.startswith("<") and text.endswith(">") and viable(text, max_chars, excludes)
            assert mask[STOP] == complete, text
            checked += 1
            allowed = np.flatnonzero(mask).tolist()
            token = rng.choice(allowed)
            if token == STOP:
                break
            assert matcher.accept_token(token)
            text += PIECES[token]
    assert checked >= 60


def test_any_text_max_chars_counts_code_points(compiler):
    compiled = compiler.compile_structural_tag(tag({"type": "any_text", "max_chars": 3}))
    for text, accepted in (("<中中中>", True), ("<中中中中>", False), ("<ab>", True), ("<a>b>", False)):
        matcher = pm.GrammarMatcher(compiled)
        assert (matcher.accept_string(text) and matcher.can_end()) == accepted, text


def test_qwen_xml_parameter_is_json_schema_in_style_qwen_xml(compiler):
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    old = compiler.compile_structural_tag(
        {"type": "structural_tag", "format": {"type": "qwen_xml_parameter", "json_schema": schema}}
    )
    new = compiler.compile_structural_tag(
        {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": schema, "style": "qwen_xml"}}
    )
    for text in ("<parameter=a>\nab\n</parameter>", "<parameter=a>\nab</parameter>", "<parameter=b>\nab\n</parameter>"):
        answers = []
        for compiled in (old, new):
            matcher = pm.GrammarMatcher(compiled)
            answers.append(matcher.accept_string(text) and matcher.can_end())
        assert answers[0] == answers[1], text


def test_repeat_bounds_and_max_minus_one(compiler):
    def accepts(fmt: dict, text: str) -> bool:
        matcher = pm.GrammarMatcher(compiler.compile_structural_tag({"type": "structural_tag", "format": fmt}))
        return matcher.accept_string(text) and matcher.can_end()

    unbounded = {"type": "repeat", "min": 1, "max": -1, "content": {"type": "const_string", "value": "a"}}
    assert accepts(unbounded, "a" * 7) and not accepts(unbounded, "")
    bounded = {**unbounded, "min": 2, "max": 3}
    assert [accepts(bounded, "a" * n) for n in range(5)] == [False, False, True, True, False]


def nested(depth: int) -> dict:
    fmt: dict = {"type": "const_string", "value": "a"}
    for _ in range(depth):
        fmt = {"type": "sequence", "elements": [fmt]}
    return {"type": "structural_tag", "format": fmt}


@pytest.mark.parametrize(
    "document, words",
    [
        ('{"type": "structural_tag", "format": {"type": "const_string"', "Failed to parse JSON"),
        ('"text"', "Structural tag must be an object"),
        ({"type": "other", "format": {"type": "const_string", "value": "a"}}, 'type must be a string "structural_tag"'),
        ({"type": "structural_tag"}, "Structural tag must have a format field"),
        ({"type": "structural_tag", "format": "x"}, "Format must be an object"),
        ({"type": "structural_tag", "format": {"type": 1}}, "Format's type must be a string"),
        ({"type": "structural_tag", "format": {"type": "nope"}}, "Format type not recognized: nope"),
        ({"type": "structural_tag", "format": {"type": "const_string"}}, "ConstString format must have a value"),
        ({"type": "structural_tag", "format": {"type": "json_schema"}}, "must have a json_schema field"),
        ({"type": "structural_tag", "format": {"type": "sequence", "elements": []}}, "at least one element"),
        ({"type": "structural_tag", "format": {"type": "or", "elements": "x"}}, "Or format must have an elements"),
        (
            {
                "type": "structural_tag",
                "format": {"type": "tag", "begin": "<", "content": {"type": "any_text"}, "end": []},
            },
            "end array must be non-empty",
        ),
        (
            {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": [""], "tags": []}},
            "triggers must be non-empty strings",
        ),
        (
            {
                "type": "structural_tag",
                "format": {"type": "tags_with_separator", "tags": [], "separator": ",", "at_least_one": 1},
            },
            "at_least_one must be a boolean",
        ),
        (
            {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {}, "style": "yaml"}},
            'style must be "json", "qwen_xml"',
        ),
        (
            {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {}, "excludes": [""]}},
            "excludes must be an array of non-empty strings",
        ),
        (
            {"type": "structural_tag", "format": {"type": "any_text", "max_tokens": 2**31}},
            "non-negative 32-bit integer",
        ),
        ({"type": "structural_tag", "format": {"type": "any_text", "max_chars": -1}}, "non-negative 32-bit integer"),
        ({"type": "structural_tag", "format": {"type": "token", "token": 1.5}}, "Token ID must be an integer"),
        (
            {"type": "structural_tag", "format": {"type": "repeat", "min": 3, "max": 2, "content": {}}},
            "min must be <= max",
        ),
        ({"type": "structural_tag", "format": {"type": "repeat", "max": -2, "content": {}}}, "-1 (unbounded) or >= 0"),
        (nested(101), "nested deeper than 100"),
        (
            {
                "type": "structural_tag",
                "format": {"type": "tag", "begin": "<", "content": {"type": "any_text"}, "end": ""},
            },
            "unlimited content",
        ),
        (
            {
                "type": "structural_tag",
                "format": {"type": "tag", "begin": "<", "content": {"type": "any_text"}, "end": ["", ""]},
            },
            "must have a non-empty end",
        ),
        (
            {
                "type": "structural_tag",
                "format": {
                    "type": "tag",
                    "begin": "<",
                    "content": {"type": "tags_with_separator", "tags": [_A_TAG], "separator": ","},
                    "end": "",
                },
            },
            "must have a non-empty end",
        ),
    ],
)
def test_document_errors_use_xgrammars_words_and_a_pointer(document, words):
    with pytest.raises(GrammarError, match="Invalid structural tag error") as error:
        pm.Grammar.from_structural_tag(document)
    assert words in str(error.value)
    assert "#" in str(error.value)  # the JSON pointer of the bad format


def test_a_tag_with_an_empty_end_reads_content_that_ends_by_itself():
    """An empty end is refused only where the content runs until the end (above); bounded content
    or a tag stopping after its first inner tag compiles, the end being the empty string."""
    for content, inside, outside in [
        ({"type": "any_text", "max_chars": 2}, "<ab", "<abc"),
        (
            {"type": "tags_with_separator", "tags": [_A_TAG], "separator": ",", "stop_after_first": True},
            "<[a]",
            "<[a],[a]",
        ),
    ]:
        document = {"type": "structural_tag", "format": {"type": "tag", "begin": "<", "content": content, "end": ""}}
        grammar = pm.Grammar.from_structural_tag(document)
        assert _is_grammar_accept_string(grammar, inside)
        assert not _is_grammar_accept_string(grammar, outside)


def test_formats_nested_to_the_bound_compile():
    pm.Grammar.from_structural_tag(nested(50))


JSON_PIECES = ['"', "a", "b", "ab", "ba", '\\"', "\\u0061", 'b"', "中", '"a']
JSON_STOP = len(JSON_PIECES)


def string_state(text: str) -> tuple[str, bool] | None:
    """(the content written so far, whether the closing quote came) of a JSON string token
    prefix; None if it is not one (text after the closing quote)."""
    if not text.startswith('"'):
        return None
    body, at = text[1:], 0
    while at < len(body):
        if body[at] == "\\":
            at += 6 if body[at + 1] == "u" else 2
        elif body[at] == '"':
            return (body[:at], True) if at == len(body) - 1 else None
        else:
            at += 1
    return body, False


@pytest.mark.parametrize(
    "schema, excludes, max_length",
    [({"type": "string"}, ["ab", '"'], None), ({"type": "string", "maxLength": 3}, ["中"], 3)],
)
def test_json_schema_excludes_on_strings_are_exact(schema, excludes, max_length):
    # The oracle: the content as written (escapes not decoded, json.loads for the length) holds
    # no excluded string: \u0061b is not "ab", and \" holds the quote.
    vocab = [p.encode() for p in JSON_PIECES] + [b"</s>"]
    compiler = pm.GrammarCompiler(pm.TokenizerInfo.from_vocab(vocab, "raw", stop_token_ids=[JSON_STOP]))
    tag = {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": schema, "excludes": excludes}}
    compiled = compiler.compile_structural_tag(tag)

    def allowed(text: str, closed_only: bool) -> bool:
        state = string_state(text) if text else ("", False)
        if state is None or (closed_only and not state[1]):
            return False
        content = state[0]
        decoded = json.loads('"' + content + '"') if text else ""
        return not any(e in content for e in excludes) and (max_length is None or len(decoded) <= max_length)

    rng = random.Random(7)
    for _ in range(30):
        matcher = pm.GrammarMatcher(compiled)
        text = ""
        for _ in range(8):
            mask = matcher.get_next_token_mask()
            for token, piece in enumerate(JSON_PIECES):
                assert mask[token] == allowed(text + piece, closed_only=False), (text, piece)
            assert mask[JSON_STOP] == (bool(text) and allowed(text, closed_only=True)), text
            token = rng.choice(np.flatnonzero(mask).tolist())
            if token == JSON_STOP:
                break
            assert matcher.accept_token(token)
            text += JSON_PIECES[token]


def test_json_schema_excludes_leave_patterns_alone(compiler):
    def tag(schema) -> dict:
        fmt = {"type": "json_schema", "json_schema": schema, "excludes": ["ab"]}
        return {"type": "structural_tag", "format": fmt}

    either = {"anyOf": [{"type": "string", "pattern": "^ab$"}, {"enum": ["ab", "b"]}]}
    compiled = compiler.compile_structural_tag(tag(either))
    for text, accepted in (('"ab"', True), ('"b"', True), ('"abab"', False)):
        matcher = pm.GrammarMatcher(compiled)
        assert (matcher.accept_string(text) and matcher.can_end()) == accepted, text


def written_strings(text: str) -> list[str]:
    """The contents of a JSON text's strings (keys too) as written: escapes not decoded."""
    found, at = [], 0
    while at < len(text):
        if text[at] != '"':
            at += 1
            continue
        end = at + 1
        while text[end] != '"':
            end += 2 if text[end] == "\\" else 1
        found.append(text[at + 1 : end])
        at = end + 1
    return found


EXCLUDES_SCHEMA = {
    "type": "object",
    "properties": {
        "list": {"type": "array", "items": {"type": "string", "maxLength": 4}},
        "ab": {"type": "integer"},
        "fixed": {"enum": ["xaby", "好", {"k": "ab"}]},
        "tagged": {"type": "string", "pattern": "^ab"},
    },
    "patternProperties": {"^p": {"type": "boolean"}},
    "additionalProperties": {"type": ["string", "null"]},
}
EXCLUDES_VALUES = [
    {},
    {"ab": 1},
    {"list": ["a", "b", "ab"]},
    {"list": ["ba", 'a"b', "你"]},
    {"fixed": "xaby"},
    {"fixed": "好"},
    {"fixed": {"k": "ab"}},
    {"tagged": "abab"},
    {"pab": True},
    {"pab": "x"},
    {"other": "cab"},
    {"other": None, "xab": None},
    {"list": ["aaaaa"]},
    {"list": [1]},
]


def test_json_schema_excludes_filter_every_string_of_a_value():
    # The oracle: jsonschema, and no string (key, value or literal) holds "ab" as written, but
    # those held to a pattern (the "tagged" value, keys matching "^p"), as XGrammar.
    import jsonschema

    grammar = pm.Grammar.from_structural_tag(
        {
            "type": "structural_tag",
            "format": {"type": "json_schema", "json_schema": EXCLUDES_SCHEMA, "excludes": ["ab"]},
        }
    )
    texts = [json.dumps(v, ensure_ascii=a) for v in EXCLUDES_VALUES for a in (True, False)]
    texts += ['{"list": ["\\u0061b"]}', '{"x\\u0061b": null}', '{"x\\u0061b": "\\u0061b"}']
    for text in texts:
        value = json.loads(text)
        held_to_pattern = {k for k in value if k.startswith("p")} | {value.get("tagged")}
        free = [s for s in written_strings(text) if json.loads(f'"{s}"') not in held_to_pattern]
        expected = jsonschema.Draft202012Validator(EXCLUDES_SCHEMA).is_valid(value) and not any("ab" in s for s in free)
        assert _is_grammar_accept_string(grammar, text) == expected, text


def test_json_schema_excludes_that_leave_no_value_give_the_empty_language():
    def tag(schema, excludes) -> dict:
        return {
            "type": "structural_tag",
            "format": {"type": "json_schema", "json_schema": schema, "excludes": excludes},
        }

    required = {"type": "object", "properties": {"bad": {"type": "integer"}}, "required": ["bad"]}
    grammar = pm.Grammar.from_structural_tag(tag(required, ["bad"]))
    assert not _is_grammar_accept_string(grammar, '{"bad": 1}') and not _is_grammar_accept_string(grammar, "{}")
    with pytest.raises(pm.SchemaError, match="unsatisfiable"):  # the schema's own error stays one
        pm.Grammar.from_structural_tag(tag({"type": "integer", "minimum": 2, "maximum": 1}, ["bad"]))
    # a length too long to count beside the exclusions is refused, never compiled as no value
    with pytest.raises(pm.UnsupportedSchemaError, match="maxLength"):
        pm.Grammar.from_structural_tag(tag({"type": "string", "maxLength": 100_000}, ["bad"]))


def test_xml_argument_excludes_filter_raw_values_and_names(compiler):
    schema = {
        "type": "object",
        "properties": {"value": {"type": "string"}, "xBADy": {"type": "integer"}},
        "required": ["value"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": schema, "style": "minimax_xml", "excludes": ["BAD"]}
    compiled = compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    element = '<parameter name="{}">{}</parameter>'
    for text, accepted in (
        (element.format("value", "safe"), True),
        (element.format("value", "xBADy"), False),  # a raw value holding an excluded string
        (element.format("value", "BA") + element.format("xBADy", "1"), False),  # an excluded name
    ):
        matcher = pm.GrammarMatcher(compiled)
        assert (matcher.accept_string(text) and matcher.can_end()) == accepted, text
    with pytest.raises(GrammarError, match="formatting whitespace"):
        compiler.compile_structural_tag({"type": "structural_tag", "format": {**fmt, "excludes": [" BAD"]}})


@pytest.mark.parametrize(
    "document",
    [
        {
            "type": "triggered_tags",
            "triggers": ["<t"],
            "tags": [{"begin": "<t>", "content": {"type": "const_string", "value": "v"}, "end": "</t>"}],
            "excludes": ["x<"],
        },
        {"type": "dispatch", "rules": [["<t>", {"type": "const_string", "value": "v</t>"}]], "excludes": ["x<"]},
    ],
)
def test_excluded_strings_bind_the_free_text_through_its_trigger(document):
    """The text before a trigger and the trigger together hold no excluded string ("x" then
    "<t" holds "x<"); what follows the trigger is the tag's, where excludes do not apply."""
    grammar = pm.Grammar.from_structural_tag({"type": "structural_tag", "format": document})
    assert _is_grammar_accept_string(grammar, "ab<t>v</t>yz")
    assert not _is_grammar_accept_string(grammar, "abx<t>v</t>")
    assert _is_grammar_accept_string(grammar, "abx")  # free text may end with the excluded string's start


def test_content_that_stops_at_an_excluded_token_may_have_an_empty_end():
    """any_tokens stopping at its excluded trigger token needs no end: the dispatch around the
    tag takes that token next (XGrammar's test_stag_any_tokens_exclude_redispatch)."""
    info = pm.TokenizerInfo(["<tool>", "a", "b", "</s>"], stop_token_ids=[3])
    document = {
        "type": "structural_tag",
        "format": {
            "type": "token_triggered_tags",
            "trigger_tokens": [0],
            "tags": [
                {
                    "begin": {"type": "token", "token": 0},
                    "content": {"type": "any_tokens", "exclude_tokens": [0]},
                    "end": "",
                }
            ],
        },
    }
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_structural_tag(document)
    matcher = pm.GrammarMatcher(compiled)
    for token in [1, 0, 1, 2, 0, 2, 3]:
        assert matcher.accept_token(token), token
    assert matcher.is_terminated()
