"""Per-rule sampling temperatures (XGrammar's `name[temperature=t]`), in Lark and in EBNF.

The oracle is independent of the automaton: every derivation of a small acyclic grammar is
enumerated with the span each rule covers, and the temperature after a prefix p is the greatest,
over the derivations of strings longer than p that start with p, of the temperature of the
innermost rule with one whose span covers the next character (the default where none does).
Temperatures never change the language or the masks: the masks of a real tokenizer are compared
with and without the attributes, and checked token by token against accept_token.
"""

from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest

import pushmask as pm
from pushmask.core.errors import GrammarError
from pushmask.core.serialization import DeserializeFormatError, content_digest

BYTE_VOCAB = [bytes([b]) for b in range(256)] + [b"</s>"]
BYTES = pm.TokenizerInfo.from_vocab(BYTE_VOCAB, "raw", stop_token_ids=[256])
LITERALS = ("a", "b", "ab", "ba")


def byte_compiler() -> pm.GrammarCompiler:
    return pm.GrammarCompiler(BYTES, cache_enabled=False)


# --- the oracle --------------------------------------------------------------------------------


def derivations(spec: dict, rule: str, start: int = 0):
    """Every (text, spans) rule `rule` derives from offset `start`; spans are (rule, begin, end),
    each rule's after the spans inside it (so the first covering span is the innermost)."""
    for alternative in spec[rule]:
        for text, spans in _sequence(spec, alternative, start):
            yield text, spans + [(rule, start, start + len(text))]


def _sequence(spec: dict, symbols: list, start: int):
    if not symbols:
        yield "", []
        return
    first, rest = symbols[0], symbols[1:]
    heads = derivations(spec, first, start) if first in spec else [(first, [])]
    for text, spans in heads:
        for tail, tail_spans in _sequence(spec, rest, start + len(text)):
            yield text + tail, spans + tail_spans


def expected_temperature(all_derivations, temperatures: dict, prefix: str, default):
    found = set()
    k = len(prefix)
    for text, spans in all_derivations:
        if len(text) > k and text.startswith(prefix):
            covering = [rule for rule, begin, end in spans if begin <= k < end and rule in temperatures]
            if covering:
                found.add(temperatures[covering[0]])
    return max(found) if found else default


# --- grammars ----------------------------------------------------------------------------------


def random_spec(rng: random.Random, lark: bool) -> tuple[dict, dict]:
    """An acyclic grammar (rule i refers to later rules only) and temperatures on some rules;
    for Lark only on rules made of literals (XGrammar's terminal rules)."""
    names = [f"r{i}" for i in range(4)]
    spec = {}
    for i, name in enumerate(names):
        alternatives = []
        for _ in range(rng.randint(1, 3)):
            symbols = [rng.choice(LITERALS + tuple(names[i + 1 :])) for _ in range(rng.randint(1, 2))]
            alternatives.append(symbols)
        spec[name] = alternatives
    temperatures = {}
    for name in names:
        literal_only = all(symbol not in spec for alternative in spec[name] for symbol in alternative)
        if rng.random() < 0.5 and (literal_only or not lark):
            temperatures[name] = rng.choice((0.0, 0.25, 0.5, 0.9))
    return spec, temperatures


def grammar_text(spec: dict, temperatures: dict, defines: str) -> str:
    """The grammar of `spec` in EBNF (`defines` "::=") or Lark (":"), with its temperatures."""
    lines = []
    for name, alternatives in spec.items():
        header = f"{name}[temperature={temperatures[name]}]" if name in temperatures else name
        body = " | ".join(" ".join(s if s in spec else json.dumps(s) for s in alt) for alt in alternatives)
        lines.append(f"{header}{' ' if defines == '::=' else ''}{defines} {body}")
    return "\n".join(lines)


def ebnf_text(spec: dict, temperatures: dict) -> str:
    return grammar_text(spec, temperatures, "::=")


