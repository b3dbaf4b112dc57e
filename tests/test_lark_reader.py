"""The fast Lark reader (grammar/lark_reader.py) against lark's own loader.

Each plain grammar is read both ways and compiled over a byte vocabulary; strings drawn by random
mask-guided walks over either automaton must be accepted by the other, and lark's Earley parser
(dynamic_complete lexer, the frontend's documented semantics) must agree on every drawn string.
Every prefix of a walk must be viable for both (the other matcher, support.lark_prefix_viable),
and the mask must never be empty before the end.
Grammars outside the subset must fall back to lark, with lark's errors."""

from __future__ import annotations

import random

import lark
import pytest
from support import accepts_text, decodable_prefix, lark_prefix_viable

import pushmask as pm
from pushmask.core.errors import GrammarError
from pushmask.grammar import lark_frontend
from pushmask.grammar.lark_frontend import parse_lark
from pushmask.grammar.lark_reader import read_plain_lark

PLAIN = {
    "alternatives_and_lines": 'start: "a" b\n     | "c" "d"?\n\nb: "x" | "y"\n',
    "operators_and_groups": 'start: ("ab" | "c")+ ["-" NUM] ("!")* DIG ~ 2 ("x" | "y") ~ 1..3\n'
    'NUM: DIG+ ("." DIG+)?\nDIG: "0".."9"\n',
    "modifiers_aliases_priorities": '?start: pair | single -> one\n!pair.2: single "," single\n'
    "_single: WORD\nsingle: _single\nWORD.-1: /[a-c]{1,3}/\n",
    "comments": '// a comment line\nstart: item+  // trailing\n# hash comment\n  | "z"\n'
    'item: "i" # another\n    | "j"\n',
    "case_and_regex_flags": 'start: "Sel"i NAME "=" VALUE\nNAME: /[a-z]+/i\nVALUE: /[0-9]+/ | "\\"" /[^"\\\\]*/ "\\""\n',
    "ignore_terminal": 'start: word ("," word)*\nword: LETTER+\nLETTER: "a".."e"\n%ignore WS\nWS: /[ \\t]+/\n',
    "ignore_literal": 'start: "x" "y"* "z"\n%ignore " "\n',
    "ignore_comment_longest_match": 'start: word ("," word)*\nword: /[a-z]+/\n%ignore /--[^\\n]*/\n%ignore /[ \\n]+/\n',
    "escapes": 'start: "\\\\n" | "\\n" | "tab\\there" | /\\// "/"\n',
    "empty_alternative": 'start: "a" opt "b"\nopt: | "o" | "p" opt\n',
    "recursion": 'start: expr\n?expr: expr "+" term | term\nterm: "(" expr ")" | /[0-9]/\n',
}

FALLBACK = {
    "import": "start: INT\n%import common.INT\n",
    "template": 'start: pair{"a"}\npair{x}: x "," x\n',
    "declare": "start: X\n%declare X\n",
    "undefined": "start: missing\n",
    "recursive_terminal": 'start: A\nA: "a" A | "b"\n',
    "empty_terminal": 'start: A "b"\nA: "a"?\n',
    "lazy_in_composite": 'start: C\nC: "<" /.*?/ ">"\n',
    "duplicate": 'start: "a"\nstart: "b"\n',
    "rule_in_terminal": 'start: A\nA: "a" b\nb: "b"\n',
    "bad_regex": "start: /a(/\n",
}


def _compiler():
    vocab = [bytes([b]) for b in range(256)] + [b"</s>"]
    info = pm.TokenizerInfo.from_vocab(vocab, "raw", stop_token_ids=[256])
    return pm.GrammarCompiler(info)


def _read(text: str, fast: bool, monkeypatch) -> pm.CompiledGrammar:
    monkeypatch.setattr(lark_frontend, "FAST_READER_MIN_CHARS", 0 if fast else 10**12)
    return _compiler().compile_ir(parse_lark(text))


def _walk(compiled, rng: random.Random, viable, max_len: int = 24) -> str | None:
    """A random string of the language (None when the walk ran past max_len without an end).
    The mask must not be empty before the end, and every prefix must pass `viable`."""
    matcher = pm.GrammarMatcher(compiled)
    out = bytearray()
    while True:
        allowed = [t for t in matcher.get_next_token_mask().nonzero()[0].tolist() if t < 256]
        can_end = matcher.can_end()
        assert allowed or can_end, f"the mask is empty before the end, after {bytes(out)!r}"
        if can_end and (not allowed or rng.random() < 0.25 or len(out) >= max_len):
            return out.decode("utf-8", errors="strict")
        if len(out) > 4 * max_len:
            return None
        token = rng.choice(allowed)
        assert matcher.accept_token(token)
        out.append(token)
        prefix = decodable_prefix(bytes(out))
        assert viable(prefix), f"the mask allowed a dead prefix {prefix!r}"


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_grammars_read_fast_mean_what_lark_reads(name, monkeypatch):
    text = PLAIN[name]
    assert read_plain_lark(text, "start", lambda raw, p: lark_frontend._pattern_to_ir(raw, p, 10_000, 100)) is not None
    fast = _read(text, True, monkeypatch)
    slow = _read(text, False, monkeypatch)
    oracle = lark.Lark(text, parser="earley", lexer="dynamic_complete")
    rng = random.Random(name)
    drawn = 0

    def viable_for(other):
        """Both oracles: lark's Earley parser, and the other reader's matcher takes the prefix."""
        return lambda prefix: lark_prefix_viable(oracle, prefix) and pm.GrammarMatcher(other).accept_string(prefix)

    for source, other in ((fast, slow), (slow, fast)):
        for _ in range(40):
            text_drawn = _walk(source, rng, viable_for(other))
            if text_drawn is None:
                continue
            drawn += 1
            assert accepts_text(other, text_drawn), text_drawn
            oracle.parse(text_drawn)  # raises when lark's parser disagrees
    assert drawn >= 40


@pytest.mark.parametrize("name", sorted(FALLBACK))
def test_grammars_outside_the_subset_go_through_lark(name, monkeypatch):
    text = FALLBACK[name]
    assert read_plain_lark(text, "start", lambda raw, p: lark_frontend._pattern_to_ir(raw, p, 10_000, 100)) is None
    outcomes = []
    for fast in (True, False):
        monkeypatch.setattr(lark_frontend, "FAST_READER_MIN_CHARS", 0 if fast else 10**12)
        try:
            outcomes.append(("ok", sorted(parse_lark(text).rules)))
        except GrammarError as exc:
            outcomes.append(("error", str(exc)))
    assert outcomes[0] == outcomes[1]


def test_big_grammar_takes_the_fast_path_and_keeps_its_language():
    rng = random.Random(7)
    words = sorted({"".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(3_000)})
    text = 'start: item ("," item)*\nitem: ' + " | ".join(f"r{i}" for i in range(len(words))) + "\n"
    text += "".join(f'r{i}: "{w}"\n' for i, w in enumerate(words))
    text += '%ignore " "\n'
    assert len(text) >= lark_frontend.FAST_READER_MIN_CHARS
    assert read_plain_lark(text, "start", lambda raw, p: lark_frontend._pattern_to_ir(raw, p, 10_000, 100)) is not None
    compiled = _compiler().compile_lark(text)
    assert accepts_text(compiled, f"{words[0]}, {words[-1]} ,{words[1500]}")
    assert not accepts_text(compiled, f"{words[0]},,{words[1]}")
    assert not accepts_text(compiled, words[0] + "zz")
