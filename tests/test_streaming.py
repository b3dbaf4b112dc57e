"""Partial JSON values for streaming (integrations/streaming.py) against json.loads on every
prefix of documents json.dumps wrote: what a prefix shows is final (each closed scalar equals the
document's), a member appears once its text is closed, and the whole text gives the document."""

from __future__ import annotations

import json

import pytest

from pushmask.integrations.streaming import _closed_members, _member_schema, partial_json

DOCUMENTS = [
    {
        "name": 'Felicia "Fee" O\'Neil',
        "age": 3,
        "tags": ["a", "b\\c", "é"],
        "pet": {"kind": "cat", "lives": 9.5},
        "ok": True,
        "none": None,
        "n": -12e-3,
    },
    [1, [2, [3, {"x": []}]], "", {}, False],
    "just a string",
    12345,
]


def _agrees(shown, full) -> None:
    """Everything `shown` holds is in `full`: scalars equal, containers recursively agree."""
    if isinstance(shown, dict):
        assert isinstance(full, dict)
        for key, value in shown.items():
            _agrees(value, full[key])
    elif isinstance(shown, list):
        assert isinstance(full, list) and len(shown) <= len(full)
        for a, b in zip(shown, full):
            _agrees(a, b)
    else:
        assert shown == full and type(shown) is type(full)


@pytest.mark.parametrize("indent", [None, 2])
def test_every_prefix_shows_only_final_values(indent):
    for doc in DOCUMENTS:
        text = json.dumps(doc, indent=indent, ensure_ascii=False)
        seen_members = 0
        for cut in range(len(text) + 1):
            value, done = partial_json(text[:cut])
            if value is not None:
                _agrees(value, doc)
            closed = _closed_members(value, done)
            assert len(closed) >= seen_members  # closed members never go away
            seen_members = len(closed)
            assert not done or cut == len(text)
        value, done = partial_json(text)
        if isinstance(doc, (dict, list, str)):
            assert done and value == doc
        else:  # a top-level number may still go on: left out until generation ends
            assert value is None and not done
        if isinstance(doc, dict):
            assert [k for k, _ in _closed_members(value, done)] == list(doc)


def test_member_schemas():
    schema = {
        "properties": {"a": {"type": "integer"}},
        "patternProperties": {"^x": {"type": "string"}},
        "additionalProperties": False,
        "prefixItems": [{"const": 1}],
        "items": {"type": "null"},
    }
    assert _member_schema(schema, "a") == {"type": "integer"}
    assert _member_schema(schema, "xy") == {"allOf": [{"type": "string"}]}
    assert _member_schema(schema, "b") is False
    assert _member_schema(schema, 0) == {"const": 1}
    assert _member_schema(schema, 3) == {"type": "null"}
