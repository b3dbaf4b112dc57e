"""EBNF in the XGrammar / llama.cpp GBNF dialect -> grammar IR.

    root  ::= item ("," ws item)*      # comments run to the end of the line
    item  ::= [a-z_] [a-z0-9_-]* | "\\u00e9" | . | x{2,3}
    ws    ::= [ \\t\\n]*

Rules are `name ::= expression` (names of letters, digits, '-' and '_'), or `name[temperature=0.6]
::= expression` (XGrammar's rule attributes; the temperature is Grammar.temperatures).  Expressions have
"strings" and 'strings', character classes `[a-z]` / `[^...]` over code points, `.` (any code
point), grouping, `|`, and the postfix operators `? * + {n} {n,} {n,m}`.  Escapes in strings
and classes: \\n \\t \\r \\f \\v \\0 \\\\ \\" \\' \\[ \\] \\- \\^ \\/ \\xHH \\uHHHH \\UHHHHHHHH (code points,
matched as UTF-8).  Newlines are ordinary whitespace: a rule runs until the next `name ::=`,
which accepts every llama.cpp grammar (llama.cpp only continues rules inside parentheses or
after `|`) as well as XGrammar's freer layout.  An XGrammar lookahead assertion `(= ...)` at
the end of a rule is parsed and dropped: it is an optimisation hint there, not part of the
language.  XGrammar's macros (MACROS: `Regex(...)`, `Substring(...)`, `TagDispatch(...)`,
`TokenTagDispatch(...)`, `Token(...)`, `ExcludeToken(...)`) are a name followed straight by
`(`; their arguments are strings, integers, true/false, rule names and tuples of those, and
`name=value` options after them (docs/xgrammar.md, "EBNF macros").

Every syntax error is a GrammarError with the 1-based line and column, and a hint.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from ..core.errors import GrammarError, InternalError, LimitExceededError, check_argument
from ..core.limits import DEFAULT_LIMITS
from .fsm.codepoint_dfa import intersect_ranges
from .ir import (
    EPSILON,
    MAX_CODE_POINT,
    NOTHING,
    SURROGATES,
    TOKEN_CLASS_BASE,
    TOKEN_ID_LIMIT,
    Bytes,
    CharClass,
    CharFsm,
    Expr,
    Grammar,
    Ref,
    alt,
    char_class,
    lit,
    map_leaves,
    rep,
    seq,
    token_class_terminal,
    token_terminal,
)
from .lark_dialect import attribute_list_close, read_attributes, refuse_matcher_attributes
from .passes import split_large_repeats
from .regex import regex_to_ir
from .tag_dispatch import dispatch_loop, text_without, texts_before_triggers

__all__ = ["parse_ebnf"]

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
SIMPLE_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "f": "\f",
    "v": "\v",
    "0": "\0",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "[": "[",
    "]": "]",
    "-": "-",
    "^": "^",
    "/": "/",
}
HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
MACROS = frozenset(("Regex", "Substring", "TagDispatch", "TokenTagDispatch", "Token", "ExcludeToken"))
"""XGrammar's macros: `Name(` starts one (a rule of that name is referenced as `Name` without '(')."""
JSON_STRING_CHARS = ((0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODE_POINT))
"""The code points a JSON string holds unescaped: all but '"', '\\' and U+0000-U+001F."""


def substring_runs(chunks: list[str]) -> Expr:
    """Any run of consecutive chunks, whole and in order (the empty run included): c_i ... c_j for
    i <= j (XGrammar's `Substring` macro and Lark ``%regex``); the runs from each chunk share
    the runs from the next."""
    runs: list[Expr] = []  # runs[k]: the runs starting at chunk len-1-k
    for chunk in reversed(chunks):
        runs.append(seq(lit(chunk), rep(runs[-1], 0, 1)) if runs else lit(chunk))
    return alt(EPSILON, *runs)


@dataclass(frozen=True)
class MacroArg:
    """One argument of a macro: kind is "string", "int", "bool", "name" or "tuple" (a list of
    MacroArg); pos is its offset in the grammar text, for errors."""

    kind: str
    value: Any
    pos: int


class _Parser:
    """Recursive descent over the text; `pos` is an offset, converted to line/column on error."""

    def __init__(
        self,
        text: str,
        max_nesting: int = DEFAULT_LIMITS.max_nesting,
        token_id=None,
        max_repeat: int = DEFAULT_LIMITS.max_repeat,
        defer_compile_errors: bool = False,
    ):
        self.text = text
        self.max_repeat = max_repeat
        self.defer_compile_errors = defer_compile_errors
        self.refusal: GrammarError | LimitExceededError | None = None  # the first deferred Regex error
        self.rule_name = ""  # the rule being read, for the deferred errors and block rules
        self.block_rules: dict[str, Expr] = {}  # Regex's counts split into rules (split_large_repeats)
        self.token_id = token_id
        self.pos = 0
        self.max_nesting = max_nesting
        self.in_lookahead = False  # inside a dropped `(= ...)`, where only Regex(...) may appear
        self.token_classes: dict[int, frozenset[int]] = {}  # ExcludeToken: class terminal -> excluded ids
        self.temperatures: dict[str, float] = {}  # rules with `name[temperature=t] ::=`
        self.line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    # --- positions and errors -----------------------------------------------------------------

    def where(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        line = bisect.bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def error(self, message: str, pos: int | None = None) -> GrammarError:
        return GrammarError(message, *self.where(pos))

    # --- lexical helpers ---------------------------------------------------------------------

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def skip_space(self) -> None:
        """Skip whitespace (newlines included) and # comments."""
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c in " \t\r\n":
                self.pos += 1
            elif c == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            else:
                break

    def name_at(self, pos: int) -> int:
        """End offset of the rule name starting at `pos` (== pos when there is none)."""
        end = pos
        while end < len(self.text) and self.text[end] in NAME_CHARS:
            end += 1
        return end

    def at_rule_start(self) -> bool:
        """Does a new `name ::=` (or `name[attributes] ::=`) begin here?  That is what ends the
        previous rule."""
        end = self.name_at(self.pos)
        if end == self.pos:
            return False
        i = attribute_list_close(self.text, end + 1) if self.text.startswith("[", end) else end
        if i < 0:
            return False
        while i < len(self.text) and self.text[i] in " \t":
            i += 1
        return self.text.startswith("::=", i)

    # --- grammar ------------------------------------------------------------------------------

    def parse(self) -> tuple[dict[str, Expr], dict[str, tuple[int, int]]]:
        rules: dict[str, Expr] = {}
        positions: dict[str, tuple[int, int]] = {}
        self.references: list[tuple[str, int]] = []  # (name, offset) of every rule reference
        self.skip_space()
        while self.pos < len(self.text):
            start = self.pos
            end = self.name_at(start)
            if end == start:
                raise self.error(f"expected a rule name, found {self.peek()!r}; rules look like `name ::= ...`")
            name = self.text[start:end]
            self.pos = end
            if self.peek() == "[" and attribute_list_close(self.text, end + 1) >= 0:
                self.rule_attributes(name)
            while self.peek() in (" ", "\t"):
                self.pos += 1
            if not self.text.startswith("::=", self.pos):
                raise self.error(f"expected '::=' after rule name {name!r}")
            if name in rules:
                line, col = positions[name]
                raise self.error(
                    f"rule {name!r} is defined twice (first at line {line}, column {col}); "
                    "merge the definitions with '|'",
                    start,
                )
            self.pos += 3
            positions[name] = self.where(start)
            self.rule_name = name
            rules[name] = self.alternatives(nested=False)
            self.lookahead_assertion()
            self.skip_space()
            if self.pos < len(self.text) and not self.at_rule_start():
                if self.peek() == ")":
                    raise self.error("unbalanced ')': no matching '('")
                raise self.error(f"unexpected {self.peek()!r}; expected an expression or a new rule `name ::= ...`")
        # block rules are named `rule.blockN`, which no rule of the text can be named
        for name, body in self.block_rules.items():
            rules[name] = body
            positions[name] = positions[name.rsplit(".block", 1)[0]]
        return rules, positions

    def rule_attributes(self, name: str) -> None:
        """XGrammar's rule attributes `name[temperature=0.6] ::=`, read and checked by the Lark
        dialect's reader (grammar/lark_dialect.py); a temperature is kept (Grammar.temperatures),
        what the matcher or this reader cannot honour is refused by name at the attribute."""
        values, self.pos = read_attributes(self.text, self.pos, self.error)
        refuse_matcher_attributes(values, self.error)
        for attribute, (_, at) in values.items():
            if attribute != "temperature":
                raise self.error(
                    f"attribute {attribute!r} is not supported on EBNF rules (pushmask honours temperature there); "
                    "lazy, suffix, stop and max_chars are honoured on Lark rules (`name[lazy]: ...`)",
                    at,
                )
        if "temperature" in values:
            self.temperatures[name] = float(values["temperature"][0])

    def lookahead_assertion(self) -> None:
        """Parse and drop an XGrammar `(= ...)` suffix (a hint, not part of the language)."""
        self.skip_space()
        if self.peek() == "(" and self.text.startswith("=", self.pos + 1 + self._spaces(self.pos + 1)):
            open_pos = self.pos
            self.pos += 1
            self.skip_space()
            self.pos += 1  # '='
            self.in_lookahead = True
            self.alternatives(nested=True)
            self.in_lookahead = False
            self.skip_space()
            if self.peek() != ")":
                raise self.error("unbalanced '(': missing ')'", open_pos)
            self.pos += 1

    def _spaces(self, pos: int) -> int:
        n = 0
        while pos + n < len(self.text) and self.text[pos + n] in " \t\r\n":
            n += 1
        return n

    def alternatives(self, nested: bool) -> Expr:
        """Parse `a b | c ...` up to the rule's end (or, when `nested`, an unmatched ')').

        Groups are parsed with an explicit stack of the open groups, not by recursion, so a group
        nested 10,000 deep costs a list entry per level, not a Python frame."""
        open_groups: list[tuple[int, list[Expr], list[Expr]]] = []  # ('(' offset, outer options, outer items)
        options: list[Expr] = []  # finished alternatives of the innermost open group
        items: list[Expr] = []  # the current alternative's items so far
        while True:
            self.skip_space()
            c = self.peek()
            if c == "|":
                options.append(seq(*items))
                items = []
                self.pos += 1
            elif c == ")" and open_groups:
                inner = alt(*options, seq(*items))
                _, options, items = open_groups.pop()
                self.pos += 1
                items.append(self.postfix(inner))
            elif c == "" or c == ")" or self.at_rule_start():  # a new rule inside a group misses its ')'
                if open_groups:
                    raise self.error("unbalanced '(': missing ')'", open_groups[-1][0])
                return alt(*options, seq(*items))
            elif c == "(":
                if (
                    not nested
                    and not open_groups
                    and self.text.startswith("=", self.pos + 1 + self._spaces(self.pos + 1))
                ):
                    return alt(*options, seq(*items))  # a trailing lookahead assertion
                if len(open_groups) >= self.max_nesting:
                    raise self.error(
                        f"groups nest deeper than {self.max_nesting} levels (the max_nesting limit); "
                        "move inner groups into rules of their own, or raise Limits.max_nesting",
                    )
                open_groups.append((self.pos, options, items))
                options, items = [], []
                self.pos += 1
            else:
                items.append(self.postfix(self.primary()))

    def primary(self) -> Expr:
        """One string, class, `.`, token terminal or rule reference (groups are `alternatives`' job)."""
        c = self.peek()
        start = self.pos
        if c in ('"', "'"):
            return self.string()
        if c == "[":
            return self.char_class()
        if c == ".":
            self.pos += 1
            return char_class([(0, MAX_CODE_POINT)])
        if c == "<":
            return self.token()
        end = self.name_at(start)
        if self.text[start:end] in MACROS and self.text.startswith("(", end):
            return self.macro(self.text[start:end])
        if end > start:
            name = self.text[start:end]
            self.pos = end
            self.references.append((name, start))
            return Ref(name)
        if c in "*+?{":
            raise self.error(f"{c!r} has nothing to repeat; put it after an expression")
        raise self.error(f"unexpected character {c!r}; expected a string, class, rule name or '('")

    def postfix(self, expr: Expr) -> Expr:
        """`expr` with the repetitions that follow it; as in XGrammar, space may come before one
        (`"a" {2, 3}`, `x *`), since none of `*+?{` can start an element."""
        while True:
            before_space = self.pos
            self.skip_space()
            c = self.peek()
            if c == "*":
                expr = rep(expr, 0, None)
            elif c == "+":
                expr = rep(expr, 1, None)
            elif c == "?":
                expr = rep(expr, 0, 1)
            elif c == "{":
                expr = self.braces(expr)
                continue
            else:
                self.pos = before_space
                return expr
            self.pos += 1

    # --- macros: Name(arguments) -------------------------------------------------------------

    def macro(self, name: str) -> Expr:
        """One of XGrammar's macros (MACROS), from its name to its closing ')'."""
        start = self.pos
        self.pos += len(name)
        positional, named = self.macro_arguments(start)
        if self.in_lookahead and name != "Regex":
            raise self.error(f"{name} should not be in lookahead assertion", start)
        build = {
            "Regex": self.regex_macro,
            "Substring": self.substring_macro,
            "TagDispatch": self.tag_dispatch_macro,
            "TokenTagDispatch": self.token_tag_dispatch_macro,
            "Token": self.token_macro,
            "ExcludeToken": self.token_macro,
        }[name]
        return build(name, positional, named, start)

    def macro_arguments(self, start: int) -> tuple[list[MacroArg], dict[str, MacroArg]]:
        """The arguments of the macro whose '(' is at the cursor: positional values, then
        `name=value` pairs (a value: a string, an integer, true/false, a rule name or a tuple)."""
        positional: list[MacroArg] = []
        named: dict[str, MacroArg] = {}
        for key, value in self.tuple_items(start, nested=False):
            if key is None:
                if named:
                    raise self.error("a positional argument follows a named one", value.pos)
                positional.append(value)
            elif key in named:
                raise self.error(f"argument {key!r} is given twice", value.pos)
            else:
                named[key] = value
        return positional, named

    def tuple_items(self, start: int, nested: bool) -> list[tuple[str | None, MacroArg]]:
        """The items of the parenthesised list at the cursor, as (name or None, value); a
        trailing comma is allowed (`(4,)`).  Tuples nest one level (TagDispatch's pairs)."""
        self.pos += 1  # '('
        items: list[tuple[str | None, MacroArg]] = []
        while True:
            self.skip_space()
            if self.peek() == ")":
                self.pos += 1
                return items
            key = None
            end = self.name_at(self.pos)
            after = end + self._spaces(end)
            if not nested and end > self.pos and self.text.startswith("=", after):
                key = self.text[self.pos : end]
                self.pos = after + 1
                self.skip_space()
            items.append((key, self.macro_value(nested)))
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != ")":
                if self.peek() == "":
                    raise self.error("unbalanced '(': missing ')'", start)
                raise self.error(f"Expect , or ) in tuple; found {self.peek()!r}")

    def macro_value(self, nested: bool) -> MacroArg:
        pos = self.pos
        c = self.peek()
        if c in ('"', "'"):
            return MacroArg("string", self.string_text(), pos)
        if c.isdigit() or (c == "-" and self.peek(1).isdigit()):
            self.pos += 1
            while self.peek().isdigit():
                self.pos += 1
            return MacroArg("int", int(self.text[pos : self.pos]), pos)
        if c == "(":
            if nested:
                raise self.error("macro arguments nest tuples one level deep at most")
            return MacroArg("tuple", [value for _, value in self.tuple_items(pos, nested=True)], pos)
        end = self.name_at(pos)
        if end == pos:
            raise self.error(f"unexpected character {c!r}; expected a macro argument (a string, number, name or tuple)")
        self.pos = end
        word = self.text[pos:end]
        if word in ("true", "false"):
            return MacroArg("bool", word == "true", pos)
        return MacroArg("name", word, pos)

    def regex_macro(self, name: str, positional: list[MacroArg], named: dict[str, MacroArg], start: int) -> Expr:
        """XGrammar's `Regex("pattern", json_string=false, flags=...)`: the strings the regex
        fully matches.  Without `flags` the pattern is read as written, `.` matching any code
        point; with it, `.` leaves out the newline unless the flags hold `s`, and `i` ignores
        case.  `json_string=true` leaves out what a JSON string must escape (`"`, `\\`, U+0000-U+001F)."""
        if len(positional) != 1:
            raise self.error("Regex expects exactly one string argument (the pattern)", start)
        if positional[0].kind != "string":
            raise self.error('Regex pattern must be a string literal, like Regex("[0-9]+")', positional[0].pos)
        for key, value in named.items():
            if key not in ("json_string", "flags"):
                raise self.error(
                    f"Regex does not support the named argument {key}; it takes json_string= and flags=", value.pos
                )
        json_string = named.get("json_string", MacroArg("bool", False, start))
        if json_string.kind != "bool":
            raise self.error("json_string must be a boolean (true or false)", json_string.pos)
        pattern = positional[0].value
        flags = self.regex_flags(named["flags"]) if "flags" in named else "(?s)"
        anchor = "^" if pattern.startswith("^") else ""  # the flags go after a leading '^'
        try:
            expr = regex_to_ir(anchor + flags + pattern[len(anchor) :], max_nesting=self.max_nesting, split_counts=True)
        except GrammarError as error:
            column = error.column
            if column is not None and column > len(anchor) + len(flags):
                column -= len(flags)
            refusal = self.error(f"in Regex({pattern!r}): {error.message} (pattern column {column})", start)
            return self.refuse_at_compile(refusal, start)
        except LimitExceededError as error:
            line, column = self.where(start)
            return self.refuse_at_compile(
                LimitExceededError(f"in Regex({pattern!r}) (line {line}, column {column}): {error}"), start
            )
        # a count too big for one automaton: block rules (XGrammar's grammar-level repeats)
        expr = split_large_repeats(expr, self.rule_name, self.block_rules)
        return restrict_code_points(expr, JSON_STRING_CHARS) if json_string.value else expr

    def refuse_at_compile(self, refusal: GrammarError | LimitExceededError, start: int, what: str = "Regex") -> Expr:
        """A `Regex` pattern or `Token` id pushmask cannot compile: raised now, or
        (`defer_compile_errors`, as `Grammar.from_ebnf` reads, for XGrammar's order) kept as the
        grammar's `refusal`, which every compile of the grammar raises (grammar/ir.py:
        Grammar.check_compilable) before any automaton is built.  Its place holds a reference to
        a rule no text can define, so a grammar that lost its refusal still cannot compile."""
        if not self.defer_compile_errors:
            raise refusal
        if self.refusal is None:
            prefix = f"Failed to build the automaton for rule {self.rule_name}: "
            if isinstance(refusal, GrammarError):
                self.refusal = GrammarError(prefix + refusal.message, refusal.line, refusal.column)
            else:
                self.refusal = LimitExceededError(prefix + str(refusal))
        line, column = self.where(start)
        return Ref(f"<{what} refused at line {line}, column {column}>")

    def regex_flags(self, flags: MacroArg) -> str:
        """The inline-flag prefix for Regex's `flags=`: `i` (ignore case), `s` (`.` matches a
        newline) and `u` (always on: patterns are read as code points)."""
        if flags.kind != "string":
            raise self.error('Regex flags must be a string, like flags="is"', flags.pos)
        for letter in flags.value:
            if letter not in "isu":
                raise self.error(
                    f"regular-expression flag {letter!r} is not supported; Regex takes i, s and u", flags.pos
                )
        letters = "".join(letter for letter in "is" if letter in flags.value)
        return f"(?{letters})" if letters else ""

    def substring_macro(self, name: str, positional: list[MacroArg], named: dict[str, MacroArg], start: int) -> Expr:
        """XGrammar's `Substring("c1", "c2", ...)`: any run of consecutive chunks, whole and in
        order (the empty run included): c_i c_(i+1) ... c_j for i <= j."""
        if named:
            raise self.error("Substring() does not accept named arguments", start)
        for argument in positional:
            if argument.kind != "string":
                raise self.error("Substring() arguments must be strings", argument.pos)
        return substring_runs([argument.value for argument in positional])

    def tag_dispatch_macro(self, name: str, positional: list[MacroArg], named: dict[str, MacroArg], start: int) -> Expr:
        """XGrammar's `TagDispatch(("tag", rule), ..., excludes=(...), loop_after_dispatch=true)`:
        free text holding no tag and no excluded string, where each tag goes on with its rule;
        after the rule, free text again (or, without the loop, the end)."""
        self.dispatch_options(name, named, start, ("excludes", "loop_after_dispatch"))
        tags = self.dispatch_pairs(positional, "string", start)
        excludes = self.dispatch_excludes(named, "string")
        for exclude in excludes:
            if not exclude:
                raise self.error("Exclude string must be non-empty", named["excludes"].pos)
            for tag, _ in tags:
                if tag.startswith(exclude):
                    raise self.error(f"Exclude string must not be a prefix of trigger string: {exclude}", start)
        triggers = [tag for tag, _ in tags]
        befores = texts_before_triggers(triggers, excludes)
        led = [seq(befores[tag], lit(tag), rule) for tag, rule in tags if tag in befores]
        return dispatch_loop(text_without(triggers + excludes), alt(*led), self.dispatch_loops(named))

    def token_tag_dispatch_macro(
        self, name: str, positional: list[MacroArg], named: dict[str, MacroArg], start: int
    ) -> Expr:
        """XGrammar's `TokenTagDispatch((token_id, rule), ..., excludes=(ids), ...)`: TagDispatch
        over tokens: any tokens but the triggers and the excluded, where a trigger token goes on
        with its rule."""
        self.dispatch_options(name, named, start, ("excludes", "loop_after_dispatch"))
        triggers = self.dispatch_pairs(positional, "int", start)
        excludes = self.dispatch_excludes(named, "int")
        overlap = {token for token, _ in triggers} & set(excludes)
        if overlap:
            raise self.error(f"token {min(overlap)} is both a trigger and excluded in {name}", start)
        branches = [seq(self.token_ref(token, start), rule) for token, rule in triggers]
        text = rep(self.token_class({token for token, _ in triggers} | set(excludes)), 0, None)
        return dispatch_loop(text, seq(text, alt(*branches)), self.dispatch_loops(named))

    def dispatch_options(self, name: str, named: dict[str, MacroArg], start: int, known: tuple[str, ...]) -> None:
        for key in named:
            if key not in known:
                raise self.error(f"Unknown named argument for {name}: {key}", start)

    def dispatch_loops(self, named: dict[str, MacroArg]) -> bool:
        loop = named.get("loop_after_dispatch")
        if loop is None:
            return True
        if loop.kind != "bool":
            raise self.error("loop_after_dispatch must be true or false", loop.pos)
        return bool(loop.value)

    def dispatch_pairs(self, positional: list[MacroArg], trigger_kind: str, start: int) -> list[tuple]:
        """The (trigger, rule reference) pairs of a dispatch macro."""
        pairs = []
        for argument in positional:
            if argument.kind != "tuple":
                raise self.error("Each tag dispatch element must be a tuple (trigger, rule)", argument.pos)
            if len(argument.value) != 2:
                raise self.error("Each tag dispatch element is a pair (trigger, rule)", argument.pos)
            trigger, rule = argument.value
            if trigger.kind != trigger_kind or (trigger_kind == "string" and not trigger.value):
                what = "a non-empty string literal" if trigger_kind == "string" else "a token id"
                raise self.error(f"Tag must be {what}", argument.pos)
            if rule.kind != "name":
                raise self.error("the second item of a tag dispatch element is a rule name", rule.pos)
            self.references.append((rule.value, rule.pos))
            pairs.append((trigger.value, Ref(rule.value)))
        return pairs

    def dispatch_excludes(self, named: dict[str, MacroArg], kind: str) -> list:
        excludes = named.get("excludes")
        if excludes is None:
            return []
        items = excludes.value if excludes.kind == "tuple" else [excludes]
        for item in items:
            if item.kind != kind:
                raise self.error(f"excludes holds {'strings' if kind == 'string' else 'token ids'}", item.pos)
        return [item.value for item in items]

    def token_macro(self, name: str, positional: list[MacroArg], named: dict[str, MacroArg], start: int) -> Expr:
        """XGrammar's `Token(id, ...)` (one of these tokens) and `ExcludeToken(id, ...)` (one
        token of any other id, never a stop token): matched by token id, not by text."""
        if named:
            raise self.error(f"{name}() does not accept named arguments", start)
        for argument in positional:
            if argument.kind != "int" or argument.value < 0:
                raise self.error(f"{name}() arguments must be token ids (integers >= 0)", argument.pos)
        ids = sorted({argument.value for argument in positional})
        if name == "ExcludeToken":
            return self.token_class(set(ids))
        if not ids:
            raise self.error("Token() needs at least one token id", start)
        if ids[-1] >= TOKEN_ID_LIMIT and self.token_id is None:
            # no vocabulary holds it: refused when compiled, as XGrammar refuses an id past the vocabulary
            bad = next(argument for argument in positional if argument.value == ids[-1])
            refusal = self.error(
                f"Token({ids[-1]}): token id past every vocabulary pushmask compiles for (ids below {TOKEN_ID_LIMIT})",
                bad.pos,
            )
            return self.refuse_at_compile(refusal, start, "Token")
        return alt(*(self.token_ref(token, start) for token in ids))

    def token_ref(self, token: int, pos: int) -> Expr:
        """The terminal of the token `token` (its id resolved and checked by `token_id`, when given)."""
        return token_expr(f"<[{token}]>", self.token_id, lambda message: self.error(message, pos))

    def token_class(self, excluded: set[int]) -> Expr:
        """The terminal standing for any one token but `excluded` (one per distinct set)."""
        key = frozenset(excluded)
        for terminal, ids in self.token_classes.items():
            if ids == key:
                return token_class_terminal(terminal - TOKEN_CLASS_BASE)
        index = len(self.token_classes)
        self.token_classes[TOKEN_CLASS_BASE + index] = key
        return token_class_terminal(index)

    def token(self) -> Expr:
        """A token terminal: `<[128010]>` by id, or a special token by its text, `<|python_tag|>`."""
        start = self.pos
        end = self.text.find(">", start + 1)
        if end < 0 or any(ch.isspace() for ch in self.text[start:end]):
            raise self.error(
                "a token terminal is `<[ID]>` or a special token's text like `<|python_tag|>`; no closing '>' here",
                start,
            )
        self.pos = end + 1
        return token_expr(self.text[start : end + 1], self.token_id, lambda message: self.error(message, start))

    def braces(self, expr: Expr) -> Expr:
        start = self.pos
        self.pos += 1
        lo = self.number(start)
        hi: int | None = lo
        self._skip_inline()
        if self.peek() == ",":
            self.pos += 1
            self._skip_inline()
            hi = self.number(start) if self.peek().isdigit() else None
        self._skip_inline()
        if self.peek() != "}":
            raise self.error("unbalanced '{': expected '}' closing the repetition like {2,5}", start)
        self.pos += 1
        if hi is not None and hi < lo:
            raise self.error(f"repetition {{{lo},{hi}}} has max < min", start)
        if max(lo, hi or 0) > self.max_repeat:  # bigger bounds make huge automata: refuse them early
            raise self.error(f"repetition bound above {self.max_repeat} (Limits.max_repeat); use * or + instead", start)
        return rep(expr, lo, hi)

    def _skip_inline(self) -> None:
        while self.peek() in (" ", "\t"):
            self.pos += 1

    def number(self, brace_pos: int) -> int:
        self._skip_inline()
        start = self.pos
        while self.peek().isdigit():
            self.pos += 1
        if start == self.pos:
            raise self.error("expected a number in the repetition like {2}, {2,} or {2,5}", brace_pos)
        return int(self.text[start : self.pos])

    def escape(self) -> int:
        """Read one escape sequence (at the backslash); return its code point."""
        start = self.pos
        c = self.peek(1)
        if c in SIMPLE_ESCAPES:
            self.pos += 2
            return ord(SIMPLE_ESCAPES[c])
        if c in HEX_ESCAPES:
            width = HEX_ESCAPES[c]
            digits = self.text[self.pos + 2 : self.pos + 2 + width]
            if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"bad escape \\{c}: expected {width} hex digits", start)
            code = int(digits, 16)
            if code > MAX_CODE_POINT or SURROGATES[0] <= code <= SURROGATES[1]:
                raise self.error(f"bad escape \\{c}{digits}: not a Unicode scalar value", start)
            self.pos += 2 + width
            return code
        if c == "":
            raise self.error("unterminated escape at end of grammar", start)
        raise self.error(
            f"bad escape \\{c}; valid escapes are \\n \\t \\r \\\\ \\\" \\' \\xHH \\uHHHH \\UHHHHHHHH", start
        )

    def string(self) -> Expr:
        return lit(self.string_text())

    def string_text(self) -> str:
        """The text of the quoted string at the cursor, escapes decoded."""
        quote = self.peek()
        start = self.pos
        self.pos += 1
        chars: list[str] = []
        while True:
            c = self.peek()
            if c == "" or c == "\n":
                raise self.error(f"unbalanced quote: string has no closing {quote}", start)
            if c == quote:
                self.pos += 1
                return "".join(chars)
            if c == "\\":
                chars.append(chr(self.escape()))
            elif SURROGATES[0] <= ord(c) <= SURROGATES[1]:
                raise self.error(
                    f"lone surrogate U+{ord(c):04X} in a string: UTF-8 cannot encode it; "
                    "write the character itself or a valid \\u escape"
                )
            else:
                chars.append(c)
                self.pos += 1

    def class_char(self, open_pos: int) -> int:
        c = self.peek()
        if c == "":
            raise self.error("unbalanced '[': character class has no closing ']'", open_pos)
        if c == "\\":
            return self.escape()
        self.pos += 1
        return ord(c)

    def char_class(self) -> Expr:
        open_pos = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            range_pos = self.pos
            lo = self.class_char(open_pos)
            hi = lo
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi = self.class_char(open_pos)
                if hi < lo:
                    raise self.error(f"bad character range: {chr(lo)!r} > {chr(hi)!r}", range_pos)
            ranges.append((lo, hi))
        self.pos += 1
        return char_class(ranges, negated)


def token_expr(text: str, token_id, error) -> Expr:
    """The token terminal written `text` (`<[ID]>` or a special token's text), resolved with
    `token_id` (TokenizerInfo.token_id); error(message) builds the GrammarError to raise."""
    inner = text[1:-1]
    if inner.startswith("[") and inner.endswith("]"):
        digits = inner[1:-1].strip()
        if not digits.isdigit():
            raise error(f"bad token id in {text!r}; write a decimal id like <[128010]>")
        token: int | str = int(digits)
    else:
        token = text
    if token_id is None:
        if isinstance(token, str):
            raise error(
                f"the special token {text!r} needs a tokenizer to resolve it; compile with a "
                "GrammarCompiler, or write its id as <[ID]>"
            )
        return token_terminal(token)
    try:
        return token_terminal(int(token_id(token)))
    except (ValueError, GrammarError) as exc:
        raise error(f"token terminal {text}: {exc}") from None


def restrict_code_points(expr: Expr, allowed: tuple[tuple[int, int], ...]) -> Expr:
    """`expr` with every character it matches kept to the `allowed` code-point ranges: the
    strings of `expr` made of allowed code points only."""

    def restrict(leaf: Expr) -> Expr:
        if isinstance(leaf, Bytes):
            inside = all(any(lo <= ord(c) <= hi for lo, hi in allowed) for c in leaf.value.decode("utf-8"))
            return leaf if inside else NOTHING
        if isinstance(leaf, CharClass):
            return char_class(intersect_ranges(leaf.ranges, allowed))
        if isinstance(leaf, CharFsm):
            rows = [
                (source, lo, hi, target)
                for source, low, high, target in leaf.transitions
                for lo, hi in intersect_ranges(((low, high),), allowed)
            ]
            return _trimmed(leaf.initial, leaf.finals, rows)
        if leaf is NOTHING:
            return leaf
        raise InternalError(f"a regex gave a {type(leaf).__name__}, which has no characters to restrict")

    return map_leaves(expr, restrict)


def _trimmed(initial: int, finals: frozenset[int], rows: list[tuple[int, int, int, int]]) -> Expr:
    """The automaton of `rows` without the states that are unreachable or reach no final state
    (the automata layer expects none), or NOTHING when its language is empty."""
    forward: dict[int, set[int]] = {}
    backward: dict[int, set[int]] = {}
    for source, _, _, target in rows:
        forward.setdefault(source, set()).add(target)
        backward.setdefault(target, set()).add(source)

    def reach(starts, edges) -> set[int]:
        seen, stack = set(starts), list(starts)
        while stack:
            for nxt in edges.get(stack.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    live = reach([initial], forward) & reach(finals, backward)
    if initial not in live:
        return NOTHING
    kept = tuple(row for row in rows if row[0] in live and row[3] in live)
    return CharFsm(initial, frozenset(finals & live), kept)


def parse_ebnf(
    text: str,
    root: str = "root",
    max_nesting: int = DEFAULT_LIMITS.max_nesting,
    token_id=None,
    max_repeat: int = DEFAULT_LIMITS.max_repeat,
    defer_compile_errors: bool = False,
) -> Grammar:
    """Parse an XGrammar/GBNF grammar; `root` names the start rule (it must be defined).
    Groups nested deeper than `max_nesting`, and repetition bounds `{m,n}` above `max_repeat`,
    are a GrammarError.  `token_id` (token text or id
    -> id, e.g. TokenizerInfo.token_id) resolves token terminals `<|name|>` / `<[ID]>`.
    `defer_compile_errors`: a `Regex(...)` pattern pushmask cannot compile (a lookaround, a bad
    escape) or a `Token(...)` id past 2^24 - 1 becomes the grammar's `refusal`, raised by every
    compile of it, rather than an error now (XGrammar raises it when the grammar is first
    compiled)."""
    check_argument(text, str, "ebnf", "parse_ebnf", "pass the grammar text as str (decode bytes first)")
    check_argument(root, str, "root", "parse_ebnf")
    parser = _Parser(text, max_nesting, token_id, max_repeat, defer_compile_errors)
    rules, positions = parser.parse()
    for name, offset in parser.references:
        if name not in rules:
            raise parser.error(f"reference to undefined rule {name!r}; define it with `{name} ::= ...`", offset)
    if root not in rules:
        known = ", ".join(list(rules)[:5]) or "none"
        raise GrammarError(
            f"grammar has no root rule {root!r} (rules: {known}); add `{root} ::= ...` or pass root_rule_name", 1, 1
        )
    return Grammar(
        rules,
        root,
        positions,
        token_classes=parser.token_classes,
        temperatures=parser.temperatures,
        refusal=parser.refusal,
    )
