"""JSON string tokens under JSON Schema string constraints, as grammar IR.

The pipeline has two layers:

1. The *decoded* language: a deterministic automaton (`Dfa`) over Unicode code points that
   accepts exactly the decoded string values allowed by minLength / maxLength / pattern /
   format / const-like literals.  Patterns are ECMA-262 regexes with search semantics, parsed
   here by a small regex parser (`pattern_dfa`), so every construct is under our control.
2. The *encoded* language: `encode_json_string(dfa)` turns every code-point edge into all of
   its JSON spellings -- raw UTF-8 where JSON allows it unescaped, the short escapes
   (\\" \\\\ \\/ \\b \\f \\n \\r \\t), \\uXXXX with upper- or lower-case hex digits, and
   surrogate pairs \\uD8xx\\uDCxx for code points above U+FFFF -- as one deterministic IR
   `CharFsm` between the quotes.

The encoder, trim, minimisation and products run as numba kernels over flat arrays
(`string_kernels`); `Dfa` keeps its list-of-edges form for everything else.

API: `string_expr`, `string_literal_expr`, `string_excluding_expr` give whole string tokens;
`JSON_CHAR` / `ANY_STRING` are the unconstrained pieces.  To combine constraints yourself, build
decoded automata (`string_dfa`, `pattern_dfa`, `literal_dfa`, `format_dfa`, `length_dfa`,
`any_string_dfa`), combine them with `Dfa.intersect` / `union` / `difference` (which raise
`_Budget` past their state budget) and encode the result with `json_string_expr`.

Soundness notes (the grammar never accepts a text whose decoded value breaks a constraint):

- Lone surrogate escapes (\\ud800 without a low half) are never accepted: they decode to
  strings that are not Unicode text.  json.dumps never produces them for real text.
- `pattern` is evaluated with the *intersection* of ECMA-262 and Python `re` semantics, since
  the spec says ECMA but the `jsonschema` library uses `re.search`.  Per atom we take the
  characters both engines agree on (`\\d` = [0-9], `\\D` = not a Unicode decimal digit, `.`
  excludes \\n \\r U+2028 U+2029, `$` only at the very end, ...).  A regex without negation
  is monotone in its atoms, so the result is a subset of both languages and equals them on
  ASCII text.  Constructs where the engines disagree outright raise UnsupportedSchemaError.
  Unicode property escapes (`\\p{L}`, `\\P{Script=Greek}`, ECMA-262 'u' mode names) exist in
  ECMA only (`re` rejects them, so jsonschema cannot check such patterns): ECMA decides alone,
  from the tables of unicode_properties.py.
  Lookaheads are read only right after a leading '^' (an intersection or difference of
  automata); a negative one's body takes the characters *either* engine matches, so the
  difference stays a subset of both languages.
- Formats are sound with respect to both their RFC and `jsonschema`'s FormatChecker with the
  optional packages installed here (see `FORMAT_REGEXES`), and reject every invalid string of
  the official JSON-Schema-Test-Suite.  Sound subsets, by design: no leap seconds (":60"),
  e-mail without quoted local parts or address literals, hostnames of at most 8 labels (a first
  of up to 63 characters, the rest up to 26) without "--" in label positions 3-4, IDN formats
  restricted to ASCII, "regex" limited to groups nested 3 deep (`_regex_syntax`).  Unknown
  formats are annotations: `format_dfa` returns None for them and `string_expr(..., format=unknown)` accepts any
  string (check `is_known_format` to decide otherwise).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from functools import lru_cache
from itertools import chain
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Callable, Iterable

import numpy as np

from . import string_kernels, subset_kernels
from .errors import SchemaError, UnsupportedSchemaError
from .unicode_properties import UnknownProperty, every_code_point, property_ranges
from .ir import (
    MAX_CODE_POINT, SURROGATES, CharClass, CharFsm, Expr, NOTHING, alt, lit, normalize_ranges, complement_ranges, rep,
    seq,
)

__all__ = [
    "Dfa", "any_string_dfa", "string_expr", "string_literal_expr", "string_excluding_expr", "string_dfa", "pattern_dfa",
    "length_dfa", "literal_dfa", "format_dfa", "is_known_format", "encode_json_string", "json_string_expr",
    "JSON_CHAR", "ANY_STRING", "RAW_STRING_CHAR", "JSON_ESCAPE", "DEFAULT_STATE_BUDGET", "KNOWN_FORMATS",
]

DEFAULT_STATE_BUDGET = 20_000
"""Largest decoded automaton we build before raising UnsupportedSchemaError."""

Ranges = tuple[tuple[int, int], ...]

# Every code point a decoded string may contain: all of Unicode except surrogates.
ALL_CHARS: Ranges = ((0, SURROGATES[0] - 1), (SURROGATES[1] + 1, MAX_CODE_POINT))


# ---------------------------------------------------------------------------------------------
# Range-set helpers (inclusive, sorted, disjoint tuples).


def _union(*sets: Iterable[tuple[int, int]]) -> Ranges:
    return normalize_ranges(r for s in sets for r in s)


def _complement(ranges: Ranges) -> Ranges:
    return _intersect(complement_ranges(ranges), ALL_CHARS)


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _chars(text: str) -> Ranges:
    return normalize_ranges((ord(c), ord(c)) for c in text)


# ---------------------------------------------------------------------------------------------
# Deterministic automata over code-point ranges.


class Dfa:
    """A deterministic automaton over code points; state 0 is initial.

    trans[s] is a sorted list of disjoint (lo, hi, target) edges; a code point with no edge
    goes to an implicit dead state.  Operations return trimmed automata (every state is
    reachable and can reach a final state), so an empty language has exactly one state and no
    finals.  A Dfa is immutable: the operations (numba kernels, `string_kernels`) work on its
    flat arrays, made once, and the automata they return build `trans` only when it is read.
    """

    __slots__ = ("_trans", "_arrays", "finals")

    def __init__(self, trans: list[list[tuple[int, int, int]]], finals: Iterable[int]):
        self._trans = trans
        self._arrays: tuple | None = None
        self.finals = frozenset(finals)

    @classmethod
    def _of_arrays(cls, start, count, lo, hi, target, final) -> "Dfa":
        """The Dfa of flat arrays (see `arrays`); no states is the empty language."""
        if start.shape[0] == 0:
            return cls([[]], ())
        dfa = cls.__new__(cls)
        dfa._trans = None
        dfa._arrays = (start, count, lo, hi, target, final)
        dfa.finals = frozenset(np.flatnonzero(final).tolist())
        return dfa

    @property
    def trans(self) -> list[list[tuple[int, int, int]]]:
        if self._trans is None:
            start, count, lo, hi, target, _ = self._arrays
            edges = list(zip(lo.tolist(), hi.tolist(), target.tolist()))
            self._trans = [edges[a:a + c] for a, c in zip(start.tolist(), count.tolist())]
        return self._trans

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The flat form of `string_kernels`: (start, count, lo, hi, target, final), where the
        edges of state s are start[s] .. start[s] + count[s] - 1 of lo, hi, target."""
        if self._arrays is None:
            trans = self._trans
            count = np.array(list(map(len, trans)), np.int64)
            edges = np.fromiter(chain.from_iterable(chain.from_iterable(trans)), np.int64, 3 * int(count.sum()))
            lo, hi, target = edges.reshape(-1, 3).T.copy()
            final = np.zeros(len(trans), np.bool_)
            final[list(self.finals)] = True
            self._arrays = (np.cumsum(count) - count, count, lo, hi, target, final)
        return self._arrays

    @property
    def size(self) -> int:
        return len(self._trans) if self._trans is not None else self._arrays[0].shape[0]

    def is_empty(self) -> bool:
        return not self.finals

    def is_universal(self) -> bool:
        """Accepts every string (as minimized automata of e.g. unanchored "a?" or "" do)."""
        reachable = {0}
        stack = [0]
        while stack:
            s = stack.pop()
            if s not in self.finals or _intersect(tuple((lo, hi) for lo, hi, _ in self.trans[s]), ALL_CHARS) != ALL_CHARS:
                return False
            for _, _, t in self.trans[s]:
                if t not in reachable:
                    reachable.add(t)
                    stack.append(t)
        return True

    def step(self, state: int, cp: int) -> int | None:
        edges = self.trans[state]
        k = bisect_right(edges, (cp, MAX_CODE_POINT + 1, 0)) - 1
        if k >= 0 and edges[k][0] <= cp <= edges[k][1]:
            return edges[k][2]
        return None

    def accepts(self, text: str) -> bool:
        state: int | None = 0
        for ch in text:
            state = self.step(state, ord(ch))
            if state is None:
                return False
        return state in self.finals

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def explore(cls, initial, step: Callable, is_final: Callable, budget: int = DEFAULT_STATE_BUDGET,
                what: str = "automaton") -> "Dfa":
        """Build a DFA from hashable state keys: step(key) yields (lo, hi, next_key) edges."""
        index = {initial: 0}
        keys = [initial]
        trans: list[list[tuple[int, int, int]]] = []
        for key in keys:  # grows while we walk it
            edges = []
            for lo, hi, nxt in step(key):
                if nxt not in index:
                    if len(keys) >= budget:
                        raise _Budget(what, budget)
                    index[nxt] = len(keys)
                    keys.append(nxt)
                edges.append((lo, hi, index[nxt]))
            edges.sort()
            trans.append(edges)
        finals = [i for i, k in enumerate(keys) if is_final(k)]
        return cls(trans, finals).trim()

    def trim(self) -> "Dfa":
        """Drop states that cannot reach a final state or are unreachable; renumber from 0 in
        breadth-first order (edges in order), joining adjacent ranges to one target."""
        return Dfa._of_arrays(*string_kernels.trim(*self.arrays()))

    def minimize(self) -> "Dfa":
        """An equivalent minimal trimmed DFA (incremental Moore refinement, numbered as `trim`
        does, so equal languages give equal automata)."""
        return Dfa._of_arrays(*string_kernels.minimize(*string_kernels.trim(*self.arrays())))

    # -- boolean operations --------------------------------------------------------------------

    def _product(self, other: "Dfa", rule: int, keep_dead: bool, budget: int, minimize: bool = True) -> "Dfa":
        """The product automaton: finals by `rule` (string_kernels.AND, OR, AND_NOT); pairs with
        one side dead are kept when `keep_dead`; _Budget past `budget` reachable pairs."""
        status, *arrays = string_kernels.product(*self.arrays(), *other.arrays(), rule, keep_dead, budget, minimize)
        if status == string_kernels.STATES:
            raise _Budget("product automaton", budget)
        return Dfa._of_arrays(*arrays)

    # minimize=False skips Moore refinement (whose rounds grow with the longest path) when the
    # caller builds near-minimal automata anyway; the result is then only trimmed.

    def intersect(self, other: "Dfa", budget: int = DEFAULT_STATE_BUDGET, minimize: bool = True) -> "Dfa":
        return self._product(other, string_kernels.AND, False, budget, minimize)

    def intersects(self, other: "Dfa", budget: int = DEFAULT_STATE_BUDGET) -> bool:
        """Do the languages share a string?  (`intersect` without minimising: same budget.)"""
        return not self.intersect(other, budget, minimize=False).is_empty()

    def union(self, other: "Dfa", budget: int = DEFAULT_STATE_BUDGET, minimize: bool = True) -> "Dfa":
        return self._product(other, string_kernels.OR, True, budget, minimize)

    def difference(self, other: "Dfa", budget: int = DEFAULT_STATE_BUDGET, minimize: bool = True) -> "Dfa":
        return self._product(other, string_kernels.AND_NOT, True, budget, minimize)

    __and__ = intersect
    __or__ = union
    __sub__ = difference


