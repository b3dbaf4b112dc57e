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
from support import UNIQUE_STRINGS, unique_strings_prefix_ok

import pushmask as pm
from pushmask.masks.draft import fill_draft_bitmasks
from pushmask.masks.infill import InfillValueChecksError

BYTE_VOCAB = [bytes([b]) for b in range(32, 127)] + [b"</s>"]
STOP = 95


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
        lambda: pm.diffusion_generate(
            compiled, lambda ids: np.zeros((4, len(BYTE_VOCAB))), 4, prefix='["a", ', suffix="]"
        ),
    ]
    for call in calls:
        with pytest.raises(InfillValueChecksError, match="uniqueItems") as info:
            call()
        assert isinstance(info.value, pm.UnsupportedSchemaError) and info.value.pointer == "#/uniqueItems"
    # the same schema without the check (widened on request) is answered as its grammar reads
    widened = byte_compiler.compile_json_schema(UNIQUE_STRINGS, value_checks=False, lenient=True)
    assert pm.can_complete(widened, ['["a", "a"]'], [])


# -- token budgets with value checks: never a dead end, always within N ------------------------


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


# -- the composition matrix --------------------------------------------------------------------
#
# Rows: grammar kinds on one byte vocabulary (printable ASCII, a stop token, one special token
# that structural tags name).  Columns: matcher features.  Each row brings an independent oracle
# of its language -- viable(text): some completion exists; complete(text): text is in it -- from
# lark (char-level LALR, whose parser stops at the first token no sentence can take), the regex
# package's partial matching and re.fullmatch, or an enumeration of a finite JSON language
# rendered by json.dumps and validated by jsonschema.

MATRIX_VOCAB = [bytes([b]) for b in range(32, 127)] + [b"</s>", None]
SPECIAL = 96
SPECIAL_TEXT = "\ue000"  # what the oracles see for the special token


def matrix_info() -> pm.TokenizerInfo:
    return pm.TokenizerInfo(
        MATRIX_VOCAB,
        vocab_type="raw",
        stop_token_ids=[STOP],
        special_token_ids=[SPECIAL],
        special_token_texts={"<|tool|>": SPECIAL},
    )


def lark_oracle(grammar: str):
    """(viable, complete) from lark's LALR parser on a grammar whose terminals are single
    characters: a prefix is viable iff the interactive parser takes all its characters."""
    lark = pytest.importorskip("lark")
    parser = lark.Lark(grammar, parser="lalr")

    def run(text: str, end: bool) -> bool:
        try:
            interactive = parser.parse_interactive(text)
            interactive.exhaust_lexer()
            if end:
                interactive.feed_eof()
        except lark.exceptions.LarkError:
            return False
        return True

    return (lambda text: run(text, False)), (lambda text: run(text, True))


def regex_oracle(pattern: str):
    regex = pytest.importorskip("regex")
    import re

    partial = regex.compile(pattern)
    return (lambda text: partial.fullmatch(text, partial=True) is not None), (
        lambda text: re.fullmatch(pattern, text) is not None
    )


def finite_json_oracle(schema, instances):
    """A finite JSON language: the instances jsonschema accepts, rendered as json.dumps does
    (", " and ": ", the compact layout)."""
    validator = jsonschema.Draft202012Validator(schema)
    language = {json.dumps(v) for v in instances if validator.is_valid(v)}
    assert language
    return (lambda text: any(w.startswith(text) for w in language)), (lambda text: text in language)


def unique_strings_oracle():
    """Arrays of distinct strings in the compact layout: json.loads + jsonschema on the text with
    tails that close it, and json.dumps must give the text back (the layout)."""
    validator = jsonschema.Draft202012Validator(UNIQUE_STRINGS)
    fresh = "\\u00e9\\u00e8"

    def instance(text: str):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        return value if validator.is_valid(value) and json.dumps(value) == text else None

    def viable(text: str) -> bool:
        for head in ("", "n", "0000", "000", "00", "0"):
            for tail in ("", "[]", "]", '"]', fresh + '"]', '"' + fresh + '"]', ' "' + fresh + '"]'):
                if instance(text + head + tail) is not None:
                    return True
        return False

    return viable, (lambda text: instance(text) is not None)


