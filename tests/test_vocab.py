"""TokenizerInfo: exact bytes per token, checked against the tokenizers' own encoders/decoders.

The oracle is the Hugging Face tokenizer itself: joining our bytes for ``encode(s)`` must give
``s`` back byte for byte, and for every token whose bytes are valid UTF-8, the tokenizer's own
``decode([id])`` must give the same text.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from support import TOKENIZERS, require_shared

import pushmask as pm
from pushmask.masks.vocab import (
    KNOWN_STOP_MARKERS,
    TokenizerInfo,
    byte_fallback_decode,
    byte_level_decode,
)

# name -> (vocab_type, len(tokenizer), eos text, eos id)
EXPECTED = {
    "llama3": ("byte_level", 128_256, "<|eot_id|>", 128_009),
    "qwen": ("byte_level", 151_851, "<|endoftext|>", 151_643),
    "mistral": ("byte_fallback", 32_000, "</s>", 2),
    "smollm2": ("byte_level", 49_152, "<|im_end|>", 2),
}

SAMPLES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "a  b   c    d\t\te",
    "\n\n\nline one\r\n  indented\n\t\ttabbed\n",
    "          ten spaces then text",
    'def f(x):\n    return {"key": [1, 2.5e-3, null, true]}  # comment\n',
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    '{"name": "Zoë", "emoji": "🙂🚀👩‍👩‍👧", "flag": "🇫🇷"}',
    "日本語のテキストと中文文本，还有한국어.",
    "Crème brûlée, naïve façade, Ångström, ñandú, Łódź, Ελληνικά, русский текст.",
    "mixed: 123456789 0.000001 -42 1e10 0x1F 😀 ½ ∑ ∫ √ ≠ ≤",
    "   leading and trailing spaces   ",
    "\u00a0non-breaking\u2003em-space\u200bzero-width",
    "<not a special token> <|also not|>",
]


def _load(name):
    transformers = pytest.importorskip("transformers")
    path = require_shared(TOKENIZERS / name)
    return transformers.AutoTokenizer.from_pretrained(str(path))


_CACHE: dict[str, tuple] = {}


def _tokenizer_and_info(name):
    if name not in _CACHE:
        tokenizer = _load(name)
        _CACHE[name] = (tokenizer, TokenizerInfo.from_huggingface(tokenizer))
    return _CACHE[name]


@pytest.fixture(params=sorted(EXPECTED), scope="module")
def loaded(request):
    tokenizer, info = _tokenizer_and_info(request.param)
    return request.param, tokenizer, info


def _expected_bytes(name, text):
    # SentencePiece (mistral) normalizes input by prepending "▁": the first token carries a space
    # that its decoder strips again. That space is real model output, so our bytes keep it.
    if EXPECTED[name][0] == "byte_fallback":
        return b" " + text.encode("utf-8")
    return text.encode("utf-8")


def test_sizes_types_and_stop_tokens(loaded):
    name, tokenizer, info = loaded
    vocab_type, size, eos_text, eos_id = EXPECTED[name]
    assert info.vocab_type == vocab_type
    assert info.vocab_size == size == len(tokenizer) == len(info.decoded_vocab)
    assert tokenizer.convert_tokens_to_ids(eos_text) == eos_id
    assert eos_id in info.stop_token_ids
    assert info.decoded_vocab[eos_id] == b""
    # Every default stop token is the eos or a known end marker that is a special token.
    specials = set(info.special_token_ids)
    for stop in info.stop_token_ids:
        assert stop in specials
        assert stop == eos_id or tokenizer.convert_ids_to_tokens(stop) in KNOWN_STOP_MARKERS


def test_llama3_end_markers_are_stop_tokens():
    _, info = _tokenizer_and_info("llama3")
    # <|eot_id|>, <|end_of_text|>, <|eom_id|>
    assert {128009, 128001, 128008} <= set(info.stop_token_ids)


@pytest.mark.parametrize("text", SAMPLES)
def test_encode_then_join_bytes_is_exact(loaded, text):
    name, tokenizer, info = loaded
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert info.decode_tokens(ids) == _expected_bytes(name, text)
    assert b"".join(info.decoded_vocab[t] for t in ids) == _expected_bytes(name, text)
    assert all(t in set(info.grammar_token_ids.tolist()) for t in ids)


def test_every_utf8_token_matches_the_tokenizers_own_decoder(loaded):
    name, tokenizer, info = loaded
    backend = tokenizer.backend_tokenizer
    ids = info.grammar_token_ids.tolist()
    texts = backend.decode_batch([[t] for t in ids], skip_special_tokens=False)
    checked = 0
    for token_id, text in zip(ids, texts):
        raw = info.decoded_vocab[token_id]
        try:
            expected = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a partial UTF-8 sequence: the decoder shows U+FFFD instead
        if EXPECTED[name][0] == "byte_fallback" and expected.startswith(" "):
            expected = expected[1:]  # the decoder strips one leading space of the output
        assert text == expected, (token_id, raw, text)
        checked += 1
    assert checked > 0.9 * len(ids)


def test_single_byte_tokens(loaded):
    name, _, info = loaded
    single = {info.decoded_vocab[t] for t in info.grammar_token_ids if info.token_lengths[t] == 1}
    printable = {bytes([b]) for b in [9, 10, 13, *range(0x20, 0x7F)]}
    assert printable <= single
    if name != "smollm2":  # SmolLM2's GPT-2-style vocabulary lacks 21 rare bytes (0x04, 0xFF, ...)
        assert single == {bytes([b]) for b in range(256)}


def test_special_tokens_have_no_bytes(loaded):
    _, tokenizer, info = loaded
    flagged = {i for i, tok in tokenizer.added_tokens_decoder.items() if tok.special}
    flagged |= set(tokenizer.all_special_ids)
    assert flagged, "every shared tokenizer has special tokens"
    assert flagged <= set(info.special_token_ids)
    grammar_ids = set(info.grammar_token_ids.tolist())
    for token_id in flagged:
        assert info.decoded_vocab[token_id] == b""
        assert token_id not in grammar_ids
        assert info.is_special(token_id)
    # Everything else has bytes and is a grammar token.
    assert len(grammar_ids) == info.vocab_size - len(info.special_token_ids)
    assert info.grammar_token_ids.dtype == np.int32


def test_padding_ids_are_masked_and_vocab_size_is_checked(loaded):
    _, tokenizer, info = loaded
    padded = TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer) + 77)
    assert padded.vocab_size == len(tokenizer) + 77
    assert padded.decoded_vocab[: len(tokenizer)] == info.decoded_vocab
    assert padded.decoded_vocab[len(tokenizer) :] == [b""] * 77
    assert padded.grammar_token_ids.max() < len(tokenizer)
    assert np.array_equal(padded.grammar_token_ids, info.grammar_token_ids)
    assert padded.is_special(len(tokenizer) + 5)
    assert padded.vocab_hash != info.vocab_hash
    with pytest.raises(ValueError, match="smaller"):
        TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer) - 1)


def test_explicit_stop_tokens_replace_defaults(loaded):
    _, tokenizer, info = loaded
    newline = tokenizer.encode("\n", add_special_tokens=False)[-1]
    custom = TokenizerInfo.from_huggingface(tokenizer, stop_token_ids=[newline])
    assert custom.stop_token_ids == [newline]
    # A stop token ends generation, so it is not grammar text.
    assert custom.decoded_vocab[newline] == b""
    assert newline not in set(custom.grammar_token_ids.tolist())
    with pytest.raises(ValueError, match="stop_token_ids holds id .* outside the vocabulary"):
        TokenizerInfo.from_huggingface(tokenizer, stop_token_ids=[info.vocab_size])


def test_hash_is_stable_across_loads():
    # Load time is measured in benchmarks, not asserted (shared machines are noisy).
    tokenizer, info = _tokenizer_and_info("qwen")  # the largest vocabulary (151,851)
    again = TokenizerInfo.from_huggingface(tokenizer)
    assert again.vocab_hash == info.vocab_hash
    assert again.decoded_vocab == info.decoded_vocab


def test_type_is_read_from_the_backend_not_the_name():
    tokenizers = pytest.importorskip("tokenizers")
    for name, (vocab_type, *_rest) in EXPECTED.items():
        path = require_shared(TOKENIZERS / name / "tokenizer.json")
        backend = tokenizers.Tokenizer.from_file(str(path))  # no name, no config: only the JSON
        info = TokenizerInfo.from_huggingface(backend, stop_token_ids=[])
        assert info.vocab_type == vocab_type
        assert info.decoded_vocab == _tokenizer_and_info(name)[1].decoded_vocab


def test_wordpiece_decoder_is_rejected():
    tokenizers = pytest.importorskip("tokenizers")
    model = tokenizers.models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]")
    backend = tokenizers.Tokenizer(model)
    backend.decoder = tokenizers.decoders.WordPiece()
    with pytest.raises(ValueError, match="unsupported tokenizer decoder"):
        TokenizerInfo.from_huggingface(backend, stop_token_ids=[0])


class _TiktokenStyle:
    """Stands in for a tiktoken-based tokenizer: bytes -> id ranks plus named specials."""

    def __init__(self, ranks, special_tokens, eos_token_id):
        self.mergeable_ranks = ranks
        self.special_tokens = special_tokens
        self.eos_token_id = eos_token_id

    def __len__(self):
        return len(self.mergeable_ranks) + len(self.special_tokens)


def test_raw_tiktoken_vocab_matches_the_byte_level_one():
    tokenizer, info = _tokenizer_and_info("qwen")
    ranks = {info.decoded_vocab[t]: int(t) for t in info.grammar_token_ids}
    specials = {tokenizer.convert_ids_to_tokens(t): t for t in info.special_token_ids}
    raw = TokenizerInfo.from_huggingface(_TiktokenStyle(ranks, specials, 151643))
    assert raw.vocab_type == "raw"
    assert raw.vocab_size == info.vocab_size
    assert raw.decoded_vocab == info.decoded_vocab
    assert set(raw.stop_token_ids) == {151643, 151645}  # eos plus <|im_end|>
    assert raw.vocab_hash == info.vocab_hash


def test_from_vocab_spellings():
    level = TokenizerInfo.from_vocab(["Ġhello", "Ċ", "Ã©", "<tool>", "ĉx"], "byte_level")
    assert level.decoded_vocab == [b" hello", b"\n", "é".encode(), b"<tool>", b"\tx"]
    spm = TokenizerInfo.from_vocab(
        ["<unk>", "<s>", "</s>", "<0x0A>", "<0xFF>", "▁the", "▁▁", "é"],
        "byte_fallback",
        special_token_ids=[0, 1],
        stop_token_ids=[2],
    )
    assert spm.decoded_vocab == [b"", b"", b"", b"\n", b"\xff", b" the", b"  ", "é".encode()]
    assert spm.grammar_token_ids.tolist() == [3, 4, 5, 6, 7]
    assert spm.special_token_ids == [0, 1, 2]
    raw = TokenizerInfo.from_vocab([b"\xe2\x82", "ab", None, b""], "raw", vocab_size=6)
    assert raw.decoded_vocab == [b"\xe2\x82", b"ab", b"", b"", b"", b""]
    assert raw.grammar_token_ids.tolist() == [0, 1]  # holes, empty and padding excluded
    assert raw.decode_tokens([1, 0, 2, 5]) == b"ab\xe2\x82"
    with pytest.raises(ValueError, match=r"token_ids holds 6, outside the vocabulary \[0, 6\)"):
        raw.decode_tokens([6])


def test_decoders_agree_with_gpt2_alphabet_for_all_bytes():
    # The GPT-2 alphabet maps printable latin-1 bytes to themselves and the other 68 bytes to
    # U+0100.., in byte order: check both halves directly.
    for b in range(256):
        ch = chr(b)
        printable = 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
        if printable:
            assert byte_level_decode(ch) == bytes([b])
    assert byte_level_decode("Ā") == b"\x00" and byte_level_decode("Ġ") == b" "
    assert byte_level_decode("Ń") == b"\xad"  # the last of the 68 shifted bytes
    assert byte_fallback_decode("<0x41>") == b"A" and byte_fallback_decode("<0x4>") == b"<0x4>"


def test_flat_vocab_and_sorted_ids():
    info = TokenizerInfo.from_vocab(["b", "ab", "", "a", "abc"], "raw", vocab_size=7)
    data, offsets = info.flat_vocab()
    assert offsets.tolist() == [0, 1, 3, 3, 4, 7, 7, 7]
    assert bytes(data[offsets[4] : offsets[5]]) == b"abc"
    assert info.sorted_grammar_token_ids().tolist() == [3, 1, 4, 0]


def test_bad_arguments_have_clear_errors():
    with pytest.raises(ValueError, match="vocab_type"):
        TokenizerInfo([b"a"], vocab_type="wordpiece")
    with pytest.raises(ValueError, match="smaller"):
        TokenizerInfo([b"a", b"b"], vocab_type="raw", vocab_size=1)
    with pytest.raises(TypeError, match="encoded_vocab"):
        TokenizerInfo([1], vocab_type="raw")
    with pytest.raises(ValueError, match="special_token_ids"):
        TokenizerInfo([b"a"], vocab_type="raw", special_token_ids=[-1])
    with pytest.raises(TypeError, match="cannot read a vocabulary"):
        TokenizerInfo.from_huggingface(object())


class _Processor:
    """Stands in for a multimodal processor that wraps its tokenizer."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer


