"""Engine core against independent oracles: masks equal per-token brute force (Python regex partial
matching, a hand-written balanced-parentheses checker), the cache is reused across grammars, bad
input raises, budgets stop runaway grammars."""

from __future__ import annotations

import numpy as np
import pytest
import regex
from support import TOKENIZER_NAMES, grammar_compiler, hf_tokenizer, tokenizer_info

import pushmask as pm
from pushmask.grammar.ir import Grammar, alt, char_class, lit, opt, plus, ref, seq, star
from pushmask.masks import batch_fill

DIGIT = char_class([(0x30, 0x39)])
NONZERO = char_class([(0x31, 0x39)])
INTEGER = seq(opt(lit("-")), alt(lit("0"), seq(NONZERO, star(DIGIT))))
# A regular language with a regex twin: a list of integers and strings with optional spaces.
ITEM = alt(INTEGER, seq(lit('"'), star(char_class([(0x22, 0x22), (0x5C, 0x5C), (0, 0x1F)], negated=True)), lit('"')))
# An optional leading space: SentencePiece (mistral) encodes the text with one.
LIST_GRAMMAR = Grammar(
    {"root": seq(opt(lit(" ")), lit("["), opt(seq(ITEM, star(seq(lit(","), opt(lit(" ")), ITEM)))), lit("]"))}
)
LIST_REGEX = regex.compile(
    r' ?\[((-?(0|[1-9][0-9]*)|"[^"\\\x00-\x1f]*")(, ?(-?(0|[1-9][0-9]*)|"[^"\\\x00-\x1f]*"))*)?\]'
)
LIST_TEXT = '[12, "héllo wörld", -7,0, "日本語 text", 305]'