def lark_text(spec: dict, temperatures: dict) -> str:
    return grammar_text(spec, temperatures, ":")


def check_walks(compiled, spec: dict, temperatures: dict, root: str, default) -> int:
    """Walk every string of the language character by character; at each prefix the matcher's
    temperature is the oracle's (and again after a rollback and in a fork).  Returns the checks."""
    every = list(derivations(spec, root))
    checks = 0
    for text in sorted({text for text, _ in every}):
        matcher = pm.GrammarMatcher(compiled, default_temperature=default, terminate_without_stop_token=True)
        for k in range(len(text) + 1):
            want = expected_temperature(every, temperatures, text[:k], default)
            assert matcher.temperature == pytest.approx(want) if want is not None else matcher.temperature is None, (
                text,
                k,
            )
            checks += 1
            if k < len(text):
                assert matcher.accept_string(text[k])
        if text:
            matcher.rollback(1)
            want = expected_temperature(every, temperatures, text[:-1], default)
            assert matcher.fork().temperature == (pytest.approx(want) if want is not None else None)
    return checks


@pytest.mark.parametrize("seed", range(20))
def test_ebnf_temperatures_follow_the_derivations(seed: int) -> None:
    rng = random.Random(seed)
    spec, temperatures = random_spec(rng, lark=False)
    rules = {"root": [["r0"]], **spec}
    default = rng.choice((None, 0.1))
    compiled = byte_compiler().compile_grammar(ebnf_text(rules, temperatures))
    assert check_walks(compiled, rules, temperatures, "root", default) > 0


@pytest.mark.parametrize("seed", range(20))
def test_lark_temperatures_follow_the_derivations(seed: int) -> None:
    rng = random.Random(100 + seed)
    spec, temperatures = random_spec(rng, lark=True)
    rules = {"start": [["r0"]], **spec}
    default = rng.choice((None, 0.1))
    compiled = byte_compiler().compile_lark(lark_text(rules, temperatures))
    assert check_walks(compiled, rules, temperatures, "start", default) > 0


def test_subgrammars_keep_their_rule_and_their_own_temperatures() -> None:
    item = pm.Grammar.from_lark('start[temperature=0.3]: "x" | "y"')
    text = 'start: "a" value "z" | "a" other "z"\nvalue[temperature=0.6]: @item\nother[temperature=0.9]: %lark { start: "x" "x" }'
    compiled = byte_compiler().compile_lark(text, named_grammars={"item": item})
    matcher = pm.GrammarMatcher(compiled, default_temperature=0.1)
    assert matcher.temperature == pytest.approx(0.1)
    assert matcher.accept_string("a")
    assert matcher.temperature == pytest.approx(0.9)  # inner 0.3 (item's start) and 0.9 (other)
    assert matcher.accept_string("x")
    assert matcher.temperature == pytest.approx(0.9)  # only `other` reads on; value's item may end
    assert matcher.accept_string("xz")
    assert matcher.temperature == pytest.approx(0.1)


def test_notice_of_differing_temperatures_is_printed_once(capfd: pytest.CaptureFixture[str]) -> None:
    compiled = byte_compiler().compile_lark(
        'start: left | right\nleft[temperature=0.2]: "a"+\nright[temperature=0.9]: "ab"'
    )
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.temperature == pytest.approx(0.9)
    assert matcher.accept_string("a") and matcher.temperature == pytest.approx(0.9)
    assert matcher.accept_string("a") and matcher.temperature == pytest.approx(0.2)
    assert capfd.readouterr().err.count("Multiple active grammar paths specify different temperatures") == 1


def test_ignored_text_between_rules_has_no_temperature() -> None:
    compiled = byte_compiler().compile_lark('%ignore " "\nstart: hot hot\nhot[temperature=0.6]: "x" "y"')
    matcher = pm.GrammarMatcher(compiled, default_temperature=0.1)
    assert matcher.temperature == pytest.approx(0.6)
    assert matcher.accept_string("x")
    assert not matcher.fork().accept_string(" ")  # a temperature rule is one terminal: no skip inside
    assert matcher.accept_string("y") and matcher.temperature == pytest.approx(0.6)  # " " or the next x
    assert matcher.accept_string(" ") and matcher.temperature == pytest.approx(0.6)
    assert matcher.accept_string("xy") and matcher.temperature == pytest.approx(0.1)  # only " " is left


