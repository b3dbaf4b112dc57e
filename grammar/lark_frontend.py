"""Lark grammars -> grammar IR, reading the grammar with the `lark` package itself.

We let lark do the reading (syntax, `%import common.X`, templates, `?rule`, aliases, EBNF
operators), then convert what it compiled:

* rules: each lark `Rule` (origin -> expansion of symbols) is one alternative of an IR rule of
  the same name.  Lark expands `x*`, `x+` and `[x]` into helper rules such as
  `__start_star_0 ::= x | __start_star_0 x`, which are LEFT-recursive: `passes.normalize`
  turns them back into loops.
* terminals: `"text"` (PatternStr) becomes a literal, `"text"i` a sequence of case-insensitive
  classes; `/regex/flags` (PatternRE) goes through `regex.regex_to_ir`.  Each terminal is an
  IR rule named after the terminal (terminal names are upper case, rule names lower case, so
  they never clash); inlining later removes the indirection.
* `%ignore`: a lexer would skip ignored tokens between any two tokens.  We insert
  `(IGNORED)*` between adjacent symbols of every rule expansion (never inside a terminal) and
  around the start symbol, which covers every gap between two tokens: two tokens adjacent in
  the input are adjacent children (up to nullable ones) of their lowest common ancestor.
  Like lark's lexer, an ignored token is the match Python's `re` finds where it starts (the
  longest for `--c from t`, one SQL comment; the first alternative for `x|xy`):
  longest_match.greedy_ignores keeps only those ends, given the regex lark matches it with.

* rule attributes (XGrammar's `name[lazy]`, `suffix=`, `stop=`, `max_chars=`): lark_dialect
  writes such a rule as one terminal; its automaton is cut here (`_rule_terminal_ir`): at its
  first end for lazy, at the character budget for max_chars.

The IR is scannerless: adjacent (not ignored) terminals may split the input anywhere, as with
lark's Earley `dynamic_complete` lexer (the tests' oracle).  Lark's other lexers commit to one
match per terminal, so e.g. `NAME NAME` accepts "ab" here but not under lark's standard lexer.

Lexer semantics we do mirror: lark's common `ESCAPED_STRING` uses a lookbehind; we substitute the
equivalent `"([^"\\\\\\n]|\\\\[^\\n])*"`.  A terminal regex with a lazy quantifier whose tail after
it has no quantifier (like C_COMMENT `/\\*(.|\\n)*?\\*/`) matches what a lexer would: the token
ends at the first point where the pattern can end.  Other regexes use full-match semantics.

Syntax errors become GrammarError with line/column (from lark's exception, or by locating the
named rule in the text when lark gives none).
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict, deque
from typing import overload

from lark.exceptions import LarkError, UnexpectedInput, VisitError
from lark.lexer import PatternRE, PatternStr, Token
from lark.load_grammar import _literal_to_pattern, _parse_grammar, load_grammar

from ..core.errors import GrammarError, LimitExceededError, PushmaskError, check_argument
from ..core.limits import DEFAULT_LIMITS
from .ebnf import substring_runs, token_expr
from .ir import (
    NOTHING,
    SURROGATES,
    TOKEN_CLASS_BASE,
    CharFsm,
    Expr,
    Grammar,
    Ref,
    alt,
    char_class,
    lit,
    map_refs,
    seq,
    star,
    token_class_terminal,
    token_terminal,
)
from .json_options import JsonOptions
from .lark_dialect import LARK_ERROR_PREFIX, RULE_TERMINAL, Embedded, RuleAttributes, lark_error, translate_dialect
from .lark_reader import LAZY_QUANTIFIER, read_plain_lark
from .longest_match import greedy_ignores
from .regex import regex_to_ir

__all__ = ["parse_lark"]

# lark's common.ESCAPED_STRING (after lark compiles it) and a lookaround-free regex that matches
# exactly the tokens a lexer would produce with it.
_KNOWN_REGEX_REPLACEMENTS = {
    '".*?(?<!\\\\)(\\\\\\\\)*?"': '"(?:[^"\\\\\\n]|\\\\[^\\n])*"',
}


def _case_insensitive_literal(text: str) -> Expr:
    items = []
    for ch in text:
        variants = {ch, ch.lower(), ch.upper()}
        if len(variants) == 1 or any(len(v) != 1 for v in variants):
            items.append(lit(ch))
        else:
            items.append(char_class((ord(v), ord(v)) for v in variants))
    return seq(*items)


def _strip_escapes_and_classes(pattern: str) -> str:
    """The regex with escapes and [...] classes blanked out, to find operators reliably."""
    out = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append("  ")
            i += 2
            continue
        if in_class:
            in_class = c != "]"
            out.append(" ")
        elif c == "[":
            in_class = True
            out.append(" ")
            if pattern[i + 1 : i + 2] == "]" or pattern[i + 1 : i + 3] == "^]":
                extra = 1 if pattern[i + 1] == "]" else 2
                out.append(" " * extra)
                i += extra
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _first_end_only(fsm: Expr) -> Expr:
    """Keep only strings with no proper prefix in the language (cut edges out of final states)."""
    if not isinstance(fsm, CharFsm):
        return fsm
    return _trimmed(fsm.initial, fsm.finals, [t for t in fsm.transitions if t[0] not in fsm.finals])


def _trimmed(initial: int, finals, transitions) -> Expr:
    """The CharFsm of these edges without the states that are unreachable or cannot reach a
    final state (NOTHING when the language is empty)."""
    forward = defaultdict(list)
    backward = defaultdict(list)
    for src, _, _, dst in transitions:
        forward[src].append(dst)
        backward[dst].append(src)

    def closure(starts, graph):
        seen = set(starts)
        queue = deque(starts)
        while queue:
            s = queue.popleft()
            for t in graph[s]:
                if t not in seen:
                    seen.add(t)
                    queue.append(t)
        return seen

    live = closure([initial], forward) & closure(list(finals), backward)
    if initial not in live:
        return NOTHING
    kept = tuple(t for t in transitions if t[0] in live and t[3] in live)
    return CharFsm(initial, frozenset(f for f in finals if f in live), kept)


def _char_budget(fsm: Expr, max_chars: int, max_states: int, label: str) -> Expr:
    """XGrammar's `max_chars` on a rule of language `fsm`: once its text holds `max_chars` code
    points the rule ends where it can end, and goes on (the budget relaxed) only where it
    cannot.  The product of `fsm` (trimmed: every state can still end) with a counter that
    stops at `max_chars`, where a final state at the budget keeps no edges."""
    if not isinstance(fsm, CharFsm):
        return fsm  # NOTHING
    edges: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for src, lo, hi, dst in fsm.transitions:
        edges[src].append((lo, hi, dst))
    ids = {(fsm.initial, 0): 0}
    queue = deque([(fsm.initial, 0)])
    transitions, finals = [], set()
    while queue:
        state, count = queue.popleft()
        source = ids[(state, count)]
        if state in fsm.finals:
            finals.add(source)
            if count == max_chars:
                continue  # the budget is spent and the rule can end: it ends
        for lo, hi, target in edges[state]:
            key = (target, min(count + 1, max_chars))
            if key not in ids:
                if len(ids) >= max_states:
                    raise LimitExceededError(
                        f"rule {label}: max_chars={max_chars} over its automaton takes more than {max_states} "
                        "states (max_rule_states); use a smaller budget"
                    )
                ids[key] = len(ids)
                queue.append(key)
            transitions.append((source, lo, hi, ids[key]))
    return _trimmed(0, finals, sorted(transitions))


def _rule_terminal_ir(attributes: RuleAttributes, fsm: Expr, max_states: int) -> Expr:
    """The language of a rule compiled as one terminal (`fsm`, its body's automaton with any
    suffix or stop marker appended) under its lazy and max_chars attributes; in XGrammar's
    trigger form every state of the (trimmed) lazy automaton is final."""
    if attributes.lazy:
        fsm = _first_end_only(fsm)
    if attributes.triggered and isinstance(fsm, CharFsm):  # the text may end before its trigger
        fsm = CharFsm(fsm.initial, _states(fsm), fsm.transitions)
    if attributes.max_chars is not None:
        fsm = _char_budget(fsm, attributes.max_chars, max_states, attributes.rule)
    if attributes.max_tokens is not None and not _ends_anywhere(fsm):
        raise GrammarError(
            f"attribute 'max_tokens' is supported on a rule whose text may end after any character "
            f"(the matcher closes it where the budget runs out); rule '{attributes.rule}' cannot end "
            "everywhere, where XGrammar relaxes the budget until it can: give it a body that may stop after any "
            "character, such as /(.|\\n)*/"
        )
    return fsm


def _ends_anywhere(fsm: Expr) -> bool:
    """Whether every state of the (trimmed) automaton is final: the text may stop anywhere."""
    return isinstance(fsm, CharFsm) and _states(fsm) <= fsm.finals


def _states(fsm: CharFsm) -> frozenset[int]:
    """Every state of the automaton: its initial state and the ends of its edges."""
    return frozenset({fsm.initial} | {t[0] for t in fsm.transitions} | {t[3] for t in fsm.transitions})


def _pattern_to_ir(label: str, pattern, max_states: int, max_nesting: int, automaton: bool = False) -> Expr:
    """IR of one lark PatternStr / PatternRE; `label` names it in errors (a terminal name or the
    literal); with `automaton`, always its CharFsm (or NOTHING)."""
    flags = set(pattern.flags)
    if isinstance(pattern, PatternStr) and automaton:  # as a regex of escaped characters
        escaped = "".join(c if c.isalnum() and c.isascii() else f"\\U{ord(c):08X}" for c in pattern.value)
        pattern = PatternRE(escaped, pattern.flags)
    if isinstance(pattern, PatternStr):
        surrogates = [c for c in pattern.value if SURROGATES[0] <= ord(c) <= SURROGATES[1]]
        if surrogates:
            raise GrammarError(
                f"terminal {label}: lone surrogate U+{ord(surrogates[0]):04X} in a string; UTF-8 cannot encode it"
            )
        return _case_insensitive_literal(pattern.value) if "i" in flags else lit(pattern.value)
    assert isinstance(pattern, PatternRE)
    source = _KNOWN_REGEX_REPLACEMENTS.get(pattern.value, pattern.value)
    flags.discard("m")  # only changes ^ and $, which regex_to_ir rejects anyway
    flags.discard("u")  # Python 3 str patterns are always Unicode
    if "x" in flags or "l" in flags:
        raise GrammarError(
            f"terminal {label}: regex flag(s) {''.join(sorted(flags))!r} are not supported; "
            "write the regex without verbose/locale flags"
        )
    prefixed = f"(?{''.join(sorted(flags))}:{source})" if flags else source
    lazy = list(LAZY_QUANTIFIER.finditer(_strip_escapes_and_classes(source)))
    first_end = bool(lazy) and not any(op in _strip_escapes_and_classes(source)[lazy[-1].end() :] for op in "*+?{")
    try:
        expr = regex_to_ir(prefixed, max_states, max_nesting, automaton=first_end or automaton)
    except GrammarError as exc:
        raise GrammarError(f"terminal {label}: {exc.message} in /{pattern.value}/") from None
    except LimitExceededError as exc:
        raise LimitExceededError(f"terminal {label}: {exc}") from None
    return _first_end_only(expr) if first_end else expr


class _TextIndex:
    """Where names occur in a grammar text, found in one pass (grammars of thousands of rules
    would otherwise be searched once per rule): the first line starting with a name (optionally
    after ? or !: its definition) and each name's first occurrence."""

    def __init__(self, text: str):
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.definitions: dict[str, int] = {}
        self.first: dict[str, int] = {}
        self.literals: dict[str, int] = {}  # first occurrence of each "string" and /regex/
        for m in re.finditer(r'"(?:[^"\\\n]|\\.)*"i?|/(?:[^/\\\n]|\\.)+/[imslux]*', text):
            self.literals.setdefault(m.group(), m.start())
        for m in re.finditer(r"[\w.]+", text):
            start = m.start()
            prefixed = start > 0 and text[start - 1] in "?!"
            line_start = start - prefixed
            if line_start == 0 or text[line_start - 1] == "\n":
                self.definitions.setdefault(m.group(), line_start)
                self.definitions.setdefault(m.group().split(".")[0], line_start)
            self.first.setdefault(m.group(), start)
            offset = start
            for part in m.group().split("."):  # NUMBER in common.NUMBER
                self.first.setdefault(part, offset)
                offset += len(part) + 1

    def position(self, name: str) -> tuple[int, int] | tuple[None, None]:
        """Where the rule or terminal `name` is defined, else first mentioned."""
        return self.line_column(self.definitions.get(name, self.first.get(name)))

    def literal_position(self, raw: str) -> tuple[int, int] | tuple[None, None]:
        """Where the string or regex literal `raw` (quotes or slashes included) first occurs."""
        return self.line_column(self.literals.get(raw))

    @overload
    def line_column(self, offset: int) -> tuple[int, int]: ...

    @overload
    def line_column(self, offset: int | None) -> tuple[int, int] | tuple[None, None]: ...

    def line_column(self, offset: int | None) -> tuple[int, int] | tuple[None, None]:
        if offset is None:
            return None, None
        line = bisect.bisect_right(self.line_starts, offset)
        return line, offset - self.line_starts[line - 1] + 1