class _Budget(Exception):
    """A construction ran past its size budget (callers turn it into UnsupportedSchemaError)."""

    def __init__(self, what, budget, unit="states"):
        super().__init__(f"{what} exceeds {budget} {unit}")


def _budgeted(keyword: str, pointer: str, fn: Callable, *args):
    try:
        return fn(*args)
    except _Budget as exc:
        raise UnsupportedSchemaError(keyword, pointer, f"{exc}; simplify the constraint") from None


# ---------------------------------------------------------------------------------------------
# Basic decoded languages.


def any_string_dfa() -> Dfa:
    return Dfa([[(lo, hi, 0) for lo, hi in ALL_CHARS]], [0])


def length_dfa(min_length: int = 0, max_length: int | None = None, budget: int = DEFAULT_STATE_BUDGET) -> Dfa:
    """Strings of min_length..max_length code points."""
    top = max_length if max_length is not None else min_length
    if top + 1 > budget:
        raise _Budget("length automaton", budget)
    trans = []
    for n in range(top + 1):
        if n < top:
            trans.append([(lo, hi, n + 1) for lo, hi in ALL_CHARS])
        elif max_length is None:
            trans.append([(lo, hi, n) for lo, hi in ALL_CHARS])
        else:
            trans.append([])
    return Dfa(trans, range(min_length, top + 1)).trim()


def literal_dfa(values: Iterable[str]) -> Dfa:
    """Exactly the given strings (a trie)."""
    trans: list[dict[int, int]] = [{}]
    finals = set()
    for value in values:
        s = 0
        for ch in value:
            cp = ord(ch)
            if SURROGATES[0] <= cp <= SURROGATES[1]:
                break  # a string with a lone surrogate is never produced by the grammar
            if cp not in trans[s]:
                trans[s][cp] = len(trans)
                trans.append({})
            s = trans[s][cp]
        else:
            finals.add(s)
    return Dfa([sorted((cp, cp, t) for cp, t in d.items()) for d in trans], finals).trim()


