"""XGrammar's Lark dialect, translated into the Lark syntax lark's own grammar loader reads.

XGrammar (as llguidance) extends Lark with constructs lark cannot read; one pass over the text,
which skips strings, regexes and comments as lark's lexer does, rewrites them:

* ``x{n}``, ``x{n,m}``, ``x{n,}``, ``x{,m}`` (counted repetition) become lark's ``x ~ n`` /
  ``x ~ n..m`` (``x{n,}`` is ``(x ~ n x*)``);
* ``%json {schema}``, ``%lark { grammar }`` and ``@name`` (a grammar of ``named_grammars``) are
  grammars inside the grammar: each becomes a placeholder rule, which the Lark front end replaces
  by the embedded grammar's rules under a prefix of their own (its own namespace, no ``%ignore``
  of the outer grammar inside it);
* ``%grammar_options {...}`` lines are read (``allow_initial_skip``) and removed.

XGrammar's structured regex ``%regex {"substring_chunks": [...]}`` / ``{"substring_chars": "..."}``
(any run of consecutive chunks) is EBNF's ``Substring`` in a rule (a placeholder, as above) and a
/regex/ of its runs in a terminal.

Rule attributes (``name[lazy, suffix="</t>", max_chars=8]: ...``) are read and checked as XGrammar
checks them.  Those that only change the rule's language (``lazy``, ``suffix``, ``stop``,
``max_chars``) are honoured by compiling the rule as one terminal: ``name: PUSHMASK_RULE_k`` and
``PUSHMASK_RULE_k: body``, whose automaton the front end cuts (`RuleAttributes`).  ``temperature``
is XGrammar's sampling temperature inside the rule (`Translation.temperatures`): the rule is
compiled as one terminal too, as XGrammar compiles it, unless its body is one grammar inside the
grammar (``@name``, ``%json``, ``%lark``), which stays a rule.  ``max_tokens`` on a rule whose
text may end after any character is the matcher's token budget on that terminal
(Grammar.token_limits: the rule is closed where it is once the tokens are spent); elsewhere
(XGrammar relaxes the budget until the rule can end) it is refused, and so are the captures
(``capture``, ``stop_capture``).
Constructs of the dialect pushmask does not have (``&``, ``~`` as complement) are refused with a
GrammarError at their line and column.  Token terminals ``<|name|>`` / ``<[ID]>`` stay for the front
end (it resolves them with the tokenizer); a malformed one is refused here.  Every rewrite keeps the
language exact: it writes the
same construct in lark's syntax.  `SourceMap` maps a position in the translated text back to the
text the user wrote, so errors lark reports point at the user's text.
"""

from __future__ import annotations

import ast
import bisect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import GrammarError
from ..core.recursion import get_max_recursion_depth, json_nesting

__all__ = [
    "LARK_ERROR_PREFIX",
    "NAMED_GRAMMAR_NAME",
    "Embedded",
    "RuleAttributes",
    "SourceMap",
    "Translation",
    "attribute_list_close",
    "lark_error",
    "read_attributes",
    "refuse_matcher_attributes",
    "translate_dialect",
]

MAX_REPEAT_COUNT = 2**31 - 1
"""XGrammar's bound on a repetition count (an int32); larger counts are refused."""

EMBEDDED_RULE = "pushmask_embedded_{}"
"""The placeholder rule name of the k-th embedded grammar (lower case: lark reads it as a rule)."""

_DEFINITION = re.compile(r"[ \t]*[?!]?(_?[A-Za-z][\w]*)(\.-?\d+)?[ \t]*(\[|:)")
_ATTRIBUTE_TOKEN = re.compile(
    r'[ \t]*(?:(?P<name>[A-Za-z_]\w*)|(?P<string>"(?:[^"\\\n]|\\.)*"i?)|(?P<regex>/(?:[^/\\\n]|\\.)*/[a-z]*)'
    r"|(?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)|(?P<punct>[=,\]])|(?P<other>[^ \t\n]))"
)
"""One token of a rule's attribute list: a name, a string, a regex, a number or = , ]."""
_CAPTURE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
RULE_TERMINAL = "PUSHMASK_RULE_{}"
"""The terminal a rule with language attributes is compiled as (its body: the same name + _BODY)."""
MAX_CHARS_LIMIT = 2**31 - 1  # XGrammar's bounds on max_chars (inclusive, from 0) and max_tokens (from 1)
MAX_TOKENS_LIMIT = 1_000_000
_MATCHER_ATTRIBUTES = ("capture", "stop_capture")
"""Attributes that drive XGrammar's matcher (captures): refused."""
_LINE_END = re.compile(r"[ \t]*(?:(?://|#)[^\n]*)?(?:\n|$)")
_CONTINUED = re.compile(r"(?:[ \t]*(?:(?://|#)[^\n]*)?\n)*[ \t]*\|")
"""Lines that continue a rule with another alternative (`| ...`), blank and comment lines before."""
_ANY_TEXT_PATTERNS = ("(.|\\n)*", "(\\n|.)*", "(?s:.*)", "(?:.|\\n)*", "(?:\\n|.)*", "[\\s\\S]*")
"""The regexes XGrammar reads as any text (without the s flag; with it, `.*`)."""
_FIXED_STRING = re.compile(r'"(?:[^"\\\n]|\\.)+"')
_REGEX_LITERAL = re.compile(r"/((?:[^/\\\n]|\\.)*)/([a-z]*)")
_LAZY_TRIGGER = re.compile(r'(\S+)[ \t]+("(?:[^"\\\n]|\\.)+")')
_FIXED_REGEX = re.compile(r"(?:[^\\.^$|?*+()\[\]{}]|\\[^dDsSwWbBpPuxc0-9])+")
"""A regex that matches one fixed string (literal characters and escaped punctuation)."""
_DYNAMIC_DISPATCH = re.compile(r"\s*(?:\(\s*\w+(?:\s*\|\s*\w+)*\s*\)|\w+)\s*\*\s*\w+\s*")
"""XGrammar's dynamic-dispatch start rule, `start: (tool | ...)* tail`: its lazy heads share one
trigger automaton there (a language pushmask does not build) and max_chars is ignored on what it
consumes, so every attribute beside it is refused."""
_REPEAT = re.compile(r"\{\s*(-?\d*)\s*(,\s*(-?\d*)\s*)?\}")
NAMED_GRAMMAR_NAME = re.compile(r"[A-Za-z_][\w-]*")
"""What `@name` may spell: the names of named grammars."""
_WORD = re.compile(r"\w+")
_BLANKS = re.compile(r"[ \t]*")
_DIRECTIVE = re.compile(r"%\w*")
_WHITESPACE = re.compile(r"\s*")
_DIALECT_HINTS = re.compile(
    r"[{@&<]|%(json|lark|regex|grammar_options)|~\s*[^\s\d]|\\[ucxU]|\(\?<|\w\[|\.\."
    r'|^(?:[^"\n]|"(?:[^"\\\n]|\\.)*")*"(?:[^"\\\n]|\\.)*$'
    r"|/[imsu]*[lx]|^[^/\n]*/(?:[^/\\\n]|\\.)*$",
    re.MULTILINE,
)
"""Text without any of these (dialect, a range to check, a string or regex left open, a regex flag
refused) is plain Lark: the translation is the text itself, found at C speed."""
_GRAMMAR_OPTIONS = {"allow_initial_skip": None, "no_forcing": False, "allow_invalid_utf8": False}
"""The options %grammar_options takes: None for one pushmask honours, else the one value it accepts."""


