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
