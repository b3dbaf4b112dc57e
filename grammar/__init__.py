"""Grammar front ends (EBNF/GBNF, Lark, regex, JSON Schema) and the IR passes; text in, grammar IR out."""

from ..core.errors import GrammarError, LimitExceededError, PushmaskError, SchemaError, UnsupportedSchemaError
from .ir import Grammar

__all__ = [
    "LimitExceededError",
    "Grammar",
    "GrammarError",
    "PushmaskError",
    "SchemaError",
    "UnsupportedSchemaError",
]
