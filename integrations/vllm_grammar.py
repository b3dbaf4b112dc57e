"""A vLLM request's grammar state (vLLM's StructuredOutputGrammar) over one GrammarMatcher.

Its own module, below vllm.py (the backend, the plugin's registration) and the step wrappers
(vllm_batch.py, vllm_drafts.py, vllm_grammar_drafts.py), which all recognise pushmask's rows by
this class: each imports it from here, so none of them imports another in a circle.  Needs vLLM,
as vllm.py does (it is imported through vllm.py's check of the installed vLLM).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

from ..core.errors import InternalError
from ..masks.draft import DraftMasks
from ..masks.matcher import GrammarMatcher

if TYPE_CHECKING:
    import torch

__all__ = ["PushmaskGrammar", "num_speculative_tokens"]

# A child of vLLM's "vllm" logger, so the messages come out in vLLM's format and stream.
logger = logging.getLogger("vllm.pushmask")


def num_speculative_tokens(config) -> int:
    """How many draft tokens per step vLLM may roll back (the bitmask rows it fills per request, less one)."""
    value = getattr(config, "num_speculative_tokens", None)  # a property in vLLM 0.32
    if value is None:
        spec = getattr(config, "speculative_config", None)
        value = getattr(spec, "num_speculative_tokens", None) if spec is not None else None
    return int(value or 0)


class PushmaskGrammar(StructuredOutputGrammar):
    """Request-level state: one GrammarMatcher, guarded by a lock because vLLM fills bitmasks
    from a thread pool for large batches."""

    def __init__(self, matcher: GrammarMatcher | Callable[[], GrammarMatcher], text_stop_tokens: Sequence[int] = ()):
        # A GrammarMatcher, or a function that builds it when the grammar is first used (its
        # token budget counts from there: after the reasoning, when vLLM's parser is on).
        self._matcher = matcher if isinstance(matcher, GrammarMatcher) else None
        self._start: Callable[[], GrammarMatcher] | None = None if isinstance(matcher, GrammarMatcher) else matcher
        # Stop ids that are also text tokens: the matcher's mask may allow them as text, but
        # accept_token treats them as stop tokens (refused until the grammar can end), so
        # fill_bitmask clears them until then -- vLLM's contract: "masked until the grammar
        # terminates", and what xgrammar does.
        self.text_stop_tokens = tuple(text_stop_tokens)
        self.num_processed_tokens = 0
        self._is_terminated = False
        self._lock = threading.RLock()
        # This step's draft masks, planned in one call (vllm_drafts.py); None outside it.
        self.drafts: DraftMasks | None = None
        self.draft_rows: np.ndarray | None = None
        # (bitmask, row) this step's batch fill already wrote (vllm_batch.py); None outside it.
        self.filled_row: tuple[Any, int] | None = None

    @property
    def matcher(self) -> GrammarMatcher:
        if self._matcher is None:
            with self._lock:
                if self._matcher is None:
                    assert self._start is not None  # one of the two is set, by __init__
                    self._matcher = self._start()
        return self._matcher

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance over `tokens`.  True when all were accepted (tokens after the one that
        terminated the grammar are ignored); False, with the state left as it was, otherwise."""
        with self._lock:
            if self._is_terminated:
                return True
            accepted = self._advance(tokens)
            if accepted is None:
                logger.error("pushmask rejected tokens %s for request %s", list(tokens), request_id)
                return False
            self.num_processed_tokens += accepted
            self._is_terminated = self.matcher.is_terminated()
            return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of `tokens` the grammar accepts from here (stopping after a token
        that terminates it).  Leaves the state unchanged."""
        with self._lock:
            if self._is_terminated:
                return []
            return self._valid_prefix(tokens)

    def rollback(self, num_tokens: int) -> None:
        with self._lock:
            self.matcher.rollback(num_tokens)
            self.num_processed_tokens -= num_tokens
            self._is_terminated = self.matcher.is_terminated()

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        with self._lock:
            ready = self.filled_row
            if ready is not None and ready[0] is bitmask and ready[1] == batch_index:
                return  # this step's batch fill wrote the row
            drafts = self.drafts
            node = drafts.node_at() if drafts is not None else None
            if drafts is not None and node is not None:  # at a planned draft state: its row is ready
                rows = self.draft_rows
                assert rows is not None  # planned with the drafts (vllm_drafts.plan_drafts)
                _copy_row(bitmask, batch_index, rows[drafts.row(node)])
            else:
                self.matcher.fill_next_token_bitmask(bitmask, batch_index)
            self.clear_text_stops(bitmask, batch_index)

    def clear_text_stops(self, bitmask, batch_index: int) -> None:
        """Forbid the stop ids that are text tokens in a filled row until the grammar can end."""
        if self.text_stop_tokens and not self.matcher.can_end():
            row = bitmask[batch_index]
            for token in self.text_stop_tokens:
                _clear_bit(row, token)

    def is_terminated(self) -> bool:
        return self._is_terminated

    def forced_text(self) -> str:
        """The text the grammar forces from here ("" when none): vllm_grammar_drafts.py drafts it."""
        with self._lock:
            return "" if self._is_terminated else self.matcher.find_jump_forward_string()

    def reset(self):
        with self._lock:
            if self._matcher is not None:
                self._matcher.reset()
            self.num_processed_tokens = 0
            self._is_terminated = False

    # -- helpers ---------------------------------------------------------------------------

    def _valid_prefix(self, tokens: list[int]) -> list[int]:
        """The longest prefix of `tokens` the matcher would accept (up to a stop token), computed
        without touching its state or history; an id outside the vocabulary ends it."""
        size = self.matcher.vocab_size
        inside = next((k for k, t in enumerate(tokens) if not 0 <= int(t) < size), len(tokens))
        return self.matcher.validate_tokens(tokens[:inside])

    def _advance(self, tokens: list[int]) -> int | None:
        """Accept tokens up to the one that terminates; the count, or None (and no change) on a
        rejection.  The tokens are validated first, so a rejection never needs a rollback deeper
        than the matcher's window (max_rollback_tokens: what speculative decoding rolls back)."""
        if len(tokens) == 1:  # accept_token refuses without a change: one advance, nothing to undo
            token = int(tokens[0])
            drafts = self.drafts
            node = drafts.node_at() if drafts is not None else None
            child = drafts.child(node, token) if drafts is not None and node is not None else None
            if drafts is not None and child is not None:  # a planned draft token: take the state computed for its mask
                drafts.accept(child)
                return 1
            return 1 if 0 <= token < self.matcher.vocab_size and self.matcher.accept_token(token) else None
        valid = self._valid_prefix(tokens)
        ends = bool(valid) and int(valid[-1]) in self.matcher.stop_token_ids
        if len(valid) < len(tokens) and not ends:
            return None
        for token in valid:
            if not self.matcher.accept_token(token):
                raise InternalError(f"token {token} passed validate_tokens but accept_token refused it")
        return len(valid)


def _copy_row(bitmask, index: int, words) -> None:
    """Write a numpy row of words into row `index` of a torch or numpy bitmask."""
    if isinstance(bitmask, np.ndarray):
        bitmask[index, : len(words)] = words
    else:
        import torch

        bitmask[index, : len(words)].copy_(torch.from_numpy(words))


def _clear_bit(row, token: int) -> None:
    """Forbid `token` in one int32 bitmask row (torch or numpy), keeping the word's int32 sign."""
    word_index, bit = divmod(token, 32)
    word = (int(row[word_index]) & 0xFFFFFFFF) & ~(1 << bit)
    row[word_index] = word - (1 << 32) if word >= 1 << 31 else word
