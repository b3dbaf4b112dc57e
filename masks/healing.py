"""Token healing: the first generated token re-covers text removed from the end of the prompt.

A prompt that ends inside what the tokenizer would write as one token (a trailing space,
`"name": "`, half a word) pushes the model towards odd splits.  Token healing removes the
prompt's last token and lets the first generated token be any token whose bytes start with
the removed ones and continue (possibly with nothing more) into text the grammar allows from
its start.  After it, the grammar continues from the text past the removed bytes.
"""

from __future__ import annotations

import numpy as np

from ..automata import kernels
from .matcher import GrammarMatcher

__all__ = ["healing_candidates", "fill_healing_mask", "accept_healing_token"]


def healing_candidates(matcher: GrammarMatcher, removed: bytes) -> np.ndarray:
    """Token ids whose bytes start with `removed` (special and stop tokens aside), by id."""
    info = matcher.compiled_grammar.tokenizer_info
    data, offsets = info.flat_vocab()
    starts, lengths = offsets[:-1], np.diff(offsets)
    fits = lengths >= len(removed)
    for j, byte in enumerate(removed):  # one vectorized pass per removed byte
        fits &= data[np.minimum(starts + j, len(data) - 1)] == byte
    fits[list(matcher.stop_token_ids)] = False
    return np.flatnonzero(fits)


def fill_healing_mask(matcher: GrammarMatcher, removed: bytes, words: np.ndarray) -> None:
    """Write the tokens allowed first into `words` (int32, ceil(V/32)): a candidate whose bytes
    past `removed` the grammar accepts from the matcher's state (and, with a token budget, still
    leave room to finish).  The token spelling exactly `removed` is always among them.  If it
    raises, `words` is all zero and the matcher where it was."""
    info = matcher.compiled_grammar.tokenizer_info
    data, offsets = info.flat_vocab()
    candidates = healing_candidates(matcher, removed)
    rest_start = offsets[candidates] + len(removed)
    rest_len = offsets[candidates + 1] - rest_start
    # The byte after `removed` must be one the grammar can start with: one vectorized filter
    # before the per-token checks.
    first = np.zeros(256, dtype=np.uint8)
    state = matcher._state
    kernels.run_allowed_first_bytes(matcher.compiled_grammar.pda.blob, state.stacks[: len(state.stacks) // 2], first)
    next_byte = data[np.minimum(rest_start, len(data) - 1)]
    keep = (rest_len == 0) | (first[next_byte] != 0)
    words[:] = 0
    try:
        for t, start, n in zip(candidates[keep].tolist(), rest_start[keep].tolist(), rest_len[keep].tolist()):
            if n and not _rest_fits(matcher, data, start, n):
                continue
            words[t >> 5] |= np.int32(1) << np.int32(t & 31)
    except BaseException:  # a cleanup path (interrupts too): no half-filled row stays, re-raised
        words[:] = 0
        raise


def _rest_fits(matcher: GrammarMatcher, data: np.ndarray, start: int, n: int) -> bool:
    if not matcher.accept_string(data[start : start + n].tobytes()):
        return False
    try:
        return matcher.remaining_tokens is None or matcher.min_tokens_to_finish() <= matcher.remaining_tokens
    finally:
        matcher.rollback(1)


def accept_healing_token(matcher: GrammarMatcher, removed: bytes, token: int) -> int | None:
    """Advance over the first generated token; the matcher steps it took (0 when the token spells
    just `removed`, else 1), or None (no change) when it is not an allowed first token."""
    info = matcher.compiled_grammar.tokenizer_info
    token = int(token)
    if not 0 <= token < info.vocab_size or token in matcher.stop_token_ids:
        return None
    spelled = info.decoded_vocab[token]
    if not spelled.startswith(removed):
        return None
    rest = spelled[len(removed) :]
    if not rest:
        return 0
    if not matcher.accept_string(rest):
        return None
    return 1