@dataclass(frozen=True)
class Embedded:
    """A grammar written inside the Lark text: `kind` "json" (value: the schema), "lark" (value:
    the nested grammar's text), "named" (value: the name after @) or "substring" (value: the
    chunks of a ``%regex``), at `line`, `column`."""

    kind: str
    value: Any
    line: int
    column: int


@dataclass(frozen=True)
class RuleAttributes:
    """The attributes of rule `rule` that pushmask honours, all language changes of a rule
    compiled as one terminal: `lazy` (the rule ends at the first point its text can end; set by
    lazy, suffix and stop, which append their marker to the body), `max_chars` (once the rule's
    text holds that many characters it ends where it can: XGrammar's character budget) and
    `triggered`."""

    rule: str
    lazy: bool = False
    max_chars: int | None = None
    triggered: bool = False
    """XGrammar's trigger form (any text, then a fixed string): every prefix of the lazy
    language is in it too (the text may end before the trigger)."""
    temperature: bool = False
    """The rule has a temperature (compiled as a terminal for it, as XGrammar does)."""
    max_tokens: int | None = None
    """XGrammar's token budget: at most this many tokens start inside the rule, then the matcher
    closes it where it is (Grammar.token_limits); only on a rule whose text may end anywhere."""

    def why(self) -> str:
        """Why the rule is compiled as a terminal, for errors."""
        if self.lazy or self.max_chars is not None or self.max_tokens is not None:
            return "has lazy, suffix, stop, max_chars or max_tokens"
        return "has a temperature (temperature is only supported on terminals and subgrammars)"


@dataclass
class SourceMap:
    """Offsets in the translated text where a rewrite starts, and the offset in the user's text
    each corresponds to; positions between two rewrites shift by the same amount."""

    original: str
    translated_starts: list[int] = field(default_factory=list)
    original_starts: list[int] = field(default_factory=list)

    def add(self, translated_offset: int, original_offset: int) -> None:
        self.translated_starts.append(translated_offset)
        self.original_starts.append(original_offset)

    def position(self, translated: str, line: int, column: int) -> tuple[int, int]:
        """The (line, column) in the user's text of (line, column) in `translated`."""
        offset = _offset(translated, line, column)
        k = bisect.bisect_right(self.translated_starts, offset) - 1
        if k >= 0:
            offset = self.original_starts[k] + (offset - self.translated_starts[k])
        return _line_column(self.original, min(offset, len(self.original)))


@dataclass
class Translation:
    """The text for lark's loader, the grammars embedded in it (by placeholder rule name), the
    %grammar_options read, and the map back to the user's text."""

    text: str
    embedded: dict[str, Embedded]
    allow_initial_skip: bool
    source_map: SourceMap
    rule_terminals: dict[str, RuleAttributes] = field(default_factory=dict)
    """The terminals rules with attributes are compiled as, by terminal name."""
    temperatures: dict[str, float] = field(default_factory=dict)
    """The rules with a `temperature` attribute: Grammar.temperatures."""


def _skip(blanks: re.Pattern[str], text: str, offset: int) -> int:
    """Where the run of `blanks` (a pattern that also matches nothing) starting at `offset` ends."""
    match = blanks.match(text, offset)
    assert match is not None
    return match.end()


def _offset(text: str, line: int, column: int) -> int:
    start = 0
    for _ in range(line - 1):
        newline = text.find("\n", start)
        if newline < 0:
            return len(text)
        start = newline + 1
    return start + column - 1


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


