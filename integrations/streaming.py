"""Streaming generation: `pm.generate(..., stream=True)` returns a `GenerationStream`, an iterator
of `StreamEvent`s (each new piece of text, and for JSON the value so far), whose `result` is the
finished `Generation`.

The value so far holds only what has closed: finished scalars and keys, and open arrays and
objects with their finished members; a string, number or literal still being written is left
out, so a consumer never sees a value that will change.  Members of the top-level object or
array are checked against their subschema (`properties` / `patternProperties` /
`additionalProperties`, `prefixItems` / `items`) with jsonschema as they close.
"""

from __future__ import annotations

import json
import queue
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import InternalError

__all__ = ["GenerationStream", "StreamEvent", "partial_json"]

_MISSING = object()
_SCALAR_END = re.compile(r"[^,\]}\s]*")
_WHITESPACE = " \t\n\r"


@dataclass
class StreamEvent:
    """One piece of streamed text.  value: for JSON, the value so far (only closed members; None
    until the outer value has started).  closed: the top-level members that closed with this
    piece, as (key or index, value), each already checked against its subschema."""

    text: str
    value: Any = None
    closed: list = field(default_factory=list)


class _PrefixParser:
    """Recursive descent over a prefix of JSON text; `value()` returns (value or _MISSING, done)."""

    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def _skip_ws(self) -> bool:
        """Skip whitespace; False at the end of the text."""
        while self.i < len(self.s) and self.s[self.i] in _WHITESPACE:
            self.i += 1
        return self.i < len(self.s)

    def value(self):
        if not self._skip_ws():
            return _MISSING, False
        c = self.s[self.i]
        if c == "{":
            return self._container("}", self._member)
        if c == "[":
            return self._container("]", self._item)
        if c == '"':
            return self._string()
        end = _SCALAR_END.match(self.s, self.i).end()
        if end == len(self.s):  # a number or literal may go on
            self.i = end
            return _MISSING, False
        token, self.i = self.s[self.i : end], end
        return json.loads(token), True

    def _string(self):
        j = self.i + 1
        while j < len(self.s):
            if self.s[j] == "\\":
                j += 2
            elif self.s[j] == '"':
                text, self.i = self.s[self.i : j + 1], j + 1
                return json.loads(text), True
            else:
                j += 1
        self.i = len(self.s)
        return _MISSING, False

    def _container(self, close: str, element: Callable):
        self.i += 1
        out: Any = {} if close == "}" else []
        while self._skip_ws():
            c = self.s[self.i]
            if c == close:
                self.i += 1
                return out, True
            if c == ",":
                self.i += 1
                continue
            if not element(out):
                return out, False
        return out, False

    def _member(self, out: dict) -> bool:
        key, done = self._string()
        if not done or not self._skip_ws():
            return False
        self.i += 1  # the colon
        value, done = self.value()
        if value is not _MISSING:
            out[key] = value
        return done

    def _item(self, out: list) -> bool:
        value, done = self.value()
        if value is not _MISSING:
            out.append(value)
        return done


def partial_json(text: str) -> tuple[Any, bool]:
    """(the value so far, whether it is complete) of a prefix of JSON text: closed scalars, and
    open containers with their closed members; None when nothing has closed or opened yet."""
    value, done = _PrefixParser(text).value()
    return (None if value is _MISSING else value), done


def _closed_members(value: Any, done: bool) -> list:
    """The top-level members of a value so far that can no longer change."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = list(enumerate(value))
    else:
        return []
    # the last member of an open container may be an open container itself
    if not done and items and isinstance(items[-1][1], (dict, list)):
        items = items[:-1]
    return items


def _member_schema(schema: Any, key) -> Any:
    """The subschema a top-level member must satisfy, as far as the schema states it directly
    (True: nothing to check)."""
    if not isinstance(schema, dict):
        return True
    if isinstance(key, int):
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(prefix, list):
            return prefix[key] if key < len(prefix) else items
        if isinstance(items, list):  # draft-4 tuples
            return items[key] if key < len(items) else schema.get("additionalItems", True)
        return items
    properties = schema.get("properties") or {}
    if key in properties:
        return properties[key]
    matching = [sub for pattern, sub in (schema.get("patternProperties") or {}).items() if re.search(pattern, key)]
    if matching:
        return {"allOf": matching}
    return schema.get("additionalProperties", True)


class GenerationStream:
    """Iterate for StreamEvents; `result` is the Generation once the iteration has ended.  The
    generation runs on a background thread, started by the first `next()`."""

    def __init__(self, run: Callable[[Callable[[str], None]], Any], schema: Any = None):
        self._run = run
        self._schema = schema
        self._validator = None
        if schema is not None:
            import jsonschema

            cls = jsonschema.validators.validator_for(schema)
            self._validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
        self.result = None

    def __iter__(self) -> Iterator[StreamEvent]:
        pieces: queue.Queue = queue.Queue()
        done = object()
        failure: list[BaseException] = []

        def work():
            try:
                self.result = self._run(pieces.put)
            except BaseException as exc:  # handed to the consumer below
                failure.append(exc)
            finally:
                pieces.put(done)

        worker = threading.Thread(target=work, name="pushmask-stream", daemon=True)
        worker.start()
        text, reported = "", 0
        while True:
            piece = pieces.get()
            if piece is done:
                break
            text += piece
            validator = self._validator  # None exactly when there is no schema
            if validator is None:
                yield StreamEvent(piece)
                continue
            value, complete = partial_json(text)
            closed = _closed_members(value, complete)
            fresh = closed[reported:]
            reported = len(closed)
            for key, member in fresh:
                self._check(validator, key, member)
            yield StreamEvent(piece, value, fresh)
        worker.join()
        if failure:
            raise failure[0]

    def _check(self, validator: Any, key, member) -> None:
        sub = _member_schema(self._schema, key)
        if sub is True or sub == {}:
            return
        errors = list(validator.evolve(schema=sub).iter_errors(member))
        if errors:  # the grammar admits only valid members: this would be a pushmask bug
            raise InternalError(f"streamed member {key!r} fails its schema: {errors[0].message}")
