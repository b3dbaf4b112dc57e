"""ECMA-262 regexes (JSON Schema's `pattern`) as code-point automata, with search semantics.

`pattern_dfa(pattern)` is the `Dfa` of the strings in which `pattern` finds a match (as
`re.search` and ECMA's `RegExp.test` do); `fullmatch_dfa` anchors it (for `format`).  A small
recursive-descent parser reads the pattern into an AST, a Thompson NFA with anchor-aware epsilon
edges is built from it, and the subset construction (numba, `subset_kernels`) makes the DFA, so
every construct is under our control.  This is not `regex.py`, the front end for regexes in EBNF,
Lark and `compile_regex`: that one reads Python's dialect through interegular with full-match
semantics; this one reads a pattern both ECMA-262 and Python must agree on (below), with search
semantics, anchors anywhere and leading lookaheads.  The escape tables they share live in
`regex.py`.

Soundness (the automaton never accepts a string that either engine would reject):

- A pattern is evaluated with the *intersection* of ECMA-262 and Python `re` semantics, since
  the spec says ECMA but the `jsonschema` library uses `re.search`.  Per atom we take the
  characters both engines agree on (`\\d` = [0-9], `\\D` = not a Unicode decimal digit, `.`
  excludes \\n \\r U+2028 U+2029, `$` only at the very end, ...).  A regex without negation
  is monotone in its atoms, so the result is a subset of both languages and equals them on
  ASCII text.  Constructs where the engines disagree outright raise UnsupportedSchemaError.
- Unicode property escapes (`\\p{L}`, `\\P{Script=Greek}`, ECMA-262 'u' mode names) exist in
  ECMA only (`re` rejects them, so jsonschema cannot check such patterns): ECMA decides alone,
  from the tables of unicode_properties.py.
- Lookaheads are read only right after a leading '^' (an intersection or difference of
  automata); a negative one's body takes the characters *either* engine matches, so the
  difference stays a subset of both languages.

Sizes are bounded by `Limits.max_string_states`: the DFA by the budget the caller passes (that
limit by default), the NFA by four times its default.
"""

from __future__ import annotations

import re
from typing import NoReturn

import numpy as np

from ..core.caches import memoized
from ..core.errors import UnsupportedSchemaError
from ..core.limits import DEFAULT_LIMITS
from .fsm import subset_kernels
from .fsm.codepoint_dfa import (
    ALL_CHARS,
    Dfa,
    Ranges,
    StateLimitExceeded,
    char_ranges,
    complement_chars,
    intersect_ranges,
    union_ranges,
)
from .fsm.unicode_properties import UnknownProperty, property_ranges, re_class
from .ir import SURROGATES
from .regex import ASCII_CLASS_RANGES, CONTROL_ESCAPES, read_hex

__all__ = ["pattern_dfa", "fullmatch_dfa"]

_ECMA_SPACE = union_ranges(
    char_ranges("\t\n\x0b\x0c\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"), ((0x2000, 0x200A),)
)
_ECMA_LINE_TERMINATORS = char_ranges("\n\r\u2028\u2029")
_ECMA_CLASSES = {"d": ASCII_CLASS_RANGES["d"], "w": ASCII_CLASS_RANGES["w"], "s": _ECMA_SPACE}
"""ECMA-262's \\d \\w \\s: the ASCII classes of regex.py for digits and word characters, but
Unicode white space and line terminators for \\s."""


class _CharSet:
    """A character set under both regex semantics: (ECMA code points, Python `re` code points)."""

    __slots__ = ("ecma", "py")

    def __init__(self, ecma: Ranges, py: Ranges | None = None):
        self.ecma = ecma
        self.py = ecma if py is None else py

    def both(self) -> Ranges:
        return intersect_ranges(self.ecma, self.py)

    def either(self) -> Ranges:
        return union_ranges(self.ecma, self.py)


def _class_escape(letter: str) -> _CharSet:
    """\\d \\w \\s and their upper-case complements under both engines."""
    ecma, py = _ECMA_CLASSES[letter.lower()], re_class(letter.lower())
    if letter.isupper():
        return _CharSet(complement_chars(ecma), complement_chars(py))
    return _CharSet(ecma, py)


