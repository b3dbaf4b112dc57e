"""Hugging Face transformers integration: a `LogitsProcessor` that keeps `model.generate` inside a grammar.

    import pushmask as pm
    info = pm.TokenizerInfo.from_huggingface(tokenizer)
    compiled = pm.GrammarCompiler(info).compile_json_schema(schema)
    processor = pm.hf.GrammarLogitsProcessor(compiled)
    out = model.generate(**inputs, logits_processor=[processor], max_new_tokens=200)

How rows are tracked: each row of `input_ids` is the prompt (the part present at the first call
of a generation) followed by generated tokens. The matcher state of a row is a function of its
generated tokens only, so before masking, every row is *synced*: a matcher whose fed tokens are a
prefix of the row's tokens is advanced over the rest; otherwise the matcher sharing the longest
prefix is rolled back to the divergence point and replays the row's tokens. That one rule covers
plain decoding, batches, `num_return_sequences`, beam search (beams reorder and duplicate rows
every step) and assisted decoding (candidate tokens are proposed, then partly rejected).
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import ArgumentTypeError, InvalidArgumentError
from ..core.threads import resolve_max_threads
from ..masks.bitmask import apply_token_bitmask_inplace
from ..masks.compiler import CompiledGrammar
from ..masks.healing import accept_healing_token, fill_healing_mask
from ..masks.matcher import GrammarMatcher, batch_fill_next_token_bitmask

if TYPE_CHECKING:  # the checker sees transformers' classes (an optional dependency)
    from transformers import LogitsProcessor as _LogitsProcessorBase
    from transformers import StoppingCriteria as _StoppingCriteriaBase
else:
    try:  # subclass the real base class when transformers is installed (isinstance checks, docs)
        from transformers import LogitsProcessor as _LogitsProcessorBase
        from transformers import StoppingCriteria as _StoppingCriteriaBase
    except ImportError:  # pragma: no cover - transformers is an optional dependency
        _LogitsProcessorBase = object
        _StoppingCriteriaBase = object

__all__ = ["GrammarLogitsProcessor", "JumpForwardStoppingCriteria"]

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    """A matcher and the generated tokens it has been fed (all accepted)."""

    grammar_index: int
    matcher: GrammarMatcher
    fed: list[int] = field(default_factory=list)
    # A token the matcher rejected (possible only when something after this processor changed
    # the scores, or in beam search's -inf fillers): the row may then only stop.
    dead: bool = False
    rejected: int = -1  # the token that made it dead
    heal: bytes = b""  # token healing: the prompt bytes the first token must start with
    heal_steps: int = 0  # matcher steps the first token took (0 when it spelled just `heal`)

    def common_prefix(self, tokens: np.ndarray) -> int:
        n = min(len(self.fed), len(tokens))
        if n == 0:
            return 0
        same = np.asarray(self.fed[:n], dtype=tokens.dtype) == tokens[:n]
        return n if same.all() else int(np.argmin(same))

    def sync(self, tokens: np.ndarray) -> None:
        """Make the matcher's state the one reached after `tokens` (the row's generated tokens)."""
        keep = self.common_prefix(tokens)
        if keep < len(self.fed):
            back = len(self.fed) - keep
            if keep == 0 and self.heal:
                back += self.heal_steps - 1
            self.matcher.rollback(back)
            del self.fed[keep:]
        # `dead` describes the token right after `fed`; recheck it whenever that token changed.
        if self.dead and (len(tokens) <= keep or int(tokens[keep]) != self.rejected):
            self.dead = False
        if self.dead:
            return
        vocab_size = self.matcher.vocab_size
        for token in tokens[keep:].tolist():
            if self.matcher.is_terminated():
                return  # tokens after the stop token are padding
            if self.heal and not self.fed:
                steps = accept_healing_token(self.matcher, self.heal, token)
                if steps is None:
                    self.dead, self.rejected = True, token
                    return
                self.heal_steps = steps
                self.fed.append(token)
                continue
            if not (0 <= token < vocab_size and self.matcher.accept_token(token)):
                self.dead, self.rejected = True, token
                return
            self.fed.append(token)

    def key(self) -> tuple:
        return (self.grammar_index, self.dead, self.heal, tuple(self.fed))


class GrammarLogitsProcessor(_LogitsProcessorBase):
    """Masks the scores of `model.generate` so every row stays inside its grammar.

    Args:
        compiled_grammars: one `CompiledGrammar` for every row, or a list with one per prompt
            (batch item). With `num_return_sequences` or beams the rows of prompt `b` are
            `b * n ... b * n + n - 1`, as transformers lays them out.
        eos_token_id: the ids that end generation (int or list). Defaults to the tokenizer
            info's stop tokens; pass the model's `generation_config.eos_token_id` so the
            grammar ends exactly on the tokens `generate` stops on.
        pad_token_id: also allowed in rows that have finished (optional).
        max_new_tokens: the `max_new_tokens` of the `generate` calls (optional): each row's output
            must then be able to end inside its grammar within that many tokens, and masks close
            arrays, strings and objects in time (GrammarMatcher's max_tokens).  Raises
            BudgetTooSmallError here when a grammar needs more.
        token_healing: allow `heal_prompt`, which removes each prompt's last token; the first
            generated token must then start with its bytes (masks/healing.py), and the grammar
            applies to the text after them.
        max_threads: the most threads a step's batch fill may use (an int >= 1 or "auto"); by
            default the grammars' compiler's `max_threads` (core/threads.py).

    The processor may be reused across `generate` calls. A new call is detected when the batch
    size changes, when a row no longer starts with the prompt seen at the previous call's start,
    or when the input is more than one token longer than any input of the current generation
    (the next prompt extends the previous output; within one generation, including assisted
    decoding, inputs never grow faster). Call `reset()` to start over explicitly.
    """

    def __init__(
        self,
        compiled_grammars: CompiledGrammar | Sequence[CompiledGrammar],
        *,
        eos_token_id: int | Iterable[int] | None = None,
        pad_token_id: int | None = None,
        max_new_tokens: int | None = None,
        token_healing: bool = False,
        max_threads: int | str | None = None,
    ):
        if isinstance(compiled_grammars, CompiledGrammar):
            grammars = [compiled_grammars]
            self._shared = True
        else:
            grammars = list(compiled_grammars)
            self._shared = False
            if not grammars:
                raise InvalidArgumentError("compiled_grammars is empty")
            for g in grammars:
                if not isinstance(g, CompiledGrammar):
                    raise ArgumentTypeError(f"expected CompiledGrammar, got {type(g).__name__}")
        infos = {id(g.tokenizer_info) for g in grammars}
        if len(infos) != 1:
            raise InvalidArgumentError("all grammars must be compiled for the same TokenizerInfo")
        self.grammars = grammars
        self.tokenizer_info = grammars[0].tokenizer_info
        self.vocab_size = self.tokenizer_info.vocab_size
        if eos_token_id is None:
            stops = list(self.tokenizer_info.stop_token_ids)
        elif isinstance(eos_token_id, (int, np.integer)):
            stops = [int(eos_token_id)]
        else:
            stops = [int(t) for t in eos_token_id]
        for t in stops:
            if not 0 <= t < self.vocab_size:
                raise InvalidArgumentError(
                    f"eos_token_id {t} outside the tokenizer's vocabulary (size {self.vocab_size})"
                )
        if not stops:
            raise InvalidArgumentError("no stop token: pass eos_token_id")
        self.stop_token_ids = tuple(stops)
        self.pad_token_id = None if pad_token_id is None else int(pad_token_id)
        self.max_new_tokens = max_new_tokens
        self.token_healing = token_healing
        self.max_threads = None if max_threads is None else resolve_max_threads(max_threads, "GrammarLogitsProcessor")
        self._heal_next: list[bytes] | None = None  # heal_prompt's removed bytes, for the next start
        self._words = (self.vocab_size + 31) // 32
        self._free: list[_Slot] = []  # matchers not assigned to a row, reused before new ones
        if max_new_tokens is not None:  # a budget too small for a grammar fails here, not mid-generation
            self._free = [self._new_slot(g) for g in range(len(grammars))]
        self.reset()

    # -- lifecycle ---------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the current generation; the next call starts a new one."""
        for slot in getattr(self, "_slots", []):
            self._release(slot)
        self._slots: list[_Slot] = []
        self._prompt: np.ndarray | None = None  # [rows, prompt_len] as seen at the first call
        self._max_len = 0  # longest input seen in this generation
        self._bitmask = np.zeros((0, self._words), dtype=np.int32)
        self._torch_bitmask = None

    def _release(self, slot: _Slot) -> None:
        slot.matcher.reset()
        slot.fed.clear()
        slot.dead = False
        slot.heal, slot.heal_steps = b"", 0
        self._free.append(slot)

    def _new_slot(self, grammar_index: int) -> _Slot:
        for i, slot in enumerate(self._free):
            if slot.grammar_index == grammar_index:
                return self._free.pop(i)
        budget = self.max_new_tokens
        if budget is not None and self.token_healing:
            budget -= 1  # the first token may re-spell the removed prompt bytes only
        matcher = GrammarMatcher(
            self.grammars[grammar_index], override_stop_tokens=self.stop_token_ids, max_tokens=budget
        )
        return _Slot(grammar_index, matcher)

    def _is_new_call(self, ids: np.ndarray) -> bool:
        if self._prompt is None:
            return True
        rows, length = ids.shape
        prompt_rows, prompt_len = self._prompt.shape
        if rows != prompt_rows or length < prompt_len or length > self._max_len + 1:
            return True
        return not np.array_equal(ids[:, :prompt_len], self._prompt)

    def _grammar_index(self, row: int, rows: int) -> int:
        if self._shared:
            return 0
        n = len(self.grammars)
        if rows % n:
            raise InvalidArgumentError(
                f"{rows} rows cannot be split among {n} grammars (one per prompt; rows must be a multiple)"
            )
        return row // (rows // n)

    def start(self, input_ids) -> None:
        """Begin a generation whose prompt is `input_ids` (done automatically on a new call)."""
        ids = _as_numpy_ids(input_ids)
        for slot in self._slots:
            self._release(slot)
        rows = ids.shape[0]
        self._slots = [self._new_slot(self._grammar_index(r, rows)) for r in range(rows)]
        heal, self._heal_next = self._heal_next, None
        if heal is not None:  # rows b * n ... b * n + n - 1 come from prompt b (num_return_sequences, beams)
            if rows % len(heal):
                raise InvalidArgumentError(f"{rows} rows cannot come from the {len(heal)} healed prompts")
            for r, slot in enumerate(self._slots):
                slot.heal = heal[r // (rows // len(heal))]
        self._prompt = ids.copy()
        self._max_len = ids.shape[1]
        self._budget_checked = self.max_new_tokens is None

    def heal_prompt(self, input_ids):
        """Token healing: input_ids without each row's last token (which must spell text), to
        pass to `generate`; the next generation's first token in each row must start with the
        removed bytes (see `healed_bytes`).  Needs token_healing=True."""
        if not self.token_healing:
            raise InvalidArgumentError("construct the processor with token_healing=True to heal prompts")
        ids = _as_numpy_ids(input_ids)
        if ids.shape[1] < 2:
            raise InvalidArgumentError("token healing needs a prompt of at least two tokens")
        vocab = self.tokenizer_info.decoded_vocab
        removed = []
        for row, token in enumerate(ids[:, -1].tolist()):
            spelled = vocab[token] if 0 <= token < self.vocab_size and token not in self.stop_token_ids else b""
            if not spelled:
                raise InvalidArgumentError(
                    f"row {row}: the prompt's last token {token} spells no text; nothing to heal"
                )
            removed.append(spelled)
        self._heal_next = removed
        return input_ids[:, :-1]

    def healed_bytes(self, row: int = 0) -> bytes:
        """The prompt bytes row's output starts with (empty without token healing)."""
        return self._slots[row].heal

    # -- syncing rows to their tokens --------------------------------------------------------

    def sync(self, input_ids, *, new_call: bool | None = None) -> list[GrammarMatcher]:
        """Bring every row's matcher to the state after that row's generated tokens.

        Returns the matchers by row (read them, don't advance them). `new_call`: True starts a
        new generation with `input_ids` as the prompt, False continues the current one (for a
        caller that appended several tokens itself), None detects which.
        """
        ids = _as_numpy_ids(input_ids)
        if new_call is None:
            new_call = self._is_new_call(ids)
        elif not new_call and self._prompt is None:
            raise InvalidArgumentError("no generation to continue; call start() first")
        if new_call:
            self.start(ids)
        prompt = self._prompt
        assert prompt is not None  # start() set it, now or at an earlier call
        self._max_len = max(self._max_len, ids.shape[1])
        generated = ids[:, prompt.shape[1] :]
        slots = self._slots
        # Rows whose own matcher is behind them (the common case) just advance. The others
        # (beam reordering, rejected assisted candidates) take the matcher, among those no row
        # kept, that shares the longest prefix with them.
        pending = []
        for r, slot in enumerate(slots):
            if slot.common_prefix(generated[r]) == len(slot.fed):
                slot.sync(generated[r])
            else:
                pending.append(r)
        if pending:
            spare = [slots[r] for r in pending]
            for r in pending:
                g = self._grammar_index(r, len(slots))
                best, best_len = None, -1
                for i, slot in enumerate(spare):
                    if slot.grammar_index == g:
                        n = slot.common_prefix(generated[r])
                        if n > best_len:
                            best, best_len = i, n
                slot = spare.pop(best) if best is not None else self._new_slot(g)
                slot.sync(generated[r])
                slots[r] = slot
        return [slot.matcher for slot in slots]

    # -- masking -----------------------------------------------------------------------------

    def fill_bitmask(self, input_ids) -> np.ndarray:
        """Sync to `input_ids` and return the int32 bitmask [rows, words] of allowed next tokens."""
        self.sync(input_ids)
        rows = len(self._slots)
        if self._bitmask.shape[0] != rows:
            self._bitmask = np.zeros((rows, self._words), dtype=np.int32)
            self._torch_bitmask = None
        bitmask = self._bitmask
        filled: dict[tuple, int] = {}  # rows in the same state (beams, equal samples) share a mask
        live, copies = [], []
        for r, slot in enumerate(self._slots):
            key = slot.key() if rows > 1 else None
            if key is not None and key in filled:
                copies.append((r, filled[key]))
                continue
            if slot.dead:
                bitmask[r] = 0
                _set_bits(bitmask[r], self.stop_token_ids)
            elif slot.heal and not slot.fed:  # the first token re-covers the removed prompt bytes
                fill_healing_mask(slot.matcher, slot.heal, bitmask[r])
            else:
                live.append(r)
            if key is not None:
                filled[key] = r
        if live:  # one batch call: the rows' grammar masks in one kernel call per thread
            batch_fill_next_token_bitmask(
                [self._slots[r].matcher for r in live], bitmask, indices=live, max_threads=self.max_threads
            )
        if self.pad_token_id is not None and self.pad_token_id < self.vocab_size:
            for r, slot in enumerate(self._slots):
                if slot.dead or slot.matcher.is_terminated():
                    _set_bits(bitmask[r], (self.pad_token_id,))
        for r, source in copies:
            bitmask[r] = bitmask[source]
        return bitmask

    def __call__(self, input_ids, scores):
        """Mask `scores` [rows, model_vocab] in place (CPU or CUDA) and return them."""
        import torch

        bitmask = self.fill_bitmask(input_ids)
        if not self._budget_checked:
            self._budget_checked = True
            self._check_generate_budget(input_ids.shape[1])
        if self._torch_bitmask is None:
            self._torch_bitmask = torch.from_numpy(bitmask)  # shares memory with the numpy mask
        # Columns past the tokenizer (the model's padded vocabulary) are masked too.
        apply_token_bitmask_inplace(scores, self._torch_bitmask, vocab_size=self.vocab_size)
        # Never leave a row with nothing to choose (possible only when the model's vocabulary is
        # narrower than the tokenizer's): let it stop.
        # (One max per row: a tenth of the time of isneginf(scores).all(-1) on the CPU.)
        empty = torch.isneginf(scores.amax(dim=-1)) if scores.shape[-1] else torch.ones(len(scores), dtype=torch.bool)
        if bool(empty.any()):
            stop = next((t for t in self.stop_token_ids if t < scores.shape[-1]), None)
            if stop is None:
                raise InvalidArgumentError(
                    f"scores have {scores.shape[-1]} columns, fewer than every stop token id {self.stop_token_ids}"
                )
            scores[empty, stop] = 0.0
        return scores

    def _check_generate_budget(self, length: int) -> None:
        """Warn when the model.generate call this runs in stops sooner than max_new_tokens: the
        masks then close the grammar too late and the output is cut off.  The call's limit is read
        from transformers' decoding loop (its prepared `generation_config`), where it can be."""
        frame: FrameType | None = sys._getframe(2)
        for _ in range(6):  # __call__ <- LogitsProcessorList.__call__ <- the decoding loop
            if frame is None:
                return
            max_length = getattr(frame.f_locals.get("generation_config"), "max_length", None)
            if isinstance(max_length, int):
                prompt = self._prompt
                assert prompt is not None  # the sync before this call set it
                left = max_length - length
                ours = self.max_new_tokens - (length - prompt.shape[1])
                if left < ours:
                    warnings.warn(
                        f"GrammarLogitsProcessor(max_new_tokens={self.max_new_tokens}) runs in a "
                        f"model.generate call that stops after {left} more tokens: outputs may be cut off "
                        "before the grammar ends; pass generate the same max_new_tokens",
                        stacklevel=4,
                    )
                return
            frame = frame.f_back

    # -- queries -----------------------------------------------------------------------------

    def matchers(self) -> list[GrammarMatcher]:
        """The matchers by row, as of the last sync."""
        return [slot.matcher for slot in self._slots]

    def row_rejected(self, row: int = 0) -> bool:
        """True when a token of `row` was outside the grammar (the row may then only stop)."""
        return self._slots[row].dead

    def generated_tokens(self, row: int = 0) -> list[int]:
        """Tokens of `row` the grammar has accepted so far (stop token included)."""
        return list(self._slots[row].fed)


class JumpForwardStoppingCriteria(_StoppingCriteriaBase):
    """Stops `generate` when a row's grammar forces at least `min_chars` characters next, so the
    caller can append that text without running the model token by token (jump-forward)."""

    def __init__(self, processor: GrammarLogitsProcessor, min_chars: int = 4):
        self.processor = processor
        self.min_chars = min_chars

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        matchers = self.processor.sync(input_ids)
        stop = [(not m.is_terminated()) and len(m.find_jump_forward_string()) >= self.min_chars for m in matchers]
        return torch.tensor(stop, dtype=torch.bool, device=input_ids.device)


def _as_numpy_ids(input_ids) -> np.ndarray:
    if isinstance(input_ids, np.ndarray):
        ids = input_ids
    else:
        ids = input_ids.detach().cpu().numpy()
    if ids.ndim != 2:
        raise InvalidArgumentError(f"input_ids must be [rows, length], got shape {ids.shape}")
    return ids.astype(np.int64, copy=False)


def _set_bits(words: np.ndarray, ids: Iterable[int]) -> None:
    view = words.view(np.uint32)
    for t in ids:
        view[t >> 5] |= np.uint32(1 << (t & 31))
