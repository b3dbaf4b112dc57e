"""XGrammar's small APIs that its own test suite relies on: stop and special token ids as lists,
`TokenizerInfo._detect_vocab_type_from_vocab`, bad argument values that are also RuntimeErrors,
and a damaged serialized TokenizerInfo refused as DeserializeFormatError. The expected values are
what XGrammar 0.2.8 returns for the same calls (its tests/python/test_tokenizer_info.py)."""

from __future__ import annotations

import json

import pytest

import pushmask as pm
from pushmask.masks.vocab import _ALPHABET

BYTE_FALLBACK = {f"<0x{byte:02X}>": byte for byte in range(256)} | {"▁hello": 256, "你好": 257}
BYTE_LEVEL = {char: i for i, char in enumerate(sorted(_ALPHABET))} | {"Ġhello": 256, "<|endoftext|>": 257}


@pytest.mark.parametrize(
    "vocab, expected",
    [
        (BYTE_FALLBACK, pm.VocabType.BYTE_FALLBACK),
        (BYTE_LEVEL, pm.VocabType.BYTE_LEVEL),
        # the byte pieces win over a whole GPT-2 alphabet held as ordinary pieces
        (BYTE_LEVEL | {text: i + 300 for text, i in BYTE_FALLBACK.items()}, pm.VocabType.BYTE_FALLBACK),
        ({"hello": 0, "##ing": 1, "你": 2, "a": 3}, None),  # WordPiece: neither
        # the alphabet as tokens, but most tokens spelled outside it: not byte-level
        (BYTE_LEVEL | {f"word {i}": 300 + i for i in range(100)}, None),
    ],
)
def test_vocab_type_detected_from_the_token_texts(vocab, expected):
    assert pm.TokenizerInfo._detect_vocab_type_from_vocab(vocab) == expected


def test_stop_and_special_ids_are_fresh_lists():
    info = pm.TokenizerInfo(["a", "b", "</s>", "<s>"], stop_token_ids=[2], special_token_ids=[3])
    assert info.stop_token_ids == [2] and info.special_token_ids == [2, 3]
    info.stop_token_ids.append(0)  # a copy: the vocabulary is unchanged
    assert info.stop_token_ids == [2]
    matcher = pm.GrammarMatcher(pm.GrammarCompiler(info).compile_grammar('root ::= "a"'), override_stop_tokens=[2, 3])
    assert matcher.stop_token_ids == [2, 3]
    matcher.stop_token_ids.clear()
    assert matcher.accept_token(0) and matcher.accept_token(3) and matcher.is_terminated()


@pytest.mark.parametrize(
    "call",
    [
        lambda: pm.TokenizerInfo([str(i) for i in range(100)], vocab_size=1),
        lambda: pm.set_max_recursion_depth(-1),
        lambda: pm.GrammarMatcher(
            pm.GrammarCompiler(pm.TokenizerInfo(["a", "b"], vocab_size=8)).compile_grammar('root ::= "a"'),
            override_stop_tokens=[2**28],
        ),
    ],
)
def test_bad_argument_values_are_also_runtime_errors(call):
    with pytest.raises(pm.InvalidArgumentError) as error:
        call()
    assert isinstance(error.value, ValueError) and isinstance(error.value, RuntimeError)  # XGrammar: RuntimeError


@pytest.mark.parametrize(
    "field, value",
    [("vocab_size", 3), ("stop_token_ids", [10**6]), ("special_token_ids", [-1]), ("token_lengths", "x")],
)
def test_damaged_serialized_tokenizer_info_is_a_format_error(field, value):
    info = pm.TokenizerInfo(["1", "212", "a", "A", "b", "一", "-", "aBc", "abc"], vocab_size=10, stop_token_ids=[0, 1])
    payload = json.loads(info.serialize_json())
    assert pm.TokenizerInfo.deserialize_json(json.dumps(payload)).decoded_vocab == info.decoded_vocab
    payload[field] = value
    with pytest.raises(pm.DeserializeFormatError, match="damaged"):
        pm.TokenizerInfo.deserialize_json(json.dumps(payload))