# ---------------------------------------------------------------------------------------------
# ECMA-262 patterns (search semantics) -> Dfa.

_ECMA_SPACE = _union(_chars("\t\n\x0b\x0c\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"), ((0x2000, 0x200A),))
_ECMA_LINE_TERMINATORS = _chars("\n\r\u2028\u2029")
_DIGITS = ((0x30, 0x39),)
_WORD = _union(_DIGITS, ((0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)))


@lru_cache(maxsize=None)
def _python_class(name: str) -> Ranges:
    """The code points Python's `re` puts in \\d, \\w or \\s for str patterns (Unicode mode):
    the runs `re` itself finds in a string of every code point."""
    runs = tuple((m.start(), m.end() - 1) for m in re.finditer(rf"\{name}+", every_code_point()))
    return _intersect(runs, ALL_CHARS)


class _CharSet:
    """A character set under both regex semantics: (ECMA code points, Python `re` code points)."""

    __slots__ = ("ecma", "py")

    def __init__(self, ecma: Ranges, py: Ranges | None = None):
        self.ecma = ecma
        self.py = ecma if py is None else py

    def both(self) -> Ranges:
        return _intersect(self.ecma, self.py)

    def either(self) -> Ranges:
        return _union(self.ecma, self.py)


def _class_escape(letter: str) -> _CharSet:
    if letter == "d":
        return _CharSet(_DIGITS, _python_class("d"))
    if letter == "D":
        return _CharSet(_complement(_DIGITS), _complement(_python_class("d")))
    if letter == "w":
        return _CharSet(_WORD, _python_class("w"))
    if letter == "W":
        return _CharSet(_complement(_WORD), _complement(_python_class("w")))
    if letter == "s":
        return _CharSet(_ECMA_SPACE, _python_class("s"))
    if letter == "S":
        return _CharSet(_complement(_ECMA_SPACE), _complement(_python_class("s")))
    raise AssertionError(letter)


_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "f": "\f", "v": "\v"}


class _PatternUnsupported(Exception):
    pass


class _RegexParser:
    """Recursive-descent parser for ECMA-262 regexes -> a small AST.

    AST nodes: ("set", ranges) | ("seq", [nodes]) | ("alt", [nodes]) | ("rep", node, lo, hi)
    | ("bol",) | ("eol",) | ("look", positive, node).

    Lookaheads are read only where they reduce to automaton intersection: at the top level right
    after a leading '^' (`^(?!@@)\\w+`), where "X matches at offset 0" is the language X.*.
    A negative lookahead's body is parsed with `widen=True`: every atom takes the characters
    *either* engine matches (and '$' also before a final newline, as in Python), so its
    complement stays a subset of both engines' languages.
    """

    def __init__(self, pattern: str, widen: bool = False):
        self.p = pattern
        self.i = 0
        self.widen = widen
        self.depth = 0  # group nesting

    def fail(self, message: str):
        raise _PatternUnsupported(f"{message} at offset {self.i} of {self.p!r}")

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def parse(self):
        node = self.alternation()
        if self.i < len(self.p):
            self.fail("unbalanced ')'")
        return node

    def alternation(self):
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def sequence(self):
        items = []
        while self.i < len(self.p) and self.peek() not in "|)":
            if (self.depth == 0 and not self.widen and self.p.startswith(("(?=", "(?!"), self.i)
                    and items and items[0] == ("bol",) and all(item[0] == "look" for item in items[1:])):
                items.append(self.lookahead())
                continue
            atom = self.atom()
            items.append(self.quantified(atom))
        return ("seq", items)

    def lookahead(self):
        positive = self.p[self.i + 2] == "="
        self.i += 3
        body = _RegexParser(self.p, widen=not positive)
        body.i, body.depth = self.i, 1
        node = body.alternation()
        self.i = body.i
        if self.peek() != ")":
            self.fail("missing ')'")
        self.i += 1
        return ("look", positive, node)

    def chars(self, charset: "_CharSet"):
        """The atom for a character set: both engines' characters, or either's when widened."""
        return ("set", charset.either() if self.widen else charset.both())

    _QUANT = re.compile(r"\{(\d+)(,(\d*))?\}")

    def quantified(self, atom):
        quantified = False
        while True:
            c = self.peek()
            if quantified and c and (c in "*+?" or (c == "{" and self._QUANT.match(self.p, self.i))):
                self.fail(f"nothing to repeat before {c!r}")
            if c in ("*", "+", "?"):
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                self.i += 1
            elif c == "{":
                m = self._QUANT.match(self.p, self.i)
                if not m:
                    if re.match(r"\{,\d+\}", self.p[self.i:]):
                        self.fail("'{,n}' is a quantifier in Python but a literal in ECMA-262")
                    return atom  # a literal '{' (Annex B); the next atom() reads it
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                if hi is not None and hi < lo:
                    self.fail("quantifier {m,n} with n < m")
                self.i = m.end()
            else:
                return atom
            if atom[0] in ("bol", "eol"):
                self.fail("quantified anchor")
            if self.peek() == "?":  # lazy: same language
                self.i += 1
            elif self.peek() == "+":
                self.fail("possessive quantifier")
            atom = ("rep", atom, lo, hi)
            quantified = True

    def atom(self):
        c = self.peek()
        if c == "(":
            self.i += 1
            self.depth += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.p.startswith("?<", self.i) and not self.p.startswith(("?<=", "?<!"), self.i):
                self.fail("named group (Python's re rejects '(?<name>', so jsonschema cannot check it)")
            elif self.peek() == "?":
                self.fail("lookaround or group extension")
            node = self.alternation()
            if self.peek() != ")":
                self.fail("missing ')'")
            self.i += 1
            self.depth -= 1
            return node
        if c == "[":
            return self.chars(self.char_class())
        if c == "^":
            self.i += 1
            return ("bol",)
        if c == "$":
            self.i += 1
            if self.widen:  # Python's '$' also matches before a final newline
                return ("alt", [("eol",), ("seq", [("set", ((10, 10),)), ("eol",)])])
            return ("eol",)
        if c == ".":
            self.i += 1
            return self.chars(_CharSet(_complement(_ECMA_LINE_TERMINATORS), _complement(_chars("\n"))))
        if c in "*+?":
            self.fail(f"nothing to repeat before {c!r}")
        if c == "{" and self._QUANT.match(self.p, self.i):
            self.fail("nothing to repeat before '{'")
        if c == "\\":
            return self.chars(self.escape(in_class=False))
        self.i += 1
        return ("set", ((ord(c), ord(c)),))

    def escape(self, in_class: bool) -> _CharSet:
        """Reads a backslash escape; returns its character set."""
        self.i += 1
        if self.i >= len(self.p):
            self.fail("pattern ends with a lone backslash")
        e = self.p[self.i]
        self.i += 1
        if e in "dDwWsS":
            return _class_escape(e)
        if e in _SIMPLE_ESCAPES:
            cp = ord(_SIMPLE_ESCAPES[e])
            return _CharSet(((cp, cp),))
        if e == "b" and in_class:
            return _CharSet(((8, 8),))
        if e in "bB":
            self.fail("word boundary \\b/\\B")
        if e == "u":
            h = self.p[self.i:self.i + 4]
            if len(h) == 4 and all(x in "0123456789abcdefABCDEF" for x in h):
                self.i += 4
                cp = int(h, 16)
                if SURROGATES[0] <= cp <= SURROGATES[1]:
                    return _CharSet(())  # never matches text without lone surrogates
                return _CharSet(((cp, cp),))
            self.fail("malformed \\u escape")
        if e == "x":
            h = self.p[self.i:self.i + 2]
            if len(h) == 2 and all(x in "0123456789abcdefABCDEF" for x in h):
                self.i += 2
                cp = int(h, 16)
                return _CharSet(((cp, cp),))
            self.fail("malformed \\x escape")
        if e == "0" and not self.peek().isdigit():
            return _CharSet(((0, 0),))
        if e.isdigit():
            self.fail("backreference or octal escape")
        if e in "pP":
            return self.property_escape(negated=(e == "P"))
        if e.isascii() and e.isalnum():
            # \a, \c, \k, \p, \A, \Z ...: unknown to one engine or meaning different things
            self.fail(f"escape \\{e}")
        return _CharSet(((ord(e), ord(e)),))  # identity escape of punctuation

    def property_escape(self, negated: bool) -> _CharSet:
        """`\\p{...}` / `\\P{...}` with ECMA-262 'u' mode names (unicode_properties.py).  Python's
        `re` has no such escape, so jsonschema cannot evaluate these patterns: ECMA decides alone."""
        end = self.p.find("}", self.i)
        if self.peek() != "{" or end < 0:
            self.fail("\\p needs a braced property name, as in \\p{L}")
        body = self.p[self.i + 1:end]
        try:
            ranges = property_ranges(body)
        except UnknownProperty as exc:
            self.fail(str(exc))
        self.i = end + 1
        return _CharSet(_complement(ranges) if negated else ranges)

    def char_class(self) -> _CharSet:
        self.i += 1  # '['
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        if self.peek() == "]":
            self.fail("empty class '[]' / '[^]' (ECMA and Python disagree)")
        ecma: list = []
        py: list = []
        while True:
            if self.i >= len(self.p):
                self.fail("unterminated character class")
            c = self.peek()
            if c == "]":
                self.i += 1
                break
            if c == "[" and self.p.startswith(("[:", "[=", "[."), self.i):
                self.fail("POSIX-like class syntax")
            first = self.class_atom()
            if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                self.i += 1
                second = self.class_atom()
                if first is None or second is None:
                    self.fail("class escape used as a range bound")
                if first > second:
                    self.fail("range out of order in character class")
                ecma.append((first, second))
                py.append((first, second))
                continue
            if isinstance(first, _CharSet):
                ecma.extend(first.ecma)
                py.extend(first.py)
            else:
                ecma.append((first, first))
                py.append((first, first))
        # A class escape returns a _CharSet; a single character an int.
        e, p = _union(ecma), _union(py)
        if negated:
            e, p = _complement(e), _complement(p)
        return _CharSet(_intersect(e, ALL_CHARS), _intersect(p, ALL_CHARS))

    def class_atom(self):
        c = self.peek()
        if c == "\\":
            cs = self.escape(in_class=True)
            if len(cs.ecma) == 1 and cs.ecma[0][0] == cs.ecma[0][1] and cs.ecma == cs.py:
                return cs.ecma[0][0]
            if not cs.ecma and not cs.py:
                self.fail("surrogate escape in a class")
            return cs
        self.i += 1
        return ord(c)


