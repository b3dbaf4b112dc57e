"""XGrammar's structural tags -> grammar IR: free text until a trigger, then a constrained body
and an end tag (tool calling), and the formats they are built from.

Accepted documents (the ones vLLM's tool parsers and its OpenAI server send):

* ``{"type": "structural_tag", "format": FORMAT}`` (also a pydantic object with ``model_dump``,
  or its JSON text);
* the legacy forms, all read by `root_format` here and nowhere else: vLLM's and SGLang's
  ``{"structures": [{"begin", "schema", "end"}, ...], "triggers": [...]}`` request format, and
  XGrammar's deprecated ``compile_structural_tag(tags, triggers)`` (a list of ``StructuralTagItem``
  or dicts with ``begin`` / ``schema`` / ``end`` plus a list of triggers; still accepted by
  XGrammar 0.2.8, as is its ``qwen_xml_parameter`` format below).

FORMAT ``type``s and their languages:

| type | language |
|---|---|
| ``const_string`` | the string ``value`` |
| ``json_schema`` | a JSON value of ``json_schema``; ``style`` ``qwen_xml`` / ``minimax_xml`` / ``glm_xml`` / ``deepseek_xml`` / ``deepseek_v4_1_xml`` / ``kimi_k3_xml`` / ``minimax_m3_xml`` / ``cohere_xml``: its properties as XML elements (grammar/xml_arguments.py) |
| ``regex`` / ``grammar`` | the regex ``pattern`` / the EBNF ``grammar`` (rule ``root``) |
| ``any_text`` | any text without the ``excludes``; inside a ``tag``, also without its end; ``max_tokens``: at most that many tokens start inside it (the matcher then closes it: a thinking budget) |
| ``token`` | one token, by id or by a special token's text (a token terminal) |
| ``exclude_token`` | one token of the vocabulary (text or special; stop tokens end the output instead) but the ``exclude_tokens`` and, as a tag's content, the tag's end tokens |
| ``any_tokens`` | ``any_text`` whose text holds none of the ``exclude_tokens``' texts (``max_tokens`` as above) |
| ``sequence`` / ``or`` | concatenation / alternation of ``elements`` |
| ``tag`` | ``begin`` ``content`` ``end`` (``begin`` / ``end`` a string or a token; ``end`` may list strings) |
| ``triggered_tags`` | text without the triggers (and ``excludes``), then any number of tags each followed by such text; the text and the trigger after it hold no excluded string and no other trigger (texts_before_triggers); ``at_least_one``: starts with a tag; ``stop_after_first``: ends after one tag |
| ``token_triggered_tags`` | the same with tags whose ``begin`` is a token, triggered by that token (``trigger_tokens``) |
| ``dispatch`` | text without the patterns (and ``excludes``), then a pattern and its format, then such text again (``loop``) or the end; text and pattern as text and trigger above |
| ``token_dispatch`` | the same with tokens as the patterns |
| ``tags_with_separator`` | tags joined by ``separator``, nothing else; ``at_least_one``, ``stop_after_first`` as above |
| ``optional`` / ``star`` / ``plus`` / ``repeat`` | repetitions of ``content`` |

Tokens are taken by id: text that spells a trigger token is free text, as in XGrammar.  Excluded
tokens (``exclude_tokens``) are kept out of free text by their text: a token without text (a
special token) is never text anyway, and the text of one that has it may not appear in the free
text at all, however it is tokenized (narrower than XGrammar, never wider).

What the automaton cannot express exactly (XML values that read two ways) raises
UnsupportedFormatError naming the format; nothing is widened.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..core.errors import GrammarError, UnsupportedFormatError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.recursion import load_json_text
from .ebnf import parse_ebnf
from .ir import (
    MAX_CODE_POINT,
    NOTHING,
    TOKEN_CLASS_BASE,
    CharFsm,
    Expr,
    Grammar,
    Ref,
    alt,
    char_class,
    lit,
    map_refs,
    opt,
    rep,
    seq,
    star,
    token_class_terminal,
    token_terminal,
)
from .json_checks import ValueCheck
from .json_options import JsonOptions
from .json_schema import json_schema_to_grammar
from .regex import parse_regex
from .tag_dispatch import dispatch_loop, text_without, texts_before_triggers
from .xml_arguments import xml_arguments

__all__ = ["structural_tag_to_grammar", "root_format", "UnsupportedFormatError"]


FORMAT_TYPES = frozenset(
    {
        "const_string",
        "json_schema",
        "regex",
        "grammar",
        "token",
        "exclude_token",
        "any_text",
        "any_tokens",
        "sequence",
        "or",
        "optional",
        "star",
        "plus",
        "repeat",
        "tag",
        "triggered_tags",
        "token_triggered_tags",
        "dispatch",
        "token_dispatch",
        "tags_with_separator",
        "qwen_xml_parameter",
    }
)
# XGrammar's json_schema styles, in the order its error message lists them
JSON_SCHEMA_STYLES = (
    "json",
    "qwen_xml",
    "minimax_xml",
    "minimax_m3_xml",
    "deepseek_xml",
    "glm_xml",
    "cohere_xml",
    "kimi_k3_xml",
    "deepseek_v4_1_xml",
)
MAX_FORMAT_DEPTH = 100  # XGrammar's bound on how deeply formats nest
INVALID = "Invalid structural tag error"  # how XGrammar's errors about the document begin


def structural_tag_to_grammar(
    tags: Any,
    triggers: Any = None,
    *,
    token_id: Callable | None = None,
    clock=None,
    limits: Limits = DEFAULT_LIMITS,
    json_options: JsonOptions | None = None,
) -> Grammar:
    """The grammar of a structural tag document (see the module docstring).  `token_id` resolves
    tokens given by text (TokenizerInfo.token_id); `json_options` (the defaults, strict mode, if
    None) compile the JSON bodies, a format's own ``any_order`` / ``max_whitespace_cnt`` over
    them; the regex and EBNF bodies are held to `limits`."""
    json_options = JsonOptions.of(json_options, {}, "structural_tag_to_grammar")
    fmt = root_format(tags, triggers)
    builder = _Builder(token_id, clock, json_options, limits)
    builder.rules["root"] = builder.format(fmt, "#/format")
    return Grammar(
        builder.rules,
        "root",
        checks=builder.checks,
        token_limits=builder.token_limits,
        token_classes=builder.token_classes,
        allow_empty=builder.allow_empty,
    )


def _plain(value: Any) -> Any:
    """Pydantic objects (xgrammar's StructuralTag and formats) as plain data."""
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True)
    return value


