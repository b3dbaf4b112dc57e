"""Tests of the IR passes (pushmask.grammar.passes).

Languages are compared with a brute-force enumerator of the strings of bounded length over a
small alphabet (support.bounded_language), computed as a least fixpoint straight from the IR, so
it handles left recursion and is independent of the passes under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import all_strings, bounded_language, ir_accepts, iter_refs

from pushmask.core.errors import GrammarError
from pushmask.grammar.ebnf import parse_ebnf
from pushmask.grammar.ir import (
    Alt,
    Grammar,
    Ref,
    Repeat,
    Seq,
    lit,
    seq,
)
from pushmask.grammar.lark_frontend import parse_lark
from pushmask.grammar.passes import (
    PIPELINE,
    check_productive,
    check_references,
    eliminate_left_recursion,
    inline_small_rules,
    left_recursive_rules,
    loop_tail_recursion,
    normalize,
    nullable_rules,
    remove_unreachable,
)

GRAMMARS = Path(__file__).parent / "grammars"


def assert_contract(grammar: Grammar) -> None:
    """The post-normalize contract the engine relies on."""
    for name, body in grammar.rules.items():
        for target in iter_refs(body):
            assert target in grammar.rules, f"{name} references undefined {target}"
    assert remove_unreachable(grammar).rules.keys() == grammar.rules.keys()
    assert check_productive(grammar).rules.keys() == grammar.rules.keys()
    assert left_recursive_rules(grammar) == []


# ---------------------------------------------------------------------------------------------
# The enumerator itself, checked against hand-derived languages


def test_enumerator_on_known_languages():
    g = parse_ebnf('root ::= "a" root "b" | ""')
    assert bounded_language(g, "ab", 6) == {"", "ab", "aabb", "aaabbb"}
    g = parse_ebnf('root ::= root "a" | "b"')  # left recursive: the fixpoint still works
    assert bounded_language(g, "ab", 3) == {"b", "ba", "baa"}


def test_ir_accepts_agrees_with_enumerator():
    g = normalize(parse_ebnf((GRAMMARS / "arithmetic.gbnf").read_text()))
    alphabet = "a1+(=)\n"
    language = bounded_language(g, alphabet, 4)
    assert language  # the check below is not vacuous
    for s in all_strings(alphabet, 4):
        assert ir_accepts(g, s) == (s in language), s


# ---------------------------------------------------------------------------------------------
# check_references / remove_unreachable / check_productive


def test_check_references_reports_referencing_rule_position():
    g = Grammar({"root": Ref("a"), "a": Ref("missing")}, "root", {"root": (1, 1), "a": (2, 1)})
    with pytest.raises(GrammarError) as info:
        check_references(g)
    assert "missing" in str(info.value) and "'a'" in str(info.value)
    assert (info.value.line, info.value.column) == (2, 1)


def test_check_references_missing_root():
    with pytest.raises(GrammarError, match="root"):
        check_references(Grammar({"a": lit("x")}, "root"))


def test_remove_unreachable_keeps_order_and_drops_dead_rules():
    g = parse_ebnf('root ::= a b\nunused ::= "u" unused2\nunused2 ::= "v"\nb ::= "b"\na ::= "a"')
    out = remove_unreachable(g)
    assert list(out.rules) == ["root", "b", "a"]
    assert "unused" not in out.positions


def test_check_productive_replaces_empty_rules_with_nothing():
    g = parse_ebnf('root ::= "x" | loop "y"\nloop ::= "a" loop')
    out = check_productive(g)
    assert "loop" not in out.rules
    assert out.rules["root"] == lit("x")
    assert bounded_language(out, "axy", 4) == bounded_language(g, "axy", 4) == {"x"}


def test_check_productive_empty_language_is_an_error_with_position():
    g = parse_ebnf('# comment\nroot ::= "a" root\n')
    with pytest.raises(GrammarError, match="accepts no string") as info:
        check_productive(g)
    assert (info.value.line, info.value.column) == (2, 1)


def test_empty_class_makes_rule_unproductive():
    g = parse_ebnf('root ::= [^\\x00-\\U0010FFFF] | "ok"')
    assert bounded_language(normalize(g), "ok", 3) == {"ok"}


# ---------------------------------------------------------------------------------------------
# Left recursion


def _check_elimination(text: str, alphabet: str, max_len: int, root: str = "root") -> Grammar:
    g = parse_ebnf(text, root)
    assert left_recursive_rules(g), "test grammar should be left recursive"
    out = eliminate_left_recursion(g)
    assert left_recursive_rules(out) == []
    assert bounded_language(out, alphabet, max_len) == bounded_language(g, alphabet, max_len)
    return out


def test_direct_left_recursion_becomes_a_loop():
    out = _check_elimination('root ::= root "a" | "b"', "ab", 6)
    # A ::= A a | b  becomes  A ::= b a*  (no helper rule)
    assert out.rules["root"] == seq(lit("b"), Repeat(lit("a"), 0, None))


def test_direct_left_recursion_several_alternatives():
    _check_elimination('root ::= root "+" root | root "*" "x" | "x" | "(" root ")"', "x+*()", 5)


def test_indirect_left_recursion():
    text = 'root ::= a\na ::= b "x" | "y"\nb ::= a "z" | c\nc ::= "q"? a "w" | "v"'
    _check_elimination(text, "xyzqwv", 5)


def test_left_recursion_behind_nullable_prefix_is_eliminated():
    # `ws? root` hides left recursion behind an optional prefix
    _check_elimination('root ::= ws root "x" | "y"\nws ::= " "?', "xy ", 5)
    _check_elimination('root ::= (" " | "")* root "x" | "y"', "xy ", 5)


def test_left_recursion_behind_a_rule_that_only_matches_empty():
    g = parse_ebnf('root ::= ws root "x" | "y"\nws ::= ""')
    out = normalize(g)
    assert_contract(out)
    assert bounded_language(out, "xy", 5) == bounded_language(g, "xy", 5) == {"y", "yx", "yxx", "yxxx", "yxxxx"}


def test_left_recursion_inside_repeat():
    _check_elimination('root ::= (root "x")* "y"', "xy", 6)


def test_three_rule_cycle_with_repeats():
    text = 'root ::= e\ne ::= t ("+" t)* | e "-" t\nt ::= f | t "*" f\nf ::= "n" | "(" e ")" | e "!"'
    _check_elimination(text, "n+-*()!", 4)


def _ring(n: int) -> str:
    """n rules in one left-recursive ring, each also recursing back to the first rule."""
    return "\n".join(["root ::= a0"] + [f'a{i} ::= a{(i + 1) % n} "o" | a0 "p" | "x{i % 2}"' for i in range(n)])


def test_indirect_left_recursion_ring_keeps_language():
    _check_elimination(_ring(4), "opx01", 5)


def test_indirect_left_recursion_does_not_blow_up():
    """Plain Paull copies alternatives exponentially along a ring; helper rules keep it small."""

    from pushmask.grammar.passes import expr_size

    out = normalize(parse_ebnf(_ring(30)))
    assert sum(expr_size(body) for body in out.rules.values()) < 100_000
    assert_contract(out)


def test_unit_cycle_is_removed():
    _check_elimination('root ::= a | "x"\na ::= root | "y"', "xy", 3)


def test_right_and_middle_recursion_are_left_alone():
    g = parse_ebnf((GRAMMARS / "parens.ebnf").read_text())
    assert eliminate_left_recursion(g).rules == g.rules
    out = normalize(g)
    assert_contract(out)
    # middle recursion stays a rule reference
    assert any("root" in set(iter_refs(body)) for body in out.rules.values())


def test_tail_recursion_becomes_a_loop_with_the_same_language():
    """XGrammar's right-recursive JSON string rule: a loop after the pass (no reference left),
    the same strings as Python's `re` on the equivalent regex, and 10,000 characters are read
    (as references, every character left one more live stack: past the stack-tops limit)."""
    import re

    import pushmask as pm
    from pushmask.testing import _is_grammar_accept_string

    text = r"""root ::= "\"" basic_string "\""