# Thompson NFA with anchor-aware epsilon edges.

class _Nfa:
    def __init__(self):
        self.char_edges: list[list[tuple[Ranges, int]]] = []
        self.eps: list[list[tuple[str | None, int]]] = []

    def new(self) -> int:
        self.char_edges.append([])
        self.eps.append([])
        if len(self.eps) > 4 * DEFAULT_STATE_BUDGET:
            raise _Budget("pattern automaton", 4 * DEFAULT_STATE_BUDGET)
        return len(self.eps) - 1

    def build(self, node, start: int, end: int) -> None:
        kind = node[0]
        if kind == "set":
            if node[1]:
                self.char_edges[start].append((node[1], end))
        elif kind == "seq":
            cur = start
            for k, item in enumerate(node[1]):
                nxt = end if k == len(node[1]) - 1 else self.new()
                self.build(item, cur, nxt)
                cur = nxt
            if not node[1]:
                self.eps[start].append((None, end))
        elif kind == "alt":
            for item in node[1]:
                self.build(item, start, end)
        elif kind in ("bol", "eol"):
            self.eps[start].append((kind, end))
        elif kind == "rep":
            _, item, lo, hi = node
            cur = start
            for _ in range(lo):
                nxt = self.new()
                self.build(item, cur, nxt)
                cur = nxt
            if hi is None:
                loop = self.new()
                self.eps[cur].append((None, loop))
                body_end = self.new()
                self.build(item, loop, body_end)
                self.eps[body_end].append((None, loop))
                self.eps[loop].append((None, end))
            else:
                self.eps[cur].append((None, end))
                for _ in range(hi - lo):
                    nxt = self.new()
                    self.build(item, cur, nxt)
                    self.eps[nxt].append((None, end))
                    cur = nxt
        else:
            raise AssertionError(kind)