def test_processor_is_unwrapped():
    tokenizer, info = _tokenizer_and_info("smollm2")
    wrapped = TokenizerInfo.from_huggingface(_Processor(tokenizer))
    assert wrapped.decoded_vocab == info.decoded_vocab
    assert wrapped.stop_token_ids == info.stop_token_ids


def test_added_tokens_plain_text_and_special():
    tokenizer = _load("smollm2")  # a fresh copy: add_tokens mutates it
    tokenizer.add_tokens(["<tool>", "Zoë_marker"])
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|mine|>"]})
    info = TokenizerInfo.from_huggingface(tokenizer)
    assert info.vocab_size == 49_155
    tool, zoe, mine = tokenizer.convert_tokens_to_ids(["<tool>", "Zoë_marker", "<|mine|>"])
    assert info.decoded_vocab[tool] == b"<tool>"
    assert info.decoded_vocab[zoe] == "Zoë_marker".encode()
    assert info.decoded_vocab[mine] == b"" and mine in info.special_token_ids
    text = "call <tool> for Zoë_marker now"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tool in ids and zoe in ids
    assert info.decode_tokens(ids) == text.encode()


def test_xgrammar_constructor_decodes_encoded_tokens():
    """XGrammar's TokenizerInfo(encoded_vocab, vocab_type): tokens spelled the tokenizer's way
    (str or their UTF-8 bytes) are decoded; bytes that are not UTF-8 stand for themselves."""
    level = TokenizerInfo(["Ġa", "a", "<0x41>", b"\xc4\xa0b", b"\xff"], pm.VocabType.BYTE_LEVEL)
    assert level.decoded_vocab == [b" a", b"a", b"<0x41>", b" b", b"\xff"]
    assert level.vocab_type == pm.VocabType.BYTE_LEVEL and level.vocab_type == "byte_level"
    fallback = TokenizerInfo(["▁b", "<0x41>", "Ġa"], pm.VocabType.BYTE_FALLBACK, add_prefix_space=True)
    assert fallback.decoded_vocab == [b" b", b"A", "Ġa".encode()]
    assert fallback.add_prefix_space
    raw = TokenizerInfo(["Ġa", b"\xff"])  # RAW is the default, as in XGrammar
    assert raw.vocab_type == pm.VocabType.RAW and raw.decoded_vocab == ["Ġa".encode(), b"\xff"]


