"""Rule DFAs: the numba construction (automata/thompson_kernels.py, automata/dfa_kernels.py)
against the pure-Python one it replaced (tests/rule_dfa_reference.py, kept verbatim as the
oracle), RuleDfa for RuleDfa, on every rule of a sample of dev schemas and of the test grammars,
and on targeted cases: overlapping ranges, references, epsilon loops (these also against
`re.fullmatch`), the empty language, shared sub-expressions, long repetitions and budgets.

The Python construction left DFAs with more than 2000 states after trimming unminimised; the
numba one minimises every DFA, so the oracle runs with minimize_up_to unbounded (below 2000
states both settings give the same automaton).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re

import numpy as np
import pytest
from rule_dfa_reference import construct_rule_dfa_python
from support import DATA, REPO, require_shared

from pushmask.automata import dfa as dfa_module
from pushmask.automata.dfa import RuleDfa, _construct_rule_dfa, _structure_digest, build_rule_dfa, clear_dfa_cache
from pushmask.automata.dfa_kernels import MAX_SEQUENCES, utf8_sequences
from pushmask.automata.utf8 import utf8_byte_ranges
from pushmask.core.errors import LimitExceededError, PushmaskError
from pushmask.grammar.ebnf import parse_ebnf
from pushmask.grammar.ir import (
    EPSILON,
    NOTHING,
    Alt,
    ByteClass,
    CharClass,
    CharFsm,
    Ref,
    Repeat,
    Seq,
    alt,
    char_fsm_of_columns,
    char_fsm_table,
    iter_nodes,
    lit,
    opt,
    ref,
    rep,
    seq,
    star,
)
from pushmask.grammar.json_schema import json_schema_to_grammar
from pushmask.grammar.lark_frontend import parse_lark
from pushmask.grammar.passes import _fsm_nonempty, _search_final, normalize
from pushmask.grammar.regex import parse_regex, regex_to_ir

UNBOUNDED = 10**9
MAX_STATES = 100_000
SAMPLE_SCHEMAS = 60


def reference(body, max_states=MAX_STATES) -> RuleDfa:
    return construct_rule_dfa_python(body, max_states, minimize_up_to=UNBOUNDED)


def sample_grammars():
    """(label, normalised grammar) for every 95th dev schema (60 of them) and the test grammars."""
    files = sorted(require_shared(DATA / "maskbench-dev").glob("*.json"))
    for path in files[:: len(files) // SAMPLE_SCHEMAS][:SAMPLE_SCHEMAS]:
        doc = json.loads(path.read_text())
        schema = doc.get("schema", doc) if isinstance(doc, dict) else doc
        try:
            yield (
                path.name,
                normalize(json_schema_to_grammar(schema, property_order="any", additional_properties_default=True)),
            )
        except PushmaskError:
            continue  # a schema the front end rejects has no rules to compare
    for path in sorted((REPO / "tests" / "grammars").iterdir()):
        parse = parse_lark if path.suffix == ".lark" else parse_ebnf
        yield path.name, normalize(parse(path.read_text()))


@functools.cache
def sample_bodies() -> list[tuple[str, object]]:
    """Distinct rule bodies (up to the names they reference) of the sample grammars."""
    seen, out = set(), []
    for label, grammar in sample_grammars():
        for name, body in grammar.rules.items():
            key = _structure_digest(body)[0]
            if key not in seen:
                seen.add(key)
                out.append((f"{label}:{name}", body))
    return out


def test_sample_rules_match_the_python_construction():
    bodies = sample_bodies()
    labels = {label.split(":")[0] for label, _ in bodies}
    assert len(labels) >= 60  # most of the 60 schemas compile, and the 12 test grammars
    big = 0
    for label, body in bodies:
        new = _construct_rule_dfa(body, MAX_STATES)
        old = reference(body)
        assert new == old, label
        big += new.num_states > 500
    assert big >= 5  # the sample includes large automata (regexes, key exclusions, member sets)


def accepts(dfa: RuleDfa, data: bytes) -> bool:
    """Run the DFA's byte edges (no references) over data."""
    state = 0
    for b in data:
        for lo, hi, target in dfa.byte_edges[state]:
            if lo <= b <= hi:
                state = target
                break
        else:
            return False
    return dfa.accepting[state]


