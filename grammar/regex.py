"""Regular expressions -> grammar IR, via `interegular`.

`regex_to_ir(pattern)` gives an IR expression matching exactly the strings the pattern
*fully* matches (as `re.fullmatch` would).  interegular parses Python-style regexes into a
character FSM whose alphabet is a set of character classes, one of them the special
`anything_else` (every character not named explicitly).  We turn that FSM into an IR
`CharFsm` over code-point ranges, dropping states that are unreachable or cannot reach a
final state, so the automata layer never sees dead ends.

What interegular cannot express exactly (backreferences, lookarounds, anchors in the middle of
a pattern, word boundaries, Unicode properties, unsupported flags) raises `GrammarError` with
the 1-based column in the pattern and a hint.  Notes on semantics: `\\d`, `\\w`, `\\s` are the
ASCII classes (as in `re.ASCII`); `.` excludes only `\\n`; lazy quantifiers match the same
language as greedy ones, which is all a full-match grammar cares about; a leading `^` and a
trailing `$` are accepted and ignored; `\\uHHHH` / `\\UHHHHHHHH` escapes are rewritten to the
character (interegular lacks them).

Patterns with a counted repetition (`x{m,n}`) or more than TREE_PATTERN_NODES nodes skip
interegular's automata, which are built and determinised in Python (minutes for
`(a|b)*a(a|b){15}` or 10,000 alternatives): interegular's parse tree becomes an IR tree (Seq,
Alt, Repeat, character classes) whose rule automaton the numba kernels build under the
`max_rule_states` limit; a pattern whose repetitions unroll past that limit is refused before
anything is built.  Groups nested deeper than `max_nesting` are a GrammarError; patterns
nesting deeper than INTEREGULAR_MAX_NESTING are split at their groups here (interegular recurses
per level) and only the runs between groups go to interegular.

`fsm_to_char_fsm` converts an interegular FSM (also a product of FSMs: intersection,
difference) to the IR's code-point automaton.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict, deque

from interegular.fsm import FSM, anything_else
from interegular.patterns import (
    _DOT,
    _EMPTY,
    InvalidSyntax,
    Pattern,
    REFlags,
    Unsupported,
    _CharGroup,
    _combine_flags,
    _Concatenation,
    _get_flags,
    _ParsePattern,
    _Repeated,
)
from interegular.utils.simple_parser import NoMatch

from ..core.errors import GrammarError, LimitExceededError, check_argument
from ..core.limits import DEFAULT_LIMITS
from .ir import (
    EPSILON,
    MAX_CODE_POINT,
    NOTHING,
    SURROGATES,
    CharClass,
    CharFsm,
    Expr,
    Grammar,
    alt,
    char_class,
    complement_ranges,
    lit,
    normalize_ranges,
    remove_surrogates,
    rep,
    seq,
)
from .passes import expr_size

TREE_PATTERN_NODES = 256
"""Patterns with more nodes than this (or any counted repetition) become IR trees (see
`_pattern_to_ir`) instead of interegular automata."""

__all__ = [
    "regex_to_ir",
    "parse_regex",
    "fsm_to_char_fsm",
    "preprocess_regex",
    "read_hex",
    "ASCII_CLASS_RANGES",
    "CONTROL_ESCAPES",
]


def _symbol_ranges(fsm: FSM, expansion: dict[str, tuple[int, int]] | None = None) -> dict:
    """Code-point ranges of every transition key of the FSM's alphabet.

    `anything_else` stands for every code point not listed explicitly anywhere in the alphabet;
    surrogates are removed everywhere because UTF-8 cannot encode them.  `expansion` maps a
    representative character to the range it stands for (see `_compress_large_classes`).
    """
    expansion = expansion or {}

    def symbol_range(symbol: str) -> tuple[int, int]:
        return expansion.get(symbol, (ord(symbol), ord(symbol)))

    # Case folding can put multi-character strings (like "ʼN", the upper case of "ŉ") into
    # interegular's alphabet; no single input character matches them, so they are skipped.
    explicit = [symbol_range(s) for s in fsm.alphabet if s is not anything_else and len(s) == 1]
    rest = complement_ranges(explicit)
    ranges = {}
    for key, symbols in fsm.alphabet.by_transition.items():
        parts: list[tuple[int, int]] = []
        for symbol in symbols:
            if symbol is anything_else:
                parts.extend(rest)
            elif len(symbol) == 1:
                parts.append(symbol_range(symbol))
        ranges[key] = remove_surrogates(normalize_ranges(parts))
    return ranges


def fsm_to_char_fsm(fsm: FSM, expansion: dict[str, tuple[int, int]] | None = None) -> Expr:
    """Convert any interegular FSM (also products such as `a & b`, `a - b`) to an IR `CharFsm`.

    States are renumbered 0..n-1 in breadth-first order (initial = 0), only live states
    (reachable from the start and able to reach a final state) are kept, and parallel edges
    between two states are merged into sorted disjoint ranges.  An FSM accepting nothing
    becomes `NOTHING`.
    """
    key_ranges = _symbol_ranges(fsm, expansion)
    edges: dict = defaultdict(list)  # state -> [(key, target)]
    for state, row in fsm.map.items():
        for key, target in row.items():
            if key_ranges.get(key):
                edges[state].append((key, target))

    reachable = {fsm.initial}
    queue = deque([fsm.initial])
    while queue:
        state = queue.popleft()
        for _, target in edges.get(state, ()):
            if target not in reachable:
                reachable.add(target)
                queue.append(target)

    reverse: dict = defaultdict(set)
    for state in reachable:
        for _, target in edges.get(state, ()):
            reverse[target].add(state)
    live = {s for s in fsm.finals if s in reachable}
    queue = deque(live)
    while queue:
        state = queue.popleft()
        for source in reverse.get(state, ()):
            if source not in live:
                live.add(source)
                queue.append(source)
    if fsm.initial not in live:
        return NOTHING

    number = {fsm.initial: 0}
    order = [fsm.initial]
    transitions: list[tuple[int, int, int, int]] = []
    for state in order:  # `order` grows while we walk it: a breadth-first numbering
        by_target: dict = defaultdict(list)
        for key, target in edges.get(state, ()):
            if target in live:
                by_target[target].extend(key_ranges[key])
        for target, parts in by_target.items():
            if target not in number:
                number[target] = len(order)
                order.append(target)
            for lo, hi in normalize_ranges(parts):
                transitions.append((number[state], lo, hi, number[target]))
    finals = frozenset(number[s] for s in fsm.finals if s in number)
    return CharFsm(0, finals, tuple(sorted(transitions)))


# ---------------------------------------------------------------------------------------------
# Large character classes.  interegular lists every character of a class, so `[\u0080-\uffff]`
# costs seconds and `[\x00-\U0010ffff]` far more.  We cut the code points into intervals that
# every class and literal of the pattern treats alike, let one representative character stand
# for each interval inside the classes, and expand the representatives back to ranges when
# converting the FSM.  Only used when a class spans many code points, and never for
# case-insensitive patterns (case folding would need the real characters).

LARGE_CLASS = 256


# Escape tables and hex digits, shared with ecma_regex (whose dialect differs where it says so).

ASCII_CLASS_RANGES = {
    "d": ((0x30, 0x39),),
    "w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    "s": ((0x09, 0x0D), (0x20, 0x20)),
}
"""\\d \\w \\s as ASCII classes (the `re.ASCII` meaning), as code-point ranges."""
CONTROL_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
"""Python's one-letter control escapes and their code points (\\b is a backspace only in a class)."""
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def read_hex(text: str, start: int, width: int) -> int | None:
    """The value of the `width` hex digits at text[start:], or None unless there are that many."""
    digits = text[start : start + width]
    if len(digits) != width or not _HEX_DIGITS.issuperset(digits):
        return None
    return int(digits, 16)


