"""How build_pda packs the rule automata (automata/pda.py): the global tables read back per rule
give each rule's own DFA, and the reference graph's components (which the rule keys are built
on) against a brute-force reachability oracle."""

from __future__ import annotations

import numpy as np

from pushmask.automata.dfa import build_rule_dfa
from pushmask.automata.pda import _reference_components, build_pda
from pushmask.grammar.ebnf import parse_ebnf
from pushmask.grammar.json_schema import json_schema_to_grammar
from pushmask.grammar.passes import normalize

RECURSIVE_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "children": {"type": "array", "items": {"$ref": "#"}},
        "size": {"type": "integer", "minimum": 0},
    },
    "required": ["name"],
}


def assert_tables_are_the_rules_automata(grammar) -> None:
    """Each rule's slice of the packed tables, made local again, equals the rule's own DFA."""
    pda = build_pda(grammar)
    names = pda.rule_names
    for r, name in enumerate(names):
        dfa = build_rule_dfa(grammar.rules[name])
        first, end = int(pda.rule_first_state[r]), int(pda.rule_first_state[r + 1])
        assert end - first == dfa.num_states and int(pda.rule_start[r]) == first
        assert (pda.state_rule[first:end] == r).all()
        accepting, byte_ptr, lo, hi, dst, ref_ptr, ref_index, ref_dst = dfa.arrays
        assert pda.state_accept[first:end].tolist() == accepting.astype(int).tolist()
        edges = slice(int(pda.byte_ptr[first]), int(pda.byte_ptr[end]))
        assert (pda.byte_ptr[first : end + 1] - pda.byte_ptr[first]).tolist() == byte_ptr.tolist()
        assert pda.byte_lo[edges].tolist() == lo.tolist() and pda.byte_hi[edges].tolist() == hi.tolist()
        assert (pda.byte_dst[edges] - first).tolist() == dst.tolist()
        refs = slice(int(pda.ref_ptr[first]), int(pda.ref_ptr[end]))
        assert (pda.ref_ptr[first : end + 1] - pda.ref_ptr[first]).tolist() == ref_ptr.tolist()
        assert [names[k] for k in pda.ref_rule[refs].tolist()] == [dfa.refs[i] for i in ref_index.tolist()]
        assert (pda.ref_dst[refs] - first).tolist() == ref_dst.tolist()
    assert pda.num_states == len(pda.state_rule) == len(pda.state_accept)


def test_packed_tables_are_each_rules_automaton_for_a_recursive_schema():
    assert_tables_are_the_rules_automata(normalize(json_schema_to_grammar(RECURSIVE_SCHEMA, property_order="any")))


def test_packed_tables_are_each_rules_automaton_for_mutually_recursive_rules():
    grammar = normalize(parse_ebnf('root ::= a "." | b\na ::= "(" b ")" | "x"\nb ::= "[" a "]" | "y" a\n'))
    assert_tables_are_the_rules_automata(grammar)


def reaches(succ: list[list[int]]) -> np.ndarray:
    """reach[u, v]: v can be reached from u (u itself included), by a plain transitive closure."""
    n = len(succ)
    reach = np.eye(n, dtype=bool)
    for u, targets in enumerate(succ):
        reach[u, targets] = True
    for k in range(n):
        reach |= reach[:, [k]] & reach[[k], :]
    return reach


def test_reference_components_are_the_strongly_connected_ones_in_reverse_topological_order():
    rng = np.random.default_rng(42)
    for n, edges in [(1, 0), (1, 1), (6, 0), (8, 5), (12, 14), (30, 45), (40, 120)]:
        sources, targets = rng.integers(0, n, edges), rng.integers(0, n, edges)
        succ = [[int(t) for s, t in zip(sources, targets) if s == u] for u in range(n)]
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum([len(t) for t in succ], out=ptr[1:])
        flat = np.array([t for ts in succ for t in ts], dtype=np.int64)
        component, count = _reference_components(ptr, flat)
        reach = reaches(succ)
        same = reach & reach.T  # mutually reachable: one component
        assert ((component[:, None] == component[None, :]) == same).all()
        assert sorted(set(component.tolist())) == list(range(count))
        for u, ts in enumerate(succ):  # a reference leads into the same or an earlier component
            assert all(component[t] <= component[u] for t in ts)
