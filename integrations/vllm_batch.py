"""vLLM's batch step with pushmask's rows filled in one batch call.

Without speculative decoding, vLLM (0.32, StructuredOutputManager.grammar_bitmask) fills a step's
bitmask one ``fill_bitmask`` call per request (above 128 requests, in chunks of 16 on a small
thread pool), so pushmask's batch fill (masks/matcher.py) is never reached.  This wraps
grammar_bitmask: before vLLM's own code runs, the rows it is about to fill from pushmask grammars
are filled in one ``batch_fill_next_token_bitmask`` call, and each of those grammars remembers
its ready row.  vLLM's code then runs unchanged and still decides every row (rows of other
backends, terminated requests, requests still reasoning); a pushmask grammar asked to fill its
ready row leaves it as it is.  With speculative tokens the step is vllm_drafts.py's.
"""

from __future__ import annotations

import functools
import logging

from ..masks.matcher import batch_fill_next_token_bitmask
from .vllm_grammar import PushmaskGrammar

logger = logging.getLogger("vllm.pushmask")

__all__ = ["install_batch_fill", "fill_pushmask_rows", "wrap_grammar_bitmask"]


def wrap_grammar_bitmask(manager_cls, flag: str, prepare, release, fallback: str) -> bool:
    """Wrap manager_cls.grammar_bitmask (once per `flag`) so that `prepare(manager, requests, ids,
    spec_tokens)` runs before vLLM's own code and `release(grammar)` after it, on each grammar
    prepare returned; False when grammar_bitmask is not the method this was written for (a
    warning then says that `fallback` happens instead)."""
    original = getattr(manager_cls, "grammar_bitmask", None)
    if original is None or getattr(original, flag, False):
        return original is not None
    import inspect

    params = tuple(inspect.signature(original).parameters)
    if params != ("self", "requests", "structured_output_request_ids", "scheduled_spec_decode_tokens"):
        logger.warning(
            "pushmask: StructuredOutputManager.grammar_bitmask%s is not the expected signature; %s", params, fallback
        )
        return False

    @functools.wraps(original)
    def grammar_bitmask(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens):
        prepared = prepare(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens)
        try:
            return original(self, requests, structured_output_request_ids, scheduled_spec_decode_tokens)
        finally:
            for grammar in prepared:
                release(grammar)

    setattr(grammar_bitmask, flag, True)
    manager_cls.grammar_bitmask = grammar_bitmask
    return True


def install_batch_fill(manager_cls) -> bool:
    """Wrap manager_cls.grammar_bitmask (once); False when it is not the method this was written for."""
    return wrap_grammar_bitmask(
        manager_cls,
        "_pushmask_batch",
        lambda manager, requests, ids, spec_tokens: fill_pushmask_rows(manager, requests, ids),
        _forget_filled_row,
        "bitmask rows are filled one request at a time",
    )


def _forget_filled_row(grammar) -> None:
    grammar.filled_row = None


def fill_pushmask_rows(manager, requests, request_ids) -> list:
    """Fill, in one batch call, the row of every request vLLM's step will fill from a pushmask
    grammar (row k for request_ids[k], as vLLM numbers them without speculative tokens); the
    grammars whose row is ready.  Any failure leaves vLLM's row-by-row path to do the work."""
    if not request_ids or getattr(manager.vllm_config, "num_speculative_tokens", None):
        return []

    grammars, rows = [], []
    try:
        for index, req_id in enumerate(request_ids):
            request = requests[req_id]
            grammar = request.structured_output_request.grammar
            if not isinstance(grammar, PushmaskGrammar) or grammar.is_terminated():
                continue
            # vLLM fills the row only where the constraint starts at once (not while reasoning)
            if manager._get_constraint_bounds(request, ()).constraint_start == 0:
                grammars.append(grammar)
                rows.append(index)
        if not grammars:
            return []
        if manager._grammar_bitmask is None:  # vLLM's own allocation (grammar_bitmask's first step)
            manager._grammar_bitmask = manager.backend.allocate_token_bitmask(
                manager.vllm_config.scheduler_config.max_num_seqs
            )
        bitmask = manager._grammar_bitmask
        # threads: the backend compiler's max_threads ("auto": half the CPUs, at most 8, the size
        # vLLM gives its own fill pool; PUSHMASK_MAX_THREADS sets it)
        batch_fill_next_token_bitmask([g.matcher for g in grammars], bitmask, rows)
        for grammar, row in zip(grammars, rows):
            grammar.clear_text_stops(bitmask, row)
    except Exception:  # noqa: BLE001 -- vLLM's row-by-row path is always there
        logger.exception("pushmask: filling the step's rows in one call failed; filling them one by one")
        return []
    for grammar, row in zip(grammars, rows):
        grammar.filled_row = (bitmask, row)
    return grammars