def test_xgrammar_constructor_detects_stop_tokens_only_when_none_given():
    vocab = ["a", "</s>", "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<eos>", "<s>"]
    assert TokenizerInfo(vocab).stop_token_ids == [1, 3, 4, 5]  # XGrammar's list; not <|im_end|>
    assert TokenizerInfo(vocab, stop_token_ids=0).stop_token_ids == [0]
    assert TokenizerInfo.from_vocab(vocab).stop_token_ids == []  # pushmask's from_vocab guesses none


def test_metadata_round_trip_rebuilds_the_same_vocabulary():
    vocab = ["Ġa", "b", "</s>", "<0x0A>"]
    info = TokenizerInfo(vocab, pm.VocabType.BYTE_LEVEL, vocab_size=6, add_prefix_space=True)
    assert json.loads(info.dump_metadata()) == {
        "vocab_type": 2,
        "vocab_size": 6,
        "add_prefix_space": True,
        "stop_token_ids": [2],
    }
    again = TokenizerInfo.from_vocab_and_metadata(vocab, info.dump_metadata())
    assert again.vocab_hash == info.vocab_hash and again.add_prefix_space
    with pytest.raises(pm.InvalidArgumentError, match="metadata"):
        TokenizerInfo.from_vocab_and_metadata(vocab, '{"vocab_type": 7}')


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_add_prefix_space_is_what_the_tokenizer_does(name):
    """The oracle: whether the tokenizer's own encoding of "a" starts with a space."""
    tokenizer, info = _tokenizer_and_info(name)
    first = tokenizer.encode("a", add_special_tokens=False)[0]
    assert info.add_prefix_space == info.decoded_vocab[first].startswith(b" ")
    assert info.add_prefix_space == (name == "mistral")
