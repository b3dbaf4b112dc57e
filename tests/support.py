"""Shared test helpers: the real tokenizers from ../shared, loaded once per test session.

A plain module (not conftest) so tests can import it unambiguously: tests/vllm has a conftest too."""

from __future__ import annotations

import functools
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PUSHMASK_SHARED", REPO.parent / "shared"))
TOKENIZERS = SHARED / "tokenizers"
DATA = SHARED / "data"
TOKENIZER_NAMES = ("llama3", "qwen", "mistral", "smollm2")


@functools.lru_cache(maxsize=None)
def hf_tokenizer(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZERS / name))


@functools.lru_cache(maxsize=None)
def tokenizer_info(name: str):
    import pushmask

    return pushmask.TokenizerInfo.from_huggingface(hf_tokenizer(name))


@functools.lru_cache(maxsize=None)
def grammar_compiler(name: str):
    """One compiler per tokenizer for the whole session, so tests share the mask cache like users do."""
    import pushmask

    return pushmask.GrammarCompiler(tokenizer_info(name))


def accepts_text(compiled, text: str | bytes) -> bool:
    """Is `text` a complete string of the compiled grammar (fed as one string)?"""
    import pushmask

    matcher = pushmask.GrammarMatcher(compiled)
    return matcher.accept_string(text) and matcher.can_end()


def accepts_token_ids(compiled, token_ids) -> bool:
    """Is this token sequence a complete string of the compiled grammar (fed token by token)?"""
    import pushmask

    matcher = pushmask.GrammarMatcher(compiled)
    return all(matcher.accept_token(t) for t in token_ids) and matcher.can_end()


_EDGE_CACHE: dict = {}


def edges_by_state(fsm) -> dict:
    """A CharFsm's transitions grouped by source state (for the brute-force IR matchers);
    only the latest automaton is kept, keyed by identity."""
    key = id(fsm)
    if key not in _EDGE_CACHE or _EDGE_CACHE[key][0] is not fsm:
        by_state: dict = {}
        for s, lo, hi, t in fsm.transitions:
            by_state.setdefault(s, []).append((lo, hi, t))
        _EDGE_CACHE.clear()
        _EDGE_CACHE[key] = (fsm, by_state)
    return _EDGE_CACHE[key][1]
