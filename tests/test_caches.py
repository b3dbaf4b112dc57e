"""pushmask.clear_caches: every process-wide cache registers itself where it is defined, and
clearing them all changes no compiled automaton (they hold pure functions of their keys)."""

import numpy as np

import pushmask
from pushmask.automata import dfa as dfa_module
from pushmask.grammar import caches
from pushmask.grammar.json_schema import leaves
from pushmask.grammar.json_schema import json_schema_to_grammar
from pushmask.grammar.passes import normalize
from pushmask.automata.pda import build_pda

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 3},
                                           "tag": {"type": "string", "pattern": "^[a-z]+$"}},
          "patternProperties": {"^x-": {"type": "number"}}}


def automaton(schema):
    return build_pda(normalize(json_schema_to_grammar(schema)), pushmask.Limits())


def test_clear_caches_empties_every_registered_cache_and_changes_no_automaton():
    before = automaton(SCHEMA)
    assert dfa_module._dfa_cache and leaves._leaf_cache  # the compile filled them
    names = caches.registered()
    assert any("rule DFAs" in name for name in names) and any("leaf automata" in name for name in names)
    pushmask.clear_caches()
    assert not dfa_module._dfa_cache and not dfa_module._fsm_layouts and not leaves._leaf_cache
    assert not leaves._search_cache
    after = automaton(SCHEMA)
    assert np.array_equal(before.blob, after.blob) and before.rule_names == after.rule_names


def test_register_replaces_an_entry_of_the_same_name():
    calls = []
    caches.register(lambda: calls.append(1), "test cache")
    caches.register(lambda: calls.append(2), "test cache")
    try:
        pushmask.clear_caches()
        assert calls == [2]
    finally:
        caches._CLEARERS.pop("test cache")
