"""Helpers for tests and debugging, under the names of xgrammar.testing that users call, so test
code written against xgrammar runs with `import pushmask.testing` in its place.

Bitmasks may be torch tensors or numpy arrays (int32, on the CPU); torch is needed only by the
functions that return tensors (bool_mask_to_bitmask, bitmask_to_bool_mask) when given tensors.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .core.errors import InvalidArgumentError, NotProvidedError
from .grammar.ir import Grammar
from .masks.bitmask import bitmask_to_bool, bool_to_bitmask
from .masks.compiler import CompiledGrammar, GrammarCompiler
from .masks.matcher import GrammarMatcher
from .masks.vocab import TokenizerInfo

# xgrammar.testing's names for XGrammar's internals (its EBNF printer, rule FSMs, converters):
# importing them works, so a test module that imports one still loads; calling one raises
# NotProvidedError, since pushmask compiles to its own IR rather than to XGrammar's EBNF text.
XGRAMMAR_INTERNALS = (
    "GrammarFunctor",
    "_generate_float_regex",
    "_generate_range_regex",
    "_get_allow_empty_rule_ids",
    "_is_rule_fsm_accept_string",
    "_json_schema_to_ebnf",
    "_print_grammar_fsms",
    "_regex_to_ebnf",
)

__all__ = [
    "_get_matcher_from_grammar",
    "_get_matcher_from_grammar_and_tokenizer_info",
    "_is_grammar_accept_string",
    "_get_masked_tokens_from_bitmask",
    "_is_single_token_bitmask",
    "_bool_mask_to_bitmask",
    "_ebnf_to_grammar_no_normalization",
    "_traverse_draft_tree",
    "bool_mask_to_bitmask",
    "bitmask_to_bool_mask",
    *XGRAMMAR_INTERNALS,
]


def _not_provided(name: str):
    def internal(*args: Any, **kwargs: Any) -> Any:
        raise NotProvidedError(
            f"pushmask.testing.{name} is XGrammar's internal, not provided: pushmask compiles to its own "
            "grammar IR, not XGrammar's EBNF text; test the language instead (_is_grammar_accept_string)"
        )

    internal.__name__ = name
    internal.__doc__ = f"XGrammar's internal {name}: raises NotProvidedError."
    return internal


globals().update({name: _not_provided(name) for name in XGRAMMAR_INTERNALS})


def _compile(grammar: str | Grammar | CompiledGrammar, tokenizer_info: TokenizerInfo) -> CompiledGrammar:
    """EBNF text, a pushmask Grammar (IR) or an already compiled grammar."""
    if isinstance(grammar, CompiledGrammar):
        return grammar
    compiler = GrammarCompiler(tokenizer_info, cache_enabled=False)
    return compiler.compile_ir(grammar) if isinstance(grammar, Grammar) else compiler.compile_grammar(grammar)


def _get_matcher_from_grammar_and_tokenizer_info(
    grammar: str | Grammar | CompiledGrammar, tokenizer_info: TokenizerInfo | None = None, **kwargs: Any
) -> GrammarMatcher:
    """A matcher for the grammar over tokenizer_info (default: an empty vocabulary, so the
    matcher takes strings only); kwargs go to GrammarMatcher."""
    if tokenizer_info is None:
        tokenizer_info = TokenizerInfo.from_vocab([], stop_token_ids=[])
    return GrammarMatcher(_compile(grammar, tokenizer_info), **kwargs)


def _get_matcher_from_grammar(grammar: str | Grammar | CompiledGrammar, **kwargs: Any) -> GrammarMatcher:
    """A string-only matcher (empty vocabulary) that ends without a stop token."""
    return _get_matcher_from_grammar_and_tokenizer_info(grammar, terminate_without_stop_token=True, **kwargs)


def _is_grammar_accept_string(
    grammar: str | Grammar | CompiledGrammar,
    input_str: str | bytes,
    *,
    debug_print: bool = False,
    print_time: bool = False,
    require_termination: bool = True,
) -> bool:
    """Whether the grammar's language holds input_str (require_termination=False: whether
    input_str is a prefix of a string of the language).  debug_print: XGrammar's keyword,
    accepted and ignored."""
    matcher = _get_matcher_from_grammar(grammar)
    start = time.monotonic_ns()
    accepted = matcher.accept_string(input_str)
    if print_time:
        print(f"Accepting {input_str!r}, result: {accepted}, time: {(time.monotonic_ns() - start) / 1e3} us")
    return accepted and (matcher.can_end() or not require_termination)


def _ebnf_to_grammar_no_normalization(ebnf_string: str, root_rule_name: str = "root") -> Grammar:
    """The EBNF text as grammar IR, before the normalizing passes (they run when it compiles)."""
    return Grammar.from_ebnf(ebnf_string, root_rule_name=root_rule_name)


def _traverse_draft_tree(
    retrieve_next_token, retrieve_next_sibling, draft_tokens, matcher: GrammarMatcher, bitmask, time_threshold=-1.0
) -> bool:
    """XGrammar's older spelling of `matcher.traverse_draft_tree(...)` (the matcher fourth)."""
    return matcher.traverse_draft_tree(
        retrieve_next_token, retrieve_next_sibling, draft_tokens, bitmask, time_threshold
    )


def _row_bits(bitmask, vocab_size: int, index: int) -> np.ndarray:
    rows = np.asarray(bitmask)
    if rows.ndim == 2:
        rows = rows[index]
    return bitmask_to_bool(rows, min(vocab_size, rows.shape[-1] * 32))


def _get_masked_tokens_from_bitmask(bitmask, vocab_size: int, index: int = 0) -> list[int]:
    """Ids below vocab_size whose bit in row `index` is 0 (the rejected tokens)."""
    return np.flatnonzero(~_row_bits(bitmask, vocab_size, index)).tolist()


def _is_single_token_bitmask(bitmask, vocab_size: int, index: int = 0) -> tuple[bool, int]:
    """(True, id) when row `index` allows exactly one token below vocab_size, else (False, -1)."""
    allowed = np.flatnonzero(_row_bits(bitmask, vocab_size, index))
    return (True, int(allowed[0])) if len(allowed) == 1 else (False, -1)


def bool_mask_to_bitmask(bool_mask):
    """Pack bools [batch, V] (True: allowed) into int32 words; bits past V are 1, as in
    xgrammar.  A torch tensor comes back for a torch tensor, numpy for anything else."""
    allowed = np.asarray(bool_mask, dtype=bool)
    if allowed.ndim != 2:
        raise InvalidArgumentError(f"bool_mask must be [batch, vocab], got shape {allowed.shape}")
    padded = np.ones((allowed.shape[0], -(-allowed.shape[1] // 32) * 32), dtype=bool)
    padded[:, : allowed.shape[1]] = allowed
    return _like(bool_mask, bool_to_bitmask(padded))


_bool_mask_to_bitmask = bool_mask_to_bitmask  # xgrammar's newer name


def bitmask_to_bool_mask(bit_mask, vocab_size: int | None = None):
    """Unpack int32 words [batch, words] into bools [batch, vocab_size] (default: 32 * words)."""
    words = np.asarray(bit_mask)
    if vocab_size is None:
        vocab_size = words.shape[-1] * 32
    return _like(bit_mask, bitmask_to_bool(words, vocab_size))


def _like(reference, array: np.ndarray):
    """`array` as a torch tensor when `reference` is one."""
    if type(reference).__module__.startswith("torch"):
        import torch

        return torch.from_numpy(np.ascontiguousarray(array))
    return array
