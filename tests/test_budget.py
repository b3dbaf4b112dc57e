"""Token budgets (GrammarMatcher(max_tokens=N), masks/budget.py) against independent oracles.

- Random mask-guided walks that never stop by choice, on grammars and MaskBench-dev schemas, with
  budgets from the least the API accepts upward: every walk ends inside the language within the
  budget (lark's Earley parser; json.loads + jsonschema), and the mask is never empty before.
- The least accepted budget and the bytes of the shortest completion against exhaustive
  enumeration of short strings; a smaller budget raises BudgetTooSmallError naming the minimum.
- A generous budget leaves every mask bit for bit as without one; a tight one only removes tokens.
- Tokens a tight mask keeps do leave a completion within the budget: infilling's exact saturation
  (can_complete with a token gap) confirms it.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from support import (
    DATA,
    REPO,
    decodable_prefix,
    grammar_compiler,
    grammar_file_prefix_viable,
    json_prefix_completes,
    require_shared,
)

import pushmask as pm
from pushmask.automata.completion import ShortestCompletions

jsonschema = pytest.importorskip("jsonschema")
lark = pytest.importorskip("lark")

GRAMMARS = {  # name: (how pushmask compiles it, lark text for the oracle)
    "parens": ("ebnf", "parens.ebnf", "parens.lark"),
    "arithmetic": ("lark", "arithmetic.lark", "arithmetic.lark"),
    "json": ("lark", "json.lark", "json.lark"),
}
DEV_SCHEMAS = ("Github_easy---o12235", "Github_easy---o1334", "Github_easy---o42187", "Github_easy---o10467")
PERSON = json.loads((REPO / "examples" / "person.json").read_text())
EXTRA_BUDGET = (0, 1, 3, 8, 20)


@pytest.fixture(scope="module")
def compiler():
    return grammar_compiler("smollm2")


def _grammar(compiler, name):
    kind, source, oracle = GRAMMARS[name]
    text = (REPO / "tests" / "grammars" / source).read_text()
    compiled = compiler.compile_grammar(text) if kind == "ebnf" else compiler.compile_lark(text)
    parser = lark.Lark((REPO / "tests" / "grammars" / oracle).read_text(), parser="earley", lexer="dynamic")
    return compiled, parser.parse


def _schema(compiler, schema, **layout):
    """The schema compiled with generation's layout (json.dumps's separators) unless told."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    compiled = compiler.compile_json_schema(schema, **(layout or {"separators": (", ", ": ")}))
    return compiled, lambda text: validator.validate(json.loads(text))


def _dev_schema(name):
    doc = json.loads(require_shared(DATA / "maskbench-dev" / f"{name}.json").read_text())
    return doc.get("schema", doc)


def _walk(compiled, budget: int, rng, viable=None) -> tuple[bytes, int]:
    """A random walk through budgeted masks that stops only when nothing else is allowed, half
    its steps among tokens of at most two bytes (brackets, quotes, commas: structure), every
    prefix held to the oracle `viable` when given; returns (text, tokens before the stop token)."""
    matcher = pm.GrammarMatcher(compiled, max_tokens=budget)
    stops = set(matcher.stop_token_ids)
    vocab = compiled.tokenizer_info.decoded_vocab
    text, n = bytearray(), 0
    while not matcher.is_terminated():
        allowed = np.flatnonzero(matcher.get_next_token_mask())
        assert len(allowed), f"empty mask after {n} tokens of budget {budget}: {bytes(text)!r}"
        content = [t for t in allowed.tolist() if t not in stops]
        short = [t for t in content if len(vocab[t]) <= 2]
        pool = short if short and rng.random() < 0.5 else content
        token = int(rng.choice(pool)) if pool else int(allowed[0])
        assert matcher.accept_token(token)
        if token not in stops:
            text += vocab[token]
            n += 1
            assert viable is None or viable(decodable_prefix(bytes(text))), f"a dead prefix {bytes(text)!r}"
    assert n <= budget
    return bytes(text), n


def _least_budget(compiled) -> int:
    return pm.GrammarMatcher(compiled).min_tokens_to_finish()


def _language(compiler, name):
    """(compiled grammar, oracle that raises on text outside the language, prefix oracle) of a
    test case."""
    if name in GRAMMARS:
        compiled, parse = _grammar(compiler, name)
        return compiled, lambda text: parse(text), lambda text: grammar_file_prefix_viable(GRAMMARS[name][1], text)
    schema = PERSON if name.startswith("person") else _dev_schema(name)
    compiled, check = _schema(compiler, schema, **({"whitespace": "flexible"} if name == "person-flexible" else {}))
    return compiled, check, json_prefix_completes


