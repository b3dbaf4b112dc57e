"""State keys and follow pairs computed for many states or rules in one kernel call equal what an
independent reference gives one at a time; states with equal mask keys have equal masks."""

from __future__ import annotations

import hashlib
import json
import random
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from support import DATA, require_shared, tokenizer_info  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.automata.pda import STATE_KEY_STATES, Pda  # noqa: E402


def _schemas(n: int) -> list[dict]:
    """The first n MaskBench-dev schemas by file name."""
    paths = sorted(require_shared(DATA / "maskbench-dev").glob("*.json"))[:n]
    return [json.loads(path.read_text())["schema"] for path in paths]


def _grammars(compiler) -> list:
    """A few grammars of different kinds: JSON schemas, a regex, a grammar with rule references."""
    grammars = [compiler.compile_json_schema(s, property_order="any", strict_mode=False) for s in _schemas(4)]
    grammars.append(compiler.compile_regex(r"(ab|a[0-9]{2,5})*c?"))
    grammars.append(compiler.compile_grammar('root ::= "[" (item ("," item)*)? "]"\nitem ::= [a-z]+ | root'))
    return grammars


def _reference_key(pda: Pda, state: int) -> str:
    """state_key as its docstring defines it, in plain Python: the states of the state's rule
    reachable from it numbered breadth-first, with accept flags, byte edges and references."""
    rule = int(pda.state_rule[state])
    rule_hashes = [int(k[:16], 16) for k in pda.rule_keys]
    number = {state: 0}
    order = [state]
    shape = bytearray()  # int32 fields; a rule hash 64 bits (all in native byte order)

    def put(*fields: int) -> None:
        shape.extend(struct.pack(f"={len(fields)}i", *fields))

    def visit(t: int) -> int:
        if t not in number:
            number[t] = len(order)
            order.append(t)
        return number[t]

    i = 0
    while i < len(order):
        s = order[i]
        i += 1
        edges = range(int(pda.byte_ptr[s]), int(pda.byte_ptr[s + 1]))
        put(int(pda.state_accept[s]), len(edges))
        for e in edges:
            put(int(pda.byte_lo[e]), int(pda.byte_hi[e]), visit(int(pda.byte_dst[e])))
        refs = range(int(pda.ref_ptr[s]), int(pda.ref_ptr[s + 1]))
        put(len(refs))
        for e in refs:
            shape.extend(struct.pack("=Q", rule_hashes[int(pda.ref_rule[e])]))
            put(visit(int(pda.ref_dst[e])))
    if len(order) > STATE_KEY_STATES + 1:
        return f"{pda.rule_keys[rule]}/{state - int(pda.rule_first_state[rule])}"
    return "t" + hashlib.blake2b(bytes(shape), digest_size=16).hexdigest()


def _fresh(pda: Pda) -> Pda:
    """The same automaton with no keys computed yet."""
    return Pda(pda.rule_names, pda.rule_keys, pda.rule_first_state, pda.blob, pda.root_rule)


def test_batched_state_keys_equal_the_reference_one_state_at_a_time():
    compiler = pm.GrammarCompiler(tokenizer_info("llama3"), cache_enabled=False)
    rng = random.Random(7)
    for grammar in _grammars(compiler):
        pda = grammar.pda
        states = list(range(pda.num_states))
        want = [_reference_key(pda, s) for s in states]
        shuffled = states[:]
        rng.shuffle(shuffled)
        batched = _fresh(pda)
        got = dict(zip(shuffled, batched.state_keys(shuffled + shuffled[:3])))  # repeats keyed once
        assert [got[s] for s in states] == want
        single = _fresh(pda)
        assert [single.state_key(s) for s in states] == want
        assert batched.state_keys([]) == []


def test_follow_pairs_of_many_rules_equal_each_rule_alone():
    compiler = pm.GrammarCompiler(tokenizer_info("llama3"), cache_enabled=False)
    for grammar, alone in zip(_grammars(compiler), _grammars(pm.GrammarCompiler(tokenizer_info("llama3")))):
        rules = list(range(len(grammar.pda.rule_names)))
        together = grammar._pairs_of(rules[::-1])
        for rule in rules:
            pairs, digest = alone._follow_pairs(rule)
            assert together[rule][1] == digest, rule
            assert np.array_equal(together[rule][0], pairs), rule
            assert grammar.pairs_at[rule] == together[rule][0].ctypes.data
            assert grammar.pairs_key[2 * rule : 2 * rule + 2].tobytes() == bytes.fromhex(digest)


def test_keyed_state_hashes_partition_states_as_their_keys_do():
    """The shared cache files a mask under a keyed hash of the state's shape (state_hash): two
    states of any grammars get equal hashes exactly when their state keys (blake2b of the same
    shape) are equal."""
    compiler = pm.GrammarCompiler(tokenizer_info("llama3"), cache_enabled=False)
    by_key: dict[str, tuple] = {}
    by_hash: dict[tuple, str] = {}
    total = 0
    for grammar in _grammars(compiler):
        states = list(range(grammar.num_states))
        total += len(states)
        for state, key in zip(states, grammar.pda.state_keys(states)):
            hashed = tuple(grammar.shared_key(state)[:2].tolist())
            assert by_key.setdefault(key, hashed) == hashed, state
            assert by_hash.setdefault(hashed, key) == key, state
    assert len(by_key) < total  # some states do share a key


def test_states_with_equal_mask_keys_have_equal_masks():
    """Masks computed without a cache, per state: wherever two states (of one grammar or two)
    share the key the shared cache would file them under, their masks are the same."""
    compiler = pm.GrammarCompiler(tokenizer_info("llama3"), cache_enabled=False)
    grammars = _grammars(compiler)[:4]
    by_key: dict[tuple, object] = {}
    shared = 0
    for grammar in grammars:
        pda = grammar.pda
        states = list(range(pda.num_states))
        grammar.ensure_masks(np.array(states))
        for state, key in zip(states, pda.state_keys(states)):
            mask = grammar.state_mask(state)
            full = (key, grammar._follow_pairs(int(pda.state_rule[state]))[1])
            if full not in by_key:
                by_key[full] = mask
                continue
            shared += 1
            seen = by_key[full]
            assert mask.kind == seen.kind and mask.num_accepted == seen.num_accepted, (full, state)
            for part, other in zip(mask.parts, seen.parts):
                assert np.array_equal(part, other), (full, state)
    assert shared > 0  # the check met states that share a key
