"""pushmask as an SGLang grammar backend.

SGLang (checked against 0.5.23) builds the backend named by ``--grammar-backend`` through
``GRAMMAR_BACKEND_REGISTRY``, which third parties fill with ``register_grammar_backend``; its
general plugins (the ``sglang.srt.plugins`` entry point group, run in every SGLang process) are
where that call belongs.  pushmask's entry point runs :func:`register`, so after
``pip install pushmask`` this selects it::

    python -m sglang.launch_server --model-path MODEL --grammar-backend pushmask

JSON schemas, regexes, EBNF requests and structural tags (XGrammar's documents, the legacy
``structures`` form included) are compiled by pushmask.  With ``--reasoning-parser`` the backend
is wrapped in SGLang's ReasonerGrammarBackend, as SGLang does for its built-in backends: generation
is free until the end of the thinking, then constrained (answer frames included).  The request's
``max_new_tokens`` reaches the matcher as a token budget counted from where the grammar starts
(integrations/token_budget.py), so the answer finishes within what the thinking left.
``--constrained-json-disable-any-whitespace`` and ``--constrained-json-max-whitespace-cnt`` keep
their meaning (xgrammar's any_whitespace / max_whitespace_cnt).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Callable, List, Optional, Tuple

try:
    import torch
    from sglang.srt.constrained.base_grammar_backend import (
        BaseGrammarBackend,
        BaseGrammarObject,
        GrammarStats,
        InvalidGrammarObject,
        register_grammar_backend,
    )
except ImportError as exc:  # pragma: no cover - only without SGLang
    raise ImportError(
        f"pushmask.integrations.sglang needs SGLang (tested with 0.5.23); importing it failed: {exc}"
    ) from exc

from ..core.errors import InvalidArgumentError, PushmaskError
from ..grammar.json_options import JsonOptions
from ..grammar.structural_tag import root_format
from ..masks.bitmask import apply_token_bitmask_inplace, get_bitmask_shape
from ..masks.compiler import CompiledGrammar, GrammarCompiler
from ..masks.matcher import GrammarMatcher, batch_fill_next_token_bitmask
from ..masks.vocab import TokenizerInfo
from .token_budget import budgeted_matcher

__all__ = ["BACKEND_NAME", "PushmaskGrammar", "PushmaskGrammarBackend", "register"]

logger = logging.getLogger(__name__)

BACKEND_NAME = "pushmask"
MAX_ROLLBACK_TOKENS = 200  # as SGLang's xgrammar backend (speculative decoding rolls back drafts)


def move_vocab_mask(vocab_mask: torch.Tensor, device) -> torch.Tensor:
    return vocab_mask.to(device, non_blocking=True)


def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
    """-inf where the bitmask forbids (pushmask's kernels: Triton on CUDA, numba on the CPU)."""
    apply_token_bitmask_inplace(logits, vocab_mask)


class PushmaskGrammar(BaseGrammarObject):
    """One request's grammar state: a pushmask matcher behind SGLang's grammar-object methods."""

    def __init__(
        self, compiled: CompiledGrammar, key_string: str, grammar_stats: GrammarStats | None = None, kind: str = "json"
    ):
        super().__init__()
        self.compiled = compiled
        self.key_string = key_string
        self.grammar_stats = grammar_stats
        self.kind = kind  # how key_string reads (compile_framed_grammar embeds it)
        self._matcher: GrammarMatcher | None = None
        self._budget: Tuple[int, Callable[[], int]] | None = (
            None  # (max_new_tokens, tokens generated so far), set by set_token_budget
        )

    @property
    def matcher(self) -> GrammarMatcher:
        """Built on first use, so that a budget counts the tokens left when the grammar starts
        (after the reasoning, under SGLang's reasoner wrapper)."""
        if self._matcher is None:
            left = None
            if self._budget is not None:
                max_new_tokens, generated = self._budget
                left = max(0, int(max_new_tokens) - int(generated()))
            self._matcher, unused = budgeted_matcher(self.compiled, left, max_rollback_tokens=MAX_ROLLBACK_TOKENS)
            if unused is not None:
                logger.warning(
                    "pushmask: a budget of %d tokens is not used for %r (%s)", left, self.key_string[:80], unused[:300]
                )
        return self._matcher

    def set_token_budget(self, max_new_tokens: int, generated: Callable[[], int]) -> None:
        """Budget the output: at most max_new_tokens in all, generated() of them already spent
        when the grammar starts.  Only before the grammar is used."""
        if self._matcher is None:
            self._budget = (max_new_tokens, generated)

    def accept_token(self, token: int) -> None:
        """Advance on a sampled token; SGLang treats a refused token as an error (ValueError)."""
        if self.is_terminated():
            return
        self.current_token = token
        if not self.matcher.accept_token(token):
            raise InvalidArgumentError(f"token {token} is not allowed by the grammar {self.key_string[:200]!r}")

    def rollback(self, k: int) -> None:
        self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device) -> torch.Tensor:
        return PushmaskGrammarBackend.allocate_vocab_mask(vocab_size, batch_size, device)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_next_token_bitmask(vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries, vocab_mask: torch.Tensor) -> None:
        """Fill each entry's row, the rows spread over at most the compiler's `max_threads` threads
        (PUSHMASK_MAX_THREADS, else half the cores, at most 8; the fill kernel frees the GIL)."""
        if entries:
            batch_fill_next_token_bitmask(
                [e.grammar.matcher for e in entries], vocab_mask, indices=[e.row for e in entries]
            )

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    move_vocab_mask = staticmethod(move_vocab_mask)
    apply_vocab_mask = staticmethod(apply_vocab_mask)

    def copy(self) -> PushmaskGrammar:
        """A fresh state of the same compiled grammar (SGLang copies its cached grammars)."""
        stats = self.grammar_stats
        if stats is not None:
            stats = dataclasses.replace(stats, is_cache_hit=True, tree_traversal_time=[])
        return PushmaskGrammar(self.compiled, self.key_string, stats, self.kind)

    def try_jump_forward(self, tokenizer) -> Optional[Tuple[List[int], str]]:
        forced = self.matcher.find_jump_forward_string()
        return ([], forced) if forced else None

    def jump_forward_str_state(self, helper: Tuple[List[int], str]) -> Tuple[str, int]:
        return helper[1], -1

    def jump_and_retokenize(self, old_output_ids: List[int], new_output_ids: List[int], next_state: int) -> None:
        """Follow SGLang's retokenized output: roll back to where it differs, then accept the rest."""
        same = 0
        for old, new in zip(old_output_ids, new_output_ids):
            if old != new:
                break
            same += 1
        if same < len(old_output_ids):
            self.matcher.rollback(len(old_output_ids) - same)
        for token in new_output_ids[same:]:
            if not self.matcher.accept_token(token):
                raise InvalidArgumentError(f"retokenized output: token {token} is not allowed by the grammar")

    def __repr__(self) -> str:
        return f"PushmaskGrammar(key={self.key_string[:60]!r})"


