"""A fast reader for the plain subset of Lark's grammar syntax, for grammars of thousands of rules.

lark's own loader (`lark.load_grammar`) is the reference and reads everything: templates,
`%import`, `%declare`, `%override`, `%extend`, and every error with its position.  It is also
slow on big inputs: 2.6 s of lexing and LALR parsing alone for 10,000 one-line rules, and as much
again to rewrite them to BNF.  This reader tokenizes with one regular expression and parses the
plain subset straight to IR (groups with an explicit stack, so any nesting depth reads):

    rules and terminals (with `?`/`!` modifiers and `.priority`), alternatives over `|` lines,
    `->` aliases, groups, `[optional]`, `? * +`, `~ n` and `~ n..m`, "strings"i, /regex/flags,
    "a".."z" ranges, `//` and `#` comments, and `%ignore` of terminals or literals.

The result is the same language as the lark path (tests/test_lark_reader.py compares them).
Anything else, and every input the reader is unsure of (an undefined name, a recursive
terminal, an empty terminal, a regex with a lazy quantifier inside a composite terminal, a bad
regex), returns None so the caller goes through lark, which reports errors as users expect.
String and regex literals are decoded by lark's own function, so escapes mean what lark says.
"""

from __future__ import annotations

import re

from lark import Token
from lark.load_grammar import _literal_to_pattern

from ..core.errors import GrammarError, LimitExceededError
from ..core.limits import DEFAULT_LIMITS
from .ir import EPSILON, Expr, Grammar, Ref, alt, char_class, opt, ref_names, rep, seq, star
from .passes import is_nullable, nullable_rules

__all__ = ["read_plain_lark"]

_TOKENS = re.compile(
    r"""(?P<NL>(?:[ \t]*(?:(?://|\#)[^\n]*)?\r?\n)+[ \t]*\|?)
    |(?P<WS>[ \t]+|\\[ ]*\n|(?://|\#)[^\n]*)
    |(?P<STRING>"(?:\\"|\\\\|[^"\n])*?"i?)
    |(?P<REGEXP>/(?!/)(?:\\/|\\\\|[^/])*?/[imslux]*)
    |(?P<PUNCT>->|\.\.|[.:|()\[\]{},~])
    |(?P<STATEMENT>%[a-z]+)
    |(?P<MODIFIERS>(?:!|![?]|[?]!?)(?=[_a-z]))
    |(?P<RULE>_?[a-z][_a-z0-9]*)
    |(?P<TERMINAL>_?[A-Z][_A-Z0-9]*)
    |(?P<NUMBER>[+-]?\d+)
    |(?P<OP>[+*]|[?](?![a-z_]))""",
    re.X,
)
LAZY_QUANTIFIER = re.compile(r"(?:[*+?]|\})\?")
"""A lazy quantifier in a regex (lark_frontend gives such terminals first-end semantics)."""
_ALIAS_ENDS = {("PUNCT", "|"), ("PUNCT", ")"), ("PUNCT", "]"), ("PUNCT", "->")}


class _NotPlain(Exception):
    """The grammar is outside the subset (or possibly wrong): let lark read it."""


def _tokenize(text: str) -> tuple[list[tuple[str, str]], list[int]]:
    """(kind, text) pairs, and the offset of each; a run of newlines, blank and comment lines is
    one NL, or one OR when the next line starts with `|` (which continues the definition, as in lark)."""
    out: list[tuple[str, str]] = []
    offsets: list[int] = []
    pos = 0
    match = _TOKENS.match
    while pos < len(text):
        m = match(text, pos)
        if m is None or m.end() == pos:
            raise _NotPlain
        kind = m.lastgroup
        assert kind is not None  # every alternative of _TOKENS is a named group
        if kind == "NL":
            out.append(("PUNCT", "|") if m.group().endswith("|") else ("NL", "\n"))
            offsets.append(pos)
        elif kind != "WS":
            out.append((kind, m.group()))
            offsets.append(pos)
        pos = m.end()
    out.append(("NL", "\n"))
    offsets.append(pos)
    return out, offsets


