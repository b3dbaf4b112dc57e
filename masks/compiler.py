"""GrammarCompiler (front end -> IR passes -> PDA) and CompiledGrammar (the PDA plus its lazily
computed per-state token masks, shared across grammars through the compiler's cache)."""

from __future__ import annotations

import hashlib
import os
import threading
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..automata.pda import Budgets, Pda, build_pda
from ..automata.stack import StackRunner
from ..grammar.errors import BudgetExceededError, CompileClock, check_argument
from ..grammar.ir import Grammar
from .disk_cache import DEFAULT_MAX_BYTES, DiskMaskCache
from .mask_cache import MaskCache, StateMask, ids_to_bitset, make_state_mask
from .trie import BUCKET_BOUNDS, OTHER, TokenTrie
from .vocab import TokenizerInfo
from .walk import MASK_FIELDS, PAIR_WIDTH, new_slice_scratch, run_follow_pairs, run_slice_bounds, run_state_walk


class GrammarCompiler:
    """Compiles grammars for one tokenizer and holds the mask cache they share."""

    def __init__(
        self,
        tokenizer_info: TokenizerInfo,
        *,
        cache_enabled: bool = True,
        cache_limit_bytes: int = 1 << 30,
        budgets: Budgets | None = None,
        mask_cache_dir: str | os.PathLike | None = None,
        mask_cache_max_bytes: int = DEFAULT_MAX_BYTES,
    ):
        """cache_limit_bytes caps the in-memory mask cache (least recently used masks out);
        mask_cache_dir (or the PUSHMASK_MASK_CACHE_DIR environment variable) adds a persistent
        cache on disk shared by processes, capped at mask_cache_max_bytes (or
        PUSHMASK_MASK_CACHE_MAX_BYTES); cache_enabled=False turns both off."""
        self.tokenizer_info = tokenizer_info
        self.budgets = budgets or Budgets()
        self.cache_enabled = cache_enabled
        self.cache = MaskCache(cache_limit_bytes)
        self.trie = TokenTrie(tokenizer_info.decoded_vocab, tokenizer_info.vocab_size, tokenizer_info.special_token_ids)
        words = (tokenizer_info.vocab_size + 31) // 32
        self.all_grammar_words = ids_to_bitset(self.trie.token_ids, words)
        self._lock = threading.Lock()
        self._thread_local = threading.local()
        fingerprint = self.trie.fingerprint(tokenizer_info.vocab_hash)
        if not cache_enabled:
            self.disk_cache = None
        elif mask_cache_dir is not None:
            self.disk_cache = DiskMaskCache(mask_cache_dir, fingerprint, mask_cache_max_bytes)
        else:
            self.disk_cache = DiskMaskCache.from_environment(fingerprint)

    # -- front ends -------------------------------------------------------------------------

    def compile_grammar(self, ebnf: str, root_rule_name: str = "root") -> "CompiledGrammar":
        """EBNF in the XGrammar / llama.cpp GBNF dialect."""
        from ..grammar.ebnf import parse_ebnf

        _check_text(ebnf, "ebnf", "compile_grammar")
        check_argument(root_rule_name, str, "root_rule_name", "compile_grammar")
        with _nesting_guard("grammar"):
            return self.compile_ir(parse_ebnf(ebnf, root=root_rule_name, max_nesting=self.budgets.max_nesting))

    def compile_lark(self, text: str, start: str = "start") -> "CompiledGrammar":
        from ..grammar.lark_frontend import parse_lark

        _check_text(text, "text", "compile_lark")
        check_argument(start, str, "start", "compile_lark")
        with _nesting_guard("grammar"):
            return self.compile_ir(parse_lark(text, start, self.budgets.max_rule_states, self.budgets.max_nesting))

    def compile_regex(self, pattern: str) -> "CompiledGrammar":
        from ..grammar.regex import parse_regex

        _check_text(pattern, "pattern", "compile_regex")
        with _nesting_guard("regex"):
            return self.compile_ir(parse_regex(pattern, self.budgets.max_rule_states, self.budgets.max_nesting))

    def compile_json_schema(
        self,
        schema: Any,
        *,
        whitespace: str = "flexible",
        indent: int | None = None,
        max_whitespace: int | None = None,
        additional_properties_default: bool = True,
        lenient: bool = False,
        **options: Any,
    ) -> "CompiledGrammar":
        from ..grammar.json_schema import json_schema_to_grammar

        options.setdefault("max_depth", self.budgets.max_schema_depth)
        clock = CompileClock(self.budgets.compile_time_limit_s)
        with _nesting_guard("schema"):
            grammar = json_schema_to_grammar(
                schema,
                whitespace=whitespace,
                indent=indent,
                max_whitespace=max_whitespace,
                additional_properties_default=additional_properties_default,
                lenient=lenient,
                clock=clock,
                **options,
            )
            return self.compile_ir(grammar, clock=clock)

    def compile_builtin_json_grammar(self) -> "CompiledGrammar":
        """Any JSON value."""
        return self.compile_json_schema({})

    def compile_ir(self, grammar: Grammar, *, normalize: bool = True,
                   clock: CompileClock | None = None) -> "CompiledGrammar":
        """Run the IR passes, build the PDA; masks are computed lazily on first visit.  `clock`
        carries the wall-clock limit of a compile that started earlier (else one starts here)."""
        check_argument(grammar, Grammar, "grammar", "compile_ir", "parse text with compile_grammar / compile_lark")
        clock = clock or CompileClock(self.budgets.compile_time_limit_s)
        with _nesting_guard("grammar"):
            if normalize:
                from ..grammar.passes import normalize as normalize_grammar

                grammar = normalize_grammar(grammar, clock)
            return CompiledGrammar(self, grammar, build_pda(grammar, self.budgets, clock))

    # -- cache --------------------------------------------------------------------------------

    def _slice_scratch(self) -> tuple[np.ndarray, ...]:
        """This thread's scratch for slice-bounds searches (see walk.new_slice_scratch)."""
        scratch = getattr(self._thread_local, "slice_scratch", None)
        if scratch is None:
            scratch = self._thread_local.slice_scratch = new_slice_scratch()
        return scratch

    def _uncertain_scratch(self) -> np.ndarray:
        """This thread's buffer for a walk's uncertain positions (one per trie position; reused,
        as a fresh 0.5 MB array costs a map and page faults on every first visit)."""
        scratch = getattr(self._thread_local, "uncertain_scratch", None)
        if scratch is None:
            scratch = self._thread_local.uncertain_scratch = np.empty(len(self.trie), dtype=np.int32)
        return scratch

    def clear_cache(self) -> None:
        """Forget the masks held in memory (a disk cache keeps its files)."""
        with self._lock:
            self.cache.clear()

    def cache_stats(self) -> dict[str, int]:
        c = self.cache
        stats = {"entries": len(c), "bytes": c.total_bytes, "hits": c.hits, "computed": c.computed,
                 "evicted": c.evicted}
        if self.disk_cache is not None:
            d = self.disk_cache
            stats.update(disk_hits=d.hits, disk_writes=d.writes, disk_rejected=d.rejected, disk_evicted=d.evicted)
        return stats