class PushmaskGrammarBackend(BaseGrammarBackend):
    """Compiles SGLang's grammar requests with one pushmask compiler (its masks are shared; its
    caches bounded by the compiler's default cache_limit_bytes, so a long-running server stops
    growing)."""

    def __init__(
        self,
        tokenizer,
        vocab_size: int,
        model_eos_token_ids: Optional[List[int]] = None,
        any_whitespace: bool = True,
        max_whitespace_cnt: Optional[int] = None,
    ):
        super().__init__()
        info = TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(model_eos_token_ids) if model_eos_token_ids else None
        )
        self.compiler = GrammarCompiler(info)
        self.vocab_size = vocab_size
        self.any_whitespace = any_whitespace
        self.max_whitespace_cnt = max_whitespace_cnt
        # xgrammar's defaults with SGLang's two JSON flags, as SGLang's xgrammar backend has them
        self.json_options = JsonOptions.from_xgrammar(
            any_whitespace=any_whitespace, max_whitespace_cnt=max_whitespace_cnt, base=JsonOptions.xgrammar()
        )

    def _grammar(self, kind: str, key_string: str, compile_) -> BaseGrammarObject:
        try:
            compiled = compile_()
        except (PushmaskError, ValueError, TypeError, RecursionError) as exc:
            logger.error("pushmask refused the %s grammar %r: %s", kind, key_string[:200], exc)
            return InvalidGrammarObject(str(exc))
        return PushmaskGrammar(compiled, key_string, GrammarStats(dispatch_type=kind), kind)

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        if key_string == "$$ANY$$":  # SGLang's "any JSON value" (response_format json_object)
            return self._grammar("json", key_string, self.compiler.compile_builtin_json_grammar)
        return self._grammar(
            "json", key_string, lambda: self.compiler.compile_json_schema(json.loads(key_string), self.json_options)
        )

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        return self._grammar("regex", key_string, lambda: self.compiler.compile_regex(key_string))

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        return self._grammar("ebnf", key_string, lambda: self.compiler.compile_grammar(key_string))

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        """XGrammar's structural tag (SGLang's legacy ``structures`` form keeps its at_least_one)."""
        return self._grammar(
            "structural_tag",
            key_string,
            lambda: self.compiler.compile_structural_tag(key_string, options=self.json_options),
        )

    def compile_framed_grammar(self, grammar: BaseGrammarObject, frame) -> Optional[BaseGrammarObject]:
        """frame(content): a structural tag embedding the request's grammar as its content
        (SGLang's answer frames of reasoning formats)."""
        if not isinstance(grammar, PushmaskGrammar):
            return None
        content = _as_format(grammar.kind, grammar.key_string)
        if content is None:
            return None
        key = json.dumps(frame(content))
        return self.dispatch_structural_tag(key)

    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device) -> torch.Tensor:
        return torch.full(get_bitmask_shape(batch_size, vocab_size), -1, dtype=torch.int32)

    move_vocab_mask = staticmethod(move_vocab_mask)
    apply_vocab_mask = staticmethod(apply_vocab_mask)

    def reset(self) -> None:
        super().reset()
        self.compiler.clear_cache()