class _Reader:
    """A reader of the token list; rule bodies get `skip` (the %ignore'd terminals)
    between adjacent symbols, terminal bodies never."""

    def __init__(self, text: str, pattern_to_ir, max_nesting: int):
        self.text = text
        self.tokens, self.offsets = _tokenize(text)
        self.max_nesting = max_nesting
        self.at = 0
        self.pattern_to_ir = pattern_to_ir
        self.rules: dict[str, int] = {}  # name -> the token index its body starts at, read later
        self.terminals: dict[str, int] = {}
        self.ignored: list[int] = []
        self.literals: dict[tuple[str, str, bool], Expr] = {}  # big grammars repeat their literals

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at]

    def take(self, kind: str, value: str | None = None) -> str:
        got_kind, got = self.tokens[self.at]
        if got_kind != kind or (value is not None and got != value):
            raise _NotPlain
        self.at += 1
        return got

    # -- definitions: first pass records where each body starts, so bodies can be read once all
    # names are known (a rule may use a terminal defined later)

    def scan_definitions(self) -> None:
        while self.at < len(self.tokens):
            kind, value = self.peek()
            if kind == "NL":
                self.at += 1
                continue
            if kind == "STATEMENT":
                if value != "%ignore":
                    raise _NotPlain  # %import, %declare, %override, %extend: lark's job
                self.at += 1
                self.ignored.append(self.at)
            else:
                if kind == "MODIFIERS":
                    self.at += 1
                    kind, value = self.peek()
                    if kind != "RULE":
                        raise _NotPlain
                if kind not in ("RULE", "TERMINAL"):
                    raise _NotPlain
                self.at += 1
                if self.peek() == ("PUNCT", "."):
                    self.at += 1
                    self.take("NUMBER")
                self.take("PUNCT", ":")
                table = self.rules if kind == "RULE" else self.terminals
                if value in table:
                    raise _NotPlain  # defined twice: lark reports it
                table[value] = self.at
            self.skip_body()

    def skip_body(self) -> None:
        depth = 0
        while True:
            kind, value = self.tokens[self.at]
            self.at += 1
            if kind == "PUNCT" and value in "([":
                depth += 1
            elif kind == "PUNCT" and value in ")]":
                depth -= 1
            elif kind == "NL":
                if depth != 0:
                    raise _NotPlain
                return

    def body(self, start: int, terminal: bool, skip: Expr | None) -> Expr:
        self.at = start
        expr = self.expansions(terminal, skip)
        self.take("NL")
        return expr

    def single_pattern(self, start: int):
        """The lark pattern of a body that is one string or regex literal (the regex lark's
        lexer matches an ignored terminal with); a longer body is lark's to join."""
        (kind, raw), (after, _) = self.tokens[start], self.tokens[start + 1]
        if kind not in ("STRING", "REGEXP") or after != "NL":
            raise _NotPlain
        return _literal_to_pattern(Token(kind, raw))

    # -- bodies

    def expansions(self, terminal: bool, skip) -> Expr:
        """Alternatives up to the end of the body (or an unmatched closing bracket).  Groups
        `(...)` and `[...]` are read with an explicit stack of the open groups, not by recursion,
        so a group nested 10,000 deep costs a list entry per level, not a Python frame."""
        open_groups: list[tuple[str, list[Expr], list[Expr]]] = []  # (its closing bracket, outer options, outer items)
        options: list[Expr] = []  # finished alternatives of the innermost open group
        items: list[Expr] = []  # the current alternative's items so far
        while True:
            kind, value = self.peek()
            if (kind, value) in (("PUNCT", "("), ("PUNCT", "[")):
                if len(open_groups) >= self.max_nesting:
                    offset = self.offsets[self.at]
                    raise GrammarError(
                        f"groups nest deeper than {self.max_nesting} levels (the max_nesting limit); "
                        "move inner groups into rules of their own, or raise Limits.max_nesting",
                        self.text.count("\n", 0, offset) + 1,
                        offset - self.text.rfind("\n", 0, offset),
                    )
                self.at += 1
                open_groups.append((")" if value == "(" else "]", options, items))
                options, items = [], []
            elif kind != "NL" and (kind, value) not in _ALIAS_ENDS:
                items.append(self.repeated(self.atom(terminal), skip))
            else:
                options.append(self.alias(items, terminal, skip))
                items = []
                if self.peek() == ("PUNCT", "|"):
                    self.at += 1
                    continue
                inner = alt(*options)
                if not open_groups:
                    return inner
                closing, options, items = open_groups.pop()
                self.take("PUNCT", closing)
                items.append(self.repeated(inner if closing == ")" else opt(inner), skip))

    def alias(self, items: list[Expr], terminal: bool, skip) -> Expr:
        """One alternative of `items`, past its `-> alias` if any, with `skip` between symbols."""
        if self.peek() == ("PUNCT", "->"):
            if terminal:
                raise _NotPlain
            self.at += 1
            self.take("RULE")
        if skip is None or len(items) < 2:
            return seq(*items)
        spaced = [items[0]]
        for item in items[1:]:
            spaced += [skip, item]
        return seq(*spaced)

    def repeated(self, item: Expr, skip) -> Expr:
        """`item` with the operator after it (`? * +`, `~ n`, `~ n..m`) applied, if there is one."""
        kind, value = self.peek()
        if kind == "OP":
            self.at += 1
            lo, hi = {"?": (0, 1), "*": (0, None), "+": (1, None)}[value]
        elif (kind, value) == ("PUNCT", "~"):
            self.at += 1
            lo = hi = int(self.take("NUMBER"))
            if self.peek() == ("PUNCT", ".."):
                self.at += 1
                hi = int(self.take("NUMBER"))
            if lo < 0 or hi < lo:
                raise _NotPlain
        else:
            return item
        return _repeat(item, lo, hi, skip)

    def atom(self, terminal: bool) -> Expr:
        """One literal, range or name (groups are `expansions`' job)."""
        kind, value = self.peek()
        self.at += 1
        if kind == "STRING" and self.peek() == ("PUNCT", ".."):
            self.at += 1
            low, high = (self.literal_text(value), self.literal_text(self.take("STRING")))
            if len(low) != 1 or len(high) != 1 or low > high:
                raise _NotPlain
            return char_class([(ord(low), ord(high))])
        if kind in ("STRING", "REGEXP"):
            return self.literal(kind, value, terminal)
        if kind in ("RULE", "TERMINAL"):
            if self.peek() == ("PUNCT", "{") or (terminal and kind == "RULE"):
                raise _NotPlain  # a template, or a rule inside a terminal
            if value not in (self.rules if kind == "RULE" else self.terminals):
                raise _NotPlain  # undefined: lark reports it with its position
            return Ref(value)
        raise _NotPlain

    @staticmethod
    def literal_text(raw: str) -> str:
        if raw.endswith("i"):
            raise _NotPlain
        return _literal_to_pattern(Token("STRING", raw)).value

    def literal(self, kind: str, raw: str, terminal: bool) -> Expr:
        key = (kind, raw, terminal)
        if key not in self.literals:
            self.literals[key] = self.decode_literal(kind, raw, terminal)
        return self.literals[key]

    def decode_literal(self, kind: str, raw: str, terminal: bool) -> Expr:
        try:
            pattern = _literal_to_pattern(Token(kind, raw))
            if kind == "REGEXP":
                re.compile(pattern.to_regexp())
            if kind == "REGEXP" and terminal and LAZY_QUANTIFIER.search(pattern.value):
                raise _NotPlain  # lark joins a composite terminal into one regex before lazy matching
            expr = self.pattern_to_ir(raw, pattern)
        except (GrammarError, LimitExceededError, ValueError, re.error):
            raise _NotPlain from None  # bad escapes, regex or budget: lark's path reports it with a position
        if not terminal and is_nullable(expr, set()):
            raise _NotPlain  # an anonymous terminal matching "": lark refuses it
        return expr


