"""pushmask.clear_caches: every process-wide cache registers itself where it is defined, and
clearing them all changes no compiled automaton (they hold pure functions of their keys)."""

import numpy as np

import pushmask
from pushmask.automata import dfa as dfa_module
from pushmask.automata.pda import build_pda
from pushmask.grammar.core import caches
from pushmask.grammar.json_schema import json_schema_to_grammar, leaves
from pushmask.grammar.passes import normalize

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 3}, "tag": {"type": "string", "pattern": "^[a-z]+$"}},
    "patternProperties": {"^x-": {"type": "number"}},
}


def automaton(schema):
    return build_pda(normalize(json_schema_to_grammar(schema)), pushmask.Limits())


def test_clear_caches_empties_every_registered_cache_and_changes_no_automaton():
    before = automaton(SCHEMA)
    assert dfa_module._dfa_cache and leaves._leaf_cache  # the compile filled them
    names = caches.registered()
    assert {
        "rule DFAs (automata/dfa.py)",
        "automaton layouts (automata/dfa.py)",
        "JSON Schema leaf automata: numbers",
        "ECMA pattern automata (grammar/ecma_regex.py)",
        "JSON Schema format automata (grammar/json_formats.py)",
        "JSON Schema patternProperties matches",
    } <= set(names)
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


def test_bounded_cache_drops_the_least_recently_used_past_its_cost():
    cache = caches.BoundedCache(10, cost=len)
    cache.put("a", "xxxx")
    cache.put("b", "yyyy")
    assert cache.get("a") == "xxxx"  # now the most recently used
    cache.put("c", "zzzz")  # 12 > 10: "b" goes
    assert "b" not in cache and cache.get("a") == "xxxx" and cache.get("c") == "zzzz"
    assert cache.total_cost == 8 and cache.evicted == 1
    cache.put("d", "w" * 50)  # past the bound alone: the newest entry stays
    assert len(cache) == 1 and cache.get("d") == "w" * 50
    unbounded = caches.BoundedCache(-1)
    for n in range(1000):
        unbounded.put(n, n)
    assert len(unbounded) == 1000 and unbounded.get_or_make(5, lambda: -1) == 5


def test_bounded_cache_get_tells_a_stored_none_from_a_miss():
    """CheckedBudget's memo stores None (no path found): get's default tells it from a miss."""
    cache = caches.BoundedCache(2)
    missing = object()
    cache.put("none", None)
    assert cache.get("none", missing) is None and cache.get("other", missing) is missing
    assert cache.get("other") is None and cache.hits == 1 and cache.misses == 2


def test_a_named_bounded_cache_is_cleared_by_clear_caches():
    cache = caches.BoundedCache(4, name="test bounded cache")
    try:
        cache.put("k", 1)
        pushmask.clear_caches()
        assert len(cache) == 0 and cache.get("k") is None
    finally:
        caches._CLEARERS.pop("test bounded cache")


def test_the_compiler_memoises_by_kind_spec_and_options():
    from support import tokenizer_info

    info = tokenizer_info("smollm2")
    compiler = pushmask.GrammarCompiler(info)
    ab = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a", "b"]}
    ba = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "required": ["a", "b"]}
    first = compiler.compile_json_schema(ab)
    assert compiler.compile_json_schema(ab) is first
    assert compiler.compile_json_schema(ab, property_order="any") is not first  # other options
    # member order is part of the key: the two orders compile to their own automata
    fresh = pushmask.GrammarCompiler(info, cache_enabled=False)
    other = compiler.compile_json_schema(ba)
    assert other is not first
    for compiled, schema in ((first, ab), (other, ba)):
        assert np.array_equal(compiled.pda.blob, fresh.compile_json_schema(schema).pda.blob)
    assert not np.array_equal(first.pda.blob, other.pda.blob)
    assert compiler.compile_grammar('root ::= "x"') is compiler.compile_grammar('root ::= "x"')
    assert compiler.compile_regex("x") is not compiler.compile_grammar('root ::= "x"')
    assert fresh.compile_json_schema(ab) is not fresh.compile_json_schema(ab)  # cache off: compiled anew
    assert compiler.get_cache_size_bytes() > 0
    compiler.clear_cache()
    assert compiler.compile_json_schema(ab) is not first and compiler.cache_limit_bytes == -1


def test_the_compiler_cache_limit_bounds_the_compiled_grammars():
    from support import tokenizer_info

    compiler = pushmask.GrammarCompiler(tokenizer_info("smollm2"), cache_limit_bytes=0)
    x = compiler.compile_regex("x")
    y = compiler.compile_regex("y")  # past the limit: only the newest stays
    assert compiler.compile_regex("y") is y and compiler.compile_regex("x") is not x


def test_specs_that_repr_cannot_key_are_compiled_without_the_memo():
    from pushmask.masks.compiler import _memo_key

    cyclic: dict = {"type": "array"}
    cyclic["items"] = cyclic
    deep: dict = {}
    for _ in range(5000):
        deep = {"items": deep}
    assert _memo_key("json_schema", cyclic, {}) is None and _memo_key("json_schema", deep, {}) is None
    assert _memo_key("json_schema", {"a": [1, 1.0, True, None, ()]}, {}) is not None