def regex_allows(pattern: regex.Pattern, text: bytes) -> bool:
    """Is `text` a prefix of some string of the language? (regex partial matching; invalid UTF-8 tails
    are checked by requiring a completion of the partial character to exist)."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(text) - 3 or err.reason != "unexpected end of data":
            return False
        decoded = text[: err.start].decode("utf-8")
        partial = text[err.start :]
        lead = partial[0]
        needed = 2 if lead >= 0xC0 and lead < 0xE0 else 3 if lead < 0xF0 else 4
        # A partial UTF-8 character: allowed when some completion keeps the prefix alive; the
        # grammars here accept every non-ASCII character alike, so a few completions suffice.
        for filler in (0x80, 0xBF, 0x90, 0xA0):
            try:
                char = (partial + bytes([filler]) * (needed - len(partial))).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if pattern.fullmatch(decoded + char, partial=True):
                return True
        return False
    return pattern.fullmatch(decoded, partial=True) is not None


def mask_of(matcher: pm.GrammarMatcher) -> np.ndarray:
    bitmask = pm.allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    bits = np.unpackbits(np.asarray(bitmask)[0].view(np.uint8), bitorder="little")
    return bits[: matcher.vocab_size].astype(bool)


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_mask_equals_regex_brute_force(name):
    """At every step of a real tokenization, each token is allowed iff prefix+token stays a prefix
    of the language (checked token by token with Python regex partial matching)."""
    info = tokenizer_info(name)
    compiled = grammar_compiler(name).compile_ir(LIST_GRAMMAR, normalize=False)
    matcher = pm.GrammarMatcher(compiled)
    ids = hf_tokenizer(name).encode(LIST_TEXT, add_special_tokens=False)
    rng = np.random.default_rng(0)
    prefix = b""
    steps = list(range(len(ids)))
    checked_steps = set(steps[:3] + steps[-2:] + list(rng.choice(steps, size=min(4, len(steps)), replace=False)))
    for step, token in enumerate(ids):
        mask = mask_of(matcher)
        if step in checked_steps:
            # Every allowed token plus a random sample of the others (the full vocabulary is slow).
            candidates = set(np.flatnonzero(mask).tolist()) | set(
                rng.choice(info.vocab_size, 4000, replace=False).tolist()
            )
            for t in candidates:
                data = info.decoded_vocab[t]
                if t in info.stop_token_ids:
                    expected = LIST_REGEX.fullmatch(prefix.decode("utf-8", "replace")) is not None
                elif not data:
                    expected = False
                else:
                    expected = regex_allows(LIST_REGEX, prefix + data)
                assert mask[t] == expected, (name, step, prefix, data, t)
        assert mask[token]
        assert matcher.accept_token(token)
        prefix += info.decoded_vocab[token]
    assert matcher.can_end()
    assert prefix.decode().lstrip(" ") == LIST_TEXT
    eos = info.stop_token_ids[0]
    assert mask_of(matcher)[eos]
    assert matcher.accept_token(eos) and matcher.is_terminated()


# Three rules live at once after "a": the fill ORs masks of different kinds (a mostly-accepting
# rule stored as a rejected list or bitset, short accepted lists), whichever stack comes first.
THREE_WAY = Grammar(
    {
        "root": alt(ref("text"), ref("word"), ref("number")),
        "text": seq(lit("a"), star(char_class([(0x22, 0x22), (0x5C, 0x5C), (0, 0x1F)], negated=True)), lit(".")),
        "word": seq(lit("a"), lit("bc")),
        "number": seq(lit("a"), plus(DIGIT)),
    }
)
THREE_WAY_REGEX = regex.compile(r'a[^"\\\x00-\x1f]*\.|abc|a[0-9]+')


@pytest.mark.parametrize("text", ["a12", "abc", "ab x."])
def test_fill_over_several_stacks_equals_brute_force(text):
    info = tokenizer_info("llama3")
    compiled = grammar_compiler("llama3").compile_ir(THREE_WAY, normalize=False)
    matcher = pm.GrammarMatcher(compiled)
    rng = np.random.default_rng(2)
    prefix = b""
    for ch in text:
        mask = mask_of(matcher)
        candidates = set(np.flatnonzero(mask).tolist()) | set(rng.choice(info.vocab_size, 3000, replace=False).tolist())
        for t in candidates:
            data = info.decoded_vocab[t]
            if t in info.stop_token_ids:
                expected = THREE_WAY_REGEX.fullmatch(prefix.decode()) is not None
            else:
                expected = bool(data) and regex_allows(THREE_WAY_REGEX, prefix + data)
            assert mask[t] == expected, (prefix, data)
        assert matcher.accept_string(ch)
        prefix += ch.encode()
    kinds = {int(k) for k in compiled.mask_index[0::5] if k >= 0}
    assert len(kinds) >= 2  # the fills above combined masks of different kinds


PARENS = Grammar({"root": star(seq(lit("("), ref("root"), lit(")")))})


def parens_prefix_ok(text: bytes) -> bool:
    depth = 0
    for ch in text:
        if ch == ord("("):
            depth += 1
        elif ch == ord(")"):
            depth -= 1
            if depth < 0:
                return False
        else:
            return False
    return True


@pytest.mark.parametrize("name", ["smollm2", "llama3"])
def test_recursive_grammar_mask_equals_brute_force(name):
    """Balanced parentheses: tokens like '))' pop through several frames (the uncertain-token path)."""
    info = tokenizer_info(name)
    compiled = grammar_compiler(name).compile_ir(PARENS, normalize=False)
    matcher = pm.GrammarMatcher(compiled)
    paren_tokens = [
        t for t in range(info.vocab_size) if info.decoded_vocab[t] and set(info.decoded_vocab[t]) <= {40, 41}
    ]
    assert len(paren_tokens) > 5
    rng = np.random.default_rng(1)
    prefix = b""
    for _ in range(25):
        mask = mask_of(matcher)
        allowed = np.flatnonzero(mask)
        for t in paren_tokens:
            assert mask[t] == parens_prefix_ok(prefix + info.decoded_vocab[t]), (prefix, info.decoded_vocab[t])
        others = [t for t in allowed if t not in paren_tokens and t not in info.stop_token_ids]
        assert others == []
        ends = prefix.count(b"(") == prefix.count(b")")
        assert all(mask[t] == ends for t in info.stop_token_ids)
        choice = int(rng.choice([t for t in allowed if t not in info.stop_token_ids]))
        assert matcher.accept_token(choice)
        prefix += info.decoded_vocab[choice]


def test_cache_reuses_masks_of_identical_rules(smollm2_compiler):
    """A second grammar sharing a rule (same body, different name, same FOLLOW set) computes no
    new masks for it."""
    string_rule = seq(lit('"'), star(char_class([(0x22, 0x22)], negated=True)), lit('"'))
    first = Grammar({"root": seq(lit("a="), ref("s"), lit(";")), "s": string_rule})
    second = Grammar({"root": seq(lit("key: "), ref("text"), lit(";")), "text": string_rule})
    compiler = pm.GrammarCompiler(smollm2_compiler.tokenizer_info)
    g1 = compiler.compile_ir(first, normalize=False)
    g1.precompute_masks()
    g2 = compiler.compile_ir(second, normalize=False)
    computed = compiler.cache.computed  # after the compile, which computes the masks of g2's first states
    text_rule = g2.pda.rule_names.index("text")
    assert g2.pda.rule_keys[text_rule] == g1.pda.rule_keys[g1.pda.rule_names.index("s")]
    first_state = int(g2.pda.rule_first_state[text_rule])
    last_state = int(g2.pda.rule_first_state[text_rule + 1])
    for state in range(first_state, last_state):
        g2.state_mask(state)
    assert compiler.cache.computed == computed
    matcher = pm.GrammarMatcher(g2)
    assert matcher.accept_string('key: "shared"') and not matcher.can_end() and matcher.accept_string(";")
    assert matcher.can_end()


def test_cached_masks_respect_each_grammars_follow_set(llama3_compiler):
    """The same rule followed by different bytes in two grammars: the second grammar's masks,
    with the first one's in the shared cache, equal the masks of a fresh compiler."""
    word = seq(lit('"'), plus(char_class([(0x61, 0x7A)])), lit('"'))
    first = Grammar({"root": seq(lit("["), ref("w"), lit("]")), "w": word})
    second = Grammar({"root": seq(lit("{"), ref("w"), lit("}")), "w": word})
    shared = pm.GrammarCompiler(llama3_compiler.tokenizer_info)
    shared.compile_ir(first, normalize=False).precompute_masks()
    fresh = pm.GrammarCompiler(llama3_compiler.tokenizer_info)
    closing = llama3_compiler.tokenizer_info.decoded_vocab.index(b'"}')  # ends w, then closes
    for text in ('{"a', '{"ab'):
        masks = []
        for compiler in (shared, fresh):
            matcher = pm.GrammarMatcher(compiler.compile_ir(second, normalize=False))
            assert matcher.accept_string(text)
            bitmask = pm.allocate_token_bitmask(1, matcher.vocab_size)
            matcher.fill_next_token_bitmask(bitmask, 0)
            masks.append(np.asarray(bitmask).copy())
        assert np.array_equal(masks[0], masks[1]), text
        assert masks[0][0, closing // 32] >> (closing % 32) & 1


def test_states_with_equal_continuations_share_masks_across_rules(llama3_compiler):
    """ "Any key but alpha/beta" and "any key but gamma" differ at their first states but, once a
    key has left the names, continue alike: those states share cached masks (state keys), and
    every mask of the second schema equals a fresh compiler's."""

    def schema(names):
        return {"type": "object", "properties": {name: {"type": "integer"} for name in names}}

    info = llama3_compiler.tokenizer_info
    shared = pm.GrammarCompiler(info)
    shared.compile_json_schema(schema(["alpha", "beta"]), property_order="any", strict_mode=False).precompute_masks()
    second = shared.compile_json_schema(schema(["gamma"]), property_order="any", strict_mode=False)
    pda = second.pda
    extra = [r for r, name in enumerate(pda.rule_names) if name.startswith("extra")]
    assert len(extra) == 1
    states = range(int(pda.rule_first_state[extra[0]]), int(pda.rule_first_state[extra[0] + 1]))
    cached = [s for s in states if shared.cache.find(second.shared_key(s)) >= 0]
    assert 3 <= len(cached) < len(states)  # the key's free part, not its first states
    second.precompute_masks()
    fresh = pm.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        schema(["gamma"]), property_order="any", strict_mode=False
    )
    for state in range(second.num_states):
        a, b = second.state_mask(state), fresh.state_mask(state)
        assert a.kind == b.kind and np.array_equal(a.data, b.data), state
        assert np.array_equal(a.uncertain_positions, b.uncertain_positions), state


