"""GrammarCompiler (front end -> IR passes -> PDA) and CompiledGrammar (the PDA plus its lazily
computed per-state token masks, shared across grammars through the compiler's cache)."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from ..automata.kernels import ERR_BUFFER_FULL, ERR_POOL_FULL, ERR_TOO_MANY_TOPS, ROOT
from ..automata.pda import Pda, build_pda, state_hash
from ..automata.stack import MAX_TOPS, PDA_BLOB, POOL_BLOB, WS_BLOB, FramePool, StackRunner, Workspace, too_many_tops
from ..core.caches import BoundedCache, release_free_heap
from ..core.errors import (
    ArgumentTypeError,
    CompileClock,
    GrammarError,
    InvalidArgumentError,
    LimitExceededError,
    PushmaskError,
    check_argument,
    check_integer,
)
from ..core.gc_pause import paused_gc
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.serialization import (
    DeserializeError,
    DeserializeFormatError,
    check_digest,
    check_header,
    content_digest,
    from_json,
    header,
    to_json,
)
from ..core.threads import resolve_max_threads
from ..grammar.frontends import FRONT_ENDS, to_grammar
from ..grammar.grammar_api import builtin_json_grammar, checked_named_grammars
from ..grammar.ir import TOKEN_MARK, Grammar, token_terminal_bytes, token_terminal_ids
from ..grammar.json_checks import ValueCheck
from ..grammar.json_options import JsonOptions
from ..grammar.passes import normalize as normalize_grammar
from ..grammar.serialization import checked_temperatures
from . import first_reach
from .disk_cache import DEFAULT_MAX_BYTES, DiskMaskCache
from .kernel_memory import KernelLock, put_array
from .mask_cache import StateMask, ids_to_bitset
from .shared_masks import SharedMasks
from .state_masks import (
    COMPUTED,
    FV_FIELDS,
    FV_HASH_MEMO,
    FV_MASK_INDEX,
    FV_MASK_POOL,
    FV_MAX_TOPS,
    FV_N_RULES,
    FV_NUM_ACCEPTED,
    FV_PAIRS_AT,
    FV_PAIRS_KEY,
    FV_PDA,
    FV_POOL,
    FV_RULE_HASHES,
    FV_USE_SLICES,
    FV_USED,
    NEED_PAIRS,
    NO_SHARED,
    STORE_FULL,
    run_follow_pairs_rules,
    store_first_visits,
    store_one,
    trie_tables,
)
from .token_regions import TokenRegions
from .trie import TokenTrie
from .vocab import TokenizerInfo
from .walk import (
    KIND_ACCEPTED_BITSET,
    KIND_ACCEPTED_LIST,
    KIND_REJECTED_LIST,
    KIND_SLICE,
    MASK_FIELDS,
    SLICE_ROWS,
    WalkScratch,
    candidate_lcp,
)

TOKEN_MARK_BYTE = bytes([TOKEN_MARK])
_NO_STATES = np.empty(0, dtype=np.int64)
PAIRS_PER_CALL = 32
"""Rules whose follow pairs one kernel call computes, into the thread's WalkScratch.pairs: a compile
computes every rule's, 66 KB each until the distinct ones are kept (a grammar of 500 rules took
33 MB at once, and fresh arrays of that size left the C heap fragmented)."""
MASK_HEADROOM_WORDS = 1024
"""Mask pool words a first visit makes free per state before the store kernel runs (most masks
are smaller; a larger one stops the kernel, which resumes once the pool grew)."""
DEFAULT_CACHE_LIMIT_BYTES = 256 << 20
"""GrammarCompiler's default cache_limit_bytes.  Bounded (XGrammar's default is unbounded, and
vLLM caps its XGrammar cache at 512 MB) so that a server on the default compiler (the SGLang
backend, the llama.cpp adapter's compilers) stops growing: a MaskBench schema's grammar weighs
about 0.65 MB with the masks it visited (Llama-3 vocabulary) and a shared mask about 2.5 KB, so
the halves hold about 200 recent grammars and 50,000 masks (benchmarks/memory_protocol.py).  A
grammar that falls out is compiled again on its next request."""


class GrammarCompiler:
    """Compiles grammars for one tokenizer and holds the mask cache they share."""

    def __init__(
        self,
        tokenizer_info: TokenizerInfo,
        *,
        max_threads: int | str = "auto",
        cache_enabled: bool = True,
        cache_limit_bytes: int = DEFAULT_CACHE_LIMIT_BYTES,
        limits: Limits | None = None,
        mask_cache_dir: str | os.PathLike | None = None,
        mask_cache_max_bytes: int = DEFAULT_MAX_BYTES,
    ):
        """A compiler for one vocabulary, holding the grammars it compiled and the token masks
        they share.  The first three options have XGrammar's names and meanings (keyword
        arguments, as in XGrammar's Python API); the cache options have its defaults too.

        Parameters
        ----------
        tokenizer_info : TokenizerInfo
            The vocabulary (exact bytes per token, special and stop tokens).
        max_threads : int or "auto", default "auto"
            The most threads work for this compiler's grammars may use (1 or more; "auto" is
            half the CPU cores, at most 8: core/threads.py).  It is the default of the
            batch fills of its matchers (batch_fill_next_token_bitmask, the integrations), which
            use fewer threads when a step's work does not pay for them.  pushmask compiles on the
            calling thread (so every value gives the same result); several threads may call the
            same compiler at once.
        cache_enabled : bool, default True
            Whether the compiler keeps what it computed: each compiled grammar, memoised by
            (kind, spec, options) so the same request compiles once; and the token masks its
            grammars share, in memory and on disk.  False compiles every call anew and walks the
            trie for each state of each grammar.
        cache_limit_bytes : int, default DEFAULT_CACHE_LIMIT_BYTES (256 MiB)
            The most bytes the compiler's memory cache holds (get_cache_size_bytes), least
            recently used out first; -1 for no limit (XGrammar's default).  Half of it goes to
            the compiled grammars (each weighed when stored: a grammar's mask store grows as its
            states are visited, so the use may slightly exceed the limit, as XGrammar says of
            its own) and half to the token masks its grammars share.  Bounded by default so a
            long-running process does not grow with every grammar it has seen.
        limits : Limits, optional
            Every compile and match limit (core/limits.py); the defaults if None.
        mask_cache_dir : str or PathLike, optional
            A persistent mask cache on disk shared by processes (else the
            PUSHMASK_MASK_CACHE_DIR environment variable, else none).
        mask_cache_max_bytes : int
            Cap of the disk cache (or PUSHMASK_MASK_CACHE_MAX_BYTES).
        """
        check_argument(
            tokenizer_info,
            TokenizerInfo,
            "tokenizer_info",
            "GrammarCompiler",
            "build one with TokenizerInfo.from_huggingface(tokenizer)",
        )
        self.max_threads = resolve_max_threads(max_threads, "GrammarCompiler")
        check_argument(cache_enabled, bool, "cache_enabled", "GrammarCompiler")
        self.cache_limit_bytes = check_integer(cache_limit_bytes, "cache_limit_bytes", "GrammarCompiler", minimum=-1)
        self.tokenizer_info = tokenizer_info
        self.limits = _checked_limits(limits)
        self.cache_enabled = cache_enabled
        grammar_bytes = -1 if cache_limit_bytes < 0 else cache_limit_bytes // 2
        self.cache = SharedMasks(-1 if cache_limit_bytes < 0 else cache_limit_bytes - grammar_bytes)
        self.compiled_cache: BoundedCache[tuple, CompiledGrammar] = BoundedCache(
            grammar_bytes, cost=lambda compiled: compiled.memory_size_bytes
        )
        # Ordinary tokens holding the byte 0xFF (invalid in UTF-8) never match grammar text; the byte
        # is reserved for token terminals (grammar/ir.py: TOKEN_MARK), so they stay out of every mask.
        self.reserved_token_ids = frozenset(
            i for i, data in enumerate(tokenizer_info.decoded_vocab) if TOKEN_MARK_BYTE in data
        )
        self.trie = TokenTrie(
            tokenizer_info.decoded_vocab,
            tokenizer_info.vocab_size,
            sorted(set(tokenizer_info.special_token_ids) | self.reserved_token_ids),
        )
        words = (tokenizer_info.vocab_size + 31) // 32
        self.all_grammar_words = ids_to_bitset(self.trie.token_ids, words)
        self.trie_tables = trie_tables(self.trie)  # what the first-visit kernels read (masks/state_masks.py)
        self._thread_local = threading.local()
        # idle workspaces lent to first visits, each with the grammar its closure memo holds (or None)
        self._idle_workspaces: list[tuple[Workspace, Callable[[], CompiledGrammar | None]]] = []
        self._idle_lock = threading.Lock()
        # follow-pair arrays by digest, shared by its grammars while one of them holds each (weak)
        self._follow_pairs: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()
        fingerprint = self.trie.fingerprint(tokenizer_info.vocab_hash)
        if not cache_enabled:
            self.disk_cache = None
        elif mask_cache_dir is not None:
            self.disk_cache = DiskMaskCache(mask_cache_dir, fingerprint, mask_cache_max_bytes)
        else:
            self.disk_cache = DiskMaskCache.from_environment(fingerprint)
        with _SHARED_LOCK:  # grammars read back from pickle in this process join the first compiler
            _SHARED_COMPILERS.setdefault(_shared_key(tokenizer_info, self.limits), self)

    @classmethod
    def shared(cls, tokenizer_info: TokenizerInfo, limits: Limits | None = None) -> GrammarCompiler:
        """This process's compiler for a vocabulary and limits: the first one made while any is
        alive, else a new one.  Grammars read back from pickle or JSON join it, sharing its
        token trie and mask cache.  "The same vocabulary" is the same tokens, special tokens,
        stop tokens and vocabulary type: a grammar's matchers end on its compiler's stop tokens,
        so a grammar restored with one TokenizerInfo never joins a compiler made with another
        whose stop tokens differ (both have the same vocab_hash when only the stops differ).

        Parameters
        ----------
        tokenizer_info : TokenizerInfo
            The vocabulary.
        limits : Limits, optional
            The limits (the defaults if None); compilers with other limits are not shared.

        Returns
        -------
        GrammarCompiler
        """
        check_argument(tokenizer_info, TokenizerInfo, "tokenizer_info", "GrammarCompiler.shared")
        limits = _checked_limits(limits)
        key = _shared_key(tokenizer_info, limits)
        with _SHARED_LOCK:
            compiler = _SHARED_COMPILERS.get(key)
        return compiler if compiler is not None else cls(tokenizer_info, limits=limits)

    # -- front ends -------------------------------------------------------------------------

    def compile_grammar(self, ebnf: str | Grammar, *, root_rule_name: str = "root") -> CompiledGrammar:
        """Compile an EBNF grammar in the XGrammar / llama.cpp GBNF dialect.

        Parameters
        ----------
        ebnf : str or Grammar
            The grammar text; token terminals ``<|name|>`` / ``<[ID]>`` name vocabulary tokens.
            Or a Grammar (``Grammar.from_ebnf`` / ``from_json_schema`` / ``union`` ...), as XGrammar
            takes one; its own root is the start.
        root_rule_name : str, default "root"
            The rule the output must match (text only).

        Returns
        -------
        CompiledGrammar
            The automaton, its token masks computed on first visit.

        Raises
        ------
        GrammarError
            Malformed text, an undefined rule, nesting past ``Limits.max_nesting`` or a repetition
            bound past ``Limits.max_repeat``.
        """
        if isinstance(ebnf, Grammar):
            return self.compile_ir(ebnf)
        _check_text(ebnf, "ebnf", "compile_grammar")
        check_argument(root_rule_name, str, "root_rule_name", "compile_grammar")
        return self.compile("ebnf", ebnf, root=root_rule_name)

    def compile_lark(self, text: str, *, start: str = "start", named_grammars: Any = None) -> CompiledGrammar:
        """Compile a Lark grammar (the subset an automaton can hold: no lookaround in terminals).

        Parameters
        ----------
        text : str
            The Lark grammar text; ``%ignore`` terminals may occur between any two tokens.
        start : str, default "start"
            The rule the output must match.
        named_grammars : dict, optional
            XGrammar's: the grammars ``@name`` refers to, each a Grammar or Lark text.

        Returns
        -------
        CompiledGrammar
            The automaton, its token masks computed on first visit.

        Raises
        ------
        GrammarError
            Text lark cannot load, or a terminal regex past ``Limits.max_rule_states`` /
            ``Limits.max_nesting``.
        """
        _check_text(text, "text", "compile_lark")
        check_argument(start, str, "start", "compile_lark")
        named = checked_named_grammars(named_grammars, "compile_lark")
        if named is None:
            return self.compile("lark", text, start=start)
        return self.compile("lark", text, start=start, named_grammars=named)

    def compile_regex(self, pattern: str) -> CompiledGrammar:
        """Compile a regular expression (Python ``re`` syntax) that the whole output must match.

        Parameters
        ----------
        pattern : str
            The pattern, anchored at both ends.

        Returns
        -------
        CompiledGrammar
            The automaton, its token masks computed on first visit.

        Raises
        ------
        GrammarError
            A malformed or unsupported pattern (lookaround, backreferences), or one whose
            repetitions unroll past ``Limits.max_rule_states``.
        """
        _check_text(pattern, "pattern", "compile_regex")
        return self.compile("regex", pattern)

    def compile_json_schema(self, schema: Any, options: JsonOptions | None = None, **keywords: Any) -> CompiledGrammar:
        """Compile a JSON Schema: the output is one JSON value the schema accepts.

        Parameters
        ----------
        schema : dict, bool, str or pydantic model class
            The schema (JSON text is parsed; a model class gives its ``model_json_schema()``).
        options : JsonOptions, optional
            How it compiles (grammar/json_options.py): layout, strict mode, member order, value
            checks, unsatisfiable schemas, lenient, retrieve.  The defaults if None: strict mode
            (an object schema that declares members takes no others unless the schema says what
            else may come, as in XGrammar), flexible whitespace, members in definition order.
        **keywords
            Changes on top of `options`: JsonOptions field names, or XGrammar's keyword
            arguments with XGrammar's meanings (``strict_mode``, ``any_whitespace``, ``indent``,
            ``separators``, ``max_whitespace_cnt``, ``any_order``; see JsonOptions.from_xgrammar).
            An unknown name is a TypeError.

        Returns
        -------
        CompiledGrammar
            The automaton, its token masks computed on first visit.

        Raises
        ------
        SchemaError
            An invalid schema (or an unsatisfiable one, with ``unsatisfiable="error"``).
        UnsupportedSchemaError
            A keyword pushmask cannot compile exactly (unless `lenient`).
        LimitExceededError
            A limit of the compiler's ``Limits`` exceeded (the message names it).
        """
        return self.compile(
            "json_schema", schema, json_options=JsonOptions.of(options, keywords, "compile_json_schema")
        )

    def compile_structural_tag(
        self, tags: Any, triggers: Any = None, options: JsonOptions | None = None, **keywords: Any
    ) -> CompiledGrammar:
        """Compile XGrammar's structural tags: free text until a trigger, then a constrained tag
        body (grammar/structural_tag.py lists the formats).

        Parameters
        ----------
        tags : dict, str, pydantic object or list
            A ``{"type": "structural_tag", "format": ...}`` document (dict, JSON text, or an object
            with ``model_dump``), or the legacy list of ``{"begin", "schema", "end"}`` items.
        triggers : list of str, optional
            The legacy form's triggers.
        options : JsonOptions, optional
            How the JSON bodies compile, as in compile_json_schema (strict mode by default); a
            format's own ``any_order`` / ``max_whitespace_cnt`` override them.
        **keywords
            Changes on top of `options`, as in compile_json_schema.

        Returns
        -------
        CompiledGrammar
            The automaton, its token masks computed on first visit.

        Raises
        ------
        GrammarError
            A malformed document; UnsupportedFormatError (a GrammarError) for a format pushmask
            cannot compile exactly.
        """
        return self.compile(
            "structural_tag",
            tags,
            triggers=triggers,
            json_options=JsonOptions.of(options, keywords, "compile_structural_tag"),
        )

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Compile XGrammar's JSON grammar: a JSON object or array, as xgrammar's (its root
        takes no bare string, number or literal; ``compile_json_schema({})`` takes any value).

        Returns
        -------
        CompiledGrammar
            The automaton, its token masks computed on first visit.
        """
        return self.compile_ir(builtin_json_grammar())

    def compile_ir(
        self, grammar: Grammar, *, normalize: bool = True, clock: CompileClock | None = None
    ) -> CompiledGrammar:
        """Compile grammar IR built by hand or by a front end (grammar/frontends.py: to_grammar).

        Parameters
        ----------
        grammar : Grammar
            The IR; its root rule is what the output must match.
        normalize : bool, default True
            Run the IR passes (grammar/passes.py: normalize) first; False for IR already
            normalized.
        clock : CompileClock, optional
            The wall-clock limit of a compile that started earlier (else one starts here, from
            ``Limits.compile_time_limit_s``).

        Returns
        -------
        CompiledGrammar
            The automaton, its token masks computed on first visit.
        """
        check_argument(grammar, Grammar, "grammar", "compile_ir", "parse text with compile_grammar / compile_lark")
        grammar.check_compilable()
        clock = clock or CompileClock(self.limits.compile_time_limit_s)
        with _compiling("grammar"):
            source, grammar = grammar, normalize_grammar(grammar, clock) if normalize else grammar
            compiled = CompiledGrammar(self, grammar, build_pda(grammar, self.limits, clock))
        compiled._source = source
        compiled.ensure_first_masks()
        return compiled

    def compile(self, kind: str, spec: Any, **options: Any) -> CompiledGrammar:
        """Compile a constraint of any front-end kind (what the integrations call with a kind
        they read from a request); the `compile_*` methods check their arguments and call this.
        With the cache enabled, the same (kind, spec, options) returns the grammar compiled
        the first time (specs made of JSON values, text or a model class; others compile anew).

        Parameters
        ----------
        kind : str
            One of grammar.frontends.FRONT_ENDS: "json_schema", "ebnf", "lark", "regex",
            "structural_tag" or "choice".
        spec : Any
            The constraint in the form `kind` names (schema, grammar text, pattern, document,
            list of strings).
        **options
            The front end's options (grammar/frontends.py: to_grammar), e.g. ``root`` for EBNF, or
            ``json_options`` (a JsonOptions) for a schema or structural tag.

        Returns
        -------
        CompiledGrammar
            The automaton, its token masks computed on first visit.
        """
        if not isinstance(kind, str) or kind not in FRONT_ENDS:
            raise InvalidArgumentError(f"compile: kind must be one of {', '.join(FRONT_ENDS)}, got {kind!r:.60}")
        key = _memo_key(kind, spec, options) if self.cache_enabled else None
        if key is not None:
            found = self.compiled_cache.get(key)
            if found is not None:
                return found
        clock = CompileClock(self.limits.compile_time_limit_s)
        with _compiling(_KIND_WORDS.get(kind, "grammar")):
            grammar = to_grammar(
                kind, spec, limits=self.limits, token_id=self.tokenizer_info.token_id, clock=clock, **options
            )
            compiled = self.compile_ir(grammar, clock=clock)
        compiled._source = (kind, spec, options)  # the IR again from these on demand, not kept
        if key is not None:
            self.compiled_cache.put(key, compiled)
        return compiled

    # -- cache --------------------------------------------------------------------------------

    def walk_scratch(self) -> WalkScratch:
        """This thread's buffers for the offline mask walks of this compiler's grammars.

        Returns
        -------
        WalkScratch
            Made on the thread's first call and reused after (masks/walk.py).
        """
        scratch = getattr(self._thread_local, "walk_scratch", None)
        if scratch is None:
            scratch = self._thread_local.walk_scratch = WalkScratch(
                len(self.trie),
                len(self.all_grammar_words),
                PAIRS_PER_CALL,
                Workspace(self.limits.max_stack_tops, self.trie.max_token_length),
            )
        return scratch

    def lend_workspace(self, borrower: CompiledGrammar | None = None) -> Workspace:
        """A kernel workspace for a grammar's first visits (1.4 MB at the default limits): grammars
        borrow one while they compute masks and give it back after (give_back_workspace), so the
        compiler holds one per concurrent first visit instead of every grammar holding one.  The
        closure memo is kept only for the grammar that filled it (it names that grammar's frames);
        a batch step's threads borrow one each (borrower None) and empty the memo per grammar."""
        with self._idle_lock:
            idle = self._idle_workspaces
            mine = [k for k, (_, filled_by) in enumerate(idle) if filled_by() is borrower] if borrower else []
            taken = idle.pop(mine[-1] if mine else -1) if idle else None
        if taken is None:
            return Workspace(self.limits.max_stack_tops, self.trie.max_token_length)
        ws, filled_by = taken
        if borrower is None or filled_by() is not borrower:
            ws.clear_memo()
        return ws

    def shared_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shared mask cache's arrays a store kernel looks masks up in (empty ones, which
        find nothing, when the cache is off)."""
        return self.cache.tables() if self.cache_enabled and self.cache.max_bytes != 0 else NO_SHARED

    def shared_follow_pairs(self, digest: str, pairs: np.ndarray) -> np.ndarray:
        """The one array of these follow pairs (by their digest) that the live grammars share: a
        rule's pairs are 66 KB and kept for its grammar's life, while most rules of most grammars
        end before the same few bytes (`,` `}` `]` or whitespace)."""
        with self._idle_lock:
            shared = self._follow_pairs.get(digest)
            if shared is None:
                shared = self._follow_pairs[digest] = pairs.copy()
            return shared

    def give_back_workspace(self, ws: Workspace, borrower: CompiledGrammar | None = None) -> None:
        """Take back a workspace lend_workspace lent (kept for the next first visit, up to
        IDLE_WORKSPACES: one per thread computing masks at once, and one more)."""
        filled_by = _no_grammar if borrower is None else weakref.ref(borrower)
        with self._idle_lock:
            if len(self._idle_workspaces) < IDLE_WORKSPACES:
                self._idle_workspaces.append((ws, filled_by))

    def clear_cache(self) -> None:
        """Forget the compiled grammars and the token masks held in memory.  A disk cache keeps
        its files; grammars compiled earlier keep working, with the masks they already copied;
        the process-wide automaton caches are emptied by pushmask.clear_caches().  The C heap's
        free pages go back to the system (release_free_heap)."""
        self.compiled_cache.clear()
        self.cache.clear()
        release_free_heap()

    def get_cache_size_bytes(self) -> int:
        """Bytes held by the compiler's memory caches now: the compiled grammars (with the masks
        they copied since) and the shared masks."""
        return sum(compiled.memory_size_bytes for compiled in self.compiled_cache.values()) + self.cache.allocated_bytes

    def cache_stats(self) -> dict[str, int]:
        """Counters of the mask caches.

        Returns
        -------
        dict of str to int
            ``entries``, ``bytes``, ``hits``, ``computed`` and ``evicted`` of the in-memory
            mask cache, ``grammars`` and ``grammar_hits`` of the compiled grammars; with a disk cache also ``disk_hits``, ``disk_writes``, ``disk_rejected`` and
            ``disk_evicted``.
        """
        c = self.cache
        stats = {
            "entries": len(c),
            "bytes": c.total_bytes,
            "hits": c.hits,
            "computed": c.computed,
            "evicted": c.evicted,
            "grammars": len(self.compiled_cache),
            "grammar_hits": self.compiled_cache.hits,
        }
        if self.disk_cache is not None:
            d = self.disk_cache
            stats.update(disk_hits=d.hits, disk_writes=d.writes, disk_rejected=d.rejected, disk_evicted=d.evicted)
        return stats


def _shared_key(info: TokenizerInfo, limits: Limits) -> tuple:
    """What makes two compilers interchangeable for a restored grammar: everything of the
    vocabulary a mask or a matcher reads (vocab_hash covers the token bytes and the special ids,
    not which of those are stop tokens), and the limits."""
    return (
        info.vocab_hash,
        tuple(info.stop_token_ids),
        info.vocab_type,
        info.num_tokenizer_tokens,
        dataclasses.astuple(limits),
    )


IDLE_WORKSPACES = 4
"""Idle kernel workspaces a compiler keeps for its grammars' first visits (lend_workspace)."""