class _PatternUnsupported(Exception):
    """A construct we do not read or the two engines disagree on (`pattern_dfa` reports it as
    UnsupportedSchemaError)."""


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

    def __init__(self, pattern: str, widen: bool = False, drop_lookbehinds: bool = False):
        self.p = pattern
        self.i = 0
        self.widen = widen
        self.depth = 0  # group nesting
        # read a lookbehind as the empty string (a wider language) instead of failing, noting
        # its span: `without_lookbehinds`
        self.drop_lookbehinds = drop_lookbehinds
        self.lookbehinds: list[tuple[int, int]] = []

    def fail(self, message: str) -> NoReturn:
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
            if (
                self.depth == 0
                and not self.widen
                and self.p.startswith(("(?=", "(?!"), self.i)
                and items
                and items[0] == ("bol",)
                and all(item[0] == "look" for item in items[1:])
            ):
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

    def lookbehind(self):
        """A lookbehind ('(?<=' or '(?<!' read up to the '?'): refused, or with drop_lookbehinds
        read for its syntax only and matched as the empty string (every match of the pattern is
        still a match without the assertion, so the language only widens)."""
        if not self.drop_lookbehinds:
            self.fail("lookbehind")
        begin = self.i - 1
        self.i += 3
        self.alternation()
        if self.peek() != ")":
            self.fail("missing ')'")
        self.i += 1
        self.depth -= 1
        self.lookbehinds.append((begin, self.i))
        return ("seq", [])

    def chars(self, charset: _CharSet):
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
                    if re.match(r"\{,\d+\}", self.p[self.i :]):
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
            if self.p.startswith(("?<=", "?<!"), self.i):
                return self.lookbehind()
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
            return self.chars(_CharSet(complement_chars(_ECMA_LINE_TERMINATORS), complement_chars(char_ranges("\n"))))
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
        # Python's control escapes but \a, which ECMA-262 lacks; \b is a backspace only in a class
        if e in CONTROL_ESCAPES and e != "a" and (e != "b" or in_class):
            control = CONTROL_ESCAPES[e]
            return _CharSet(((control, control),))
        if e in "bB":
            self.fail("word boundary \\b/\\B")
        if e in "ux":
            width = 4 if e == "u" else 2
            cp = read_hex(self.p, self.i, width)
            if cp is None:
                self.fail(f"malformed \\{e} escape")
            self.i += width
            if SURROGATES[0] <= cp <= SURROGATES[1]:
                return _CharSet(())  # never matches text without lone surrogates
            return _CharSet(((cp, cp),))
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
        body = self.p[self.i + 1 : end]
        try:
            ranges = property_ranges(body)
        except UnknownProperty as exc:
            self.fail(str(exc))
        self.i = end + 1
        return _CharSet(complement_chars(ranges) if negated else ranges)

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
        e, p = union_ranges(ecma), union_ranges(py)
        if negated:
            e, p = complement_chars(e), complement_chars(p)
        return _CharSet(intersect_ranges(e, ALL_CHARS), intersect_ranges(p, ALL_CHARS))

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


# ---------------------------------------------------------------------------------------------
# Thompson NFA with anchor-aware epsilon edges, and its subset construction.


class _Nfa:
    """Per state, character edges (ranges, target) and epsilon edges (None, '^' or '$', target)."""

    def __init__(self):
        self.char_edges: list[list[tuple[Ranges, int]]] = []
        self.eps: list[list[tuple[str | None, int]]] = []

    def new(self) -> int:
        self.char_edges.append([])
        self.eps.append([])
        if len(self.eps) > 4 * DEFAULT_LIMITS.max_string_states:
            raise StateLimitExceeded("pattern automaton", 4 * DEFAULT_LIMITS.max_string_states)
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
        state(0, 0, start), final, eps_ptr, eps_rows[:, 1].copy(), edge_ptr, edge_rows, max(len(bounds) - 1, 0), budget
    )
    if status == subset_kernels.ERR_TOO_MANY_STATES:
        raise StateLimitExceeded("pattern automaton", budget)
    # dense table -> runs of equal targets over consecutive letters, as code-point edges
    edge_start, count, lo, hi, target = subset_kernels.dense_runs(trans, bounds)
    dfa = Dfa.from_arrays(edge_start, count, lo, hi, target, accepting.astype(np.bool_))
    del trans, edge_rows, eps_rows  # the dense table and the NFA are not needed while minimising
    return dfa.minimize()


# ---------------------------------------------------------------------------------------------
# Entry points.


@memoized(256, name="ECMA pattern automata (grammar/ecma_regex.py)")
def _pattern_dfa_cached(pattern: str, budget: int) -> Dfa:
    """`pattern_dfa` without the error translation (memoised: schemas repeat their patterns)."""
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


def pattern_dfa(pattern: str, pointer: str = "", budget: int = DEFAULT_LIMITS.max_string_states) -> Dfa:
    """Strings in which the ECMA-262 regex `pattern` finds a match (re.search semantics)."""
    try:
        return _pattern_dfa_cached(pattern, budget)
    except _PatternUnsupported as exc:
        raise UnsupportedSchemaError("pattern", pointer, str(exc)) from None
    except StateLimitExceeded as exc:
        raise UnsupportedSchemaError(
            "pattern", pointer, f"{exc}; simplify the pattern or raise Limits.max_string_states"
        ) from None
    except RecursionError:
        raise UnsupportedSchemaError("pattern", pointer, "pattern nests too deeply") from None


def without_lookbehinds(pattern: str) -> str:
    """`pattern` with each lookbehind group replaced by the empty group "(?:)": the regex of a
    wider language, which `pattern_dfa` reads (the lenient reading of a pattern with a
    lookbehind).  The pattern itself when it has none, or when it does not parse."""
    parser = _RegexParser(pattern, drop_lookbehinds=True)
    try:
        parser.parse()
    except (_PatternUnsupported, RecursionError):
        return pattern
    out, end = [], 0
    for begin, stop in sorted(parser.lookbehinds):
        if begin >= end:  # a lookbehind nested in a dropped one goes with it
            out += [pattern[end:begin], "(?:)"]
            end = stop
    return "".join(out) + pattern[end:]


def fullmatch_dfa(pattern: str, pointer: str = "", budget: int = DEFAULT_LIMITS.max_string_states) -> Dfa:
    """Strings the regex matches as a whole (used for formats)."""
    return pattern_dfa("^(?:" + pattern + ")$", pointer, budget)