def _locate(index: _TextIndex, message: str) -> tuple[int, int] | tuple[None, None]:
    """Best-effort position for lark errors that carry none: 'line L column C' in the message,
    else the definition of the rule named in '(in rule X)', else the first quoted name."""
    match = re.search(r"line (\d+),? column (\d+)", message)
    if match:
        return int(match.group(1)), int(match.group(2))
    names = re.findall(r"in rule (\w+)", message) + re.findall(r"'([\w.]+)'", message)
    names += re.findall(r"used but not defined: (\w+)", message)  # a terminal inside a terminal
    for name in names:
        where = index.position(name)
        if where[0] is not None:
            return where
    return None, None


class _TooDeepForLoader(Exception):
    """lark's grammar loader recursed past Python's recursion limit (it recurses per nested group:
    about 400 levels), so the grammar is read by lark_reader if it is in the plain subset."""


def _load(text: str, start: str) -> tuple[list, list, list[str]]:
    """lark's reading of the grammar: (terminal definitions, rules, ignored terminal names).

    Only lark's grammar loader runs, not `lark.Lark`, whose Earley parser set-up (which pushmask
    never uses) ran past 115 s for 10,000 rules; each used terminal's regex is compiled with `re`
    as lark's lexer would, so bad regexes are reported the same way."""
    try:
        grammar, _ = load_grammar(text, "<string>", None, False)
        terminals, rules, ignored = grammar.compile([start], set())
        for terminal in terminals:
            if isinstance(terminal.pattern, PatternRE):
                re.compile(terminal.pattern.to_regexp())
    except RecursionError:
        raise _TooDeepForLoader from None
    except UnexpectedInput as exc:
        detail = str(exc).strip().splitlines()[0]
        expected = getattr(exc, "expected", None) or ()
        missing = [words for token, words in _EXPECTED_TOKEN_WORDS.items() if token in expected]
        if missing:  # XGrammar's words for what is missing
            detail = f"{missing[0]} ({detail})"
        raise GrammarError(f"lark grammar syntax error: {detail}", exc.line, exc.column) from None
    except VisitError as exc:  # lark compiles some regexes while it reads the grammar
        if not _is_regex_error(exc.orig_exc):
            raise GrammarError(f"invalid lark grammar: {exc.orig_exc}", *_locate(_TextIndex(text), str(exc))) from None
        raise _regex_error(text, exc.orig_exc) from None
    except LarkError as exc:
        message = str(exc).strip()
        if f"NonTerminal('{start}')" in message:
            raise GrammarError(
                f"lark grammar has no start rule {start!r}; define `{start}: ...` or pass start=", 1, 1
            ) from None
        first = message.splitlines()[0] if message else type(exc).__name__
        line, column = _locate(_TextIndex(text), message)
        raise GrammarError(f"invalid lark grammar: {first}", line, column) from None
    except Exception as exc:  # e.g. re.error / regex.error from a bad terminal regex
        if _is_regex_error(exc):
            raise _regex_error(text, exc) from None
        raise GrammarError(
            f"invalid lark grammar: {type(exc).__name__}: {exc}", *_locate(_TextIndex(text), str(exc))
        ) from None
    if not any(rule.origin.name == start for rule in rules):
        raise GrammarError(f"lark grammar has no start rule {start!r}; define `{start}: ...` or pass start=", 1, 1)
    return terminals, rules, ignored


