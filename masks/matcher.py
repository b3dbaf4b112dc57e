"""GrammarMatcher: the online side.  Holds the current set of stacks, fills next-token bitmasks,
advances on accepted tokens, rolls back."""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from ..automata import kernels
from ..automata.kernels import FLAG_END, ROOT
from ..automata.stack import StackRunner
from ..core.errors import (
    ArgumentTypeError,
    BudgetTooSmallError,
    InvalidArgumentError,
    MatcherStateError,
    check_argument,
    check_integer,
    check_integers,
)
from ..grammar.ir import TOKEN_MARK
from . import batch_fill, draft, walk
from .batch_step import fill_batch
from .bitmask import clear_rows, torch_from_numpy, writable_row
from .budget import CheckedBudget, bounds_memo, budget_table, check_budget
from .compiler import CompiledGrammar
from .kernel_memory import address, put_array
from .value_checks import CheckedAdvance, MaskChecks

_NO_SCANS: dict = {}  # shared by every state outside checked values; never modified
_TERMINATED = (
    "{call}: the matcher has terminated (a stop token was accepted, see is_terminated()); "
    "call reset() to start again or rollback() to undo the stop token"
)


@dataclass(slots=True)
class _MatchState:
    """One point of the parse: the stacks as one packed int64 array (states, then parents; see
    kernels.run_advance), the first n_kernel of which are the kernel (straight after the last
    byte, the ones whose masks are unioned) and all of which the epsilon closure (what the next
    byte steps from); and whether the input may end here.  Never modified once built (but for
    what fills remember on it), and cheap, since frames are shared: rollback restores one."""

    stacks: np.ndarray
    n_kernel: int
    can_end: bool
    terminated: bool = False
    token_terminals: tuple | None = None  # the token terminals allowed here, once a fill asked
    scans: dict = dataclasses.field(
        default_factory=dict
    )  # open checked values: instance key -> Scan (masks/value_checks.py)
    address: int | None = None  # where `stacks` lies, once a batch fill asked
    regions: tuple | None = None  # tokens spent in each token-limited region (masks/token_regions.py)
    closed: bool = False  # a spent region was closed here: no kernel, the fill runs every token
    temperature: float | None = None  # the stacks' rule temperature (NaN: none), once asked

    @property
    def kernel_s(self) -> np.ndarray:
        return self.stacks[: self.n_kernel]

    @property
    def kernel_p(self) -> np.ndarray:
        half = len(self.stacks) // 2
        return self.stacks[half : half + self.n_kernel]