@pytest.mark.parametrize("name", [*GRAMMARS, "person", "person-flexible", *DEV_SCHEMAS])
def test_walks_end_in_the_language_within_budget(compiler, name):
    compiled, check, viable = _language(compiler, name)
    least = _least_budget(compiled)
    rng = np.random.default_rng(1)
    for extra in EXTRA_BUDGET:
        for _ in range(3):
            text, n = _walk(compiled, least + extra, rng, viable)
            check(text.decode("utf-8"))


def test_least_budget_and_shortest_bytes_against_enumeration(compiler):
    """For small grammars, the shortest string found by enumerating all strings over the grammar's
    bytes equals the computed shortest completion, and the least budget is at most its length."""
    cases = {
        'root ::= "(" root ")" | "x"': b"()x",
        'root ::= "ab" item* "z"\nitem ::= "[" ("q" | item) "]"': b"abz[]q",
        'root ::= word (" " word)+\nword ::= [a-c] [a-c]?': b"abc ",
    }
    for ebnf, alphabet in cases.items():
        compiled = compiler.compile_grammar(ebnf)
        shortest = None
        matcher = pm.GrammarMatcher(compiled)
        for length in range(0, 7):
            for chars in itertools.product(alphabet, repeat=length):
                if matcher.accept_string(bytes(chars)):
                    ends = matcher.can_end()
                    matcher.reset()
                    if ends:
                        shortest = length
                        break
            if shortest is not None:
                break
        pda = compiled.pda
        start = int(pda.rule_start[pda.root_rule])
        completions = ShortestCompletions(pda)
        assert completions.dist[start] == shortest, ebnf
        witness = completions.completion(start)
        assert len(witness) == shortest
        matcher = pm.GrammarMatcher(compiled)
        assert matcher.accept_string(witness) and matcher.can_end()
        assert 1 <= _least_budget(compiled) <= shortest


def test_budget_below_the_least_raises_at_the_start(compiler):
    compiled, _ = _schema(compiler, PERSON)
    least = _least_budget(compiled)
    assert least > 3
    pm.GrammarMatcher(compiled, max_tokens=least)
    with pytest.raises(pm.BudgetTooSmallError, match=f"at least {least}"):
        pm.GrammarMatcher(compiled, max_tokens=least - 1)
    from pushmask.integrations.transformers import GrammarLogitsProcessor

    with pytest.raises(pm.BudgetTooSmallError, match="max_tokens"):
        GrammarLogitsProcessor(compiled, eos_token_id=2, max_new_tokens=least - 1)
    with pytest.raises(ValueError, match="max_tokens"):
        pm.GrammarMatcher(compiled, max_tokens=-1)


@pytest.mark.parametrize("name", ["json", "person"])
def test_generous_budget_changes_no_mask_and_tight_ones_only_remove(compiler, name):
    compiled = _language(compiler, name)[0]
    rng = np.random.default_rng(3)
    free = pm.GrammarMatcher(compiled)
    generous = pm.GrammarMatcher(compiled, max_tokens=1 << 30)
    tight = pm.GrammarMatcher(compiled, max_tokens=_least_budget(compiled) + 6)
    stops = set(free.stop_token_ids)
    removed = 0
    for _ in range(40):
        if tight.is_terminated():
            break
        mask = free.get_next_token_mask()
        assert np.array_equal(generous.get_next_token_mask(), mask)
        budgeted = tight.get_next_token_mask()
        assert not (budgeted & ~mask).any()
        removed += int((mask & ~budgeted).sum())
        choices = [t for t in np.flatnonzero(budgeted).tolist() if t not in stops] or np.flatnonzero(budgeted).tolist()
        token = int(rng.choice(choices))
        for matcher in (free, generous, tight):
            assert matcher.accept_token(token)
    assert removed > 0  # the tight budget did restrict something along the way


