"""pushmask.clear_caches: every process-wide cache is a named BoundedCache that registers itself
where it is defined, stays within its bound, and clearing them all changes no compiled automaton
(they hold pure functions of their keys)."""

import subprocess
import sys
import threading

import numpy as np
import pytest

import pushmask
from pushmask.automata import dfa as dfa_module
from pushmask.automata.pda import build_pda
from pushmask.core import caches
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
        "JSON Schema number leaf automata (grammar/json_schema/leaves.py)",
        "ECMA pattern automata (grammar/ecma_regex.py)",
        "JSON Schema format automata (grammar/json_formats.py)",
        "JSON Schema patternProperties matches of member names (grammar/json_schema/leaves.py)",
    } <= set(names)
    pushmask.clear_caches()
    assert not dfa_module._dfa_cache and not dfa_module._fsm_layouts and not leaves._leaf_cache
    assert not leaves._search_cache
    after = automaton(SCHEMA)
    assert np.array_equal(before.blob, after.blob) and before.rule_names == after.rule_names


def test_naming_a_cache_again_replaces_the_registered_one():
    first = caches.BoundedCache(4, name="test cache")
    second = caches.BoundedCache(4, name="test cache")
    try:
        first.put("k", 1)
        second.put("k", 2)
        pushmask.clear_caches()
        assert len(first) == 1 and len(second) == 0  # only the newer one is registered
    finally:
        caches._REGISTRY.pop("test cache")


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
        caches._REGISTRY.pop("test bounded cache")


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
    assert compiler.compile_json_schema(ab) is not first


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


def test_clear_caches_empties_every_registered_cache():
    """clear_caches() leaves every registered cache empty, those the compiles below filled
    included; each has a bound."""
    from support import tokenizer_info

    compiler = pushmask.GrammarCompiler(tokenizer_info("smollm2"))
    strings = {"a": {"type": "string", "pattern": "^\\d+\\w\\p{Lu}$"}, "b": {"type": "string", "format": "date"}}
    compiler.compile_json_schema({"type": "object", "properties": strings, "required": ["a"]})
    compiler.compile_lark('start: "a"+\n%ignore /\\s+/\n')
    registry = pushmask.cache_registry()
    assert all(info.max_cost >= 0 for info in registry.values()), registry
    filled = {name for name, info in registry.items() if info.entries}
    assert {
        "ECMA pattern automata (grammar/ecma_regex.py)",
        "JSON Schema format automata (grammar/json_formats.py)",
        "Unicode general category ranges (grammar/fsm/unicode_properties.py)",
        "Python re classes \\d \\s \\w as ranges (grammar/fsm/unicode_properties.py)",
        "JSON Schema fast metaschema checks, per draft (grammar/json_schema/metaschema.py)",
    } <= filled
    pushmask.clear_caches(tables=False)  # a cold compile's benchmark: fixed tables stay
    kept = {name for name, info in pushmask.cache_registry().items() if info.entries}
    assert kept == {name for name in filled if name in TABLES}
    assert "JSON Schema format automata (grammar/json_formats.py)" in kept
    assert "ECMA pattern automata (grammar/ecma_regex.py)" not in kept
    pushmask.clear_caches()
    assert {name: info for name, info in pushmask.cache_registry().items() if info.entries or info.cost} == {}


TABLES = {
    "kernel package folders (core/jit.py)",
    "kernel folder digests (core/jit.py)",
    "kernel cache stamps, per kernel file (core/jit.py)",
    "Unicode general category table (grammar/fsm/unicode_properties.py)",
    "Unicode general category ranges (grammar/fsm/unicode_properties.py)",
    "Unicode script and binary property ranges (grammar/fsm/unicode_properties.py)",
    "the string of every code point, 4.4 MB (grammar/fsm/unicode_properties.py)",
    "Python re classes \\d \\s \\w as ranges (grammar/fsm/unicode_properties.py)",
    "JSON Schema format automata (grammar/json_formats.py)",
    "JSON Schema fast metaschema checks, per draft (grammar/json_schema/metaschema.py)",
    "JSON Schema metaschema format checkers, per draft (grammar/json_schema/documents.py)",
    "JSON Schema metaschema validators, per draft (grammar/json_schema/documents.py)",
    "bitmask raw-bit tables, per float type (masks/bitmask.py)",
    "bitmask bit-value tensors, per device (masks/bitmask.py)",
    "transformers' name of the key/value cache argument (samplers/kv_cache.py)",
    "validate-corpus tokenizers, by path (jsonschemabench/runner.py)",
}
"""The registered caches of fixed tables, which clear_caches(tables=False) keeps."""