# A token lark's grammar parser expected and did not find -> XGrammar's words for the error.
_EXPECTED_TOKEN_WORDS = {
    "_COLON": "expected ':' after rule name",
    "_RPAR": "expected ')' after group",
    "_RBRA": "expected ']' after optional group",
}


def _is_regex_error(exc: BaseException) -> bool:
    """Whether `exc` is a regex compile error of `re` or of the `regex` package lark may use."""
    return isinstance(exc, re.error) or (type(exc).__name__ == "error" and type(exc).__module__.startswith("regex"))


def _regex_error(text: str, exc: BaseException) -> GrammarError:
    """The GrammarError of a terminal regex that does not compile, at the line and column of the
    first `/regex/` in the text that `re` refuses (lark's own error gives only the position inside
    the regex); lark's grammar parser finds the regexes, so comments and strings are skipped."""
    try:
        regexes = list(
            _parse_grammar(text, "<string>").scan_values(lambda v: isinstance(v, Token) and v.type == "REGEXP")
        )
    except Exception:  # noqa: BLE001 -- locating is best effort; the error below still names the reason
        regexes = []
    for token in regexes:
        try:
            re.compile(_literal_to_pattern(token).to_regexp())
        except re.error as bad:
            return GrammarError(
                f"invalid lark grammar: failed to compile regular expression {token}: {bad}", token.line, token.column
            )
        except LarkError:
            continue
    return GrammarError(
        f"invalid lark grammar: a terminal regex does not compile: {exc}", *_locate(_TextIndex(text), str(exc))
    )


