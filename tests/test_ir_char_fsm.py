"""A CharFsm built from arrays (`char_fsm_of_columns`) is the same value as one built from its row
tuples: equal, same hash, same rows read back, pickled as the tuple; and a JSON Schema compile
and the IR passes never write its rows out (the compiler reads the array)."""

from __future__ import annotations

import pickle
import random

import numpy as np

from pushmask.grammar import ir
from pushmask.grammar.ir import CharFsm, TransitionRows, alt, char_fsm_of_columns
from pushmask.grammar.json_schema import json_schema_to_grammar
from pushmask.grammar.passes import normalize


def random_rows(rng: random.Random, count: int) -> tuple[tuple[int, int, int, int], ...]:
    rows = []
    for _ in range(count):
        lo = rng.randrange(0x10FFFF)
        rows.append((rng.randrange(50), lo, min(lo + rng.randrange(100), 0x10FFFF), rng.randrange(50)))
    return tuple(rows)


def from_arrays(initial: int, finals: frozenset[int], rows) -> CharFsm:
    columns = np.array(rows, dtype=np.int64).reshape(-1, 4).T
    return char_fsm_of_columns(initial, finals, *columns)


def test_both_forms_are_one_value():
    rng = random.Random(0)
    for count in (0, 1, 7, 300):
        rows = random_rows(rng, count)
        tupled, arrayed = CharFsm(0, frozenset({1}), rows), from_arrays(0, frozenset({1}), rows)
        assert isinstance(arrayed.transitions, TransitionRows) and len(arrayed.transitions) == count
        assert tupled == arrayed and arrayed == tupled and hash(tupled) == hash(arrayed)
        assert len({tupled, arrayed}) == 1 and alt(tupled, arrayed) is tupled
        assert tuple(arrayed.transitions) == rows and arrayed.transitions == rows
        assert list(arrayed.transitions[:2]) == list(rows[:2])
        assert arrayed.transitions + ((9, 1, 2, 9),) == rows + ((9, 1, 2, 9),)
        back = pickle.loads(pickle.dumps(arrayed))
        assert type(back.transitions) is tuple and back == arrayed and hash(back) == hash(arrayed)
        if count:  # a different row, initial state or final set is another value
            changed = rows[:-1] + ((rows[-1][0], rows[-1][1], rows[-1][2], rows[-1][3] + 1),)
            assert from_arrays(0, frozenset({1}), changed) != arrayed and CharFsm(0, frozenset({1}), changed) != arrayed
            assert from_arrays(1, frozenset({1}), rows) != arrayed and from_arrays(0, frozenset(), rows) != tupled


def test_a_compile_reads_the_arrays_not_the_rows(monkeypatch):
    written = []
    rows = TransitionRows.rows

    def counted(self):
        if self._rows is None:
            written.append(len(self))
        return rows(self)

    monkeypatch.setattr(ir.TransitionRows, "rows", counted)
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^[a-z]{2,8}-[0-9]+$"}, "n": {"type": "integer"}},
        "patternProperties": {"^x-": {"type": "string", "format": "date"}},
        "additionalProperties": {"type": "string", "maxLength": 5},
    }
    grammar = normalize(json_schema_to_grammar(schema, property_order="any"))
    fsms = [node for body in grammar.rules.values() for node in ir.iter_nodes(body) if type(node) is CharFsm]
    assert any(isinstance(fsm.transitions, TransitionRows) for fsm in fsms)
    assert written == []


def test_automata_that_share_the_hashed_sample_still_differ():
    """The hash reads the row count and three rows; automata that differ elsewhere collide in the
    hash and are told apart by their rows, in either form."""
    rows = ((0, 97, 97, 1), (1, 98, 98, 2), (2, 99, 99, 3), (3, 100, 100, 4))
    other = rows[:1] + ((1, 120, 120, 2),) + rows[2:]
    forms = [CharFsm(0, frozenset({4}), rows), from_arrays(0, frozenset({4}), rows)]
    others = [CharFsm(0, frozenset({4}), other), from_arrays(0, frozenset({4}), other)]
    for a in forms:
        for b in others:
            assert hash(a) == hash(b) and a != b and b != a
    assert len(set(forms + others)) == 2 and len(alt(*forms, *others).items) == 2
