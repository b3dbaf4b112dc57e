"""Canonical fast-forward tokens: forced text as the tokens the tokenizer itself would produce.

When the grammar forces text, encoding only the forced piece splits tokens at the boundary with
what came before (`"` then `name` where the tokenizer writes `"name`), which a model rarely saw
in training.  Instead the last few generated tokens (at most `max_back`) are decoded, the forced
text appended, and the whole re-encoded; the tokens that agree with what was generated are kept,
the rest replaced.  The caller removes `back` tokens and appends `tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..masks.vocab import TokenizerInfo

__all__ = ["canonical_fast_forward", "bare_encode", "DEFAULT_MAX_BACK"]

DEFAULT_MAX_BACK = 4
"""Generated tokens that may be re-tokenized together with forced text."""


def canonical_fast_forward(
    tokenizer, info: TokenizerInfo, generated: Sequence[int], forced: str, max_back: int = DEFAULT_MAX_BACK
) -> tuple[int, list[int]]:
    """(back, tokens): drop the last `back` generated tokens (back <= max_back) and append
    `tokens`, whose bytes are exactly those of the dropped tokens followed by `forced`.
    `generated` holds the output's token ids so far (no prompt).  The re-encoded tail is the
    whole output when it has at most max_back + 1 tokens, else its last max_back + 1 (one more
    than may be dropped, as context for the split).  Falls back to (0, encode(forced)) when no
    tail re-encodes to exactly its own bytes plus the forced text."""
    generated = [int(t) for t in generated]
    vocab = info.decoded_vocab
    for window in range(min(len(generated), max_back + 1), 0, -1):
        tail = generated[-window:]
        tail_bytes = b"".join(vocab[t] for t in tail)
        if any(not vocab[t] for t in tail):
            continue  # special tokens have no text to re-encode
        try:
            tail_text = tail_bytes.decode("utf-8")
        except UnicodeDecodeError:
            continue  # the window cuts a character: try a shorter one
        encoded = bare_encode(tokenizer, info, tail_text + forced)
        if encoded is None:
            continue  # the tokenizer normalizes this text: no exact re-encoding
        same = 0
        while same < min(len(tail), len(encoded)) and tail[same] == encoded[same]:
            same += 1
        if same == len(encoded) or window - same > max_back:
            continue
        return window - same, encoded[same:]
    return 0, bare_encode(tokenizer, info, forced) or _encode(tokenizer, forced)


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


SENTINEL = "\n"
"""Put before text that a tokenizer would otherwise start with its prefix space (SentencePiece
tokenizers such as Mistral's and Llama 2's write "ab" as " ab" at the start of a text)."""


def bare_encode(tokenizer, info: TokenizerInfo, text: str) -> list[int] | None:
    """The tokenizer's tokens for `text` as it splits it inside a longer text: tokens whose bytes
    are exactly text's; None when neither a plain encode nor one after a sentinel line break
    (dropped with the tokens that spell it) gives them."""
    vocab = info.decoded_vocab
    target = text.encode("utf-8")
    spell = lambda ids: b"".join(vocab[t] if 0 <= t < len(vocab) else b"\0" for t in ids)  # noqa: E731
    encoded = _encode(tokenizer, text)
    if spell(encoded) == target:
        return encoded
    encoded = _encode(tokenizer, SENTINEL + text)
    head = b""
    for k, t in enumerate(encoded):
        if head.strip(b" ") == SENTINEL.encode() and spell(encoded[k:]) == target:
            return encoded[k:]
        if len(head) > 4:
            break
        head += vocab[t] if 0 <= t < len(vocab) else b"\0"
    return None