LARK_ERROR_PREFIX = "Lark error at line "
SOURCE_CONTEXT = 80
"""How many characters of the source line an error shows on each side of its column."""


def lark_error(text: str, message: str, line: int, column: int) -> GrammarError:
    """The GrammarError of `message` at (line, column) of the Lark text `text`, worded as XGrammar
    words it (its tests match this): ``Lark error at line L, column C: message``, then the source
    line with a caret under the column."""
    lines = text.split("\n")
    context = ""
    if 0 < line <= len(lines):  # at most SOURCE_CONTEXT characters each side of the column
        first = max(0, column - 1 - SOURCE_CONTEXT)
        shown = lines[line - 1].rstrip("\r")[first : column - 1 + SOURCE_CONTEXT]
        context = f"\n{shown}\n{' ' * (column - 1 - first)}^"
    error = GrammarError(message, line, column)
    error.args = (f"{LARK_ERROR_PREFIX}{line}, column {column}: {message}{context}",)
    return error


class _Translator:
    """One pass over the text; `out` is the translated text so far."""

    def __init__(self, text: str, named: frozenset[str]):
        self.text = text
        self.named = named
        self.out: list[str] = []
        self.out_len = 0
        self.embedded: dict[str, Embedded] = {}
        self.allow_initial_skip = True
        self.source_map = SourceMap(text)
        self.in_terminal = False  # the definition being read is a terminal's (upper-case name)
        self.atom_start: int | None = None  # where the last atom starts in `out`
        self.group_starts: list[int] = []  # where each open ( or [ is in `out`
        self.last_string = ""  # the last "string" literal read, as written
        self.rule_terminals: dict[str, RuleAttributes] = {}
        self.temperatures: dict[str, float] = {}
        self.terminal_rule: RuleAttributes | None = None  # the rule whose body is being read as a terminal

    def error(self, message: str, offset: int) -> GrammarError:
        if self.terminal_rule is not None:
            message += f" (rule '{self.terminal_rule.rule}' {self.terminal_rule.why()}: it is compiled as a terminal)"
        return lark_error(self.text, message, *_line_column(self.text, offset))

    def emit(self, piece: str) -> None:
        self.out.append(piece)
        self.out_len += len(piece)

    def rewrite(self, piece: str, original_end: int) -> None:
        """Emit `piece` in place of the user's text ending at `original_end`; record the shift."""
        self.emit(piece)
        self.source_map.add(self.out_len, original_end)

    def run(self) -> Translation:
        text, n, i = self.text, len(self.text), 0
        line_start = True
        while i < n:
            if line_start:
                i = self.start_line(i)
                line_start = False
                continue
            c = text[i]
            if c == "\n":
                self.emit(c)
                i += 1
                line_start = True
            elif c == '"':
                i = self.string(i)
            elif c == "/" and not text.startswith("//", i):
                i = self.regex(i)
            elif text.startswith("//", i) or c == "#":
                end = text.find("\n", i)
                end = n if end < 0 else end
                self.emit(text[i:end])
                i = end
            elif c == "<":
                i = self.token(i)
            elif c == "%":
                i = self.directive(i)
            elif c == "@":
                i = self.named_reference(i)
            elif c == "{" and self.atom_start is not None and _REPEAT.match(text, i):
                i = self.repeat(i)
            elif c in "([":
                self.group_starts.append(self.out_len)
                self.atom_start = None
                self.emit(c)
                i += 1
            elif c in ")]":
                self.atom_start = self.group_starts.pop() if self.group_starts else None
                self.emit(c)
                i += 1
            elif c == "&":
                raise self.error("intersection '&' is not supported", i)
            elif c == "~":
                after = _skip(_BLANKS, text, i + 1)
                if not text[after : after + 1].isdigit():
                    raise self.error("complement '~' is not supported", i)
                self.emit(c)
                i += 1
            elif c.isalnum() or c == "_":
                match = _WORD.match(text, i)
                assert match is not None
                self.atom_start = self.out_len
                self.emit(match.group())
                i = match.end()
            else:
                if not c.isspace() and c != ".":
                    self.atom_start = None
                self.emit(c)
                i += 1
        # each placeholder is defined (its body is replaced by the embedded grammar's root)
        self.emit("".join(f'\n{placeholder}: "{placeholder}"' for placeholder in self.embedded))
        return Translation(
            "".join(self.out),
            self.embedded,
            self.allow_initial_skip,
            self.source_map,
            self.rule_terminals,
            self.temperatures,
        )

    def start_line(self, i: int) -> int:
        """At a line's start: a definition header sets `in_terminal` (and reads attributes);
        a %grammar_options line is read and dropped; anything else continues the definition."""
        text = self.text
        stripped = _skip(_BLANKS, text, i)
        if text.startswith("%grammar_options", stripped):
            return self.grammar_options(stripped)
        header = _DEFINITION.match(text, i)
        if header is not None and (header.group(3) == ":" or self.attribute_list_end(header.end(3)) >= 0):
            name = header.group(1)
            self.in_terminal = name.lstrip("_")[:1].isupper()
            self.terminal_rule = None
            if header.group(3) == "[":
                self.emit(text[i : header.end(1)])
                return self.attributes(name, header.start(3))
        self.atom_start = None
        self.group_starts = []
        return i  # the line itself is copied by the main loop

    def attribute_list_end(self, offset: int) -> int:
        """Where the `:` after the attribute list starting at `offset` (after its `[`) is, or -1
        when the line is no definition header (an optional `[...]` on a continuation line)."""
        end = attribute_list_close(self.text, offset)
        colon = _skip(_BLANKS, self.text, end) if end >= 0 else -1
        return colon if self.text.startswith(":", colon) and not self.text.startswith("::", colon) else -1

    def attributes(self, name: str, offset: int) -> int:
        """XGrammar's rule attributes `name[lazy, max_chars=8]: ...`, checked with XGrammar's words;
        the header is emitted without them (and as a terminal where they change the language).
        Returns where the body starts."""
        if self.in_terminal:
            raise self.error("attributes are only supported on rules", offset)
        values, end = read_attributes(self.text, offset, self.error)
        colon = _skip(_BLANKS, self.text, end)  # attribute_list_end found the ':' there
        return self.attributed_header(name, values, colon + 1)

    def attributed_header(self, name: str, values: dict[str, tuple[str, int]], body_start: int) -> int:
        """Emit the header of rule `name` with its checked attributes `values`: captures are refused
        by name; with lazy, suffix, stop, max_chars, max_tokens or a temperature the rule becomes
        one terminal (a temperature alone on one embedded grammar keeps it a rule)."""
        rule = name.lstrip("?!")
        dispatch = _DYNAMIC_DISPATCH.fullmatch(_start_body(self.text)) if values else None
        if dispatch is not None:
            self.refuse_on_dispatch(dispatch.group())
        refuse_matcher_attributes(values, self.error)
        if "temperature" in values:
            self.temperatures[rule] = float(values["temperature"][0])
        marker = values.get("suffix", values.get("stop", ("", 0)))[0]
        if marker.startswith("/"):  # a regex marker, with its escapes written as the body's are
            flags_at = marker.rindex("/")
            marker = f"/{_python_regex(marker[1:flags_at])}{marker[flags_at:]}"
        lazy = "lazy" in values or bool(marker)
        ignores = re.search(r"^[ \t]*%ignore", self.text, re.MULTILINE) is not None
        for budget in ("max_chars", "max_tokens"):  # a budget counts the text of one terminal
            if budget in values and (lazy or ignores):
                raise self.error(
                    f"attribute {budget!r} is not supported with lazy, suffix or stop, nor in a grammar with "
                    "%ignore: pushmask honours it on a rule it compiles as one terminal",
                    values[budget][1],
                )
        max_chars = int(values["max_chars"][0]) if "max_chars" in values else None
        max_tokens = int(values["max_tokens"][0]) if "max_tokens" in values else None
        if not values:
            self.rewrite(":", body_start)
            return body_start
        if dispatch is not None:
            attribute, (_, at) = next(iter(values.items()))
            raise self.error(
                f"attribute {attribute!r} is not supported on a grammar whose start rule has XGrammar's "
                "dynamic-dispatch shape (`start: (tool | ...)* tail`): pushmask does not build its trigger automaton",
                at,
            )
        if values.keys() == {"temperature"} and self.single_subgrammar(body_start):
            self.rewrite(":", body_start)  # XGrammar keeps it a rule: the temperature holds inside it
            return body_start
        triggered = lazy and self.triggered_lazy(marker, body_start)
        terminal = RULE_TERMINAL.format(len(self.rule_terminals))
        attributes = RuleAttributes(rule, lazy, max_chars, triggered, "temperature" in values, max_tokens)
        self.rule_terminals[terminal] = attributes
        body = f"{terminal}_BODY {marker}\n{terminal}_BODY:" if marker else ""
        self.rewrite(f": {terminal}\n{terminal}: {body}", body_start)
        self.in_terminal, self.terminal_rule = True, attributes
        self.atom_start = None
        self.group_starts = []
        return body_start

    def refuse_on_dispatch(self, start_body: str) -> None:
        """XGrammar's error for `max_tokens` or `capture` on a rule a dynamic-dispatch start rule
        (`start: (tool | ...)* tail`) consumes, wherever in the text that rule is defined."""
        for rule in _WORD.findall(start_body.split("*")[0]):
            header = re.search(rf"^[ \t]*[?!]?{rule}[ \t]*\[[^\]\n]*?\b(max_tokens|capture)\b", self.text, re.MULTILINE)
            if header is not None:
                attribute = header.group(1)
                raise self.error(f"{attribute} is not supported on rules consumed by dynamic dispatch", header.start(1))

    def single_subgrammar(self, body_start: int) -> bool:
        """Whether the rule body at `body_start` is one grammar inside the grammar (`@name`,
        `%json {...}`, `%lark {...}`) and nothing else: XGrammar's temperature rule that stays a
        rule.  A malformed one counts (its directive's reader reports it)."""
        text = self.text
        start = _skip(_BLANKS, text, body_start)
        end = -1
        if text.startswith("@", start):
            match = NAMED_GRAMMAR_NAME.match(text, start + 1)
            end = match.end() if match is not None else -1
        elif text.startswith("%json", start):
            try:
                end = json.JSONDecoder().raw_decode(text, _skip(_WHITESPACE, text, start + 5))[1]
            except (json.JSONDecodeError, RecursionError):
                return True
        elif text.startswith("%lark", start):
            brace = _skip(_WHITESPACE, text, start + 5)
            end = _closing_brace(text, brace) + 1 if text.startswith("{", brace) else 0
        else:
            return False
        if end <= 0:
            return True
        line_end = _LINE_END.match(text, end)
        return line_end is not None and _CONTINUED.match(text, line_end.end()) is None

    def triggered_lazy(self, marker: str, body_start: int) -> bool:
        r"""Whether XGrammar compiles this lazy rule as a trigger (its TagDispatch without a loop):
        any text then a fixed string (`TEXT "<end>"`, or a string `suffix` / `stop` after any
        text), whose language is any text holding no trigger, then the trigger or nothing.  A
        lone `/(.|\n)*END/` regex XGrammar refuses, and so does pushmask, in its words."""
        newline = self.text.find("\n", body_start)
        body = self.text[body_start : len(self.text) if newline < 0 else newline].strip()
        if marker:
            return _FIXED_STRING.fullmatch(marker) is not None and self.any_text(body, set())
        parts = _LAZY_TRIGGER.fullmatch(body)
        if parts is not None:
            return self.any_text(parts.group(1), set())
        regex = _REGEX_LITERAL.fullmatch(body)
        if regex is not None and not set(regex.group(2)) - set("su"):
            prefixes = (".*",) if "s" in regex.group(2) else _ANY_TEXT_PATTERNS
            rest = [regex.group(1)[len(p) :] for p in prefixes if regex.group(1).startswith(p)]
            if any(tail and _FIXED_REGEX.fullmatch(tail) for tail in rest):
                raise self.error("lazy regex suffix is only supported on a head used by dynamic dispatch", body_start)
        return False

    def any_text(self, atom: str, visiting: set[str]) -> bool:
        r"""XGrammar's test for "any text": a regex it knows (`/(.|\n)*/`, `/[\s\S]*/`, `/.*/s`...)
        or a name whose one-line definition is one (its syntactic check, repeated here)."""
        regex = _REGEX_LITERAL.fullmatch(atom)
        if regex is not None:
            pattern, flags = re.sub(r"[ \t\r]", "", regex.group(1)), regex.group(2)
            if set(flags) - set("isu"):
                return False
            return pattern == ".*" if "s" in flags else pattern in _ANY_TEXT_PATTERNS
        if re.fullmatch(r"\w+", atom) is None or atom in visiting:
            return False
        definition = re.search(rf"^[ \t]*[?!]?{atom}[ \t]*(?:\.-?\d+)?[ \t]*:(.*)$(?![\s]*\|)", self.text, re.MULTILINE)
        return definition is not None and self.any_text(definition.group(1).strip(), visiting | {atom})

    def string(self, i: int) -> int:
        """A "string" literal (and its i flag), copied."""
        text, n, j = self.text, len(self.text), i + 1
        while j < n and text[j] != '"':
            if text[j] == "\n":
                break
            j += 2 if text[j] == "\\" else 1
        if j >= n or text[j] != '"':
            raise self.error("unterminated string literal", i)
        j += 1
        if j < n and text[j] == "i":
            j += 1
        if "".join(self.out[-4:]).rstrip().endswith(".."):  # "a".."z" is one atom
            self.check_range(self.last_string, text[i:j], i)
        else:
            self.atom_start = self.out_len
        self.last_string = text[i:j]
        self.emit(text[i:j])
        return j

    def check_range(self, low: str, high: str, offset: int) -> None:
        """A character range "a".."z": one character each end, in order, without flags."""
        if low.endswith("i") or high.endswith("i"):
            raise self.error("flags are not allowed on character ranges", offset)
        try:
            ends = [ast.literal_eval(end) for end in (low, high)]
        except (ValueError, SyntaxError):
            return  # lark reports the malformed string
        if any(len(end) != 1 for end in ends):
            raise self.error(f"range endpoints must be one character: {low}..{high}", offset)
        if ends[0] > ends[1]:
            raise self.error(f"range start must not exceed end: {low}..{high}", offset)

    def regex(self, i: int) -> int:
        """A /regex/flags literal, copied."""
        text, n, j = self.text, len(self.text), i + 1
        while j < n and text[j] != "/":
            if text[j] == "\n":
                break
            j += 2 if text[j] == "\\" else 1
        if j >= n or text[j] != "/":
            raise self.error("unterminated regular expression", i)
        body_end, j = j, j + 1
        while j < n and text[j] in "imslux":
            if text[j] in "lx":
                raise self.error(f"regular-expression flag {text[j]!r} is not supported", j)
            j += 1
        self.atom_start = self.out_len
        self.check_hex_escapes(i + 1, body_end)
        body = _python_regex(text[i + 1 : body_end])
        if body == text[i + 1 : body_end]:
            self.emit(text[i:j])
        else:
            self.rewrite(f"/{body}/{text[body_end + 1 : j]}", j)
        return j

    def check_hex_escapes(self, start: int, end: int) -> None:
        """XGrammar's error for a \\x / \\u / \\U escape in text[start:end] without its hex
        digits (lark would fail decoding the body, with no position)."""
        text, j = self.text, start
        while j < end:
            if text[j] != "\\":
                j += 1
                continue
            kind = text[j + 1 : j + 2]
            width = _HEX_ESCAPE_WIDTHS.get(kind)
            digits = text[j + 2 : j + 2 + (width or 0)]
            if width and not text.startswith("u{", j + 1) and not (len(digits) == width and _is_hex(digits)):
                words = {2: "two", 4: "four", 8: "eight"}[width]
                raise self.error(f"\\{kind} must be followed by {words} hexadecimal digits", j)
            j += 2

    def token(self, i: int) -> int:
        """A token terminal <...>, checked and copied (the front end resolves it)."""
        text = self.text
        end = text.find(">", i + 1)
        newline = text.find("\n", i + 1)
        if end < 0 or (0 <= newline < end):
            raise self.error("unterminated special token", i)
        if any(ch.isspace() for ch in text[i : end + 1]):
            raise self.error(f"invalid special token {text[i : end + 1]!r}: it contains whitespace", i)
        if self.in_terminal:
            raise self.error("special tokens cannot be used in terminals", i)
        self.atom_start = self.out_len
        self.emit(text[i : end + 1])
        return end + 1

    def directive(self, i: int) -> int:
        """%json / %lark / %regex inside a definition; other directives are lark's (copied)."""
        text = self.text
        word = _DIRECTIVE.match(text, i)
        assert word is not None
        name, after = word.group(), word.end()
        if name == "%json":
            if self.in_terminal:
                raise self.error("%json cannot be used in terminals", i)
            start = _skip(_WHITESPACE, text, after)
            schema, end = self.json_value("%json", start)
            return self.embed("json", schema, i, end)
        if name == "%lark":
            if self.in_terminal:
                raise self.error("nested %lark cannot be used in terminals", i)
            start = _skip(_WHITESPACE, text, after)
            if not text.startswith("{", start):
                raise self.error("expected '{' after %lark", start)
            end = _closing_brace(text, start)
            if end < 0:
                raise self.error("expected '}' to close the %lark grammar", start)
            return self.embed("lark", text[start + 1 : end], i, end + 1)
        if name == "%regex":
            start = _skip(_WHITESPACE, text, after)
            spec, end = self.json_value("%regex", start)
            chunks = self.structured_regex(spec, i)
            if not self.in_terminal:
                return self.embed("substring", chunks, i, end)
            pattern = _substring_regex(chunks)
            if len(pattern) > MAX_TERMINAL_SUBSTRING_REGEX:
                raise self.error(
                    f"%regex in a terminal is written out as a regex of every run of its {len(chunks)} "
                    f"chunks, longer than {MAX_TERMINAL_SUBSTRING_REGEX} characters; use it in a rule",
                    i,
                )
            self.atom_start = self.out_len
            self.rewrite(pattern, end)
            return end
        self.emit(name)
        return after

    def structured_regex(self, spec: Any, at: int) -> list[str]:
        """The chunks of XGrammar's structured regex ``%regex {"substring_chunks": [...]}`` or
        ``{"substring_chars": "..."}`` (each code point a chunk), checked with XGrammar's words."""
        if not isinstance(spec, dict):
            raise self.error("%regex value must be an object", at)
        for key in spec:
            if key not in ("substring_chunks", "substring_chars", "substring_words"):
                raise self.error(f"unknown field '{key}' in %regex", at)
        if not spec:
            raise self.error("no fields set on %regex", at)
        if len(spec) > 1:
            raise self.error("only one field can be set on %regex", at)
        ((field, value),) = spec.items()
        if field == "substring_words":
            raise self.error("substring_words is not supported yet", at)
        if field == "substring_chars":
            if not isinstance(value, str):
                raise self.error("substring_chars must be a string", at)
            return list(value)
        if not isinstance(value, list) or not all(isinstance(chunk, str) for chunk in value):
            raise self.error("substring_chunks must be an array of strings", at)
        return value

    def json_value(self, directive: str, start: int) -> tuple[Any, int]:
        """The JSON value written at `start` after `directive`, and where it ends; nested no deeper
        than get_max_recursion_depth() (as all JSON text given to pushmask)."""
        too_deep_for_python = False
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, start)
        except json.JSONDecodeError as exc:
            raise self.error(f"failed to parse JSON value after {directive}: {exc.msg}", start) from None
        except RecursionError:  # json_nesting below names the depth (of the rest of the text)
            value, end, too_deep_for_python = None, len(self.text), True
        depth = json_nesting(self.text[start:end])
        if depth > get_max_recursion_depth() or too_deep_for_python:
            raise self.error(
                f"Maximum recursion depth exceeded: the {directive} value nests {depth} levels, more than "
                f"max_recursion_depth={get_max_recursion_depth()} (see pushmask.set_max_recursion_depth)",
                start,
            )
        return value, end

    def named_reference(self, i: int) -> int:
        match = NAMED_GRAMMAR_NAME.match(self.text, i + 1)
        if match is None:
            raise self.error("empty grammar reference: write @name", i)
        name = match.group()
        if name not in self.named:
            raise self.error(f"unknown named grammar '@{name}'; pass it in named_grammars", i)
        if self.in_terminal:
            raise self.error("named grammars cannot be used in terminals", i)
        return self.embed("named", name, i, match.end())

    def embed(self, kind: str, value: Any, start: int, end: int) -> int:
        """Emit a placeholder rule for the grammar written at text[start:end]."""
        placeholder = EMBEDDED_RULE.format(len(self.embedded))
        self.embedded[placeholder] = Embedded(kind, value, *_line_column(self.text, start))
        self.atom_start = self.out_len
        self.rewrite(placeholder, end)
        return end

    def repeat(self, i: int) -> int:
        """x{n}, x{n,m}, x{n,}, x{,m} as lark's ~ (the atom x was emitted last)."""
        match = _REPEAT.match(self.text, i)
        assert match is not None and self.atom_start is not None
        low_text, comma, high_text = match.group(1), match.group(2), match.group(3)
        counts = [low_text or "0", high_text if comma else low_text]
        for count in counts:
            if count and (count.startswith("-") or int(count) > MAX_REPEAT_COUNT):
                raise self.error(f"invalid repetition count {count}: write 0 .. {MAX_REPEAT_COUNT}", i)
        if not comma and not low_text:
            raise self.error("invalid repetition count: write x{n}, x{n,m}, x{n,} or x{,m}", i)
        low = int(counts[0])
        high = int(counts[1]) if counts[1] else None
        if high is not None and high < low:
            raise self.error(f"repetition end must be greater than or equal to start in {match.group()}", i)
        if high is None:  # x{n,}: n copies, then any more
            atom = "".join(self.out)[self.atom_start :]
            prefix = "".join(self.out)[: self.atom_start]
            self.out, self.out_len = [prefix], len(prefix)
            self.rewrite(f"({atom} ~ {low} {atom}*)", match.end())
        else:
            self.rewrite(f" ~ {low}..{high}" if high != low else f" ~ {low}", match.end())
        return match.end()

    def grammar_options(self, i: int) -> int:
        """%grammar_options {...}: checked; allow_initial_skip is kept, the line is dropped."""
        text = self.text
        start = _skip(_BLANKS, text, i + len("%grammar_options"))
        options, end = self.json_value("%grammar_options", start)
        if not isinstance(options, dict):
            raise self.error("%grammar_options value must be an object", start)
        for option, value in options.items():
            if option not in _GRAMMAR_OPTIONS:
                raise self.error(f"unknown %grammar_options option {option!r}", start)
            if not isinstance(value, bool):
                raise self.error(f"{option} must be a boolean", start)
            accepted = _GRAMMAR_OPTIONS[option]
            if accepted is None:
                self.allow_initial_skip = value
            elif value != accepted:
                raise self.error(f"%grammar_options option {option!r} is not supported (only {accepted})", start)
        self.rewrite("", end)
        return end


