"""GrammarCompiler (front end -> IR passes -> PDA) and CompiledGrammar (the PDA plus its lazily
computed per-state token masks, shared across grammars through the compiler's cache)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..automata.kernels import BOTTOM, MASK_FIELDS
from ..automata.pda import Budgets, Pda, build_pda
from ..automata.stack import StackRunner
from ..grammar.ir import Grammar
from .mask_cache import MaskCache, StateMask, build_state_mask, ids_to_bitset
from .trie import TokenTrie
from .vocab import TokenizerInfo

DELTA_RESULTS = 16
"""Per-position walk results (128 KiB each for Llama-3) a compiler keeps as bases for delta walks."""
DELTA_MAX_SHARE = 0.25
"""A delta walk is used when it re-walks at most this share of the vocabulary."""


class GrammarCompiler:
    """Compiles grammars for one tokenizer and holds the mask cache they share."""

    def __init__(
        self,
        tokenizer_info: TokenizerInfo,
        *,
        cache_enabled: bool = True,
        cache_limit_bytes: int = 1 << 30,
        budgets: Budgets | None = None,
    ):
        self.tokenizer_info = tokenizer_info
        self.budgets = budgets or Budgets()
        self.cache_enabled = cache_enabled
        self.cache = MaskCache(cache_limit_bytes)
        self.trie = TokenTrie(tokenizer_info.decoded_vocab, tokenizer_info.vocab_size, tokenizer_info.special_token_ids)
        words = (tokenizer_info.vocab_size + 31) // 32
        self.all_grammar_words = ids_to_bitset(self.trie.token_ids, words)
        self._lock = threading.Lock()
        # (id(pda), state) -> (pda, that state's per-position walk result), newest last: the
        # bases of delta walks (the pda is kept so that a reused id never matches a stale entry)
        self._walk_results: OrderedDict[tuple[int, int], tuple[Pda, np.ndarray]] = OrderedDict()

    def _remember_walk(self, pda: Pda, state: int, result: np.ndarray) -> None:
        with self._lock:
            self._walk_results[(id(pda), state)] = (pda, result)
            if len(self._walk_results) > DELTA_RESULTS:
                self._walk_results.popitem(last=False)

    def _recent_walks(self, pda: Pda) -> list[tuple[int, np.ndarray]]:
        """The kept walk results of `pda`'s states, newest first."""
        with self._lock:
            return [(state, result) for (_, state), (p, result) in reversed(self._walk_results.items()) if p is pda]

    # -- front ends -------------------------------------------------------------------------

    def compile_grammar(self, ebnf: str, root_rule_name: str = "root") -> "CompiledGrammar":
        """EBNF in the XGrammar / llama.cpp GBNF dialect."""
        from ..grammar.ebnf import parse_ebnf

        return self.compile_ir(parse_ebnf(ebnf, root=root_rule_name))

    def compile_lark(self, text: str, start: str = "start") -> "CompiledGrammar":
        from ..grammar.lark_frontend import parse_lark

        return self.compile_ir(parse_lark(text, start=start))

    def compile_regex(self, pattern: str) -> "CompiledGrammar":
        from ..grammar.regex import parse_regex

        return self.compile_ir(parse_regex(pattern))

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

        grammar = json_schema_to_grammar(
            schema,
            whitespace=whitespace,
            indent=indent,
            max_whitespace=max_whitespace,
            additional_properties_default=additional_properties_default,
            lenient=lenient,
            **options,
        )
        return self.compile_ir(grammar)

    def compile_builtin_json_grammar(self) -> "CompiledGrammar":
        """Any JSON value."""
        return self.compile_json_schema({})

    def compile_ir(self, grammar: Grammar, *, normalize: bool = True) -> "CompiledGrammar":
        """Run the IR passes, build the PDA; masks are computed lazily on first visit."""
        if normalize:
            from ..grammar.passes import normalize as normalize_grammar

            grammar = normalize_grammar(grammar)
        return CompiledGrammar(self, grammar, build_pda(grammar, self.budgets))

    # -- cache --------------------------------------------------------------------------------

    def clear_cache(self) -> None:
        self.cache.clear()
        with self._lock:
            self._walk_results.clear()

    def cache_stats(self) -> dict[str, int]:
        c = self.cache
        return {"entries": len(c), "bytes": c.total_bytes, "hits": c.hits, "computed": c.computed, "evicted": c.evicted}


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
        parts = (mask.data, mask.uncertain_positions, mask.uncertain_ids)
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
        compiler = self.compiler
        if compiler.cache_enabled:  # the key walks the state's reachable part: only when it is used
            key = (self.pda.state_key(state), self.pda.follow_key(int(self.pda.state_rule[state])))
            with compiler._lock:
                cached = compiler.cache.get(key)
            if cached is not None:
                return cached
        result = self._walk_result(state)
        mask = build_state_mask(result, compiler.trie.token_ids, self.tokenizer_info.vocab_size)
        if compiler.cache_enabled:
            with compiler._lock:
                compiler.cache.put(key, mask)
        return mask

    def _walk_result(self, state: int) -> np.ndarray:
        """Every trie position's verdict from `state` (one stack on BOTTOM), by a full walk or,
        when a recently walked state of the same rule differs from it on few first bytes, by a
        delta walk (see `_delta_base`).  Kept for later delta walks."""
        if self._offline is None:
            self._offline = StackRunner(self.pda, self.compiler.budgets, self.compiler.trie.max_token_length)
        trie = self.compiler.trie
        init_s = np.array([state], dtype=np.int64)
        init_p = np.array([BOTTOM], dtype=np.int64)
        base = self._delta_base(state)
        if base is None:
            result = self._offline.walk(trie.blob, trie.all_positions, init_s, init_p, offline=True)
        else:
            result, differing = base
            result = result.copy()
            for b in differing:
                lo, hi = trie.first_byte_start[b], trie.first_byte_start[b + 1]
                if hi > lo:
                    result[lo:hi] = self._offline.walk(trie.blob, trie.all_positions[lo:hi], init_s, init_p, offline=True)
        self.compiler._remember_walk(self.pda, state, result)
        return result

    def _byte_targets(self, state: int) -> np.ndarray | None:
        """The target of each first byte from `state` (-1: none), or None when the state has
        reference edges (its closure then holds other rules' states)."""
        pda = self.pda
        if pda.ref_ptr[state] != pda.ref_ptr[state + 1]:
            return None
        targets = np.full(256, -1, dtype=np.int64)
        for e in range(int(pda.byte_ptr[state]), int(pda.byte_ptr[state + 1])):
            targets[pda.byte_lo[e] : pda.byte_hi[e] + 1] = pda.byte_dst[e]
        return targets

    def _delta_base(self, state: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(walk result of a base state, first bytes on which `state` differs from it), or None.

        Invariant that makes the delta exact: base and state are in the same rule (same FOLLOW
        set), neither has reference edges (each closure is the state itself) and both have the
        same accept flag; then a token whose first byte leads both to the same state (or both
        nowhere) continues from identical stacks and gets the base's verdict.  Only tokens
        starting with the differing bytes are walked again.
        """
        pda, trie = self.pda, self.compiler.trie
        targets = self._byte_targets(state)
        if targets is None:
            return None
        rule = pda.state_rule[state]
        best = None
        for other, result in self.compiler._recent_walks(pda):
            if pda.state_rule[other] != rule or pda.state_accept[other] != pda.state_accept[state]:
                continue
            other_targets = self._byte_targets(other)
            if other_targets is None:
                continue
            differing = np.flatnonzero(targets != other_targets)
            cost = int(np.sum(trie.first_byte_start[differing + 1] - trie.first_byte_start[differing]))
            if best is None or cost < best[0]:
                best = (cost, result, differing)
        if best is None or best[0] > DELTA_MAX_SHARE * len(trie.token_ids):
            return None
        return best[1], best[2]

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