def _class_char(text: str, j: int) -> tuple[tuple[tuple[int, int], ...], int, bool] | None:
    """One class member at text[j]: (ranges, next index, is_single_char), or None if unsure."""
    if text[j] != "\\":
        return ((ord(text[j]), ord(text[j])),), j + 1, True
    e = text[j + 1 : j + 2]
    if e == "x":
        code = read_hex(text, j + 2, 2)
        return None if code is None else (((code, code),), j + 4, True)
    if e and e in "01234567":
        k = j + 1
        while k < j + 4 and k < len(text) and text[k] in "01234567":
            k += 1
        code = int(text[j + 1 : k], 8)
        return ((code, code),), k, True
    if e in ASCII_CLASS_RANGES:
        return ASCII_CLASS_RANGES[e], j + 2, False
    if e in CONTROL_ESCAPES:
        return ((CONTROL_ESCAPES[e], CONTROL_ESCAPES[e]),), j + 2, True
    if not e or e.isalpha():
        return None
    return ((ord(e), ord(e)),), j + 2, True


def _parse_class(text: str, i: int) -> tuple[int, bool, list[tuple[int, int]]] | None:
    """Parse the class starting at text[i] == '['; None when it holds anything we are unsure of."""
    j = i + 1
    negated = text[j : j + 1] == "^"
    if negated:
        j += 1
    ranges: list[tuple[int, int]] = []
    while j < len(text):
        if text[j] == "]":
            return j + 1, negated, ranges
        member = _class_char(text, j)
        if member is None:
            return None
        lo_ranges, j, single = member
        if single and text[j : j + 1] == "-" and text[j + 1 : j + 2] not in ("]", ""):
            upper = _class_char(text, j + 1)
            if upper is None or not upper[2] or upper[0][0][0] < lo_ranges[0][0]:
                return None
            ranges.append((lo_ranges[0][0], upper[0][0][0]))
            j = upper[1]
        else:
            ranges.extend(lo_ranges)
    return None