def attribute_list_close(text: str, offset: int) -> int:
    """Where the attribute list whose tokens start at `offset` (after its `[`) ends, after its
    `]`; -1 when the bracket holds something else (a character class) or is not closed."""
    end = offset
    while True:
        token = _ATTRIBUTE_TOKEN.match(text, end)
        if token is None or token.group("other") is not None:
            return -1
        end = token.end()
        if token.group("punct") == "]":
            return end


def refuse_matcher_attributes(values: dict[str, tuple[str, int]], error: Callable[[str, int], Exception]) -> None:
    """Refuse, by name, the attributes XGrammar's matcher honours and pushmask's does not."""
    for attribute in _MATCHER_ATTRIBUTES:
        if attribute in values:
            raise error(
                f"attribute {attribute!r} is not supported: pushmask's matcher has no captures",
                values[attribute][1],
            )


def read_attributes(
    text: str, offset: int, error: Callable[[str, int], Exception]
) -> tuple[dict[str, tuple[str, int]], int]:
    """The attribute list of a rule header whose `[` is at `offset` (XGrammar's `name[lazy,
    max_chars=8]`, in Lark and in EBNF), checked with XGrammar's words: attribute -> (its value as
    written, its offset), and where the list ends (after its `]`).  `error(message, offset)` makes
    the exception raised; the list must run to its `]` (attribute_list_end read it)."""
    values: dict[str, tuple[str, int]] = {}
    i = offset + 1
    while True:
        key = _ATTRIBUTE_TOKEN.match(text, i)
        if key is None:
            raise error("expected ']' after rule attributes", i)
        if key.group("punct") == "]" and not values:  # name[]: no attributes
            return values, key.end()
        if key.group("name") is None:
            raise error("expected rule attribute", key.start(key.lastgroup or 0))
        attribute, at = key.group("name"), key.start("name")
        i = key.end()
        value = ""
        equals = _ATTRIBUTE_TOKEN.match(text, i)
        if equals is not None and equals.group("punct") == "=":
            token = _ATTRIBUTE_TOKEN.match(text, equals.end())
            if token is None:
                raise error(f"expected a value after {attribute}=", equals.end())
            value, i = token.group().strip(), token.end()
            check_attribute(attribute, token, at, error)
        elif attribute not in ("lazy", "capture"):
            check_attribute(attribute, None, at, error)
        if attribute in values:
            raise error(f"{attribute} attribute is specified more than once", at)
        if attribute == "suffix" and "stop" in values:
            raise error("suffix cannot be combined with stop", at)
        if attribute == "stop" and "suffix" in values:
            raise error("stop cannot be combined with suffix", at)
        values[attribute] = (value, at)
        separator = _ATTRIBUTE_TOKEN.match(text, i)
        if separator is None:
            raise error("expected ']' after rule attributes", i)
        i = separator.end()
        if separator.group("punct") == "]":
            break
        if separator.group("punct") != ",":
            raise error("expected ']' after rule attributes", separator.start(separator.lastgroup or 0))
    if "stop_capture" in values and "suffix" not in values and "stop" not in values:
        raise error("stop_capture requires stop or suffix", values["stop_capture"][1])
    return values, i