_TOKEN_SET = re.compile(r"<\[(\^?)([^\]]*)\]>")
MAX_TOKEN_SET = 1_000_000
"""The most token ids one XGrammar token set <[a-b,...]> may name."""


def _token_terminal_expr(text: str, token_id, token_classes: dict[int, frozenset[int]], error) -> Expr:
    """A token terminal: one token (ebnf.token_expr), or XGrammar's token sets: `<[0,2-4]>` (any
    of those ids), `<[^1,3]>` (any token but those) and `<[*]>` (any token); the last two are
    token-class terminals, registered in `token_classes`."""
    match = _TOKEN_SET.fullmatch(text)
    if match is None:  # a special token by its text, in XGrammar's words where it fails
        if token_id is None:
            raise error(f"named special token {text} requires tokenizer_info (or write its id as <[ID]>)")
        try:
            token_id(text)
        except (ValueError, GrammarError) as exc:
            raise error(f"unknown special token {text}: {exc}") from None
        return token_expr(text, token_id, error)
    if not match.group(1) and match.group(2).strip().isdigit():
        return token_expr(text, token_id, error)
    negated, items = match.group(1) == "^", [item.strip() for item in match.group(2).split(",")]
    if "*" in items:
        if negated:
            raise error(f"negated wildcard special token is not supported: {text} matches no token")
        if len(items) > 1:
            raise error(f"wildcard cannot be mixed with token ids in {text}")
        if token_id is None:
            raise error(f"wildcard special token requires tokenizer_info: {text} stands for the whole vocabulary")
        return _token_class(frozenset(), token_classes)
    ids: set[int] = set()
    for item in items:
        if not item:
            raise error(f"empty numeric special-token range in {text}")
        ends = item.split("-")
        if len(ends) > 2 or not all(end.strip().isdigit() for end in ends) or int(ends[0]) > int(ends[-1]):
            raise error(f"invalid numeric special-token range {item!r} in {text}; write N or N-M with N <= M")
        low, high = int(ends[0]), int(ends[-1])
        if high - low + 1 > MAX_TOKEN_SET or len(ids) + high - low + 1 > MAX_TOKEN_SET:
            raise error(f"special-token range is too large in {text}: at most {MAX_TOKEN_SET} ids")
        ids.update(range(low, high + 1))
    for token in sorted(ids) if token_id is not None else ():
        try:
            token_id(token)
        except (ValueError, GrammarError) as exc:
            raise error(f"token terminal {text}: {exc}") from None
    if negated:
        return _token_class(frozenset(ids), token_classes)
    return alt(*(token_terminal(token) for token in sorted(ids)))