def _compress_large_classes(text: str, where: list[int]):
    """(new pattern, its column map, representative -> range), or None to use `text` as is."""
    if re.search(r"\(\?[aiLmsux-]*i", text):
        return None
    classes = []  # (start, end, negated, ranges)
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "[":
            parsed = _parse_class(text, i)
            if parsed is None:
                return None
            end, negated, ranges = parsed
            classes.append((i, end, negated, ranges))
            i = end
        else:
            i += 1
    if not any(sum(hi - lo + 1 for lo, hi in ranges) > LARGE_CLASS for _, _, _, ranges in classes):
        return None

    cuts = {0, MAX_CODE_POINT + 1, SURROGATES[0], SURROGATES[1] + 1}
    cuts.update(range(0, 257))  # every byte-sized escape outside classes stays its own symbol
    for ch in text:
        cuts.update((ord(ch), ord(ch) + 1))
    for _, _, _, ranges in classes:
        for lo, hi in ranges:
            cuts.update((lo, hi + 1))
    points = sorted(cuts)

    def spell(code: int) -> str:
        return f"\\x{code:02x}" if code <= 0xFF else chr(code)

    expansion: dict[str, tuple[int, int]] = {}
    out: list[str] = []
    out_where: list[int] = []
    last = 0
    for start, end, negated, ranges in classes:
        out.append(text[last:start])
        out_where.extend(where[last:start])
        members = []
        for lo, hi in normalize_ranges(ranges):
            k = bisect.bisect_left(points, lo)
            while k < len(points) - 1 and points[k] <= hi:
                a, b = points[k], points[k + 1] - 1
                members.append(spell(a))
                if b > a:
                    expansion[chr(a)] = (a, b)
                k += 1
        spelled = "[" + ("^" if negated else "") + "".join(members) + "]"
        out.append(spelled)
        out_where.extend([where[start]] * len(spelled))
        last = end
    out.append(text[last:])
    out_where.extend(where[last:])
    return "".join(out), out_where, expansion


# ---------------------------------------------------------------------------------------------
# Finding unsupported constructs with their column (interegular's exceptions carry no position).

_HINT_LOOKAROUND = "rewrite the pattern without lookarounds (a full-match grammar cannot look ahead or behind)"
_HINT_BACKREF = "backreferences are not regular; spell the repeated text out"


def _escape_literal(char: str) -> str:
    """Spell one code point so interegular reads it literally (inside or outside a class)."""
    if char.isalnum() or ord(char) > 0x7F:
        return char
    return f"\\x{ord(char):02x}"