EXPECTED_REGISTRY = {
    "kernel package folders (core/jit.py)",
    "kernel folder digests (core/jit.py)",
    "kernel cache stamps, per kernel file (core/jit.py)",
    "automaton layouts (automata/dfa.py)",
    "rule DFAs (automata/dfa.py)",
    "automaton content numbers (automata/dfa.py)",
    "UTF-8 byte ranges of code-point ranges (automata/utf8.py)",
    "Unicode general category table (grammar/fsm/unicode_properties.py)",
    "Unicode general category ranges (grammar/fsm/unicode_properties.py)",
    "Unicode script and binary property ranges (grammar/fsm/unicode_properties.py)",
    "the string of every code point, 4.4 MB (grammar/fsm/unicode_properties.py)",
    "Python re classes \\d \\s \\w as ranges (grammar/fsm/unicode_properties.py)",
    "ECMA pattern automata (grammar/ecma_regex.py)",
    "JSON Schema format automata (grammar/json_formats.py)",
    "multipleOf remainder automata (grammar/json_numbers.py)",
    "JSON string tokens of string automata (grammar/json_strings.py)",
    "JSON Schema fast metaschema checks, per draft (grammar/json_schema/metaschema.py)",
    "JSON Schema metaschema format checkers, per draft (grammar/json_schema/documents.py)",
    "JSON Schema subschemas that passed the metaschema check (grammar/json_schema/documents.py)",
    "JSON Schema metaschema validators, per draft (grammar/json_schema/documents.py)",
    "JSON Schema number leaf automata (grammar/json_schema/leaves.py)",
    "JSON Schema patternProperties matches of member names (grammar/json_schema/leaves.py)",
    "bitmask raw-bit tables, per float type (masks/bitmask.py)",
    "bitmask bit-value tensors, per device (masks/bitmask.py)",
    "transformers' name of the key/value cache argument (samplers/kv_cache.py)",
    "validate-corpus tokenizers, by path (jsonschemabench/runner.py)",
}