def check_attribute(
    attribute: str, token: re.Match[str] | None, key_offset: int, error: Callable[[str, int], Exception]
) -> None:
    """XGrammar's checks of one attribute's value (`token`: the one after `=`, None: no `=`); `error`
    as read_attributes's."""
    at = token.start(token.lastgroup or 0) if token is not None else key_offset
    kind = token.lastgroup if token is not None else None
    value = token.group().strip() if token is not None else ""
    if attribute in ("max_tokens", "max_chars"):
        if token is None:
            raise error(f"expected '=' after {attribute} attribute", at)
        if kind != "number" or not value.lstrip("-+").isdigit():
            raise error("expected integer", at)
        number, limit = int(value), MAX_TOKENS_LIMIT if attribute == "max_tokens" else MAX_CHARS_LIMIT
        if attribute == "max_tokens" and number <= 0:
            raise error("max_tokens must be positive", at)
        if number < 0 or number > limit:
            raise error(f"{attribute} must be between {int(attribute == 'max_tokens')} and {limit}", at)
    elif attribute in ("capture", "stop_capture"):
        if kind != "string":
            raise error(f"expected string literal after {attribute}=", at)
        if value.endswith("i"):
            raise error(f"case-insensitive flags are not supported on {attribute}", at)
        name = ast.literal_eval(value)
        if not name:
            raise error("capture name must not be empty", at)
        if not _CAPTURE_NAME.fullmatch(name):
            raise error("capture name must only contain letters, digits, '_', '-' and '.'", at)
    elif attribute in ("suffix", "stop"):
        if token is None:
            raise error(f"expected '=' after {attribute} attribute", at)
        if kind == "string" and value.rstrip("i") == '""':
            raise error(f"{attribute} must not be empty", at)
        if kind == "name" and not value.lstrip("_")[:1].isupper():
            raise error(f"{attribute} terminal name must be uppercase", at)
        if kind == "regex" and "i" in value[value.rindex("/") :]:
            raise error("regular-expression flag 'i' is not supported with suffix or stop attributes", at)
        if kind not in ("string", "regex", "name"):
            raise error(
                f"expected string literal, regular expression, or uppercase terminal name after {attribute}=", at
            )
    elif attribute == "temperature":
        if kind != "number":
            raise error("expected number after temperature=", at)
        if not math.isfinite(float(value)) or float(value) < 0:
            raise error("temperature must be a finite non-negative number", at)
    elif attribute == "lazy":
        raise error("rule attribute 'lazy' takes no value", at)
    else:
        raise error(f"rule attribute '{attribute}' is not supported by XGrammar Lark", at)