def _rewrite_escape(pattern: str, i: int, end: int, in_class: bool) -> tuple[str, int]:
    """The escape at pattern[i] (a backslash) as interegular should read it, and the index after
    it: `\\uHHHH` / `\\UHHHHHHHH` become the character, others stay; GrammarError for escapes
    that are not regular or that interegular lacks."""
    col = i + 1
    if i + 1 >= end:
        raise GrammarError("regex ends with a lone backslash; escape it as \\\\", 1, col)
    e = pattern[i + 1]
    if not in_class and e in "123456789":
        raise GrammarError(f"Backreference \\{e} is not supported: {_HINT_BACKREF}", 1, col)
    if not in_class and e == "k":
        raise GrammarError(f"Backreference \\k (named) is not supported: {_HINT_BACKREF}", 1, col)
    if e in "pPN":
        raise GrammarError(
            f"Unicode property escape \\{e} is not supported; use an explicit class like [a-zA-Z\\u00c0-\\u024f]",
            1,
            col,
        )
    if not in_class and e in "bB":  # XGrammar's words
        raise GrammarError(
            f"Word boundary assertion \\{e} is not supported; the regex already matches the whole string", 1, col
        )
    if not in_class and e in "AZzG":
        raise GrammarError(f"anchor \\{e} is not supported; the regex already matches the whole string", 1, col)
    if e == "u" and pattern.startswith("{", i + 2):  # \u{H...}: one to six hex digits (ECMAScript's u mode)
        close = pattern.find("}", i + 3, end)
        digits = pattern[i + 3 : close] if close > 0 else ""
        if not 1 <= len(digits) <= 6 or read_hex(digits, 0, len(digits)) is None:
            raise GrammarError("bad escape \\u{...}: expected one to six hex digits and '}'", 1, col)
        scalar = int(digits, 16)
        if scalar > 0x10FFFF or SURROGATES[0] <= scalar <= SURROGATES[1]:
            raise GrammarError(f"escape \\u{{{digits}}} is beyond the Unicode range or a surrogate", 1, col)
        return _escape_literal(chr(scalar)), close + 1
    if e == "c" and i + 2 < end and pattern[i + 2].isascii() and pattern[i + 2].isalpha():  # \cA: U+0001
        return _escape_literal(chr(ord(pattern[i + 2]) % 32)), i + 3
    if e in "uU":
        width = 4 if e == "u" else 8
        code = read_hex(pattern, i + 2, width)
        if code is None:
            digits = "four" if e == "u" else "eight"
            raise GrammarError(f"bad escape: \\{e} must be followed by {digits} hexadecimal digits", 1, col)
        if code > 0x10FFFF or SURROGATES[0] <= code <= SURROGATES[1]:
            raise GrammarError(f"escape \\{e}{pattern[i + 2 : i + 2 + width]} is not a Unicode scalar value", 1, col)
        return _escape_literal(chr(code)), i + 2 + width
    if e == "x" and read_hex(pattern, i + 2, 2) is None:
        raise GrammarError("bad escape: \\x must be followed by two hexadecimal digits", 1, col)
    return pattern[i : i + 2], i + 2


_ANGLE_NAMED_GROUP = re.compile(r"\(\?<[A-Za-z_][A-Za-z0-9_]*>")
"""A named group in the `(?<name>...)` spelling (Python's own is `(?P<name>...)`)."""

_POSSESSIVE = re.compile(r"(?:[*+?]|\{\d*(?:,\d*)?\})\+")
"""A possessive quantifier (Python 3.11): `x*+`, `x++`, `x?+`, `x{m,n}+`."""


