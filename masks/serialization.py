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

from ..grammar.core.errors import PushmaskError

FORMAT_VERSION = 1


class DeserializeError(PushmaskError, ValueError, RuntimeError):
    """A serialized TokenizerInfo or CompiledGrammar that cannot be read back: not pushmask's
    format, another format version, or a grammar compiled for another vocabulary. Also a
    RuntimeError, as XGrammar's deserialization errors are."""


class DeserializeFormatError(DeserializeError):
    """Text that is not a serialized pushmask object of the kind asked for (XGrammar's name)."""


class DeserializeVersionError(DeserializeError):
    """Serialized by another format version (XGrammar's name): serialize it again."""


def get_serialization_version() -> str:
    """The format version serialize_json writes and deserialize_json reads (XGrammar's name)."""
    return f"v{FORMAT_VERSION}"


def check_header(payload: Any, kind: str) -> dict:
    """The payload if it is a dict of this kind and version, else DeserializeError."""
    if not isinstance(payload, dict) or payload.get("format") != kind:
        raise DeserializeFormatError(f"not a serialized pushmask {kind}")
    if payload.get("version") != FORMAT_VERSION:
        raise DeserializeVersionError(
            f"serialized {kind} has format version {payload.get('version')!r}; this "
            f"pushmask reads version {FORMAT_VERSION}: serialize it again with this version"
        )
    return payload


def header(kind: str) -> dict:
    return {"format": kind, "version": FORMAT_VERSION}


def to_json(payload: dict) -> str:
    return json.dumps(payload, default=_encode_array, separators=(",", ":"))


def from_json(text: str | bytes, kind: str) -> dict:
    try:
        payload = json.loads(text, object_hook=_decode_array)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, ValueError) as exc:
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
