"""State masks against independent references.

- Vocabulary slices and loop bytes: every state's mask equals a walk of the whole trie without
  slices or loop bytes, bit for bit (accepted and uncertain tokens), on schemas and grammars
  with free, counted, patterned and escaped strings, on all four tokenizers; and the comparison
  catches a slice wrongly applied.
- Slice bounds against brute force over the slice's tokens.
- Follow pairs: matcher fills along real instances equal per-token brute force (accept_token),
  including the states after values, where the pairs turn " word" tokens from uncertain into
  rejected.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from support import REPO, TOKENIZER_NAMES, hf_tokenizer, tokenizer_info

import pushmask as pm
from pushmask.masks.state_masks import MIN_LOOP_BYTES, loop_bytes
from pushmask.masks.trie import BUCKET_BOUNDS, NO_SECOND_BYTE, OTHER
from pushmask.masks.walk import run_slice_bounds

SCHEMAS = {
    "strings": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "code": {"type": "string", "minLength": 2, "maxLength": 7},
            "no_x": {"type": "string", "pattern": "^[^x]*$"},
            "count": {"type": "integer", "minimum": -5, "maximum": 120},
        },
        "required": ["name", "count"],
    },
    "more": {
        "type": "object",
        "properties": {
            "hex": {"type": "string", "pattern": "^[0-9a-f]{4,8}$"},
            "ratio": {"type": "number"},
            "tags": {"type": "array", "items": {"enum": ["a", "b c", "é"]}},
        },
    },
    "loops": {  # patterns whose states keep themselves on many bytes but not all content
        "type": "object",
        "properties": {
            "words": {"type": "string", "pattern": "^(?:(?:[\\w\\-\\.\\s]+)|(?:\\$\\([\\w\\-\\.]+\\)))+$"},
            "lower": {"type": "string", "pattern": "^[a-z ]+,[a-z ]*$"},
        },
    },
    "nested": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "label": {"type": "string"}},
            "additionalProperties": {"type": "boolean"},
        },
        "maxItems": 4,
    },
}
GRAMMAR_FILES = ("llama_json.gbnf", "arithmetic.gbnf")


def _compiled(name: str):
    compiler = pm.GrammarCompiler(tokenizer_info(name), cache_enabled=False)
    out = [compiler.compile_json_schema(schema) for schema in SCHEMAS.values()]
    out += [compiler.compile_grammar((REPO / "tests" / "grammars" / file).read_text()) for file in GRAMMAR_FILES]
    return out


def _accepted_and_uncertain(compiled, mask) -> tuple[np.ndarray, np.ndarray]:
    """The accepted and uncertain token ids a StateMask stands for, whatever its kind."""
    trie = compiled.compiler.trie
    uncertain = np.sort(mask.uncertain_ids)
    if mask.kind == 0:
        accepted = mask.data
    elif mask.kind == 1:
        accepted = np.setdiff1d(np.setdiff1d(trie.token_ids, mask.data), uncertain)
    else:
        if mask.kind == 2:
            words = mask.data
        else:
            words = np.zeros(len(compiled.compiler.all_grammar_words), dtype=np.int32)
            for row in mask.data[:3]:
                if row >= 0:
                    words |= trie.cumulative[row]
        accepted = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))
        if mask.kind == 3:
            accepted = np.union1d(accepted, mask.data[3:])
    return np.sort(accepted), uncertain


def _assert_slices_equal_full_walks(compiled) -> tuple[int, int]:
    """Every state: slices, loop bytes + partial walks == whole-trie walk.  Returns how many
    states took a slice and how many had loop bytes."""
    sliced = looped = 0
    loop = np.zeros(256, dtype=np.uint8)
    for state in range(compiled.num_states):
        looped += loop_bytes(compiled.pda.blob, state, loop) >= MIN_LOOP_BYTES
        pairs, _ = compiled._follow_pairs(int(compiled.pda.state_rule[state]))
        fast = compiled._compute_mask(state, pairs)
        full = compiled._compute_mask(state, pairs, use_slices=False)
        sliced += fast.kind == 3
        for got, want in zip(_accepted_and_uncertain(compiled, fast), _accepted_and_uncertain(compiled, full)):
            assert np.array_equal(got, want), (compiled, state)
        assert fast.num_accepted == full.num_accepted
    return sliced, looped


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_slices_equal_full_walks(name):
    counts = np.array([_assert_slices_equal_full_walks(compiled) for compiled in _compiled(name)])
    sliced, looped = counts.sum(axis=0)
    assert sliced >= 20  # the slice path really ran (free, counted and escaped strings)
    assert looped >= 5  # and the loop bytes (patterned strings, grammar loops)


def test_a_slice_applied_where_the_state_lacks_it_is_caught(monkeypatch):
    """The comparison above fails when a state that takes some content tokens whole is given all
    of them (every content bucket's cumulative row made the whole slice's), so it can tell a
    wrong slice from a right one."""
    compiled = _compiled("llama3")[0]
    compiler = compiled.compiler
    tables = list(compiler.trie_tables)
    cumulative = tables[8].copy()  # state_masks.trie_tables: the cumulative slice rows
    n_buckets = len(BUCKET_BOUNDS)
    content = 2 * n_buckets
    cumulative[content : content + n_buckets] = cumulative[content + n_buckets - 1]
    tables[8] = cumulative
    monkeypatch.setattr(compiler, "trie_tables", tuple(tables))
    monkeypatch.setattr(compiler.trie, "cumulative", cumulative)  # what a SLICE mask's rows read
    with pytest.raises(AssertionError):
        _assert_slices_equal_full_walks(compiled)


def test_a_dead_second_byte_read_wrong_is_caught(monkeypatch):
    """The comparison above also checks the second-byte branches a walk leaves out: read with
    every branch's second byte as NUL (which no state of these grammars takes), the walks of
    whitespace states drop live branches (a space then a quote) and differ from the full walks."""
    compiled = _compiled("llama3")[0]
    compiler = compiled.compiler
    tables = list(compiler.trie_tables)
    main_groups = tables[17]  # state_masks.trie_tables: the main order's groups and branches
    wrong = np.where(main_groups[4] == NO_SECOND_BYTE, NO_SECOND_BYTE, 0).astype(main_groups[4].dtype)
    tables[17] = (*main_groups[:4], wrong)
    monkeypatch.setattr(compiler, "trie_tables", tuple(tables))
    with pytest.raises(AssertionError):
        _assert_slices_equal_full_walks(compiled)


def test_slice_bounds_against_brute_force():
    """For string states of a counted and a patterned string: every slice token of at most f
    characters is accepted and every one of g or more rejected (accept_string from the state)."""
    info = tokenizer_info("llama3")
    compiler = pm.GrammarCompiler(info, cache_enabled=False)
    trie = compiler.trie
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 7}, "p": {"pattern": "^[a-z]*$"}}}
    compiled = compiler.compile_json_schema(schema)
    rng = np.random.default_rng(0)
    for prefix in ('{"s": "', '{"s": "ab', '{"s": "abcdef', '{"p": "', '{"p": "xy'):
        matcher = pm.GrammarMatcher(compiled)
        assert matcher.accept_string(prefix)
        state = int(matcher._state.kernel_s[0])
        runner = compiled._runner()
        bounds = np.zeros((3, 2), dtype=np.int64)
        assert (
            run_slice_bounds(
                compiled.pda.blob,
                runner.pool.blob,
                runner.ws.blob,
                state,
                *trie.slice_automata,
                4096,
                compiler.walk_scratch().slice_bounds,
                bounds,
            )
            == 0
        )
        for s in range(3):
            f, g = bounds[s]
            lo, hi = trie.region_start[s], trie.region_start[s + 1]
            for position in rng.choice(np.arange(lo, hi), size=min(300, hi - lo), replace=False):
                token = int(trie.token_ids[position])
                chars = len(info.decoded_vocab[token].decode("utf-8", "replace"))
                allowed = matcher.accept_token(token)
                if allowed:
                    matcher.rollback(1)
                if chars <= f:
                    assert allowed, (prefix, s, info.decoded_vocab[token])
                if chars >= g:
                    assert not allowed, (prefix, s, info.decoded_vocab[token])
        if prefix.endswith("abcdef"):
            assert bounds[2][1] <= 3  # a counted string rejects what does not fit


def _brute_force(matcher: pm.GrammarMatcher, vocab_size: int) -> np.ndarray:
    allowed = np.zeros(vocab_size, dtype=bool)
    for token in range(vocab_size):
        if matcher.accept_token(token):
            allowed[token] = True
            matcher.rollback(1)
    return allowed


def _mask(matcher: pm.GrammarMatcher) -> np.ndarray:
    bitmask = pm.allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return np.unpackbits(np.asarray(bitmask)[0].view(np.uint8), bitorder="little")[: matcher.vocab_size].astype(bool)


@pytest.mark.parametrize("name", ["llama3", "smollm2"])
def test_fills_after_values_equal_brute_force(name):
    """Fills where rules end (after numbers, strings, objects, array items) and inside strings
    equal brute force; " word" tokens after a number are rejected by the masks themselves."""
    info = tokenizer_info(name)
    tokenizer = hf_tokenizer(name)
    compiler = pm.GrammarCompiler(info)
    compiled = compiler.compile_json_schema(
        {**SCHEMAS["strings"], "properties": {**SCHEMAS["strings"]["properties"], **SCHEMAS["more"]["properties"]}},
        property_order="any",
    )
    instance = {"name": "Ann", "count": 12, "ratio": -0.5, "tags": ["a", "é"], "code": "xy z"}
    text = json.dumps(instance)
    tokens = tokenizer.encode(text, add_special_tokens=False)
    matcher = pm.GrammarMatcher(compiled)
    checked = 0
    for position, token in enumerate(tokens):
        before = tokenizer.decode(tokens[:position])
        if position in (0, 1) or before.endswith(("12", "-0.5", '"Ann"', '"a"', "]", '"xy')):
            assert np.array_equal(_mask(matcher), _brute_force(matcher, info.vocab_size)), before
            checked += 1
        assert matcher.accept_token(token)
    assert matcher.can_end() and checked >= 5
    # after "count": 12 no " word" token is left for the matcher to check one by one
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_string('{"count": 12')
    state = int(matcher._state.kernel_s[0])
    uncertain = compiled.state_mask(state).uncertain_ids
    words = [
        t for t in uncertain.tolist() if info.decoded_vocab[t][:1] == b" " and info.decoded_vocab[t][1:2].isalpha()
    ]
    assert words == []


def test_follow_pairs_hold_every_real_continuation():
    """After a JSON integer that ends a member: every two bytes that can follow where the number
    may end, and that the member itself cannot take, are follow pairs of its rule; and the
    pairs say what they should about ',' and '}'."""
    compiled = pm.GrammarCompiler(tokenizer_info("smollm2")).compile_json_schema(
        {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "m": {"type": "boolean"}},
            "additionalProperties": False,
        },
        property_order="any",
    )  # members are rules of their own
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_string('{"n": 1')
    state = int(matcher._state.kernel_s[0])
    assert compiled.pda.rule_names[compiled.pda.state_rule[state]] == "member"
    pairs, _ = compiled._follow_pairs(int(compiled.pda.state_rule[state]))
    table = pairs.reshape(256, -1)
    # the member rule ends after its trailing whitespace: ',' or '}' must come next
    assert (
        table[ord("}"), 256] and table[ord(","), ord('"')] and table[ord(","), ord(" ")] and table[ord("}"), ord("\n")]
    )
    assert not table[ord(","), ord("}")] and not table[ord("}"), ord(",")] and not table[ord(" ")].any()
    inside = set(b"0123456789.eE \t\n\r")  # bytes the member may still take (the rule goes on)
    for first in sorted(set(range(256)) - inside):
        for second in range(256):
            probe = pm.GrammarMatcher(compiled)
            assert probe.accept_string('{"n": 1')
            if probe.accept_string(bytes([first, second])):
                assert table[first, second], bytes([first, second])


def test_bucketed_order_holds_each_slice_once():
    """The bucketed order is a permutation of the slice tokens, descending by bucket, and every
    cumulative row holds exactly the slice tokens of at most its bound of characters."""
    info = tokenizer_info("qwen")
    trie = pm.GrammarCompiler(info).trie
    slice_ids = trie.token_ids[: trie.region_start[OTHER]]
    assert np.array_equal(np.sort(trie.bucketed.token_ids), np.sort(slice_ids))
    for s in range(3):
        lo, hi = trie.region_start[s], trie.region_start[s + 1]
        for k, bound in enumerate(BUCKET_BOUNDS[:8]):
            row = trie.cumulative[s * len(BUCKET_BOUNDS) + k]
            members = np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little"))
            expected = [
                t
                for t in trie.token_ids[lo:hi].tolist()
                if len(info.decoded_vocab[t].decode("utf-8", "replace")) <= bound
            ]
            assert set(members.tolist()) == set(expected), (s, bound)


def test_first_byte_groups_cover_each_order_by_first_byte():
    """group_start / group_byte (what a walk leaves dead first bytes out by) split each order into
    runs of positions that share a first byte, read from the tokens' own bytes: every position
    is in one group, a group's tokens all start with its byte, and a new group starts exactly
    where a token shares nothing with the one before it."""
    info = tokenizer_info("qwen")
    trie = pm.GrammarCompiler(info).trie
    for order in (trie, trie.bucketed):
        tokens = [info.decoded_vocab[t] for t in order.token_ids.tolist()]
        starts, first_bytes = order.group_start.tolist(), order.group_byte.tolist()
        assert starts[0] == 0 and starts[-1] == len(tokens) and len(first_bytes) == len(starts) - 1
        assert all(a < b for a, b in zip(starts, starts[1:]))
        for g, byte in enumerate(first_bytes):
            assert all(token[0] == byte for token in tokens[starts[g] : starts[g + 1]]), g
        new_run = {p for p in range(1, len(tokens)) if order.lcp[p] == 0}
        assert set(starts[1:-1]) == new_run


def test_branches_split_each_group_by_second_byte():
    """branch_start / branch_byte / group_branches (what a walk leaves dead second bytes out by):
    each group's branches are runs of its positions that share the first two bytes (or hold a
    one-byte token), read from the tokens' own bytes, and a new branch starts exactly where a
    token shares at most one byte with the one before it."""
    info = tokenizer_info("qwen")
    trie = pm.GrammarCompiler(info).trie
    for order in (trie, trie.bucketed):
        tokens = [info.decoded_vocab[t] for t in order.token_ids.tolist()]
        starts, second = order.branch_start.tolist(), order.branch_byte.tolist()
        assert starts[0] == 0 and starts[-1] == len(tokens) and len(second) == len(starts) - 1
        assert set(starts[1:-1]) == {p for p in range(1, len(tokens)) if order.lcp[p] <= 1}
        for k, byte in enumerate(second):
            branch = tokens[starts[k] : starts[k + 1]]
            if byte == NO_SECOND_BYTE:
                assert branch == [branch[0]] and len(branch[0]) == 1, k
            else:
                assert all(len(token) >= 2 and token[1] == byte for token in branch), k
                assert len({token[0] for token in branch}) == 1, k
        groups = order.group_branches.tolist()
        assert len(groups) == len(order.group_start) and groups[-1] == len(second)
        for g in range(len(groups) - 1):  # a group's branches tile it
            assert starts[groups[g]] == order.group_start[g] and starts[groups[g + 1]] == order.group_start[g + 1]