def preprocess_regex(pattern: str, max_nesting: int = DEFAULT_LIMITS.max_nesting) -> tuple[str, list[int]]:
    """Check `pattern` and rewrite it into the dialect interegular reads.

    Returns the rewritten pattern and, for each of its characters, the 0-based index in the
    original (for error columns).  Raises GrammarError (line 1, 1-based column) at the first
    construct we cannot express exactly.  Rewrites: `\\uHHHH` / `\\UHHHHHHHH` escapes become the
    literal character (interegular does not know them); a leading `^` and a trailing `$` are
    dropped, as full-match semantics already anchor the pattern.  Scans like a regex lexer
    (escapes, character classes) so `[(?=]` or `\\(?=` are not mistaken for lookarounds.
    """
    out: list[str] = []
    where: list[int] = []

    def emit(text: str, index: int) -> None:
        out.append(text)
        where.extend([index] * len(text))

    i = 0
    n = len(pattern)
    in_class = False
    class_start = 0
    depth = 0
    if pattern.startswith("^"):
        i = 1
    end = n
    if pattern.endswith("$") and n >= 1:
        backslashes = len(pattern[:-1]) - len(pattern[:-1].rstrip("\\"))
        if backslashes % 2 == 0:
            end = n - 1
    while i < end:
        c = pattern[i]
        col = i + 1
        if c == "\\":
            text, after = _rewrite_escape(pattern, i, end, in_class)
            emit(text, i)
            i = after
            continue
        if in_class:
            if c == "]":
                in_class = False
            emit(c, i)
            i += 1
            continue
        if c == "[":
            in_class = True
            start = class_start = i
            i += 1
            if i < end and pattern[i] == "^":
                i += 1
            if i < end and pattern[i] == "]":  # a leading ']' is a literal
                emit(pattern[start:i], start)
                emit("\\]", i)
                i += 1
            else:
                emit(pattern[start:i], start)
            continue
        if c == "(":
            depth += 1
            if depth > max_nesting:
                raise GrammarError(
                    f"groups nest deeper than {max_nesting} levels (the max_nesting budget); "
                    "flatten the pattern or raise Limits.max_nesting",
                    1,
                    col,
                )
        elif c == ")":
            depth -= 1
        if c == "(" and pattern.startswith("(?", i):
            rest = pattern[i + 2 : i + 4]
            if rest[:1] in ("=", "!") or rest in ("<=", "<!"):
                kind = "Lookbehind" if rest[0] == "<" else "Lookahead"  # XGrammar's words
                raise GrammarError(
                    f"{kind} assertion {pattern[i : i + 3 + (rest[0] == '<')]!r}...) is not supported: "
                    f"{_HINT_LOOKAROUND}",
                    1,
                    col,
                )
            if pattern.startswith("(?P=", i):
                raise GrammarError(f"Backreference (?P=...) (named) is not supported: {_HINT_BACKREF}", 1, col)
            if rest[:1] == "(":
                raise GrammarError("conditional groups (?(...)...) are not supported; split into alternatives", 1, col)
            named = _ANGLE_NAMED_GROUP.match(pattern, i)
            if named:  # (?<name>...), the ECMAScript / .NET spelling: a plain group (names match nothing)
                emit("(?:", i)
                i = named.end()
                continue
        if c == "^":
            raise GrammarError(
                "'^' is only supported at the start of the pattern (the match is always anchored)", 1, col
            )
        if c == "$":
            raise GrammarError("'$' is only supported at the end of the pattern (the match is always anchored)", 1, col)
        possessive = _POSSESSIVE.match(pattern, i) if c in "*+?{" else None
        if possessive:
            raise GrammarError(
                f"possessive quantifier {possessive.group()!r} is not supported: it never "
                "gives characters back, so it matches less than the greedy one (XGrammar refuses it too); "
                "write the quantifier without the trailing '+'",
                1,
                col,
            )
        emit(c, i)
        i += 1
    if in_class:
        empty = pattern.startswith(("[]", "[^]"), class_start)
        raise GrammarError(
            "unterminated character class; add ']'"
            + (" (an Empty character class '[]' or '[^]' is not supported: a ']' right after it is a literal)" * empty),
            1,
            n + 1,
        )
    where.append(n)
    return "".join(out), where


def _parse(rewritten: str, where: list[int]) -> Pattern:
    """interegular's parse tree of the rewritten pattern, or GrammarError with the column."""

    def column(index: int) -> int:
        return where[min(max(index, 0), len(where) - 1)] + 1

    parser = _ParsePattern(rewritten)
    try:
        parsed = parser.parse().simplify()
    except NoMatch as exc:
        raise GrammarError(
            f"invalid regex: unexpected {rewritten[exc.index : exc.index + 5]!r}; "
            f"expected one of {sorted(set(exc.expected))}",
            1,
            column(exc.index),
        ) from None
    except InvalidSyntax as exc:
        index = max(parser._expected) if parser._expected else parser.index
        detail = str(exc) or "unbalanced parenthesis or misplaced operator"
        raise GrammarError(f"invalid regex: {detail}", 1, column(index)) from None
    except Unsupported as exc:
        raise GrammarError(f"unsupported regex construct: {exc}", 1, column(parser.index - 1)) from None
    except Exception:  # interegular fails on some malformed groups, e.g. "(?<*"
        raise GrammarError("invalid regex: malformed group or escape", 1, column(parser.index)) from None
    return parsed


def _to_fsm(parsed: Pattern) -> FSM:
    try:
        return parsed.to_fsm()
    except Unsupported as exc:
        raise GrammarError(f"unsupported regex construct: {exc}", 1, 1) from None
    except Exception as exc:  # interegular raises bare Exceptions, e.g. for a{2,1}
        raise GrammarError(f"invalid regex: {exc}; check repetition bounds like {{m,n}} with m <= n", 1, 1) from None


