"""EBNF in the XGrammar / llama.cpp GBNF dialect -> grammar IR.

    root  ::= item ("," ws item)*      # comments run to the end of the line
    item  ::= [a-z_] [a-z0-9_-]* | "\\u00e9" | . | x{2,3}
    ws    ::= [ \\t\\n]*

Rules are `name ::= expression` (names of letters, digits, '-' and '_').  Expressions have
"strings" and 'strings', character classes `[a-z]` / `[^...]` over code points, `.` (any code
point), grouping, `|`, and the postfix operators `? * + {n} {n,} {n,m}`.  Escapes in strings
and classes: \\n \\t \\r \\f \\v \\0 \\\\ \\" \\' \\[ \\] \\- \\^ \\/ \\xHH \\uHHHH \\UHHHHHHHH (code points,
matched as UTF-8).  Newlines are ordinary whitespace: a rule runs until the next `name ::=`,
which accepts every llama.cpp grammar (llama.cpp only continues rules inside parentheses or
after `|`) as well as XGrammar's freer layout.  An XGrammar lookahead assertion `(= ...)` at
the end of a rule is parsed and dropped: it is an optimisation hint there, not part of the
language.

Every syntax error is a GrammarError with the 1-based line and column, and a hint.
"""

from __future__ import annotations

import bisect

from .core.errors import GrammarError, check_argument
from .core.limits import DEFAULT_LIMITS
from .ir import (
    MAX_CODE_POINT,
    SURROGATES,
    Expr,
    Grammar,
    Ref,
    alt,
    char_class,
    lit,
    rep,
    seq,
    token_terminal,
)
from .regex import regex_to_ir

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


class _Parser:
    """Recursive descent over the text; `pos` is an offset, converted to line/column on error."""

    def __init__(
        self,
        text: str,
        max_nesting: int = DEFAULT_LIMITS.max_nesting,
        token_id=None,
        max_repeat: int = DEFAULT_LIMITS.max_repeat,
    ):
        self.text = text
        self.max_repeat = max_repeat
        self.token_id = token_id
        self.pos = 0
        self.max_nesting = max_nesting
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
        """Does a new `name ::=` begin here?  That is what ends the previous rule."""
        end = self.name_at(self.pos)
        if end == self.pos:
            return False
        i = end
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
            rules[name] = self.alternatives(nested=False)
            self.lookahead_assertion()
            self.skip_space()
            if self.pos < len(self.text) and not self.at_rule_start():
                if self.peek() == ")":
                    raise self.error("unbalanced ')': no matching '('")
                raise self.error(f"unexpected {self.peek()!r}; expected an expression or a new rule `name ::= ...`")
        return rules, positions

    def lookahead_assertion(self) -> None:
        """Parse and drop an XGrammar `(= ...)` suffix (a hint, not part of the language)."""
        self.skip_space()
        if self.peek() == "(" and self.text.startswith("=", self.pos + 1 + self._spaces(self.pos + 1)):
            open_pos = self.pos
            self.pos += 1
            self.skip_space()
            self.pos += 1  # '='
            self.alternatives(nested=True)
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
        if end > start and self.text.startswith("Regex(", start):
            return self.regex_macro()
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

    def regex_macro(self) -> Expr:
        """XGrammar's `Regex("pattern")`: the strings the regex fully matches (Python's syntax,
        as `Grammar.from_regex` reads it). XGrammar's `json_string=` option is not supported."""
        start = self.pos
        self.pos += len("Regex(")
        self.skip_space()
        if self.peek() not in ('"', "'"):
            raise self.error('Regex(...) takes the pattern as a quoted string, like Regex("[0-9]+")', start)
        pattern = self.string_text()
        self.skip_space()
        if self.peek() != ")":
            raise self.error("Regex(...) takes only the pattern (json_string= and flags= are not supported)", start)
        self.pos += 1
        try:
            return regex_to_ir(pattern, max_nesting=self.max_nesting)
        except GrammarError as error:
            raise self.error(f"in Regex({pattern!r}): {error.message} (pattern column {error.column})", start) from None

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


def parse_ebnf(
    text: str,
    root: str = "root",
    max_nesting: int = DEFAULT_LIMITS.max_nesting,
    token_id=None,
    max_repeat: int = DEFAULT_LIMITS.max_repeat,
) -> Grammar:
    """Parse an XGrammar/GBNF grammar; `root` names the start rule (it must be defined).
    Groups nested deeper than `max_nesting`, and repetition bounds `{m,n}` above `max_repeat`,
    are a GrammarError.  `token_id` (token text or id
    -> id, e.g. TokenizerInfo.token_id) resolves token terminals `<|name|>` / `<[ID]>`."""
    check_argument(text, str, "ebnf", "parse_ebnf", "pass the grammar text as str (decode bytes first)")
    check_argument(root, str, "root", "parse_ebnf")
    parser = _Parser(text, max_nesting, token_id, max_repeat)
    rules, positions = parser.parse()
    for name, offset in parser.references:
        if name not in rules:
            raise parser.error(f"reference to undefined rule {name!r}; define it with `{name} ::= ...`", offset)
    if root not in rules:
        known = ", ".join(list(rules)[:5]) or "none"
        raise GrammarError(
            f"grammar has no root rule {root!r} (rules: {known}); add `{root} ::= ...` or pass root_rule_name", 1, 1
        )
    return Grammar(rules, root, positions)
