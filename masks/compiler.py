"""GrammarCompiler (front end -> IR passes -> PDA) and CompiledGrammar (the PDA plus its lazily
computed per-state token masks, shared across grammars through the compiler's cache)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..automata.kernels import ROOT
from ..automata.pda import Pda, build_pda
from ..automata.stack import MAX_TOPS, PDA_BLOB, POOL_BLOB, WS_BLOB, FramePool, StackRunner, Workspace
from ..grammar.core.caches import BoundedCache, release_free_heap
from ..grammar.core.errors import (
    ArgumentTypeError,
    CompileClock,
    GrammarError,
    InvalidArgumentError,
    LimitExceededError,
    check_argument,
    check_integer,
)
from ..grammar.core.gc_pause import paused_gc
from ..grammar.core.limits import DEFAULT_LIMITS, Limits
from ..grammar.core.threads import resolve_max_threads
from ..grammar.frontends import FRONT_ENDS, to_grammar
from ..grammar.grammar_api import checked_named_grammars
from ..grammar.ir import TOKEN_MARK, Grammar, token_terminal_bytes, token_terminal_ids
from ..grammar.json_options import JsonOptions
from ..grammar.passes import normalize as normalize_grammar
from . import first_reach
from .disk_cache import DEFAULT_MAX_BYTES, DiskMaskCache
from .mask_cache import MaskCache, StateMask, ids_to_bitset
from .serialization import DeserializeError, check_header, from_json, header, to_json
from .state_masks import STORE_FULL, run_follow_pairs_rules, run_store_masks, trie_tables
from .token_regions import TokenRegions
from .trie import TokenTrie
from .vocab import TokenizerInfo
from .walk import MASK_FIELDS, PAIR_WIDTH, WalkScratch

TOKEN_MARK_BYTE = bytes([TOKEN_MARK])
_NO_STATES = np.empty(0, dtype=np.int64)
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
            half the CPU cores, at most 8: grammar/core/threads.py).  It is the default of the
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
            Every compile and match limit (grammar/core/limits.py); the defaults if None.
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
        self.cache = MaskCache(-1 if cache_limit_bytes < 0 else cache_limit_bytes - grammar_bytes)
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
        return self.compile_ir(Grammar.builtin_json_grammar())

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
        clock = clock or CompileClock(self.limits.compile_time_limit_s)
        with _compiling("grammar"):
            if normalize:
                grammar = normalize_grammar(grammar, clock)
            compiled = CompiledGrammar(self, grammar, build_pda(grammar, self.limits, clock))
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
            scratch = self._thread_local.walk_scratch = WalkScratch(len(self.trie), len(self.all_grammar_words))
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
            ws, filled_by = idle.pop(mine[-1] if mine else -1) if idle else (None, None)
        if ws is None:
            return Workspace(self.limits.max_stack_tops, self.trie.max_token_length)
        if borrower is None or filled_by() is not borrower:
            ws.clear_memo()
        return ws

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
        return sum(compiled.memory_size_bytes for compiled in self.compiled_cache.values()) + self.cache.total_bytes

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
_SHARED_COMPILERS: weakref.WeakValueDictionary[tuple, GrammarCompiler] = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()
_PAYLOAD_KIND = "CompiledGrammar"


class CompiledGrammar:
    """A grammar ready for matching: PDA arrays plus per-state masks computed on first use.

    Masks come from the compiler's shared cache (or one trie walk each) and are copied into this
    grammar's flat store (mask_index / mask_pool, layout in automata.kernels) that the one-call
    fill kernel reads.

    The grammar IR it was built from is not kept (`grammar` is None): a compiled grammar holds
    flat arrays, while the IR of a large schema is tens of thousands of Python objects that every
    full garbage collection of the process would scan again; front ends (grammar.frontends.to_grammar)
    give the IR again where it is wanted.
    """

    grammar: Grammar | None = None

    def __init__(
        self,
        compiler: GrammarCompiler,
        grammar: Grammar,
        pda: Pda,
        token_ids: tuple[int, ...] = (),
        token_limits: dict[int, int] | None = None,
        token_classes: dict[int, frozenset[int]] | None = None,
    ):
        self.compiler = compiler
        self.tokenizer_info = compiler.tokenizer_info
        self.pda = pda
        # value checks (grammar/json_checks.py) by rule name; a deserialized grammar has none
        self.value_checks: dict[str, object] = dict(grammar.checks) if grammar is not None else {}
        self._masks: list[StateMask | None] = [None] * pda.num_states
        self.mask_index = np.full(pda.num_states * MASK_FIELDS, -1, dtype=np.int32)
        words = len(compiler.all_grammar_words)
        self.mask_pool = np.empty(2 * words + 1024, dtype=np.int32)
        self.mask_pool[:words] = compiler.all_grammar_words
        self._pool_used = words
        # the kernels' runner for first visits: the grammar's own frame pool, and a workspace lent
        # by the compiler while masks are computed (None between first visits)
        self._frames: FramePool | None = None
        self._offline: StackRunner | None = None
        self._pairs: dict[int, tuple[np.ndarray, str, int]] = {}  # rule -> follow pairs, digest, address
        self.value_check_cache: dict = {}  # matchers' per-grammar data for value checks (masks/value_checks.py)
        self._lock = threading.Lock()
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
        # Token-limited rules (a thinking budget), by rule index; a deserialized grammar names them.
        if grammar is not None:
            index = {name: i for i, name in enumerate(pda.rule_names)}
            token_limits = {index[name]: n for name, n in grammar.token_limits.items() if name in index}
        self.token_regions = TokenRegions(pda, token_limits) if token_limits else None

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
        mask = self._masks[state]
        if mask is None:
            self.ensure_masks(np.array([state], dtype=np.int64))
            mask = self._masks[state]
        return mask

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
                run = self.masks_to_compute(self.lacking_masks(lacking))  # another thread may have stored some
                if run is not None:
                    self.store_masks(run)
                    self.publish_masks(run)
            finally:
                self._give_back_workspace()

    # -- first visits, for ensure_masks and a batch step's (state_masks.ensure_batch_masks)

    @property
    def mask_lock(self) -> threading.Lock:
        """Held while masks are stored: masks_to_compute, the store kernel and publish_masks."""
        return self._lock

    def lacking_masks(self, states: np.ndarray) -> np.ndarray:
        """The distinct states (int64, ascending) whose masks the store lacks."""
        states = np.asarray(states, dtype=np.int64)
        lacking = states[self.mask_index[states * MASK_FIELDS] < 0]
        if len(lacking) > 1:  # mostly a few: a set is several times faster than np.unique there
            lacking = np.array(sorted(set(lacking.tolist())), dtype=np.int64)
        return lacking

    def masks_to_compute(self, lacking: np.ndarray) -> MaskRun | None:
        """Store the masks of these states that the shared caches hold (mask_lock held); the rest,
        to compute (None if none): keys for all states in one kernel call, follow pairs for all
        new rules in another.  Returns with no workspace borrowed: the store kernel's caller
        borrows one (stack_arrays, or a batch step's one per thread)."""
        compiler = self.compiler
        states = lacking.tolist()
        rules = self.pda.state_rule[lacking].tolist()
        pairs = self._pairs_of(rules)
        keys: list = [None] * len(states)
        compute = range(len(states))
        if compiler.cache_enabled:
            keys = [(key, pairs[rule][1]) for key, rule in zip(self.pda.state_keys(states), rules)]
            cache, disk = compiler.cache, compiler.disk_cache
            compute = []
            for k, key in enumerate(keys):
                mask = cache.get(key)
                if mask is None and disk is not None:
                    mask = disk.get(key)
                    if mask is not None:
                        cache.put(key, mask)
                if mask is None:
                    compute.append(k)
                else:
                    self._store(states[k], mask)
                    self._masks[states[k]] = mask
        self._give_back_workspace()  # the follow pairs may have borrowed one
        if not compute:
            return None
        return MaskRun(
            [states[k] for k in compute],
            [keys[k] for k in compute],
            [pairs[rules[k]][2] for k in compute],  # self._pairs keeps the arrays alive
            self._pool_used,
        )

    def frame_arrays(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(automaton, frame pool, stack tops budget) that the store kernel reads now, for a
        caller that brings its own workspace (a batch step's threads)."""
        return self.pda.blob, self._frame_pool().blob, self.compiler.limits.max_stack_tops

    def stack_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(automaton, frame pool, workspace, stack tops budget) that the store kernel reads now."""
        runner = self._runner()
        return runner.pda.blob, runner.pool.blob, runner.ws.blob, runner.limits.max_stack_tops

    def after_store_masks(self, run: MaskRun, status: int, store=None) -> bool:
        """Take a store kernel call's status (mask_lock held): True when every state of the run is
        stored, else room was made (a grown workspace, frame pool or mask pool) and the kernel
        must run again with this grammar's stack_arrays() and the store's arrays; it resumes
        where it stopped.  `store`: this grammar, or a scratch store (_ScratchStore)."""
        store = self if store is None else store
        # the masks stored so far (up to used[0]) are part of the prefix a grown pool keeps:
        # their index fields already point there
        store._pool_used = int(run.used[0])
        if status == 0:
            return True
        if status == STORE_FULL:
            store._grow_pool(int(run.used[1]))
        else:
            self._runner().handle(status)
        return False

    def store_masks(self, run: MaskRun) -> None:
        """Run the store kernel for the run, in the workspace this grammar borrows, until every
        state is stored (mask_lock held; it resumes a run a batch step's kernel began)."""
        self._run_store_masks(run, self)

    def publish_masks(self, run: MaskRun) -> None:
        """Publish the run's stored masks (mask_lock held): their kinds, then the shared caches."""
        index, pool = self.mask_index, self.mask_pool
        index[run.states * MASK_FIELDS] = run.kinds  # published: fills read them from now on
        compiler = self.compiler
        disk = compiler.disk_cache
        fields = index.reshape(-1, MASK_FIELDS)[run.states].tolist()
        for state, row, accepted, key in zip(run.states.tolist(), fields, run.num_accepted.tolist(), run.keys):
            mask = self._masks[state] = _mask_of(pool, row, accepted)
            if key is not None:
                if disk is not None:
                    disk.put(key, mask)
                compiler.cache.put(key, mask)
        self._give_back_workspace()

    def ensure_first_masks(self) -> None:
        """Compute the masks of the states a matcher starts in, at compile time: a server compiles
        off its decode loop (vLLM compiles asynchronously), so a new request's first batch step
        finds them ready instead of computing them while every other row waits.  Then those of
        the states its first tokens reach, within first_reach's budget, for the second step."""
        closure_s, closure_p, n_kernel, _ = self._runner().close(
            np.array([self.pda.rule_start[self.pda.root_rule]], dtype=np.int64), np.array([ROOT], dtype=np.int64)
        )
        self.ensure_masks(closure_s[:n_kernel])
        if first_reach.MAX_STATES > 0:
            self._ensure_within_budget(self._first_reached(np.concatenate([closure_s, closure_p])))
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

    def _run_store_masks(self, run: MaskRun, store, use_slices: bool = True) -> None:
        """state_masks.run_store_masks for the run into `store` (an object with mask_index,
        mask_pool, _pool_used and _grow_pool: this grammar, or a scratch store), until done."""
        compiler = self.compiler
        scratch = compiler.walk_scratch()
        while True:
            status = run_store_masks(
                *self.stack_arrays(),
                run.states,
                run.pairs_at,
                use_slices,
                compiler.trie_tables,
                scratch.kernel_args,
                store.mask_index,
                store.mask_pool,
                run.used,
                run.kinds,
                run.num_accepted,
                scratch.words,
                scratch.parts,
            )
            if self.after_store_masks(run, status, store):
                return

    def _grow_pool(self, need: int) -> None:
        """A larger mask pool holding the same prefix.  A fill running on another thread keeps the
        old one, and reads as "not computed" the entries that end past it (walk.run_fill).  It
        grows by half (copies stay amortised linear): doubling left a third of the pools of 300
        MaskBench grammars unused (50 MiB allocated for 33 MiB of masks)."""
        grown = np.empty(max(need, len(self.mask_pool) * 3 // 2), dtype=np.int32)
        grown[: self._pool_used] = self.mask_pool[: self._pool_used]
        self.mask_pool = grown

    def _store(self, state: int, mask: StateMask) -> None:
        parts = mask.parts
        need = self._pool_used + sum(len(p) for p in parts)
        if need > len(self.mask_pool):
            self._grow_pool(need)
        offsets = []
        for part in parts:
            offsets.append(self._pool_used)
            self.mask_pool[self._pool_used : self._pool_used + len(part)] = part
            self._pool_used += len(part)
        base = state * MASK_FIELDS
        # kind last: a concurrent reader sees either "not computed" or a complete entry.
        self.mask_index[base + 1 : base + 5] = (offsets[0], len(mask.data), offsets[1], len(mask.uncertain_positions))
        self.mask_index[base] = mask.kind

    def _follow_pairs(self, rule: int) -> tuple[np.ndarray, str]:
        """The rule's follow pairs (masks/walk.py) and their digest, computed once."""
        pairs, digest, _ = self._pairs_of([rule])[rule]
        self._give_back_workspace()
        return pairs, digest

    def _pairs_of(self, rules: list[int]) -> dict[int, tuple[np.ndarray, str, int]]:
        """Rule -> (its follow pairs, their digest, their address), the new rules' pairs from one
        kernel call; kept for the grammar's life, one array per distinct pairs (the compiler's
        shared_follow_pairs)."""
        known = self._pairs
        new = [rule for rule in dict.fromkeys(rules) if rule not in known]
        if new:
            table = np.zeros((len(new), 256 * PAIR_WIDTH), dtype=np.uint8)
            done = np.zeros(len(new), dtype=np.uint8)
            self._runner().run(
                run_follow_pairs_rules, PDA_BLOB, POOL_BLOB, WS_BLOB, np.array(new), MAX_TOPS, table, done
            )
            # pairs hold 0/1 only, so their packed bits (an eighth of the bytes) name them exactly
            packed = np.packbits(table, axis=1)
            for k, rule in enumerate(new):
                digest = hashlib.blake2b(packed[k], digest_size=16).hexdigest()
                pairs = self.compiler.shared_follow_pairs(digest, table[k])
                known[rule] = (pairs, digest, pairs.ctypes.data)
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
        """A state's mask (what follows its rule judged by its follow pairs), not stored here: the
        slice tokens it accepts whole, then a walk of the rest of the trie.  use_slices=False
        walks the whole trie (the reference the slices are tested against)."""
        store = _ScratchStore(self)
        run = MaskRun([state], [None], [pairs.ctypes.data], store._pool_used)
        self._run_store_masks(run, store, use_slices)
        self._give_back_workspace()
        store.mask_index[state * MASK_FIELDS] = run.kinds[0]
        return _stored_mask(store.mask_index, store.mask_pool, state, int(run.num_accepted[0]))

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
        return to_json(self._payload())

    @staticmethod
    def deserialize_json(text: str | bytes, tokenizer_info: TokenizerInfo) -> CompiledGrammar:
        """The grammar serialize_json wrote, on this process's shared compiler for tokenizer_info
        (DeserializeError for another vocabulary or malformed text)."""
        grammar = CompiledGrammar.__new__(CompiledGrammar)
        grammar._restore(from_json(text, _PAYLOAD_KIND), tokenizer_info)
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
            for state, mask in enumerate(list(self._masks))
            if mask is not None
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
        }

    def _restore(self, payload: dict, tokenizer_info: TokenizerInfo) -> None:
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
        )
        if payload["trie"] != compiler.trie.fingerprint(tokenizer_info.vocab_hash):
            return  # masks from another token order: recomputed on first visit instead
        for m in payload["masks"]:
            mask = StateMask(int(m["kind"]), m["data"], m["positions"], m["ids"], m["lcp"], int(m["accepted"]))
            self._store(int(m["state"]), mask)
            self._masks[int(m["state"])] = mask

    @property
    def memory_size_bytes(self) -> int:
        """Bytes held by this grammar: its automaton, its mask store as allocated, and the frame
        pool of its first visits (a property, as in XGrammar).  Its follow pairs are shared with
        other grammars (GrammarCompiler.shared_follow_pairs) and not counted."""
        frames = 0 if self._frames is None else self._frames.nbytes()
        return self.pda.nbytes() + self.mask_index.nbytes + self.mask_pool.nbytes + frames

    def __repr__(self) -> str:
        return f"CompiledGrammar(rules={len(self.pda.rule_names)}, states={self.pda.num_states})"


class _ScratchStore:
    """An empty mask store shaped like a grammar's, for a mask computed but not kept."""

    def __init__(self, grammar: CompiledGrammar):
        self.mask_index = np.full(len(grammar.mask_index), -1, dtype=np.int32)
        words = len(grammar.compiler.all_grammar_words)
        self.mask_pool = np.empty(2 * words, dtype=np.int32)
        self.mask_pool[:words] = grammar.compiler.all_grammar_words  # a store starts with the grammar tokens' bitset
        self._pool_used = words

    def _grow_pool(self, need: int) -> None:
        CompiledGrammar._grow_pool(self, need)


class MaskRun:
    """The states of one grammar's store kernel calls (state_masks.run_store_masks), their cache
    keys and follow pairs' addresses, and what the kernel writes: kinds (-1: not yet), accepted
    counts, and the store's used words (used[1]: the words a full pool needs)."""

    def __init__(self, states: list[int], keys: list, pairs_at: list[int], pool_used: int):
        n = len(states)
        self.states = np.array(states, dtype=np.int64)
        self.keys = keys
        self.pairs_at = np.array(pairs_at, dtype=np.int64)
        self.kinds = np.full(n, -1, dtype=np.int64)
        self.num_accepted = np.zeros(n, dtype=np.int64)
        self.used = np.array([pool_used, 0], dtype=np.int64)


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
    """What every compile runs under: the cyclic garbage collector paused (grammar/core/gc_pause.py),
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
