"""Tool-call arguments written as XML elements (structural tags' ``json_schema`` styles
``qwen_xml``, ``minimax_xml``, ``glm_xml``, ``deepseek_xml``, ``deepseek_v4_1_xml``,
``kimi_k3_xml``, ``minimax_m3_xml``, ``cohere_xml``), as grammar IR.

One element per declared property of the object schema, in declaration order, the required ones
present, then any number of undeclared members where ``additionalProperties`` allows them (``{}``
and ``{"type": "object"}`` are any parameters, as XGrammar's strict mode reads them): named by
XGrammar's ``[a-zA-Z_][a-zA-Z0-9_]*`` but never a declared name, valued as the
``additionalProperties`` schema says; a string property's value is the raw text (no quotes, no escapes), any other value its
JSON text, as the models' templates write them and the servers' parsers read them back:

| style | element |
|---|---|
| ``qwen_xml`` | ``<parameter=KEY>\\nVALUE\\n</parameter>`` (the parsers strip one newline each side) |
| ``minimax_xml`` | ``<parameter name="KEY">VALUE</parameter>`` |
| ``glm_xml`` | ``<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>`` (a newline may sit between) |
| ``deepseek_xml`` | ``<｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>`` (``"false"``: a JSON value) |
| ``deepseek_v4_1_xml`` | the same with ``<｜DSML｜ parameter`` and ``</｜DSML｜ parameter>`` |
| ``kimi_k3_xml`` | ``<|open|>argument key="KEY" type="TYPE"<|sep|>VALUE<|close|>argument<|sep|>`` (KEY with ``&`` and ``"`` as ``&amp;`` / ``&quot;``; TYPE the value's JSON type: ``string`` raw text, ``number`` for integers too, ``boolean``, ``null``) |

Each element may be preceded by one newline, and the last followed by one.  Raw string values are held to the string's
constraints (minLength, maxLength, pattern, format, enum, const) and never hold text the parsers
would read as an element's end, the next element's start or the call's tags: no ``<`` followed by
a letter or ``_``, nor by optional whitespace and ``/`` or ``p`` (narrower than the parsers
need, never wider).  A value that
could be read either way (a schema allowing strings and other types, except in DeepSeek's and
Kimi-K3's styles, whose ``string`` / ``type`` mark says which), or a JSON value that may
hold strings (objects, arrays: their strings could spell an element's end), raises
UnsupportedFormatError naming the property: nothing is widened.

A root ``const`` object (or ``enum`` of objects) is that fixed parameter list (each in its
declared order).  With ``any_order`` the declared elements come in any order, each at most
once and the required ones present, undeclared ones anywhere between (2^n states for n
declared members, up to ANY_ORDER_MAX_MEMBERS as JSON objects).

``minimax_m3_xml`` nests instead (see _m3_arguments): every value is elements
``]<]minimax[>[<NAME>VALUE]<]minimax[>[</NAME>``, objects by member name, arrays as ``item``s.
``cohere_xml`` nests too (see _Cohere): ``<cofl:value name="KEY" type="TYPE">VALUE</cofl:value>``,
TYPE ``raw`` (a string), ``json`` (another scalar), ``dict`` (members' elements) or ``list``
(items' elements, without a name).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..core.errors import GrammarError, UnsupportedFormatError
from .ecma_regex import pattern_dfa
from .fsm.codepoint_dfa import Dfa, any_string_dfa, dfa_to_char_fsm, literal_dfa, without_strings
from .ir import NOTHING, Expr, Ref, alt, char_class, lit, opt, rep, seq, star
from .json_formats import format_dfa
from .json_schema.objects import ANY_ORDER_MAX_MEMBERS
from .json_strings import string_dfa

__all__ = ["XML_STYLES", "ANNOTATIONS", "xml_arguments", "check_xml_arguments"]

ANNOTATIONS = {"description", "title", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
_DEFINITIONS = ("$defs", "definitions")
_OBJECT_KEYS = (
    {"type", "properties", "required", "additionalProperties", *_DEFINITIONS} | ANNOTATIONS | {"$schema", "$id"}
)
_STRING_KEYS = {"type", "minLength", "maxLength", "pattern", "format", "enum", "const"} | ANNOTATIONS
_SCALARS = {"integer", "number", "boolean", "null"}
# Whitespace as the parsers' regex module reads \s, and more (a superset keeps the exclusion sound).
_SPACE = r"[\s\x1c-\x1f\x85\u180e\u200b]"
# A raw value never holds what may read as a tag: "<" then a letter or "_", or "<", optional
# whitespace and "/" or "p".  That covers the element's own end and the next element's start (the
# parsers allow whitespace inside them) and the call's tags (</function>, </invoke>, <tool_call>).
_MARKUP = f"<{_SPACE}*[/p]|<[A-Za-z_]"


# Cohere's value element (see _Cohere)
_COHERE_OPEN = "<cofl:value"
_COHERE_CLOSE = "</cofl:value>"

# The JSON type a value is written with, as Kimi-K3's type attribute names it ("string": raw text)
_TYPE_MARKS = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}


@dataclass(frozen=True)
class XmlStyle:
    """How one style writes an element: `key(name, mark)`, optionally `gap`, `value_open`, the
    value, `close`; `forbidden` an (unanchored) ECMA regex that a raw value must not match;
    `python_bools`: booleans may also be written True / False (the parser lower-cases them).
    `marks`: what the head says of the value, which the parser decodes it by: "" nothing,
    "string" raw text or JSON (DeepSeek's string="true"), "type" its JSON type (Kimi-K3),
    "cohere" how to read it (raw / json / dict / list; its values nest, see _Cohere)."""

    key: Callable[[str, str], str]  # (name as written, the value's _TYPE_MARKS mark) -> the element's head
    close: str
    forbidden: str
    python_bools: bool = False
    marks: str = ""
    gap: str = ""
    value_open: str = ""
    name_chars: str = "<>\"'="  # characters a declared name may not hold (the head could not be read back)
    escape: Callable[[str], str] = str  # a name as the head writes it


def _attribute(text: str) -> str:
    """`text` as Kimi-K3's renderer writes an attribute value (``&`` and ``"`` escaped)."""
    return text.replace("&", "&amp;").replace('"', "&quot;")


XML_STYLES: dict[str, XmlStyle] = {
    "qwen_xml": XmlStyle(lambda key, _: f"<parameter={key}>\n", "\n</parameter>", _MARKUP, python_bools=True),
    "minimax_xml": XmlStyle(lambda key, _: f'<parameter name="{key}">', "</parameter>", _MARKUP),
    "glm_xml": XmlStyle(
        lambda key, _: f"<arg_key>{key}</arg_key>", "</arg_value>", _MARKUP, gap="\n", value_open="<arg_value>"
    ),
    # DeepSeek's markup starts "<｜": kept out of raw values too
    "deepseek_xml": XmlStyle(
        lambda key, mark: f'<｜DSML｜parameter name="{key}" string="{str(mark == "string").lower()}">',
        "</｜DSML｜parameter>",
        _MARKUP + "|<｜",
        marks="string",
    ),
    "deepseek_v4_1_xml": XmlStyle(
        lambda key, mark: f'<｜DSML｜ parameter name="{key}" string="{str(mark == "string").lower()}">',
        "</｜DSML｜ parameter>",
        _MARKUP + "|<｜",
        marks="string",
    ),
    # Kimi-K3's markup is all made of its controls: a raw value holds none of them
    "kimi_k3_xml": XmlStyle(
        lambda key, mark: f'<|open|>argument key="{key}" type="{mark}"<|sep|>',
        "<|close|>argument<|sep|>",
        r"<\|(open|close|sep)\|>",
        marks="type",
        name_chars="",
        escape=_attribute,
    ),
    # Cohere: nested like MiniMax-M3 (see _Cohere); KEY with & < > " as entities, TYPE raw / json / dict / list
    "cohere_xml": XmlStyle(
        lambda key, mark: f'{_COHERE_OPEN} name="{key}" type="{mark}">',
        _COHERE_CLOSE,
        _MARKUP,
        marks="cohere",
        name_chars="\0\t\n\r",
        escape=lambda text: _attribute(text).replace("<", "&lt;").replace(">", "&gt;"),
    ),
}


def xml_arguments(
    schema: Any,
    style: str,
    json_value: Callable[[Any], Expr],
    where: str,
    excludes: list[str] | tuple = (),
    any_order: bool = False,
    rule: Callable[..., Expr] = lambda expr: expr,
) -> Expr:
    """The IR of the elements of `schema`'s declared properties in `style`; `json_value(schema)`
    is the IR of a JSON value of a (non-string) property schema.  `excludes` (XGrammar's json_schema
    ``excludes``): no raw value and no element name holds one of them (a scalar JSON value holds
    no string; a string with a ``pattern`` or ``format`` is held to that alone, as in XGrammar).
    `any_order`: the declared elements in any order; `rule(expr)` makes an expression a rule of
    its own (a reference), so that the states of that order are shared; ``cohere_xml`` also
    calls `rule(expr, name)` to define a rule made before (recursive values)."""
    if style == "minimax_m3_xml":
        return _m3_arguments(schema, json_value, where, excludes, any_order, rule)
    if style == "cohere_xml":
        return _Cohere(schema, json_value, where, any_order, rule).arguments(excludes)
    spec = XML_STYLES.get(style)
    if spec is None:
        raise _unsupported(
            where,
            f'json_schema style {style!r} is not supported (only "json", {", ".join(map(repr, [*XML_STYLES, "minimax_m3_xml"]))})',
        )
    literals = _literal_arguments(schema)
    if literals is not None:  # fixed parameter lists keep their order, as XGrammar's
        return alt(*(xml_arguments(fixed, style, json_value, where, excludes) for fixed in literals))
    properties, required, undeclared = _members(schema, style, where)
    definitions = {k: schema[k] for k in _DEFINITIONS if isinstance(schema, dict) and k in schema}
    if definitions:  # a JSON value's nested references resolve in the arguments' definitions
        json_value = partial(_with_definitions, json_value, definitions)
    undeclared = _resolved(undeclared, definitions, f"{where}/additionalProperties")
    forbidden = any_string_dfa().difference(pattern_dfa(spec.forbidden, where))
    filtered = forbidden.intersect(without_strings(excludes)) if excludes else forbidden
    elements = []
    for key, sub in properties.items():
        here = f"{where}/properties/{key}"
        name = spec.escape(key)
        if not key or any(c in name for c in spec.name_chars) or key != key.strip():
            raise _unsupported(here, f"property name {key!r} cannot be written as an XML element name")
        sub = _resolved(sub, definitions, here)
        values = _values(sub, spec, forbidden if has_own_pattern(sub) else filtered, json_value, here, definitions)
        element = _element(partial(_named_head, spec, name), values, spec)
        if any(e in name for e in excludes):
            element = NOTHING  # the element's name holds an excluded string: it cannot be written
        elements.append((element, key in required))
    extra = None
    if undeclared is not None:
        allowed = forbidden if has_own_pattern(undeclared) else filtered
        extra = _undeclared_element(undeclared, properties, spec, allowed, json_value, excludes, where, definitions)
    if any_order and elements and (len(elements) > 1 or extra is not None):
        body = _any_order(elements, extra, rule, where)
    else:
        body = seq(*(e if req else opt(e) for e, req in elements), star(extra) if extra is not None else lit(""))
    return seq(body, opt(lit("\n")))


def _literal_arguments(schema: Any) -> list[dict] | None:
    """A root ``const`` object or ``enum`` of objects as the object schemas of those fixed
    parameter lists (every member required, valued by its ``const``); None for other schemas."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return None
    keywords = set(schema) - ANNOTATIONS - {"type"}
    if keywords == {"const"}:
        listed = [schema["const"]]
    elif keywords == {"enum"} and isinstance(schema["enum"], list):
        listed = schema["enum"]
    else:
        return None
    if not all(isinstance(value, dict) for value in listed):
        return None
    return [{"properties": {k: {"const": v} for k, v in value.items()}, "required": list(value)} for value in listed]


def _any_order(elements: list[tuple[Expr, bool]], extra: Expr | None, rule: Callable[[Expr], Expr], where: str) -> Expr:
    """The declared `elements` (each with whether it is required) in any order, each at most
    once, the required ones present, undeclared elements (`extra`) anywhere between: one state
    per set of declared elements still to come (2^n), each a rule."""
    if len(elements) > ANY_ORDER_MAX_MEMBERS:
        raise _unsupported(
            where,
            f"any_order over {len(elements)} declared properties is not supported "
            f"(at most {ANY_ORDER_MAX_MEMBERS}: one state per subset written)",
        )
    refs = [rule(element) for element, _ in elements]
    between = star(rule(extra)) if extra is not None else lit("")
    states: dict[frozenset[int], Expr] = {}
    for size in range(len(elements) + 1):  # smaller sets first: each state refers to smaller ones
        for left in map(frozenset, itertools.combinations(range(len(elements)), size)):
            done = [] if any(elements[i][1] for i in left) else [lit("")]
            states[left] = rule(seq(between, alt(*done, *(seq(refs[i], states[left - {i}]) for i in sorted(left)))))
    return states[frozenset(range(len(elements)))]


# MiniMax-M3 writes every value as elements, nested: `]<]minimax[>[<NAME>VALUE]<]minimax[>[</NAME>`,
# an object's members by name, an array's items as `item`; strings raw, other scalars as JSON.
_M3_MARK = "]<]minimax[>["
_M3_SPACE = star(char_class([(0x09, 0x0A), (0x0D, 0x0D), (0x20, 0x20)]))  # between elements


def _m3_arguments(
    schema: Any,
    json_value: Callable[[Any], Expr],
    where: str,
    excludes: list[str] | tuple,
    any_order: bool,
    rule: Callable[[Expr], Expr],
) -> Expr:
    """The ``minimax_m3_xml`` arguments of `schema`: the root object's members as elements, each
    value written the same way recursively (XGrammar's layout).  Names must be fixed (no
    ``additionalProperties``, no unconstrained values), as XGrammar requires; a ``$ref`` cycle,
    or a value that could be read two ways, is refused."""
    if excludes:
        raise _unsupported(where, "JSONSchemaFormat.excludes is not supported for minimax_m3_xml")
    definitions = {k: schema[k] for k in _DEFINITIONS if isinstance(schema, dict) and k in schema}
    if definitions:
        json_value = partial(_with_definitions, json_value, definitions)
    literals = _literal_arguments(schema)
    if literals is not None:
        return alt(*(_m3_object(fixed, json_value, definitions, where, False, rule, frozenset()) for fixed in literals))
    return _m3_object(schema, json_value, definitions, where, any_order, rule, frozenset())


def _m3_object(
    schema: Any,
    json_value: Callable,
    definitions: dict,
    where: str,
    any_order: bool,
    rule: Callable[[Expr], Expr],
    expanding: frozenset[str],
) -> Expr:
    """An object's members as MiniMax-M3 elements, whitespace before each."""
    properties, required, undeclared = _members(schema, "minimax_m3_xml", where)
    if undeclared is not None:
        raise _unsupported(
            where, "minimax_m3_xml needs fixed property names (no additionalProperties or unconstrained objects)"
        )
    elements = []
    for key, sub in properties.items():
        here = f"{where}/properties/{key}"
        value = _m3_value(sub, json_value, definitions, here, any_order, rule, expanding)
        elements.append((seq(_M3_SPACE, _m3_element(key, value, here)), key in required))
    if any_order and len(elements) > 1:
        return _any_order(elements, None, rule, where)
    return seq(*(e if req else opt(e) for e, req in elements))


def _m3_value(
    schema: Any,
    json_value: Callable,
    definitions: dict,
    where: str,
    any_order: bool,
    rule: Callable[[Expr], Expr],
    expanding: frozenset[str],
) -> Expr:
    """One MiniMax-M3 value of `schema`: raw text for strings (never the namespace mark), JSON for
    other scalars, elements for objects and arrays, a literal as the model writes it."""
    target = schema.get("$ref") if isinstance(schema, dict) else None
    if target in expanding:
        raise _unsupported(where, f"a recursive $ref {target!r} is not supported in minimax_m3_xml")
    expanding = expanding | {target} if isinstance(target, str) else expanding
    schema = _resolved(schema, definitions, where)
    if isinstance(schema, dict) and set(schema) - ANNOTATIONS - {"type"} in ({"const"}, {"enum"}):
        listed = [schema["const"]] if "const" in schema else schema["enum"]
        if isinstance(listed, list) and listed:
            return alt(*(_m3_literal(value, where) for value in listed))
    kinds = _kinds(schema) if isinstance(schema, dict) else set()
    if kinds == {"string"}:
        text = any_string_dfa().difference(pattern_dfa(re.escape(_M3_MARK), where))
        return dfa_to_char_fsm(text.intersect(_string_values(schema, where)))
    if kinds and kinds <= _SCALARS:
        return json_value(schema)
    if kinds == {"object"} and isinstance(schema, dict):
        return rule(_m3_object(schema, json_value, definitions, where, any_order, rule, expanding))
    if kinds == {"array"} and isinstance(schema, dict) and not set(schema) - ANNOTATIONS - _M3_ARRAY_KEYS:
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if high == 0:
            return lit("")  # no item (``items`` may then be false)
        items = _m3_value(
            schema.get("items", {}), json_value, definitions, f"{where}/items", any_order, rule, expanding
        )
        written = seq(rep(seq(_M3_SPACE, _m3_element("item", items, where)), max(low, 1), high), _M3_SPACE)
        return written if low else alt(written, lit(""))
    raise _unsupported(
        where,
        f"a minimax_m3_xml value of types {sorted(kinds) or 'any'} cannot be written unambiguously "
        "(only strings, scalars, objects with fixed properties, arrays of items)",
    )


_M3_ARRAY_KEYS = {"type", "items", "minItems", "maxItems"}


def _m3_element(name: str, value: Expr, where: str) -> Expr:
    """`value` inside MiniMax-M3's element `name` (XGrammar's element names: not empty or blank,
    no ``>``, not starting with ``/``; the namespace mark neither)."""
    if not name.strip() or name.startswith("/") or ">" in name or _M3_MARK in name:
        raise _unsupported(where, f"Invalid minimax_m3_xml element name: {name!r}")
    return seq(lit(f"{_M3_MARK}<{name}>"), value, lit(f"{_M3_MARK}</{name}>"))


def _m3_literal(value: Any, where: str) -> Expr:
    """A ``const`` / ``enum`` value as MiniMax-M3 writes it: a string raw, an object's members
    and an array's items as elements, another scalar as JSON."""
    if isinstance(value, str):
        if _M3_MARK in value:
            raise _unsupported(where, "A minimax_m3_xml string literal cannot contain the namespace marker")
        return lit(value)
    if isinstance(value, dict):
        return seq(*(_m3_element(k, _m3_literal(v, where), where) for k, v in value.items()))
    if isinstance(value, list):
        return seq(*(_m3_element("item", _m3_literal(v, where), where) for v in value))
    return lit(json.dumps(value))


# Cohere writes every value as ``<cofl:value name="KEY" type="TYPE">VALUE</cofl:value>`` (list
# items without the name), TYPE saying how to read VALUE: ``raw`` text, ``json`` (a scalar, or a
# literal object / array as XGrammar writes it), ``dict`` (the members' elements) or ``list``
# (the items' elements); whitespace before each member and around what is not raw, as XGrammar.
# An undeclared member's name as written: any character but NUL, XML's < > & " (written as their
# entities) and the whitespace an XML parser turns into spaces in an attribute (so a name reads
# back as written: XGrammar's cohere_key less \t \n \r).
_COHERE_KEY = '([^\\x00\\t\\n\\r"&<>]|&amp;|&lt;|&gt;|&quot;)+'
_NUMBER_KEYS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
_OBJECT_ONLY = {
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "minProperties",
    "maxProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
}
_ARRAY_ONLY = {"items", "prefixItems", "minItems", "maxItems", "contains", "minContains", "maxContains"}
_ARRAY_ONLY |= {"uniqueItems", "unevaluatedItems"}
_STRING_ONLY = {"minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType"}
# keywords that constrain only values of other kinds than the key's (dropped from that kind's part)
_FOREIGN = {
    "string": _NUMBER_KEYS | _OBJECT_ONLY | _ARRAY_ONLY,
    "scalar": _STRING_ONLY | _OBJECT_ONLY | _ARRAY_ONLY,
    "object": _NUMBER_KEYS | _STRING_ONLY | _ARRAY_ONLY,
    "array": _NUMBER_KEYS | _STRING_ONLY | _OBJECT_ONLY,
}
_COHERE_ARRAY_KEYS = {"type", "items", "prefixItems", "minItems", "maxItems"}


class _Cohere:
    """The ``cohere_xml`` arguments of one schema: the root object's members as named value
    elements, every value written by its kind (XGrammar's layout, kept exact):

    * a string as ``raw`` text held to its constraints, never holding markup (_MARKUP);
    * an integer, number, boolean or null as its JSON under ``json``, whitespace around;
    * an object as ``dict``: its members' elements (declared ones in order, the required ones
      present, undeclared ones named by _COHERE_KEY but never a declared name);
    * an array as ``list``: its items' elements, without names, ``prefixItems`` / ``items`` /
      ``minItems`` / ``maxItems`` exact;
    * a value of any type (``{}``, ``true``) as any of these, recursively;
    * ``enum`` / ``const`` values as the model writes them (strings raw, other literals as
      compact JSON under ``json``); ``anyOf``, type lists, a one-schema ``allOf`` and a ``oneOf``
      whose branches have no kind in common as each branch; ``$ref``s (recursive ones too) to
      the arguments' definitions as one rule each.

    What would read two ways or widen the schema (``allOf`` of several schemas, an overlapping
    ``oneOf``, keywords the layout cannot hold) raises UnsupportedFormatError with its place."""

    def __init__(self, schema: Any, json_value: Callable, where: str, any_order: bool, rule: Callable[..., Expr]):
        self.schema = schema
        self.definitions = {k: schema[k] for k in _DEFINITIONS if isinstance(schema, dict) and k in schema}
        self.json_value = partial(_with_definitions, json_value, self.definitions) if self.definitions else json_value
        self.where = where
        self.any_order = any_order
        self.rule = rule
        self.spec = XML_STYLES["cohere_xml"]
        self.raw_text = any_string_dfa().difference(pattern_dfa(self.spec.forbidden, where))
        self.refs: dict[str, Expr] = {}  # a $ref's value suffix, one rule each
        self.any_value: Expr | None = None  # the suffix of a value of any type (one recursive rule)
        self.key_names = pattern_dfa(f"^{_COHERE_KEY}$", where)

    def arguments(self, excludes: list[str] | tuple) -> Expr:
        """The root: the members' elements (no wrapper); a root literal is that fixed list."""
        if excludes:
            raise _unsupported(self.where, "JSONSchemaFormat.excludes is not supported for cohere_xml")
        literals = _literal_arguments(self.schema)
        if literals is not None:
            any_order, self.any_order = self.any_order, False  # fixed lists keep their order
            fixed = alt(*(self._members(each, self.where) for each in literals))
            self.any_order = any_order
            return fixed
        return self._members(self.schema, self.where)

    # -- one value: ` type="TYPE">VALUE</cofl:value>` after the element's name ----------------------

    def suffix(self, schema: Any, where: str) -> Expr:
        """What follows an element's name for a value of `schema`: each way of writing it."""
        return alt(*self._suffixes(schema, where))

    def _suffixes(self, schema: Any, where: str) -> list[Expr]:
        if isinstance(schema, dict) and "$ref" in schema:
            return [self._reference(schema, where)]
        if schema is False:
            return []
        if schema is True or isinstance(schema, dict) and not set(schema) - ANNOTATIONS:
            return [self._any()]
        if not isinstance(schema, dict):
            raise _unsupported(where, f"a property schema is an object, got {schema!r}")
        keywords = set(schema) - ANNOTATIONS
        for combinator in ("allOf", "anyOf", "oneOf"):
            if combinator in schema:
                return self._combined(schema, combinator, keywords, where)
        if keywords <= {"type", "enum", "const"} and keywords & {"enum", "const"}:
            return self._literals(schema, where)
        kinds = _kinds(schema)
        if not kinds:
            raise _unsupported(
                where,
                f"a cohere_xml value of any type with {sorted(keywords)} cannot be written exactly "
                "(give it a type: string, integer, number, boolean, null, object or array)",
            )
        unknown = kinds - _SCALARS - {"string", "object", "array"}
        if unknown:
            raise _unsupported(where, f"unknown type {sorted(unknown)}")
        found = []
        if "string" in kinds:
            part = self._part(schema, {"string"}, "string")
            if part is not None:
                text = self.raw_text.intersect(_string_values(part, where))
                found.append(self._written("raw", dfa_to_char_fsm(text)))
        if kinds & _SCALARS:
            part = self._part(schema, kinds & _SCALARS, "scalar")
            if part is not None:
                found.append(self._written("json", self.json_value(part)))
        if "object" in kinds:
            part = self._part(schema, {"object"}, "object")
            if part is not None:
                found.append(self._written("dict", self.rule(self._members(part, where))))
        if "array" in kinds:
            part = self._part(schema, {"array"}, "array")
            if part is not None:
                found.append(self._written("list", self._items(part, where)))
        return found

    def _part(self, schema: dict, kinds: set[str], group: str) -> dict | None:
        """`schema` held to its values of `kinds`: the keywords of other kinds dropped (they
        constrain nothing here), ``type`` / ``enum`` / ``const`` narrowed; None where none is left."""
        part: dict | None = {k: v for k, v in schema.items() if k not in _FOREIGN[group]}
        if "type" in schema or "enum" in schema or "const" in schema:
            part = _narrowed(part, kinds)  # type: ignore[arg-type]
        if part is not None and group in ("object", "array") and "type" in part:
            part["type"] = group  # one kind: the layout reads it as a string
        return part

    def _written(self, mark: str, value: Expr) -> Expr:
        """` type="MARK">VALUE</cofl:value>`: raw text as it is, other values between whitespace."""
        if mark != "raw":
            value = seq(_M3_SPACE, value, _M3_SPACE)
        return seq(lit(f' type="{mark}">'), value, lit(self.spec.close))

    def _reference(self, schema: dict, where: str) -> Expr:
        """A ``$ref``'s value as one rule, made before its target is read (a recursive schema
        refers back to it)."""
        target = schema["$ref"]
        if not isinstance(target, str):
            raise _unsupported(where, f"$ref must be a string, got {target!r}")
        if target not in self.refs:
            resolved = _resolved(schema, self.definitions, where)  # chains of bare references, checked
            forward = self.rule(NOTHING)
            self.refs[target] = forward
            self.rule(self.suffix(resolved, where), forward.name)  # type: ignore[attr-defined]
        return self.refs[target]

    def _combined(self, schema: dict, combinator: str, keywords: set[str], where: str) -> list[Expr]:
        """``anyOf`` (and a ``oneOf`` whose branches share no kind, a one-schema ``allOf``) as
        each of its branches."""
        branches = schema[combinator]
        if not isinstance(branches, list) or not branches:
            raise _unsupported(where, f"{combinator} must be a non-empty list")
        if keywords != {combinator}:
            raise _unsupported(
                where, f"{combinator} beside {sorted(keywords - {combinator})} cannot be written exactly in cohere_xml"
            )
        if combinator == "allOf" and len(branches) != 1:
            raise _unsupported(
                where,
                "allOf of several schemas cannot be written exactly in cohere_xml (XGrammar widens it to any value)",
            )
        if combinator == "oneOf" and len(branches) > 1:
            seen: set[str] = set()
            for i, branch in enumerate(branches):
                resolved = _resolved(branch, self.definitions, f"{where}/oneOf/{i}")
                kinds = _kinds(resolved) if isinstance(resolved, dict) else set()
                kinds |= {"number"} if "integer" in kinds else set()
                kinds |= {"integer"} if "number" in kinds else set()
                if not kinds or kinds & seen:
                    raise _unsupported(
                        f"{where}/oneOf/{i}",
                        "oneOf branches that may share a value cannot be written exactly in cohere_xml "
                        "(only branches of different types)",
                    )
                seen |= kinds
        found: list[Expr] = []
        for i, branch in enumerate(branches):
            found += self._suffixes(branch, f"{where}/{combinator}/{i}")
        return found

    def _literals(self, schema: dict, where: str) -> list[Expr]:
        """``enum`` / ``const`` values (of the listed ``type``s): strings raw, others as compact JSON."""
        listed = schema["enum"] if "enum" in schema else [schema["const"]]
        if not isinstance(listed, list):
            raise _unsupported(where, "enum must be a list")
        if "enum" in schema and "const" in schema:
            listed = [v for v in listed if _json_equal(v, schema["const"])]
        if "type" in schema:
            kinds = _kinds({"type": schema["type"]})
            listed = [
                v for v in listed if _container_kind(v) in kinds or _container_kind(v) is None and _fits(v, kinds)
            ]
        strings = [v for v in listed if isinstance(v, str)]
        found = []
        if strings:
            found.append(self._written("raw", dfa_to_char_fsm(self.raw_text.intersect(literal_dfa(strings)))))
        others = [json.dumps(v, ensure_ascii=False, separators=(",", ":")) for v in listed if not isinstance(v, str)]
        texts = [text for text in dict.fromkeys(others) if not re.search(self.spec.forbidden, text)]
        if texts:
            found.append(self._written("json", alt(*map(lit, texts))))
        return found

    def _any(self) -> Expr:
        """A value of any type: raw text, a JSON scalar, a dict or list of such values (one rule)."""
        if self.any_value is None:
            forward = self.rule(NOTHING)
            self.any_value = forward
            scalar = self.json_value({"type": ["number", "boolean", "null"]})
            self.rule(
                alt(
                    self._written("raw", dfa_to_char_fsm(self.raw_text)),
                    self._written("json", scalar),
                    self._written("dict", self._any_members()),
                    self._written("list", star(seq(lit(_COHERE_OPEN), forward))),
                ),
                forward.name,  # type: ignore[attr-defined]
            )
        return self.any_value

    def _any_members(self, declared: dict | None = None) -> Expr:
        """Any number of members named by _COHERE_KEY, of any value."""
        return seq(star(seq(_M3_SPACE, self._undeclared(declared or {}, True, self.where))), _M3_SPACE)

    # -- elements --------------------------------------------------------------------------------

    def _name(self, key: str, where: str) -> str:
        """A declared name as Cohere writes it (& < > " as entities); one an XML parser would not
        read back as written is refused."""
        if not isinstance(key, str) or any(c in key for c in self.spec.name_chars):
            raise _unsupported(where, f"property name {key!r} cannot be written as a cohere_xml name")
        return self.spec.escape(key)

    def _undeclared(self, declared: dict, schema: Any, where: str) -> Expr:
        """One element of an undeclared member: named by _COHERE_KEY but no declared name, its
        value one of `schema` (``additionalProperties``)."""
        names = self.key_names.difference(literal_dfa([self._name(key, where) for key in declared]))
        value = self._any() if schema is True else self.suffix(schema, f"{where}/additionalProperties")
        return seq(lit(f'{_COHERE_OPEN} name="'), dfa_to_char_fsm(names), lit('"'), value)

    def _members(self, schema: Any, where: str) -> Expr:
        """An object's members as named elements, whitespace before each and after the last."""
        if schema is True or schema == {} or schema == {"type": "object"}:
            return self._any_members()
        properties, required, undeclared = _members(schema, "cohere_xml", where)
        elements = []
        for key, sub in properties.items():
            here = f"{where}/properties/{key}"
            head = lit(f'{_COHERE_OPEN} name="{self._name(key, here)}"')
            elements.append((seq(_M3_SPACE, head, self.suffix(sub, here)), key in required))
        extra = None if undeclared is None else seq(_M3_SPACE, self._undeclared(properties, undeclared, where))
        if self.any_order and elements and (len(elements) > 1 or extra is not None):
            body = _any_order(elements, extra, self.rule, where)
        else:
            body = seq(*(e if req else opt(e) for e, req in elements), star(extra) if extra is not None else lit(""))
        return seq(body, _M3_SPACE)

    def _items(self, schema: dict, where: str) -> Expr:
        """An array's items as unnamed elements, back to back (XGrammar's layout)."""
        extra = set(schema) - ANNOTATIONS - _COHERE_ARRAY_KEYS
        if extra:
            raise _unsupported(where, f"a cohere_xml list with {sorted(extra)} cannot be written exactly")
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", True)
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if not isinstance(prefix, list) or isinstance(items, list):
            raise _unsupported(where, "a cohere_xml list takes prefixItems as a list and items as one schema")
        if not isinstance(low, int) or high is not None and not isinstance(high, int):
            raise _unsupported(where, "minItems / maxItems must be integers")

        def item(sub: Any, here: str) -> Expr:
            return seq(lit(_COHERE_OPEN), self.suffix(sub, here))

        if high is not None and high < len(prefix):
            prefix = prefix[:high]
        # after the prefix: the rest of the items, as many as minItems / maxItems leave
        rest_high = None if high is None else high - len(prefix)
        rest = NOTHING if items is False else rep(item(items, f"{where}/items"), max(low - len(prefix), 0), rest_high)
        if items is False and low <= len(prefix):
            rest = lit("")
        written = rest
        for index in range(len(prefix) - 1, -1, -1):  # the prefix items, each ending the list after the minimum
            written = seq(item(prefix[index], f"{where}/prefixItems/{index}"), written)
            if index >= low:
                written = opt(written)
        return written


def _members(schema: Any, style: str, where: str) -> tuple[dict, list, Any]:
    """The declared properties, the required names, and the schema of undeclared members (None:
    none allowed).  As in XGrammar (strict mode): ``{}``, ``true`` and ``{"type": "object"}`` are
    any parameters; otherwise undeclared members need ``additionalProperties`` (true: any value)."""
    if schema is True or schema == {} or schema == {"type": "object"}:
        return {}, [], True
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise _unsupported(where, f"{style} arguments need an object schema")
    extra = set(schema) - _OBJECT_KEYS
    if extra:
        raise _unsupported(
            where,
            f"{style} arguments take properties, additionalProperties and $defs only; {sorted(extra)} cannot be written",
        )
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise _unsupported(where, f'{style} arguments need "properties" to be an object')
    required = schema.get("required", [])
    if not isinstance(required, list) or not set(required) <= set(properties):
        raise _unsupported(where, f"required {required!r} are not all declared properties")
    undeclared = schema.get("additionalProperties", False)
    return properties, required, None if undeclared is False else undeclared


def _undeclared_element(
    schema: Any,
    declared: dict,
    spec: XmlStyle,
    allowed: Dfa,
    json_value: Callable,
    excludes: list[str] | tuple,
    where: str,
    definitions: dict,
) -> Expr:
    """One element of an undeclared member: its name XGrammar's ``[a-zA-Z_][a-zA-Z0-9_]*`` but no
    declared name (an undeclared value must not stand in for a declared one) and holding no
    excluded string; its value one of `schema` (``additionalProperties``)."""
    here = f"{where}/additionalProperties"
    names = pattern_dfa("^[a-zA-Z_][a-zA-Z0-9_]*$", here).difference(literal_dfa(declared))
    if excludes:
        names = names.intersect(without_strings(excludes))
    values = _values({} if schema is True else schema, spec, allowed, json_value, here, definitions)

    def head(mark: str) -> Expr:
        before_name, after_name = spec.key("\0", mark).split("\0")
        return seq(lit(before_name), dfa_to_char_fsm(names), lit(after_name))

    return _element(head, values, spec)


def _resolved(schema: Any, definitions: dict, where: str) -> Any:
    """`schema` with its chain of local references (``{"$ref": "#/$defs/NAME"}``, or
    ``#/definitions/NAME``) followed to the definition; a reference beside other keywords, to
    elsewhere, or in a cycle is refused."""
    seen: set[str] = set()
    while isinstance(schema, dict) and "$ref" in schema:
        target = schema["$ref"]
        found = re.fullmatch(r"#/(\$defs|definitions)/([^/~]+)", target) if isinstance(target, str) else None
        if set(schema) - ANNOTATIONS - {"$ref"} or target in seen or found is None:
            raise _unsupported(
                where, f"$ref {target!r} (beside other keywords, in a cycle or not to a definition) is not supported"
            )
        if found[2] not in definitions.get(found[1], {}):
            raise _unsupported(where, f"$ref {target!r} names no definition of the arguments' schema")
        seen.add(target)
        schema = definitions[found[1]][found[2]]
    return schema


def _with_definitions(json_value: Callable[[Any], Expr], definitions: dict, schema: Any) -> Expr:
    """`json_value` of `schema` with the arguments' definitions beside it."""
    return json_value({**schema, **definitions} if isinstance(schema, dict) else schema)


def _named_head(spec: XmlStyle, name: str, mark: str) -> Expr:
    """The head of the element of the declared property written `name`."""
    return lit(spec.key(name, mark))


def _element(head: Callable[[str], Expr], values: list[tuple[Expr, str]], spec: XmlStyle) -> Expr:
    """One element: `head(mark)` (the name's part) and each of its `values` (the value's IR,
    the mark it is written under) as `spec` writes them, after an optional newline."""
    gap = opt(lit(spec.gap)) if spec.gap else lit("")
    written = [seq(head(mark), gap, lit(spec.value_open), value) for value, mark in values]
    return seq(opt(lit("\n")), alt(*written), lit(spec.close))


def check_xml_arguments(schema: Any, style: str, where: str) -> None:
    """Raise what xml_arguments raises for `schema` in `style` (UnsupportedFormatError naming
    the place), building nothing to keep."""
    rules: dict[str, Expr] = {}

    def rule(expr: Expr, name: str | None = None) -> Ref:
        name = name or f"r{len(rules)}"
        rules[name] = expr
        return Ref(name)

    xml_arguments(schema, style, lambda _: lit(""), where, rule=rule)


def _values(
    schema: Any, spec: XmlStyle, allowed: Dfa, json_value: Callable, where: str, definitions: dict
) -> list[tuple[Expr, str]]:
    """A property's values, each with the mark it is written under (``"string"``: raw text):
    raw for a schema of strings only, else JSON of a scalar schema; an ``anyOf`` (see _branches) of such
    schemas is each branch so.  In a style whose head marks the value (DeepSeek's ``string``,
    Kimi-K3's ``type``), strings and scalars may mix, each under its own mark, and in Kimi-K3's
    any value is raw text or a JSON scalar."""
    if schema is True or isinstance(schema, dict) and not set(schema) - ANNOTATIONS:
        # any value: the parsers read raw text as a string
        raw = [(dfa_to_char_fsm(allowed), "string")]
        if spec.marks == "type":
            return raw + _json_values([({"type": sorted(_SCALARS)}, _SCALARS)], spec, json_value)
        return raw
    if not isinstance(schema, dict):
        raise _unsupported(where, f"a property schema is an object, got {schema!r}")
    branches = _branches(schema, definitions, where, {})
    strings: list[dict] = []  # the branches' string parts
    scalars: list[tuple[dict, set[str]]] = []  # the branches' scalar parts, with their kinds
    for branch in branches:
        kinds = _kinds(branch) if isinstance(branch, dict) else set()
        if not kinds or not kinds <= _SCALARS | {"string"}:
            strings, scalars = [], []
            break
        if "string" in kinds:
            part = _narrowed({k: v for k, v in branch.items() if k in _STRING_KEYS}, {"string"})
            strings += [] if part is None else [branch if kinds == {"string"} else part]
        if kinds - {"string"}:
            part = _narrowed(branch, kinds - {"string"}) if "string" in kinds else branch
            scalars += [] if part is None else [(part, kinds - {"string"})]
    if not strings and not scalars or strings and scalars and not spec.marks:
        raise _unsupported(
            where,
            f"a value of types {sorted(_kinds(schema)) or 'any'} cannot be written unambiguously as "
            "XML text (only strings, or integers / numbers / booleans / null)",
        )
    values = []
    if strings:
        texts = _string_values(strings[0], where)
        for part in strings[1:]:
            texts = texts.union(_string_values(part, where))
        values.append((dfa_to_char_fsm(allowed.intersect(texts)), "string"))
    if spec.python_bools and scalars == [(schema, {"boolean"})] and set(schema) - ANNOTATIONS == {"type"}:
        return [(alt(lit("true"), lit("false"), lit("True"), lit("False")), "boolean")]
    return values + _json_values(scalars, spec, json_value)


def _branches(schema: Any, definitions: dict, where: str, seen: dict[str, list]) -> list:
    """The schemas whose values `schema` allows, with its ``anyOf`` (nested, or behind local
    ``$ref``s) flattened and repeats dropped; `seen` keeps each reference's branches (shared
    references stay linear)."""
    target = schema.get("$ref") if isinstance(schema, dict) else None
    if isinstance(target, str) and target in seen:
        return seen[target]
    resolved = _resolved(schema, definitions, where)
    if not (isinstance(resolved, dict) and set(resolved) - ANNOTATIONS == {"anyOf"}):
        found = [resolved]
    elif not isinstance(resolved["anyOf"], list):
        raise _unsupported(where, "anyOf must be a list")
    else:
        if isinstance(target, str):
            seen[target] = []  # a reference cycle through anyOf adds no value
        unique: dict[str, Any] = {}
        for i, branch in enumerate(resolved["anyOf"]):
            for leaf in _branches(branch, definitions, f"{where}/anyOf/{i}", seen):
                unique.setdefault(json.dumps(leaf, sort_keys=True, default=str), leaf)
        found = list(unique.values())
    if isinstance(target, str):
        seen[target] = found
    return found


def _json_values(scalars: list[tuple[dict, set[str]]], spec: XmlStyle, json_value: Callable) -> list[tuple[Expr, str]]:
    """The JSON values of the scalar schemas `scalars` (each with its kinds): one alternative,
    or, in a style whose head names the value's type (Kimi-K3), one per type it names."""
    if not scalars:
        return []
    if spec.marks != "type":
        return [(json_value(_any_of([part for part, _ in scalars])), "json")]
    values = []
    for mark in sorted({_TYPE_MARKS[kind] for _, kinds in scalars for kind in kinds}):
        parts = []
        for part, kinds in scalars:
            wanted = {kind for kind in kinds if _TYPE_MARKS[kind] == mark}
            narrowed = _narrowed(part, wanted) if wanted else None
            parts += [] if narrowed is None else [narrowed]
        if parts:
            values.append((json_value(_any_of(parts)), mark))
    return values


def _any_of(schemas: list[dict]) -> dict:
    """One schema of the values of any of `schemas`."""
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _narrowed(schema: dict, kinds: set[str]) -> dict | None:
    """`schema` held to the values of `kinds`: its ``type`` those kinds, its ``enum`` / ``const``
    those of them of these kinds; None where no listed value is left."""
    narrowed = dict(schema)
    if "type" in schema:
        narrowed["type"] = sorted(kinds)
    if isinstance(schema.get("enum"), list):
        narrowed["enum"] = [v for v in schema["enum"] if _fits(v, kinds)]
        if not narrowed["enum"]:
            return None
    if "const" in schema and not _fits(schema["const"], kinds):
        return None
    return narrowed


def _fits(value: Any, kinds: set[str]) -> bool:
    """Is the JSON `value` of one of `kinds` (an integer is a number too)?"""
    kind = _kind_of(value)
    return kind in kinds or kind == "integer" and "number" in kinds


def _kind_of(value: Any) -> str:
    """The JSON type of a JSON value (``integer`` for whole numbers, as JSON Schema counts them)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "integer" if float(value).is_integer() else "number"
    return {str: "string", type(None): "null"}.get(type(value), "object")


def has_own_pattern(schema: Any) -> bool:
    """A string schema with a ``pattern``, or a ``format`` pushmask knows: XGrammar holds such a
    string to that constraint alone and does not filter it by ``excludes``."""
    if not isinstance(schema, dict):
        return False
    return "pattern" in schema or isinstance(schema.get("format"), str) and format_dfa(schema["format"]) is not None


def _kinds(schema: dict) -> set[str]:
    """The JSON types a property's values may have, as far as its keywords say (empty: unknown)."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return set(declared)
    values = (
        schema["enum"] if isinstance(schema.get("enum"), list) else [schema["const"]] if "const" in schema else None
    )
    if values is None or set(schema) - ANNOTATIONS - {"enum", "const"}:
        return set()
    return {_kind_of(v) for v in values}


def _string_values(schema: dict, where: str) -> Dfa:
    """The decoded strings a string-only schema allows."""
    extra = set(schema) - _STRING_KEYS
    if extra:
        raise _unsupported(where, f"a raw string value with {sorted(extra)} is not supported")
    values = any_string_dfa()
    if "enum" in schema or "const" in schema:
        listed = schema["enum"] if "enum" in schema else [schema["const"]]
        if "enum" in schema and "const" in schema:
            listed = [v for v in listed if v == schema["const"]]
        values = literal_dfa([v for v in listed if isinstance(v, str)])
    constrained = string_dfa(
        min_length=schema.get("minLength"),
        max_length=schema.get("maxLength"),
        pattern=schema.get("pattern"),
        format=schema.get("format"),
        pointer=where,
    )
    return values if constrained is None else values.intersect(constrained)


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value (1 == 1.0), booleans apart from numbers, objects by members."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_json_equal, a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _container_kind(value: Any) -> str | None:
    """``object`` / ``array`` for a JSON object / array, None for other values."""
    return "object" if isinstance(value, dict) else "array" if isinstance(value, list) else None


def _unsupported(where: str, message: str) -> GrammarError:
    return UnsupportedFormatError(f"{where}: {message}")
