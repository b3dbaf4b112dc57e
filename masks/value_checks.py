"""Value checks in the matcher: uniqueItems, overlapping oneOf and the distinct member names of
counted undeclared members, which no grammar can express.

The JSON Schema compiler names checked rules in `Grammar.checks` (grammar/json_checks.py); each
matches exactly one JSON value, a superset of the valid ones.  The automaton says where a checked
value is: a stack whose chain holds the frame pushed on entering the checked rule is inside one
instance of it, keyed by (that frame, the rule).  An instance starts at the first byte a stack
consumes inside it; from there a small JSON scanner (`Scan`) follows its bytes and evaluates the
check when an array item closes (uniqueItems: JSON equality, as the spec defines it), when a
member name closes (distinct names: the decoded name differs from the object's earlier ones) or when
the value closes (oneOf: jsonschema validates the value against the checked subschema).  When an
instance fails, every stack inside it is dropped before the epsilon closure, so the value can
neither continue nor end; if no stack is left the bytes are rejected.

Checked advances go byte by byte through the kernels (`CheckedAdvance.advance`); a token needs one
only when an instance is open or the token holds a byte a checked rule can start with.  Masks take
the grammar mask and clear the tokens whose checked advance fails; only tokens that can close a
value of an open instance (by their bytes, see `Scan.triggers`), or that hold a whole failing
value themselves (found once per grammar), are simulated, so the cost is bounded by those.
"""

from __future__ import annotations

import json
import re

import numpy as np

from ..automata import kernels
from ..core.caches import BoundedCache
from ..grammar.json_checks import DistinctNames, UniqueItems, ValidatesSchema, json_key, parse_json

_WS = frozenset(b" \t\n\r")
_LITERALS = (b"true", b"false", b"null")
_OPEN = frozenset(b"[{")
_CLOSE = frozenset(b"]}")
_QUOTE = 0x22
_BACKSLASH = 0x5C
IN_STRING_TRIGGERS = frozenset(b'"')
"""The only byte that can close anything while a scan is inside a string."""
TRIGGERS = frozenset(b'"]},el') | _WS
"""Bytes that can close an array item or a value: a string's quote, a container's bracket, a
number's terminator (comma, whitespace, bracket) and the last letter of true/false/null."""

FAILED = None
_TAIL_CLOSES = re.compile(rb'["\]}]|true|false|null|[0-9][\s,\]}]')
"""After a string's closing quote: what may close another item or value in the same token."""
EFFECT_MEMO_ENTRIES = 256
"""(scan structure, grammar mask) pairs whose closing tokens a grammar keeps (read when the
grammar's first matcher with value checks is made)."""
_STRING_STOP = re.compile(rb'["\\]')