MAX_TERMINAL_SUBSTRING_REGEX = 1 << 16
"""The longest regex a terminal's ``%regex`` is written out as (its size grows with the square of
the chunks); a rule's ``%regex`` is the EBNF ``Substring`` automaton, of any size."""


def _substring_regex(chunks: list[str]) -> str:
    """The runs of consecutive chunks (the empty run included) as a lark /regex/: the runs from
    each chunk on, each a chain of optional continuations."""

    def spelled(chunk: str) -> str:
        """ASCII punctuation escaped with a backslash; other characters but ASCII letters and
        digits as \\U escapes (lark reads them as the character, never a regex operator)."""
        return "".join(
            ch if ch.isascii() and ch.isalnum() else "\\" + ch if " " <= ch <= "~" else f"\\U{ord(ch):08x}"
            for ch in chunk
        )

    runs = []
    for first in range(len(chunks)):
        chain = ""
        for chunk in reversed(chunks[first + 1 :]):
            chain = f"(?:{spelled(chunk)}{chain})?"
        runs.append(spelled(chunks[first]) + chain)
    return f"/(?:{'|'.join(runs)})?/" if runs else '""'


_HEX_ESCAPE_WIDTHS = {"x": 2, "u": 4, "U": 8}


def _is_hex(digits: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in digits)


