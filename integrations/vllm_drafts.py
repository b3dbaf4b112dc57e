"""vLLM's speculative decoding with pushmask's draft masks in one call.

With speculative decoding, vLLM (0.32, StructuredOutputManager.grammar_bitmask) walks each
request's draft tokens: fill the row before the token, accept it, ..., fill the bonus row, then
roll the grammar back -- an accept, a fill and a rollback per draft token, one request after the
other.  This wraps grammar_bitmask so that, before vLLM's walk, the drafts of every pushmask
request are planned in one batch call (masks/draft.py): each node's state once, every row's
mask in one batch fill.  vLLM's walk then runs unchanged; the grammar copies a planned row when
its matcher stands at a planned state and advances over a planned token by taking the state
computed for it, so anything vLLM decides differently (reasoning bounds, a rejected draft) falls
back to the ordinary fill and accept.  The plans are dropped when grammar_bitmask returns.
"""

from __future__ import annotations

import logging

import numpy as np

from ..masks.draft import batch_fill_draft_bitmasks
from .vllm_batch import wrap_grammar_bitmask
from .vllm_grammar import PushmaskGrammar

logger = logging.getLogger("vllm.pushmask")

__all__ = ["install_draft_masks", "plan_drafts"]


def install_draft_masks(manager_cls) -> bool:
    """Wrap manager_cls.grammar_bitmask (once); False when it is not the method this was written for."""
    return wrap_grammar_bitmask(
        manager_cls, "_pushmask_drafts", plan_drafts, _forget_drafts, "speculative masks are filled step by step"
    )


def _forget_drafts(grammar) -> None:
    grammar.drafts = None


def plan_drafts(manager, requests, request_ids, scheduled_spec_decode_tokens) -> list:
    """Plan the draft masks of every pushmask request of a speculative step in one batch call;
    the grammars that got a plan.  Any failure leaves vLLM's step-by-step path to do the work."""
    if not getattr(manager.vllm_config, "num_speculative_tokens", 0):
        return []  # without speculative decoding vLLM fills one row per request: nothing to plan
    from vllm.v1.structured_output.utils import strip_speculative_padding

    grammars, drafts = [], []
    try:
        for req_id in request_ids:
            request = requests.get(req_id)
            structured = getattr(request, "structured_output_request", None)
            grammar = getattr(structured, "grammar", None)
            if not isinstance(grammar, PushmaskGrammar) or grammar.is_terminated():
                continue
            # A request without drafts this step still gets its (bonus) row from the batch call.
            tokens = strip_speculative_padding(list(scheduled_spec_decode_tokens.get(req_id) or ()))
            bounds = getattr(manager, "_get_constraint_bounds", None)
            start = bounds(request, tokens)[0] if bounds is not None else 0  # tokens before it are not the grammar's
            if start <= len(tokens):
                grammars.append(grammar)
                drafts.append(tokens[start:])
        if not grammars:
            return []
        words = max(g.matcher._words for g in grammars)
        rows = np.zeros((sum(len(d) + 1 for d in drafts), words), dtype=np.int32)
        results = batch_fill_draft_bitmasks([g.matcher for g in grammars], drafts, rows)
    except Exception:  # noqa: BLE001 -- the step-by-step path is always there
        logger.exception("pushmask: planning draft masks failed; filling them step by step")
        return []
    for grammar, result in zip(grammars, results):
        grammar.drafts = result
        grammar.draft_rows = rows
    return grammars
