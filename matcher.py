"""XGrammar's `xgrammar.matcher` module: the matcher and the token-bitmask helpers, under the
names XGrammar's users import from it (masks/matcher.py, masks/batch_matcher.py, masks/bitmask.py)."""

from .masks.batch_matcher import BatchGrammarMatcher
from .masks.bitmask import allocate_token_bitmask, apply_token_bitmask_inplace, get_bitmask_shape, reset_token_bitmask
from .masks.matcher import GrammarMatcher

__all__ = [
    "BatchGrammarMatcher",
    "GrammarMatcher",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "get_bitmask_shape",
    "reset_token_bitmask",
]