def _start_body(text: str) -> str:
    """The body of the Lark text's `start` rule (its header line and the continuation lines)."""
    header = re.search(r"^[ \t]*[?!]?start[ \t]*(?:\[[^\n]*?\])?[ \t]*:(.*(?:\n[ \t]*\|.*)*)", text, re.MULTILINE)
    return header.group(1) if header else ""


def _python_regex(body: str) -> str:
    """A regex body with XGrammar's (ECMAScript's) escapes written the way Python's `re` reads
    them, matching the same characters: `\\u{1F600}` is `\\U0001F600`, `\\cA` (control-A) is
    `\\x01`, and a named group `(?<name>...)` is `(?P<name>...)`."""
    out, i, n = [], 0, len(body)
    while i < n:
        if body[i] == "\\" and body.startswith("u{", i + 1):
            end = body.find("}", i)
            digits = body[i + 3 : end] if end > 0 else ""
            if digits and _is_hex(digits) and int(digits, 16) <= 0x10FFFF:
                out.append(f"\\U{int(digits, 16):08X}")
                i = end + 1
                continue
        if body[i] == "\\" and body[i + 1 : i + 2] == "c" and body[i + 2 : i + 3].isalpha():
            out.append(f"\\x{ord(body[i + 2]) & 0x1F:02X}")
            i += 3
            continue
        if body[i] == "\\":
            out.append(body[i : i + 2])
            i += 2
            continue
        if body.startswith("(?<", i) and body[i + 3 : i + 4] not in ("=", "!"):
            out.append("(?P<")
            i += 3
            continue
        out.append(body[i])
        i += 1
    return "".join(out)


def _closing_brace(text: str, start: int) -> int:
    """The offset of the } closing the { at `start`, skipping strings, regexes and comments; -1."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c in '"/' and not text.startswith("//", i):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if text.startswith("//", i) or c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def translate_dialect(text: str, named: frozenset[str] = frozenset()) -> Translation:
    """XGrammar's Lark dialect in `text` rewritten into lark's syntax; `named` are the names
    `@name` may use.  Raises GrammarError (with the line and column) on what pushmask lacks."""
    if _DIALECT_HINTS.search(text) is None:
        return Translation(text, {}, True, SourceMap(text))
    return _Translator(text, named).run()
