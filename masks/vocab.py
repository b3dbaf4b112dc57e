"""Vocabularies: every token id mapped to the exact bytes it stands for.

Grammars work on bytes, so the mask compiler needs, for each token id, the byte string the
model emits when it samples that id. Tokenizers spell those bytes three ways:

- ``byte_level``: byte-level BPE (GPT-2, Llama-3, Qwen, SmolLM2). Each byte is written as one
  printable character of the GPT-2 "byte alphabet" (space is ``Ġ``, newline ``Ċ``).
- ``byte_fallback``: SentencePiece BPE with byte fallback (Llama-2, Mistral). ``▁`` stands for a
  space and tokens ``<0xNN>`` stand for the single byte NN.
- ``raw``: the vocabulary already holds bytes (tiktoken ``mergeable_ranks``) or plain UTF-8 text.

Special tokens (BOS, EOS, chat markers, ``<unk>``) are never produced by a grammar; their bytes
here are ``b""``. Stop tokens are special too: the matcher allows them only when the grammar may
end. Ids from the tokenizer's size up to the model's ``vocab_size`` are padding: also ``b""``.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Iterable, Sequence

import numpy as np

from ..core.errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    PushmaskError,
    check_argument,
    check_integer,
    check_integers,
)
from ..core.serialization import DeserializeError, DeserializeFormatError, check_header, from_json, header, to_json

__all__ = [
    "TokenizerInfo",
    "VocabType",
    "VOCAB_TYPES",
    "KNOWN_STOP_MARKERS",
    "byte_level_decode",
    "byte_fallback_decode",
]

VOCAB_TYPES = ("byte_level", "byte_fallback", "raw")


class VocabType(enum.Enum):
    """How a vocabulary spells bytes (XGrammar's enum and numbering). A member also equals its
    pushmask name (``VocabType.BYTE_LEVEL == "byte_level"``), so both spellings work."""

    RAW = 0
    BYTE_FALLBACK = 1
    BYTE_LEVEL = 2

    @property
    def label(self) -> str:
        """pushmask's name of the type: "raw", "byte_fallback" or "byte_level"."""
        return self.name.lower()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.label == other
        return self is other

    def __hash__(self) -> int:
        return hash(self.label)


# Tokens XGrammar takes for stop tokens when TokenizerInfo(...) gets no stop_token_ids.
_DETECTED_STOP_TOKENS = frozenset(
    (
        "</s>",
        "<|end_of_text|>",
        "<|eot_id|>",
        "<|endoftext|>",
        "<eos>",
        "<|eos|>",
        "<end_of_turn>",
        "<｜end▁of▁sentence｜>",
    )
)
_PAYLOAD_KIND = "TokenizerInfo"

# End-of-turn / end-of-text markers of common chat models. When the caller gives no stop ids,
# those present among the special tokens join eos_token_id as stop tokens.
KNOWN_STOP_MARKERS = (
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|endoftext|>",
    "</s>",
    "<|end|>",
    "<eos>",
    "<end_of_turn>",
)


def _gpt2_byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table (as in openai/gpt-2 encoder.bytes_to_unicode)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_TO_CHAR = _gpt2_byte_alphabet()
# str.translate table: alphabet character -> the latin-1 character of its byte, so that
# ``s.translate(_CHAR_TO_LATIN1).encode("latin-1")`` decodes a whole token at C speed.
_CHAR_TO_LATIN1 = {ord(ch): chr(b) for b, ch in _BYTE_TO_CHAR.items()}
_ALPHABET = frozenset(_BYTE_TO_CHAR.values())

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPM_SPACE = "\u2581"  # "▁", SentencePiece's stand-in for a space


def byte_level_decode(token: str) -> bytes:
    """Bytes of a byte-level BPE token.

    Like the Hugging Face ByteLevel decoder, a token with a character outside the GPT-2 byte
    alphabet (an added token such as ``"<tool_call>"`` written as literal text) is its UTF-8.
    """
    if _ALPHABET.issuperset(token):
        return token.translate(_CHAR_TO_LATIN1).encode("latin-1")
    return token.encode("utf-8")


def byte_fallback_decode(token: str) -> bytes:
    """Bytes of a SentencePiece token: ``<0xNN>`` is byte NN, ``▁`` is a space, the rest UTF-8."""
    if len(token) == 6:
        match = _BYTE_TOKEN.fullmatch(token)
        if match:
            return bytes([int(match.group(1), 16)])
    return token.replace(_SPM_SPACE, " ").encode("utf-8")


def _raw_decode(token: str | bytes) -> bytes:
    return token if isinstance(token, bytes) else token.encode("utf-8")


_DECODERS = {
    "byte_level": byte_level_decode,
    "byte_fallback": byte_fallback_decode,
    "raw": _raw_decode,
}


class TokenizerInfo:
    """A model vocabulary as exact bytes per token id, plus which ids are special or stop tokens.

    Attributes:
        vocab_size: the model's vocabulary size (logits width); ids past the tokenizer are padding.
        decoded_vocab: ``vocab_size`` byte strings; ``b""`` for special, stop and padding ids.
        special_token_ids: sorted ids a grammar never produces: the specials plus the stop
            tokens. Padding ids are not listed but are excluded the same way.
        stop_token_ids: ids that end generation; allowed only when the grammar may end.
        vocab_type: how the tokenizer spelled bytes: "byte_level", "byte_fallback" or "raw".
        vocab_hash: sha256 hex of (vocab_size, decoded vocab, special ids), for cache keys.
        grammar_token_ids: int32 ids a grammar may produce: not special, not padding, and with
            at least one byte (an empty token could be emitted forever without progress).
    """

    def __init__(
        self,
        encoded_vocab: Sequence[str | bytes | None],
        vocab_type: VocabType | str = VocabType.RAW,
        *,
        vocab_size: int | None = None,
        stop_token_ids: Iterable[int] | int | None = None,
        add_prefix_space: bool = False,
        special_token_ids: Iterable[int] | None = None,
        special_token_texts: dict[str, int] | None = None,
    ):
        """XGrammar's constructor: ``encoded_vocab`` holds each token as the tokenizer spells it
        (str, or its UTF-8 bytes), decoded the ``vocab_type`` way; a byte-level token outside the
        GPT-2 alphabet is its UTF-8. Without ``stop_token_ids`` the tokens XGrammar detects
        (``</s>``, ``<|eot_id|>``, ``<|endoftext|>``, ...) are the stop tokens."""
        vocab_type = _check_vocab_type(vocab_type)
        _check_token_list(encoded_vocab, "encoded_vocab", "TokenizerInfo", str)
        decode = _DECODERS[vocab_type.label]
        decoded = [None if token is None else _decode_token(token, decode) for token in encoded_vocab]
        if stop_token_ids is None:
            stop_token_ids = [i for i, token in enumerate(encoded_vocab) if _text(token) in _DETECTED_STOP_TOKENS]
        self._build(
            decoded,
            vocab_type,
            vocab_size=vocab_size,
            stop_token_ids=stop_token_ids,
            special_token_ids=special_token_ids,
            special_token_texts=special_token_texts,
            add_prefix_space=add_prefix_space,
        )

    @classmethod
    def _from_decoded(cls, decoded: Sequence[bytes | None], vocab_type: VocabType | str, **options) -> TokenizerInfo:
        """A TokenizerInfo from tokens already decoded to their bytes (the readers' path)."""
        info = cls.__new__(cls)
        info._build(decoded, _check_vocab_type(vocab_type), **options)
        return info

    def _build(
        self,
        encoded_vocab: Sequence[bytes | None],
        vocab_type: VocabType,
        *,
        vocab_size: int | None = None,
        stop_token_ids: Iterable[int] | int | None = None,
        special_token_ids: Iterable[int] | None = None,
        special_token_texts: dict[str, int] | None = None,
        add_prefix_space: bool = False,
    ) -> None:
        """Fill in the attributes from decoded tokens (``None`` for an unused id)."""
        _check_token_list(encoded_vocab, "encoded_vocab", "TokenizerInfo")
        n_tokens = len(encoded_vocab)
        # {text: id} of special tokens, so grammars can name them (`<|python_tag|>`).
        self.special_token_texts: dict[str, int] = dict(special_token_texts or {})
        vocab_size = n_tokens if vocab_size is None else check_integer(vocab_size, "vocab_size", "TokenizerInfo")
        if vocab_size < n_tokens:
            raise InvalidArgumentError(
                f"TokenizerInfo: vocab_size={vocab_size} is smaller than the tokenizer's {n_tokens} tokens; "
                "pass the model's vocabulary size (its logits' width), which covers every token id"
            )
        self.vocab_type: VocabType = vocab_type
        self.vocab_size = vocab_size
        self.add_prefix_space = bool(add_prefix_space)

        if isinstance(stop_token_ids, (int, np.integer)) and not isinstance(stop_token_ids, bool):
            stop_token_ids = [stop_token_ids]  # one id, as xgrammar takes it
        stops = _unique_ids(() if stop_token_ids is None else stop_token_ids, vocab_size, "stop_token_ids")
        specials = set(
            _unique_ids(() if special_token_ids is None else special_token_ids, vocab_size, "special_token_ids")
        )
        # A stop token ends generation; it never stands for grammar text.
        specials.update(stops)
        self._stop_token_ids: tuple[int, ...] = stops
        self._special_token_ids: tuple[int, ...] = tuple(sorted(specials))
        self._special_set = frozenset(specials)

        decoded: list[bytes] = []
        for token_id, token in enumerate(encoded_vocab):
            decoded.append(b"" if token is None or token_id in specials else bytes(token))
        decoded.extend([b""] * (vocab_size - n_tokens))  # model padding ids
        self.decoded_vocab: list[bytes] = decoded
        self.num_tokenizer_tokens = n_tokens

        lengths = np.fromiter((len(b) for b in decoded), dtype=np.int64, count=vocab_size)
        self.token_lengths: np.ndarray = lengths
        self.grammar_token_ids: np.ndarray = np.flatnonzero(lengths > 0).astype(np.int32)

        digest = hashlib.sha256()
        digest.update(f"pushmask-vocab-v1:{vocab_size}:".encode())
        digest.update(lengths.astype("<i8").tobytes())
        digest.update(b"".join(decoded))
        digest.update(np.asarray(self.special_token_ids, dtype="<i8").tobytes())
        self.vocab_hash: str = digest.hexdigest()

        self._flat: tuple[np.ndarray, np.ndarray] | None = None
        self._sorted_ids: np.ndarray | None = None
        self._flat_offsets_list: list[int] | None = None

    @property
    def stop_token_ids(self) -> list[int]:
        """The stop token ids, as a new list on each read (XGrammar returns a list)."""
        return list(self._stop_token_ids)

    @property
    def special_token_ids(self) -> list[int]:
        """The sorted special token ids (stop tokens included), as a new list on each read."""
        return list(self._special_token_ids)

    @staticmethod
    def _detect_vocab_type_from_vocab(vocab: Iterable[str]) -> VocabType | None:
        """How a vocabulary spells bytes, read from its token texts alone (XGrammar's name; the
        texts, or a {text: id} dict): BYTE_FALLBACK when it has at least half of the 256 byte
        pieces ``<0x00>``..``<0xFF>``; BYTE_LEVEL when it has at least half of the GPT-2 alphabet
        as one-character tokens and 99% of its tokens are spelled in that alphabet (added tokens
        such as chat markers may not be); else None (neither)."""
        texts = set(vocab)
        byte_pieces = sum(f"<0x{byte:02X}>" in texts for byte in range(256))
        if 2 * byte_pieces >= 256:  # checked first: a large vocabulary may hold the alphabet too
            return VocabType.BYTE_FALLBACK
        if 2 * len(texts & _ALPHABET) < len(_ALPHABET):
            return None
        in_alphabet = sum(all(char in _ALPHABET for char in text) for text in texts)
        return VocabType.BYTE_LEVEL if in_alphabet >= 0.99 * len(texts) else None

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_vocab(
        cls,
        tokens: Sequence[str | bytes | None],
        vocab_type: VocabType | str = "raw",
        *,
        vocab_size: int | None = None,
        stop_token_ids: Iterable[int] | None = None,
        special_token_ids: Iterable[int] | None = None,
    ) -> TokenizerInfo:
        """Build from token strings spelled the ``vocab_type`` way (bytes are taken as they are).

        ``None`` marks an unused id; no stop token is guessed. Handy in tests:
        ``TokenizerInfo.from_vocab(["a", "b", "ab", "</s>"], stop_token_ids=[3])``.
        """
        vocab_type = _check_vocab_type(vocab_type)
        _check_token_list(tokens, "tokens", "TokenizerInfo.from_vocab", str)
        decode = _DECODERS[vocab_type.label]
        encoded = [
            None if t is None else (bytes(t) if isinstance(t, (bytes, bytearray)) else decode(t)) for t in tokens
        ]
        return cls._from_decoded(
            encoded,
            vocab_type,
            vocab_size=vocab_size,
            stop_token_ids=stop_token_ids,
            special_token_ids=special_token_ids,
        )

    @classmethod
    def from_huggingface(
        cls,
        tokenizer,
        vocab_size: int | None = None,
        stop_token_ids: Iterable[int] | None = None,
    ) -> TokenizerInfo:
        """Build from a Hugging Face tokenizer (fast/backend), a ``tokenizers.Tokenizer``, or a
        tiktoken-style tokenizer exposing ``mergeable_ranks`` (bytes -> id).

        The vocabulary type is read from the backend tokenizer's decoder, not the model name.
        Special tokens (added tokens flagged special, and ``all_special_ids``) get no bytes.
        Plain-text added tokens stand for their text's UTF-8. Default stop tokens: eos_token_id
        plus the special tokens among KNOWN_STOP_MARKERS.
        ``vocab_size`` defaults to the tokenizer's size; a larger value adds padding ids (the
        model's logits are often wider than its tokenizer).
        """
        inner = getattr(tokenizer, "tokenizer", None)
        wraps_tokenizer = inner is not None and not hasattr(tokenizer, "get_vocab")
        if wraps_tokenizer and _tiktoken_ranks(tokenizer) is None:
            tokenizer = inner  # a processor (e.g. AutoProcessor) wrapping its tokenizer
        tokens, vocab_type, specials, named_specials = _read_tokenizer(tokenizer)
        n_tokens = len(tokens)
        if vocab_size is None:
            vocab_size = max(n_tokens, _len_or_zero(tokenizer))
        elif check_integer(vocab_size, "vocab_size", "TokenizerInfo.from_huggingface") < n_tokens:
            raise InvalidArgumentError(
                f"TokenizerInfo.from_huggingface: vocab_size={vocab_size} is smaller than the tokenizer's "
                f"{n_tokens} token ids; pass the model's vocabulary size (its logits' width) or leave it out"
            )

        if stop_token_ids is None:
            stop_token_ids = _default_stop_ids(tokenizer, named_specials)
            if not stop_token_ids:
                raise InvalidArgumentError(
                    "TokenizerInfo.from_huggingface: the tokenizer has no eos_token_id and no known end marker; "
                    "pass stop_token_ids explicitly"
                )
        return cls._from_decoded(
            tokens,
            vocab_type,
            vocab_size=vocab_size,
            stop_token_ids=stop_token_ids,
            add_prefix_space=_adds_prefix_space(tokenizer, vocab_type),
            special_token_ids=specials,
            special_token_texts={text: i for text, i in named_specials.items() if 0 <= i < vocab_size},
        )

    # ------------------------------------------------------------------ helpers

    def token_id(self, token: int | str) -> int:
        """The id of a token given by id, by a special token's text (`<|python_tag|>`), or by
        the text of an ordinary token that spells exactly it.  Raises InvalidArgumentError (a ValueError)
        naming the token when the vocabulary has no such single token."""
        if isinstance(token, bool) or not isinstance(token, (int, np.integer, str)):
            raise ArgumentTypeError(f"a token must be an id (int) or a token's text (str), got {token!r:.60}")
        if not isinstance(token, str):
            if not 0 <= int(token) < self.vocab_size:
                raise InvalidArgumentError(
                    f"token id {int(token)} out of range: the vocabulary is [0, {self.vocab_size})"
                )
            return int(token)
        if token in self.special_token_texts:
            return self.special_token_texts[token]
        by_text: dict[bytes, int] | None = getattr(self, "_ids_by_bytes", None)
        if by_text is None:
            by_text = {}
            for i, data in enumerate(self.decoded_vocab):
                if data:
                    by_text.setdefault(data, i)
            self._ids_by_bytes = by_text
        found = by_text.get(token.encode("utf-8"))
        if found is None:
            raise InvalidArgumentError(
                f"no single token of this vocabulary is {token!r}; name a special token "
                f"(e.g. {next(iter(self.special_token_texts), '<|eot_id|>')!r}) or give its id"
            )
        return found

    def decode_tokens(self, token_ids: Iterable[int]) -> bytes:
        """Bytes of a token sequence; special, stop and padding ids contribute nothing."""
        vocab = self.decoded_vocab
        out = []
        for token_id in token_ids:
            token_id = int(token_id)
            if not 0 <= token_id < self.vocab_size:
                raise InvalidArgumentError(
                    f"decode_tokens: token_ids holds {token_id}, outside the vocabulary [0, {self.vocab_size})"
                )
            out.append(vocab[token_id])
        return b"".join(out)

    def is_special(self, token_id: int) -> bool:
        """True for ids a grammar never produces as text: specials, stop tokens and padding."""
        return token_id in self._special_set or token_id >= self.num_tokenizer_tokens

    def flat_vocab(self) -> tuple[np.ndarray, np.ndarray]:
        """All token bytes in one uint8 array plus int64 offsets (length vocab_size + 1), so
        token t is ``data[offsets[t]:offsets[t + 1]]``: the layout numba kernels want."""
        if self._flat is None:
            offsets = np.zeros(self.vocab_size + 1, dtype=np.int64)
            np.cumsum(self.token_lengths, out=offsets[1:])
            data = np.frombuffer(b"".join(self.decoded_vocab), dtype=np.uint8).copy()
            self._flat = (data, offsets)
        return self._flat

    def flat_offsets_list(self) -> list[int]:
        """flat_vocab()'s offsets as a Python list (indexing it is cheaper per token)."""
        if self._flat_offsets_list is None:
            self._flat_offsets_list = self.flat_vocab()[1].tolist()
        return self._flat_offsets_list

    def sorted_grammar_token_ids(self) -> np.ndarray:
        """grammar_token_ids ordered by their bytes (lexicographic), for building a token trie."""
        if self._sorted_ids is None:
            vocab = self.decoded_vocab
            order = sorted(self.grammar_token_ids.tolist(), key=vocab.__getitem__)
            self._sorted_ids = np.asarray(order, dtype=np.int32)
        return self._sorted_ids

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return (
            f"TokenizerInfo(vocab_type={self.vocab_type.label!r}, vocab_size={self.vocab_size}, "
            f"grammar_tokens={len(self.grammar_token_ids)}, "
            f"stop_token_ids={list(self.stop_token_ids)}, hash={self.vocab_hash[:12]})"
        )

    # ------------------------------------------------------------------ serialization

    def serialize_json(self) -> str:
        """This vocabulary as JSON text (xgrammar's name); TokenizerInfo.deserialize_json reads it."""
        return to_json(self._payload())

    @staticmethod
    def deserialize_json(text: str | bytes) -> TokenizerInfo:
        """The TokenizerInfo serialize_json wrote (DeserializeError if the text is not one)."""
        return TokenizerInfo._from_payload(from_json(text, _PAYLOAD_KIND))

    def dump_metadata(self) -> str:
        """XGrammar's metadata JSON (vocab_type number, vocab_size, add_prefix_space,
        stop_token_ids): with the encoded vocabulary, from_vocab_and_metadata rebuilds this."""
        return json.dumps(
            {
                "vocab_type": self.vocab_type.value,
                "vocab_size": self.vocab_size,
                "add_prefix_space": self.add_prefix_space,
                "stop_token_ids": list(self.stop_token_ids),
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_vocab_and_metadata(encoded_vocab: Sequence[str | bytes | None], metadata: str) -> TokenizerInfo:
        """The TokenizerInfo of an encoded vocabulary and dump_metadata's JSON (XGrammar's name)."""
        check_argument(metadata, (str, bytes), "metadata", "TokenizerInfo.from_vocab_and_metadata")
        try:
            fields = json.loads(metadata)
            vocab_type = VocabType(fields["vocab_type"])
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidArgumentError(
                f"TokenizerInfo.from_vocab_and_metadata: metadata is not dump_metadata's JSON: {error}"
            ) from None
        return TokenizerInfo(
            encoded_vocab,
            vocab_type,
            vocab_size=fields.get("vocab_size"),
            stop_token_ids=fields.get("stop_token_ids"),
            add_prefix_space=fields.get("add_prefix_space", False),
        )

    def _payload(self) -> dict:
        n = self.num_tokenizer_tokens
        return {
            **header(_PAYLOAD_KIND),
            "vocab_type": self.vocab_type.label,
            "vocab_size": self.vocab_size,
            "add_prefix_space": self.add_prefix_space,
            "stop_token_ids": list(self.stop_token_ids),
            "special_token_ids": list(self.special_token_ids),
            "token_lengths": self.token_lengths[:n].copy(),
            "token_bytes": b"".join(self.decoded_vocab[:n]),
            "vocab_hash": self.vocab_hash,
        }

    @staticmethod
    def _from_payload(payload: dict) -> TokenizerInfo:
        payload = check_header(payload, _PAYLOAD_KIND)
        try:
            data, ends = payload["token_bytes"], np.cumsum(payload["token_lengths"]).tolist()
            tokens = [data[start:end] for start, end in zip([0] + ends[:-1], ends)]
            info = TokenizerInfo._from_decoded(
                tokens,
                payload["vocab_type"],
                vocab_size=payload["vocab_size"],
                stop_token_ids=payload["stop_token_ids"],
                special_token_ids=payload["special_token_ids"],
                add_prefix_space=payload.get("add_prefix_space", False),
            )
        except (PushmaskError, KeyError, TypeError, ValueError) as error:  # a field missing or out of range
            raise DeserializeFormatError(f"the serialized TokenizerInfo is damaged: {error}") from None
        if info.vocab_hash != payload["vocab_hash"]:
            raise DeserializeError("the serialized TokenizerInfo is damaged: its vocabulary hash does not match")
        return info

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_flat"] = None
        state["_sorted_ids"] = None
        state["_flat_offsets_list"] = None
        state.pop("_ids_by_bytes", None)
        return state


# ---------------------------------------------------------------------- reading tokenizers


def _check_vocab_type(vocab_type) -> VocabType:
    """`vocab_type` as a VocabType: a member, or its pushmask name ("byte_level", ...)."""
    if isinstance(vocab_type, VocabType):
        return vocab_type
    if not isinstance(vocab_type, str) or vocab_type not in VOCAB_TYPES:
        raise InvalidArgumentError(
            f"TokenizerInfo: vocab_type must be a VocabType or one of {VOCAB_TYPES}, got {vocab_type!r:.60}"
        )
    return VocabType[vocab_type.upper()]


def _text(token: str | bytes | bytearray | memoryview | None) -> str | None:
    """An encoded token as text: a str, or bytes read as UTF-8; None when it is neither."""
    if token is None or isinstance(token, str):
        return token
    try:
        return bytes(token).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _decode_token(token: str | bytes | bytearray | memoryview, decode) -> bytes:
    """The bytes an encoded token stands for; bytes that are not UTF-8 stand for themselves
    (as in XGrammar)."""
    if isinstance(token, str):
        return decode(token)
    text = _text(token)
    return bytes(token) if text is None else decode(text)


def _adds_prefix_space(tokenizer, vocab_type: VocabType) -> bool:
    """Whether the tokenizer puts a space before the text it encodes (XGrammar's test: the first
    token of "a" starts with the type's space character)."""
    try:
        tokens = tokenizer.convert_ids_to_tokens(tokenizer.encode("a", add_special_tokens=False))
    except (AttributeError, TypeError, ValueError):
        return False
    prefix = _SPM_SPACE if vocab_type == VocabType.BYTE_FALLBACK else "Ġ"
    return bool(tokens) and isinstance(tokens[0], str) and tokens[0].startswith(prefix)


def _check_token_list(tokens, name: str, where: str, *also: type) -> None:
    """ArgumentTypeError unless `tokens` is a list (or tuple) of bytes, None or `also` types."""
    kinds: tuple[type, ...] = (bytes, bytearray, memoryview, type(None), *also)
    if not isinstance(tokens, (list, tuple)):
        raise ArgumentTypeError(
            f"{where}: {name} must be a list of token {'strings or ' if also else ''}bytes "
            f"by id, got {type(tokens).__name__}"
        )
    for token_id, token in enumerate(tokens):
        if not isinstance(token, kinds):
            raise ArgumentTypeError(
                f"{where}: {name}[{token_id}] must be {'str or ' if also else ''}bytes, got "
                f"{type(token).__name__}" + ("" if also else "; use TokenizerInfo.from_vocab for string tokens")
            )


def _unique_ids(ids: object, vocab_size: int, what: str) -> tuple[int, ...]:
    """`ids` (checked: ints, as the user may pass anything) without repeats, each in the vocabulary."""
    out: list[int] = []
    for token_id in check_integers(ids, what, "TokenizerInfo"):
        if not 0 <= token_id < vocab_size:
            raise InvalidArgumentError(
                f"TokenizerInfo: {what} holds id {token_id}, outside the vocabulary [0, {vocab_size}); "
                "pass ids of this tokenizer (or a larger vocab_size)"
            )
        if token_id not in out:
            out.append(token_id)
    return tuple(out)


def _len_or_zero(tokenizer) -> int:
    try:
        return len(tokenizer)
    except TypeError:
        return 0


def _read_tokenizer(tokenizer):
    """Return (bytes per id with None for holes, vocab_type, special ids, {special text: id})."""
    ranks = _tiktoken_ranks(tokenizer)
    if ranks is not None:
        return _read_tiktoken(tokenizer, ranks)
    backend = _backend_tokenizer(tokenizer)
    if backend is not None:
        return _read_backend(tokenizer, backend)
    return _read_plain_vocab(tokenizer)


def _tiktoken_owners(tokenizer) -> list:
    """The tokenizer and the objects tiktoken-based wrappers keep their tables on."""
    inner = [getattr(tokenizer, name, None) for name in ("tokenizer", "encoder")]
    return [tokenizer] + [owner for owner in inner if owner is not None]


def _tiktoken_ranks(tokenizer) -> dict | None:
    """The bytes -> id table of a tiktoken-style tokenizer, if it exposes one."""
    for owner in _tiktoken_owners(tokenizer):
        for name in ("mergeable_ranks", "_mergeable_ranks"):
            ranks = getattr(owner, name, None)
            if isinstance(ranks, dict) and ranks and isinstance(next(iter(ranks)), bytes):
                return ranks
    return None


def _read_tiktoken(tokenizer, ranks: dict):
    specials_by_text: dict[str, int] = {}
    for owner in _tiktoken_owners(tokenizer):
        for name in ("special_tokens", "_special_tokens"):
            table = getattr(owner, name, None)
            if isinstance(table, dict):
                specials_by_text.update({str(k): int(v) for k, v in table.items()})
    specials_by_text.update(_hf_named_specials(tokenizer))
    size = max(list(ranks.values()) + list(specials_by_text.values()), default=-1) + 1
    tokens: list[bytes | None] = [None] * size
    for token, token_id in ranks.items():
        tokens[token_id] = bytes(token)
    specials = set(specials_by_text.values()) | _hf_special_ids(tokenizer)
    return tokens, "raw", specials, specials_by_text


def _backend_tokenizer(tokenizer):
    """The ``tokenizers.Tokenizer`` behind a Hugging Face tokenizer, or the object itself."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend
    if type(tokenizer).__module__.startswith("tokenizers") and hasattr(tokenizer, "get_vocab"):
        return tokenizer
    return None


def _component_json(component) -> str:
    """The JSON description of a tokenizers decoder / pre-tokenizer ('' when absent)."""
    if component is None:
        return ""
    state = component.__getstate__()
    return state.decode("utf-8") if isinstance(state, bytes) else str(state)


def _backend_vocab_type(backend) -> str:
    """Classify from the decoder (what turns ids back into text), then the pre-tokenizer."""
    decoder = _component_json(getattr(backend, "decoder", None))
    pre_tokenizer = _component_json(getattr(backend, "pre_tokenizer", None))
    if '"ByteLevel"' in decoder:
        return "byte_level"
    if '"ByteFallback"' in decoder or '"Metaspace"' in decoder or _SPM_SPACE in decoder:
        return "byte_fallback"
    if '"WordPiece"' in decoder or '"BPEDecoder"' in decoder or '"CTC"' in decoder:
        raise InvalidArgumentError(
            "TokenizerInfo.from_huggingface: unsupported tokenizer decoder (WordPiece/BPEDecoder/CTC add or drop characters "
            f"between tokens, so tokens have no fixed bytes): {decoder[:200]}"
        )
    if not decoder and '"ByteLevel"' in pre_tokenizer:
        return "byte_level"
    if getattr(getattr(backend, "model", None), "byte_fallback", False):
        return "byte_fallback"
    return "raw"


def _read_backend(tokenizer, backend):
    vocab_type = _backend_vocab_type(backend)
    decode = _DECODERS[vocab_type]
    vocab = backend.get_vocab(with_added_tokens=True)
    size = max(vocab.values(), default=-1) + 1
    tokens: list[bytes | None] = [None] * size
    for text, token_id in vocab.items():
        tokens[token_id] = decode(text)

    named: dict[str, int] = {}
    specials: set[int] = set()
    # Added tokens flagged special (the backend's own table covers a bare tokenizers.Tokenizer).
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if added is None and hasattr(backend, "get_added_tokens_decoder"):
        added = backend.get_added_tokens_decoder()
    model = getattr(backend, "model", None)
    for token_id, token in (added or {}).items():
        token_id, content = int(token_id), str(token.content)
        if getattr(token, "special", False):
            specials.add(token_id)
            named[content] = token_id
        elif model is None or model.token_to_id(content) != token_id:
            # A plain-text added token outside the model vocabulary is matched on the literal
            # input text, so it stands for that text's UTF-8. (The ByteLevel decoder would map
            # its latin-1-range characters such as "ë" to single bytes and corrupt them.)
            tokens[token_id] = content.encode("utf-8")
    named.update(_hf_named_specials(tokenizer))
    specials |= _hf_special_ids(tokenizer)
    return tokens, vocab_type, specials, named


def _read_plain_vocab(tokenizer):
    """A tokenizer with only ``get_vocab()``: bytes keys are raw; string keys are classified by
    their alphabet (``<0x0A>`` means byte fallback, ``Ġ``/``Ċ`` byte-level), else UTF-8 text."""
    if not hasattr(tokenizer, "get_vocab"):
        raise ArgumentTypeError(
            f"TokenizerInfo.from_huggingface: tokenizer: cannot read a vocabulary from {type(tokenizer).__name__}: expected a Hugging Face "
            "tokenizer, a tokenizers.Tokenizer or an object with mergeable_ranks"
        )
    vocab = tokenizer.get_vocab()
    keys = list(vocab)
    if keys and all(isinstance(k, bytes) for k in keys):
        vocab_type = "raw"
    elif "<0x0A>" in vocab and any(_SPM_SPACE in k for k in keys):
        vocab_type = "byte_fallback"
    elif ("Ġ" in vocab or "Ċ" in vocab) and all(_ALPHABET.issuperset(k) for k in keys[:1000]):
        vocab_type = "byte_level"
    else:
        vocab_type = "raw"
    decode = _DECODERS[vocab_type]
    size = max(vocab.values(), default=-1) + 1
    tokens: list[bytes | None] = [None] * size
    for text, token_id in vocab.items():
        tokens[token_id] = decode(text)
    named = _hf_named_specials(tokenizer)
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    specials = {int(i) for i, t in added.items() if getattr(t, "special", False)}
    specials |= _hf_special_ids(tokenizer) | set(named.values())
    return tokens, vocab_type, specials, named


def _hf_special_ids(tokenizer) -> set[int]:
    ids = getattr(tokenizer, "all_special_ids", None) or ()
    return {int(i) for i in ids if i is not None and int(i) >= 0}


def _hf_named_specials(tokenizer) -> dict[str, int]:
    """{text: id} for the tokenizer's all_special_tokens."""
    texts = getattr(tokenizer, "all_special_tokens", None) or ()
    ids = getattr(tokenizer, "all_special_ids", None) or ()
    return {str(t): int(i) for t, i in zip(texts, ids) if i is not None}


def _default_stop_ids(tokenizer, named_specials: dict[str, int]) -> list[int]:
    """eos_token_id (an int or a list) plus the known end markers among the special tokens."""
    stops: list[int] = []
    eos = getattr(tokenizer, "eos_token_id", None)
    for token_id in eos if isinstance(eos, (list, tuple)) else [eos]:
        if token_id is not None and int(token_id) not in stops:
            stops.append(int(token_id))
    for marker in KNOWN_STOP_MARKERS:
        token_id = named_specials.get(marker)
        if token_id is not None and token_id not in stops:
            stops.append(token_id)
    return stops