def _no_grammar() -> None:
    """The `filled_by` of an idle workspace whose closure memo holds no grammar's stacks."""
    return None


_KIND_WORDS = {"json_schema": "schema", "regex": "regex", "structural_tag": "structural tag"}
"""How a compile's error message names the input of each front-end kind ("grammar" otherwise)."""
# Weak, not a registered cache: the live compilers that grammars restored from pickle join; a
# compiler leaves when its last user drops it.
_SHARED_COMPILERS: weakref.WeakValueDictionary[tuple, GrammarCompiler] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()
_PAYLOAD_KIND = "CompiledGrammar"


class CompiledGrammar:
    """A grammar ready for matching: PDA arrays plus per-state masks computed on first use.

    Masks come from the compiler's shared cache (or one trie walk each) and are copied into this
    grammar's flat store (mask_index / mask_pool, layout in automata.kernels) that the one-call
    fill kernel reads.

    The grammar IR it was built from is not kept: a compiled grammar holds flat arrays, while the
    IR of a large schema is tens of thousands of Python objects that every full garbage collection
    of the process would scan again.  `grammar` builds it again from the constraint it was
    compiled from (see there).
    """

    _source: Grammar | tuple | None = None
    """What `grammar` gives back: the Grammar compile_ir was given (the caller's own object), or
    the (kind, spec, options) compile() read it from; None for a grammar read back from JSON."""

    def __init__(
        self,
        compiler: GrammarCompiler,
        grammar: Grammar | None,
        pda: Pda,
        token_ids: Collection[int] = (),
        token_limits: dict[int, int] | None = None,
        token_classes: dict[int, frozenset[int]] | None = None,
        temperatures: dict[int, float] | None = None,
    ):
        self.compiler = compiler
        self.tokenizer_info = compiler.tokenizer_info
        self.pda = pda
        # value checks (grammar/json_checks.py) by rule name; a deserialized grammar has none
        self.value_checks: dict[str, ValueCheck] = dict(grammar.checks) if grammar is not None else {}
        self.num_accepted = np.zeros(pda.num_states, dtype=np.int64)  # of each stored mask
        self.hash_memo = np.zeros(3 * pda.num_states, dtype=np.int64)  # automata/pda.py's state_hash
        self.mask_index = np.full(pda.num_states * MASK_FIELDS, -1, dtype=np.int32)
        words = len(compiler.all_grammar_words)
        self.mask_pool = np.empty(2 * words + 1024, dtype=np.int32)
        self.mask_pool[:words] = compiler.all_grammar_words
        self.used = np.array([words, 0], dtype=np.int64)  # mask_pool words in use; the words a full one needs
        self._fill_room = words  # free words keep_room keeps: a bitset mask (grown, two)
        # each rule's follow pairs for the store kernel: their address (0: not computed yet) and
        # digest as two int64s (half of a shared-cache key); _pairs_of fills them
        n_rules = len(pda.rule_names)
        self.pairs_at = np.zeros(n_rules, dtype=np.int64)
        self.pairs_key = np.zeros(2 * n_rules, dtype=np.int64)
        self._template: tuple | None = None  # first_visit_template's, with the arrays it names
        # the address of the current template, for batch fills that store masks themselves (0: none
        # yet, or a disk cache to look in first: those go back to Python)
        self.template_cell = np.zeros(1, dtype=np.int64)
        # the kernels' runner for first visits: the grammar's own frame pool, and a workspace lent
        # by the compiler while masks are computed (None between first visits)
        self._frames: FramePool | None = None
        self._offline: StackRunner | None = None
        self._pairs: dict[int, tuple[np.ndarray, str]] = {}  # rule -> follow pairs, their digest
        self.value_check_cache: dict = {}  # matchers' per-grammar data for value checks (masks/value_checks.py)
        self._lock = KernelLock(on_release=self._publish_template)
        # Token terminals: id -> the bytes the automaton spells it with (grammar/ir.py); a
        # deserialized grammar (no IR) names them in its payload.
        self.token_terminals: dict[int, np.ndarray] = {}
        if grammar is not None:
            # every token terminal starts with TOKEN_MARK, which no UTF-8 text holds: an automaton
            # without an edge on that byte has none, and the IR walk is skipped
            token_ids = token_terminal_ids(grammar) if (pda.byte_hi >= TOKEN_MARK).any() else ()
        # Token classes (structural tags' exclude_token): class terminal id -> (its bytes, the
        # bitmask words of the tokens it stands for); the matcher takes them by id like terminals.
        classes = dict(grammar.token_classes) if grammar is not None else dict(token_classes or {})
        self.token_classes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for token in sorted(set(token_ids) & classes.keys()):
            self.token_classes[token] = (
                np.frombuffer(token_terminal_bytes(token), dtype=np.uint8),
                self._class_words(classes[token]),
            )
        for token in sorted(set(token_ids) - classes.keys()):
            if token >= self.tokenizer_info.vocab_size:
                raise GrammarError(
                    f"token id {token} in the grammar is outside the vocabulary (size {self.tokenizer_info.vocab_size})"
                )
            self.token_terminals[token] = np.frombuffer(token_terminal_bytes(token), dtype=np.uint8)
        # Token-limited rules (a thinking budget) and rule temperatures, by rule index; a
        # deserialized grammar names them.
        if grammar is not None:
            index = {name: i for i, name in enumerate(pda.rule_names)}
            token_limits = {index[name]: n for name, n in grammar.token_limits.items() if name in index}
            temperatures = {index[name]: t for name, t in grammar.temperatures.items() if name in index}
        self.token_regions = TokenRegions(pda, token_limits) if token_limits else None
        # XGrammar's per-rule sampling temperatures (NaN: none), None when no rule has one (the
        # matcher then reports its default without looking at its stacks)
        self.rule_temperatures: np.ndarray | None = None
        if temperatures:
            self.rule_temperatures = np.full(n_rules, np.nan)
            for rule, t in temperatures.items():
                self.rule_temperatures[rule] = t

    def _class_words(self, excluded: frozenset[int]) -> np.ndarray:
        """Bitmask words of one token class: the tokens with text or special, less the stop
        tokens (they end the output) and `excluded`."""
        info = self.tokenizer_info
        bits = np.array(
            [bool(data) for data in info.decoded_vocab] + [False] * (info.vocab_size - len(info.decoded_vocab))
        )
        bits[list(info.special_token_ids)] = True
        bits[list(info.stop_token_ids)] = False
        bits[[t for t in excluded if t < info.vocab_size]] = False
        return ids_to_bitset(np.flatnonzero(bits), (info.vocab_size + 31) // 32)

    def state_mask(self, state: int) -> StateMask:
        """The mask of a global state, from this grammar's store, the shared cache, or a trie walk."""
        if self.mask_index[state * MASK_FIELDS] < 0:
            self.ensure_masks(np.array([state], dtype=np.int64))
        return _stored_mask(self.mask_index, self.mask_pool, state, int(self.num_accepted[state]))

    def stored_states(self) -> np.ndarray:
        """The states whose masks this grammar's store holds."""
        return np.flatnonzero(self.mask_index[::MASK_FIELDS] >= 0)

    def ensure_masks(self, states: np.ndarray) -> None:
        """Make sure these states' masks are in this grammar's store: from the shared cache (keyed
        by the state's structure and its rule's follow pairs, all a mask depends on), else
        computed in one nogil kernel call (masks/state_masks.py) and shared.  Safe to call from
        several threads: one at a time per grammar, and readers of the store see a mask only
        once it is whole (its kind is published last)."""
        lacking = self.lacking_masks(states)
        if not len(lacking):
            return
        with self.mask_lock:
            try:
                lacking = self.first_visit_states(lacking)
                if len(lacking):
                    store_first_visits([(self, lacking)], 1, own_workspace=True)
            finally:
                self._give_back_workspace()

    # -- first visits, for ensure_masks and a batch step's (state_masks.store_first_visits)

    @property
    def mask_lock(self) -> KernelLock:
        """Held while masks are stored: from first_visit_states to after_first_visits."""
        return self._lock

    def lacking_masks(self, states: np.ndarray) -> np.ndarray:
        """The distinct states (int64, ascending) whose masks the store lacks."""
        states = np.asarray(states, dtype=np.int64)
        lacking = states[self.mask_index[states * MASK_FIELDS] < 0]
        if len(lacking) > 1:  # mostly a few: a set is several times faster than np.unique there
            lacking = np.array(sorted(set(lacking.tolist())), dtype=np.int64)
        return lacking

    def first_visit_states(self, states: np.ndarray) -> np.ndarray:
        """The states the store kernel must look at (mask_lock held): all of them (it skips those
        stored), less those a disk cache holds, stored here."""
        disk = self.compiler.disk_cache
        if disk is None:
            return states
        lacking = self.lacking_masks(states)
        keys = self._disk_keys(lacking)
        kept = []
        for state, key in zip(lacking.tolist(), keys):
            mask = disk.get(key)
            if mask is None:
                kept.append(state)
            else:
                self._store(state, mask)
        return np.array(kept, dtype=np.int64)

    def _disk_keys(self, states: np.ndarray) -> list[tuple[str, str]]:
        """The disk cache's keys of these states: state key and follow-pairs digest, both blake2b
        (the memory cache's keyed hashes differ between processes)."""
        rules = self.pda.state_rule[states].tolist()
        pairs = self._pairs_of(rules)
        self._give_back_workspace()
        return [(key, pairs[rule][1]) for key, rule in zip(self.pda.state_keys(states.tolist()), rules)]

    def first_visit_template(self) -> int:
        """The address of this grammar's store kernel template (state_masks.FV_*), made again
        when an array it names was replaced (a grown frame pool or mask pool)."""
        pool = self._frame_pool().blob
        cached = self._template
        if cached is None or cached[0] is not pool or cached[1] is not self.mask_pool:
            cached = self._template = (pool, self.mask_pool, *self._make_template(self, self.pairs_at, True))
        return cached[-1]

    def _publish_template(self) -> None:
        """Point template_cell at the current template (mask_lock held, as Python releases it):
        a batch fill's kernel stores masks through it, so it must name the arrays as they are
        now.  Not with a disk cache, which first visits must look in first (in Python)."""
        if self._template is not None and self.compiler.disk_cache is None:
            self.template_cell[0] = self.first_visit_template()

    def _make_template(self, store, pairs_at: np.ndarray, use_slices: bool) -> tuple[np.ndarray, int]:
        """(template, its address) of the store kernel for `store` (this grammar or a scratch
        store: mask_index, mask_pool, used, num_accepted) and these follow-pairs addresses."""
        template = np.zeros(FV_FIELDS, dtype=np.int64)
        for field, array in (
            (FV_PDA, self.pda.blob),
            (FV_POOL, self._frame_pool().blob),
            (FV_MASK_INDEX, store.mask_index),
            (FV_MASK_POOL, store.mask_pool),
            (FV_NUM_ACCEPTED, store.num_accepted),
            (FV_RULE_HASHES, self.pda.rule_hashes),
            (FV_HASH_MEMO, self.hash_memo),
        ):
            put_array(template, field, array)
        template[FV_USED] = store.used.ctypes.data
        template[FV_PAIRS_AT] = pairs_at.ctypes.data
        template[FV_PAIRS_KEY] = self.pairs_key.ctypes.data
        template[FV_N_RULES] = len(pairs_at)
        template[FV_MAX_TOPS] = self.compiler.limits.max_stack_tops
        template[FV_USE_SLICES] = int(use_slices)
        return template, template.ctypes.data

    def shared_key(self, state: int) -> np.ndarray:
        """The shared mask cache's key of a state (int64 x 4): its keyed state hash, then its
        rule's follow-pairs digest."""
        rule = int(self.pda.state_rule[state])
        with self.mask_lock:
            self._follow_pairs(rule)
            hashed = state_hash(self.pda.blob, state, self.pda.rule_hashes, self.compiler.cache.secret, self.hash_memo)
        return np.array([*hashed, *self.pairs_key[2 * rule : 2 * rule + 2]], dtype=np.int64)

    def borrowed_workspace(self) -> Workspace:
        """The workspace this grammar borrows for its own first visits (until _give_back_workspace)."""
        return self._runner().ws

    def make_room(self, status: int, store=None, states: np.ndarray = _NO_STATES) -> None:
        """Act on a store kernel status (mask_lock held) so that the call can resume: a larger
        mask pool, frame pool, the follow pairs of the `states`' rules that lack them (a grown
        workspace is the caller's: it knows which one), or an error past a limit."""
        store = self if store is None else store
        if status == STORE_FULL:
            store._grow_pool(int(store.used[1]))
        elif status == NEED_PAIRS:
            rules = self.pda.state_rule[states]
            self._pairs_of(np.unique(rules[self.pairs_at[rules] == 0]).tolist())
            self._give_back_workspace()  # (a batch step's grammars would each keep one till the end)
        elif status == ERR_POOL_FULL:
            self._frame_pool().grow()
        elif status == ERR_TOO_MANY_TOPS:
            raise too_many_tops(self.compiler.limits.max_stack_tops)
        elif status != ERR_BUFFER_FULL:
            raise RuntimeError(f"unexpected store kernel status {status}")

    def before_first_visits(self, states: np.ndarray) -> None:
        """Before the store kernel takes these states (mask_lock held): the follow pairs of their
        rules, and mask pool room for them (each mask that does not fit stops the kernel for
        Python)."""
        rules = self.pda.state_rule[states]
        missing = rules[self.pairs_at[rules] == 0]
        if len(missing):
            self._pairs_of(np.unique(missing).tolist())
            self._give_back_workspace()
        self.keep_room(len(states))

    def keep_room(self, n_states: int = 0) -> None:
        """Free words in the mask pool (mask_lock held) for n_states masks of MASK_HEADROOM_WORDS
        and one of the largest (a bitset), else a larger pool with room for one more: a batch
        fill stores new masks in the pool as it is (its row comes back to Python when one does
        not fit), so every first visit in Python and every step that stored masks leaves this
        room for the next.  (Asking for two bitsets grew nearly every pool at its first fill
        after compile, a copy on the step's critical path.)"""
        need = self._fill_room + n_states * MASK_HEADROOM_WORDS
        if len(self.mask_pool) - self.used.item(0) < need:
            self._grow_pool(self.used.item(0) + need + self._fill_room)

    def after_first_visits(self, states: np.ndarray, fresh: np.ndarray) -> None:
        """Once the store kernel stored these states (mask_lock held): the computed ones go to
        the disk cache, if any; room is kept for a fill's next masks; the borrowed workspace goes
        back."""
        disk = self.compiler.disk_cache
        if disk is not None:
            computed = states[fresh == COMPUTED]
            for state, key in zip(computed.tolist(), self._disk_keys(computed)):
                disk.put(key, self.state_mask(state))
        self.keep_room()
        self._give_back_workspace()

    @property
    def grammar(self) -> Grammar | None:
        """The grammar IR this was compiled from (XGrammar's `CompiledGrammar.grammar`), built again
        by its front end on each read, as it is not kept (see the class); the Grammar itself when
        one was compiled; None for a grammar read back from JSON or a pickle."""
        source = self._source
        if source is None or isinstance(source, Grammar):
            return source
        kind, spec, options = source
        compiler = self.compiler
        return to_grammar(kind, spec, limits=compiler.limits, token_id=compiler.tokenizer_info.token_id, **options)

    def ensure_first_masks(self) -> None:
        """Compute the masks of the states a matcher starts in, at compile time: a server compiles
        off its decode loop (vLLM compiles asynchronously), so a new request's first batch step
        finds them ready instead of computing them while every other row waits.  Then those of
        the states its first tokens reach, within first_reach's budget, for the second step.
        First of all every rule's follow pairs, in one kernel call (about 35 us a rule): a batch
        fill stores a new state's mask itself only when its rule has them (state_masks'
        first_visit_in_fill), else the row goes back to Python for them."""
        with self.mask_lock:
            self._pairs_of(list(range(len(self.pda.rule_names))))
        closure_s, closure_p, n_kernel, _ = self._runner().close(
            np.array([self.pda.rule_start[self.pda.root_rule]], dtype=np.int64), np.array([ROOT], dtype=np.int64)
        )
        self.ensure_masks(closure_s[:n_kernel])
        if first_reach.MAX_STATES > 0:
            self._ensure_within_budget(self._first_reached(np.concatenate([closure_s, closure_p])))
        with self.mask_lock:  # (the frame pool may have grown since: published again on release)
            self.keep_room()
            self._give_back_workspace()

    def _ensure_within_budget(self, states: np.ndarray) -> None:
        """ensure_masks of `states` in chunks, in order, until first_reach's time budget is spent:
        the chunks so far say what the next may hold."""
        start = time.thread_time()
        done, chunk = 0, first_reach.FIRST_CHUNK
        while done < len(states) and chunk > 0:
            self.ensure_masks(states[done : done + chunk])
            done += chunk
            chunk = first_reach.next_chunk(done, time.thread_time() - start)

    def _first_reached(self, stacks: np.ndarray) -> np.ndarray:
        """The kernel states without a stored mask that the packed closed stack set `stacks`
        reaches over one token, within first_reach's budget."""
        seen = (self.mask_index[::MASK_FIELDS] >= 0).astype(np.uint8)
        try:
            return first_reach.reached_states(self._runner(), self.compiler.trie, stacks, seen)
        except LimitExceededError:
            return _NO_STATES  # a frame pool past its limit: the fills will say so

    def _grow_pool(self, need: int) -> None:
        _grow_mask_pool(self, need)

    @property
    def _pool_used(self) -> int:
        """Words of mask_pool in use (used[0]: the store kernel moves it)."""
        return int(self.used[0])

    def _store(self, state: int, mask: StateMask) -> None:
        parts = mask.parts
        need = self._pool_used + sum(len(p) for p in parts)
        if need > len(self.mask_pool):
            self._grow_pool(need)
        offsets = []
        for part in parts:
            offsets.append(self._pool_used)
            self.mask_pool[self._pool_used : self._pool_used + len(part)] = part
            self.used[0] += len(part)
        self.num_accepted[state] = mask.num_accepted
        base = state * MASK_FIELDS
        # kind last: a concurrent reader sees either "not computed" or a complete entry.
        self.mask_index[base + 1 : base + 5] = (offsets[0], len(mask.data), offsets[1], len(mask.uncertain_positions))
        self.mask_index[base] = mask.kind

    def _follow_pairs(self, rule: int) -> tuple[np.ndarray, str]:
        """The rule's follow pairs (masks/walk.py) and their digest, computed once."""
        pairs, digest = self._pairs_of([rule])[rule]
        self._give_back_workspace()
        return pairs, digest

    def _pairs_of(self, rules: list[int]) -> dict[int, tuple[np.ndarray, str]]:
        """Rule -> (its follow pairs, their digest), the new rules' pairs from a kernel call per
        PAIRS_PER_CALL of them (their address and digest also in pairs_at and pairs_key); kept
        for the grammar's life, one array per distinct pairs (the compiler's
        shared_follow_pairs)."""
        known = self._pairs
        new = [rule for rule in dict.fromkeys(rules) if rule not in known]
        for at in range(0, len(new), PAIRS_PER_CALL):  # (66 KB a rule until deduplicated)
            chunk = new[at : at + PAIRS_PER_CALL]
            table = self.compiler.walk_scratch().pairs[: len(chunk)]  # (reused: no 2 MB allocation a call)
            table[:] = 0
            done = np.zeros(len(chunk), dtype=np.uint8)
            self._runner().run(
                run_follow_pairs_rules, PDA_BLOB, POOL_BLOB, WS_BLOB, np.array(chunk), MAX_TOPS, table, done
            )
            # pairs hold 0/1 only, so their packed bits (an eighth of the bytes) name them exactly
            packed = np.packbits(table, axis=1)
            for k, rule in enumerate(chunk):
                digest = hashlib.blake2b(packed[k], digest_size=16).hexdigest()
                pairs = self.compiler.shared_follow_pairs(digest, table[k])
                known[rule] = (pairs, digest)
                self.pairs_key[2 * rule : 2 * rule + 2] = np.frombuffer(bytes.fromhex(digest), dtype=np.int64)
                self.pairs_at[rule] = pairs.ctypes.data  # last: the store kernel reads it first
        return known

    def _runner(self) -> StackRunner:
        """The runner of first visits, with a workspace borrowed from the compiler until
        _give_back_workspace (the frame pool stays: closed stack sets name its frames)."""
        if self._offline is None:
            compiler = self.compiler
            self._offline = StackRunner(
                self.pda,
                compiler.limits,
                compiler.trie.max_token_length,
                pool=self._frame_pool(),
                ws=compiler.lend_workspace(self),
            )
        return self._offline

    def _frame_pool(self) -> FramePool:
        """The grammar's frame pool for first visits, made on first use and kept (closed stack
        sets name its frames)."""
        if self._frames is None:
            self._frames = FramePool(max_frames=self.compiler.limits.max_stack_frames)
        return self._frames

    def _give_back_workspace(self) -> None:
        """Return the borrowed workspace, if any, once a first visit is done (stack sets handed
        out by the runner are copies, so nothing still points into it)."""
        runner, self._offline = self._offline, None
        if runner is not None:
            self.compiler.give_back_workspace(runner.ws, self)

    def _compute_mask(self, state: int, pairs: np.ndarray, use_slices: bool = True) -> StateMask:
        """A state's mask (what follows its rule judged by its follow pairs), not stored here nor
        looked up: the slice tokens it accepts whole, then a walk of the rest of the trie.
        use_slices=False walks the whole trie (the reference the slices are tested against)."""
        store = _ScratchStore(self)
        pairs_at = self.pairs_at.copy()
        pairs_at[self.pda.state_rule[state]] = pairs.ctypes.data
        states = np.array([state], dtype=np.int64)
        template, address = self._make_template(store, pairs_at, use_slices)
        with self.mask_lock:
            try:
                while True:
                    status = store_one(address, states, self.compiler, self.borrowed_workspace())
                    if status == 0:
                        break
                    if status == ERR_BUFFER_FULL:
                        self.borrowed_workspace().grow_buffers()
                    self.make_room(status, store, states)
                    template, address = self._make_template(store, pairs_at, use_slices)
            finally:
                self._give_back_workspace()
        return _stored_mask(store.mask_index, store.mask_pool, state, int(store.num_accepted[state]))

    def precompute_masks(self) -> None:
        """Compute every state's mask now instead of on first visit."""
        for state in range(self.pda.num_states):
            self.state_mask(state)

    @property
    def num_states(self) -> int:
        return self.pda.num_states

    # -- serialization (the automaton and the masks computed so far)

    def serialize_json(self) -> str:
        """JSON text of this grammar without its vocabulary (xgrammar's name): read it back with
        CompiledGrammar.deserialize_json(text, tokenizer_info) for the same vocabulary."""
        payload = self._payload()
        payload["digest"] = content_digest(payload)
        return to_json(payload)

    @staticmethod
    def deserialize_json(text: str | bytes, tokenizer_info: TokenizerInfo) -> CompiledGrammar:
        """The grammar serialize_json wrote, on this process's shared compiler for tokenizer_info
        (DeserializeError for another vocabulary, malformed text, or text changed since it was
        written: its content digest, and every mask's ids and rows, are checked before a kernel
        reads them)."""
        grammar = CompiledGrammar.__new__(CompiledGrammar)
        grammar._restore(check_digest(from_json(text, _PAYLOAD_KIND), _PAYLOAD_KIND), tokenizer_info)
        return grammar

    def __getstate__(self) -> dict:
        return {**self._payload(), "tokenizer_info": self.tokenizer_info}

    def __setstate__(self, payload: dict) -> None:
        self._restore(check_header(payload, _PAYLOAD_KIND), payload["tokenizer_info"])

    def _payload(self) -> dict:
        if self.value_checks:
            raise InvalidArgumentError(
                "this grammar has value checks (uniqueItems or an overlapping oneOf, checked with "
                "jsonschema validators in this process), so it cannot be pickled or serialized; "
                "compile it in the process that uses it, or compile with value_checks=False"
            )
        compiler, pda = self.compiler, self.pda
        masks = [
            {
                "state": state,
                "kind": mask.kind,
                "data": mask.data,
                "positions": mask.uncertain_positions,
                "ids": mask.uncertain_ids,
                "lcp": mask.uncertain_lcp,
                "accepted": mask.num_accepted,
            }
            for state, mask in ((state, self.state_mask(state)) for state in self.stored_states().tolist())
        ]
        return {
            **header(_PAYLOAD_KIND),
            "vocab_hash": self.tokenizer_info.vocab_hash,
            "trie": compiler.trie.fingerprint(self.tokenizer_info.vocab_hash),
            "budgets": dataclasses.asdict(compiler.limits),
            "pda": {
                "rule_names": list(pda.rule_names),
                "rule_keys": list(pda.rule_keys),
                "rule_first_state": pda.rule_first_state,
                "blob": pda.blob,
                "root_rule": int(pda.root_rule),
            },
            "token_terminals": sorted(self.token_terminals) + sorted(self.token_classes),
            "masks": masks,
            "token_classes": [
                [
                    t,
                    np.flatnonzero(
                        np.unpackbits(words.view(np.uint8), bitorder="little")[: self.tokenizer_info.vocab_size] == 0
                    ).tolist(),
                ]
                for t, (_, words) in self.token_classes.items()
            ],
            "token_limits": (
                [[int(r), n] for r, n in zip(self.token_regions.rules, self.token_regions.limits)]
                if self.token_regions is not None
                else []
            ),
            "temperatures": (
                [[r, float(t)] for r, t in enumerate(self.rule_temperatures.tolist()) if not math.isnan(t)]
                if self.rule_temperatures is not None
                else []
            ),
        }

    def _restore(self, payload: dict, tokenizer_info: TokenizerInfo) -> None:
        """Become the grammar of a checked payload (deserialize_json, pickle); a field missing or
        of the wrong shape is a DeserializeFormatError naming it."""
        try:
            self._restore_fields(payload, tokenizer_info)
        except PushmaskError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise DeserializeFormatError(
                f"invalid serialized {_PAYLOAD_KIND}: {type(exc).__name__}: {exc}; serialize it again"
            ) from None

    def _restore_fields(self, payload: dict, tokenizer_info: TokenizerInfo) -> None:
        if not isinstance(tokenizer_info, TokenizerInfo):
            raise ArgumentTypeError(
                f"deserialize: tokenizer_info must be a TokenizerInfo, got {type(tokenizer_info).__name__}"
            )
        if tokenizer_info.vocab_hash != payload["vocab_hash"]:
            raise DeserializeError(
                "the grammar was compiled for another vocabulary (its vocab_hash differs); "
                "pass the TokenizerInfo it was compiled with"
            )
        compiler = GrammarCompiler.shared(tokenizer_info, Limits(**payload["budgets"]))
        p = payload["pda"]
        pda = Pda(
            list(p["rule_names"]),
            list(p["rule_keys"]),
            np.asarray(p["rule_first_state"]),
            np.asarray(p["blob"]),
            int(p["root_rule"]),
        )
        CompiledGrammar.__init__(
            self,
            compiler,
            None,
            pda,
            tuple(payload["token_terminals"]),
            {int(r): int(n) for r, n in payload.get("token_limits", [])},
            {int(t): frozenset(ids) for t, ids in payload.get("token_classes", [])},
            checked_temperatures(payload.get("temperatures", []), range(len(pda.rule_names))),
        )
        if payload["trie"] != compiler.trie.fingerprint(tokenizer_info.vocab_hash):
            return  # masks from another token order: recomputed on first visit instead
        stored: set[int] = set()
        for m in payload["masks"]:
            state, mask = self._checked_mask(m, stored)
            self._store(state, mask)
            self.num_accepted[state] = mask.num_accepted

    def _checked_mask(self, m: dict, stored: set[int]) -> tuple[int, StateMask]:
        """(state, mask) of a serialized mask, refused (DeserializeFormatError) unless every id,
        position and slice row it holds is one the fill kernels may index: the kernels set a
        bitmask bit per id without bounds checks."""
        vocab_size, trie = self.tokenizer_info.vocab_size, self.compiler.trie
        state, kind, accepted = int(m["state"]), int(m["kind"]), int(m["accepted"])
        data, positions = np.asarray(m["data"]), np.asarray(m["positions"])
        ids, lcp = np.asarray(m["ids"]), np.asarray(m["lcp"])

        def refuse(why: str) -> None:
            raise DeserializeFormatError(f"invalid serialized {_PAYLOAD_KIND}: the mask of state {state}: {why}")

        if not 0 <= state < self.pda.num_states or state in stored:
            refuse(f"no such state or stored twice (the automaton has {self.pda.num_states})")
        stored.add(state)
        if any(a.ndim != 1 or a.dtype.kind not in "iu" for a in (data, positions, ids, lcp)):
            refuse("its parts must be one-dimensional integer arrays")
        listed = data[SLICE_ROWS:] if kind == KIND_SLICE else data
        if kind not in (KIND_ACCEPTED_LIST, KIND_REJECTED_LIST, KIND_ACCEPTED_BITSET, KIND_SLICE):
            refuse(f"unknown kind {kind}")
        if kind == KIND_ACCEPTED_BITSET and len(data) != len(self.compiler.all_grammar_words):
            refuse(f"a bitset of {len(data)} words for a vocabulary of {vocab_size} tokens")
        if kind != KIND_ACCEPTED_BITSET and len(listed) and not (0 <= listed.min() and listed.max() < vocab_size):
            refuse(f"a token id outside [0, {vocab_size})")
        if kind == KIND_SLICE:
            rows = data[:SLICE_ROWS]
            if len(rows) < SLICE_ROWS or not ((rows >= -1) & (rows < len(trie.cumulative))).all():
                refuse("a slice row that does not exist")
        if not (len(positions) == len(ids) == len(lcp)) or not 0 <= accepted <= vocab_size:
            refuse("uncertain parts of different lengths, or an accepted count past the vocabulary")
        if len(positions) and not (
            0 <= positions.min()
            and positions.max() < len(trie)
            and (np.diff(positions) > 0).all()
            and np.array_equal(ids, trie.token_ids[positions])
            and np.array_equal(lcp, candidate_lcp(trie.blob, positions.astype(np.int32)))
        ):
            refuse("uncertain tokens that are not this vocabulary's trie positions, ids and prefix lengths")
        return state, StateMask(kind, data, positions, ids, lcp, accepted)

    @property
    def memory_size_bytes(self) -> int:
        """Bytes held by this grammar: its automaton, its mask store as allocated, and the frame
        pool of its first visits (a property, as in XGrammar).  Its follow pairs are shared with
        other grammars (GrammarCompiler.shared_follow_pairs) and not counted."""
        frames = 0 if self._frames is None else self._frames.nbytes()
        return self.pda.nbytes() + self.mask_index.nbytes + self.mask_pool.nbytes + frames

    def __repr__(self) -> str:
        return f"CompiledGrammar(rules={len(self.pda.rule_names)}, states={self.pda.num_states})"


class _MaskStore(Protocol):
    """A grammar's mask store as the pool grower sees it (CompiledGrammar, _ScratchStore)."""

    mask_pool: np.ndarray
    used: np.ndarray  # used[0]: words of mask_pool in use


def _grow_mask_pool(store: _MaskStore, need: int) -> None:
    """A larger mask pool holding the same prefix, with room up to `need` words as counted from
    the words used now.  A fill running on another thread keeps the old one, and reads as "not
    computed" the entries that end past it (walk.run_fill): so the masks stored from now on start
    past the old pool's end (used[0] moves there; the words between are left unused), never where
    the old array holds no mask.  It grows by half (copies stay amortised linear): doubling left a
    third of the pools of 300 MaskBench grammars unused (50 MiB allocated for 33 MiB of masks)."""
    used, old = int(store.used[0]), len(store.mask_pool)
    grown = np.empty(max(need + old - used, old * 3 // 2), dtype=np.int32)
    grown[:used] = store.mask_pool[:used]
    store.mask_pool = grown
    store.used[0] = old


class _ScratchStore:
    """An empty mask store shaped like a grammar's, for a mask computed but not kept."""

    def __init__(self, grammar: CompiledGrammar):
        self.mask_index = np.full(len(grammar.mask_index), -1, dtype=np.int32)
        words = len(grammar.compiler.all_grammar_words)
        self.mask_pool = np.empty(2 * words, dtype=np.int32)
        self.mask_pool[:words] = grammar.compiler.all_grammar_words  # a store starts with the grammar tokens' bitset
        self.used = np.array([words, 0], dtype=np.int64)
        self.num_accepted = np.zeros(len(grammar.num_accepted), dtype=np.int64)

    @property
    def _pool_used(self) -> int:
        return int(self.used[0])

    def _grow_pool(self, need: int) -> None:
        _grow_mask_pool(self, need)


def _stored_mask(index: np.ndarray, pool: np.ndarray, state: int, num_accepted: int) -> StateMask:
    """The StateMask of a state in a mask store (_mask_of its index fields)."""
    return _mask_of(pool, index[state * MASK_FIELDS : (state + 1) * MASK_FIELDS].tolist(), num_accepted)


def _mask_of(pool: np.ndarray, fields: list[int], num_accepted: int) -> StateMask:
    """The StateMask of a stored mask (its MASK_FIELDS index fields): its parts as views of one
    copy (a store keeps them in a row: data, then the uncertain positions, ids and lcp)."""
    kind, data_at, size, u_at, n_u = fields
    if u_at != data_at + size:  # not in a row: a copy each
        parts = [pool[data_at : data_at + size].copy(), pool[u_at : u_at + 3 * n_u].copy()]
    else:
        block = pool[data_at : u_at + 3 * n_u].copy()
        parts = [block[:size], block[size:]]
    data, uncertain = parts
    return StateMask(kind, data, uncertain[:n_u], uncertain[n_u : 2 * n_u], uncertain[2 * n_u :], num_accepted)


def _checked_limits(limits) -> Limits:
    """The compiler's limits: the defaults for None, else a Limits (ArgumentTypeError otherwise)."""
    if limits is None:
        return DEFAULT_LIMITS
    check_argument(limits, Limits, "limits", "GrammarCompiler", "build one with pushmask.Limits(...)")
    return limits


def _memo_key(kind: str, spec: Any, options: dict[str, Any]) -> tuple | None:
    """What a compile is memoised under: the kind, the spec's exact text (its repr: member
    order, int vs float and list vs tuple kept) and the options; None when the spec or an option
    is not made of plain values, or nests past what repr can write (such a compile is not
    memoised: the front end reports what is wrong with it)."""
    try:
        if isinstance(spec, type):  # a pydantic model class
            spec_key: Any = spec
        elif _plain(spec):
            spec_key = (type(spec).__name__, repr(spec))
        else:
            return None
        if not all(_hashable(value) or _plain(value) for value in options.values()):
            return None
        option_key = tuple(
            sorted((name, value if _hashable(value) else repr(value)) for name, value in options.items())
        )
    except RecursionError:
        return None
    return (kind, spec_key, option_key)


def _plain(value: Any) -> bool:
    """Made only of JSON's Python values (dict, list, tuple, str, int, float, bool, None), with
    no container inside itself."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, (dict, list)):
            if id(item) in seen:
                return False  # shared or cyclic: not memoised (a cycle would make repr useless)
            seen.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif item is not None and not isinstance(item, (str, int, float)):
            return False
    return True


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _check_text(text, name: str, where: str) -> None:
    check_argument(
        text,
        str,
        name,
        where,
        "pass the text as str" + (" (decode bytes first)" if isinstance(text, (bytes, bytearray)) else ""),
    )


RELEASE_HEAP_AFTER_S = 0.1
"""A compile that ran this long (seconds, wall clock) hands the C heap's free pages back to the
system when it ends (release_free_heap: a few milliseconds).  Long compiles are the ones with
large transient arrays (a `format: regex` automaton: ~100 MiB for a moment), and glibc keeps
what they freed resident: 300 MaskBench schemas in one process held ~90 MiB of it."""


@contextmanager
def _compiling(what: str):
    """What every compile runs under: the cyclic garbage collector paused (core/gc_pause.py),
    Python's recursion limit reached anywhere (the explicit nesting budgets should fire first)
    turned into a LimitExceededError, not a RecursionError, and a long compile's freed memory
    given back (RELEASE_HEAP_AFTER_S)."""
    start = time.perf_counter()
    try:
        with paused_gc():
            yield
    except RecursionError:
        raise LimitExceededError(
            f"the {what} nests too deeply to compile (Python's recursion limit); "
            "flatten it or lower Limits.max_nesting / max_schema_depth"
        ) from None
    finally:
        if time.perf_counter() - start >= RELEASE_HEAP_AFTER_S:
            release_free_heap()