def _nfa_to_dfa(nfa: _Nfa, start: int, accept: int, budget: int) -> Dfa:
    """Subset construction (numba, `subset_kernels`), minimised.

    Anchors become plain epsilon edges of a larger NFA, four copies of the pattern's: state
    (phase, after_eol, s).  Phase 0 is before the first character, where '^' edges hold; any
    character leads into phase 1, which has no '^' edges.  After a '$' (after_eol = 1) nothing
    more may be read.  One extra state, reached from every copy of `accept`, is the final one.
    Letters are the code-point intervals between consecutive edge boundaries.
    """
    n = len(nfa.eps)
    final = 4 * n

    def state(phase: int, eol: int, s: int) -> int:
        return (2 * phase + eol) * n + s

    eps: list[tuple[int, int]] = []
    for s, edges in enumerate(nfa.eps):
        for kind, t in edges:
            for phase in (0, 1):
                if kind == "bol" and phase == 1:
                    continue
                for eol in (0, 1):
                    eps.append((state(phase, eol, s), state(phase, 1 if kind == "eol" else eol, t)))
    eps += [(state(phase, eol, accept), final) for phase in (0, 1) for eol in (0, 1)]
    char = [(s, lo, hi, t) for s, edges in enumerate(nfa.char_edges) for ranges, t in edges for lo, hi in ranges]
    char_edges = np.array(char, dtype=np.int64).reshape(-1, 4)
    bounds = np.unique(np.concatenate([char_edges[:, 1], char_edges[:, 2] + 1]))
    letters = np.empty((2 * len(char), 4), dtype=np.int32)
    for phase in (0, 1):  # from (phase, 0, s) to (1, 0, t)
        rows = letters[phase * len(char) : (phase + 1) * len(char)]
        rows[:, 0] = state(phase, 0, 0) + char_edges[:, 0]
        rows[:, 1] = np.searchsorted(bounds, char_edges[:, 1])
        rows[:, 2] = np.searchsorted(bounds, char_edges[:, 2] + 1) - 1
        rows[:, 3] = state(1, 0, 0) + char_edges[:, 3]
    eps_ptr, eps_rows = subset_kernels.by_source(4 * n + 1, np.array(eps, dtype=np.int32).reshape(-1, 2))
    edge_ptr, edge_rows = subset_kernels.by_source(4 * n + 1, letters)
    status, trans, accepting = subset_kernels.subset_automaton(
        state(0, 0, start), final, eps_ptr, eps_rows[:, 1].copy(), edge_ptr, edge_rows, max(len(bounds) - 1, 0), budget)
    if status == subset_kernels.ERR_TOO_MANY_STATES:
        raise _Budget("pattern automaton", budget)
    # dense table -> runs of equal targets over consecutive letters, as code-point edges
    source, letter = np.nonzero(trans >= 0)
    target = trans[source, letter]
    new_run = np.ones(len(source), dtype=bool)
    new_run[1:] = (source[1:] != source[:-1]) | (letter[1:] != letter[:-1] + 1) | (target[1:] != target[:-1])
    run_start = np.flatnonzero(new_run)
    run_end = np.append(run_start[1:], len(source)) - 1
    count = np.bincount(source[run_start], minlength=status).astype(np.int64)
    dfa = Dfa._of_arrays(np.cumsum(count) - count, count, bounds[letter[run_start]].astype(np.int64),
                         bounds[letter[run_end] + 1].astype(np.int64) - 1, target[run_start].astype(np.int64),
                         accepting.astype(np.bool_))
    return dfa.minimize()


@lru_cache(maxsize=256)
def _pattern_dfa_cached(pattern: str, budget: int) -> Dfa:
    ast = _RegexParser(pattern).parse()
    if ast[0] == "alt" and any(item[0] == "look" for branch in ast[1] for item in branch[1]):
        raise _PatternUnsupported(f"lookahead inside a top-level alternation of {pattern!r}")
    looks = [item for item in ast[1] if item[0] == "look"] if ast[0] == "seq" else []
    if not looks:
        return _search_dfa(ast, budget)
    # ^(?=X)(?!Y)R: a match at offset 0 of R, of X, and of no Y (each read as a '^' prefix).
    dfa = _search_dfa(("seq", [item for item in ast[1] if item[0] != "look"]), budget)
    for _, positive, body in looks:
        prefix = _search_dfa(("seq", [("bol",), body]), budget)
        dfa = dfa.intersect(prefix, budget) if positive else dfa.difference(prefix, budget)
    return dfa


def _search_dfa(ast, budget: int) -> Dfa:
    """Strings in which the parsed regex finds a match somewhere (re.search)."""
    nfa = _Nfa()
    # search semantics: any prefix, the pattern, any suffix
    prefix, start, accept, suffix = nfa.new(), nfa.new(), nfa.new(), nfa.new()
    nfa.char_edges[prefix].append((ALL_CHARS, prefix))
    nfa.eps[prefix].append((None, start))
    nfa.build(ast, start, accept)
    nfa.eps[accept].append((None, suffix))
    nfa.char_edges[suffix].append((ALL_CHARS, suffix))
    return _nfa_to_dfa(nfa, prefix, suffix, budget)


def pattern_dfa(pattern: str, pointer: str = "", budget: int = DEFAULT_STATE_BUDGET) -> Dfa:
    """Strings in which the ECMA-262 regex `pattern` finds a match (re.search semantics)."""
    try:
        return _pattern_dfa_cached(pattern, budget)
    except _PatternUnsupported as exc:
        raise UnsupportedSchemaError("pattern", pointer, str(exc)) from None
    except _Budget as exc:
        raise UnsupportedSchemaError("pattern", pointer, f"{exc}; simplify the pattern") from None
    except RecursionError:
        raise UnsupportedSchemaError("pattern", pointer, "pattern nests too deeply") from None


def fullmatch_dfa(pattern: str, pointer: str = "", budget: int = DEFAULT_STATE_BUDGET) -> Dfa:
    """Strings the regex matches as a whole (used for formats)."""
    return pattern_dfa("^(?:" + pattern + ")$", pointer, budget)


# ---------------------------------------------------------------------------------------------
# Formats.

_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16 = r"[0-9a-fA-F]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "|".join([
    rf"(?:{_H16}:){{6}}{_LS32}",
    rf"::(?:{_H16}:){{5}}{_LS32}",
    rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
])
# Days 1-28 always, 29-30 except February, 31 in the long months; February 29 only in
# leap years, which needs the year: we enumerate leap years mod 400 below.
_MONTH_DAY = (r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])"
              r"|(?:0[13-9]|1[0-2])-(?:29|30)"
              r"|(?:0[13578]|1[02])-31)")
# Leap years: divisible by 4 but not 100, or by 400 (four-digit years).
_LEAP_YEAR = (r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])"
              r"|(?:0[48]|[2468][048]|[13579][26])00)")
# Years 0001-9999: Python's date.fromisoformat (which jsonschema uses) has no year 0.
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"
_DATE = rf"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
# RFC 3339 partial-time; second 60 (leap second) is left out because checkers disagree on it.
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[zZ]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_DATE_TIME = rf"{_DATE}[tT]{_TIME}"
# RFC 3339 Appendix A: units in order, none skipped in between (P1Y3D is not in the grammar).
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DURATION = (rf"P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:{_DUR_TIME})?"
             rf"|{_DUR_TIME}|[0-9]+W)")