def assert_well_formed(dfa: RuleDfa) -> None:
    """Byte edges sorted, disjoint and merged (no two adjacent ranges with one target); reference
    edges sorted by reference index; every state reachable in breadth-first numbering."""
    for edges in dfa.byte_edges:
        for (_, hi1, t1), (lo2, _, t2) in zip(edges, edges[1:]):
            assert hi1 < lo2 and not (hi1 + 1 == lo2 and t1 == t2)
    for edges in dfa.ref_edges:
        assert [r for r, _ in edges] == sorted({r for r, _ in edges})
    order, seen = [0], {0}
    for s in order:
        for t in [t for _, _, t in dfa.byte_edges[s]] + [t for _, t in dfa.ref_edges[s]]:
            if t not in seen:
                seen.add(t)
                order.append(t)
    assert order == list(range(dfa.num_states))


def check_language(body, pattern: bytes, alphabet: bytes, max_length: int) -> RuleDfa:
    dfa = _construct_rule_dfa(body, MAX_STATES)
    assert dfa == reference(body)
    assert_well_formed(dfa)
    for length in range(max_length + 1):
        for chars in itertools.product(alphabet, repeat=length):
            data = bytes(chars)
            assert accepts(dfa, data) == bool(re.fullmatch(pattern, data)), data
    return dfa


def test_overlapping_byte_ranges():
    body = alt(
        ByteClass(((0x61, 0x7A),)),
        seq(ByteClass(((0x6D, 0x7A),)), ByteClass(((0x30, 0x39),))),
        seq(lit("q"), star(ByteClass(((0x61, 0x66), (0x71, 0x71))))),
        seq(ByteClass(((0x00, 0xFF),)), lit("9")),
    )
    check_language(body, rb"[a-z]|[m-z][0-9]|q[a-fq]*|[\x00-\xff]9", b"afmqz09\xff", 4)


def test_epsilon_loops():
    check_language(star(star(alt(EPSILON, lit("ab")))), rb"(ab)*", b"ab", 6)
    check_language(rep(alt(EPSILON, lit("a")), 2, 5), rb"a{0,5}", b"ab", 7)
    check_language(seq(star(opt(lit("x"))), rep(star(lit("y")), 1, 3), opt(lit("x"))), rb"x*y*x?", b"xy", 6)


def test_unicode_classes_and_regex_automata():
    utf8 = (
        rb"[A-Z]|\xce[\xb1-\xbf]|\xcf[\x80-\x89]|[\xee\xef][\x80-\xbf]{2}|\xf0[\x90-\xbf][\x80-\xbf]{2}"
        rb"|[\xf1-\xf3][\x80-\xbf]{3}|\xf4[\x80-\x8f][\x80-\xbf]{2}"
    )
    check_language(
        CharClass(((0x41, 0x5A), (0x3B1, 0x3C9), (0xE000, 0x10FFFF))), utf8, b"A\xce\xb1\xcf\xee\x80\xf0\x90\xf4\x8f", 4
    )
    grammar = parse_regex(r"[α-ω]{1,2}x|\d+")
    body = grammar.rules[grammar.root]
    dfa = check_language(body, rb"(\xce[\xb1-\xbf]|\xcf[\x80-\x89]){1,2}x|[0-9]+", b"\xce\xb1\xcfx0", 4)
    assert dfa.num_states > 3


def test_references_are_letters_and_cache_entries_are_name_independent(monkeypatch):
    body = seq(ref("value"), star(seq(lit(","), ref("value"))), opt(ref("tail")))
    dfa = _construct_rule_dfa(body, MAX_STATES)
    assert dfa == reference(body)
    assert_well_formed(dfa)
    assert sorted(dfa.refs) == ["tail", "value"]
    value, tail = dfa.refs.index("value"), dfa.refs.index("tail")
    # value (, value)* tail?, minimal: after "," the rule is where it started
    assert dfa.accepting == [False, True, True]
    assert dfa.byte_edges == [[], [(ord(","), ord(","), 0)], []]
    assert dfa.ref_edges == [[(value, 1)], [(tail, 2)], []]
    clear_dfa_cache()
    built = []
    real = dfa_module._construct_rule_dfa
    monkeypatch.setattr(dfa_module, "_construct_rule_dfa", lambda *args: built.append(args) or real(*args))
    first = build_rule_dfa(body)
    renamed = build_rule_dfa(seq(ref("x"), star(seq(lit(","), ref("x"))), opt(ref("y"))))
    assert len(built) == 1  # one construction serves bodies equal up to names
    assert first == dfa
    assert renamed.signature() == dfa.signature()
    assert renamed.refs == [{"value": "x", "tail": "y"}[name] for name in dfa.refs]
    other = build_rule_dfa(seq(ref("x"), star(seq(lit(";"), ref("x"))), opt(ref("y"))))
    assert len(built) == 2 and other.signature() != dfa.signature()
    clear_dfa_cache()