def test_invalid_token_ids_raise(smollm2_compiler):
    matcher = pm.GrammarMatcher(smollm2_compiler.compile_ir(LIST_GRAMMAR, normalize=False))
    for bad in (-1, matcher.vocab_size, 10**9):
        with pytest.raises(ValueError):
            matcher.accept_token(bad)
    assert matcher.accept_string("[1]")


def test_padding_ids_are_never_allowed():
    info = tokenizer_info("smollm2")
    padded = pm.TokenizerInfo.from_huggingface(hf_tokenizer("smollm2"), vocab_size=info.vocab_size + 64)
    compiled = pm.GrammarCompiler(padded).compile_ir(
        Grammar({"root": star(char_class([(0, 0x10FFFF)]))}), normalize=False
    )
    matcher = pm.GrammarMatcher(compiled)
    mask = mask_of(matcher)
    assert not mask[info.vocab_size :].any()
    assert not matcher.accept_token(info.vocab_size + 3)


def test_rollback_reset_and_termination(smollm2_compiler):
    info = smollm2_compiler.tokenizer_info
    matcher = pm.GrammarMatcher(smollm2_compiler.compile_ir(LIST_GRAMMAR, normalize=False))
    ids = hf_tokenizer("smollm2").encode("[1, 22]", add_special_tokens=False)
    masks = []
    for t in ids:
        masks.append(mask_of(matcher))
        assert matcher.accept_token(t)
    assert matcher.can_end()
    matcher.rollback(2)
    assert (mask_of(matcher) == masks[-2]).all()
    with pytest.raises(ValueError):
        matcher.rollback(len(ids))
    matcher.reset()
    assert (mask_of(matcher) == masks[0]).all()
    assert not matcher.accept_token(info.stop_token_ids[0])  # cannot end before "]"
    assert matcher.accept_string("[]")
    assert matcher.accept_token(info.stop_token_ids[0])
    assert matcher.is_terminated()
    terminated_mask = mask_of(matcher)
    assert set(np.flatnonzero(terminated_mask)) == set(info.stop_token_ids)
    with pytest.raises(RuntimeError):
        matcher.accept_token(ids[0])
    matcher.rollback(1)
    assert not matcher.is_terminated() and matcher.can_end()