def _repeat(item: Expr, lo: int, hi: int | None, skip: Expr | None) -> Expr:
    """item{lo,hi}, with `skip` between repetitions in rule bodies (as between any two symbols)."""
    if skip is None:
        return rep(item, lo, hi)
    if hi == 0:
        return EPSILON
    more = rep(seq(skip, item), max(lo - 1, 0), None if hi is None else hi - 1)
    return seq(item, more) if lo >= 1 else opt(seq(item, more))


def _check_terminals_acyclic(terminals: dict[str, Expr]) -> None:
    """Raise _NotPlain when terminals reference each other in a cycle (lark reports it)."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in terminals:
        if root in state:
            continue
        stack = [(root, iter(sorted(ref_names(terminals[root]))))]
        state[root] = 1
        while stack:
            name, children = stack[-1]
            for child in children:
                if state.get(child) == 1:
                    raise _NotPlain
                if child not in state:
                    state[child] = 1
                    stack.append((child, iter(sorted(ref_names(terminals[child])))))
                    break
            else:
                state[name] = 2
                stack.pop()


def read_plain_lark(text: str, start: str, pattern_to_ir, max_nesting: int = DEFAULT_LIMITS.max_nesting):
    """(rules, terminals, ignored, sources) as IR when `text` is in the plain subset, else None.

    `rules` maps rule names to bodies with the %ignore'd terminals interleaved, `terminals` maps
    terminal names to bodies (both keep definition order), `ignored` lists the names of the
    %ignore'd terminals (literals get a name of their own, `__IGNORE_<k>`, which no lark name can
    take), `sources` the regex lark's lexer matches each of them with (an ignored terminal that
    is not one literal is left to lark, which joins it into one regex).  `pattern_to_ir(raw,
    pattern)` turns one lark PatternStr/PatternRE into IR.  Groups nested deeper than
    `max_nesting` are a GrammarError with their line and column.
    """
    try:
        reader = _Reader(text, pattern_to_ir, max_nesting)
        reader.scan_definitions()
        if start not in reader.rules:
            return None
        terminals = {name: reader.body(at, True, None) for name, at in reader.terminals.items()}
        _check_terminals_acyclic(terminals)
        ignored = []
        for k, at in enumerate(reader.ignored):
            reader.at = at
            kind, value = reader.peek()
            if kind == "TERMINAL" and reader.tokens[at + 1][0] == "NL" and value in terminals:
                ignored.append(value)
                continue
            name = f"__IGNORE_{k}"
            terminals[name] = reader.body(at, True, None)
            ignored.append(name)
        if terminals and nullable_rules(Grammar(terminals, next(iter(terminals)))):
            return None  # a terminal that matches "": lark refuses it
        ignored = list(dict.fromkeys(ignored))
        sources = {
            name: reader.single_pattern(
                reader.terminals[name] if name in reader.terminals else reader.ignored[int(name[len("__IGNORE_") :])]
            ).to_regexp()
            for name in ignored
        }
        skip = star(alt(*(Ref(name) for name in ignored))) if ignored else None
        rules = {name: reader.body(at, False, skip) for name, at in reader.rules.items()}
    except _NotPlain:
        return None
    return rules, terminals, ignored, sources