def test_structure_digest_tells_bodies_apart():
    def digest(body):
        return _structure_digest(body)[0]

    assert digest(seq(lit("ab"), star(ref("a")))) == digest(seq(lit("ab"), star(ref("b"))))
    assert digest(star(seq(ref("a"), ref("b")))) == digest(star(seq(ref("b"), ref("a"))))  # a renaming
    different = [
        seq(lit("ab"), star(ref("a"))),
        seq(lit("ab"), rep(ref("a"), 1, None)),
        seq(lit("ab"), rep(ref("a"), 0, 5)),
        alt(lit("ab"), star(ref("a"))),
        seq(lit("ac"), star(ref("a"))),
        seq(ByteClass(((0x61, 0x62),)), star(ref("a"))),
        seq(CharClass(((0x61, 0x62),)), star(ref("a"))),
        seq(star(ref("a")), lit("ab")),
        seq(lit("ab"), star(seq(ref("a"), ref("b")))),
        seq(lit("ab"), star(seq(ref("a"), ref("a")))),
        alt(lit("ab"), lit("c")),  # the literals' boundaries are part of the digest
        alt(lit("a"), lit("bc")),
    ]
    assert len({digest(body) for body in different}) == len(different)


def test_empty_language():
    assert _construct_rule_dfa(NOTHING, MAX_STATES) == RuleDfa([False], [[]], [[]], []) == reference(NOTHING)
    body = Seq((Ref("r"), lit("x"), NOTHING))  # built directly: seq() would simplify it away
    assert _construct_rule_dfa(body, MAX_STATES) == RuleDfa([False], [[]], [[]], ["r"]) == reference(body)
    # states are reachable (b, then a loop) but none can accept
    body = Seq((lit("b"), star(lit("a")), ref("r"), NOTHING))
    assert _construct_rule_dfa(body, MAX_STATES) == RuleDfa([False], [[]], [[]], ["r"]) == reference(body)


def budget_messages(body, max_states):
    """The budget errors (or None) of both constructions."""
    out = []
    for construct in (_construct_rule_dfa, lambda b, m: reference(b, m)):
        try:
            construct(body, max_states)
            out.append(None)
        except LimitExceededError as error:
            out.append(str(error))
    return out


def test_nfa_budget():
    new, old = budget_messages(rep(lit("ab"), 0, 10_000), 1000)
    assert new == old and "exceeds 1000 NFA states" in new and "max_rule_states" in new
    # the UTF-8 paths of a wide class are NFA states too (built by the kernel)
    wide = CharClass(((0x80, 0x10FFFF),))
    new, old = budget_messages(wide, 4)
    assert new == old and "exceeds 4 NFA states" in new
    assert budget_messages(wide, 20) == [None, None]


def test_dfa_budget_counts_the_same_subsets():
    # (a|b)*a(a|b){4}: a small NFA, 2**5 reachable subsets
    body = seq(star(alt(lit("a"), lit("b"))), lit("a"), rep(alt(lit("a"), lit("b")), 4, 4))
    threshold = next(m for m in range(1, 200) if budget_messages(body, m)[1] is None)
    new, old = budget_messages(body, threshold - 1)
    assert new == old and f"exceeds {threshold - 1} DFA states" in new and "split it into separate rules" in new
    assert budget_messages(body, threshold) == [None, None]


def shared_bodies():
    """Bodies whose sub-expressions are shared objects (DAGs), built with the classes directly
    (the constructors would flatten them): memoised fragments, unmemoised repetition copies of
    a shared item, bounded repetitions of items with references, references met right to left."""
    comma = Alt((EPSILON, lit(",")))
    tail = Seq((ref("x"), comma))
    pair = Seq((ref("b"), lit("="), ref("a")))
    return [
        Alt(
            (
                Seq((lit("a"), tail)),
                Seq((lit("b"), tail)),
                tail,
                Repeat(comma, 1, 1),
                Repeat(comma, 0, 1),
                Repeat(tail, 1, 2),
            )
        ),
        Seq((Repeat(pair, 2, 4), lit(";"), pair, Repeat(Alt((ref("c"), pair)), 0, None))),
        Seq((Alt((Repeat(Seq((ref("d"), tail)), 1, 3), ref("c"))), Repeat(tail, 0, 2), tail)),
        Repeat(Alt((pair, Seq((pair, tail)), Repeat(pair, 0, 1))), 1, 3),
    ]