def test_rejected_token_leaves_state_unchanged(smollm2_compiler):
    matcher = pm.GrammarMatcher(smollm2_compiler.compile_ir(LIST_GRAMMAR, normalize=False))
    assert matcher.accept_string("[1")
    before = mask_of(matcher)
    assert not matcher.accept_string("x")
    assert not matcher.accept_string(b"\xff")
    assert (mask_of(matcher) == before).all()


def test_jump_forward_string(smollm2_compiler):
    grammar = Grammar(
        {"root": seq(lit('{"name": "'), plus(char_class([(0x61, 0x7A)])), lit('", "age": '), DIGIT, lit("}"))}
    )
    matcher = pm.GrammarMatcher(smollm2_compiler.compile_ir(grammar, normalize=False))
    assert matcher.find_jump_forward_string() == '{"name": "'
    assert matcher.accept_string('{"name": "bob')
    assert matcher.find_jump_forward_string() == ""
    assert matcher.accept_string('"')
    assert matcher.find_jump_forward_string() == ', "age": '
    # Forced multi-byte characters come out whole.
    accented = Grammar({"root": seq(lit("é日"), DIGIT)})
    matcher = pm.GrammarMatcher(smollm2_compiler.compile_ir(accented, normalize=False))
    assert matcher.find_jump_forward_string() == "é日"


def test_too_many_stack_tops_is_a_budget_error(smollm2_compiler):
    """An ambiguous grammar whose live stacks grow with the input stops with a clear error."""
    grammar = Grammar({"root": ref("a"), "a": alt(seq(lit("x"), ref("a"), lit("y")), seq(lit("x"), ref("a")), lit(""))})
    compiler = pm.GrammarCompiler(smollm2_compiler.tokenizer_info, limits=pm.Limits(max_stack_tops=16))
    matcher = pm.GrammarMatcher(compiler.compile_ir(grammar, normalize=False))
    with pytest.raises(pm.LimitExceededError, match="stack tops"):
        for _ in range(40):
            matcher.accept_string("x")


def test_unremoved_left_recursion_cannot_hang(smollm2_compiler):
    """Even if left recursion reached the automaton, the closure stops at the stack-top budget."""
    grammar = Grammar({"root": alt(seq(ref("root"), lit("x")), lit("y"))})
    compiler = pm.GrammarCompiler(smollm2_compiler.tokenizer_info, limits=pm.Limits(max_stack_tops=64))
    with pytest.raises(pm.LimitExceededError):
        pm.GrammarMatcher(compiler.compile_ir(grammar, normalize=False))