def regex_to_ir(
    pattern: str,
    max_states: int = DEFAULT_LIMITS.max_rule_states,
    max_nesting: int = DEFAULT_LIMITS.max_nesting,
    automaton: bool = False,
    split_counts: bool = False,
) -> Expr:
    """An IR expression for the strings `pattern` fully matches: a CharFsm (or NOTHING) for
    small patterns, an IR tree for patterns with counted repetitions or many nodes (unless
    `automaton`: then always a CharFsm).

    interegular builds automata in Python and determinises every concatenation, so
    `(a|b)*a(a|b){15}` or an alternation of 10,000 words takes minutes there; as a tree, the rule's
    automaton is built by the numba kernels under the `max_rule_states` budget instead.
    Patterns whose repetitions unroll to more than `max_states` positions (`a{1000000}`) are a
    LimitExceededError before anything is built; with `split_counts` (EBNF's `Regex(...)`, as
    XGrammar reads it) an IR tree, whose big counts the passes split into helper rules
    (grammar/passes.py: split_large_repeats).
    """
    check_argument(pattern, str, "pattern", "regex_to_ir", "pass the regex as str")
    rewritten, where = preprocess_regex(pattern, max_nesting)
    words = _WORD_LIST.fullmatch(rewritten)
    if words and not automaton and rewritten.count("|") >= WORD_LIST_MIN:
        # "(cat|dog|...)": a big literal set needs no parse tree (interegular's parser takes
        # seconds for 10,000 words)
        return alt(*(lit(word) for word in (words.group(1) or words.group(2)).split("|")))
    compressed = _compress_large_classes(rewritten, where)
    expansion: dict[str, tuple[int, int]] = {}
    if compressed is not None:
        rewritten, where, expansion = compressed
    marks = _group_marks(rewritten) if rewritten.count("(") > INTEREGULAR_MAX_NESTING else []
    if _deepest_group(marks) > INTEREGULAR_MAX_NESTING:
        if automaton:
            raise GrammarError(
                f"groups nest deeper than {INTEREGULAR_MAX_NESTING} levels in a regex that must become one "
                "automaton (a lazy quantifier in a Lark terminal); flatten the pattern",
                1,
                1,
            )
        tree = _grouped_pattern_to_ir(rewritten, where, marks, expansion)
        if expr_size(tree, limit=max_states) > max_states:
            raise _unroll_error(pattern, f"more than {max_states}", max_states)
        return tree
    parsed = _parse(rewritten, where)
    positions, nodes, counted = _measure(parsed)
    if positions > max_states:
        if automaton or not split_counts:
            raise _unroll_error(pattern, str(positions), max_states)
        return _pattern_to_ir(parsed, REFlags(0), expansion)  # the passes split its big counts
    if (counted or nodes > TREE_PATTERN_NODES) and not automaton:
        return _pattern_to_ir(parsed, REFlags(0), expansion)
    return fsm_to_char_fsm(_to_fsm(parsed), expansion)


def _unroll_error(pattern: str, positions: str, max_states: int) -> LimitExceededError:
    return LimitExceededError(
        f"regex {pattern[:60]!r} unrolls to {positions} character positions, more than the max_rule_states "
        f"limit of {max_states}; use * or + for long runs, or raise Limits.max_rule_states"
    )


# ---------------------------------------------------------------------------------------------
# Deeply nested groups.  interegular's parser, simplifier and automata recurse once or more per
# nested group and reach Python's recursion limit below 200 levels.  A pattern nesting deeper
# than INTEREGULAR_MAX_NESTING is split here at its groups and alternation bars, with an explicit
# stack of the open groups, into an IR tree whose leaves (runs without groups) interegular parses.

INTEREGULAR_MAX_NESTING = 48
"""Patterns whose groups nest deeper than this are split at their groups by `_grouped_pattern_to_ir`."""
_GROUP_FLAGS = re.compile(r"\?([aiLmsux]*)(?:-([aiLmsux]+))?([:)])")
_NAMED_GROUP = re.compile(r"\?P<\w+>")
_GROUP_QUANTIFIER = re.compile(r"(?:([*+?])|\{(?:(\d+)(?:(,)(\d*))?|,(\d+))\})\??")
"""A quantifier after a group (a lazy one matches the same strings): `* + ?`, `{m}`, `{m,}`, `{m,n}`, `{,n}`."""