def _as_format(kind: str, key_string: str) -> dict | None:
    """A grammar request as a structural-tag format (None: not expressible, e.g. $$ANY$$)."""
    if kind == "json":
        return None if key_string == "$$ANY$$" else {"type": "json_schema", "json_schema": json.loads(key_string)}
    if kind == "regex":
        return {"type": "regex", "pattern": key_string}
    if kind == "ebnf":
        return {"type": "grammar", "grammar": key_string}
    if kind == "structural_tag":
        return root_format(key_string)
    return None


def create_backend(server_args, tokenizer, vocab_size: int, eos_token_ids=None):
    """What SGLang's create_grammar_backend calls for ``--grammar-backend pushmask``: the backend,
    wrapped in SGLang's ReasonerGrammarBackend when the server has a reasoning parser (SGLang
    wraps only its built-in backends itself)."""
    backend = PushmaskGrammarBackend(
        tokenizer,
        vocab_size,
        sorted(eos_token_ids) if eos_token_ids else None,
        any_whitespace=not getattr(server_args, "constrained_json_disable_any_whitespace", False),
        max_whitespace_cnt=getattr(server_args, "constrained_json_max_whitespace_cnt", None),
    )
    reasoning_parser = getattr(server_args, "reasoning_parser", None)
    if not reasoning_parser:
        return backend
    from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend
    from sglang.srt.parser.reasoning_parser import ReasoningParser

    parser = ReasoningParser(model_type=reasoning_parser, stream_reasoning=False, tokenizer=tokenizer)
    return ReasonerGrammarBackend(
        backend, parser, tokenizer, enable_strict_thinking=bool(getattr(server_args, "enable_strict_thinking", False))
    )


def _pushmask_grammar(grammar) -> PushmaskGrammar | None:
    """The PushmaskGrammar of a request's grammar object (under SGLang's reasoner wrapper too)."""
    inner = getattr(grammar, "grammar", None)
    return grammar if isinstance(grammar, PushmaskGrammar) else inner if isinstance(inner, PushmaskGrammar) else None


def _with_token_budget(apply_config):
    """GrammarManager._apply_request_reasoning_config (run for every request once its grammar is
    assigned), then the request's max_new_tokens handed to its pushmask grammar."""

    def _apply_request_reasoning_config(self, req) -> None:
        apply_config(self, req)
        grammar = _pushmask_grammar(getattr(req, "grammar", None))
        max_new_tokens = getattr(getattr(req, "sampling_params", None), "max_new_tokens", None)
        if grammar is not None and max_new_tokens is not None:
            grammar.set_token_budget(max_new_tokens, lambda: len(req.output_ids))

    _apply_request_reasoning_config._pushmask_budget = True
    return _apply_request_reasoning_config


def register() -> None:
    """Register the ``pushmask`` grammar backend and make ``--grammar-backend pushmask`` a valid choice."""
    register_grammar_backend(BACKEND_NAME, create_backend)
    try:
        from sglang.srt.constrained.grammar_manager import GrammarManager
    except ImportError:  # pragma: no cover - an SGLang without the grammar manager: no token budget
        GrammarManager = None
    apply_config = getattr(GrammarManager, "_apply_request_reasoning_config", None)
    if apply_config is not None and not getattr(apply_config, "_pushmask_budget", False):
        GrammarManager._apply_request_reasoning_config = _with_token_budget(apply_config)
    try:
        from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices
    except ImportError:  # older SGLang: the registry alone (the name must then pass its own checks)
        return
    if BACKEND_NAME not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices([BACKEND_NAME])