def test_fill_torch_bitmask_and_apply(smollm2_compiler):
    torch = pytest.importorskip("torch")
    matcher = pm.GrammarMatcher(smollm2_compiler.compile_ir(LIST_GRAMMAR, normalize=False))
    vocab = matcher.vocab_size
    bitmask = pm.allocate_token_bitmask(2, vocab)
    assert isinstance(bitmask, torch.Tensor) and bitmask.dtype == torch.int32  # as xgrammar allocates
    matcher.fill_next_token_bitmask(bitmask, index=1)
    expected = mask_of(matcher)
    logits = torch.zeros(2, vocab + 100)
    pm.apply_token_bitmask_inplace(logits, bitmask)
    assert torch.equal(torch.isfinite(logits[1, :vocab]), torch.from_numpy(expected))
    assert torch.isinf(logits[1, vocab:]).all()


def test_batch_fill_equals_one_by_one(smollm2_compiler):
    """Rows filled by the threaded batch call equal each matcher's own fill, for matchers at
    different points of two grammars (some sharing one compiled grammar)."""
    lists = smollm2_compiler.compile_ir(LIST_GRAMMAR, normalize=False)
    parens = smollm2_compiler.compile_ir(PARENS, normalize=False)
    prefixes = [(lists, "["), (lists, "[12, "), (lists, '[1, "ab'), (parens, "(("), (parens, ""), (lists, "[7]")]
    matchers = []
    for compiled, prefix in prefixes * 3:
        matcher = pm.GrammarMatcher(compiled)
        assert matcher.accept_string(prefix)
        matchers.append(matcher)
    rows = list(reversed(range(len(matchers))))
    bitmask = pm.allocate_token_bitmask(len(matchers), matchers[0].vocab_size)
    pm.batch_fill_next_token_bitmask(matchers, bitmask, indices=rows, max_threads=4)
    for matcher, row in zip(matchers, rows):
        single = pm.allocate_token_bitmask(1, matcher.vocab_size)
        matcher.fill_next_token_bitmask(single)
        assert (bitmask[row] == single[0]).all()
    with pytest.raises(ValueError):
        pm.batch_fill_next_token_bitmask([matchers[0], matchers[0]], bitmask)


def test_stop_token_that_is_also_text_is_masked_until_the_grammar_can_end(smollm2_compiler):
    """A caller may name a text token (here the digit '1') a stop token: it then acts only as a stop."""
    one = hf_tokenizer("smollm2").encode("1", add_special_tokens=False)[0]
    matcher = pm.GrammarMatcher(smollm2_compiler.compile_ir(LIST_GRAMMAR, normalize=False), override_stop_tokens=[one])
    assert matcher.accept_string("[")
    mask = mask_of(matcher)
    assert not mask[one] and not matcher.accept_token(one)
    assert matcher.accept_string("2]")
    assert mask_of(matcher)[one] and matcher.accept_token(one) and matcher.is_terminated()


def test_memoised_fills_equal_fresh_fills(llama3_compiler):
    """Inside strings the stacks repeat and fills come from the per-matcher memo; each must equal
    the fill of a fresh matcher brought to the same text (which has no memo)."""
    info = llama3_compiler.tokenizer_info
    string = seq(lit('"'), star(char_class([(0x22, 0x22), (0x5C, 0x5C), (0, 0x1F)], negated=True)), lit('"'))
    grammar = Grammar({"root": seq(lit("["), ref("s"), star(seq(lit(", "), ref("s"))), lit("]")), "s": string})
    compiled = llama3_compiler.compile_ir(grammar, normalize=False)
    walker = pm.GrammarMatcher(compiled)
    text = '["a long string with many words inside it", "12", "another string here"]'
    prefix = b""
    for token in hf_tokenizer("llama3").encode(text, add_special_tokens=False):
        fresh = pm.GrammarMatcher(compiled)
        assert fresh.accept_string(prefix)
        assert (mask_of(walker) == mask_of(fresh)).all(), prefix
        assert walker.accept_token(token)
        prefix += info.decoded_vocab[token]
    assert walker._memo[2][:, batch_fill.META_LENGTH].any()  # the memo was exercised
