"""The serialized form every layer writes (Grammar, TokenizerInfo, CompiledGrammar: xgrammar's
serialize_json / deserialize_json), so serving frameworks can move them between processes: its
header, JSON encoding and digest, and its errors.  Each layer writes its own payload
(grammar/serialization.py, masks/vocab.py, masks/compiler.py).

Both forms carry the same payload: plain values plus numpy arrays.  Pickle keeps the arrays as
they are; JSON writes each one as {"dtype", "shape", "base64"} of its little-endian bytes.  A
payload names its format and version, and a grammar's names the vocabulary it was compiled for
(vocab_hash), checked when it is read back.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import numpy as np

from ..core.errors import InvalidJSONError, PushmaskError
from ..core.recursion import load_json_text

FORMAT_VERSION = 2
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


def content_digest(payload: dict) -> str:
    """blake2b digest of a payload's content: every key but "digest", keys sorted, arrays as
    to_json writes them (so the digest survives JSON that is re-indented or has its keys
    reordered, and nothing else).  A CompiledGrammar's JSON carries it: its automaton and masks
    go to the kernels as they are, so a changed field must be refused, not run."""
    body = {key: value for key, value in payload.items() if key != "digest"}
    text = json.dumps(body, default=_encode_array, separators=(",", ":"), sort_keys=True)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def check_digest(payload: dict, kind: str) -> dict:
    """The payload if its "digest" is its content's (content_digest), else DeserializeFormatError."""
    if payload.get("digest") != content_digest(payload):
        raise DeserializeFormatError(
            f"invalid serialized {kind}: its content does not match its digest (the text was changed "
            f"or damaged after serialize_json wrote it); serialize the {kind} again"
        )
    return payload


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