_HEX = "[0-9a-fA-F]"
_UUID = rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
_SHORT_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,24}[a-zA-Z0-9])?"
# RFC 1123 allows 253 characters in all; counting them exactly multiplies the automaton, so we
# accept a first label of up to 63 characters and up to 7 more of up to 26 (252 at most).
_HOSTNAME = rf"{_LABEL}(?:\.{_SHORT_LABEL}){{0,7}}"
# RFC 5321 Mailbox restricted to dot-atom local parts and hostname domains (sound: every such
# address is valid, and contains '@' as jsonschema checks).
_ATEXT = r"[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]"
# The domain follows RFC 5321's Domain ABNF (labels of letters, digits and inner hyphens); the
# separate size limits of its section 4.5.3 are not counted, which keeps products with
# maxLength small (counting 63-character labels multiplies the automaton by ~60).
_LDH_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_EMAIL = rf"{_ATEXT}+(?:\.{_ATEXT}+)*@{_LDH_LABEL}(?:\.{_LDH_LABEL})*"
# RFC 3986 section 3 and appendix A, transcribed rule by rule; with `iri`, RFC 3987's
# additions (ucschar among the unreserved characters, iprivate in queries).
_UCSCHAR = ("\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef" + "".join(
    f"{chr(plane << 16)}-{chr((plane << 16) + 0xFFFD)}" for plane in range(1, 14)) + f"{chr(0xE1000)}-{chr(0xEFFFD)}")
_IPRIVATE = f"\ue000-\uf8ff{chr(0xF0000)}-{chr(0xFFFFD)}{chr(0x100000)}-{chr(0x10FFFD)}"


def _uri_regexes(iri: bool) -> tuple[str, str]:
    """(absolute URI, URI reference) regexes; IRI versions when `iri`."""
    extra = _UCSCHAR if iri else ""
    pct = r"%[0-9a-fA-F]{2}"
    unreserved_sub = rf"[a-zA-Z0-9._~!$&'()*+,;={extra}-]"  # (i)unreserved / sub-delims
    pchar = rf"(?:{unreserved_sub}|{pct}|[:@])"
    segment = rf"{pchar}*"
    segment_nz = rf"{pchar}+"
    segment_nz_nc = rf"(?:{unreserved_sub}|{pct}|@)+"
    query = rf"(?:{pchar}|[/?{_IPRIVATE if iri else ''}])*"
    fragment = rf"(?:{pchar}|[/?])*"
    userinfo = rf"(?:{unreserved_sub}|{pct}|:)*"
    ip_literal = rf"\[(?:{_IPV6}|[vV][0-9a-fA-F]+\.(?:[a-zA-Z0-9._~!$&'()*+,;=-]|:)+)\]"
    reg_name = rf"(?:{unreserved_sub}|{pct})*"
    authority = rf"(?:{userinfo}@)?(?:{ip_literal}|{reg_name})(?::[0-9]*)?"
    path_abempty = rf"(?:/{segment})*"
    path_absolute = rf"/(?:{segment_nz}(?:/{segment})*)?"
    path_rootless = rf"{segment_nz}(?:/{segment})*"
    path_noscheme = rf"{segment_nz_nc}(?:/{segment})*"
    hier_part = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_rootless}|)"
    relative_part = rf"(?://{authority}{path_abempty}|{path_absolute}|{path_noscheme}|)"
    tail = rf"(?:\?{query})?(?:#{fragment})?"
    uri = rf"[a-zA-Z][a-zA-Z0-9+.-]*:{hier_part}{tail}"
    return uri, rf"(?:{uri}|{relative_part}{tail})"


_URI, _URI_REFERENCE = _uri_regexes(iri=False)
_IRI, _IRI_REFERENCE = _uri_regexes(iri=True)
# RFC 6570 level 1-4 templates: literals and {expressions}.
_UT_LITERAL = r"(?:[\x21\x23-\x24\x26\x28-\x3b\x3d\x3f-\x5b\x5d\x5f\x61-\x7a\x7e]|%[0-9a-fA-F]{2})"
_UT_VARNAME = r"(?:[a-zA-Z0-9_]|%[0-9a-fA-F]{2})(?:\.?(?:[a-zA-Z0-9_]|%[0-9a-fA-F]{2}))*"
_UT_VARSPEC = rf"{_UT_VARNAME}(?::[1-9][0-9]{{0,3}}|\*)?"
_URI_TEMPLATE = rf"(?:{_UT_LITERAL}|\{{[+#./;?&]?{_UT_VARSPEC}(?:,{_UT_VARSPEC})*\}})*"
_JSON_POINTER = r"(?:/(?:[^/~]|~[01])*)*"
_RELATIVE_JSON_POINTER = rf"(?:0|[1-9][0-9]*)(?:#|{_JSON_POINTER})"


def _regex_syntax(depth: int) -> str:
    """A sound subset of the regexes both ECMA-262 (with or without the u flag) and Python's
    `re.compile` (jsonschema's check) accept, with groups nested at most `depth` deep.

    Literals are any character but the syntax characters; escapes are \\d \\w \\s (and
    negations), \\n \\r \\t \\f \\v, \\uXXXX, \\xXX and escaped syntax characters or
    '/'; classes hold such characters and escapes, ranges a-z, A-Z, 0-9 in order, and '-' first
    or last; every atom may take one quantifier (* + ? {n} {n,} {n,m} with n <= m, numbers below 1000), lazy or not;
    ^ $ \\b \\B are never quantified.  Left out: lookarounds, backreferences, named groups,
    ranges across character kinds, lone ']' or '{' (literals only without the u flag).
    """
    syntax = r"\\^$.|?*+()\[\]{}"
    literal = rf"[^{syntax}]"
    escape = rf"\\(?:[dDwWsSnrtfv]|[{syntax}/]|u[0-9a-fA-F]{{4}}|x[0-9a-fA-F]{{2}})"
    class_escape = rf"\\(?:[dDwWsSnrtfvb]|[{syntax}/-]|u[0-9a-fA-F]{{4}}|x[0-9a-fA-F]{{2}})"
    ordered = [f"{c}-[{c}-{last}]" for first, last in (("0", "9"), ("a", "z"), ("A", "Z"))
               for c in map(chr, range(ord(first), ord(last) + 1))]
    class_item = "|".join([r"[^\\\[\]^-]", class_escape] + ordered)
    char_class = rf"\[\^?(?:-(?:{class_item})*-?|(?:{class_item})+-?)\]"  # '-' also first or last
    number = "(?:0|[1-9][0-9]{0,2})"
    pairs = [f"{d},[{d}-9]" for d in range(10)]  # n <= m, both one digit
    pairs += ["[0-9],[1-9][0-9]{1,2}", "[1-9][0-9],[1-9][0-9]{2}"]  # m has more digits
    pairs += [f"{a}[0-9],[{a + 1}-9][0-9]" for a in range(1, 9)]  # two digits each
    pairs += [f"{a}{b},{a}[{b}-9]" for a in range(1, 10) for b in range(10)]
    quantifier = rf"(?:[*+?]|\{{{number},?\}}|\{{(?:{'|'.join(pairs)})\}})\??"
    anchor = r"\^|\$|\\[bB]"
    alternation = ""
    for level in range(depth + 1):
        group = [rf"\((?:\?:)?{alternation}\)"] if level else []
        atom = "|".join([literal, r"\.", escape, char_class] + group)
        term = rf"(?:{anchor}|(?:{atom})(?:{quantifier})?)"
        alternation = rf"(?:{term}*(?:\|{term}*)*)"
    return alternation