def _checked_temperature(value: float | None) -> float | None:
    """GrammarMatcher's default_temperature: None, or a finite number >= 0 (as XGrammar checks)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidArgumentError(f"GrammarMatcher: default_temperature must be a number or None, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise InvalidArgumentError(
            f"GrammarMatcher: default_temperature must be a finite non-negative number, got {value!r}"
        )
    return float(value)


class GrammarMatcher:
    """Matches one token sequence against a compiled grammar (XGrammar-compatible names).

    max_tokens=N: the output gets at most N tokens (a stop token not counted) and must be able to
    end inside the grammar within them; masks then drop the tokens after which no completion
    surely fits in the tokens left (masks/budget.py), so the text can always be finished.  It
    only removes tokens, and with a generous budget it changes nothing.  Raises
    BudgetTooSmallError at once when N is below what the grammar needs.  accept_token still
    checks the grammar only; tokens from budgeted masks keep the guarantee.
    """

    def __init__(
        self,
        compiled_grammar: CompiledGrammar,
        *,
        override_stop_tokens: Iterable[int] | None = None,
        terminate_without_stop_token: bool = False,
        max_rollback_tokens: int = -1,
        max_tokens: int | None = None,
        default_temperature: float | None = None,
    ):
        check_argument(
            compiled_grammar,
            CompiledGrammar,
            "compiled_grammar",
            "GrammarMatcher",
            "compile the grammar first: GrammarCompiler(tokenizer_info).compile_grammar(text), "
            ".compile_json_schema(schema), ...",
        )
        self.compiled_grammar = compiled_grammar
        self.default_temperature = _checked_temperature(default_temperature)
        self._frame_temperatures: dict[int, float] = {}  # frame -> its innermost rule temperature (NaN: none)
        self._warned_temperatures = False  # the notice of differing temperatures was printed
        info = compiled_grammar.tokenizer_info
        self.vocab_size = info.vocab_size
        if isinstance(override_stop_tokens, (int, np.integer)):
            override_stop_tokens = [override_stop_tokens]  # one id, as xgrammar takes it
        self._stop_token_ids = tuple(
            info.stop_token_ids
            if override_stop_tokens is None
            else check_integers(override_stop_tokens, "override_stop_tokens", "GrammarMatcher")
        )
        for t in self._stop_token_ids:
            if not 0 <= t < self.vocab_size:
                raise InvalidArgumentError(
                    f"GrammarMatcher: override_stop_tokens holds token id {t}, outside the vocabulary "
                    f"[0, {self.vocab_size}); pass ids of the tokenizer the grammar was compiled for"
                )
        self._stop_ids = np.array(self._stop_token_ids, dtype=np.int64)
        self._stop_set = frozenset(self._stop_token_ids)
        self.terminate_without_stop_token = terminate_without_stop_token
        self.max_rollback_tokens = max_rollback_tokens
        compiler = compiled_grammar.compiler
        self._runner = StackRunner(compiled_grammar.pda, compiler.limits, compiler.trie.max_token_length)
        # Value checks (uniqueItems, overlapping oneOf): None for grammars without checked rules.
        self._checked = CheckedAdvance(compiled_grammar, self._runner) if compiled_grammar.value_checks else None
        self._mask_checks = None
        self._check_starts: frozenset[int] = frozenset()
        if self._checked is not None:
            self._mask_checks = MaskChecks(self._checked, info, compiled_grammar.value_check_cache)
            self._check_starts = self._checked.any_start_byte()
        self._vocab_bytes = info.flat_vocab()[0]
        self._vocab_offsets = info.flat_offsets_list()  # token t is _vocab_bytes[offsets[t]:offsets[t + 1]]
        self._words = (self.vocab_size + 31) // 32
        self._trie_blob = compiler.trie.blob
        # Token terminals (grammar/ir.py): taken by their id only; ordinary tokens holding the
        # reserved byte are refused, so no text reaches a terminal's bytes.
        self._token_terminals = compiled_grammar.token_terminals
        self._token_classes = compiled_grammar.token_classes  # exclude_token: many tokens, one terminal
        self._reserved_tokens = (
            compiler.reserved_token_ids if self._token_terminals or self._token_classes else frozenset()
        )
        self._slice_rows = compiler.trie.cumulative
        self._initial = self._make_state(
            np.array([compiled_grammar.pda.rule_start[compiled_grammar.pda.root_rule]], dtype=np.int64),
            np.array([ROOT], dtype=np.int64),
        )
        self._regions = compiled_grammar.token_regions
        if self._regions is not None:
            self._initial.regions = (0,) * len(self._regions.limits)
            self._initial = self._with_regions(self._initial)
        self._state = self._initial
        self._history: list[_MatchState] = []
        self._n_tokens = 0  # tokens accepted (accept_string counts one), what the budget counts
        self._memo = batch_fill.NO_MEMO  # fills that needed walks (batch_fill.new_memo, made on the first)
        self._row_cache: tuple | None = None
        self._row_template: tuple | None = None  # the batch fill's per-matcher template (_make_template)
        self.max_tokens = max_tokens
        self._budget = None
        self._checked_budget = None  # a budget that also keeps the value checks passable
        self._budget_memo = bounds_memo()  # see BudgetTable.restrict
        if max_tokens is not None and self._token_classes:
            raise InvalidArgumentError(
                "GrammarMatcher: max_tokens is not supported for grammars with exclude_token formats (token "
                "classes); leave max_tokens unset"
            )
        if max_tokens is not None and self._token_terminals and self._checked is not None:
            raise InvalidArgumentError(
                "GrammarMatcher: max_tokens is not supported for grammars with both token terminals (<|...|>) and "
                "value checks (uniqueItems, overlapping oneOf); leave max_tokens unset"
            )
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
                raise InvalidArgumentError(
                    f"GrammarMatcher: max_tokens must be None or an integer >= 0, got {max_tokens!r}"
                )
            self._budget = budget_table(compiled_grammar)
            check_budget(
                self._budget,
                compiled_grammar,
                self._runner.pool.blob,
                self._initial.stacks,
                self._initial.can_end,
                int(max_tokens),
            )
            if self._checked is not None:
                self._checked_budget = CheckedBudget(self._budget, self)
                if not self._checked_budget.finishable(self._initial, int(max_tokens)):
                    raise BudgetTooSmallError(
                        f"max_tokens={max_tokens} is too small for this grammar: no completion passing its value "
                        "checks (uniqueItems, oneOf) was found within it; raise max_tokens"
                    )
        # The fill is the grammar's mask alone (no value checks, token terminals or budget): a
        # batch step then needs no Python for this row once the kernel wrote it.
        self._plain_fill = (
            self._mask_checks is None and not self._token_terminals and not self._token_classes and self._budget is None
        )

    def _make_state(self, kernel_s: np.ndarray, kernel_p: np.ndarray) -> _MatchState:
        closure_s, closure_p, n_kernel, flags = self._runner.close(kernel_s, kernel_p)
        return _MatchState(np.concatenate([closure_s, closure_p]), n_kernel, bool(flags & FLAG_END), scans=_NO_SCANS)

    # -- queries --------------------------------------------------------------------------

    @property
    def temperature(self) -> float | None:
        """XGrammar's sampling temperature for the next token: the greatest, over the stacks that
        can still read a byte, of the temperature of the innermost rule on the stack that has one
        (`name[temperature=t]`); default_temperature (None when unset) where no stack has one."""
        return self.temperature_at(self._state)

    def temperature_at(self, state: _MatchState) -> float | None:
        """The temperature (see `temperature`) at a state of this matcher.  Grammars without rule
        temperatures answer the default at once; others remember the answer on the state and
        each frame's innermost temperature (frames are never changed while the pool lives)."""
        temperatures = self.compiled_grammar.rule_temperatures
        if temperatures is None:
            return self.default_temperature
        if state.temperature is None:
            state.temperature = self._stack_temperature(state, temperatures)
        return self.default_temperature if math.isnan(state.temperature) else state.temperature

    def _stack_temperature(self, state: _MatchState, temperatures: np.ndarray) -> float:
        """The greatest innermost-rule temperature over the state's stacks whose top has a byte
        edge (a top that can only end its rule counts through the stacks it pops to, which the
        closure holds), NaN where none has one; XGrammar's notice on stderr, once per matcher,
        where they differ."""
        pda = self.compiled_grammar.pda
        half = len(state.stacks) // 2
        tops, frames = state.stacks[:half], state.stacks[half:]
        live = pda.byte_ptr[tops + 1] > pda.byte_ptr[tops]
        found = set()
        for top, frame in zip(tops[live].tolist(), frames[live].tolist()):
            t = float(temperatures[pda.state_rule[top]])
            if math.isnan(t):
                t = self._frame_temperature(frame, temperatures)
            if not math.isnan(t):
                found.add(t)
        if len(found) > 1 and not self._warned_temperatures:
            self._warned_temperatures = True
            print(
                "Multiple active grammar paths specify different temperatures; using the maximum",
                file=sys.stderr,
            )
        return max(found) if found else math.nan

    def _frame_temperature(self, frame: int, temperatures: np.ndarray) -> float:
        """The temperature of the innermost rule with one among the return states of `frame` and
        the frames below it (NaN: none), memoised per frame."""
        memo, pool, state_rule = self._frame_temperatures, self._runner.pool, self.compiled_grammar.pda.state_rule
        path = []
        t = math.nan
        while frame >= 0:
            if frame in memo:
                t = memo[frame]
                break
            path.append(frame)
            return_state, frame = pool.frame(frame)
            t = float(temperatures[state_rule[return_state]])
            if not math.isnan(t):
                break
        for f in path:
            memo[f] = t
        return t

    def get_captures(self, *, deduplicate: bool = True) -> list[tuple[str, bytes]]:
        """XGrammar's captured rule spans: always empty, as no rule of a pushmask grammar is
        captured (the Lark front end refuses `capture` by name)."""
        return []

    def is_terminated(self) -> bool:
        """True after a stop token was accepted; with terminate_without_stop_token, as soon as
        the text so far is complete (XGrammar's meaning: `is_completed()`, even where the grammar
        could go on)."""
        return self._state.terminated or (self.terminate_without_stop_token and self._state.can_end)

    def can_end(self) -> bool:
        """True when the text so far is a complete string of the grammar."""
        return self._state.can_end

    def is_completed(self) -> bool:
        """XGrammar's name for `can_end()` (its GrammarMatcher.is_completed): the text so far is
        complete, whether or not a stop token was accepted."""
        return self.can_end()

    @property
    def num_accepted_tokens(self) -> int:
        return len(self._history)

    @property
    def remaining_tokens(self) -> int | None:
        """Tokens left of max_tokens (None without a budget)."""
        return None if self.max_tokens is None else int(self.max_tokens) - self._n_tokens

    def min_tokens_to_finish(self) -> int:
        """Tokens that surely suffice to finish the text from here (0 once it may end): an upper
        bound on the fewest, from the grammar's shortest completions; a budgeted matcher keeps it
        within remaining_tokens."""
        state = self._state
        if state.terminated or state.can_end:
            return 0
        table = self._budget if self._budget is not None else budget_table(self.compiled_grammar)
        return table.parse_cost(self._runner.pool.blob, state.stacks, state.can_end)

    def parse_stacks(self):
        """(top states, frame ids, frame pool) of the stacks straight after the last byte: where an
        infilling check (masks/infill.py) picks up the parse."""
        state = self._state
        return state.kernel_s, state.kernel_p, self._runner.pool

    def _debug_print_internal_state(self) -> str:
        """The parse state in one line, for debugging (XGrammar's name; it returns the text and
        prints nothing): tokens accepted, whether the text may end, and the live stack tops."""
        state = self._state
        tops = state.kernel_s.tolist()
        return (
            f"GrammarMatcher(accepted_tokens={self._n_tokens}, terminated={self.is_terminated()}, "
            f"can_end={state.can_end}, stack_tops={len(tops)}: {tops[:16]}{' ...' if len(tops) > 16 else ''})"
        )

    # -- masks ---------------------------------------------------------------------------

    def fill_next_token_bitmask(self, bitmask, index: int = 0, *, debug_print: bool = False) -> bool:
        """Write the allowed next tokens into row `index` of `bitmask` (int32 [batch, ceil(V/32)]).

        Returns True (the row may forbid tokens), as XGrammar does.  A terminated matcher allows only
        stop tokens.  debug_print: XGrammar's keyword, accepted and ignored (prints nothing).
        If the fill raises once the bitmask and index were found valid, the row is all zero
        when the exception propagates: never the grammar's mask before the value checks or the
        budget narrowed it, nor an earlier step's.
        """
        cached = self._row_cache  # the checked row view of the numpy bitmask used last time
        if cached is not None and cached[0] is bitmask and cached[1] == index:
            row = cached[2]
        else:
            row = writable_row(bitmask, index, self._words)
            self._row_cache = (bitmask, index, row) if isinstance(row, np.ndarray) else None
        words = row if isinstance(row, np.ndarray) else np.zeros(self._words, dtype=np.int32)
        try:
            self._fill_grammar_words(words)
            self._finish_words(words)
            if words is not row:
                row.copy_(torch_from_numpy(words, row))
        except BaseException:  # a cleanup path (interrupts too): no half-filled row stays, re-raised
            clear_rows(bitmask, (index,))
            raise
        return True

    def _finish_words(self, words: np.ndarray) -> None:
        """What a fill adds to the grammar's mask: value checks drop the tokens that would close
        a failing value, token terminals add their ids, the budget drops what cannot finish."""
        state = self._state
        if self._mask_checks is not None and not state.terminated:
            self._mask_checks.restrict(words, state.stacks, state.scans)
        self._add_token_terminals(words)
        self._apply_budget(words)

    def _fill_grammar_words(self, words: np.ndarray) -> None:
        state = self._state
        if state.terminated:
            words[:] = 0
            for t in self._stop_token_ids:
                words[t >> 5] |= np.int32(1) << np.int32(t & 31)
            return
        if state.closed:
            self._fill_closed(words)
            return
        compiled = self.compiled_grammar
        runner = self._runner
        while True:
            # called directly, not through runner.run: a steady fill is a few microseconds.  A
            # fill that needs uncertain-token walks is memoised (see batch_fill).
            status = batch_fill.fill_memoised(
                words,
                state.stacks,
                state.n_kernel,
                state.can_end,
                self._stop_ids,
                runner.pda.blob,
                runner.pool.blob,
                runner.ws.blob,
                self._trie_blob,
                compiled.mask_index,
                compiled.mask_pool,
                self._slice_rows,
                runner.limits.max_stack_tops,
                *self._memo,
            )
            if status == 0:
                return
            if status < 0:
                runner.handle(status)  # room made: call again
            elif status == walk.FILL_MASKS_MISSING:
                compiled.ensure_masks(state.kernel_s)
            else:  # walk.FILL_UNCERTAIN: the first fill that needs walks
                self._memo = batch_fill.new_memo(self._words)

    def _fill_closed(self, words: np.ndarray) -> None:
        """The grammar's mask where a token-limited region was just closed (token_regions.py)."""
        state = self._state
        words[:] = 0
        info = self.compiled_grammar.tokenizer_info
        assert self._regions is not None  # a region was closed: the grammar has them
        self._regions.fill(
            words, state.stacks, self._runner, self.compiled_grammar.compiler.trie.token_ids, *info.flat_vocab()
        )
        if state.can_end:
            for t in self._stop_token_ids:
                words[t >> 5] |= np.int32(1) << np.int32(t & 31)

    def _with_regions(self, state: _MatchState, before: _MatchState | None = None) -> _MatchState:
        """`state` (fresh, its region counts set) with the regions whose tokens are spent closed;
        `before`: the state the token started from, counted towards the regions it may be in."""
        regions = self._regions
        assert regions is not None  # callers count regions only for a grammar that has them
        if before is not None:
            assert before.regions is not None  # every state of such a grammar counts them
            state.regions = regions.counts_after(before.regions, regions.inside(before.stacks))
        assert state.regions is not None
        spent = regions.spent(state.regions, regions.inside(state.stacks))
        if not spent.any():
            return state
        stacks = regions.close(state.stacks, spent)
        terminated = state.terminated or (self.terminate_without_stop_token and state.can_end and len(stacks) == 0)
        return _MatchState(stacks, 0, state.can_end, terminated, scans=state.scans, regions=state.regions, closed=True)

    def _batch_row(self, words_address: int) -> tuple:
        """This matcher's row of a batch step's table (batch_fill.ROW_*), its bitmask row at
        words_address.  The template it points to is rebuilt only when an array it names was
        replaced (a grown frame pool, workspace or mask store, a new memo); it keeps them
        alive, and the matcher keeps it, for the whole batch call."""
        runner, compiled, state = self._runner, self.compiled_grammar, self._state
        cached = self._row_template
        if (
            cached is None
            or cached[0] is not runner.pool.blob
            or cached[1] is not runner.ws.blob
            or cached[2] is not compiled.mask_pool
            or cached[3] is not compiled.mask_index
            or cached[4] is not self._memo
        ):
            cached = self._row_template = self._make_template()
        if state.address is None:
            state.address = address(state.stacks)
        return (cached[6], words_address, state.address, len(state.stacks), state.n_kernel, state.can_end)

    def _make_template(self) -> tuple:
        """(frame pool, workspace, mask pool, mask index, memo, template, its address): the
        batch_fill template naming this matcher's arrays, with what it names (see _batch_row)."""
        compiled, runner, memo = self.compiled_grammar, self._runner, self._memo
        arrays = (runner.pool.blob, runner.ws.blob, compiled.mask_pool, compiled.mask_index)
        template = np.zeros(batch_fill.TEMPLATE_FIELDS, dtype=np.int64)
        for field, array in (
            (batch_fill.T_STOPS, self._stop_ids),
            (batch_fill.T_PDA, compiled.pda.blob),
            (batch_fill.T_POOL, arrays[0]),
            (batch_fill.T_WS, arrays[1]),
            (batch_fill.T_TRIE, self._trie_blob),
            (batch_fill.T_MASK_INDEX, arrays[3]),
            (batch_fill.T_MASK_POOL, arrays[2]),
            (batch_fill.T_SLICE_ROWS, self._slice_rows),
        ):
            put_array(template, field, array)
        template[batch_fill.T_N_WORDS] = self._words
        template[batch_fill.T_GRAMMAR_CELL] = compiled.template_cell.ctypes.data
        template[batch_fill.T_LOCK] = compiled.mask_lock.address
        template[batch_fill.T_MAX_TOPS] = compiled.compiler.limits.max_stack_tops
        memo_words, memo_keys, memo_meta = memo
        if len(memo_words):
            template[batch_fill.T_MEMO_WORDS] = memo_words.ctypes.data
            template[batch_fill.T_MEMO_KEYS] = memo_keys.ctypes.data
            template[batch_fill.T_MEMO_META] = memo_meta.ctypes.data
            template[batch_fill.T_MEMO_ENTRIES] = len(memo_words)
            template[batch_fill.T_MEMO_KEY_WORDS] = memo_keys.shape[1]
        return (*arrays, memo, template, template.ctypes.data)

    def _add_token_terminals(self, words: np.ndarray) -> None:
        """Set the bits of the token terminals the stacks can take next (one advance over each
        terminal's bytes, remembered on the state)."""
        state = self._state
        if not (self._token_terminals or self._token_classes) or state.terminated:
            return
        if state.token_terminals is None:
            state.token_terminals = tuple(
                t for t in [*self._token_terminals, *self._token_classes] if self._after_terminal(t) is not None
            )
        for t in state.token_terminals:
            if t in self._token_classes:
                words |= self._token_classes[t][1]
            else:
                words[t >> 5] |= np.int32(1) << np.int32(t & 31)

    def _after_terminal(self, token_id: int, state: _MatchState | None = None) -> _MatchState | None:
        """The state after a token terminal or token class terminal's bytes (None if refused)."""
        data = (
            self._token_terminals[token_id] if token_id in self._token_terminals else self._token_classes[token_id][0]
        )
        return self._state_after_bytes(data, 0, len(data), state)

    def _apply_budget(self, words: np.ndarray) -> None:
        """Drop the tokens after which the text could no longer finish within max_tokens."""
        state = self._state
        remaining = self.remaining_tokens
        if self._budget is not None and remaining is not None and not state.terminated:
            self._budget.restrict(words, state.stacks, remaining, self._runner, self._stop_ids, self._budget_memo)
            if self._token_terminals and remaining > 0:
                self._budget.restrict_terminals(
                    words,
                    remaining,
                    self._token_terminals,
                    lambda t: self._state_after_token(t, state),
                    self._runner,
                )
            if self._checked_budget is not None and remaining > 0:
                self._checked_budget.restrict(words, state, remaining)

    def get_next_token_mask(self) -> np.ndarray:
        """The allowed next tokens as a bool array of length vocab_size (a convenience)."""
        words = np.zeros(self._words, dtype=np.int32)
        self._fill_grammar_words(words)
        self._finish_words(words)
        bits = np.unpackbits(words.view(np.uint8), bitorder="little")
        return bits[: self.vocab_size].astype(bool)

    # -- advancing -----------------------------------------------------------------------

    @property
    def stop_token_ids(self) -> list[int]:
        """The stop tokens this matcher ends on (override_stop_tokens, else the vocabulary's), as
        a new list on each read (XGrammar returns a list)."""
        return list(self._stop_token_ids)

    def accept_token(self, token_id: int, *, debug_print: bool = False) -> bool:
        """Advance on one token; False (and no change) when the grammar does not allow it.
        (debug_print: XGrammar's keyword, accepted and ignored.)"""
        new_state = self._state_after_token(token_id)
        if new_state is None:
            return False
        self._push(new_state)
        return True

    def traverse_draft_tree(
        self,
        retrieve_next_token,
        retrieve_next_sibling,
        draft_tokens,
        token_bitmask,
        time_threshold: float = -1.0,
        temperatures=None,
    ) -> bool:
        """XGrammar's speculative-decoding walk: each node's mask of a draft token tree given by
        first-child and next-sibling links, into its row of token_bitmask (masks/draft.py);
        `temperatures` (a 1-D float32 tensor, one entry per node) gets each filled node's
        temperature, -1 where none is set or the node was not filled."""
        return draft.traverse_draft_tree(
            self, retrieve_next_token, retrieve_next_sibling, draft_tokens, token_bitmask, time_threshold, temperatures
        )

    def validate_tokens(self, token_ids: Sequence[int]) -> list[int]:
        """The longest prefix of token_ids that accept_token would take one after the other,
        leaving the matcher as it is (vLLM's validate_tokens: speculative decoding checks draft
        tokens with it).  Tokens after an accepted stop token are not taken."""
        accepted: list[int] = []
        state = self._state
        for token_id in check_integers(token_ids, "token_ids", "validate_tokens"):
            after = None if state.terminated else self._state_after_token(token_id, state)
            if after is None:
                break
            state = after
            accepted.append(int(token_id))
        return accepted

    def check_token(self, token_id: int) -> bool:
        """Whether accept_token(token_id) would succeed, leaving the matcher as it is: one grammar
        check, for samplers that test a few drawn tokens instead of filling a whole mask (AWRS)."""
        return self._state_after_token(token_id) is not None

    def _state_after_token(self, token_id: int, state: _MatchState | None = None) -> _MatchState | None:
        """The state after token_id from `state` (default: the current one); None if refused."""
        state = self._state if state is None else state
        after = self._step_token(token_id, state)
        if after is None or after.terminated or self._regions is None:
            return after
        return self._with_regions(after, before=state)

    def _step_token(self, token_id: int, state: _MatchState) -> _MatchState | None:
        token_id = check_integer(token_id, "token_id", "GrammarMatcher")
        if not 0 <= token_id < self.vocab_size:
            raise InvalidArgumentError(
                f"GrammarMatcher: token_id {token_id} is outside the vocabulary [0, {self.vocab_size}); pass an id "
                "of the tokenizer the grammar was compiled for (a model's padded logits rows are not tokens)"
            )
        if state.terminated:
            raise MatcherStateError(_TERMINATED.format(call="accept_token"))
        # A token may be read several ways at once: by its id through its token terminal and
        # through each token class (ExcludeToken) holding it, and by its text.  Every reading
        # that goes on is followed (their stacks united), but that a token taking its terminal's
        # edge is not read as text too (its id decides, as a trigger token does in XGrammar);
        # with value checks or token-limited regions under way, the first reading only (sound:
        # the others are then refused).
        readings: list[_MatchState] = []
        by_terminal = self._after_terminal(token_id, state) if token_id in self._token_terminals else None
        if by_terminal is not None:
            readings.append(by_terminal)
        for terminal, (_, words) in self._token_classes.items():
            if words[token_id >> 5] >> (token_id & 31) & 1:
                after = self._after_terminal(terminal, state)
                if after is not None:
                    readings.append(after)
        if readings and (state.scans or self._regions is not None):
            return readings[0]
        if token_id in self._stop_set:
            if readings:
                return self._united(readings)
            return _MatchState(state.stacks, state.n_kernel, True, True, scans=state.scans) if state.can_end else None
        start, end = self._vocab_offsets[token_id], self._vocab_offsets[token_id + 1]
        if by_terminal is None and start < end and token_id not in self._reserved_tokens:  # not special or padding
            after = self._state_after_bytes(self._vocab_bytes, start, end, state)
            if after is not None:
                readings.append(after)
        return self._united(readings) if readings else None

    def _united(self, readings: list[_MatchState]) -> _MatchState:
        """One state holding the stacks of every reading (kernels first, each stack once)."""
        if len(readings) == 1 or any(r.scans for r in readings):
            return readings[0]
        kernel: dict[tuple[int, int], None] = {}
        rest: dict[tuple[int, int], None] = {}
        for reading in readings:
            n = len(reading.stacks) // 2
            for k, pair in enumerate(zip(reading.stacks[:n].tolist(), reading.stacks[n:].tolist())):
                (kernel if k < reading.n_kernel else rest)[pair] = None
        rest = {pair: None for pair in rest if pair not in kernel}
        pairs = [*kernel, *rest]
        stacks = np.array([s for s, _ in pairs] + [p for _, p in pairs], dtype=np.int64)
        can_end = any(r.can_end for r in readings)
        terminated = self.terminate_without_stop_token and can_end and len(stacks) == 0
        return _MatchState(stacks, len(kernel), can_end, terminated, scans=_NO_SCANS)

    def accept_string(self, text: str | bytes, *, debug_print: bool = False) -> bool:
        """Advance over a whole string (one rollback step); False and no change if not allowed.
        (debug_print: XGrammar's keyword, accepted and ignored.)"""
        if not isinstance(text, (str, bytes, bytearray, memoryview)):
            raise ArgumentTypeError(
                f"accept_string: text must be str or bytes, got {type(text).__name__}; pass token ids to accept_token"
            )
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if self._state.terminated:
            raise MatcherStateError(_TERMINATED.format(call="accept_string"))
        if not data:
            return True
        if (self._token_terminals or self._token_classes) and TOKEN_MARK in data:
            return False  # the byte that spells token terminals is never text
        new_state = self._state_after_bytes(np.frombuffer(data, dtype=np.uint8), 0, len(data))
        if new_state is None:
            return False
        if self._regions is not None:  # as in XGrammar, a string spends no region's tokens
            new_state.regions = self._state.regions
            new_state = self._with_regions(new_state)
        self._push(new_state)
        return True

    def _state_after_bytes(
        self, data: np.ndarray, start: int, end: int, state: _MatchState | None = None
    ) -> _MatchState | None:
        state = self._state if state is None else state
        scans = _NO_SCANS
        if self._checked is not None and (state.scans or not self._check_starts.isdisjoint(data[start:end].tobytes())):
            got = self._checked.advance(state.stacks, state.scans, data, start, end)
            if got is None:
                return None
            stacks, n_kernel, flags, scans = got
        else:
            got = self._runner.advance(state.stacks, data, start, end)
            if got is None:
                return None
            stacks, n_kernel, flags = got
        can_end = bool(flags & FLAG_END)
        terminated = self.terminate_without_stop_token and can_end and len(stacks) == 0
        return _MatchState(stacks, n_kernel, can_end, terminated, scans=scans or _NO_SCANS)

    def _push(self, new_state: _MatchState) -> None:
        self._n_tokens += 1
        self._history.append(self._state)
        if self.max_rollback_tokens >= 0 and len(self._history) > self.max_rollback_tokens:
            del self._history[: len(self._history) - self.max_rollback_tokens]
        self._state = new_state

    def rollback(self, num_tokens: int = 1) -> None:
        """Undo the last num_tokens accepted tokens (accept_string counts as one)."""
        num_tokens = check_integer(num_tokens, "num_tokens", "rollback")
        if num_tokens < 0 or num_tokens > len(self._history):
            kept = len(self._history)
            capped = num_tokens > kept and self._n_tokens > kept  # max_rollback_tokens dropped the older ones
            raise InvalidArgumentError(
                f"rollback: cannot roll back {num_tokens} tokens; {kept} can be undone (num_tokens must be "
                f"in [0, {kept}]: the tokens accepted since the last reset)"
                + ("; raise GrammarMatcher's max_rollback_tokens to keep more" if capped else "")
            )
        if num_tokens == 0:
            return
        self._state = self._history[-num_tokens]
        del self._history[-num_tokens:]
        self._n_tokens -= num_tokens

    def reset(self) -> None:
        self._state = self._initial
        self._history.clear()
        self._n_tokens = 0

    def fork(self) -> GrammarMatcher:
        """An independent matcher at the same point, with the same rollback history, in
        O(history): states are immutable and hold frame ids, so the fork shares this matcher's
        frame pool and workspace (and its fill memo until either makes a new one).  A matcher and its forks must therefore not
        run at the same time on different threads; batch_fill_next_token_bitmask fills them one
        after the other."""
        other = copy.copy(self)
        other._history = list(self._history)
        other._row_cache = None
        other._row_template = None
        return other

    def find_jump_forward_string(self) -> str:
        """The longest text the grammar forces from here (complete UTF-8 characters only)."""
        state = self._state
        if state.terminated:
            return ""
        out = bytearray()
        stacks, can_end = state.stacks, state.can_end
        allowed = np.zeros(256, dtype=np.uint8)
        while not can_end and len(out) < 4096:
            kernels.run_allowed_first_bytes(self.compiled_grammar.pda.blob, stacks[: len(stacks) // 2], allowed)
            choices = np.flatnonzero(allowed)
            if len(choices) != 1 or choices[0] == TOKEN_MARK:
                break  # a token terminal is a token, not text to jump over
            b = int(choices[0])
            got = self._runner.advance(stacks, np.array([b], dtype=np.uint8))
            if got is None:
                break
            stacks, _, flags = got
            can_end = bool(flags & FLAG_END)
            out.append(b)
        if self._checked is not None:  # forced bytes may still close a value that fails its check
            while out and self._state_after_bytes(np.frombuffer(bytes(out), dtype=np.uint8), 0, len(out)) is None:
                out.pop()
        return _complete_utf8_prefix(bytes(out))

    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        """Accept several tokens; on the first rejection, undo the ones accepted and return False."""
        for n, t in enumerate(check_integers(token_ids, "token_ids", "accept_tokens")):
            if not self.accept_token(t):
                self.rollback(n)
                return False
        return True


def batch_fill_next_token_bitmask(
    matchers: Sequence[GrammarMatcher],
    bitmask,
    indices: Sequence[int] | None = None,
    max_threads: int | str | None = None,
    *,
    num_threads: int | None = None,
) -> None:
    """Fill row indices[i] (default i) of `bitmask` for each matcher, rows spread over threads.

    `max_threads`: the most threads the step may use (an int >= 1 or "auto", see
    core/threads.py); None takes the largest `max_threads` of the matchers' compilers.
    A step uses fewer when its work does not pay for them: it times its first rows on the
    calling thread (threads_for_rows / threads_for_work).  `num_threads` is its deprecated old
    name.

    One numba call per thread fills rows without the GIL (masks/batch_fill.py), each thread
    taking the next row from a shared counter, memoised fills included; a row that meets states
    without masks stores them in the same call (its grammar's lock taken inside the kernel), and
    the masks computed go to the shared cache once the fills are done.  Python runs per row only
    to describe it (a list comprehension), for the rare row the kernel sends back (its grammar
    busy, a pool to grow, a disk cache to read: masks/state_masks.py's ensure_batch_masks) before
    it goes round again, and for value checks, budgets and token terminals; finished matchers and
    non-CPU bitmasks take the single-row path.  Each matcher must appear once (it owns its workspace).  If the fill raises
    once the arguments were found valid, every row it was given is all zero when the exception
    propagates (the kernel may have written a row whose value checks or budget never ran).
    """
    # (checks and gathers by map over C builtins: a Python loop per row costs more than its kernel)
    if not isinstance(matchers, (list, tuple)) or not all(map(isinstance, matchers, repeat(GrammarMatcher))):
        raise ArgumentTypeError(
            "batch_fill_next_token_bitmask: matchers must be a list of GrammarMatcher, got " + type(matchers).__name__
        )
    fill_batch(matchers, bitmask, indices, max_threads, num_threads)


def _complete_utf8_prefix(data: bytes) -> str:
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", "ignore")