class Scan:
    """One checked value's bytes so far (immutable: `step` returns a new Scan, or FAILED).

    uniqueItems: buf holds the open item, items the keys of the closed ones.  Distinct names: buf
    holds the open member name (`at_name`: the object's next string is a name), items the keys of
    the closed names.  A schema check: buf holds the whole value, validated once it closes.
    """

    __slots__ = ("check", "depth", "in_string", "escaped", "buf", "items", "done", "at_name")

    def __init__(
        self, check, depth=0, in_string=False, escaped=False, buf=b"", items=frozenset(), done=False, at_name=False
    ):
        self.check = check
        self.depth = depth
        self.in_string = in_string
        self.escaped = escaped
        self.buf = buf
        self.items = items
        self.done = done
        self.at_name = at_name

    def _with(self, **changes) -> Scan:
        new = object.__new__(Scan)
        new.check, new.depth, new.in_string, new.escaped = self.check, self.depth, self.in_string, self.escaped
        new.buf, new.items, new.done, new.at_name = self.buf, self.items, self.done, self.at_name
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    @property
    def triggers(self) -> frozenset:
        return IN_STRING_TRIGGERS if self.in_string else TRIGGERS

    def step(self, b: int):
        if self.done:
            return self
        if isinstance(self.check, UniqueItems):
            return self._step_unique(b)
        if isinstance(self.check, DistinctNames):
            return self._step_names(b)
        return self._step_value(b)

    @property
    def in_item_string(self) -> bool:
        """Inside a string whose closing quote closes an item (uniqueItems) or a name."""
        if not self.in_string or self.depth != 1:
            return False
        return isinstance(self.check, UniqueItems) or (isinstance(self.check, DistinctNames) and self.at_name)

    def run(self, data: bytes):
        """The scan after `data` (stopping once the value closed), or FAILED."""
        scan, i, n = self, 0, len(data)
        while i < n:
            if scan.in_string and not scan.escaped:  # string content up to the next quote or escape
                stop = _STRING_STOP.search(data, i)
                j = n if stop is None else stop.start()
                if j > i:
                    if scan.keeps_strings:
                        scan = scan._with(buf=scan.buf + data[i:j])
                    i = j
                    continue
            scan = scan.step(data[i])
            i += 1
            if scan is FAILED or scan.done:
                return scan
        return scan

    @property
    def keeps_strings(self) -> bool:
        """Does the open string's content go into buf?  Distinct names keep only names."""
        return not isinstance(self.check, DistinctNames) or self.in_item_string

    def structure(self) -> tuple:
        """Everything but the closed items: what `effect` depends on."""
        return id(self.check), self.depth, self.in_string, self.escaped, self.buf, self.at_name

    def effect(self, data: bytes):
        """The keys of the array items this scan closes over data (an empty set for a value
        check that holds or stays open), or FAILED when data alone breaks the check (a value that
        fails, two equal items).  The scan with its items fails iff this fails or meets them."""
        out = self._with(items=frozenset()).run(data)
        return FAILED if out is FAILED else out.items

    def _string_byte(self, buf: bytes, b: int):
        """The scan after byte b inside a string (buf: the bytes so far, b included), or None
        when b is the closing quote."""
        if self.escaped:
            return self._with(buf=buf, escaped=False)
        if b == _BACKSLASH:
            return self._with(buf=buf, escaped=True)
        return self._with(buf=buf) if b != _QUOTE else None

    # -- uniqueItems: items at depth 1 ---------------------------------------------------------

    def _step_unique(self, b: int):
        depth, buf = self.depth, self.buf
        if depth == 0:  # the array's "["
            return self._with(depth=1)
        if self.in_string:
            buf += bytes((b,))
            inside = self._string_byte(buf, b)
            if inside is not None:
                return inside
            return self._close_item(buf, in_string=False) if depth == 1 else self._with(buf=buf, in_string=False)
        if depth == 1:
            if b in _WS or b == 0x2C or b == 0x5D:  # a number (or nothing) ends here
                scan = self._close_item(buf) if buf else self
                if scan is not FAILED and b == 0x5D:
                    scan = scan._with(done=True)
                return scan
            buf += bytes((b,))
            if b == _QUOTE:
                return self._with(buf=buf, in_string=True)
            if b in _OPEN:
                return self._with(buf=buf, depth=2)
            return self._close_item(buf) if buf in _LITERALS else self._with(buf=buf)
        buf += bytes((b,))
        if b == _QUOTE:
            return self._with(buf=buf, in_string=True)
        if b in _OPEN:
            return self._with(buf=buf, depth=depth + 1)
        if b in _CLOSE:
            return self._close_item(buf, depth=1) if depth == 2 else self._with(buf=buf, depth=depth - 1)
        return self._with(buf=buf)

    def _close_item(self, buf: bytes, **changes):
        key = json_key(parse_json(buf))
        if key in self.items:
            return FAILED
        return self._with(buf=b"", items=self.items | {key}, **changes)

    # -- distinct member names: names at depth 1 -----------------------------------------------

    def _step_names(self, b: int):
        depth = self.depth
        if depth == 0:  # the object's "{"
            return self._with(depth=1, at_name=True)
        if self.in_string:
            if not self.in_item_string:  # a value's string, or one nested deeper: skipped (buf stays empty)
                inside = self._string_byte(self.buf, b)
                return self._with(in_string=False) if inside is None else inside
            buf = self.buf + bytes((b,))
            inside = self._string_byte(buf, b)
            if inside is not None:
                return inside
            return self._close_item(buf, in_string=False, at_name=False)
        if b == _QUOTE:
            return self._with(in_string=True, buf=b'"' if depth == 1 and self.at_name else b"")
        if b in _OPEN:
            return self._with(depth=depth + 1)
        if b in _CLOSE:
            return self._with(depth=0, done=True) if depth == 1 else self._with(depth=depth - 1)
        if b == 0x2C and depth == 1:  # a comma between members: a name comes next
            return self._with(at_name=True)
        return self

    # -- a value checked when it closes ---------------------------------------------------------

    def _step_value(self, b: int):
        buf = self.buf + bytes((b,))
        depth = self.depth
        if self.in_string:
            inside = self._string_byte(buf, b)
            if inside is not None:
                return inside
            return self._close_value(buf) if depth == 0 else self._with(buf=buf, in_string=False)
        if b == _QUOTE:
            return self._with(buf=buf, in_string=True)
        if b in _OPEN:
            return self._with(buf=buf, depth=depth + 1)
        if b in _CLOSE:
            return self._close_value(buf) if depth == 1 else self._with(buf=buf, depth=depth - 1)
        if depth == 0 and buf in _LITERALS:
            return self._close_value(buf)
        # a number at depth 0 ends outside the rule: the compiler only checks values whose branches
        # overlap on objects, arrays or strings, so numbers here are exact already
        return self._with(buf=buf)

    def _close_value(self, buf: bytes):
        return self._with(buf=b"", depth=0, in_string=False, done=True) if _holds(self.check, buf) else FAILED