_REGEX = _regex_syntax(3)

FORMAT_REGEXES: dict[str, str] = {
    "date-time": _DATE_TIME,
    "date": _DATE,
    "time": _TIME,
    "duration": _DURATION,
    "email": _EMAIL,
    "idn-email": _EMAIL,
    "hostname": _HOSTNAME,
    "idn-hostname": _HOSTNAME,  # the ASCII subset (LDH labels), which idna.encode accepts
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uuid": _UUID,
    "uri": _URI,
    "iri": _IRI,
    "uri-reference": _URI_REFERENCE,
    "iri-reference": _IRI_REFERENCE,
    "uri-template": _URI_TEMPLATE,
    "json-pointer": _JSON_POINTER,
    "relative-json-pointer": _RELATIVE_JSON_POINTER,
    "regex": _REGEX,
}
"""Full-match regexes (our dialect) for each supported format; each is a sound subset."""


KNOWN_FORMATS = frozenset(FORMAT_REGEXES)


def is_known_format(name: str) -> bool:
    return name in KNOWN_FORMATS


@lru_cache(maxsize=None)
def _format_dfa_cached(name: str) -> Dfa:
    dfa = fullmatch_dfa(FORMAT_REGEXES[name], "", 200_000)
    if name in ("hostname", "idn-hostname"):
        # IDNA (RFC 5891, and the idna package jsonschema uses) rejects "--" in the 3rd and
        # 4th positions of a label, which also leaves out "xn--" labels (maybe bad Punycode)
        dfa = dfa.difference(pattern_dfa(r"(?:^|\.)[^.][^.]--"), 200_000)
    return dfa


def format_dfa(name: str) -> Dfa | None:
    """The decoded strings valid for `format`, or None for a format that is only an annotation."""
    if name not in FORMAT_REGEXES:
        return None
    return _format_dfa_cached(name)


# ---------------------------------------------------------------------------------------------
# Encoding a decoded-language DFA as JSON string text.

# The JSON text of a decoded string spells each code point raw where JSON allows it unescaped,
# as a short escape (\" \\ \/ \b \f \n \r \t), as \uXXXX with upper- or lower-case hex digits,
# or above U+FFFF as a surrogate pair \uD8xx\uDCxx.  The automaton (`string_kernels.encode`) keeps
# the decoded states and gives each an escape state (after '\').  After "\u" come the states
# reading the four hex digits: the state that reads the last `level` digits of the code units in
# one aligned block of 16**level is hash-consed on (level, the states its 16 digits lead to), so
# equal blocks share one state across all decoded states (a block that leads everywhere to one
# state -- most of them -- is one state per level).  A high surrogate leads to a pair state that
# reads "\u" and the low half; pair states are shared by the hex states of their low halves.


def _encode(dfa: Dfa, budget: int, capacity: int | None = None) -> tuple:
    """The trimmed JSON text automaton of `dfa` as flat arrays (see `string_kernels.trim`);
    _Budget past `budget` states or twice as many edges.  The kernel starts with room for
    `capacity` states and retries with four times more while that is too little."""
    start, count, lo, hi, target, final = dfa.arrays()
    if capacity is None:
        capacity = 8 * dfa.size + 2 * lo.shape[0] + 64  # more than key automata need (~7 per state)
    while True:
        status, n, st, edges = string_kernels.encode(start, count, lo, hi, target, budget, capacity)
        if status != string_kernels.FULL:
            break
        capacity *= 4
    if status == string_kernels.STATES:
        raise _Budget("JSON string automaton", budget)
    if status == string_kernels.EDGES:
        raise _Budget("JSON string automaton", 2 * budget, "edges")
    final = np.concatenate((final, np.zeros(n - dfa.size, np.bool_)))  # the decoded states' finals
    (start, count), (lo, hi, target) = st.T.copy(), edges.T.copy()
    return string_kernels.trim(start, count, lo, hi, target, final)


def encode_json_string(dfa: Dfa, budget: int = 100_000) -> Dfa:
    """The DFA over JSON text (between the quotes) of every encoding of every string `dfa` accepts."""
    return Dfa._of_arrays(*_encode(dfa, budget))


def dfa_to_char_fsm(dfa: Dfa) -> Expr:
    if dfa.is_empty():
        return NOTHING
    transitions = tuple(sorted((s, lo, hi, t) for s, edges in enumerate(dfa.trans) for lo, hi, t in edges))
    return CharFsm(0, frozenset(dfa.finals), transitions)


def json_string_expr(dfa: Dfa, pointer: str = "", keyword: str = "pattern", budget: int = 100_000) -> Expr:
    """The whole JSON string token (with quotes) for the decoded language of `dfa`.

    Past `budget` states (or twice as many edges) raises UnsupportedSchemaError(keyword).
    """
    if dfa.is_empty():
        return NOTHING
    try:
        start, count, lo, hi, target, final = _encode(dfa, budget)
    except _Budget as exc:
        raise UnsupportedSchemaError(keyword, pointer, f"{exc}; simplify the constraint") from None
    if not final.any():
        return NOTHING
    # edges come state by state, each state's sorted: the order dfa_to_char_fsm sorts into
    source = np.repeat(np.arange(start.shape[0]), count)
    transitions = tuple(zip(source.tolist(), lo.tolist(), hi.tolist(), target.tolist()))
    return seq(lit('"'), CharFsm(0, frozenset(np.flatnonzero(final).tolist()), transitions), lit('"'))


JSON_CHAR: Expr = dfa_to_char_fsm(encode_json_string(length_dfa(1, 1)))
"""One JSON-encoded character (any code point but a lone surrogate), without quotes."""

ANY_STRING: Expr = seq(lit('"'), rep(JSON_CHAR, 0, None), lit('"'))
"""Any JSON string token."""

RAW_STRING_CHAR: Expr = CharClass(_intersect(((0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODE_POINT)), ALL_CHARS))
"""One code point JSON allows unescaped in a string."""