def chars(literal: str) -> str:
    """A lark sequence of one-character literals spelling `literal`."""
    return " ".join(json.dumps(c) for c in literal)


NESTED_LARK = 'start: "(" (item ("," item)*)? ")"\nitem: start | word\nword: LETTER+\nLETTER: "a" | "b"\n'
ARITH_LARK = (
    'start: expr\nexpr: term (("+" | "-") term)*\nterm: atom ("*" atom)*\natom: DIGIT | "(" expr ")"\nDIGIT: "0".."9"\n'
)
SMALL_OBJECT = {
    "type": "object",
    "properties": {"a": {"enum": ["x", "yz"]}, "b": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}},
    "required": ["a", "b"],
    "additionalProperties": False,
}
SMALL_OBJECT_INSTANCES = [
    {"a": a, "b": list(b)}
    for a in ("x", "yz")
    for b in [(), (True,), (False,), (True, True), (True, False), (False, True), (False, False)]
]
TAG_PATTERN = r"[ab]{1,3}(,[ab]{1,2})?"
TAG = {
    "type": "structural_tag",
    "format": {
        "type": "sequence",
        "elements": [{"type": "token", "token": "<|tool|>"}, {"type": "regex", "pattern": TAG_PATTERN}],
    },
}


class Row:
    """One grammar kind: how to compile it, its oracle, the bytes its walks favour (to reach
    nesting, duplicates and ends), and what it refuses."""

    def __init__(self, name, compile_, oracle, favoured: bytes, checks=False, terminals=False):
        self.name, self.compile, self.favoured = name, compile_, favoured
        self.viable, self.complete = oracle()
        self.checks, self.terminals = checks, terminals

    def piece(self, token: int) -> str | None:
        """The oracle's text for a token (None: never allowed)."""
        if token == SPECIAL:
            return SPECIAL_TEXT if self.terminals else None
        return MATRIX_VOCAB[token].decode()


ROWS = {
    "ebnf": Row(
        "ebnf",
        lambda c: c.compile_grammar('root ::= "(" (item ("," item)*)? ")"\nitem ::= root | [ab]+'),
        lambda: lark_oracle(NESTED_LARK),
        b"(),ab",
    ),
    "lark": Row("lark", lambda c: c.compile_lark(ARITH_LARK), lambda: lark_oracle(ARITH_LARK), b"()+*1"),
    "regex": Row(
        "regex",
        lambda c: c.compile_regex(r"[a-c]{1,3}-\d{2}(\.[xy]+)?"),
        lambda: regex_oracle(r"[a-c]{1,3}-\d{2}(\.[xy]+)?"),
        b"abc-12.xy",
    ),
    "json": Row(
        "json",
        lambda c: c.compile_json_schema(SMALL_OBJECT, any_whitespace=False),
        lambda: finite_json_oracle(SMALL_OBJECT, SMALL_OBJECT_INSTANCES),
        b'{}[]", :abxyztruefals',
    ),
    "json_checks": Row(
        "json_checks",
        lambda c: c.compile_json_schema(UNIQUE_STRINGS, any_whitespace=False),
        unique_strings_oracle,
        b'[]", a',
        checks=True,
    ),
    "tag": Row(
        "tag",
        lambda c: c.compile_structural_tag(TAG),
        lambda: regex_oracle(SPECIAL_TEXT + TAG_PATTERN),
        b"ab,",
        terminals=True,
    ),
}


@pytest.fixture(scope="module")
def matrix_compiler():
    return pm.GrammarCompiler(matrix_info())


def assert_mask_exact(row: Row, mask: np.ndarray, text: str, where: str) -> None:
    """Brute force: every token's bit is "text + token is viable", the stop token's "text is complete"."""
    for t in range(len(MATRIX_VOCAB)):
        if t == STOP:
            expected = row.complete(text)
        else:
            piece = row.piece(t)
            expected = piece is not None and row.viable(text + piece)
        assert bool(mask[t]) == expected, (row.name, where, text, MATRIX_VOCAB[t], expected)


