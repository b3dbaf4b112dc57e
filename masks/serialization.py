"""JSON and pickle forms of TokenizerInfo and CompiledGrammar (xgrammar's serialize_json /
deserialize_json), so serving frameworks can move them between processes.

Both forms carry the same payload: plain values plus numpy arrays.  Pickle keeps the arrays as
they are; JSON writes each one as {"dtype", "shape", "base64"} of its little-endian bytes.  A
payload names its format and version, and a grammar's names the vocabulary it was compiled for
(vocab_hash), checked when it is read back.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from ..grammar.core.errors import InvalidJSONError, PushmaskError
from ..grammar.core.recursion import load_json_text

FORMAT_VERSION = 1
XGRAMMAR_LAYOUT_VERSION = "v16"
"""The `__VERSION__` of XGrammar 0.2.8's own JSON layout (`grammar_expr_data`, its FSM and mask
tables), which pushmask recognises in order to refuse it by name: it does not read that layout."""


class DeserializeError(PushmaskError, ValueError, RuntimeError):
    """A serialized TokenizerInfo or CompiledGrammar that cannot be read back: not pushmask's
    format, another format version, or a grammar compiled for another vocabulary. Also a
    RuntimeError, as XGrammar's deserialization errors are."""


class DeserializeFormatError(DeserializeError):
    """Text that is not a serialized pushmask object of the kind asked for (XGrammar's name)."""


class DeserializeVersionError(DeserializeError):
    """Serialized by another format version (XGrammar's name): serialize it again."""


class DeserializeJSONError(DeserializeFormatError, InvalidJSONError):
    """Serialized text that is not JSON, or nests past `max_recursion_depth`: also XGrammar's
    InvalidJSONError, which XGrammar raises there."""


def get_serialization_version() -> str:
    """The format version serialize_json writes and deserialize_json reads (XGrammar's name)."""
    return f"v{FORMAT_VERSION}"


def check_header(payload: Any, kind: str) -> dict:
    """The payload if it is a dict of this kind and version, else DeserializeError."""
    if isinstance(payload, dict) and "__VERSION__" in payload and "format" not in payload:
        _refuse_xgrammar_layout(payload["__VERSION__"], kind)
    if not isinstance(payload, dict) or payload.get("format") != kind:
        raise DeserializeFormatError(f"not a serialized pushmask {kind}")
    if payload.get("version") != FORMAT_VERSION:
        raise DeserializeVersionError(
            f"serialized {kind} has format version {payload.get('version')!r}; this "
            f"pushmask reads version {FORMAT_VERSION}: serialize it again with this version"
        )
    return payload


def _refuse_xgrammar_layout(version: Any, kind: str) -> None:
    """Refuse JSON in XGrammar's own layout (keyed by `__VERSION__`), saying so: another
    version is a DeserializeVersionError, as XGrammar raises; its current one (v16) is a
    DeserializeFormatError, since pushmask reads only the layout its serialize_json writes."""
    if version != XGRAMMAR_LAYOUT_VERSION:
        raise DeserializeVersionError(
            f"serialized {kind} has XGrammar's format version {version!r}; pushmask reads neither "
            f"XGrammar's layout nor its versions: serialize the {kind} again with pushmask"
        )
    raise DeserializeFormatError(
        f"not a serialized pushmask {kind}: this is XGrammar's own JSON layout ({XGRAMMAR_LAYOUT_VERSION}), "
        f"which pushmask does not read; serialize the {kind} with pushmask's serialize_json"
    )


def header(kind: str) -> dict:
    return {"format": kind, "version": FORMAT_VERSION}


def to_json(payload: dict) -> str:
    return json.dumps(payload, default=_encode_array, separators=(",", ":"))


def from_json(text: str | bytes, kind: str) -> dict:
    """The checked payload of serialized JSON text; DeserializeJSONError for text that is not
    JSON or nests past `max_recursion_depth`."""
    if not isinstance(text, (str, bytes)):
        raise DeserializeFormatError(f"invalid serialized {kind}: expected JSON text, got {type(text).__name__}")
    try:
        payload = load_json_text(text, f"serialized {kind}", DeserializeJSONError, object_hook=_decode_array)
    except DeserializeJSONError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DeserializeJSONError(f"invalid serialized {kind}: not JSON: {exc}") from None
    except (TypeError, ValueError) as exc:  # an array or bytes field that does not decode
        raise DeserializeFormatError(f"invalid serialized {kind}: {exc}") from None
    return check_header(payload, kind)


def _encode_array(value):
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
        return {
            "__ndarray__": value.dtype.str.lstrip("<>|="),
            "shape": list(value.shape),
            "base64": base64.b64encode(data.tobytes()).decode("ascii"),
        }
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, np.integer):
        return int(value)
    raise TypeError(f"cannot serialize {type(value).__name__}")


def _decode_array(obj: dict):
    if "__ndarray__" in obj:
        dtype = np.dtype("<" + obj["__ndarray__"])
        raw = base64.b64decode(obj["base64"])
        return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(obj["shape"])
    if "__bytes__" in obj:
        return base64.b64decode(obj["__bytes__"])
    return obj


# ---------------------------------------------------------------------- grammar IR

_GRAMMAR_KIND = "Grammar"