def test_shared_sub_expressions_match_the_reference_up_to_the_nfa_budget():
    """Same automaton and reference order as the Python construction, and the same budget
    outcome at every max_states up to past the NFA's size: bytes, classes, references,
    sequences, alternatives and repetitions take the same NFA states in both, so this pins which
    fragments are shared (memoised on (node, end)) and which are copied."""
    for body in shared_bodies():
        dfa = _construct_rule_dfa(body, MAX_STATES)
        assert dfa == reference(body)
        threshold = next(m for m in range(1, 500) if budget_messages(body, m)[1] is None)
        for m in range(1, threshold + 2):
            new, old = budget_messages(body, m)
            assert new == old, (body, m)


def test_long_repetitions_match_the_reference_at_the_nfa_budget():
    """Repetitions with hundreds of copies outgrow the kernel's first buffers (it starts again
    with more room): same automaton, same budget threshold."""
    tail = Seq((ref("x"), Alt((EPSILON, lit(",")))))
    for body in (Repeat(Seq((tail, ref("y"), lit("ab"))), 5, 150), Repeat(Alt((tail, lit("q"))), 0, 400)):
        assert _construct_rule_dfa(body, MAX_STATES) == reference(body)
        lo, hi = 1, 5000  # the reference's threshold: the fewest max_states it builds the body in
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if budget_messages(body, mid)[1] is None else (mid + 1, hi)
        assert budget_messages(body, lo) == [None, None]
        new, old = budget_messages(body, lo - 1)
        assert new == old and "NFA states" in new


def test_shared_regex_automata_and_unicode_classes_match_the_reference():
    fsm = regex_to_ir(r"[a-c\u00e9]+x?", automaton=True)
    assert isinstance(fsm, CharFsm)
    greek = CharClass(((0x3B1, 0x3C9),))
    bodies = [
        Alt((Seq((fsm, ref("r"))), Seq((lit("q"), fsm, ref("r"))), Repeat(Seq((greek, fsm)), 1, 3))),
        Seq((Repeat(fsm, 0, None), ref("s"), Repeat(Seq((fsm, ref("r"), greek)), 2, 2), fsm)),
    ]
    for body in bodies:
        assert _construct_rule_dfa(body, MAX_STATES) == reference(body)


