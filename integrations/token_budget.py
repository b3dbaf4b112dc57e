"""A server request's token budget as the matcher takes it (vLLM and SGLang share the policy).

Servers count the stop token among a request's max_tokens; the matcher's budget does not.  So
the matcher gets one token less where the grammar can finish in it (the request then ends on its
stop token, "stop" and not "length"), else all of them (the text still ends complete, the stop
token is cut); a budget the grammar cannot finish in at all is not used, and the caller says so.
"""

from __future__ import annotations

from ..core.errors import BudgetTooSmallError
from ..masks.compiler import CompiledGrammar
from ..masks.matcher import GrammarMatcher


def budgeted_matcher(compiled: CompiledGrammar, left: int | None, **options) -> tuple[GrammarMatcher, str | None]:
    """(a matcher for `left` tokens of output, None if unbounded; why the budget is not used,
    or None).  `options` go to GrammarMatcher."""
    reason = None
    for max_tokens in [] if left is None else [left - 1, left]:
        if max_tokens < 0:
            reason = "no tokens left"
            continue
        try:
            return GrammarMatcher(compiled, max_tokens=max_tokens, **options), None
        except (BudgetTooSmallError, ValueError) as exc:  # too small, or not supported for this grammar
            reason = str(exc)
    return GrammarMatcher(compiled, **options), reason
