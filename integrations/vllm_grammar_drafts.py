"""vLLM: the grammar's forced text as a request's draft tokens.

Where a grammar leaves one way on (``{"name": "`` after ``{``, a key, a closing tail), the next
tokens are known before the model runs.  With speculative decoding on, vLLM (0.32) keeps a
request's drafts for the next step in the scheduler: after each step,
``Scheduler.update_draft_token_ids`` stores the proposer's drafts, validated by the grammar, as
``request.spec_token_ids``, and the next step schedules exactly those tokens, fills their mask
rows and has the model verify them.  This wraps that method: after vLLM's own code, a pushmask
request whose grammar forces text gets the tokenizer's canonical tokens for it
(fast_forward.py, appended after what was generated) as its drafts, instead of the proposer's --
unless the proposer's drafts already start with them.  The verifier then accepts a forced token
only where the model, under the mask, picks it, as for any draft: the outputs never change.

The drafts are replaced in the scheduler's own process (where the grammars live) before the
step that uses them is scheduled, so the rows vLLM fills and the tokens the model verifies are
the same tokens.  Async scheduling schedules drafts before they are known and only filters them
(``update_draft_token_ids_in_output``); it is off with the n-gram and custom-class methods, and
there nothing is replaced.

Without a draft model, ``method="custom_class"`` with :class:`NoDrafts` makes the grammar the
only drafter (``GRAMMAR_ONLY_SPECULATIVE_CONFIG``).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Sequence

from .fast_forward import canonical_fast_forward
from .vllm_grammar import PushmaskGrammar

logger = logging.getLogger("vllm.pushmask")

__all__ = ["install_grammar_drafts", "grammar_drafts", "merge_drafts", "NoDrafts", "GRAMMAR_ONLY_SPECULATIVE_CONFIG"]

GRAMMAR_ONLY_SPECULATIVE_CONFIG = {
    "method": "custom_class",
    "model": "pushmask.integrations.vllm_grammar_drafts.NoDrafts",
    "num_speculative_tokens": 4,
}
"""vLLM's speculative_config for grammar drafts alone: no draft model, no n-gram lookup."""


class NoDrafts:
    """A vLLM custom-class proposer that proposes nothing: with it, the only drafts are the
    grammar's forced tokens, put in by the scheduler (install_grammar_drafts)."""

    def __init__(self, vllm_config) -> None:
        self.vllm_config = vllm_config

    def propose(self, sampled_token_ids: Sequence, *args, **kwargs) -> list[list[int]]:
        return [[] for _ in sampled_token_ids]

    def load_model(self, *args, **kwargs) -> None:
        """Nothing to load: vLLM calls this on every drafter."""


def install_grammar_drafts(scheduler_cls) -> bool:
    """Wrap scheduler_cls.update_draft_token_ids (once) so that pushmask requests whose grammar
    forces text draft its tokens; False, with a warning, when the method is not the one this was
    written for (the drafts are then the proposer's alone, as without pushmask)."""
    original = getattr(scheduler_cls, "update_draft_token_ids", None)
    if original is None or getattr(original, "_pushmask_grammar_drafts", False):
        return original is not None
    params = tuple(inspect.signature(original).parameters)
    if params != ("self", "draft_token_ids"):
        logger.warning(
            "pushmask: Scheduler.update_draft_token_ids%s is not the expected signature; "
            "forced text is not drafted (the proposer's drafts are used as they are)",
            params,
        )
        return False

    @functools.wraps(original)
    def update_draft_token_ids(self, draft_token_ids) -> None:
        original(self, draft_token_ids)
        try:
            _draft_forced_text(self, draft_token_ids.req_ids)
        except Exception:  # noqa: BLE001 -- the proposer's drafts stand; outputs never depend on drafts
            logger.exception("pushmask: drafting forced text failed; keeping the proposer's drafts")

    update_draft_token_ids._pushmask_grammar_drafts = True  # type: ignore[attr-defined]
    scheduler_cls.update_draft_token_ids = update_draft_token_ids
    return True


def _draft_forced_text(scheduler, request_ids: Sequence[str]) -> None:
    """Give each listed pushmask request whose grammar forces text that text's tokens as drafts."""

    manager = scheduler.structured_output_manager
    limit = int(getattr(scheduler, "num_spec_tokens", 0) or 0)
    for req_id in request_ids:
        request = scheduler.requests.get(req_id)
        if request is None or request.is_finished() or request.is_prefill_chunk or not request.use_structured_output:
            continue
        grammar = request.structured_output_request.grammar
        if not isinstance(grammar, PushmaskGrammar) or grammar.is_terminated():
            continue
        if manager._get_constraint_bounds(request, ())[0] != 0:
            continue  # still reasoning: the grammar has not started
        forced = grammar_drafts(grammar, manager.backend.tokenizer, request.output_token_ids, limit)
        request.spec_token_ids = merge_drafts(list(request.spec_token_ids), forced)


def grammar_drafts(grammar, tokenizer, generated: Sequence[int], limit: int) -> list[int]:
    """At most `limit` tokens the grammar takes from here that spell the text it forces: the
    tokenizer's tokens for it as appended after the last generated token; [] when nothing is
    forced."""
    text = grammar.forced_text()
    if not text or limit <= 0:
        return []
    info = grammar.matcher.compiled_grammar.tokenizer_info
    # max_back=0: drafts can only follow what was generated, never re-spell it
    _, tokens = canonical_fast_forward(tokenizer, info, list(generated[-1:]), text, max_back=0)
    return grammar.validate_tokens(tokens[:limit])


def merge_drafts(proposed: list[int], forced: list[int]) -> list[int]:
    """The drafts for the next step: the forced tokens, unless the proposer's drafts start with
    them (they agree, and may go further); the proposer's where nothing is forced."""
    if not forced or proposed[: len(forced)] == forced:
        return proposed
    return forced