def grammar_payload(grammar) -> dict:
    """The payload of a grammar IR (Grammar.serialize_json): its expressions as one flat node
    list in which a node names its children by their (smaller) index, so shared subtrees are
    written once and no reader or writer recurses on deep trees."""
    from ..grammar.core.errors import InvalidArgumentError
    from ..grammar.ir import Alt, ByteClass, Bytes, CharClass, CharFsm, Ref, Repeat, Seq, char_fsm_table

    if grammar.checks:
        raise InvalidArgumentError(
            "Grammar.serialize_json: this grammar has value checks (uniqueItems or an overlapping oneOf, "
            "checked with jsonschema validators in this process), which have no JSON form; build the grammar "
            "again in the process that uses it"
        )
    nodes: list[list] = []
    index: dict[int, int] = {}  # id(node) -> its place in nodes
    for body in grammar.rules.values():
        stack = [(body, False)]
        while stack:
            node, children_done = stack.pop()
            if id(node) in index:
                continue
            kind = type(node)
            children = node.items if kind in (Seq, Alt) else (node.item,) if kind is Repeat else ()
            if not children_done:
                stack.append((node, True))
                stack.extend((child, False) for child in reversed(children) if id(child) not in index)
                continue
            if kind is Bytes:
                entry = ["bytes", node.value]
            elif kind is CharClass or kind is ByteClass:
                entry = ["chars" if kind is CharClass else "byte_class", [list(r) for r in node.ranges]]
            elif kind is Seq or kind is Alt:
                entry = ["seq" if kind is Seq else "alt", [index[id(child)] for child in children]]
            elif kind is Repeat:
                entry = ["repeat", index[id(node.item)], node.min, node.max]
            elif kind is Ref:
                entry = ["ref", node.name]
            elif kind is CharFsm:
                table = char_fsm_table(node)
                rows = np.asarray(node.transitions if table is None else table, dtype=np.int32).reshape(-1, 4)
                entry = ["fsm", node.initial, sorted(node.finals), rows]
            else:  # pragma: no cover - every IR node kind is listed above
                raise TypeError(f"cannot serialize the grammar node {kind.__name__}")
            index[id(node)] = len(nodes)
            nodes.append(entry)
    return {
        **header(_GRAMMAR_KIND),
        "root": grammar.root,
        "allow_empty": grammar.allow_empty,
        "nodes": nodes,
        "rules": [[name, index[id(body)]] for name, body in grammar.rules.items()],
        "positions": [[name, line, column] for name, (line, column) in grammar.positions.items()],
        "token_limits": [[name, limit] for name, limit in grammar.token_limits.items()],
        "token_classes": [[terminal, sorted(ids)] for terminal, ids in grammar.token_classes.items()],
    }


def grammar_from_json(text: str | bytes):
    """The Grammar serialize_json wrote; DeserializeFormatError for damaged text (a child index
    that is not an earlier node, an unknown node kind, a range outside its alphabet)."""
    payload = from_json(text, _GRAMMAR_KIND)
    try:
        return _grammar_of_payload(payload)
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise DeserializeFormatError(f"the serialized Grammar is damaged: {error!r}") from None


def _grammar_of_payload(payload: dict):
    from ..grammar.ir import (
        MAX_CODE_POINT,
        SURROGATES,
        Alt,
        ByteClass,
        Bytes,
        CharClass,
        Expr,
        Grammar,
        Ref,
        Repeat,
        Seq,
        char_fsm_of_columns,
    )

    def child(i) -> Expr:
        if not isinstance(i, int) or not 0 <= i < len(built):  # children come before their parent
            raise ValueError(f"node {len(built)} names child {i!r}, not an earlier node")
        return built[i]

    def ranges(pairs, top: int) -> tuple[tuple[int, int], ...]:
        out = tuple((int(lo), int(hi)) for lo, hi in pairs)
        if any(not 0 <= lo <= hi <= top for lo, hi in out):
            raise ValueError(f"node {len(built)} has a range outside 0..{top}")
        return out

    built: list[Expr] = []
    for entry in payload["nodes"]:
        kind = entry[0]
        node: Expr
        if kind == "bytes" and isinstance(entry[1], bytes):
            node = Bytes(entry[1])
        elif kind == "chars":
            node = CharClass(ranges(entry[1], MAX_CODE_POINT))
            if any(lo <= SURROGATES[1] and hi >= SURROGATES[0] for lo, hi in node.ranges):
                raise ValueError(f"node {len(built)} holds surrogate code points")
        elif kind == "byte_class":
            node = ByteClass(ranges(entry[1], 255))
        elif kind in ("seq", "alt"):
            node = (Seq if kind == "seq" else Alt)(tuple(child(i) for i in entry[1]))
        elif kind == "repeat":
            low, high = int(entry[2]), None if entry[3] is None else int(entry[3])
            if low < 0 or (high is not None and high < low):
                raise ValueError(f"node {len(built)} repeats {low}..{high} times")
            node = Repeat(child(entry[1]), low, high)
        elif kind == "ref" and isinstance(entry[1], str):
            node = Ref(entry[1])
        elif kind == "fsm":
            rows = np.asarray(entry[3], dtype=np.int64).reshape(-1, 4)
            if (rows < 0).any() or (rows[:, 2] > MAX_CODE_POINT).any() or (rows[:, 1] > rows[:, 2]).any():
                raise ValueError(f"node {len(built)} has a transition outside the code points")
            node = char_fsm_of_columns(int(entry[1]), frozenset(int(f) for f in entry[2]), *rows.T)
        else:
            raise ValueError(f"node {len(built)} has an unknown kind {kind!r}")
        built.append(node)
    return Grammar(
        {str(name): child(i) for name, i in payload["rules"]},
        str(payload["root"]),
        {str(name): (int(line), int(column)) for name, line, column in payload["positions"]},
        bool(payload["allow_empty"]),
        token_limits={str(name): int(limit) for name, limit in payload["token_limits"]},
        token_classes={int(terminal): frozenset(int(t) for t in ids) for terminal, ids in payload["token_classes"]},
    )