def root_format(tags: Any, triggers: Any = None) -> dict:
    """The format of a structural tag document, its legacy forms as triggered_tags."""
    if isinstance(tags, (str, bytes)):
        try:
            tags = json.loads(tags)
        except json.JSONDecodeError as exc:
            raise _invalid("#", f"Failed to parse JSON: the structural tag is not valid JSON: {exc}") from None
    tags = _plain(tags)
    if isinstance(tags, (list, tuple)):  # xgrammar's legacy compile_structural_tag(tags, triggers)
        if triggers is None:
            raise GrammarError(
                "a list of structural tag items needs the triggers: compile_structural_tag(items, triggers)"
            )
        return _legacy([_item_dict(item) for item in tags], triggers)
    if not isinstance(tags, dict):
        raise _invalid("#", f"Structural tag must be an object, got {type(tags).__name__}")
    if "structures" in tags:  # vLLM's and SGLang's legacy structural_tag response format
        fmt = _legacy([_item_dict(item) for item in tags["structures"]], tags.get("triggers"))
        return {**fmt, "at_least_one": bool(tags.get("at_least_one", False))}
    if "format" not in tags:
        if "type" in tags and tags.get("type") != "structural_tag":
            return tags  # a bare format
        raise _invalid(
            "#",
            'Structural tag must have a format field: {"type": "structural_tag", "format": {...}} '
            'or {"structures": [...], "triggers": [...]}',
        )
    if tags.get("type", "structural_tag") != "structural_tag":
        raise _invalid("#/type", f'Structural tag\'s type must be a string "structural_tag", got {tags["type"]!r}')
    return _plain(tags["format"])


def _item_dict(item: Any) -> dict:
    item = _plain(item)
    if isinstance(item, dict):
        return item
    schema = getattr(item, "schema_", None)
    if schema is None:
        schema = getattr(item, "schema", None)
    return {"begin": item.begin, "schema": schema, "end": item.end}