def _token_class(excluded: frozenset[int], token_classes: dict[int, frozenset[int]]) -> Expr:
    """The token-class terminal of any token but `excluded` (one per distinct set)."""
    for terminal, known in token_classes.items():
        if known == excluded:
            return token_class_terminal(terminal - TOKEN_CLASS_BASE)
    index = len(token_classes)
    token_classes[TOKEN_CLASS_BASE + index] = excluded
    return token_class_terminal(index)


_TOKEN_TERMINAL_NAME = "PUSHMASK_TOKEN_{}"


def _extract_token_terminals(text: str) -> tuple[str, dict[str, str], dict[str, int]]:
    """Replace each token terminal (`<|python_tag|>`, `<[128010]>`; not Lark syntax) outside
    strings, regexes and comments by a terminal name lark reads, defined at the end of the text.
    Returns (text for lark, {terminal name: token text}, {terminal name: its first offset})."""
    out: list[str] = []
    names: dict[str, str] = {}  # terminal name -> token text
    by_text: dict[str, str] = {}  # token text -> terminal name
    offsets: dict[str, int] = {}
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' or (c == "/" and not text.startswith("//", i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(text[i:j])
            i = j
        elif c == "<":
            j = text.find(">", i + 1)
            token = text[i : j + 1] if j > 0 else ""
            if not token or any(ch.isspace() for ch in token):
                out.append(c)  # not a token terminal: lark reports the syntax error
                i += 1
                continue
            name = by_text.setdefault(token, _TOKEN_TERMINAL_NAME.format(len(by_text)))
            names[name] = token
            offsets.setdefault(name, i)
            out.append(name)
            i = j + 1
        else:
            out.append(c)
            i += 1
    if not names:
        return text, {}, {}
    definitions = "".join(f'\n{name}: "{name}"' for name in names)
    return "".join(out) + "\n" + definitions + "\n", names, offsets


FAST_READER_MIN_CHARS = 20_000
"""Grammar texts at least this long are read by lark_reader when they are in its plain subset;
lark's loader reads the rest (milliseconds for ordinary grammars, seconds for 10,000 rules)."""


def parse_lark(
    text: str,
    start: str = "start",
    max_states: int = DEFAULT_LIMITS.max_rule_states,
    max_nesting: int = DEFAULT_LIMITS.max_nesting,
    token_id=None,
    named_grammars: dict[str, Grammar | str] | None = None,
) -> Grammar:
    """Convert a Lark grammar to IR; the root is `start` (wrapped with %ignore skips if any).
    `max_states` and `max_nesting` bound each terminal's regex (see regex.regex_to_ir).  Token
    terminals `<|python_tag|>` / `<[ID]>` are resolved with `token_id` (see ebnf.token_expr).
    XGrammar's dialect is read too (grammar/lark_dialect.py): `@name` refers to a grammar of
    `named_grammars` (a Grammar, or Lark text that may refer to the others)."""
    check_argument(text, str, "text", "parse_lark", "pass the grammar text as str (decode bytes first)")
    check_argument(start, str, "start", "parse_lark")
    return _parse(text, start, _Context(max_states, max_nesting, token_id, named_grammars or {}), ())


