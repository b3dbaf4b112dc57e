"""pushmask as a vLLM (v1) structured-output backend.

vLLM picks its structured-output backend by name and has no registry for new ones, so pushmask
takes over the ``xgrammar`` name.  A ``vllm.general_plugins`` entry point calls :func:`register`
in every vLLM process; it does nothing unless ``PUSHMASK_VLLM=1``.  When set, it checks that the
installed vLLM has the interfaces this module was written against, then makes vLLM build a
:class:`PushmaskBackend` where it would build ``XgrammarBackend``, and validate requests with
pushmask's front ends instead of xgrammar's::

    PUSHMASK_VLLM=1 vllm serve MODEL --structured-outputs-config.backend xgrammar

(``auto`` also lands on pushmask whenever the request passes pushmask's validation.)  The entry
point itself is the top-level module ``pushmask_vllm_plugin``, so without the flag a vLLM process
imports nothing of pushmask.

Under the xgrammar name the defaults are xgrammar's (as vLLM calls it): JSON objects take only the
members their schema declares unless it allows more explicitly (xgrammar's strict mode), and
whitespace goes between tokens but not around the top-level value.  Structural tags (tool calling)
are compiled by pushmask (grammar/structural_tag.py).  A request pushmask refuses (a schema
feature or structural-tag format it cannot express exactly) is handed to the real xgrammar
backend in the same process, which fills the same bitmask layout; a warning names the request
type and the reason.

The request's ``max_tokens`` reaches the matcher (a token budget, masks/budget.py): the text is
kept able to finish within the tokens left, counted from where the grammar starts -- after the
reasoning when vLLM's reasoning parser is on, so the answer is budgeted by what the thinking
left.  The budget keeps one token for the stop token where it can (so the request ends with
"stop", not "length"); a budget too small for the grammar is dropped with a warning.

Options, read from the environment when the backend is built:

- ``PUSHMASK_VLLM_MAX_WHITESPACE=N``: cap each run of JSON whitespace at N characters (flexible
  whitespace only).  Unset, the language is exactly JSON's, as with xgrammar.
- ``PUSHMASK_VLLM_GRAMMAR_DRAFTS=0``: with speculative decoding, leave the drafts to vLLM's
  proposer (by default, text the grammar forces is drafted: vllm_grammar_drafts.py).  Read when
  the plugin registers.

vLLM's ``structured_outputs_config.disable_any_whitespace`` selects compact JSON (``,`` and ``:``
with no whitespace), as it does for xgrammar.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

try:
    import vllm
    from vllm.v1.structured_output.backend_types import (
        StructuredOutputBackend,
        StructuredOutputGrammar,
        StructuredOutputOptions,
    )
except ImportError as exc:  # pragma: no cover - only without vLLM
    raise ImportError(
        f"pushmask.integrations.vllm needs vLLM (v1 structured outputs, tested with 0.32); importing it failed: {exc}"
    ) from exc

from ..core.caches import BoundedCache
from ..core.errors import IncompatibleEnvironmentError, InvalidArgumentError
from ..grammar.frontends import grammar_kind, to_grammar
from ..grammar.json_options import JsonOptions
from ..masks.budget import budget_table
from ..masks.compiler import CompiledGrammar, GrammarCompiler
from ..masks.matcher import GrammarMatcher
from ..masks.vocab import TokenizerInfo
from .token_budget import budgeted_matcher
from .vllm_grammar import PushmaskGrammar, num_speculative_tokens

if TYPE_CHECKING:
    import torch


def _guard_llvmlite_against_vllm_kernel_scan() -> None:
    """Keep numba's llvmlite from crashing vLLM's CPU engine start.

    vLLM (0.32, CPU platform) rebinds Triton kernels by scanning every module attribute and
    calling ``vars(value).get(...)`` on each one that ``hasattr(value, "__dict__")``.  llvmlite's
    ``ffi.lib`` wraps any attribute name lazily, ``__dict__`` included, so ``vars()`` returns a
    function wrapper and the engine dies with "'_lib_fn_wrapper' object has no attribute 'get'"
    whenever numba was imported first -- as it is once this module (pushmask) is imported by the
    plugin loader, with or without PUSHMASK_VLLM.  Make the wrapper refuse dunder names, as an
    ordinary object would; llvmlite itself only looks up LLVMPY_* names through it.
    """
    try:
        from llvmlite.binding import ffi
    except ImportError:  # pragma: no cover - numba always brings llvmlite
        return
    lib = getattr(ffi, "lib", None)
    if lib is None:
        return
    cls = type(lib)
    original = cls.__dict__.get("__getattr__")
    if original is None or getattr(original, "_pushmask_guard", False):
        return

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return original(self, name)

    __getattr__.__dict__["_pushmask_guard"] = True  # (a function attribute the checker accepts)
    cls.__getattr__ = __getattr__


_guard_llvmlite_against_vllm_kernel_scan()

__all__ = [
    "PushmaskBackend",
    "PushmaskGrammar",
    "register",
    "check_vllm_compatibility",
    "validate_pushmask_request",
    "ENV_ENABLE",
]

# A child of vLLM's "vllm" logger, so the messages come out in vLLM's format and stream.
logger = logging.getLogger("vllm.pushmask")

ENV_ENABLE = "PUSHMASK_VLLM"
ENV_MAX_WHITESPACE = "PUSHMASK_VLLM_MAX_WHITESPACE"
ENV_GRAMMAR_DRAFTS = "PUSHMASK_VLLM_GRAMMAR_DRAFTS"

# vLLM versions whose structured-output interfaces this module was checked against.  Another
# version still works when the signatures match (a warning is logged); it is refused when not.
TESTED_VLLM_VERSIONS = ("0.32.",)

# The abstract methods and parameter names of the vLLM base classes we implement.
_EXPECTED_SIGNATURES: dict[type, dict[str, tuple[str, ...]]] = {
    StructuredOutputBackend: {
        "compile_grammar": ("self", "request_type", "grammar_spec", "stop_token_ids"),
        "allocate_token_bitmask": ("self", "max_num_seqs"),
        "destroy": ("self",),
    },
    StructuredOutputGrammar: {
        "accept_tokens": ("self", "request_id", "tokens"),
        "validate_tokens": ("self", "tokens"),
        "rollback": ("self", "num_tokens"),
        "fill_bitmask": ("self", "bitmask", "batch_index"),
        "is_terminated": ("self",),
        "reset": ("self",),
    },
}
_EXPECTED_BACKEND_FIELDS = ("vllm_config", "tokenizer", "vocab_size")
_HANDLED_OPTIONS = {"JSON", "JSON_OBJECT", "REGEX", "GRAMMAR", "CHOICE", "STRUCTURAL_TAG"}

CACHE_LIMIT_BYTES = 1 << 30
"""The cap of the backend compiler's memory caches (compiled grammars by request, shared masks)."""
_REFUSED_ENTRIES = 128
"""Refused requests remembered per backend (with why), so a repeat goes to xgrammar at once."""


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _env_max_whitespace() -> int | None:
    raw = os.environ.get(ENV_MAX_WHITESPACE, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgumentError(f"{ENV_MAX_WHITESPACE} must be a non-negative integer, got {raw!r}") from None
    if value < 0:
        raise InvalidArgumentError(f"{ENV_MAX_WHITESPACE} must be a non-negative integer, got {raw!r}")
    return value


def _grammar_front_end(text: str) -> str:
    """ "ebnf" if the text defines a rule with `::=`, else "lark" (grammar_kind applies vLLM's own
    test, so GRAMMAR requests split the way they do for xgrammar; JSON text stays with Lark, as there)."""
    return "ebnf" if grammar_kind(text).kind == "ebnf" else "lark"


def _parse_spec(request_type: StructuredOutputOptions, grammar_spec: str) -> tuple[str, Any]:
    """Turn a vLLM (request type, spec) pair into (pushmask front end, argument)."""
    name = request_type.name
    if name == "JSON":
        schema = json.loads(grammar_spec) if isinstance(grammar_spec, str) else grammar_spec
        return "json_schema", schema
    if name == "JSON_OBJECT":
        return "json_schema", {"type": "object"}
    if name == "REGEX":
        return "regex", grammar_spec
    if name == "GRAMMAR":
        return _grammar_front_end(grammar_spec), grammar_spec
    if name == "CHOICE":
        choices = json.loads(grammar_spec) if isinstance(grammar_spec, str) else grammar_spec
        return "choice", choices
    if name == "STRUCTURAL_TAG":
        return "structural_tag", grammar_spec
    raise InvalidArgumentError(f"unsupported structured output request type {request_type!s}")


def _front_end_options(kind: str, compact: bool, max_whitespace: int | None) -> dict[str, Any]:
    """to_grammar options of a request: for JSON bodies (schemas, structural tags), xgrammar's
    defaults as vLLM calls it (JsonOptions.xgrammar: strict mode, no whitespace around the
    top-level value) with the backend's whitespace settings."""
    if kind not in ("json_schema", "structural_tag"):
        return {}
    return {"json_options": vllm_json_options(compact, max_whitespace)}


def vllm_json_options(compact: bool, max_whitespace: int | None) -> JsonOptions:
    """The JsonOptions of this backend: xgrammar's defaults, compact or flexible whitespace."""
    if compact:
        return JsonOptions.xgrammar(whitespace="compact")
    return JsonOptions.xgrammar(max_whitespace=max_whitespace)


def _resolve_any_token(token) -> int:
    """Request validation has no tokenizer: a token given by text passes (the engine resolves it)."""
    return token if isinstance(token, int) else 0


@dataclass
class PushmaskBackend(StructuredOutputBackend):
    """Engine-level backend: one GrammarCompiler (and its mask cache) for the model's tokenizer."""

    def __post_init__(self):
        from vllm.utils.mistral import is_mistral_tokenizer

        if is_mistral_tokenizer(self.tokenizer):
            raise InvalidArgumentError(
                "pushmask's vLLM backend reads Hugging Face tokenizers; start vLLM with "
                "--tokenizer-mode hf, or unset PUSHMASK_VLLM to use xgrammar with mistral-common"
            )
        config = self.vllm_config
        so_config = getattr(config, "structured_outputs_config", None)
        self.compact_json = bool(getattr(so_config, "disable_any_whitespace", False))
        self.max_whitespace = _env_max_whitespace()
        self.num_speculative_tokens = num_speculative_tokens(config)
        self.tokenizer_info = TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size)
        # it memoises compiled grammars by request (kind, spec, options), their masks included
        self.compiler = GrammarCompiler(self.tokenizer_info, cache_limit_bytes=CACHE_LIMIT_BYTES)
        self._xgrammar_lock = threading.Lock()
        self._xgrammar: StructuredOutputBackend | None = None  # built on the first refused request
        self._refused: BoundedCache[tuple[str, str], str] = BoundedCache(_REFUSED_ENTRIES)  # request -> why refused
        self._fallback_logged: set[str] = set()  # request types whose hand-over to xgrammar was logged
        logger.info(
            "pushmask backend ready: vocab_size=%d, stop tokens %s, %s JSON whitespace%s, rollback depth %d",
            self.vocab_size,
            list(self.tokenizer_info.stop_token_ids),
            "compact" if self.compact_json else "flexible",
            f" (runs capped at {self.max_whitespace})" if self.max_whitespace is not None else "",
            self.num_speculative_tokens,
        )

    def compile_grammar(
        self,
        request_type: StructuredOutputOptions,
        grammar_spec: str,
        stop_token_ids: set[int] | None = None,
    ) -> StructuredOutputGrammar:
        key = (request_type.name, grammar_spec)
        reason = self._refused.get(key)
        if reason is None:
            try:
                compiled = self._compiled_grammar(request_type, grammar_spec)
            except Exception as exc:  # any refusal (unsupported feature, budget) goes to xgrammar
                reason = f"{type(exc).__name__}: {exc}"
                self._refused.put(key, reason)
        if reason is not None:
            first = request_type.name not in self._fallback_logged
            self._fallback_logged.add(request_type.name)
            (logger.warning if first else logger.debug)(
                "pushmask cannot compile this %s request (%s); handing it to xgrammar%s",
                request_type.name,
                reason[:300],
                " (logged once per request type)" if first else "",
            )
            return self._xgrammar_backend().compile_grammar(request_type, grammar_spec, stop_token_ids)
        stops = sorted(int(t) for t in stop_token_ids) if stop_token_ids else None
        if stops is not None:
            stops = [t for t in stops if 0 <= t < self.vocab_size]  # ids the model cannot emit never stop it
        stops = stops or None
        budget = getattr(_CURRENT_REQUEST, "budget", None)
        if budget is None:
            matcher: GrammarMatcher | Callable[[], GrammarMatcher] = self._matcher(compiled, stops, None, request_type)
        else:  # built when the grammar starts (after the reasoning), with the tokens left then
            budget_table(compiled)  # the grammar's budget tables, here on the compile thread, not the engine's
            matcher = lambda: self._matcher(compiled, stops, budget.left(), request_type)  # noqa: E731
        # A request's stop ids may be ordinary text tokens (SamplingParams.stop_token_ids=[198]).
        vocab = self.tokenizer_info.decoded_vocab
        text_stops = [t for t in (stops or self.tokenizer_info.stop_token_ids) if vocab[t]]
        return PushmaskGrammar(matcher, text_stop_tokens=text_stops)

    def _matcher(
        self,
        compiled: CompiledGrammar,
        stops: list[int] | None,
        left: int | None,
        request_type: StructuredOutputOptions,
    ) -> GrammarMatcher:
        """A matcher for `left` tokens of output (None: unbounded); see integrations/token_budget.py."""
        matcher, unused = budgeted_matcher(
            compiled, left, override_stop_tokens=stops, max_rollback_tokens=self.num_speculative_tokens
        )
        if unused is not None:
            logger.warning(
                "pushmask: a %s request's budget of %d tokens is not used (%s)", request_type.name, left, unused[:300]
            )
        return matcher

    def _compiled_grammar(self, request_type: StructuredOutputOptions, grammar_spec: str) -> CompiledGrammar:
        """Compile, or reuse the CompiledGrammar of an identical earlier request (its masks included)."""
        kind, arg = _parse_spec(request_type, grammar_spec)
        started = time.perf_counter()
        compiled = self.compiler.compile(kind, arg, **_front_end_options(kind, self.compact_json, self.max_whitespace))
        logger.info(
            "pushmask has a %s request ready in %.1f ms (%d automaton states; compiled or memoised)",
            request_type.name,
            1000 * (time.perf_counter() - started),
            compiled.num_states,
        )
        return compiled

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        """int32 [max_num_seqs, ceil(vocab_size / 32)], every bit set (all tokens allowed)."""
        import torch

        return torch.full((max_num_seqs, math.ceil(self.vocab_size / 32)), -1, dtype=torch.int32)

    def _xgrammar_backend(self) -> StructuredOutputBackend:
        """vLLM's own xgrammar backend on the same config, tokenizer and vocabulary size (so its
        grammars fill the bitmask this backend allocates), built on first use."""
        with self._xgrammar_lock:
            if self._xgrammar is None:
                cls = _original_xgrammar()[0]
                self._xgrammar = cls(self.vllm_config, tokenizer=self.tokenizer, vocab_size=self.vocab_size)
            return self._xgrammar

    def destroy(self):
        self._refused.clear()
        with self._xgrammar_lock:
            if self._xgrammar is not None:
                self._xgrammar.destroy()
                self._xgrammar = None
        self.compiler.clear_cache()