class CompiledGrammar:
    """A grammar ready for matching: PDA arrays plus per-state masks computed on first use.

    Masks come from the compiler's shared cache (or one trie walk each) and are copied into this
    grammar's flat store (mask_index / mask_pool, layout in automata.kernels) that the one-call
    fill kernel reads.
    """

    def __init__(self, compiler: GrammarCompiler, grammar: Grammar, pda: Pda):
        self.compiler = compiler
        self.tokenizer_info = compiler.tokenizer_info
        self.grammar = grammar
        self.pda = pda
        self._masks: list[StateMask | None] = [None] * pda.num_states
        self.mask_index = np.full(pda.num_states * MASK_FIELDS, -1, dtype=np.int32)
        words = len(compiler.all_grammar_words)
        self.mask_pool = np.empty(2 * words + 1024, dtype=np.int32)
        self.mask_pool[:words] = compiler.all_grammar_words
        self._pool_used = words
        self._offline: StackRunner | None = None
        self._pairs: dict[int, tuple[np.ndarray, str]] = {}  # rule -> follow pairs and digest
        self.value_check_cache: dict = {}  # matchers' per-grammar data for value checks (masks/value_checks.py)
        self._lock = threading.Lock()

    def state_mask(self, state: int) -> StateMask:
        """The mask of a global state, from this grammar's store, the shared cache, or a trie walk."""
        mask = self._masks[state]
        if mask is not None:
            return mask
        with self._lock:
            mask = self._masks[state]
            if mask is None:
                mask = self._lookup_or_compute(state)
                self._store(state, mask)
                self._masks[state] = mask
        return mask

    def ensure_masks(self, states: np.ndarray) -> None:
        """Compute (or fetch) the masks of these states if this grammar does not hold them yet."""
        for state in states:
            if self._masks[state] is None:
                self.state_mask(int(state))

    def _store(self, state: int, mask: StateMask) -> None:
        parts = mask.parts
        need = self._pool_used + sum(len(p) for p in parts)
        if need > len(self.mask_pool):
            grown = np.empty(max(need, 2 * len(self.mask_pool)), dtype=np.int32)
            grown[: self._pool_used] = self.mask_pool[: self._pool_used]
            self.mask_pool = grown
        offsets = []
        for part in parts:
            offsets.append(self._pool_used)
            self.mask_pool[self._pool_used : self._pool_used + len(part)] = part
            self._pool_used += len(part)
        base = state * MASK_FIELDS
        # kind last: a concurrent reader sees either "not computed" or a complete entry.
        self.mask_index[base + 1 : base + 5] = (offsets[0], len(mask.data), offsets[1], len(mask.uncertain_positions))
        self.mask_index[base] = mask.kind

    def _lookup_or_compute(self, state: int) -> StateMask:
        """The state's mask from the shared cache (keyed by the state's structure and its rule's
        follow pairs, all a mask depends on) or from a walk."""
        compiler = self.compiler
        rule = int(self.pda.state_rule[state])
        pairs, pairs_key = self._follow_pairs(rule)
        if not compiler.cache_enabled:
            return self._compute_mask(state, pairs)
        key = (self.pda.state_key(state), pairs_key)
        with compiler._lock:
            mask = compiler.cache.get(key)
        if mask is not None:
            return mask
        disk = compiler.disk_cache
        mask = disk.get(key) if disk is not None else None
        if mask is None:
            mask = self._compute_mask(state, pairs)
            if disk is not None:
                disk.put(key, mask)
        with compiler._lock:
            compiler.cache.put(key, mask)
        return mask

    def _follow_pairs(self, rule: int) -> tuple[np.ndarray, str]:
        """The rule's follow pairs (masks/walk.py) and their digest, computed once."""
        got = self._pairs.get(rule)
        if got is None:
            runner = self._runner()
            pairs = np.zeros(256 * PAIR_WIDTH, dtype=np.uint8)
            while True:
                status = run_follow_pairs(self.pda.blob, runner.pool.blob, runner.ws.blob, rule,
                                          runner.budgets.max_stack_tops, pairs)
                if status == 0:
                    break
                pairs[:] = 0
                runner.handle(status)
            got = self._pairs[rule] = (pairs, hashlib.blake2b(pairs.tobytes(), digest_size=16).hexdigest())
        return got

    def _runner(self) -> StackRunner:
        if self._offline is None:
            self._offline = StackRunner(self.pda, self.compiler.budgets, self.compiler.trie.max_token_length)
        return self._offline

    def _compute_mask(self, state: int, pairs: np.ndarray, use_slices: bool = True) -> StateMask:
        """A state's mask (what follows its rule judged by its follow pairs): the slice tokens it
        accepts whole (one OR each), then a walk of the rest of the trie.  use_slices=False walks
        the whole trie (the reference the slices are tested against)."""
        trie, pda, runner = self.compiler.trie, self.pda, self._runner()
        words = np.zeros(len(self.compiler.all_grammar_words), dtype=np.int32)
        rows, main_ranges, bucketed_ranges, num_sliced = [], [], [], 0
        bounds = np.zeros((len(trie.automata), 2), dtype=np.int64)
        bounds[:, 1] = trie.max_chars + 1  # nothing known
        while use_slices:
            status = run_slice_bounds(pda.blob, runner.pool.blob, runner.ws.blob, state, *trie.slice_automata,
                                      runner.budgets.max_stack_tops, self.compiler._slice_scratch(), bounds)
            if status == 0:
                break
            runner.handle(status)
        for s, (f, g) in enumerate(bounds.tolist()):
            bucket = trie.accepted_buckets(s, f)
            rows.append(s * len(BUCKET_BOUNDS) + bucket if bucket >= 0 else -1)
            if bucket >= 0:
                words |= trie.cumulative[rows[-1]]
                num_sliced += int(trie.cumulative_counts[rows[-1]])
            if bucket < 0 and g > trie.max_chars[s]:  # nothing known: the plain order walks faster
                main_ranges.append((trie.region_start[s], trie.region_start[s + 1]))
            else:
                bucketed_ranges.append(trie.bucketed_range(s, f, g))
        main_ranges.append((trie.region_start[OTHER], trie.region_start[OTHER + 1]))
        accepted = np.empty(len(words) + 3, dtype=np.int32)  # past this a list is never the smallest form
        uncertain = self.compiler._uncertain_scratch()
        counts = np.zeros(3, dtype=np.int64)
        for order, position_of, ranges in ((trie, trie.all_positions, main_ranges),
                                           (trie.bucketed, trie.bucketed_position, bucketed_ranges)):
            spans = np.array(_merge_ranges(ranges), dtype=np.int64).reshape(-1)
            if len(spans) == 0:
                continue
            before = counts.copy()
            while True:
                status = run_state_walk(pda.blob, runner.pool.blob, runner.ws.blob, order.blob, spans, position_of,
                                        state, pairs, order.token_ids, words, accepted, uncertain, counts,
                                        runner.budgets.max_stack_tops)
                if status == 0:
                    break
                counts[:] = before
                runner.handle(status)
        walk_accepted, n_uncertain, n_listed = (int(c) for c in counts)
        return make_state_mask(trie, words, rows, num_sliced + walk_accepted, accepted[:n_listed],
                               n_listed == walk_accepted, np.sort(uncertain[:n_uncertain]),
                               self.compiler.all_grammar_words)

    def precompute_masks(self) -> None:
        """Compute every state's mask now instead of on first visit."""
        for state in range(self.pda.num_states):
            self.state_mask(state)

    @property
    def num_states(self) -> int:
        return self.pda.num_states

    def memory_size_bytes(self) -> int:
        """Bytes held by this grammar: its automaton and its mask store."""
        return self.pda.nbytes() + self.mask_index.nbytes + self._pool_used * 4

    def __repr__(self) -> str:
        return f"CompiledGrammar(rules={len(self.pda.rule_names)}, states={self.pda.num_states})"


def _check_text(text, name: str, where: str) -> None:
    check_argument(text, str, name, where, "pass the text as str" + (" (decode bytes first)"
                                                                      if isinstance(text, (bytes, bytearray)) else ""))


@contextmanager
def _nesting_guard(what: str):
    """Python's recursion limit reached anywhere in a compile (the explicit nesting budgets
    should fire first) is a BudgetExceededError, not a RecursionError."""
    try:
        yield
    except RecursionError:
        raise BudgetExceededError(f"the {what} nests too deeply to compile (Python's recursion limit); "
                                  "flatten it or lower Budgets.max_nesting / max_schema_depth") from None


def _merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Non-empty [start, end) ranges in order, adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in ranges:
        if end <= start:
            continue
        if out and out[-1][1] == start:
            out[-1] = (out[-1][0], int(end))
        else:
            out.append((int(start), int(end)))
    return out