class _Context:
    """What every grammar of one compile shares: the limits, the tokenizer and the named grammars."""

    def __init__(self, max_states: int, max_nesting: int, token_id, named_grammars: dict[str, Grammar | str]):
        self.max_states = max_states
        self.max_nesting = max_nesting
        self.token_id = token_id
        self.named_grammars = named_grammars
        self.token_classes: dict[int, frozenset[int]] = {}  # Grammar.token_classes of <[^...]> and <[*]>


def _parse(text: str, start: str, context: _Context, chain: tuple[str, ...]) -> Grammar:
    """One Lark text (the outer one, a nested %lark or a named grammar's; `chain` names the named
    grammars being read, to refuse a cycle) -> IR, its errors in XGrammar's form."""
    translation = translate_dialect(text, frozenset(context.named_grammars))
    try:
        grammar = _parse_plain_lark(
            translation.text,
            start,
            context,
            translation.allow_initial_skip,
            translation.rule_terminals,
            translation.temperatures,
        )
    except GrammarError as exc:
        if exc.line is None or exc.column is None or str(exc).startswith(LARK_ERROR_PREFIX):
            raise
        line, column = translation.source_map.position(translation.text, exc.line, exc.column)
        character = text.split("\n")[line - 1][column - 1 : column] if line <= text.count("\n") + 1 else ""
        message = _rule_terminal_words(_in_xgrammar_words(exc.message, character), translation.rule_terminals)
        raise lark_error(text, message, line, column) from None
    if not translation.embedded:
        return grammar
    rules, positions = dict(grammar.rules), dict(grammar.positions)
    checks, token_limits, token_classes = dict(grammar.checks), dict(grammar.token_limits), dict(grammar.token_classes)
    temperatures = dict(grammar.temperatures)
    refusal = grammar.refusal
    for placeholder, embedded in translation.embedded.items():
        inner = _embedded_grammar(text, embedded, context, chain)
        refusal = refusal or inner.refusal  # a named Grammar that cannot be compiled (Grammar.refusal)
        prefix = placeholder + "__"
        for rule, body in inner.rules.items():
            rules[prefix + rule] = map_refs(body, lambda r: Ref(prefix + r.name))
            positions[prefix + rule] = (embedded.line, embedded.column)
        checks.update({prefix + rule: check for rule, check in inner.checks.items()})
        token_limits.update({prefix + rule: limit for rule, limit in inner.token_limits.items()})
        temperatures.update({prefix + rule: t for rule, t in inner.temperatures.items()})
        for terminal, excluded in inner.token_classes.items():
            if token_classes.setdefault(terminal, excluded) != excluded:
                raise lark_error(
                    text,
                    "a named grammar with excluded-token terminals cannot be used beside others; "
                    "write it as Lark text in named_grammars",
                    embedded.line,
                    embedded.column,
                )
        rules[placeholder] = Ref(prefix + inner.root)
    return Grammar(
        rules,
        grammar.root,
        positions,
        checks=checks,
        token_limits=token_limits,
        token_classes=token_classes,
        temperatures=temperatures,
        refusal=refusal,
    )


def _embedded_grammar(text: str, embedded: Embedded, context: _Context, chain: tuple[str, ...]) -> Grammar:
    """The IR of a %json schema, a nested %lark grammar, a named grammar or a %regex written in `text`."""
    where = (embedded.line, embedded.column)
    if embedded.kind == "json":
        # imported on first use, as frontends.py does: it builds its string automata when imported
        from .json_schema import json_schema_to_grammar

        try:
            return json_schema_to_grammar(embedded.value, JsonOptions.xgrammar())
        except PushmaskError as exc:
            raise lark_error(text, f"failed to compile inline JSON schema: {exc}", *where) from None
    if embedded.kind == "substring":
        return Grammar({"root": substring_runs(embedded.value)}, "root")
    if embedded.kind == "lark":
        try:
            return _parse(embedded.value, "start", context, chain)
        except PushmaskError as exc:
            raise lark_error(text, f"failed to compile nested Lark grammar: {_nested(exc)}", *where) from None
    name = embedded.value
    if name in chain:
        cycle = " -> ".join(f"@{n}" for n in (*chain[chain.index(name) :], name))
        raise lark_error(text, f"circular named grammar reference: {cycle}", *where)
    value = context.named_grammars[name]
    if isinstance(value, Grammar):
        return value
    try:
        return _parse(value, "start", context, (*chain, name))
    except GrammarError as exc:
        if exc.message.startswith("circular named grammar reference"):
            raise lark_error(text, exc.message, *where) from None
        raise lark_error(text, f"failed to compile named grammar @{name}: {_nested(exc)}", *where) from None