def walk(row: Row, matcher, rng: random.Random, steps: int, on_step=None) -> str:
    """A mask-guided walk favouring the row's bytes; fails on an empty mask before the end;
    on_step(matcher, text, mask) runs before each step.  Returns the text (stop token excluded)."""
    text = ""
    for _ in range(steps):
        if matcher.is_terminated():
            break
        mask = matcher.get_next_token_mask()
        if on_step is not None:
            on_step(matcher, text, mask)
        allowed = np.flatnonzero(mask).tolist()
        assert allowed, (row.name, "empty mask", text)
        liked = [t for t in allowed if t == SPECIAL or (t != STOP and MATRIX_VOCAB[t][0] in row.favoured)]
        t = rng.choice(liked if liked and rng.random() < 0.9 else allowed)
        assert matcher.accept_token(t)
        if t != STOP:
            text += row.piece(t)
    return text


@pytest.mark.parametrize("name", ROWS)
def test_plain_masks_equal_brute_force(matrix_compiler, name):
    row = ROWS[name]
    compiled = row.compile(matrix_compiler)
    rng = random.Random(1)
    steps = []
    for _ in range(6):
        walk(
            row,
            pm.GrammarMatcher(compiled),
            rng,
            14,
            lambda m, text, mask: (assert_mask_exact(row, mask, text, "plain"), steps.append(text)),
        )
    assert len(steps) >= 40


@pytest.mark.parametrize("name", ROWS)
def test_budget_walks_finish_within_n(matrix_compiler, name):
    """Under max_tokens=N the walk never meets an empty mask, every prefix is viable and the
    text is complete within N tokens (a token terminal costs one token)."""
    row = ROWS[name]
    compiled = row.compile(matrix_compiler)
    need = pm.GrammarMatcher(compiled).min_tokens_to_finish()
    rng = random.Random(2)
    for n in range(need, need + 8):
        for _ in range(3):
            matcher = pm.GrammarMatcher(compiled, max_tokens=n)
            seen = []
            text = walk(row, matcher, rng, n + 1, lambda m, text, mask: seen.append(text))
            assert matcher.is_terminated() and len(seen) <= n + 1, (row.name, n, text)
            assert all(row.viable(prefix) for prefix in seen) and row.complete(text), (row.name, n, text)