def _group_marks(text: str) -> list[tuple[int, str]]:
    """(index, character) of every group bracket and alternation bar of a rewritten pattern
    (`preprocess_regex`'s output), outside escapes and character classes."""
    marks: list[tuple[int, str]] = []
    in_class = False
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"  # preprocess_regex escapes a class's leading ']'
        elif c == "[":
            in_class = True
        elif c in "()|":
            marks.append((i, c))
        i += 1
    return marks


def _deepest_group(marks: list[tuple[int, str]]) -> int:
    """How deeply the groups of `marks` (see `_group_marks`) nest."""
    depth = deepest = 0
    for _, c in marks:
        if c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
    return deepest


def _grouped_pattern_to_ir(
    text: str, where: list[int], marks: list[tuple[int, str]], expansion: dict[str, tuple[int, int]]
) -> Expr:
    """The IR tree of a rewritten pattern read group by group (`marks`: its `_group_marks`), each
    run between two marks parsed by interegular under the flags of its group; GrammarError with
    the column for an unbalanced bracket or a group kind a regular language cannot hold."""

    def column(index: int) -> int:
        return where[min(index, len(where) - 1)] + 1

    def run(start: int, end: int, flags: REFlags) -> Expr:
        return _pattern_to_ir(_parse(text[start:end], where[start : end + 1]), flags, expansion)

    open_groups: list[tuple[int, REFlags, list[Expr], list[Expr]]] = []  # ('(' index, outer flags, options, items)
    flags = REFlags(0)
    options: list[Expr] = []  # finished alternatives of the innermost open group
    items: list[Expr] = []  # the current alternative's items so far
    pos = 0  # the text before `pos` is read
    for index, char in [*marks, (len(text), "")]:
        if index < pos:
            continue  # inside a group's `(?...` prefix or comment, read already
        if index > pos:
            items.append(run(pos, index, flags))
        pos = index + 1
        if char == "(":
            inner_flags = flags
            if text.startswith("?", pos):
                named = _NAMED_GROUP.match(text, pos)
                scoped = _GROUP_FLAGS.match(text, pos)
                if text.startswith("?:", pos):
                    pos += 2
                elif named:
                    pos = named.end()
                elif text.startswith("?#", pos):
                    end = text.find(")", pos)
                    pos = len(text) if end < 0 else end + 1
                    continue
                elif scoped and scoped.group(3) == ":":
                    added, removed = (_flag_set(scoped.group(k), column(index)) for k in (1, 2))
                    inner_flags = _combine_flags(flags, added, removed)
                    pos = scoped.end()
                elif scoped and index == 0 and not scoped.group(2):
                    flags = _flag_set(scoped.group(1), column(index))  # global flags, which Python allows only first
                    pos = scoped.end()
                    continue
                elif scoped and scoped.group(3) == ")":
                    raise GrammarError(
                        f"global flags {text[index : scoped.end()]!r} must start the pattern; "
                        "scope them to a group like (?i:...)",
                        1,
                        column(index),
                    )
                else:
                    raise GrammarError(f"unsupported group {text[index : index + 4]!r}...", 1, column(index))
            open_groups.append((index, flags, options, items))
            flags, options, items = inner_flags, [], []
        elif char == "|":
            options.append(seq(*items))
            items = []
        else:
            group = alt(*options, seq(*items))
            if not char:
                if open_groups:
                    raise GrammarError("invalid regex: unbalanced '(': missing ')'", 1, column(open_groups[-1][0]))
                return group
            if not open_groups:
                raise GrammarError("invalid regex: unbalanced ')': no matching '('", 1, column(index))
            _, flags, options, items = open_groups.pop()
            quantifier = _GROUP_QUANTIFIER.match(text, pos)
            if quantifier:
                group = _repeat_group(group, quantifier, column(index))
                pos = quantifier.end()
            items.append(group)
    raise AssertionError("the end mark returns")


def _flag_set(letters: str | None, col: int) -> REFlags:
    """interegular's flags for the letters of a `(?aiLmsux-imsx:...)` group."""
    try:
        return _get_flags(letters or "")
    except Unsupported as exc:
        raise GrammarError(f"unsupported regex construct: {exc}", 1, col) from None


