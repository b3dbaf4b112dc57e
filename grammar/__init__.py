"""Grammar front ends (EBNF/GBNF, Lark, regex, JSON Schema) and the IR passes; text in, grammar IR out."""

from ..core.errors import GrammarError, LimitExceededError, PushmaskError, SchemaError, UnsupportedSchemaError
from . import grammar_api  # noqa: F401  (sets XGrammar's constructors on Grammar: see there)
from .ir import Grammar

__all__ = [
    "LimitExceededError",
    "Grammar",
    "GrammarError",
    "PushmaskError",
    "SchemaError",
    "UnsupportedSchemaError",
]
