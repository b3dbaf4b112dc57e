"""Grammar front ends (EBNF/GBNF, Lark, regex, JSON Schema) and the IR passes; text in, grammar IR out."""

from .errors import BudgetExceededError, GrammarError, PushmaskError, SchemaError, UnsupportedSchemaError
from .ir import Grammar

__all__ = [
    "BudgetExceededError",
    "Grammar",
    "GrammarError",
    "PushmaskError",
    "SchemaError",
    "UnsupportedSchemaError",
]
