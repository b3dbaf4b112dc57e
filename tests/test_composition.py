"""Features meeting each other: value checks inside infilling and under token budgets, the
rollback window, and a matrix of grammar kinds x matcher features, each cell against an
independent oracle (lark, json.loads + jsonschema, re.fullmatch, brute force over a byte
vocabulary) or asserting the documented refusal."""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest

import pushmask as pm
from pushmask.masks.infill import InfillValueChecksError

BYTE_VOCAB = [bytes([b]) for b in range(32, 127)] + [b"</s>"]
STOP = 95
UNIQUE_STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


@pytest.fixture(scope="module")
def byte_compiler():
    return pm.GrammarCompiler(pm.TokenizerInfo.from_vocab(BYTE_VOCAB, "raw", stop_token_ids=[STOP]))


def token_of(text: str) -> list[int]:
    return [BYTE_VOCAB.index(bytes([b])) for b in text.encode()]


# -- value checks inside infilling: refused, never a wrong "yes" -------------------------------


def test_infilling_refuses_value_checks(byte_compiler):
    compiled = byte_compiler.compile_json_schema(UNIQUE_STRINGS)
    assert not pm.GrammarMatcher(compiled).accept_string('["a", "a"]')
    calls = [
        lambda: pm.can_complete(compiled, ['["a", "a"]'], []),
        lambda: pm.find_completion(compiled, ['["a", ', '"a"]'], [pm.Gap.bytes(0)]),
        lambda: pm.allowed_tokens(compiled, pm.Template(['["a", ', pm.Gap.bytes(3), "]"]), 1),
        lambda: pm.can_complete(pm.GrammarMatcher(compiled), ['"a"]'], []),
        lambda: pm.fill_in_the_middle(compiled, lambda ids: np.zeros(len(BYTE_VOCAB)), '["a", ', "]", max_tokens=4),
        lambda: pm.diffusion_generate(compiled, lambda ids: np.zeros((4, len(BYTE_VOCAB))), 4, prefix='["a", ',
                                      suffix="]"),
    ]
    for call in calls:
        with pytest.raises(InfillValueChecksError, match="uniqueItems") as info:
            call()
        assert isinstance(info.value, pm.UnsupportedSchemaError) and info.value.pointer == "#/uniqueItems"
    # the same schema without the check (widened on request) is answered as its grammar reads
    widened = byte_compiler.compile_json_schema(UNIQUE_STRINGS, value_checks=False, lenient=True)
    assert pm.can_complete(widened, ['["a", "a"]'], [])


# -- token budgets with value checks: never a dead end, always within N ------------------------


def unique_strings_prefix_ok(text: str) -> bool:
    """Oracle: can `text` be completed to an array of distinct strings (jsonschema)?  Tries tails
    that close an open string or escape with characters no walk writes, then the array."""
    validator = jsonschema.Draft202012Validator(UNIQUE_STRINGS)
    fresh = "\u00e9\u00e8"
    for head in ("", "n", "0000", "000", "00", "0"):
        for tail in ("", "[]", "]", '"]', fresh + '"]', '"' + fresh + '"]'):
            try:
                value = json.loads(text + head + tail)
            except ValueError:
                continue
            if validator.is_valid(value):
                return True
    return False


def budgeted_walk(compiled, n: int, rng: random.Random, favoured: bytes) -> list[int]:
    """A mask-guided walk under max_tokens=n that favours the bytes in `favoured` (to meet
    duplicates); fails on an empty mask; returns the tokens taken (stop token last)."""
    matcher = pm.GrammarMatcher(compiled, max_tokens=n)
    taken: list[int] = []
    while not matcher.is_terminated():
        allowed = np.flatnonzero(matcher.get_next_token_mask()).tolist()
        assert allowed, f"empty mask after {bytes(b''.join(BYTE_VOCAB[t] for t in taken))!r} (max_tokens={n})"
        liked = [t for t in allowed if t != STOP and BYTE_VOCAB[t][0] in favoured]
        t = rng.choice(liked if liked and rng.random() < 0.85 else allowed)
        assert matcher.accept_token(t)
        taken.append(t)
    return taken


def test_budgets_with_value_checks_never_dead_end(byte_compiler):
    """Random walks under many budgets N: every mask is non-empty until the stop token, every
    prefix can still become a valid instance (oracle above), and every walk ends, within N tokens,
    in JSON that jsonschema accepts."""
    compiled = byte_compiler.compile_json_schema(UNIQUE_STRINGS)
    validator = jsonschema.Draft202012Validator(UNIQUE_STRINGS)
    rng = random.Random(7)
    walks = 0
    for n in range(5, 16):
        for _ in range(8):
            taken = budgeted_walk(compiled, n, rng, favoured=b'"],')
            assert taken[-1] == STOP and len(taken) - 1 <= n
            text = b"".join(BYTE_VOCAB[t] for t in taken[:-1]).decode()
            for k in range(len(text) + 1):
                assert unique_strings_prefix_ok(text[:k]), (n, text[:k])
            assert validator.is_valid(json.loads(text)), text
            walks += 1
    assert walks == 88
    with pytest.raises(pm.BudgetTooSmallError):
        pm.GrammarMatcher(compiled, max_tokens=1)


# -- the rollback window -----------------------------------------------------------------------


@pytest.mark.parametrize("window", [0, 1, 3, -1])
def test_max_rollback_tokens_bounds_the_history(byte_compiler, window):
    """After k tokens the matcher keeps min(k, window) states (all with -1); rolling back within
    the window restores the earlier masks, beyond it is a ValueError naming the depth."""
    compiled = byte_compiler.compile_grammar('root ::= "(" [a-z]+ ("," [a-z]+)* ")"')
    matcher = pm.GrammarMatcher(compiled, max_rollback_tokens=window)
    masks = [matcher.get_next_token_mask()]
    text = "(ab,cd,e)"
    for k, t in enumerate(token_of(text), 1):
        assert matcher.accept_token(t)
        assert matcher.num_accepted_tokens == (k if window < 0 else min(k, window))
        masks.append(matcher.get_next_token_mask())
    keep = len(text) if window < 0 else window
    for depth in range(1, keep + 1):
        fork = matcher.fork()
        fork.rollback(depth)
        assert np.array_equal(fork.get_next_token_mask(), masks[-1 - depth]), depth
    with pytest.raises(ValueError, match=f"cannot roll back {keep + 1} tokens; {keep} can be undone"):
        matcher.rollback(keep + 1)