# ---------------------------------------------------------------------------------------------
# Request validation (runs in vLLM's front end, before a request reaches the engine).


def validate_pushmask_request(sampling_params) -> None:
    """Replacement for vLLM's ``validate_xgrammar_grammar``: accept what pushmask compiles
    (including JSON Schema features xgrammar lacks) and, of the rest, what xgrammar accepts (the
    backend hands those requests to xgrammar); reject the others with a 400-style
    VLLMValidationError.  Only builds IR, never masks, so it is cheap."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import check_json_nesting

    params = sampling_params.structured_outputs
    if params is None:
        return
    if params.structural_tag:
        check_json_nesting(params.structural_tag, structural_tag=True)
        try:
            kind, arg = "structural_tag", json.loads(params.structural_tag)
        except json.JSONDecodeError as exc:
            raise VLLMValidationError("Invalid structural tag specification.") from exc
    elif params.regex is not None:
        if "\x00" in params.regex:
            raise InvalidArgumentError("structured_outputs.regex must not contain a NUL character ('\\x00')")
        kind, arg = "regex", params.regex
    elif params.choice is not None:
        kind, arg = "choice", params.choice
    elif params.json is not None:
        check_json_nesting(params.json)
        if isinstance(params.json, str):
            try:
                arg = json.loads(params.json)
            except json.JSONDecodeError as exc:
                raise VLLMValidationError("Invalid JSON grammar specification.") from exc
        else:
            arg = params.json
        kind = "json_schema"
    elif params.json_object:
        kind, arg = "json_schema", {"type": "object"}
    elif params.grammar is not None:
        kind = _grammar_front_end(params.grammar)
        arg = params.grammar
    else:
        return
    try:
        # Compact or flexible whitespace does not change whether a constraint compiles.  Token
        # terminals given by name pass in structural tags only (EBNF / Lark ones need the tokenizer).
        to_grammar(
            kind,
            arg,
            token_id=_resolve_any_token if kind == "structural_tag" else None,
            **_front_end_options(kind, compact=False, max_whitespace=_env_max_whitespace()),
        )
    except Exception as exc:  # every front-end error becomes a request error, never a crash
        try:
            _original_xgrammar()[1](sampling_params)
        except Exception as xgrammar_exc:  # xgrammar's refusals, undocumented: reported with pushmask's
            raise VLLMValidationError(
                f"pushmask cannot compile this {kind} constraint: {exc}; xgrammar neither: {xgrammar_exc}"
            ) from exc
        logger.warning("pushmask cannot compile this %s constraint (%s); xgrammar will serve it", kind, str(exc)[:300])


# ---------------------------------------------------------------------------------------------
# Activation.


def check_vllm_compatibility() -> list[str]:
    """Problems that make routing unsafe (empty when the installed vLLM matches); also warns
    about an untested but compatible version."""
    problems: list[str] = []
    for base, methods in _EXPECTED_SIGNATURES.items():
        abstract = set(getattr(base, "__abstractmethods__", ()))
        if abstract != set(methods):
            problems.append(f"{base.__name__} abstract methods are {sorted(abstract)}, expected {sorted(methods)}")
        for name, params in methods.items():
            func = getattr(base, name, None)
            if func is None:
                continue
            got = tuple(inspect.signature(func).parameters)
            if got != params:
                problems.append(f"{base.__name__}.{name}{got} differs from the expected {params}")
    got_fields = tuple(f.name for f in fields(StructuredOutputBackend))
    if got_fields != _EXPECTED_BACKEND_FIELDS:
        problems.append(f"StructuredOutputBackend fields {got_fields}, expected {_EXPECTED_BACKEND_FIELDS}")
    options = {o.name for o in StructuredOutputOptions}
    if not options <= _HANDLED_OPTIONS:
        problems.append(f"unknown StructuredOutputOptions {sorted(options - _HANDLED_OPTIONS)}")
    import vllm.v1.structured_output as so
    import vllm.v1.structured_output.backend_xgrammar as bx

    if not hasattr(so, "XgrammarBackend"):
        problems.append("vllm.v1.structured_output no longer names XgrammarBackend (where the backend is built)")
    if not hasattr(bx, "validate_xgrammar_grammar"):
        problems.append("vllm.v1.structured_output.backend_xgrammar has no validate_xgrammar_grammar")
    create = getattr(getattr(so, "StructuredOutputManager", None), "_create_grammar", None)
    if create is None or tuple(inspect.signature(create).parameters) != ("self", "request"):
        problems.append(
            "StructuredOutputManager._create_grammar(self, request) is gone (where the request's "
            "max_tokens reaches the matcher)"
        )
    return problems


_registered = False
_ORIGINAL_XGRAMMAR: tuple | None = None  # vLLM's (XgrammarBackend, validate_xgrammar_grammar)

# The request whose grammar this thread compiles: StructuredOutputManager._create_grammar (wrapped
# by register) holds its sampling parameters; compile_grammar's signature has no room for them.
_CURRENT_REQUEST = threading.local()


@dataclass
class _RequestBudget:
    """A request's max_tokens and what it has generated: the tokens left when its grammar starts."""

    max_tokens: int
    request: Any  # a weak reference to vLLM's Request

    def left(self) -> int | None:
        request = self.request()
        return None if request is None else max(0, self.max_tokens - int(request.num_output_tokens))