def _holds(check: ValidatesSchema, text: bytes) -> bool:
    # numbers as json.loads reads them (int, float): jsonschema's "integer" takes no Decimal
    return check.holds(json.loads(text))


class CheckedAdvance:
    """The checked rules of one compiled grammar and how stacks of one runner sit in them."""

    def __init__(self, compiled, runner):
        pda = compiled.pda
        self.runner = runner
        rule_ids = {name: i for i, name in enumerate(pda.rule_names)}
        self.checks: dict[int, object] = {
            rule_ids[name]: check for name, check in compiled.value_checks.items() if name in rule_ids
        }
        self.state_rule = pda.state_rule.tolist()
        self.byte_ptr, self.byte_lo, self.byte_hi = pda.byte_ptr.tolist(), pda.byte_lo.tolist(), pda.byte_hi.tolist()
        self._frame_keys: dict[int, tuple] = {}
        self.start_bytes = self._start_bytes(pda)

    def __bool__(self) -> bool:
        return bool(self.checks)

    def _start_bytes(self, pda) -> dict[int, frozenset]:
        """rule -> the bytes a value of that checked rule can start with."""
        out = {}
        allowed = np.zeros(256, dtype=np.uint8)
        for rule in self.checks:
            s, _, _, _ = self.runner.close(
                np.array([pda.rule_start[rule]], dtype=np.int64), np.array([kernels.ROOT], dtype=np.int64)
            )
            kernels.run_allowed_first_bytes(pda.blob, s, allowed)
            out[rule] = frozenset(np.flatnonzero(allowed).tolist())
        return out

    def any_start_byte(self) -> frozenset:
        return frozenset().union(*self.start_bytes.values()) if self.start_bytes else frozenset()

    # -- where stacks are ------------------------------------------------------------------------

    def _keys_below(self, frame: int) -> tuple:
        """Instance keys (entry frame, rule) of the checked rules the frame chain `frame` is in."""
        got = self._frame_keys.get(frame)
        if got is None:
            if frame < 0:
                got = ()
            else:
                state, parent = self.runner.pool.frame(frame)
                rule = self.state_rule[state]
                got = self._keys_below(parent)
                if rule in self.checks:
                    got = ((parent, rule),) + got
            self._frame_keys[frame] = got
        return got

    def keys_of(self, state: int, frame: int) -> tuple:
        rule = self.state_rule[state]
        below = self._keys_below(frame)
        return ((frame, rule),) + below if rule in self.checks else below

    # -- advancing -------------------------------------------------------------------------------

    def _steps_on(self, state: int, b: int) -> bool:
        for e in range(self.byte_ptr[state], self.byte_ptr[state + 1]):
            if self.byte_lo[e] <= b <= self.byte_hi[e]:
                return True
        return False

    def advance(self, stacks: np.ndarray, scans: dict, data, start: int, end: int):
        """Advance the closed packed stack set over data[start:end] byte by byte, checking the
        open instances (scans: key -> Scan).  None if rejected, else (stacks, n_kernel, flags,
        scans).  Each byte is first given to the scans of the instances the stacks that consume
        it are in; the stacks in an instance that fails are dropped before the byte is taken (the
        kernels pop finished rules eagerly, so after the byte they could not be told apart)."""
        runner = self.runner
        n_kernel, flags = 0, 0
        for i in range(start, end):
            b = int(data[i])
            half = len(stacks) // 2
            live: dict = {}
            failed: set = set()
            top_keys = []
            for s, p in zip(stacks[:half].tolist(), stacks[half:].tolist()):
                if not self._steps_on(s, b):
                    top_keys.append(())
                    continue
                keys = self.keys_of(s, p)
                top_keys.append(keys)
                for key in keys:
                    if key in live or key in failed:
                        continue
                    old = scans.get(key)
                    scan = old if old is not None and not old.done else Scan(self.checks[key[1]])
                    scan = scan.step(b)
                    if scan is FAILED:
                        failed.add(key)
                    else:
                        live[key] = scan
            if failed:
                keep = [j for j, keys in enumerate(top_keys) if failed.isdisjoint(keys)]
                stacks = np.concatenate([stacks[:half][keep], stacks[half:][keep]])
            got = runner.advance(stacks, data, i, i + 1)
            if got is None:
                return None
            stacks, n_kernel, flags = got
            scans = live
        return stacks, n_kernel, flags, scans


