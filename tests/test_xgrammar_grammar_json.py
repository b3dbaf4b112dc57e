"""Grammar.serialize_json / deserialize_json (XGrammar's names): a round trip gives the same
grammar, the same language and the same masks; damaged text is a DeserializeFormatError."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pushmask as pm

GRAMMARS = {
    "ebnf": lambda: pm.Grammar.from_ebnf(
        'rule1 ::= ([^0-9] rule1) | ""\nroot_rule ::= rule1 "a"\n', root_rule_name="root_rule"
    ),
    "utf8": lambda: pm.Grammar.from_ebnf('root ::= "こんにちは" | "😊" | "你好" | "hello" | "\\n"'),
    "schema": lambda: pm.Grammar.from_json_schema(
        {"type": "object", "properties": {"id": {"type": "integer", "minimum": 3}, "tag": {"pattern": "^x+$"}}}
    ),
    "regex": lambda: pm.Grammar.from_regex(r"[a-c]{2,4}(-\d+)?"),
}
TEXTS = {
    "ebnf": ["a", "bca", "xyz!a", "1a", "ab"],
    "utf8": ["こんにちは", "😊", "你好", "hello", "\n", "hell", "你"],
    "schema": ['{"id": 3}', '{"id": 2}', '{"tag": "xx", "id": 10}', '{"tag": "xy"}', "{}"],
    "regex": ["ab", "abca-12", "a", "abcab", "ab-"],
}


@pytest.fixture(scope="module")
def byte_compiler():
    vocab = [bytes([b]) for b in range(256)] + [b"ab", b"-1", b'{"', b"</s>"]
    return pm.GrammarCompiler(pm.TokenizerInfo.from_vocab(vocab, "raw", stop_token_ids=[len(vocab) - 1]))


def masks_along(compiler, grammar, text: str) -> list[list[int]]:
    """The bitmask before each byte of text (as far as the grammar takes it), and whether it ends."""
    matcher = pm.GrammarMatcher(compiler.compile_grammar(grammar))
    bitmask = pm.allocate_token_bitmask(1, compiler.tokenizer_info.vocab_size)
    rows = []
    for byte in text.encode():
        matcher.fill_next_token_bitmask(bitmask)
        rows.append(np.asarray(bitmask).tolist())
        if not matcher.accept_token(byte):
            break
    rows.append([matcher.is_completed()])
    return rows


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_round_trip_keeps_the_grammar_and_its_masks(byte_compiler, name):
    grammar = GRAMMARS[name]()
    text = grammar.serialize_json()
    recovered = pm.Grammar.deserialize_json(text)
    assert recovered == grammar and str(recovered) == str(grammar)
    assert recovered.serialize_json() == text
    payload = json.loads(text)
    assert payload["format"] == "Grammar" and payload["root_rule_id"] == list(grammar.rules).index(grammar.root)
    for sample in TEXTS[name]:
        assert masks_along(byte_compiler, recovered, sample) == masks_along(byte_compiler, grammar, sample)


def damaged(change) -> str:
    payload = json.loads(GRAMMARS["ebnf"]().serialize_json())
    change(payload)
    return json.dumps(payload)


def node_start(payload: dict, code: int) -> int:
    """Where the first node of this code starts in `grammar_expr_data`."""
    data = payload["grammar_expr_data"]
    return next(start for start in payload["grammar_expr_indptr"] if data[start] == code)


def set_data(payload: dict, at: int, value) -> None:
    payload["grammar_expr_data"][at] = value


@pytest.mark.parametrize(
    "change",
    [
        lambda p: set_data(p, node_start(p, 5) + 3, 10**6),  # a child that is not an earlier node
        lambda p: set_data(p, node_start(p, 5) + 2, node_start(p, 5)),  # a child id that is no node id
        lambda p: set_data(p, node_start(p, 1) + 3, 0x110000),  # past the last code point
        lambda p: set_data(p, node_start(p, 1) + 2, 0xD800),  # a range into the surrogates
        lambda p: set_data(p, node_start(p, 1), 99),  # an unknown node code
        lambda p: set_data(p, node_start(p, 4) + 2, 10**6),  # a rule id past the rules
        lambda p: set_data(p, node_start(p, 0) + 1, 10**6),  # a payload past the data
        lambda p: p["rules"].__setitem__(0, ["rule1", -1]),
        lambda p: p["rules"].__setitem__(0, ["rule1", 10**6]),
        lambda p: p["rules"].__setitem__(1, ["rule1", 4]),  # a rule defined twice
        lambda p: p.__setitem__("root_rule_id", 2**31 - 1),
        lambda p: p.__setitem__("grammar_expr_indptr", [10**9]),
        lambda p: p.__setitem__("grammar_expr_indptr", p["grammar_expr_indptr"][:-1]),  # data left over
        lambda p: p.__setitem__("grammar_expr_data", []),
        lambda p: p.__setitem__("allow_empty_rule_ids", [10**6]),
        lambda p: p.__setitem__("allow_empty_rule_ids", []),  # rule1 matches the empty string
        lambda p: p.__setitem__("refusal", ["ValueError", "x", None, None]),
        lambda p: p.pop("grammar_expr_data"),
    ],
)
def test_damaged_text_is_a_format_error(change):
    with pytest.raises(pm.DeserializeFormatError):
        pm.Grammar.deserialize_json(damaged(change))


def test_other_text_is_refused():
    with pytest.raises(pm.DeserializeFormatError):
        pm.Grammar.deserialize_json("not a valid json string")
    payload = json.loads(GRAMMARS["ebnf"]().serialize_json())
    payload["version"] = 0
    with pytest.raises(pm.DeserializeVersionError):
        pm.Grammar.deserialize_json(json.dumps(payload))
    info = pm.TokenizerInfo.from_vocab(["a"])
    with pytest.raises(pm.DeserializeFormatError):  # another kind of serialized object
        pm.Grammar.deserialize_json(info.serialize_json())