def _with_request_budget(create_grammar):
    """StructuredOutputManager._create_grammar, with the request's budget visible to compile_grammar."""
    import weakref

    def _create_grammar(self, request):
        params = getattr(request, "sampling_params", None)
        max_tokens = getattr(params, "max_tokens", None)
        _CURRENT_REQUEST.budget = None if max_tokens is None else _RequestBudget(int(max_tokens), weakref.ref(request))
        try:
            return create_grammar(self, request)
        finally:
            _CURRENT_REQUEST.budget = None

    _create_grammar._pushmask_budget = True
    return _create_grammar


def _original_xgrammar() -> tuple:
    """vLLM's own xgrammar backend class and request validator (the refused requests go there),
    as they were before register() routed their names to pushmask."""
    if _ORIGINAL_XGRAMMAR is not None:
        return _ORIGINAL_XGRAMMAR
    import vllm.v1.structured_output.backend_xgrammar as bx

    return bx.XgrammarBackend, bx.validate_xgrammar_grammar


def register() -> None:
    """The ``vllm.general_plugins`` entry point.  With PUSHMASK_VLLM=1, route vLLM's
    ``xgrammar`` backend to pushmask; otherwise do nothing.  Safe to call more than once."""
    global _registered, _ORIGINAL_XGRAMMAR
    if not _env_flag(ENV_ENABLE):
        return
    if _registered:
        return
    version = getattr(vllm, "__version__", "unknown")
    problems = check_vllm_compatibility()
    if problems:
        raise IncompatibleEnvironmentError(
            f"{ENV_ENABLE}=1 but vLLM {version} does not have the structured-output interfaces "
            "pushmask was written for: " + "; ".join(problems) + f". Unset {ENV_ENABLE} to use xgrammar."
        )
    if not version.startswith(TESTED_VLLM_VERSIONS):
        logger.warning(
            "pushmask was tested with vLLM %s; vLLM %s has matching interfaces, routing anyway",
            "/".join(v + "x" for v in TESTED_VLLM_VERSIONS),
            version,
        )
    import vllm.v1.structured_output as so
    import vllm.v1.structured_output.backend_xgrammar as bx

    # StructuredOutputManager.grammar_init builds `XgrammarBackend(...)` from its module globals;
    # the validator is imported from backend_xgrammar at each call site, inside functions.
    _ORIGINAL_XGRAMMAR = (bx.XgrammarBackend, bx.validate_xgrammar_grammar)
    manager = so.StructuredOutputManager
    if not getattr(manager._create_grammar, "_pushmask_budget", False):
        manager._create_grammar = _with_request_budget(manager._create_grammar)
    so.XgrammarBackend = PushmaskBackend
    bx.XgrammarBackend = PushmaskBackend
    bx.validate_xgrammar_grammar = validate_pushmask_request
    from .vllm_drafts import install_draft_masks

    install_draft_masks(so.StructuredOutputManager)  # speculative masks planned in one call
    from .vllm_batch import install_batch_fill

    install_batch_fill(so.StructuredOutputManager)  # a step's pushmask rows in one batch fill
    from vllm.v1.core.sched.scheduler import Scheduler

    from .vllm_grammar_drafts import install_grammar_drafts

    if os.environ.get(ENV_GRAMMAR_DRAFTS, "1").strip().lower() not in ("0", "false", "no", "off"):
        install_grammar_drafts(Scheduler)  # forced text as the next step's draft tokens
    _registered = True
    # WARNING, not INFO: plugins may load before vLLM configures its log level, and an opt-in
    # override of a backend name should be visible in every process's log.
    logger.warning(
        "pushmask: vLLM %s structured-output backend 'xgrammar' now routes to pushmask (%s=1)", version, ENV_ENABLE
    )


def is_registered() -> bool:
    """True once register() has routed the xgrammar backend to pushmask in this process."""
    return _registered