def sample_texts(row: Row, compiled, count: int, seed: int) -> list[str]:
    """Complete texts from budgeted walks, for templates."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        budget = pm.GrammarMatcher(compiled).min_tokens_to_finish() + 6
        text = walk(row, pm.GrammarMatcher(compiled, max_tokens=budget), rng, 40)
        if row.complete(text):
            out.append(text)
    return out


@pytest.mark.parametrize("name", ROWS)
def test_infill_against_brute_force(matrix_compiler, name):
    """can_complete / find_completion / allowed_tokens on a two-byte gap over a small alphabet,
    against every middle the gap can hold; value checks are refused (documented)."""
    import itertools

    row = ROWS[name]
    compiled = row.compile(matrix_compiler)
    if row.checks:
        with pytest.raises(InfillValueChecksError):
            pm.can_complete(compiled, ["[", "]"], [pm.Gap.bytes(2)])
        return
    alphabet = bytes(sorted(set(row.favoured)))[:8]
    middles = [""] + [bytes(p).decode() for k in (1, 2) for p in itertools.product(alphabet, repeat=k)]
    rng = random.Random(3)
    checked = 0
    for text in sample_texts(row, compiled, 4, seed=4):
        for _ in range(3):
            i = rng.randrange(len(text) + 1)
            j = min(len(text), i + rng.randrange(3))
            prefix, suffix = text[:i], text[j:]
            gap = pm.Gap.bytes(2, alphabet=alphabet)
            base = pm.GrammarMatcher(compiled)
            if row.terminals:  # the token terminal is taken by the matcher; the template is text only
                assert prefix.startswith(SPECIAL_TEXT) and base.accept_token(SPECIAL)
                prefix, head = prefix[1:], SPECIAL_TEXT
            else:
                head = ""
            source = base if row.terminals else compiled
            expected = any(row.complete(head + prefix + m + suffix) for m in middles)
            assert pm.can_complete(source, [prefix, suffix], [gap]) == expected, (row.name, prefix, suffix)
            found = pm.find_completion(source, [prefix, suffix], [gap])
            assert (found is not None) == expected
            if found is not None:
                found = found.decode()
                middle = found[len(prefix) : len(found) - len(suffix)]
                assert found.startswith(prefix) and found.endswith(suffix) and middle in middles
                assert row.complete(head + found)
            mask = pm.allowed_tokens(source, pm.Template([prefix, gap, suffix]), 1)
            for t in range(len(MATRIX_VOCAB)):
                if t == STOP:
                    want = row.complete(head + prefix + suffix)
                elif t == SPECIAL:
                    want = False  # a bytes gap holds text
                else:
                    piece = row.piece(t)
                    want = any(row.complete(head + prefix + piece + m + suffix) for m in middles if len(m) <= 1)
                assert bool(mask[t]) == want, (row.name, prefix, suffix, MATRIX_VOCAB[t])
            checked += 1
    assert checked == 12


@pytest.mark.parametrize("name", ROWS)
def test_fork_and_rollback(matrix_compiler, name):
    """A fork walks on its own; the original rolled back j tokens has its earlier mask again,
    and both masks stay exact."""
    row = ROWS[name]
    compiled = row.compile(matrix_compiler)
    rng = random.Random(5)
    for _ in range(3):
        matcher = pm.GrammarMatcher(compiled)
        history = []  # history[i]: (text, mask) after i tokens
        text = walk(row, matcher, rng, 10, lambda m, text, mask: history.append((text, mask.copy())))
        if not matcher.is_terminated():
            fork = matcher.fork()
            tail = walk(row, fork, rng, 4)
            if not fork.is_terminated():
                assert_mask_exact(row, fork.get_next_token_mask(), text + tail, "fork")
        for j in range(1, len(history) + 1):
            matcher.rollback(1)
            earlier, mask = history[-j]
            assert np.array_equal(matcher.get_next_token_mask(), mask), (row.name, earlier)
        assert_mask_exact(row, matcher.get_next_token_mask(), "", "rollback")
        with pytest.raises(ValueError, match="cannot roll back"):
            matcher.rollback(1)


@pytest.mark.parametrize("name", ROWS)
def test_batch_fill_threads_on_fresh_masks(name):
    """Matchers at different points of a grammar compiled just now (no mask computed yet), filled
    together on 4 threads: each row equals the brute-force mask."""
    row = ROWS[name]
    compiled = row.compile(pm.GrammarCompiler(matrix_info()))
    rng = random.Random(6)
    texts = []
    for _ in range(4):
        walk(row, pm.GrammarMatcher(compiled), rng, 9, lambda m, text, mask: texts.append(text))
    texts = texts[:: max(1, len(texts) // 8)][:8]
    matchers = []
    for text in texts:
        matcher = pm.GrammarMatcher(compiled)
        for piece in text:
            assert matcher.accept_token(SPECIAL if piece == SPECIAL_TEXT else MATRIX_VOCAB.index(piece.encode()))
        matchers.append(matcher)
    fresh = row.compile(pm.GrammarCompiler(matrix_info()))  # again, so that no mask is stored yet
    matchers = [pm.GrammarMatcher(fresh) for _ in texts]
    for matcher, text in zip(matchers, texts):
        for piece in text:
            assert matcher.accept_token(SPECIAL if piece == SPECIAL_TEXT else MATRIX_VOCAB.index(piece.encode()))
    bitmask = pm.allocate_token_bitmask(len(matchers), len(MATRIX_VOCAB))
    pm.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=4)
    for i, text in enumerate(texts):
        bits = np.unpackbits(np.asarray(bitmask[i]).view(np.uint8), bitorder="little")[: len(MATRIX_VOCAB)]
        assert_mask_exact(row, bits.astype(bool), text, "batch")


@pytest.mark.parametrize("name", ROWS)
def test_jump_forward_is_forced(matrix_compiler, name):
    """find_jump_forward_string: each of its characters is the only one that keeps the text
    viable (and the text before it is not complete), by brute force over the vocabulary; and
    where the brute force finds exactly one text character possible, the jump starts with it."""
    row = ROWS[name]
    compiled = row.compile(matrix_compiler)
    rng = random.Random(7)
    jumps = []

    def check(matcher, text, mask):
        jump = matcher.find_jump_forward_string()
        options = [p for p in map(row.piece, range(len(MATRIX_VOCAB))) if p is not None and row.viable(text + p)]
        if len(options) == 1 and options[0] != SPECIAL_TEXT and not row.complete(text):
            assert jump[:1] == options[0], (row.name, text, jump)
        for k, c in enumerate(jump):
            here = text + jump[:k]
            assert not row.complete(here), (row.name, here)
            options = [p for p in map(row.piece, range(len(MATRIX_VOCAB))) if p is not None and row.viable(here + p)]
            assert options == [c], (row.name, here, options, jump)
        jumps.append(jump)

    for _ in range(5):
        walk(row, pm.GrammarMatcher(compiled), rng, 12, check)
    assert len(jumps) >= 25


# -- draft masks (speculative decoding) under token budgets ------------------------------------


def row_bits(bitmask, row: int) -> np.ndarray:
    return np.unpackbits(np.asarray(bitmask[row]).view(np.uint8), bitorder="little")[: len(MATRIX_VOCAB)].astype(bool)


@pytest.mark.parametrize("name", ROWS)
def test_draft_masks_under_a_budget_equal_step_by_step(matrix_compiler, name):
    """fill_draft_bitmasks on a budgeted matcher: each row equals the mask a fork reaches by
    accepting the draft one token at a time (a refused token's row repeats its parent's), for
    drafts that mix tokens within the budget and tokens the grammar allows but the budget does
    not, at every remaining budget down to none."""
    row = ROWS[name]
    compiled = row.compile(matrix_compiler)
    need = pm.GrammarMatcher(compiled).min_tokens_to_finish()
    rng = random.Random(8)
    checked = 0
    for n in range(need, need + 4):
        for _ in range(4):
            matcher = pm.GrammarMatcher(compiled, max_tokens=n)
            free = pm.GrammarMatcher(compiled)  # the same tokens without a budget: what the grammar allows
            for _ in range(rng.randrange(n + 1)):
                allowed = [t for t in np.flatnonzero(matcher.get_next_token_mask()).tolist() if t != STOP]
                if not allowed:
                    break
                token = rng.choice(allowed)
                assert matcher.accept_token(token) and free.accept_token(token)
            twin, draft = matcher.fork(), []
            for _ in range(rng.randrange(1, 6)):
                budgeted = np.flatnonzero(twin.get_next_token_mask()).tolist()
                grammar_only = np.flatnonzero(free.get_next_token_mask()).tolist() if not free.is_terminated() else []
                pool = grammar_only if grammar_only and rng.random() < 0.4 else budgeted
                if not pool:
                    break
                token = rng.choice(pool)
                draft.append(token)
                if token == STOP or not (twin.accept_token(token) and free.accept_token(token)):
                    break
            if not draft:
                continue
            bitmask = pm.allocate_token_bitmask(len(draft) + 1, len(MATRIX_VOCAB))
            result = fill_draft_bitmasks(matcher, draft, bitmask)
            step = matcher.fork()
            for i, token in enumerate([None] + draft):
                if token is not None:
                    taken = not step.is_terminated() and step.accept_token(token)  # nothing after a stop
                    assert bool(result.accepted[i - 1]) == taken, (row.name, n, draft, i)
                    if not taken:
                        for later in range(i, len(draft) + 1):  # the rest repeat the last row filled
                            assert np.array_equal(row_bits(bitmask, later), row_bits(bitmask, i - 1))
                        break
                if step.is_terminated():
                    continue
                assert np.array_equal(row_bits(bitmask, i), step.get_next_token_mask()), (row.name, n, draft, i)
                checked += 1
    assert checked >= 30


@pytest.mark.parametrize("name", ROWS)
def test_speculative_walks_under_a_budget_finish_within_it(matrix_compiler, name):
    """Speculative decoding under max_tokens=N: a draft of up to 4 tokens the grammar allows
    (budget or not) is checked against its draft rows (a token is kept while the row before it
    allows it), then a bonus token is drawn from the row after the last kept one.  Every kept
    text is a viable prefix, no row on the path is empty, and the output is complete within N."""
    row = ROWS[name]
    compiled = row.compile(matrix_compiler)
    need = pm.GrammarMatcher(compiled).min_tokens_to_finish()
    rng = random.Random(9)
    for n in range(need, need + 6):
        for _ in range(3):
            matcher, free, text = pm.GrammarMatcher(compiled, max_tokens=n), pm.GrammarMatcher(compiled), ""
            while not matcher.is_terminated():
                proposal, twin = [], free.fork()
                for _ in range(rng.randrange(5)):
                    options = [] if twin.is_terminated() else np.flatnonzero(twin.get_next_token_mask()).tolist()
                    if not options:
                        break
                    proposal.append(rng.choice(options))
                    assert twin.accept_token(proposal[-1])
                bitmask = pm.allocate_token_bitmask(len(proposal) + 1, len(MATRIX_VOCAB))
                result = fill_draft_bitmasks(matcher, proposal, bitmask)
                kept = -1  # the node whose row comes next (-1: the root)
                for i, token in enumerate(proposal):
                    if not row_bits(bitmask, kept + 1)[token]:
                        break
                    result.accept(i)
                    assert free.accept_token(token)
                    text += row.piece(token) if token != STOP else ""
                    kept = i
                    assert matcher.is_terminated() or row.viable(text), (row.name, n, text)
                if matcher.is_terminated():
                    break
                allowed = np.flatnonzero(row_bits(bitmask, kept + 1)).tolist()
                assert allowed, (row.name, n, "empty draft row", text)
                bonus = rng.choice(allowed)
                assert matcher.accept_token(bonus) and free.accept_token(bonus)
                text += row.piece(bonus) if bonus != STOP else ""
                assert matcher.is_terminated() or row.viable(text), (row.name, n, text)
            assert matcher.num_accepted_tokens - 1 <= n and row.complete(text), (row.name, n, text)


# -- %ignore'd terminals (first / longest match) inside infilling ------------------------------

IGNORING_LARK = r"""
start: NAME ("," NAME)*
NAME: /[a-w]+/
%ignore / +/
%ignore /--[a-z]*/
%ignore /x|xy/
"""
IGNORING_SENTENCES = ["ab --cd,e", "a,b --x", "ab  ,c --", "a x,b", "axx,c", "a--b, c"]


def test_infill_keeps_where_lark_ends_ignored_terminals(byte_compiler, monkeypatch):
    """can_complete / find_completion / allowed_tokens around a gap of up to two bytes, where
    the text around the gap holds comments, spaces and `x|xy` (which Python's re ends after x):
    against lark's Earley parser over every middle the gap can hold.  The same grammar with
    ignored terminals that may end anywhere answers some of these templates differently, so the
    templates reach the first/longest-match ends."""
    import itertools

    from pushmask.grammar import lark_frontend

    lark = pytest.importorskip("lark")
    parser = lark.Lark(IGNORING_LARK, parser="earley", lexer="dynamic_complete")

    def complete(text: str) -> bool:
        try:
            parser.parse(text)
        except lark.exceptions.LarkError:
            return False
        return True

    compiled = byte_compiler.compile_lark(IGNORING_LARK)
    with monkeypatch.context() as patch:
        patch.setattr(lark_frontend, "greedy_ignores", lambda grammar, *_: grammar)
        anywhere = pm.GrammarCompiler(byte_compiler.tokenizer_info).compile_lark(IGNORING_LARK)
    alphabet = b"a-, xyz"
    middles = [""] + [bytes(p).decode() for k in (1, 2) for p in itertools.product(alphabet, repeat=k)]
    rng = random.Random(11)
    differs = checked = 0
    for text in IGNORING_SENTENCES:
        assert complete(text), text
        for _ in range(4):
            i = rng.randrange(len(text) + 1)
            j = min(len(text), i + rng.randrange(3))
            prefix, suffix = text[:i], text[j:]
            gap = pm.Gap.bytes(2, alphabet=alphabet)
            expected = any(complete(prefix + m + suffix) for m in middles)
            assert pm.can_complete(compiled, [prefix, suffix], [gap]) == expected, (prefix, suffix)
            differs += pm.can_complete(anywhere, [prefix, suffix], [gap]) != expected
            found = pm.find_completion(compiled, [prefix, suffix], [gap])
            assert (found is not None) == expected
            if found is not None:
                assert complete(found.decode()), (prefix, suffix, found)
            mask = pm.allowed_tokens(compiled, pm.Template([prefix, gap, suffix]), 1)
            for t, piece in enumerate(BYTE_VOCAB):
                want = (
                    complete(prefix + suffix)
                    if t == STOP
                    else any(complete(prefix + piece.decode() + m + suffix) for m in middles if len(m) <= 1)
                )
                assert bool(mask[t]) == want, (prefix, suffix, piece)
            checked += 1
    # gaps that only the first/longest-match ends make impossible: letters after "--" are all
    # comment (no NAME after the comma), and "x" before "y" is ignored alone (y is no NAME letter)
    for prefix, suffix, gap_alphabet in (("a,--", "", b"abc"), ("a,", "yb", b"x")):
        gap = pm.Gap.bytes(2, min=1, alphabet=gap_alphabet)
        fillings = [bytes(p).decode() for k in (1, 2) for p in itertools.product(gap_alphabet, repeat=k)]
        expected = any(complete(prefix + m + suffix) for m in fillings)
        assert not expected and pm.can_complete(compiled, [prefix, suffix], [gap]) == expected, (prefix, suffix)
        assert pm.find_completion(compiled, [prefix, suffix], [gap]) is None
        differs += pm.can_complete(anywhere, [prefix, suffix], [gap]) != expected
    assert checked == 24 and differs >= 2


# -- token healing with value checks ------------------------------------------------------------


def test_healing_mask_keeps_the_value_checks():
    """The first token after healing may hold a whole array: one whose strings repeat is refused
    (uniqueItems), by an oracle independent of pushmask (json.loads + jsonschema on the text
    with closing tails, support.unique_strings_prefix_ok)."""
    from pushmask.masks.healing import fill_healing_mask

    extra = [b' ["a","a"', b' ["a","b"', b' ["a","a"]', b' ["a","b"]', b' [" ",', b' ["x"],']
    vocab = BYTE_VOCAB + extra
    compiled = pm.GrammarCompiler(pm.TokenizerInfo.from_vocab(vocab, "raw", stop_token_ids=[STOP])).compile_json_schema(
        UNIQUE_STRINGS
    )
    for removed in (b" ", b" [", b' ["a'):
        matcher = pm.GrammarMatcher(compiled)
        words = np.zeros((len(vocab) + 31) // 32, dtype=np.int32)
        fill_healing_mask(matcher, removed, words)
        got = np.unpackbits(words.view(np.uint8), bitorder="little")[: len(vocab)].astype(bool)
        for t, spelled in enumerate(vocab):  # the grammar's text starts after `removed`
            want = (
                t != STOP and spelled.startswith(removed) and unique_strings_prefix_ok(spelled[len(removed) :].decode())
            )
            assert got[t] == want, (removed, spelled)
        if removed == b" ":
            assert got[len(BYTE_VOCAB) + 1] and not got[len(BYTE_VOCAB)]  # ["a","b" yes, ["a","a" no
