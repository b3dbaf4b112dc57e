"""pushmask: grammar-constrained decoding with pushdown automata and precomputed token masks.

The names mirror XGrammar's so users can switch::

    info = pushmask.TokenizerInfo.from_huggingface(tokenizer)
    compiled = pushmask.GrammarCompiler(info).compile_json_schema(schema)
    matcher = pushmask.GrammarMatcher(compiled)
    bitmask = pushmask.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    pushmask.apply_token_bitmask_inplace(logits, bitmask)
"""

from typing import Any

from .core.caches import cache_registry, clear_caches
from .core.errors import (
    ArgumentTypeError,
    BudgetTooSmallError,
    GrammarError,
    IncompatibleEnvironmentError,
    IndexOutOfRangeError,
    InternalError,
    InvalidArgumentError,
    InvalidDraftTreeError,
    InvalidJSONError,
    LimitExceededError,
    MatcherStateError,
    NotProvidedError,
    PushmaskError,
    SchemaError,
    UnsupportedSchemaError,
)
from .core.limits import Limits
from .core.recursion import get_max_recursion_depth, max_recursion_depth, set_max_recursion_depth
from .core.serialization import (
    DeserializeError,
    DeserializeFormatError,
    DeserializeVersionError,
    get_serialization_version,
)
from .grammar.ir import Grammar
from .grammar.json_options import JsonOptions
from .masks.batch_matcher import BatchGrammarMatcher
from .masks.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace, get_bitmask_shape, reset_token_bitmask
from .masks.compiler import CompiledGrammar, GrammarCompiler
from .masks.infill import Gap, Template, allowed_tokens, can_complete, find_completion
from .masks.matcher import GrammarMatcher, batch_fill_next_token_bitmask
from .masks.vocab import TokenizerInfo, VocabType
from .samplers.asap import ASApSampler, Sample, aligned_generate
from .samplers.infill_sampling import InfillResult, diffusion_generate, fill_in_the_middle

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

__all__ = [
    "ASApSampler",
    "BatchGrammarMatcher",
    "ArgumentTypeError",
    "Sample",
    "aligned_generate",
    "LimitExceededError",
    "BudgetTooSmallError",
    "CompiledGrammar",
    "DeserializeError",
    "DeserializeFormatError",
    "DeserializeVersionError",
    "Gap",
    "Grammar",
    "GrammarCompiler",
    "GrammarError",
    "GrammarMatcher",
    "IncompatibleEnvironmentError",
    "IndexOutOfRangeError",
    "InfillResult",
    "InternalError",
    "InvalidArgumentError",
    "InvalidDraftTreeError",
    "InvalidJSONError",
    "JsonOptions",
    "Limits",
    "MatcherStateError",
    "NotProvidedError",
    "PushmaskError",
    "SchemaError",
    "Template",
    "TokenizerInfo",
    "VocabType",
    "UnsupportedSchemaError",
    "allocate_token_bitmask",
    "allowed_tokens",
    "apply_token_bitmask_inplace",
    "batch_fill_next_token_bitmask",
    "cache_registry",
    "can_complete",
    "clear_caches",
    "diffusion_generate",
    "get_max_recursion_depth",
    "get_serialization_version",
    "max_recursion_depth",
    "set_max_recursion_depth",
    "fill_in_the_middle",
    "find_completion",
    "get_bitmask_shape",
    "load_default_model",
    "reset_token_bitmask",
]


_BUILTIN_STRUCTURAL_TAG_NAMES = (
    "get_builtin_structural_tag",
    "get_model_structural_tag",
    "normalize_tool_choice",
    "register_model_structural_tag",
)


def __getattr__(name: str) -> Any:
    """Lazy attributes: `pushmask.generate`, `pushmask.hf` and `pushmask.load_default_model` import
    torch/transformers on first use, `pushmask.tool_call_structural_tag` the JSON Schema front end,
    `pushmask.bitmask_dtype` torch, `pushmask.StructuralTag` / `StructuralTagItem` pydantic."""
    if name == "generate":
        from .integrations.generate import generate

        return generate
    if name == "load_default_model":
        from .integrations.models import load_default_model

        return load_default_model
    if name == "hf":
        from .integrations import transformers as hf

        return hf
    if name == "tool_call_structural_tag":
        from .grammar.tool_formats import tool_call_structural_tag

        return tool_call_structural_tag
    if name in ("StructuralTag", "StructuralTagItem", "structural_tag"):  # XGrammar's names
        import importlib

        module = importlib.import_module(".structural_tag", __name__)
        return module if name == "structural_tag" else getattr(module, name)
    if name in _BUILTIN_STRUCTURAL_TAG_NAMES:  # XGrammar's model structural tags (pydantic)
        from . import builtin_structural_tag

        return getattr(builtin_structural_tag, name)
    if name == "bitmask_dtype":  # xgrammar's name: the bitmask's element type
        from .masks.bitmask import _torch_installed

        if _torch_installed():
            import torch

            return torch.int32
        import numpy

        return numpy.int32
    raise AttributeError(f"module 'pushmask' has no attribute {name!r}")