def test_the_registry_lists_every_process_wide_cache_of_the_package():
    """In a fresh process, cache_registry() names every cache that importing each module of the
    package registers (so CACHE_MODULES misses none), and no other."""
    script = """
import importlib, pkgutil
import pushmask
from pushmask.core import caches
listed = set(pushmask.cache_registry())
for package in ("pushmask", "pushmask.grammar", "pushmask.automata", "pushmask.masks", "pushmask.samplers",
                "pushmask.integrations", "pushmask.jsonschemabench"):
    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if module.name.endswith("__main__"):  # runs the command line
            continue
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional dependency (vllm, sglang, llama-cpp) is missing
            pass
print(sorted(listed))
print(sorted(set(caches.registered()) - listed))
print(sorted(name for name, cache in caches._REGISTRY.items() if cache.table))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    listed, missed, tables = (eval(line) for line in out.strip().splitlines()[-3:])
    assert missed == [] and set(listed) == EXPECTED_REGISTRY
    assert set(tables) == TABLES


def test_bounded_caches_stay_within_their_bounds_through_their_callers(monkeypatch):
    """Filled past a (shrunk) bound by their real callers, the caches keep at most that many
    entries and return what the function itself returns."""
    from pushmask.automata.utf8 import utf8_byte_ranges
    from pushmask.grammar.fsm.unicode_properties import re_class
    from pushmask.grammar.json_numbers import multiples_dfa

    def plain(value):  # a Dfa by its arrays
        return [array.tolist() for array in value.arrays()] if hasattr(value, "arrays") else value

    calls = [
        (utf8_byte_ranges, [(lo, lo + span) for lo in (0x41, 0x7F0, 0xD7F0, 0xFFF0) for span in (0, 0x20, 0x900)]),
        (multiples_dfa, [(k,) for k in (3, 7, 12, 30, 41)]),
        (re_class, [("d",), ("s",), ("w",), ("d",)]),
    ]
    for function, argument_lists in calls:
        monkeypatch.setattr(function.cache, "max_cost", 2)
        for args in argument_lists:
            assert plain(function(*args)) == plain(function.__wrapped__(*args)), (function, args)
            assert len(function.cache) <= 2 and function.cache.total_cost <= 2
        assert function.cache.evicted > 0
    leaves_search = leaves._search_cache
    monkeypatch.setattr(leaves_search, "max_cost", 3)
    names = [f"x-{n}" if n % 2 else f"y{n}" for n in range(10)]
    assert [leaves.pattern_search("^x-", name, "#") for name in names] == [n % 2 == 1 for n in range(10)]
    assert len(leaves_search) == 3 and leaves_search.evicted > 0


def test_memoized_is_registered_bounded_and_agrees_with_the_function_across_threads():
    """Eight threads call a memoised function over keys that overflow its bound (entries evicted
    while others read them): every result equals the undecorated function's, the cache stays
    within its bound, and clear_caches empties it."""

    def slow_square_digits(n: int) -> tuple[int, ...]:
        return tuple(int(d) ** 2 for d in str(n * 7919))

    memo = caches.memoized(16, name="test memoized")(slow_square_digits)
    try:
        errors: list = []
        sizes: list[int] = []
        barrier = threading.Barrier(8)

        def work(seed: int) -> None:
            barrier.wait()
            for i in range(3000):
                n = (i * (seed + 3)) % 40
                if memo(n) != slow_square_digits(n):
                    errors.append(n)
                sizes.append(len(memo.cache))

        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            sys.setswitchinterval(old)
        assert errors == [] and max(sizes) <= 16 and memo.cache.evicted > 0 and memo.cache.hits > 0
        assert "test memoized" in caches.registered() and memo.__name__ == "slow_square_digits"
        pushmask.clear_caches()
        assert len(memo.cache) == 0
    finally:
        caches._REGISTRY.pop("test memoized")


def test_memoized_stores_none_but_not_errors_and_takes_positional_arguments_only():
    calls: list = []

    def maybe(n: int):
        calls.append(n)
        if n < 0:
            raise ValueError(n)
        return None if n == 0 else n

    memo = caches.memoized(4, name="test memoized errors")(maybe)
    try:
        assert memo(0) is None and memo(0) is None and calls == [0]  # a stored None is a hit
        for _ in range(2):
            with pytest.raises(ValueError):
                memo(-1)
        assert calls == [0, -1, -1]  # an error is not stored
        with pytest.raises(TypeError):
            memo(n=1)
    finally:
        caches._REGISTRY.pop("test memoized errors")


def test_the_default_compiler_is_bounded_and_stays_under_its_limit_with_correct_results():
    import re

    from support import tokenizer_info

    from pushmask.masks.compiler import DEFAULT_CACHE_LIMIT_BYTES

    info = tokenizer_info("smollm2")
    assert pushmask.GrammarCompiler(info).cache_limit_bytes == DEFAULT_CACHE_LIMIT_BYTES > 0
    one = pushmask.GrammarCompiler(info).compile_regex("[a-z]{1,8}0").memory_size_bytes
    limit = 6 * one  # three grammars' worth for the grammars' half
    compiler = pushmask.GrammarCompiler(info, cache_limit_bytes=limit)
    patterns = [f"[a-z]{{1,8}}{k}" for k in range(10)]
    for k, pattern in enumerate(patterns):
        compiled = compiler.compile_regex(pattern)
        assert compiler.compiled_cache.total_cost <= limit // 2 and compiler.cache.allocated_bytes <= limit - limit // 2
        assert compiler.get_cache_size_bytes() <= 1.5 * limit  # grammars grow a little as masks are visited
        for text in ("ab" + str(k), "ab" + str(k + 1), "abcdefghi" + str(k), str(k)):
            matcher = pushmask.GrammarMatcher(compiled)
            ok = matcher.accept_string(text) and matcher.can_end()
            assert ok == bool(re.fullmatch(pattern, text)), (pattern, text)
    assert len(compiler.compiled_cache) < len(patterns) and compiler.compiled_cache.evicted > 0
    assert compiler.compile_regex(patterns[-1]) is compiled  # the newest stays


def test_grammars_borrow_the_workspace_and_share_follow_pairs():
    """An idle grammar holds no kernel workspace (the compiler lends one per first visit) and
    rules with equal follow pairs share one array; masks equal those of separate compilers."""
    from support import tokenizer_info

    from pushmask.masks.compiler import IDLE_WORKSPACES

    info = tokenizer_info("smollm2")
    compiler = pushmask.GrammarCompiler(info, cache_enabled=False)  # every mask computed, memo moving
    schemas = [{"type": "array", "items": {"type": t}} for t in ("integer", "string", "number", "boolean")]
    texts = ["[1, 22, -3]", '["a", "b\\n"]', "[1.5, 2e3]", "[true, false]"]
    grammars = [compiler.compile_json_schema(schema) for schema in schemas]
    for _ in range(2):  # the grammars take turns with the compiler's workspaces
        for grammar, schema, text in zip(grammars, schemas, texts):
            alone = pushmask.GrammarCompiler(info, cache_enabled=False).compile_json_schema(schema)
            matchers = [pushmask.GrammarMatcher(grammar), pushmask.GrammarMatcher(alone)]
            for ch in text:
                bitmasks = []
                for m in matchers:
                    bitmask = pushmask.allocate_token_bitmask(1, info.vocab_size)
                    m.fill_next_token_bitmask(bitmask)
                    bitmasks.append(np.asarray(bitmask).copy())
                assert np.array_equal(*bitmasks)
                assert all(m.accept_string(ch) for m in matchers)
            assert grammar._offline is None and len(compiler._idle_workspaces) <= IDLE_WORKSPACES
    pairs = [p for g in grammars for p, _ in g._pairs.values()]
    by_digest = {d: p for g in grammars for p, d in g._pairs.values()}
    assert len({id(p) for p in pairs}) == len(by_digest) < len(pairs)


def test_a_runner_keeps_the_empty_frame_pool_it_is_given():
    from support import tokenizer_info

    from pushmask.automata.stack import FramePool, StackRunner

    pda = pushmask.GrammarCompiler(tokenizer_info("smollm2")).compile_regex("ab").pda
    pool = FramePool()
    assert len(pool) == 0 and StackRunner(pda, pushmask.Limits(), 8, pool=pool).pool is pool


def test_clearing_and_long_compiles_hand_the_free_heap_back(monkeypatch):
    from support import tokenizer_info

    from pushmask.masks import compiler as compiler_module

    calls = []
    monkeypatch.setattr(caches, "_malloc_trim", lambda pad: calls.append(pad) or 1)
    compiler = pushmask.GrammarCompiler(tokenizer_info("smollm2"))
    monkeypatch.setattr(compiler_module, "RELEASE_HEAP_AFTER_S", 3600.0)
    compiler.compile_regex("a")  # a compile shorter than the bound keeps its heap (trimming costs ms)
    assert calls == []
    monkeypatch.setattr(compiler_module, "RELEASE_HEAP_AFTER_S", 0.0)
    compiler.compile_regex("b")
    assert calls and set(calls) == {0}
    for clear in (compiler.clear_cache, pushmask.clear_caches):
        calls.clear()
        clear()
        assert calls == [0]


def test_dense_runs_writes_one_edge_per_run_of_equal_targets():
    from pushmask.grammar.fsm.subset_kernels import dense_runs

    rng = np.random.default_rng(7)
    for _ in range(200):
        n, n_letters = int(rng.integers(1, 12)), int(rng.integers(0, 9))
        trans = rng.integers(-1, int(rng.integers(1, 4)), size=(n, n_letters)).astype(np.int32)
        bounds = np.sort(rng.choice(10_000, size=n_letters + 1, replace=False)).astype(np.int64)
        start, count, lo, hi, target = dense_runs(trans, bounds)
        for s in range(n):
            edges = list(
                zip(lo[start[s] : start[s] + count[s]], hi[start[s] : start[s] + count[s]], target[start[s] :])
            )
            # the edges, read back letter by letter, are the table's row; adjacent edges differ
            row = [-1] * n_letters
            for first, last, to in edges:
                for a in range(n_letters):
                    if first <= bounds[a] and bounds[a + 1] - 1 <= last:
                        assert row[a] == -1
                        row[a] = to
            assert row == trans[s].tolist()
            for (_, last, to), (first, _, next_to) in zip(edges, edges[1:]):
                assert last < first and (last + 1 < first or to != next_to)
        assert start.tolist() == (np.cumsum(count) - count).tolist()


def test_the_rule_dfa_cache_weighs_arrays_and_keeps_no_edge_lists():
    from pushmask.grammar.ir import lit, ref, seq, star

    pushmask.clear_caches()
    body = seq(ref("x"), star(seq(lit(","), ref("x"))))
    given = dfa_module.build_rule_dfa(body)
    assert given.byte_edges == [[], [(ord(","), ord(","), 0)]]  # edge lists built on the given automaton
    automaton(SCHEMA)
    kept = [dfa for dfa, _ in dfa_module._dfa_cache.values()]
    assert len(kept) > 1 and dfa_module._dfa_cache.max_cost == dfa_module.DFA_CACHE_BYTES
    assert dfa_module._dfa_cache.total_cost == sum(sum(table.nbytes for table in dfa.arrays) for dfa in kept)
    assert all(dfa._lists is None for dfa in kept)  # the cache holds the arrays alone
    again = dfa_module.build_rule_dfa(body)
    assert again is not given and again == given and again.byte_edges == given.byte_edges