def _nested(error: PushmaskError) -> str:
    """An error of a grammar inside another, in one line (its position is in the inner text)."""
    if isinstance(error, GrammarError) and str(error).startswith(LARK_ERROR_PREFIX):
        return f"{error.message} (its line {error.line}, column {error.column})"
    return str(error)


# lark's words for an error, and XGrammar's for the same error (its tests match these).
_XGRAMMAR_WORDS = [
    (re.compile(r"(?:Rule|Terminal) '([^']+)' used but not defined"), "unknown name '{0}'"),
    (re.compile(r"Terminal used but not defined: (\w+)"), "unknown name '{0}'"),
    (re.compile(r"(?:Rule|Terminal) '([^']+)' defined more than once"), "duplicate rule or terminal '{0}'"),
    (re.compile(r"Recursion in terminal '([^']+)'"), "circular reference in terminal '{0}'"),
    (
        re.compile(r"Rules aren't allowed inside terminals \(NonTerminal\('([^']+)'\) in (\w+)\)"),
        "terminal '{1}' cannot reference rule '{0}'",
    ),
    (re.compile(r"Expecting rule or terminal definition \(missing colon\)"), "expected ':' after rule name"),
    (
        re.compile(r"Terminals \{'([^']+)'\} were marked to ignore but were not defined!"),
        "unknown name '{0}' in %ignore",
    ),
    (re.compile(r"Alias expects lowercase name"), "expected alias name after '->' (a lowercase name)"),
    (
        re.compile(r"bad escape \\([pP]) at position \d+"),
        "Unicode property escape \\{0} is not supported; use an explicit class like [a-zA-Z\\u00c0-\\u024f]",
    ),
    (
        re.compile(r"(/[^\n]*?\[\^?\][^\n]*?: unterminated character set at position \d+)"),
        "{0} (an Empty character class '[]' or '[^]' is not supported: a ']' right after it is a literal)",
    ),
]


def _rule_terminal_words(message: str, rule_terminals: dict[str, RuleAttributes]) -> str:
    """`message` with the terminals rules with attributes are compiled as named by their rules."""
    if not rule_terminals:
        return message
    pattern = re.escape(RULE_TERMINAL).replace(r"\{\}", r"\d+")

    def rule_name(match: re.Match[str]) -> str:
        return rule_terminals[match.group(1)].rule

    message = re.sub(
        rf"terminal '({pattern})(?:_BODY)?' cannot reference rule",
        lambda m: (
            f"rule '{rule_name(m)}' {rule_terminals[m.group(1)].why()}, so it is compiled as a terminal: "
            "a terminal cannot reference rule"
        ),
        message,
    )
    return re.sub(rf"({pattern})(?:_BODY)?", lambda m: f"rule {rule_name(m)}", message)


def _in_xgrammar_words(message: str, character: str) -> str:
    """`message` with lark's wording of an error replaced by XGrammar's, where they say the same
    (`character` is the one at the error's position), and without lark's copy of the position."""
    message = re.sub(r",? at line \d+,? column \d+\.?( in <string>:)?", "", message).rstrip()
    if message.endswith("Unexpected input") and character:
        return message.replace("Unexpected input", f"unexpected character {character!r}")
    for lark_words, xgrammar_words in _XGRAMMAR_WORDS:
        match = lark_words.search(message)
        if match:
            return message.replace(match.group(), xgrammar_words.format(*match.groups()))
    return message