basic_string ::= "" | [^"\\] basic_string | "\\" escape basic_string
escape ::= ["\\nu] | "u" [0-9] [0-9]
"""
    g = parse_ebnf(text)
    looped = loop_tail_recursion(g)
    assert "basic_string" in set(iter_refs(g.rules["basic_string"]))
    assert "basic_string" not in set(iter_refs(looped.rules["basic_string"]))
    oracle = re.compile(r'"(?:[^"\\]|\\(?:["\\nu]|u[0-9][0-9]))*"')
    alphabet = 'a"\\u1'
    language = bounded_language(normalize(g), alphabet, 5)
    assert len(language) > 10  # not vacuous
    for s in all_strings(alphabet, 5):
        assert (s in language) == bool(oracle.fullmatch(s)), s
    assert _is_grammar_accept_string(pm.Grammar.from_ebnf(text), '"' + "x" * 10_000 + '\\u12"')


def test_middle_and_mixed_recursion_are_not_looped():
    for text in ('root ::= "(" root ")" root | ""', 'root ::= "a" root | root "b" | "c"', 'root ::= "a" root'):
        g = parse_ebnf(text)
        assert loop_tail_recursion(g).rules == g.rules


def test_left_recursion_through_nullable_rules_of_the_cycle():
    # `a` is nullable and inside the cycle, so `a root` hides `root` at its own left edge;
    # the cycle is made epsilon-free first (a ::= a__nonempty | "").
    _check_elimination('root ::= a root "x" | "y"\na ::= root "z" | ""', "xyz", 6)
    _check_elimination('root ::= root root "x" | ""', "x", 6)
    _check_elimination('root ::= a b "c"\na ::= b? | "q"\nb ::= a "x" | ""', "xcq", 6)


def test_left_recursion_that_survives_is_a_clear_error(monkeypatch):
    """The final safety net: if elimination leaves left recursion, say which rules and how to fix."""
    from pushmask.grammar import passes

    monkeypatch.setattr(passes._LeftRecursionEliminator, "eliminate", lambda self, names: None)
    g = parse_ebnf('x ::= "1"\nroot ::= a root "x" | "y"\na ::= root "z" | ""')
    with pytest.raises(GrammarError) as info:
        normalize(g)
    message = str(info.value)
    assert "left recursion" in message and "a, root" in message
    assert "make that prefix non-empty" in message
    assert (info.value.line, info.value.column) == (3, 1)


# ---------------------------------------------------------------------------------------------
# Inlining and the whole pipeline


def test_inline_small_rules_keeps_root_and_language():
    g = parse_ebnf('root ::= pair ("," pair)*\npair ::= key ":" value\nkey ::= [a-c]\nvalue ::= [0-9] | "(" root ")"')
    out = inline_small_rules(g)
    assert out.root == "root" and "root" in out.rules
    assert "key" not in out.rules  # tiny: inlined
    assert "value" in out.rules or "pair" in out.rules  # recursion keeps a rule reference
    assert bounded_language(out, "ab:1,()", 6) == bounded_language(g, "ab:1,()", 6)
    assert_contract(out)


def test_rules_built_once_match_a_tree_expansion_count():
    """`_built_once` (a pruned walk over shared sub-expressions) agrees with counting every
    reference in the bodies expanded as trees, x{m,n} copying its item n times (m if unbounded)."""
    import random

    from pushmask.grammar.passes import _built_once

    def tree_copies(expr, counts, copies=1):
        if isinstance(expr, Ref):
            counts[expr.name] = counts.get(expr.name, 0) + copies
        elif isinstance(expr, (Seq, Alt)):
            for item in expr.items:
                tree_copies(item, counts, copies)
        elif isinstance(expr, Repeat):
            tree_copies(expr.item, counts, copies * max(1, expr.max if expr.max is not None else expr.min))

    rng = random.Random(3)
    names = [f"r{i}" for i in range(6)]
    for _ in range(300):
        pool = [Ref(rng.choice(names)) for _ in range(3)] + [lit("x")]
        for _ in range(rng.randint(1, 8)):  # later nodes reuse earlier ones: a DAG
            kind = rng.choice((Seq, Alt, Repeat))
            if kind is Repeat:
                lo = rng.randint(0, 2)
                pool.append(Repeat(rng.choice(pool), lo, rng.choice((None, lo + rng.randint(0, 2)))))
            else:
                pool.append(kind(tuple(rng.choice(pool) for _ in range(rng.randint(1, 3)))))
        bodies = [rng.choice(pool) for _ in range(rng.randint(1, 3))]
        counts: dict[str, int] = {}
        for body in bodies:
            tree_copies(body, counts)
        wanted = set(rng.sample(names, 4))
        assert _built_once(bodies, wanted) == {name for name in wanted if counts.get(name) == 1}


def test_long_rule_chains_normalize_quickly_and_stay_shallow():

    from pushmask.grammar.ir import alt

    n = 3000
    rules = {"root": Ref("r0")}
    for i in range(n):
        rules[f"r{i}"] = alt(seq(lit("a"), Ref(f"r{i + 1}")), lit("b")) if i < n - 1 else lit("z")
    g = Grammar(dict(reversed(list(rules.items()))), "root")  # worst order for naive fixpoints
    out = normalize(g)
    assert_contract(out)
    assert ir_accepts(out, "aab") and ir_accepts(out, "b")
    assert not ir_accepts(out, "aaz") and not ir_accepts(out, "aa")  # "z" only after 2999 a's


def test_pipeline_is_a_list_of_passes_that_compose_to_normalize():
    g = parse_lark((GRAMMARS / "arithmetic.lark").read_text())
    step = g
    for p in PIPELINE:
        step = p(step)
    assert step.rules == normalize(g).rules


def test_nullable_rules():
    g = parse_ebnf('root ::= a b\na ::= "x"?\nb ::= a a | "y"\nc ::= "z"')
    assert nullable_rules(g) == {"root", "a", "b"}


@pytest.mark.parametrize(
    "file, alphabet, max_len",
    [
        ("arithmetic.lark", "1+*(- ", 4),
        ("parens.lark", "()[]", 6),
    ],
)
def test_normalized_lark_grammar_matches_lark_parser(file, alphabet, max_len):
    """normalize(parse_lark(g)) accepts exactly what lark's Earley parser accepts (bounded)."""
    import lark

    text = (GRAMMARS / file).read_text()
    oracle = lark.Lark(text, parser="earley", lexer="dynamic")
    out = normalize(parse_lark(text))
    assert_contract(out)
    ours = bounded_language(out, alphabet, max_len)
    for s in all_strings(alphabet, max_len):
        try:
            oracle.parse(s)
            accepted = True
        except lark.exceptions.LarkError:
            accepted = False
        assert accepted == (s in ours), f"{s!r}: lark {'accepts' if accepted else 'rejects'}"


@pytest.mark.parametrize(
    "file", ["json.gbnf", "llama_json.gbnf", "chess.gbnf", "arithmetic.gbnf", "list.gbnf", "parens.ebnf"]
)
def test_normalize_keeps_language_of_test_grammars(file):
    g = parse_ebnf((GRAMMARS / file).read_text())
    out = normalize(g)
    assert_contract(out)
    alphabet = {
        "json.gbnf": '{}[]":,1 a',
        "llama_json.gbnf": '{}[]":,1 a',
        "chess.gbnf": "1. e4\n",
        "arithmetic.gbnf": "a1+=()\n",
        "list.gbnf": "- a\n",
        "parens.ebnf": "()[]",
    }[file]
    max_len = 4 if "json" in file else 5
    assert bounded_language(out, alphabet, max_len) == bounded_language(g, alphabet, max_len)