def test_literal_trie_budget():
    """A trie's states (one per distinct prefix) are counted apart, up to TRIE_STATES_FACTOR
    times max_states: the budget error fires exactly past that many prefixes."""
    rng = random.Random(3)
    words = sorted({"".join(rng.choice("abcdef") for _ in range(rng.randint(1, 7))) for _ in range(60)})
    prefixes = len({word[:k] for word in words for k in range(1, len(word) + 1)})
    body = Alt((*(lit(word) for word in words), Seq((ref("r"), lit("!")))))
    factor = dfa_module.TRIE_STATES_FACTOR
    enough = -(-prefixes // factor)  # the smallest max_states whose trie budget holds the prefixes
    dfa = _construct_rule_dfa(body, enough)
    assert dfa == reference(body) and dfa.refs == ["r"]
    with pytest.raises(LimitExceededError, match=f"more than {factor * (enough - 1)} distinct prefixes"):
        _construct_rule_dfa(body, enough - 1)


def test_utf8_sequences_match_the_python_splitting():
    seqs = np.empty((MAX_SEQUENCES, 9), np.int32)
    stack = np.empty((MAX_SEQUENCES, 2), np.int64)
    edges = [
        0,
        1,
        0x7F,
        0x80,
        0x7FF,
        0x800,
        0xFFF,
        0x1000,
        0xD7FF,
        0xD800,
        0xDFFF,
        0xE000,
        0xFFFF,
        0x10000,
        0x3FFFF,
        0x40000,
        0x10FFFF,
    ]
    rng = random.Random(7)
    ranges = [(lo, hi) for lo in edges for hi in edges if lo <= hi]
    ranges += [tuple(sorted((rng.randrange(0x110000), rng.randrange(0x110000)))) for _ in range(2000)]
    ranges += [(c, c + rng.randrange(200)) for c in (rng.randrange(0x10FF00) for _ in range(1000))]
    for lo, hi in ranges:
        n = utf8_sequences(lo, hi, seqs, stack)
        got = tuple(tuple((int(seqs[k, 1 + j]), int(seqs[k, 5 + j])) for j in range(seqs[k, 0])) for k in range(n))
        assert got == utf8_byte_ranges(lo, hi), (hex(lo), hex(hi))


def _old_fsm_layout(fsm: CharFsm):
    """The layout as automata/dfa.py computed it from the transition tuples before automata built
    from arrays kept them (the oracle for `_fsm_layout`)."""
    transitions = np.array(fsm.transitions, dtype=np.int32).reshape(-1, 4)
    states = sorted({q for t in fsm.transitions for q in (t[0], t[3])} | {fsm.initial})
    number = {q: i for i, q in enumerate(states)}
    for row in transitions:
        row[0], row[3] = number[int(row[0])], number[int(row[3])]
    finals = np.array(sorted(number[q] for q in fsm.finals if q in number), dtype=np.int64)
    return len(states), transitions, finals, number[fsm.initial]


def _random_fsm_pair(rng: random.Random):
    """The same random code-point automaton built from tuples and from arrays (states sometimes
    not numbered 0..n-1, finals sometimes outside the states)."""
    n, k = rng.randint(1, 7), rng.randint(0, 14)
    spread = rng.choice([1, 3, 1000])  # 1000: sparse state numbers
    initial = rng.randrange(n) * spread
    rows = sorted(
        (rng.randrange(n) * spread, lo, lo + rng.choice([0, 0, 5, 200]), rng.randrange(n) * spread)
        for lo in (rng.choice([0x61, 0x62, 0x3B1, 0x1F600]) for _ in range(k))
    )
    finals = frozenset(rng.sample(range(spread * n + 2), rng.randint(0, 3)))
    columns = [np.array([row[i] for row in rows], dtype=np.int64) for i in range(4)]
    return CharFsm(initial, finals, tuple(rows)), char_fsm_of_columns(initial, finals, *columns)


def test_automata_built_from_arrays_give_the_same_layout_language_and_rule_dfa():
    rng = random.Random(7)
    for _ in range(300):
        tuples, arrays = _random_fsm_pair(rng)
        assert tuples == arrays and hash(tuples) == hash(arrays)
        assert char_fsm_table(tuples) is None and char_fsm_table(arrays) is not None
        for fsm in (tuples, arrays):
            dfa_module._fsm_layouts.clear()
            got, want = dfa_module._fsm_layout(fsm), _old_fsm_layout(fsm)
            assert got[0] == want[0] and got[3] == want[3]
            assert np.array_equal(got[1], want[1]) and got[1].dtype == np.int32
            assert np.array_equal(got[2], want[2]) and got[2].dtype == np.int64
        body = seq(lit("["), arrays, opt(ref("next")))
        built = _construct_rule_dfa(body, MAX_STATES)
        assert built == _construct_rule_dfa(seq(lit("["), tuples, opt(ref("next"))), MAX_STATES)
        assert built == reference(body)
    dfa_module._fsm_layouts.clear()


def test_automata_built_from_arrays_never_share_a_cache_entry_with_other_content():
    """The rule DFA cache keys an array-built automaton by a digest of its arrays: bodies that
    differ in one transition or one final state get different digests and automata; equal
    content built twice shares one construction."""
    clear_dfa_cache()

    def fsm(rows, finals):
        return char_fsm_of_columns(0, frozenset(finals), *(np.array(c, dtype=np.int64) for c in zip(*rows)))

    base = [(0, 0x61, 0x7A, 1), (1, 0x30, 0x39, 1)]
    variants = [
        fsm(base, {1}),
        fsm([(0, 0x61, 0x79, 1), (1, 0x30, 0x39, 1)], {1}),  # one range end differs
        fsm(base + [(1, 0x5F, 0x5F, 0)], {1}),  # one transition more
        fsm(base, {0, 1}),  # one final more
    ]
    digests = [_structure_digest(seq(lit('"'), f, lit('"')))[0] for f in variants]
    assert len(set(digests)) == len(variants)
    dfas = [build_rule_dfa(seq(lit('"'), f, lit('"'))) for f in variants]
    assert len({d.digest() for d in dfas}) == len(variants)
    again = build_rule_dfa(seq(lit('"'), fsm(base, {1}), lit('"')))
    assert _structure_digest(seq(lit('"'), fsm(base, {1}), lit('"')))[0] == digests[0]
    assert again == dfas[0] and again == reference(seq(lit('"'), variants[0], lit('"')))
    clear_dfa_cache()


def test_json_string_automata_carry_their_arrays():
    """JSON Schema string automata (pattern, key exclusions) are built from arrays, so the fast
    path above is the one compiles take."""
    grammar = json_schema_to_grammar({"type": "string", "pattern": "^[a-z]+[0-9]?$"})
    fsms = [node for node in iter_nodes(*grammar.rules.values()) if isinstance(node, CharFsm)]
    assert fsms and any(char_fsm_table(node) is not None for node in fsms)
    for fsm in fsms:  # the emptiness they come with is what a search of their transitions finds
        assert _fsm_nonempty(fsm) == _search_final(CharFsm(fsm.initial, fsm.finals, fsm.transitions))
    assert _fsm_nonempty(char_fsm_of_columns(0, frozenset(), *([np.array([0])] * 4), nonempty=False)) is False