def _parse_plain_lark(
    text: str,
    start: str,
    context: _Context,
    allow_initial_skip: bool,
    rule_terminals: dict[str, RuleAttributes] | None = None,
    temperatures: dict[str, float] | None = None,
) -> Grammar:
    """Lark text in lark's own syntax (embedded grammars are placeholder rules here) -> IR;
    `rule_terminals`: the terminals rules with attributes are compiled as (read by lark only);
    `temperatures`: the rules with a temperature (Grammar.temperatures)."""
    max_states, max_nesting = context.max_states, context.max_nesting
    index = _TextIndex(text)
    plain = None

    def read_plain():
        return read_plain_lark(
            text, start, lambda raw, pattern: _pattern_to_ir(raw, pattern, max_states, max_nesting), max_nesting
        )

    rule_terminals = rule_terminals or {}
    temperatures = temperatures or {}
    if len(text) >= FAST_READER_MIN_CHARS and not rule_terminals and not temperatures:
        plain = read_plain()
    positions: dict[str, tuple[int, int]] = {}
    if plain is None:
        try:
            rules, ignored, sources = _read_with_lark(
                text, start, index, max_states, max_nesting, positions, context, rule_terminals
            )
        except _TooDeepForLoader:
            if rule_terminals:
                raise GrammarError(
                    "groups nest too deeply for lark's grammar loader (Python's recursion limit, about 400 "
                    "levels) in a grammar with rule attributes; move inner groups into rules of their own",
                    1,
                    1,
                ) from None
            plain = read_plain()
            if plain is None:
                raise GrammarError(
                    "groups nest too deeply for lark's grammar loader (Python's recursion limit, about 400 "
                    "levels); move inner groups into rules of their own, or keep to the plain syntax "
                    "(no %import, templates or %declare), which pushmask reads at any depth",
                    1,
                    1,
                ) from None
    if plain is not None:
        rule_bodies, terminal_bodies, ignored, sources = plain
        rules = {**rule_bodies, **terminal_bodies}
    for name in rules:
        where = index.position(name)
        if where[0] is not None:
            positions.setdefault(name, where)

    # a token budget is the rule's: the region the matcher counts tokens in (its body: the terminal)
    token_limits = {a.rule: a.max_tokens for a in rule_terminals.values() if a.max_tokens is not None}
    if not ignored:
        return Grammar(
            rules,
            start,
            positions,
            token_classes=dict(context.token_classes),
            temperatures=temperatures,
            token_limits=token_limits,
        )
    skip = star(alt(*(Ref(name) for name in ignored)))
    root = f"{start}__with_ignored"
    while root in rules:
        root += "_"
    # %grammar_options {"allow_initial_skip": false} (XGrammar's): no ignored text before the first token
    rules = {root: seq(skip, Ref(start), skip) if allow_initial_skip else seq(Ref(start), skip), **rules}
    positions[root] = positions.get(start, (1, 1))
    grammar = Grammar(rules, root, positions, token_classes=dict(context.token_classes), temperatures=temperatures)
    return greedy_ignores(grammar, ignored, skip, max_states, sources)


def _read_with_lark(
    text: str,
    start: str,
    index: _TextIndex,
    max_states: int,
    max_nesting: int,
    positions: dict[str, tuple[int, int]],
    context: _Context,
    rule_terminals: dict[str, RuleAttributes],
) -> tuple[dict[str, Expr], list[str], dict[str, str]]:
    """(rules and used terminals as IR, %ignore'd terminal names, the regex lark's lexer matches
    each of them with) from lark's own reading; anonymous terminals get the position of their
    literal in `positions`; the terminals of `rule_terminals` under their rules' attributes."""
    token_id, token_classes = context.token_id, context.token_classes
    text, token_terminals, token_offsets = _extract_token_terminals(text)
    terminal_list, lark_rules, ignored = _load(text, start)
    terminals = {str(t.name): t for t in terminal_list}
    ignored = [str(name) for name in ignored]
    skip = star(alt(*(Ref(name) for name in ignored))) if ignored else None

    # Names as plain str: lark hands out Token objects, whose Python-level __eq__ would slow every
    # dictionary lookup of every later pass.
    alternatives: dict[str, list[Expr]] = {}
    used_terminals: set[str] = set(ignored)
    for rule in lark_rules:
        symbols: list[Expr] = []
        for symbol in rule.expansion:
            name = str(symbol.name)
            symbols.append(Ref(name))
            if symbol.is_term:
                used_terminals.add(name)
        if skip is not None and len(symbols) > 1:
            interleaved: list[Expr] = [symbols[0]]
            for symbol in symbols[1:]:
                interleaved += [skip, symbol]
            symbols = interleaved
        alternatives.setdefault(str(rule.origin.name), []).append(seq(*symbols))

    rules: dict[str, Expr] = {name: alt(*options) for name, options in alternatives.items()}
    for name in sorted(used_terminals):
        line, column = index.position(name)
        if name not in terminals:
            raise GrammarError(
                f"directive %declare is not supported for a terminal in use: {name} has no pattern (it needs a "
                "custom lexer); define it with `NAME: ...`",
                line,
                column,
            )
        raw = getattr(terminals[name].pattern, "raw", None)
        if line is None and raw:
            where = index.literal_position(raw)
            line, column = where
            if where[0] is not None:
                positions[name] = where
        if name in token_terminals:
            line, column = index.line_column(token_offsets[name])
            positions[name] = (line, column)
            rules[name] = _token_terminal_expr(
                token_terminals[name], token_id, token_classes, lambda message: GrammarError(message, line, column)
            )
            continue
        try:
            attributes = rule_terminals.get(name)
            rules[name] = _pattern_to_ir(name, terminals[name].pattern, max_states, max_nesting, attributes is not None)
            if attributes is not None:
                rules[name] = _rule_terminal_ir(attributes, rules[name], max_states)
        except GrammarError as exc:
            raise GrammarError(exc.message, line, column) from None
    return rules, ignored, {name: terminals[name].pattern.to_regexp() for name in ignored}