class MaskChecks:
    """Clears from a grammar mask the tokens whose checked advance fails (see the module doc)."""

    def __init__(self, checked: CheckedAdvance, tokenizer_info, cache: dict):
        """cache: the compiled grammar's dict for what depends only on it and the vocabulary,
        shared by its matchers on every thread: an entry made lazily there is the same whichever
        thread makes it (two may both make it; either is kept), and the one entry that changes
        after, the effects memo, is a thread-safe LRU."""
        self.checked = checked
        self.vocab = tokenizer_info.decoded_vocab
        self.vocab_size = vocab_size = tokenizer_info.vocab_size
        data, offsets = tokenizer_info.flat_vocab()
        self._flat = data
        self._starts = offsets[:vocab_size]
        self._nonempty = offsets[1 : vocab_size + 1] > offsets[:vocab_size]
        self._has_byte: dict[int, np.ndarray] = cache.setdefault("has_byte", {})
        # `_closing` memoised by (scan structure, grammar mask[, items]): shared by every matcher
        # of the grammar, whatever thread fills it, so a thread-safe LRU (one setdefault: the
        # first matcher's memo is the grammar's)
        self._effects: BoundedCache[tuple, list] = cache.setdefault("effects", BoundedCache(EFFECT_MEMO_ENTRIES))
        self._cache = cache

    def has_any(self, byte_set) -> np.ndarray:
        """Bool array: which tokens hold a byte of byte_set."""
        out = np.zeros(self.vocab_size, dtype=bool)
        for b in byte_set:
            arr = self._has_byte.get(b)
            if arr is None:
                hits = np.add.reduceat((self._flat == b).astype(np.int32), self._starts.clip(max=len(self._flat) - 1))
                arr = (hits > 0) & self._nonempty
                self._has_byte[b] = arr
            out |= arr
        return out

    def _quotes(self) -> tuple:
        """Per token, split at its first quote: (has a quote, a backslash before it, bytes after
        it that can close something, {bytes before it: token ids} for the rest)."""
        got = self._cache.get("quotes")
        if got is None:
            quoted = np.zeros(self.vocab_size, dtype=bool)
            escape_before = np.zeros(self.vocab_size, dtype=bool)
            busy_tail = np.zeros(self.vocab_size, dtype=bool)
            by_head: dict[bytes, list[int]] = {}
            for t, token in enumerate(self.vocab[: self.vocab_size]):
                q = token.find(b'"')
                if q < 0:
                    continue
                quoted[t] = True
                head, tail = token[:q], token[q + 1 :]
                escape_before[t] = b"\\" in head
                busy_tail[t] = _TAIL_CLOSES.search(tail) is not None
                if not escape_before[t] and not busy_tail[t]:
                    by_head.setdefault(head, []).append(t)
            got = self._cache["quotes"] = (quoted, escape_before, busy_tail, by_head)
        return got

    def _string_candidates(self, scan: Scan, allowed: np.ndarray) -> list[int]:
        """Tokens that may fail a scan inside a string (not after a backslash): those whose
        bytes after the closing quote may close more, those with an escape before it, and, when
        the quote closes an array item or a member name, those whose bytes before it spell an
        earlier item's (name's) rest."""
        quoted, escape_before, busy_tail, by_head = self._quotes()
        out = np.flatnonzero(allowed & (escape_before | busy_tail)).tolist()
        if scan.in_item_string:
            try:
                start = json.loads(scan.buf + b'"')
            except ValueError:  # a character split between tokens: look at every quoted token
                return np.flatnonzero(allowed & quoted).tolist()
            for kind, value in scan.items:
                if kind == "string" and value.startswith(start):
                    out += [t for t in by_head.get(value[len(start) :].encode("utf-8"), ()) if allowed[t]]
        return out

    def _closing(self, scan: Scan, allowed: np.ndarray) -> list:
        """(token, Scan.effect) for the allowed tokens that close something from this scan."""
        if scan.in_string and not scan.escaped:
            tokens = self._string_candidates(scan, allowed)
        else:
            tokens = np.flatnonzero(allowed & self.has_any(scan.triggers)).tolist()
        out = []
        for t in tokens:
            try:
                closed = scan.effect(self.vocab[t])
            except ValueError:  # the bytes leave JSON: the grammar rejects the token
                continue
            if closed is FAILED or closed:
                out.append((t, closed))
        return out

    def fresh_failures(self) -> list[int]:
        """Token ids that hold, from some byte a checked rule can start with, a whole value that
        fails that rule's check (e.g. '[1,1]' for uniqueItems): they may fail with no instance
        open before them.  Found once per grammar by scanning the tokens holding such bytes."""
        if "fresh_failures" not in self._cache:
            found = []
            candidates = np.flatnonzero(self.has_any(self.checked.any_start_byte()))
            for t in candidates.tolist():
                token = self.vocab[t]
                if self._fails_fresh(token):
                    found.append(t)
            self._cache["fresh_failures"] = found
        return self._cache["fresh_failures"]

    def _fails_fresh(self, token: bytes) -> bool:
        for rule, check in self.checked.checks.items():
            firsts = self.checked.start_bytes[rule]
            for i, b in enumerate(token):
                if b in firsts:
                    try:
                        if Scan(check).run(token[i:]) is FAILED:
                            return True
                    except ValueError:  # not one JSON value from here: the grammar decides
                        continue
        return False

    def restrict(self, words: np.ndarray, stacks: np.ndarray, scans: dict) -> None:
        """Clear the bits of tokens in `words` whose checked advance from (stacks, scans) fails."""
        candidates = set(self.fresh_failures())
        open_scans = [scan for scan in scans.values() if not scan.done]
        if open_scans:
            allowed = None
            words_key = words.tobytes()
            for scan in open_scans:
                # the tokens of this mask that close something, memoised per (scan structure,
                # grammar mask) -- between array items both repeat -- and, in a string, the
                # items (`_string_candidates` looks them up); out of strings they are checked here
                key = (scan.structure(), words_key, scan.items if scan.in_string else None)
                closing = self._effects.get(key)
                if closing is None:
                    if allowed is None:
                        allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[: self.vocab_size].astype(bool)
                    closing = self._closing(scan, allowed)
                    self._effects.put(key, closing)
                for t, closed in closing:
                    if closed is FAILED or not scan.items.isdisjoint(closed):
                        candidates.add(t)
        bits = words.view(np.uint32)
        for t in candidates:
            if not (bits[t >> 5] >> np.uint32(t & 31)) & 1:
                continue
            data = np.frombuffer(self.vocab[t], dtype=np.uint8)
            if self.checked.advance(stacks, scans, data, 0, len(data)) is None:
                bits[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)
