"""Counted repetitions too big for one rule automaton (`Regex("(ab){2,50000}c")`) are split into
block rules by `passes.split_large_repeats` when the EBNF reader reads the macro.  Oracles: Python's `re.fullmatch` over every count
around the bounds and the block edges (with the thresholds made small, so that small counts
split), and the masks of the split grammar equal, token by token, those of the same grammar
compiled whole under a larger `max_rule_states`."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pushmask as pm
from pushmask.grammar import passes
from pushmask.testing import _is_grammar_accept_string


@pytest.fixture
def small_blocks(monkeypatch):
    """Split every repetition of more than 12 positions, in blocks of 4 positions."""
    monkeypatch.setattr(passes, "SPLIT_REPEAT_SIZE", 12)
    monkeypatch.setattr(passes, "REPEAT_BLOCK_SIZE", 4)


PATTERNS = {  # pattern: the units whose runs (and the runs with a last "b" or "c") are tried
    "(ab){2,23}c": ["ab"],
    "(ab){0,17}": ["ab"],
    "(ab){9,}c": ["ab"],
    "(ab){13}": ["ab"],
    "(a?){3,21}b": ["a"],
    "((ab){3}c){2,7}": ["abababc", "ab"],
    "[xy]{5,40}": ["x", "xy"],
}


def split_rules(grammar: pm.Grammar) -> int:
    """The block rules the EBNF reader added (the passes may inline small ones again)."""
    return sum(".block" in name for name in grammar.rules)


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_split_counts_match_what_re_matches(small_blocks, pattern):
    grammar = pm.Grammar.from_ebnf(f'root ::= Regex("{pattern}")')
    assert split_rules(grammar) > 0
    for unit in PATTERNS[pattern]:
        for n in range(0, 50):
            for text in (unit * n, unit * n + "b", unit * n + "c"):
                expected = re.fullmatch(pattern, text) is not None
                assert _is_grammar_accept_string(grammar, text) == expected, (pattern, text)


def test_the_same_masks_as_one_automaton(monkeypatch):
    vocab = [bytes([b]) for b in b"abcxy"] + [b"ab", b"abab", b"ba", b"abc", b"</s>"]
    info = pm.TokenizerInfo.from_vocab(vocab, "raw", stop_token_ids=[len(vocab) - 1])
    ebnf = 'root ::= Regex("(ab){2,23}c") | "x" r\nr ::= Regex("(a?){3,21}b")'
    texts = ["ab" * 23 + "c", "ab" * 5, "x" + "a" * 21 + "b", "x" + "a" * 22, "abab" * 6 + "c"]

    def masks(compiled) -> list[list[int]]:
        rows = []
        for text in texts:
            matcher = pm.GrammarMatcher(compiled)
            bitmask = pm.allocate_token_bitmask(1, info.vocab_size)
            for byte in text.encode():
                matcher.fill_next_token_bitmask(bitmask)
                rows.append(np.asarray(bitmask).tolist())
                if not matcher.accept_token(vocab.index(bytes([byte]))):
                    break
            rows.append([matcher.is_completed()])
        return rows

    whole = masks(pm.GrammarCompiler(info, cache_enabled=False).compile_grammar(pm.Grammar.from_ebnf(ebnf)))
    monkeypatch.setattr(passes, "SPLIT_REPEAT_SIZE", 12)
    monkeypatch.setattr(passes, "REPEAT_BLOCK_SIZE", 4)
    grammar = pm.Grammar.from_ebnf(ebnf)
    assert split_rules(grammar) > 0
    assert masks(pm.GrammarCompiler(info, cache_enabled=False).compile_grammar(grammar)) == whole


def test_xgrammar_large_repetitions():
    """XGrammar's tests of counts past one automaton (the default limits)."""
    grammar = pm.Grammar.from_ebnf('root ::= Regex("(ab){2,50000}c")')
    assert split_rules(grammar) > 0
    for n, accepted in ((1, False), (2, True), (1000, True), (50000, True), (50001, False)):
        assert _is_grammar_accept_string(grammar, "ab" * n + "c") == accepted, n
    assert not _is_grammar_accept_string(grammar, "ab" * 2)
    folded = pm.Grammar.from_ebnf('root ::= Regex("(?i)(ab){2,50000}c")')
    assert _is_grammar_accept_string(folded, "aBAb" * 100 + "C") and not _is_grammar_accept_string(folded, "aBc")
    nullable = pm.Grammar.from_ebnf('root ::= r "z"\nr ::= Regex("(ab){0,50000}")')
    assert _is_grammar_accept_string(nullable, "z") and _is_grammar_accept_string(nullable, "ababz")
    huge = pm.Grammar.from_ebnf('root ::= Regex("a{1000000}")')  # blocks of blocks
    assert _is_grammar_accept_string(huge, "a" * 1000000) and not _is_grammar_accept_string(huge, "a" * 999999)
    again = pm.Grammar.deserialize_json(folded.serialize_json())
    assert again == folded and str(again) == str(folded) and _is_grammar_accept_string(again, "abABc")


def test_block_rules_cannot_clash_with_the_texts_rules():
    grammar = pm.Grammar.from_ebnf('root ::= Regex("(ab){2,60000}") root_block1 "c"\nroot_block1 ::= "x"')
    assert (
        sum(".block" in name for name in grammar.rules) > 0
        and grammar.rules["root_block1"] == pm.Grammar.from_ebnf('root ::= "x"').rules["root"]
    )
    assert _is_grammar_accept_string(grammar, "ab" * 3 + "xc") and not _is_grammar_accept_string(grammar, "abxc")


def test_other_regexes_keep_the_limit():
    """Only EBNF's Regex(...) splits: a regex grammar, a Lark terminal and a regex that must be
    one automaton (a lazy Lark terminal) still refuse a count past `max_rule_states`."""
    from pushmask.grammar.regex import regex_to_ir

    with pytest.raises(pm.LimitExceededError, match="max_rule_states"):
        regex_to_ir("(ab){2,50000}c", automaton=True, split_counts=True)
    with pytest.raises(pm.LimitExceededError, match="max_rule_states"):
        pm.Grammar.from_regex("(ab){2,50000}c")
    with pytest.raises(pm.LimitExceededError, match="max_rule_states"):
        pm.Grammar.from_lark("start: /(ab){2,50000}c/")
