"""A CompiledGrammar read back from JSON goes to the kernels as it is, so deserialize_json must refuse
text that was changed after serialize_json wrote it (its content digest) and, even where the digest
was recomputed, masks holding ids, positions or slice rows the fill kernels would index out of
bounds; JSON that is only re-indented or has its keys reordered still reads back, with the same
masks (checked token by token against the original grammar's fills)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from support import tokenizer_info

import pushmask as pm
from pushmask.core.serialization import content_digest

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "note": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "kind": {"enum": ["cat", "dog"]},
    },
    "required": ["name", "age"],
}
PREFIXES = ('{"name": "', '{"name": "Ada", "age": 3', '{"name": "Bo", "note": "x', '{"name": "C", "age": 1, "kind": "')


@pytest.fixture(scope="module")
def serialized():
    """(tokenizer info, compiled grammar with masks of every prefix computed, its JSON text)."""
    info = tokenizer_info("llama3")
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_json_schema(SCHEMA)
    for prefix in PREFIXES:
        matcher = pm.GrammarMatcher(compiled)
        assert matcher.accept_string(prefix)
        matcher.fill_next_token_bitmask(pm.allocate_token_bitmask(1, info.vocab_size))
    return info, compiled, compiled.serialize_json()


def _fills(compiled, info) -> list[np.ndarray]:
    out = []
    for prefix in PREFIXES:
        matcher = pm.GrammarMatcher(compiled)
        assert matcher.accept_string(prefix)
        bitmask = np.zeros((1, (info.vocab_size + 31) // 32), dtype=np.int32)
        matcher.fill_next_token_bitmask(bitmask)
        out.append(bitmask[0].copy())
    return out


def _array(field: dict) -> np.ndarray:
    return np.frombuffer(base64.b64decode(field["base64"]), dtype="<" + field["__ndarray__"]).copy()


def _set_array(field: dict, values: np.ndarray) -> None:
    field["base64"] = base64.b64encode(values.astype("<" + field["__ndarray__"]).tobytes()).decode("ascii")
    field["shape"] = [len(values)]


def _resigned(payload: dict) -> str:
    """The payload as JSON with its digest recomputed (what a crafted text would carry)."""
    decoded = json.loads(json.dumps(payload), object_hook=_decode)
    payload["digest"] = content_digest(decoded)
    return json.dumps(payload)


def _decode(obj: dict):
    return _array(obj) if "__ndarray__" in obj else obj


def _mask_of_kind(payload: dict, kinds: tuple[int, ...]) -> dict:
    return next(m for m in payload["masks"] if m["kind"] in kinds and len(_array(m["data"])) > 3)


def test_reindented_json_reads_back_with_the_same_masks(serialized):
    info, compiled, text = serialized
    kinds = {m["kind"] for m in json.loads(text)["masks"]}
    assert {0, 3} <= kinds  # accepted lists and slice masks travel (and are checked) too
    again = json.dumps(json.loads(text), indent=2, sort_keys=True)
    for reread in (text, again):
        restored = pm.CompiledGrammar.deserialize_json(reread, info)
        assert all(np.array_equal(a, b) for a, b in zip(_fills(restored, info), _fills(compiled, info)))


def test_a_changed_field_is_refused_by_its_digest(serialized):
    info, _, text = serialized
    payload = json.loads(text)
    mask = _mask_of_kind(payload, (0, 1))
    data = _array(mask["data"])
    data[0] = data[1]  # still a valid id: only the digest can tell
    _set_array(mask["data"], data)
    with pytest.raises(pm.DeserializeFormatError, match="does not match its digest"):
        pm.CompiledGrammar.deserialize_json(json.dumps(payload), info)


@pytest.mark.parametrize("damage", ["id past the vocabulary", "negative id", "slice row", "uncertain id", "state"])
def test_a_resigned_mask_the_kernels_would_overrun_is_refused(serialized, damage):
    info, _, text = serialized
    payload = json.loads(text)
    if damage == "slice row":
        mask = _mask_of_kind(payload, (3,))
        data = _array(mask["data"])
        data[0] = 10**6
    elif damage == "uncertain id":
        mask = next(m for m in payload["masks"] if len(_array(m["ids"])) > 0)
        ids = _array(mask["ids"])
        ids[0] = (ids[0] + 1) % info.vocab_size
        _set_array(mask["ids"], ids)
        data = _array(mask["data"])
    elif damage == "state":
        mask = payload["masks"][0]
        mask["state"] = 10**6
        data = _array(mask["data"])
    else:
        mask = _mask_of_kind(payload, (0, 1))
        data = _array(mask["data"])
        data[-1] = info.vocab_size + 40 if damage == "id past the vocabulary" else -1
    _set_array(mask["data"], data)
    with pytest.raises(pm.DeserializeFormatError, match="the mask of state"):
        pm.CompiledGrammar.deserialize_json(_resigned(payload), info)


def test_a_resigned_payload_missing_a_field_is_a_format_error(serialized):
    info, _, text = serialized
    payload = json.loads(text)
    del payload["pda"]["blob"]
    with pytest.raises(pm.DeserializeFormatError, match="KeyError"):
        pm.CompiledGrammar.deserialize_json(_resigned(payload), info)