def _legacy(items: list[dict], triggers: Any) -> dict:
    """The legacy forms' items and triggers as one triggered_tags format, each item's schema as
    a json_schema tag (XGrammar's StructuralTag.from_legacy_structural_tag)."""
    if not isinstance(triggers, (list, tuple)) or not all(isinstance(t, str) for t in triggers):
        raise GrammarError(f"structural tag triggers must be a list of strings, got {triggers!r}")
    for item in items:
        missing = {"begin", "schema", "end"} - set(item)
        if missing:
            raise GrammarError(f"structural tag item {item!r} lacks {sorted(missing)}")
    return {
        "type": "triggered_tags",
        "triggers": list(triggers),
        "tags": [
            {
                "type": "tag",
                "begin": item["begin"],
                "end": item["end"],
                "content": {"type": "json_schema", "json_schema": _schema(item["schema"])},
            }
            for item in items
        ],
    }


def _schema(schema: Any) -> Any:
    if isinstance(schema, str):
        return load_json_text(schema, "schema")
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    return schema


class _Builder:
    """Turns formats into IR; sub-grammars (JSON Schema, EBNF, regex) keep their rules under a
    fresh prefix."""

    def __init__(self, token_id, clock, json_options: JsonOptions, limits: Limits):
        self.token_id = token_id
        self.limits = limits
        self.clock = clock
        self.json_options = json_options
        self.rules: dict[str, Expr] = {}
        self.checks: dict[str, ValueCheck] = {}  # the embedded JSON Schemas' value checks
        self.token_limits: dict[str, int] = {}  # any_text rules with a token budget
        self.token_classes: dict[int, frozenset[int]] = {}  # exclude_token: class terminal -> excluded ids
        self.count = 0
        # json_schema excludes may leave no value (a required property named by an excluded
        # string): the empty language is then intended, as in XGrammar
        self.allow_empty = False

    def format(
        self, fmt: Any, where: str, end_text: list[str] | None = None, end_tokens: frozenset[int] = frozenset()
    ) -> Expr:
        """The IR of one format; `end_text` (inside a tag) is what any_text must stop before,
        `end_tokens` the tag's end tokens, which an exclude_token there leaves out (as XGrammar)."""
        fmt = _plain(fmt)
        if not isinstance(fmt, dict):
            raise _invalid(where, f"Format must be an object, got {fmt!r}")
        if "type" not in fmt:
            raise _invalid(where, f'Invalid format: a format is an object with a "type", got {fmt!r}')
        kind = fmt["type"]
        if not isinstance(kind, str):
            raise _invalid(where, f"Format's type must be a string, got {kind!r}")
        if kind not in FORMAT_TYPES:
            raise _invalid(where, f"Format type not recognized: {kind}")
        # Formats nest by recursion here: bounded as XGrammar bounds them (its tests pin the depth).
        depth = where.count("/content") + where.count("/elements/") + where.count("/tags/") + where.count("/rules/")
        if depth > MAX_FORMAT_DEPTH:
            raise _invalid(where, f"Formats are nested deeper than {MAX_FORMAT_DEPTH} levels")
        if kind in ("any_text", "any_tokens"):
            return self._any_text(fmt, where, end_text or [])
        if kind == "exclude_token":
            return self._exclude_token(fmt, where, end_tokens)
        return getattr(self, "_" + kind)(fmt, where)

    # -- leaves ---------------------------------------------------------------------------------

    def _const_string(self, fmt, where):
        return lit(_string(fmt, "value", where))

    def _json_schema(self, fmt, where):
        style = fmt.get("style", "json")
        if style not in JSON_SCHEMA_STYLES:
            styles = ", ".join(f'"{s}"' for s in JSON_SCHEMA_STYLES[:-1])
            raise _invalid(where, f'style must be {styles}, or "{JSON_SCHEMA_STYLES[-1]}", got {style!r}')
        excludes = fmt.get("excludes", [])
        if not isinstance(excludes, list) or not all(isinstance(e, str) and e for e in excludes):
            raise _invalid(
                where, f"JSONSchema format's excludes must be an array of non-empty strings, got {excludes!r}"
            )
        self.allow_empty = self.allow_empty or bool(excludes)
        if style != "json" and any(e != e.strip() for e in excludes):
            raise _invalid(
                where, f"JSONSchema format's excludes must not start or end with formatting whitespace in {style}"
            )
        options = self.json_options
        if fmt.get("any_order"):
            options = options.replace(property_order="any")
        if fmt.get("max_whitespace_cnt") is not None:
            options = options.replace(max_whitespace=int(fmt["max_whitespace_cnt"]))
        schema = fmt.get("json_schema")
        if isinstance(schema, str):
            try:
                schema = _schema(schema)
            except json.JSONDecodeError:
                schema = None  # not JSON text: the error below
        if not isinstance(schema, (dict, bool)) and not (
            isinstance(schema, type) and hasattr(schema, "model_json_schema")
        ):
            raise _invalid(
                where,
                f"JSON schema format must have a json_schema field with a object or boolean value, got {schema!r}",
            )
        schema = _schema(schema)
        if style != "json":
            # XML element values: a bare JSON scalar, no whitespace around it
            value_options = options.replace(root_whitespace=False)
            return xml_arguments(
                schema,
                style,
                lambda sub: self._embed(
                    json_schema_to_grammar(sub, value_options, clock=self.clock, limits=self.limits)
                ),
                f"{where}/json_schema",
                excludes,
                any_order=bool(fmt.get("any_order")),
                rule=self._rule,
            )
        if excludes:
            return self._json_without(schema, excludes, options, f"{where}/json_schema")
        return self._embed(json_schema_to_grammar(schema, options, clock=self.clock, limits=self.limits))

    def _json_without(self, schema: Any, excludes: list[str], options: JsonOptions, where: str) -> Expr:
        """A JSON value of `schema` whose strings (keys and literals included) hold none of
        `excludes` as written (XGrammar's json_schema ``excludes``; JsonOptions.string_excludes).
        A schema the exclusions leave without a value is the empty language, as in XGrammar; one
        without a value anyway stays an error."""
        filtered = options.replace(string_excludes=tuple(excludes), unsatisfiable="empty")
        grammar = json_schema_to_grammar(schema, filtered, clock=self.clock, limits=self.limits)
        if grammar.rules[grammar.root] == NOTHING:
            # the schema's own error, if it has no value anyway; else the exclusions left none
            json_schema_to_grammar(schema, options, clock=self.clock, limits=self.limits)
            return NOTHING
        return self._embed(grammar)

    def _qwen_xml_parameter(self, fmt, where):
        """XGrammar's deprecated name (still read by XGrammar 0.2.8) for a json_schema format in
        style qwen_xml."""
        return self._json_schema({**fmt, "type": "json_schema", "style": "qwen_xml"}, where)

    def _regex(self, fmt, where):
        return self._embed(
            parse_regex(_string(fmt, "pattern", where), self.limits.max_rule_states, self.limits.max_nesting)
        )

    def _grammar(self, fmt, where):
        grammar = parse_ebnf(
            _string(fmt, "grammar", where),
            max_nesting=self.limits.max_nesting,
            token_id=self.token_id,
            max_repeat=self.limits.max_repeat,
        )
        if grammar.token_classes:
            raise UnsupportedFormatError(
                f"{where}: ExcludeToken / TokenTagDispatch inside a grammar format are not supported; "
                "use an exclude_token or token_dispatch format"
            )
        return self._embed(grammar)

    def _token(self, fmt, where):
        token = fmt.get("token")
        if isinstance(token, (float, bool)):
            raise _invalid(where, f"Token ID must be an integer, got {token!r}")
        if not isinstance(token, (int, str)):
            raise _invalid(
                where, f"TokenFormat's token must be an integer or string (an id or a token's text), got {token!r}"
            )
        if self.token_id is None:
            if isinstance(token, str):
                raise _invalid(where, f"token {token!r} needs a tokenizer to resolve it")
            return token_terminal(token)
        try:
            return token_terminal(int(self.token_id(token)))
        except ValueError as exc:
            raise _invalid(where, str(exc)) from None

    def _exclude_token(self, fmt, where, end_tokens: frozenset[int] = frozenset()):
        """One token of any kind (text or special, never a stop token) but the excluded ones and
        the enclosing tag's end tokens: a token-class terminal the matcher takes by id
        (masks/compiler.py)."""
        tokens = fmt.get("exclude_tokens", [])
        if not isinstance(tokens, (list, tuple)):
            raise _invalid(where, f'"exclude_tokens" must be a list of token ids or texts, got {tokens!r}')
        excluded = end_tokens | {self._token_id(t, f"{where}/exclude_tokens/{i}") for i, t in enumerate(tokens)}
        known = {v: k for k, v in self.token_classes.items()}
        if excluded not in known:
            terminal = token_class_terminal(len(self.token_classes))
            known[excluded] = TOKEN_CLASS_BASE + len(self.token_classes)
            self.token_classes[known[excluded]] = excluded
            return terminal
        return token_class_terminal(known[excluded] - TOKEN_CLASS_BASE)

    def _any_text(self, fmt, where, end_text: list[str]):
        if fmt["type"] == "any_tokens":
            excludes = self._token_texts(fmt.get("exclude_tokens", []), where)
        else:
            excludes = _strings(fmt.get("excludes", fmt.get("excluded_str", [])), where, "excludes")
        max_chars = fmt.get("max_chars")
        avoid = [s for s in excludes + end_text if s]
        if max_chars is None:
            text = text_without(avoid)
        elif avoid:
            without = text_without(avoid)
            assert isinstance(without, CharFsm)  # some strings to avoid: an automaton
            text = _at_most(without, _count(max_chars, where, "max_chars", fmt["type"]), self.limits, where)
        else:
            text = rep(char_class([(0, MAX_CODE_POINT)]), 0, _count(max_chars, where, "max_chars", fmt["type"]))
        max_tokens = fmt.get("max_tokens")
        if max_tokens is None:
            return text
        rule = self._rule(text)  # the matcher counts the tokens that start inside this rule
        self.token_limits[rule.name] = _count(max_tokens, where, "max_tokens", fmt["type"])
        return rule

    def _token_texts(self, tokens: Any, where: str) -> list[str]:
        """The texts of excluded tokens (what free text must not hold).  A token without text (a
        special token) is never free text anyway; without a vocabulary, a token named by text
        excludes that text and one named by id nothing (request validation only)."""
        if not isinstance(tokens, (list, tuple)):
            raise _invalid(where, f'"exclude_tokens" must be a list of token ids or texts, got {tokens!r}')
        vocab = getattr(getattr(self.token_id, "__self__", None), "decoded_vocab", None)
        texts = []
        for token in tokens:
            self._token({"token": token}, where)  # one token of the vocabulary, or a clear error
            if vocab is None:
                if isinstance(token, str):
                    texts.append(token)
                continue
            data = vocab[int(self.token_id(token))]
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                raise UnsupportedFormatError(
                    f"{where}: excluded token {token!r} is not whole UTF-8 text "
                    f"({data!r}); exclude it by a longer text instead"
                ) from None
            if text:
                texts.append(text)
        return texts

    # -- combinators ----------------------------------------------------------------------------

    def _sequence(self, fmt, where):
        elements = _list(fmt, "elements", where)
        return seq(*(self.format(e, f"{where}/elements/{i}") for i, e in enumerate(elements)))

    def _or(self, fmt, where):
        elements = _list(fmt, "elements", where)
        return alt(*(self.format(e, f"{where}/elements/{i}") for i, e in enumerate(elements)))

    def _optional(self, fmt, where):
        return opt(self.format(fmt.get("content"), f"{where}/content"))

    def _star(self, fmt, where):
        return star(self.format(fmt.get("content"), f"{where}/content"))

    def _plus(self, fmt, where):
        return rep(self.format(fmt.get("content"), f"{where}/content"), 1, None)

    def _repeat(self, fmt, where):
        lo, hi = fmt.get("min", 0), fmt.get("max", -1)
        hi = -1 if hi is None else hi
        for key, value in (("min", lo), ("max", hi)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise _invalid(where, f"Repeat {key} must be an integer, got {value!r}")
        if lo < 0:
            raise _invalid(where, f"Repeat min must be >= 0, got {lo}")
        if hi < -1:
            raise _invalid(where, f"Repeat max must be -1 (unbounded) or >= 0, got {hi}")
        if hi != -1 and lo > hi:
            raise _invalid(where, f"Repeat min must be <= max, got min {lo} and max {hi}")
        return rep(self.format(fmt.get("content"), f"{where}/content"), lo, None if hi == -1 else hi)

    def _tag(self, fmt, where):
        begin = self._tag_end(fmt.get("begin"), f"{where}/begin", "Tag format's begin field must be a string")
        if "content" not in fmt:
            raise _invalid(where, "Tag format must have a content field")
        if "end" not in fmt:
            raise _invalid(where, "Tag format must have an end field")
        ends = fmt.get("end")
        if ends == []:
            raise _invalid(f"{where}/end", "Tag format's end array must be non-empty")
        end_texts = [ends] if isinstance(ends, str) else ends if isinstance(ends, list) else []
        end = (
            alt(*(self._tag_end(e, f"{where}/end", _END_FIELD) for e in end_texts))
            if isinstance(ends, list)
            else self._tag_end(ends, f"{where}/end", _END_FIELD)
        )
        text_ends = [e for e in end_texts if isinstance(e, str) and e]
        token_ends = frozenset(
            self._token_id(e.get("token"), f"{where}/end")
            for e in map(_plain, ends if isinstance(ends, list) else [ends])
            if isinstance(e, dict) and e.get("type") == "token"
        )
        if not text_ends and not token_ends and _runs_to_the_end(_plain(fmt.get("content"))):
            raise _invalid(
                f"{where}/end",
                "Tag format with unlimited content (any_text, triggered_tags or tags_with_separator, which "
                "run until the tag's end) must have a non-empty end",
            )
        content = self.format(fmt.get("content"), f"{where}/content", end_text=text_ends, end_tokens=token_ends)
        return seq(begin, content, end)

    def _tag_end(self, value, where, field: str):
        """A tag's begin or end (a string or a token format); `field` words the error."""
        if isinstance(value, str):
            return lit(value)
        value = _plain(value)
        if isinstance(value, dict) and value.get("type") == "token":
            return self._token(value, where)
        raise _invalid(where, f"{field} (or a token format), got {value!r}")

    def _tags(self, fmt, where) -> list[Expr]:
        tags = _list(fmt, "tags", where)
        return [self._tag(_plain(t), f"{where}/tags/{i}") for i, t in enumerate(tags)]

    def _triggered_tags(self, fmt, where):
        _check_flags(fmt, where)
        triggers = fmt.get("triggers")
        if not isinstance(triggers, (list, tuple)):
            raise _invalid(where, f"Triggered tags format must have a triggers field with an array, got {triggers!r}")
        if not triggers:
            raise _invalid(where, "Triggered tags format's triggers must be non-empty")
        if not all(isinstance(t, str) and t for t in triggers):
            raise _invalid(where, f"Triggered tags format's triggers must be non-empty strings, got {triggers!r}")
        triggers = list(triggers)
        tags = _list(fmt, "tags", where)
        for i, tag in enumerate(tags):
            begin = _plain(tag).get("begin")
            if not isinstance(begin, str):
                raise UnsupportedFormatError(
                    f"{where}/tags/{i}: triggered_tags needs string begin tags (token-level triggers are not supported)"
                )
            matching = [t for t in triggers if begin.startswith(t)]
            if len(matching) != 1:
                raise _invalid(
                    f"{where}/tags/{i}",
                    f"begin {begin!r} must start with exactly one trigger of {triggers!r} (it starts with {len(matching)})",
                )
        excludes = _strings(fmt.get("excludes", []), where, "excludes")
        text = self._rule(text_without(triggers + excludes))
        tags = self._tags(fmt, where)
        begins = [_plain(tag).get("begin") for tag in _list(fmt, "tags", where)]
        led = [
            seq(self._rule(before), alt(*(tag for tag, begin in zip(tags, begins) if begin.startswith(trigger))))
            for trigger, before in texts_before_triggers(triggers, excludes).items()
            if any(begin.startswith(trigger) for begin in begins)
        ]
        return self._repeated_tags(fmt, text, self._rule(alt(*tags)), alt(*led))

    @staticmethod
    def _repeated_tags(fmt, text: Expr, tag: Expr, led_tag: Expr) -> Expr:
        """Free text and tags as (token_)triggered_tags' at_least_one and stop_after_first say;
        `led_tag`: a tag with the free text before it."""
        at_least_one, stop_after_first = bool(fmt.get("at_least_one")), bool(fmt.get("stop_after_first"))
        if stop_after_first:
            return tag if at_least_one else alt(text, led_tag)
        if at_least_one:
            return seq(tag, star(led_tag), text)
        return seq(star(led_tag), text)

    def _token_triggered_tags(self, fmt, where):
        _check_flags(fmt, where)
        triggers = fmt.get("trigger_tokens")
        if not isinstance(triggers, (list, tuple)) or not triggers:
            raise _invalid(where, f"token_triggered_tags: trigger_tokens must be non-empty, got {triggers!r}")
        trigger_ids = {self._token_id(t, f"{where}/trigger_tokens") for t in triggers}
        for i, tag in enumerate(_list(fmt, "tags", where)):
            begin = _plain(_plain(tag).get("begin"))
            if not (isinstance(begin, dict) and begin.get("type") == "token"):
                raise _invalid(
                    f"{where}/tags/{i}",
                    "Tags in token_triggered_tags must have a token format begin, not a string "
                    "(token_triggered_tags needs tags that begin with a token)",
                )
            if self._token_id(begin.get("token"), f"{where}/tags/{i}/begin") not in trigger_ids:
                raise _invalid(
                    f"{where}/tags/{i}",
                    f"begin token {begin.get('token')!r} is not one of the trigger_tokens {list(triggers)!r}",
                )
        text = self._rule(text_without(self._token_texts(fmt.get("exclude_tokens", []), where)))
        tag = self._rule(alt(*self._tags(fmt, where)))
        return self._repeated_tags(fmt, text, tag, seq(text, tag))

    def _dispatch(self, fmt, where):
        rules = _list(fmt, "rules", where)
        patterns, branches = [], []
        for i, pair in enumerate(rules):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise _invalid(f"{where}/rules/{i}", f"a dispatch rule is a [pattern, format] pair, got {pair!r}")
            pattern, content = pair
            if fmt["type"] == "token_dispatch":
                head = self._token({"token": pattern}, f"{where}/rules/{i}/0")
            elif isinstance(pattern, str) and pattern:
                head = lit(pattern)
                patterns.append(pattern)
            else:
                raise _invalid(f"{where}/rules/{i}", f"a dispatch pattern is a non-empty string, got {pattern!r}")
            branches.append(seq(head, self.format(content, f"{where}/rules/{i}/1")))
        loop = fmt.get("loop", True)
        if fmt["type"] == "token_dispatch":
            text = self._rule(text_without(self._token_texts(fmt.get("exclude_tokens", []), where)))
            return dispatch_loop(text, seq(text, self._rule(alt(*branches))), loop)
        excludes = _strings(fmt.get("excludes", []), where, "excludes")
        befores = texts_before_triggers(patterns, excludes)
        led = [seq(self._rule(befores[p]), branch) for p, branch in zip(patterns, branches) if p in befores]
        return dispatch_loop(self._rule(text_without(patterns + excludes)), alt(*led), loop)

    _token_dispatch = _dispatch

    def _token_id(self, token, where) -> int:
        """A token's id (as _token resolves it) for comparing tokens named by text and by id."""
        self._token({"token": token}, where)  # a clear error for a token the vocabulary lacks
        return int(self.token_id(token)) if self.token_id is not None else token

    def _tags_with_separator(self, fmt, where):
        _check_flags(fmt, where)
        tag = self._rule(alt(*self._tags(fmt, where)))
        separator = fmt.get("separator")
        if not isinstance(separator, str):
            raise _invalid(where, f"Tags with separator format's separator field must be a string, got {separator!r}")
        separator = lit(separator)
        at_least_one, stop_after_first = bool(fmt.get("at_least_one")), bool(fmt.get("stop_after_first"))
        body = tag if stop_after_first else seq(tag, star(seq(separator, tag)))
        return body if at_least_one else opt(body)

    # -- helpers --------------------------------------------------------------------------------

    def _rule(self, expr: Expr, name: str | None = None) -> Ref:
        """expr as a rule of its own (shared where it is used twice); with `name` (a rule this
        method made), that rule's body replaced by expr (a recursive rule defined after its uses)."""
        if name is None:
            self.count += 1
            name = f"st{self.count}"
        self.rules[name] = expr
        return Ref(name)

    def _embed(self, grammar: Grammar) -> Ref:
        """A sub-grammar's rules under a fresh prefix; a reference to its root."""
        self.count += 1
        prefix = f"st{self.count}_"
        for name, body in grammar.rules.items():
            self.rules[prefix + name] = map_refs(body, lambda r: Ref(prefix + r.name))
        self.checks.update((prefix + name, check) for name, check in grammar.checks.items())
        return Ref(prefix + grammar.root)


_FORMAT_NAMES = {  # as XGrammar's errors name the formats
    "const_string": "ConstString format",
    "regex": "Regex format",
    "grammar": "Grammar format",
    "sequence": "Sequence format",
    "or": "Or format",
    "triggered_tags": "Triggered tags format",
    "token_triggered_tags": "TokenTriggeredTagsFormat",
    "tags_with_separator": "Tags with separator format",
    "dispatch": "TagDispatch format",
    "token_dispatch": "TokenTagDispatch format",
}
_END_FIELD = "Tag format's end field must be a string or array of strings"
_INT32_MAX = 2**31 - 1


def _runs_to_the_end(fmt: Any) -> bool:
    """Whether a tag's content format stops only at the tag's end (XGrammar's unlimited content):
    text without a bound or an excluded string or token (which a dispatch around the tag may
    take next), or tags that repeat until then."""
    if not isinstance(fmt, dict):
        return False
    kind = fmt.get("type")
    if kind in ("any_text", "any_tokens"):
        return not any(fmt.get(key) for key in ("max_chars", "max_tokens", "excludes", "exclude_tokens"))
    return kind in ("triggered_tags", "tags_with_separator") and not fmt.get("stop_after_first")


def _invalid(where: str, message: str) -> GrammarError:
    """An error in the structural tag document, worded as XGrammar words it (its tests match the
    words), with the JSON pointer of the bad format."""
    return GrammarError(f"{INVALID}: {where}: {message}")


def _check_flags(fmt: dict, where: str) -> None:
    """A tags format's at_least_one / stop_after_first are booleans."""
    for flag in ("at_least_one", "stop_after_first"):
        if not isinstance(fmt.get(flag, False), bool):
            raise _invalid(where, f"{flag} must be a boolean, got {fmt[flag]!r}")


def _count(value: Any, where: str, key: str, kind: str) -> int:
    """A budget field: a non-negative 32-bit integer, as XGrammar holds it."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
        raise _invalid(where, f"{key} in {kind} must be a non-negative 32-bit integer or null, got {value!r}")
    return value


def _string(fmt: dict, key: str, where: str) -> str:
    value = fmt.get(key)
    if not isinstance(value, str):
        raise _invalid(where, f"{_FORMAT_NAMES[fmt['type']]} must have a {key} field with a string, got {value!r}")
    return value


def _strings(value: Any, where: str, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _invalid(where, f'"{key}" must be a list of strings, got {value!r}')
    return [v for v in value]


def _list(fmt: dict, key: str, where: str) -> list:
    """A format's non-empty list field (elements, tags, rules)."""
    value, name = fmt.get(key), _FORMAT_NAMES[fmt["type"]]
    if not isinstance(value, (list, tuple)):
        article = "an" if key[0] in "aeiou" else "a"
        raise _invalid(where, f"{name} must have {article} {key} field with an array, got {value!r}")
    if not value:
        if key == "elements":
            raise _invalid(where, f"{name} must have at least one element")
        raise _invalid(where, f"{name}'s {key} must be non-empty")
    return list(value)


def _at_most(fsm: CharFsm, count: int, limits: Limits, where: str) -> CharFsm:
    """The texts of `fsm` of at most `count` code points: one copy of the automaton per number of
    characters read, the last copy without transitions (the bound is exact, never widened)."""
    states = 1 + max([fsm.initial, *fsm.finals, *(t[0] for t in fsm.transitions), *(t[3] for t in fsm.transitions)])
    if states * (count + 1) > limits.max_rule_states:
        raise UnsupportedFormatError(
            f"{where}: any_text with max_chars={count} and excluded strings or an end tag needs "
            f"{states * (count + 1)} automaton states, more than max_rule_states={limits.max_rule_states}"
        )
    transitions = tuple(
        sorted(
            (source + read * states, lo, hi, target + (read + 1) * states)
            for read in range(count)
            for source, lo, hi, target in fsm.transitions
        )
    )
    finals = frozenset(final + read * states for read in range(count + 1) for final in fsm.finals)
    return CharFsm(fsm.initial, finals, transitions)
