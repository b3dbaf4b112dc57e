"""GrammarCompiler (front end -> IR passes -> PDA) and CompiledGrammar (the PDA plus its lazily
computed per-state token masks, shared across grammars through the compiler's cache)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..automata.kernels import BOTTOM, MASK_FIELDS
from ..automata.pda import Budgets, Pda, build_pda
from ..automata.stack import StackRunner
from ..grammar.ir import Grammar
from .mask_cache import MaskCache, StateMask, build_state_mask, ids_to_bitset
from .trie import TokenTrie
from .vocab import TokenizerInfo


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
        rule, local = self.pda.local_state(state)
        key = (self.pda.rule_keys[rule], self.pda.follow_key(rule), local)
        if compiler.cache_enabled:
            with compiler._lock:
                cached = compiler.cache.get(key)
            if cached is not None:
                return cached
        if self._offline is None:
            self._offline = StackRunner(self.pda, compiler.budgets, compiler.trie.max_token_length)
        init_s = np.array([state], dtype=np.int64)
        init_p = np.array([BOTTOM], dtype=np.int64)
        trie = compiler.trie
        result = self._offline.walk(trie.blob, trie.all_positions, init_s, init_p, offline=True)
        mask = build_state_mask(result, trie.token_ids, self.tokenizer_info.vocab_size)
        if compiler.cache_enabled:
            with compiler._lock:
                compiler.cache.put(key, mask)
        return mask

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