def test_draft_tree_and_batch_use_each_nodes_state() -> None:
    compiled = byte_compiler().compile_grammar('root ::= "a" value "z"\nvalue[temperature=0.6] ::= "x"+')
    matcher = pm.GrammarMatcher(compiled, default_temperature=0.1)
    torch = pytest.importorskip("torch")
    tokens = torch.tensor([ord("a"), ord("a"), ord("x"), ord("z")], dtype=torch.int64)
    next_token = torch.tensor([1, 2, 3, -1], dtype=torch.int64)
    next_sibling = torch.full((4,), -1, dtype=torch.int64)
    bitmask = pm.allocate_token_bitmask(4, BYTES.vocab_size)
    temperatures = torch.empty(4, dtype=torch.float32)
    assert matcher.traverse_draft_tree(next_token, next_sibling, tokens, bitmask, temperatures=temperatures)
    assert temperatures.tolist() == pytest.approx([0.1, 0.6, 0.6, 0.1])
    other = pm.GrammarMatcher(compiled)
    assert matcher.accept_string("ax") and other.accept_string("axxz")
    batch = torch.zeros(2, dtype=torch.float32)
    pm.BatchGrammarMatcher.batch_fill_temperature([matcher, other], batch)
    assert batch.tolist() == pytest.approx([0.6, -1.0])


# --- the language and the masks do not change ----------------------------------------------------

MASK_GRAMMARS = [
    (
        "lark",
        'start: "{" pair ("," pair)* "}"\npair: KEY ":" value\nvalue[temperature=0.7]: /[0-9]+( [a-z]+)?/\nKEY: /"[a-z]+"/',
    ),
    (
        "ebnf",
        'root ::= "[" item ("," item)* "]"\nitem[temperature=0.4] ::= word | "(" root ")"\nword[temperature=1.5] ::= [a-z]+',
    ),
]


def _without_temperatures(text: str) -> str:
    import re

    return re.sub(r"\[temperature=[0-9.]+\]", "", text)


@pytest.mark.parametrize("kind, text", MASK_GRAMMARS)
def test_temperatures_change_no_mask(smollm2_compiler, kind: str, text: str) -> None:
    compile_ = smollm2_compiler.compile_lark if kind == "lark" else smollm2_compiler.compile_grammar
    with_t, without = compile_(text), compile_(_without_temperatures(text))
    assert with_t.rule_temperatures is not None and without.rule_temperatures is None
    info = smollm2_compiler.tokenizer_info
    rng = np.random.default_rng(0)
    sample = rng.choice(info.vocab_size, 300, replace=False)
    for _walk in range(3):
        a, b = pm.GrammarMatcher(with_t), pm.GrammarMatcher(without)
        for _ in range(12):
            masks = [pm.allocate_token_bitmask(1, info.vocab_size) for _ in range(2)]
            a.fill_next_token_bitmask(masks[0])
            b.fill_next_token_bitmask(masks[1])
            assert np.array_equal(masks[0].numpy(), masks[1].numpy())
            bits = np.unpackbits(masks[0].numpy().view(np.uint8), bitorder="little")[: info.vocab_size]
            allowed = np.flatnonzero(bits)
            for token in set(sample.tolist()) | set(allowed[:200].tolist()):  # brute force: accept_token agrees
                assert a.fork().accept_token(int(token)) == bool(bits[token]), token
            choices = [t for t in allowed.tolist() if t not in info.stop_token_ids]
            if not choices:
                break
            token = int(rng.choice(choices))
            assert a.accept_token(token) and b.accept_token(token)