def test_kept_tokens_leave_an_exact_completion(compiler):
    """At tight points of a walk, every kept token (a sample of them) leaves a completion of at
    most the remaining tokens, by infilling's exact saturation over token gaps."""
    compiled, _ = _grammar(compiler, "parens")
    rng = np.random.default_rng(4)
    budget = 9
    matcher = pm.GrammarMatcher(compiled, max_tokens=budget)
    stops = set(matcher.stop_token_ids)
    checked = 0
    while not matcher.is_terminated():
        kept = [t for t in np.flatnonzero(matcher.get_next_token_mask()).tolist() if t not in stops]
        if not kept:
            break
        left = matcher.remaining_tokens
        for token in rng.choice(kept, size=min(2, len(kept)), replace=False).tolist():
            assert matcher.accept_token(token)
            assert pm.can_complete(matcher, [b"", b""], [pm.Gap.tokens(max=left - 1)]), (left, token)
            matcher.rollback(1)
            checked += 1
        assert matcher.accept_token(int(rng.choice(kept)))
    assert checked >= 6


@pytest.mark.parametrize("name", DEV_SCHEMAS[:2])
def test_restrict_drops_exactly_the_tokens_whose_exact_cost_is_over(compiler, name):
    """BudgetTable.restrict against a brute force: every allowed token run through the automaton
    (check_tokens), dropped iff the parse after it costs more than remaining - 1; along a walk
    with flexible whitespace (runs of spaces rise the most), at budgets from where it binds hard
    to where only the longest tokens could bind, and past where nothing can, in random order with
    the bounds learnt for the stack set kept between them (as consecutive steps inside a string)."""
    from pushmask.automata.stack import MAX_TOPS, PDA_BLOB, POOL_BLOB, WS_BLOB
    from pushmask.grammar.json_options import JsonOptions
    from pushmask.masks.budget import (
        STORED_MAX,
        bounds_memo,
        budget_table,
        check_tokens,
        cost_range,
        rising_tokens,
    )

    compiled = compiler.compile_json_schema(_dev_schema(name), options=JsonOptions.xgrammar())
    table = budget_table(compiled)
    matcher = pm.GrammarMatcher(compiled)
    runner = matcher._runner
    stops = set(matcher.stop_token_ids)
    rng = np.random.default_rng(5)
    n_words = -(-matcher.vocab_size // 32)
    bound_hit = 0
    for _ in range(30):
        mask = matcher.get_next_token_mask()
        words = np.packbits(
            np.resize(np.append(mask, np.zeros(32 * n_words - len(mask), bool)), 32 * n_words), bitorder="little"
        ).view(np.int32)
        stacks = matcher._state.stacks
        allowed = np.flatnonzero(mask[: len(table.token_rise)] & table.has_bytes)
        exact = np.full(len(table.token_rise), -1, dtype=np.int32)
        runner.run(
            check_tokens,
            PDA_BLOB,
            POOL_BLOB,
            WS_BLOB,
            stacks,
            table.vocab,
            table.offsets,
            allowed,
            table.cost,
            MAX_TOPS,
            exact,
        )
        greatest = int(cost_range(runner.pool.blob, table.cost, stacks)[1])
        worst = int(exact[allowed].max()) if len(allowed) else 0
        rise = int(table.token_rise[allowed].max()) if len(allowed) else 0
        memo = bounds_memo()  # one stack set's bounds, reused across budgets in random order
        budgets = sorted(
            {
                1,
                2,
                worst,
                worst + 1,
                greatest + rise,
                greatest + rise + 1,
                greatest + rise + 2,
                *rng.integers(1, worst + 2, 3).tolist(),
            }
        )
        for remaining in rng.permutation(budgets).tolist():
            got = words.copy()
            table.restrict(got, stacks, int(remaining), runner, matcher._stop_ids, memo)
            kept = np.unpackbits(got.view(np.uint8), bitorder="little")[: len(mask)].astype(bool)
            want = mask.copy()
            want[allowed[exact[allowed] > remaining - 1]] = False
            if remaining < 1:
                want[:] = False
            assert np.array_equal(kept, want), (remaining, np.flatnonzero(kept != want)[:10])
            bound_hit += int(want.sum() < mask.sum())
            slack = remaining - 1 - greatest
            out = np.empty(len(table.token_rise), dtype=np.int64)
            found = out[: rising_tokens(words, table.word_rise, table.token_rise, table.has_bytes, slack, out)]
            assert np.array_equal(found, allowed[table.token_rise[allowed] > slack])
        assert exact[allowed].max(initial=0) < STORED_MAX
        choices = [t for t in np.flatnonzero(mask).tolist() if t not in stops]
        if not choices:
            break
        assert matcher.accept_token(int(rng.choice(choices)))
    assert bound_hit > 0