def _escape_part(char: CharFsm) -> CharFsm:
    """A one-character JSON automaton with its start state's raw edges removed: the spellings
    that begin with a backslash (its start state has no incoming edges)."""
    transitions = tuple(t for t in char.transitions if t[0] != char.initial or t[1] == t[2] == ord("\\"))
    return CharFsm(char.initial, char.finals - {char.initial}, transitions)


JSON_ESCAPE: Expr = _escape_part(JSON_CHAR)
"""One JSON-escaped character: \\n, \\uXXXX, a surrogate pair... (one code point)."""


# ---------------------------------------------------------------------------------------------
# Public entry points.


def check_lengths(min_length, max_length, pointer, allow_empty: bool = False):
    """(minLength, maxLength) as ints; SchemaError for bad values, and for an empty range unless
    allow_empty (then the caller handles lo > hi)."""
    for name, value in (("minLength", min_length), ("maxLength", max_length)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or value < 0 or value != int(value)):
            raise SchemaError(f"{name} must be a non-negative integer, got {value!r}", f"{pointer}/{name}")
    lo = int(min_length) if min_length is not None else 0
    hi = int(max_length) if max_length is not None else None
    if hi is not None and lo > hi and not allow_empty:
        raise SchemaError(f"minLength {lo} > maxLength {hi}: no string satisfies both", pointer)
    return lo, hi


def string_dfa(*, min_length=None, max_length=None, pattern=None, format=None, pointer: str = "",
               budget: int = DEFAULT_STATE_BUDGET) -> Dfa | None:
    """The decoded language as a Dfa, or None when it is "any string" (no effective constraint).

    The format is intersected last, so a product past the budget that involves a format is
    reported as UnsupportedSchemaError("format") -- which lenient callers may widen by
    dropping the format (e.g. format "email" with maxLength 100 is ~50k states).
    """
    lo, hi = check_lengths(min_length, max_length, pointer)
    parts: list[tuple[str, Dfa]] = []
    if pattern is not None:
        if not isinstance(pattern, str):
            raise SchemaError(f"pattern must be a string, got {pattern!r}", f"{pointer}/pattern")
        pdfa = pattern_dfa(pattern, f"{pointer}/pattern", budget)
        if not pdfa.is_universal():  # e.g. "([A-Z]+)?" finds a (possibly empty) match anywhere
            parts.append(("pattern", pdfa))
    if lo > 0 or hi is not None:
        keyword = "maxLength" if hi is not None else "minLength"
        parts.append((keyword, _budgeted(keyword, f"{pointer}/{keyword}", length_dfa, lo, hi, budget)))
    if format is not None:
        fmt = format_dfa(format)
        if fmt is not None:
            parts.append(("format", fmt))
    if not parts:
        return None
    keyword, dfa = parts[0]
    for keyword, other in parts[1:]:
        dfa = _budgeted(keyword, f"{pointer}/{keyword}", dfa.intersect, other, budget)
    return dfa


def string_expr(*, min_length=None, max_length=None, pattern=None, format=None, pointer: str = "") -> Expr:
    """The JSON string token (quotes included) of strings meeting the constraints.

    Lengths count code points.  `pattern` is an unanchored ECMA-262 regex.  Unknown formats
    are annotations and constrain nothing (see `is_known_format`).  An unsatisfiable combination
    gives NOTHING (the empty language); minLength > maxLength raises SchemaError.
    """
    lo, hi = check_lengths(min_length, max_length, pointer)
    if (pattern is None or pattern_dfa(pattern, f"{pointer}/pattern").is_universal()) and \
            (format is None or format_dfa(format) is None):
        return seq(lit('"'), rep(JSON_CHAR, lo, hi), lit('"'))
    dfa = string_dfa(min_length=lo, max_length=hi, pattern=pattern, format=format, pointer=pointer)
    keyword = "pattern" if pattern is not None else "format"
    return json_string_expr(dfa, pointer, keyword)


def string_literal_expr(value: str) -> Expr:
    """The JSON spellings of exactly the string `value` that json.dumps writes (for const, enum
    and property names): each character as json.dumps writes it with ensure_ascii=True or False
    (raw, short escapes, lowercase \\uXXXX, surrogate pairs).

    Other legal spellings (\\u0061 for "a", upper-case hex) decode to the same value but are not
    accepted: a key like "name" stays one literal instead of an automaton per character, which
    keeps objects with many properties small.  Sound either way; complete for json.dumps output.

    A lone surrogate (json.loads reads "\\ud800" as one) has only its escape; a high surrogate
    followed by a low one in `value` is NOTHING, since json.loads joins their escapes into one
    code point, so no JSON text decodes to such a value.
    """
    text = encode_basestring_ascii(value)  # json.dumps(value), and with ensure_ascii=False
    if text == encode_basestring(value):  # one spelling per character (an escape is longer
        return lit(text)  # than the raw character): the one literal the loop below gives
    parts: list[Expr] = [lit('"')]
    for i, ch in enumerate(value):
        if _HIGH_SURROGATE[0] <= ord(ch) <= _HIGH_SURROGATE[1] and i + 1 < len(value) \
                and _HIGH_SURROGATE[1] < ord(value[i + 1]) <= SURROGATES[1]:
            return NOTHING
        spellings = {json.dumps(ch)[1:-1]}
        if not SURROGATES[0] <= ord(ch) <= SURROGATES[1]:
            spellings.add(json.dumps(ch, ensure_ascii=False)[1:-1])
        parts.append(alt(*(lit(s) for s in sorted(spellings))))
    parts.append(lit('"'))
    return seq(*parts)


_HIGH_SURROGATE = (0xD800, 0xDBFF)


def string_excluding_expr(excluded: Iterable[str] = (), excluded_patterns: Iterable[str] = (), *,
                          pattern_constraint: str | None = None, min_length=None, max_length=None,
                          format=None, pointer: str = "") -> Expr:
    """JSON strings whose value is not in `excluded` and matched by none of `excluded_patterns`.

    For additionalProperties keys: `excluded` are the names in `properties`, `excluded_patterns`
    the `patternProperties` regexes (unanchored ECMA-262).  The optional constraints (a pattern
    the string must match, lengths, format -- e.g. from propertyNames) are intersected in.
    Returns NOTHING when no string is left.
    """
    base = string_dfa(min_length=min_length, max_length=max_length, pattern=pattern_constraint,
                      format=format, pointer=pointer)
    dfa = base if base is not None else any_string_dfa()
    names = list(excluded)
    if names:
        dfa = _budgeted("additionalProperties", pointer, dfa.difference, literal_dfa(names))
    for pat in excluded_patterns:
        dfa = _budgeted("patternProperties", pointer, dfa.difference, pattern_dfa(pat, f"{pointer}/patternProperties"))
    return json_string_expr(dfa, pointer, "additionalProperties")