# --- serialization ---------------------------------------------------------------------------


def test_grammar_json_and_text_keep_temperatures() -> None:
    grammar = pm.Grammar.from_ebnf('root ::= "a" value\nvalue[temperature=0.75] ::= "x"+')
    restored = pm.Grammar.deserialize_json(grammar.serialize_json())
    assert restored.temperatures == {"value": 0.75} and restored == grammar
    assert "value[temperature=0.75] ::=" in str(restored)
    assert pm.Grammar.union(grammar, grammar).temperatures == {"g0_value": 0.75, "g1_value": 0.75}


def test_compiled_grammar_json_and_pickle_keep_temperatures() -> None:
    compiled = byte_compiler().compile_lark('start: "a" value\nvalue[temperature=0.75]: "x"')
    for restored in (
        pm.CompiledGrammar.deserialize_json(compiled.serialize_json(), BYTES),
        pickle.loads(pickle.dumps(compiled)),
    ):
        matcher = pm.GrammarMatcher(restored)
        assert matcher.temperature is None and matcher.accept_string("a")
        assert matcher.temperature == pytest.approx(0.75)


@pytest.mark.parametrize("temperatures", [[[0, -1.0]], [[999, 0.5]], [[0, "hot"]]])
def test_damaged_compiled_temperatures_are_refused(temperatures) -> None:
    compiled = byte_compiler().compile_lark('start: "a" value\nvalue[temperature=0.75]: "x"')
    payload = json.loads(compiled.serialize_json())
    payload["temperatures"] = temperatures
    payload["digest"] = content_digest(payload)
    with pytest.raises(DeserializeFormatError, match="temperature"):
        pm.CompiledGrammar.deserialize_json(json.dumps(payload), BYTES)


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message, line, column",
    [
        ('root ::= "a"\nr[temperature=-0.1] ::= "b"', "finite non-negative", 2, 15),
        ('root[temperature=1e999] ::= "a"', "finite non-negative", 1, 18),
        ('root[temperature=abc] ::= "a"', "expected number after temperature=", 1, 18),
        ('root[temperature=0.1, temperature=0.2] ::= "a"', "specified more than once", 1, 23),
        ('root[max_tokens=3, temperature=0.5] ::= "a"*', "attribute 'max_tokens' is not supported", 1, 6),
        ('root[lazy, temperature=0.5] ::= "a"*', "attribute 'lazy' is not supported on EBNF rules", 1, 6),
        ('root ::= a\na[temperature=0.5] ::= b "x" | "y"\nb ::= a "z" | "w"', "left-recursive", 2, 1),
    ],
)
def test_ebnf_attribute_errors(text: str, message: str, line: int, column: int) -> None:
    with pytest.raises(GrammarError, match=message) as error:
        byte_compiler().compile_grammar(text)
    assert (error.value.line, error.value.column) == (line, column)
    assert isinstance(error.value, RuntimeError)


@pytest.mark.parametrize(
    "text, message, line",
    [
        ('start: c\nc[temperature=0.5]: "a" child\nchild: "b"', "temperature is only supported on terminals", 3),
        ('start[temperature=-1]: "a"', "finite non-negative", 1),
        ('start: v\nv[temperature=0.5]: %json {"type": "integer"} "x"', "%json cannot be used in terminals", 2),
    ],
)
def test_lark_attribute_errors(text: str, message: str, line: int) -> None:
    with pytest.raises(GrammarError, match=message) as error:
        byte_compiler().compile_lark(text)
    assert error.value.line == line


def test_attribute_list_is_no_character_class_and_a_class_is_no_attribute_list() -> None:
    """`r[temperature=..] ::=` starts a rule; `x [ab]` at a rule's end stays a class."""
    compiled = byte_compiler().compile_grammar('root ::= x [ab]\nx[temperature=0.5] ::= "x"')
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.temperature == pytest.approx(0.5)
    assert matcher.accept_string("xa") and matcher.can_end()
