"""XGrammar's `xgrammar.tokenizer_info` module: TokenizerInfo, VocabType, and the 256 characters
of the byte-level (GPT-2) alphabet as `_BYTE_LEVEL_CHARSET`."""

from .masks.vocab import _ALPHABET as _BYTE_LEVEL_CHARSET
from .masks.vocab import TokenizerInfo, VocabType

__all__ = ["TokenizerInfo", "VocabType", "_BYTE_LEVEL_CHARSET"]