def _repeat_group(group: Expr, quantifier: re.Match, col: int) -> Expr:
    """`group` under the quantifier matched by _GROUP_QUANTIFIER."""
    op, lo_digits, comma, hi_digits, only_hi = quantifier.groups()
    if op:
        lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[op]
    elif only_hi is not None:
        lo, hi = 0, int(only_hi)
    else:
        lo = int(lo_digits)
        hi = lo if comma is None else int(hi_digits) if hi_digits else None
    if hi is not None and hi < lo:
        raise GrammarError(
            f"invalid regex: repetition {{{lo},{hi}}} has max < min; check repetition bounds like {{m,n}} with m <= n",
            1,
            col,
        )
    return rep(group, lo, hi)


_PLAIN = r"[^\\^$.|?*+()\[\]{}]+"
_WORD_LIST = re.compile(rf"\(({_PLAIN}(?:\|{_PLAIN})*)\)|({_PLAIN}(?:\|{_PLAIN})*)")
"""An alternation of plain words, maybe in one group."""
WORD_LIST_MIN = 64
"""Alternations of at least this many plain words are read without interegular's parser."""


def _measure(node) -> tuple[int, int, bool]:
    """(character positions once repetitions are unrolled, nodes, has a counted repetition)."""
    if isinstance(node, Pattern):
        parts = [_measure(o) for o in node.options]
    elif isinstance(node, _Concatenation):
        parts = [_measure(p) for p in node.parts]
    elif isinstance(node, _Repeated):
        positions, nodes, counted = _measure(node.base)
        copies = max(1, node.min, node.max or 0)
        return positions * copies, nodes + 1, counted or copies > 1
    else:
        return 1, 1, False
    return sum(p[0] for p in parts), 1 + sum(p[1] for p in parts), any(p[2] for p in parts)


def _pattern_to_ir(node, flags: REFlags, expansion: dict[str, tuple[int, int]]) -> Expr:
    """interegular's parse tree as an IR tree, with interegular's meaning: `.` is any code point
    but a newline (any under the s flag), the i flag adds both cases of every character of a
    class, a negated class is every other code point, and a representative of a compressed
    class stands for its range (`expansion`)."""
    if isinstance(node, Pattern):
        inner = _combine_flags(flags, node.added_flags, node.removed_flags)
        return alt(*(_pattern_to_ir(option, inner, expansion) for option in node.options))
    if isinstance(node, _Concatenation):
        if not all(
            isinstance(part, (Pattern, _Concatenation, _Repeated, _CharGroup)) or part is _DOT or part is _EMPTY
            for part in node.parts
        ):
            raise GrammarError("unsupported regex construct: lookaround; " + _HINT_LOOKAROUND, 1, 1)
        return seq(*(_pattern_to_ir(part, flags, expansion) for part in node.parts))
    if isinstance(node, _Repeated):
        if node.max is not None and node.max < node.min:
            raise GrammarError(
                f"invalid regex: repetition {{{node.min},{node.max}}} has max < min; "
                "check repetition bounds like {m,n} with m <= n",
                1,
                1,
            )
        return rep(_pattern_to_ir(node.base, flags, expansion), node.min, node.max)
    if node is _EMPTY:
        return EPSILON
    if node is _DOT:
        return char_class([(0, MAX_CODE_POINT)] if flags & REFlags.SINGLE_LINE else [(0, 9), (11, MAX_CODE_POINT)])
    assert isinstance(node, _CharGroup), node
    if len(node.chars) == 1 and not node.negated and not flags & REFlags.CASE_INSENSITIVE:
        (char,) = node.chars
        if char not in expansion and not SURROGATES[0] <= ord(char) <= SURROGATES[1]:
            return lit(char)  # the common case, a plain character: literals merge into words
    chars = set(node.chars)
    if flags & REFlags.CASE_INSENSITIVE:
        chars |= {c.lower() for c in node.chars} | {c.upper() for c in node.chars}
    # case folding can give multi-character strings ("\u0149".upper()), which no one character matches
    ranges = [expansion.get(c, (ord(c), ord(c))) for c in chars if len(c) == 1]
    expr = char_class(ranges, negated=node.negated)
    if isinstance(expr, CharClass) and expr.ranges[0][0] == expr.ranges[-1][1]:
        return lit(chr(expr.ranges[0][0]))  # one character: literals merge, and words become tries
    return expr


def parse_regex(
    pattern: str, max_states: int = DEFAULT_LIMITS.max_rule_states, max_nesting: int = DEFAULT_LIMITS.max_nesting
) -> Grammar:
    """A one-rule grammar ("root") for the regex."""
    return Grammar({"root": regex_to_ir(pattern, max_states, max_nesting)}, "root", {"root": (1, 1)})
