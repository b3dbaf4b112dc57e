"""Tool-call arguments written as XML elements (structural tags' ``json_schema`` styles
``qwen_xml``, ``minimax_xml``, ``glm_xml``, ``deepseek_xml``, ``deepseek_v4_1_xml``), as
grammar IR.

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

Each element may be preceded by one newline, and the last followed by one.  Raw string values are held to the string's
constraints (minLength, maxLength, pattern, format, enum, const) and never hold text the parsers
would read as an element's end, the next element's start or the call's tags: no ``<`` followed by
a letter or ``_``, nor by optional whitespace and ``/`` or ``p`` (narrower than the parsers
need, never wider).  A value that
could be read either way (a schema allowing strings and other types, except in DeepSeek's
styles, whose ``string`` mark says which), or a JSON value that may
hold strings (objects, arrays: their strings could spell an element's end), raises
UnsupportedFormatError naming the property: nothing is widened.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from .core.errors import GrammarError
from .ecma_regex import pattern_dfa
from .fsm.codepoint_dfa import Dfa, any_string_dfa, dfa_to_char_fsm, literal_dfa, without_strings
from .ir import NOTHING, Expr, alt, lit, opt, seq, star
from .json_formats import format_dfa
from .json_strings import string_dfa

__all__ = ["XML_STYLES", "ANNOTATIONS", "xml_arguments", "check_xml_arguments", "plain_string_dfa", "has_own_pattern"]

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


@dataclass(frozen=True)
class XmlStyle:
    """How one style writes an element: `key(name)`, optionally `gap`, `value_open`, the value,
    `close`; `forbidden` an (unanchored) ECMA regex that a raw value must not match;
    `python_bools`: booleans may also be written True / False (the parser lower-cases them)."""

    key: Callable[[str, bool], str]  # (name, whether the value is raw text) -> the element's head
    close: str
    forbidden: str
    python_bools: bool = False
    marks_raw: bool = False  # the head says whether the value is raw text (DeepSeek's string="true")
    gap: str = ""
    value_open: str = ""


XML_STYLES: dict[str, XmlStyle] = {
    "qwen_xml": XmlStyle(lambda key, _: f"<parameter={key}>\n", "\n</parameter>", _MARKUP, python_bools=True),
    "minimax_xml": XmlStyle(lambda key, _: f'<parameter name="{key}">', "</parameter>", _MARKUP),
    "glm_xml": XmlStyle(
        lambda key, _: f"<arg_key>{key}</arg_key>", "</arg_value>", _MARKUP, gap="\n", value_open="<arg_value>"
    ),
    # DeepSeek's markup starts "<｜": kept out of raw values too
    "deepseek_xml": XmlStyle(
        lambda key, raw: f'<｜DSML｜parameter name="{key}" string="{str(raw).lower()}">',
        "</｜DSML｜parameter>",
        _MARKUP + "|<｜",
        marks_raw=True,
    ),
    "deepseek_v4_1_xml": XmlStyle(
        lambda key, raw: f'<｜DSML｜ parameter name="{key}" string="{str(raw).lower()}">',
        "</｜DSML｜ parameter>",
        _MARKUP + "|<｜",
        marks_raw=True,
    ),
}


def xml_arguments(
    schema: Any, style: str, json_value: Callable[[Any], Expr], where: str, excludes: list[str] | tuple = ()
) -> Expr:
    """The IR of the elements of `schema`'s declared properties in `style`; `json_value(schema)`
    is the IR of a JSON value of a (non-string) property schema.  `excludes` (XGrammar's json_schema
    ``excludes``): no raw value and no element name holds one of them (a scalar JSON value holds
    no string; a string with a ``pattern`` or ``format`` is held to that alone, as in XGrammar)."""
    spec = XML_STYLES.get(style)
    if spec is None:
        raise _unsupported(
            where, f'json_schema style {style!r} is not supported (only "json", {", ".join(map(repr, XML_STYLES))})'
        )
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
        if not key or any(c in key for c in "<>\"'=") or key != key.strip():
            raise _unsupported(here, f"property name {key!r} cannot be written as an XML element name")
        sub = _resolved(sub, definitions, here)
        values = _values(sub, spec, forbidden if has_own_pattern(sub) else filtered, json_value, here)
        element = _element(partial(_named_head, spec, key), values, spec)
        if any(e in key for e in excludes):
            element = NOTHING  # the element's name holds an excluded string: it cannot be written
        elements.append(element if key in required else opt(element))
    if undeclared is not None:
        elements.append(
            star(
                _undeclared_element(
                    undeclared,
                    properties,
                    spec,
                    forbidden if has_own_pattern(undeclared) else filtered,
                    json_value,
                    excludes,
                    where,
                )
            )
        )
    return seq(*elements, opt(lit("\n")))


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
) -> Expr:
    """One element of an undeclared member: its name XGrammar's ``[a-zA-Z_][a-zA-Z0-9_]*`` but no
    declared name (an undeclared value must not stand in for a declared one) and holding no
    excluded string; its value one of `schema` (``additionalProperties``)."""
    here = f"{where}/additionalProperties"
    names = pattern_dfa("^[a-zA-Z_][a-zA-Z0-9_]*$", here).difference(literal_dfa(declared))
    if excludes:
        names = names.intersect(without_strings(excludes))
    values = _values({} if schema is True else schema, spec, allowed, json_value, here)

    def head(raw: bool) -> Expr:
        before_name, after_name = spec.key("\0", raw).split("\0")
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


def _named_head(spec: XmlStyle, key: str, raw: bool) -> Expr:
    """The head of the element of the declared property `key`."""
    return lit(spec.key(key, raw))


def _element(head: Callable[[bool], Expr], values: list[tuple[Expr, bool]], spec: XmlStyle) -> Expr:
    """One element: `head(raw)` (the name's part) and each of its `values` (the value's IR,
    whether raw) as `spec` writes them, after an optional newline."""
    gap = opt(lit(spec.gap)) if spec.gap else lit("")
    written = [seq(head(raw), gap, lit(spec.value_open), value) for value, raw in values]
    return seq(opt(lit("\n")), alt(*written), lit(spec.close))


def check_xml_arguments(schema: Any, style: str, where: str) -> None:
    """Raise what xml_arguments raises for `schema` in `style` (UnsupportedFormatError naming
    the place), building nothing to keep."""
    xml_arguments(schema, style, lambda _: lit(""), where)


def _values(schema: Any, spec: XmlStyle, allowed: Dfa, json_value: Callable, where: str) -> list[tuple[Expr, bool]]:
    """A property's values, each with whether it is raw text: raw for a schema of strings only,
    else JSON of a scalar schema; in a style that marks raw text (DeepSeek's ``string``), strings
    or scalars are both, each under its own mark."""
    if schema is True or isinstance(schema, dict) and not set(schema) - ANNOTATIONS:
        # any value: the parsers read raw text as a string
        return [(dfa_to_char_fsm(allowed), True)]
    if not isinstance(schema, dict):
        raise _unsupported(where, f"a property schema is an object, got {schema!r}")
    kinds = _kinds(schema)
    if kinds == {"string"}:
        return [(dfa_to_char_fsm(allowed.intersect(_string_values(schema, where))), True)]
    if kinds and kinds <= _SCALARS:
        if spec.python_bools and kinds == {"boolean"} and set(schema) - ANNOTATIONS == {"type"}:
            return [(alt(lit("true"), lit("false"), lit("True"), lit("False")), False)]
        return [(json_value(schema), False)]
    if spec.marks_raw and "string" in kinds and kinds - {"string"} <= _SCALARS:
        strings = {k: v for k, v in schema.items() if k in _STRING_KEYS}
        return [
            (dfa_to_char_fsm(allowed.intersect(_string_values(strings, where))), True),
            (json_value(_without_strings(schema, kinds)), False),
        ]
    raise _unsupported(
        where,
        f"a value of types {sorted(kinds) or 'any'} cannot be written unambiguously as "
        "XML text (only strings, or integers / numbers / booleans / null)",
    )


def _without_strings(schema: dict, kinds: set[str]) -> dict:
    """`schema` less its strings (a scalar union's JSON part): its ``type`` without string, its
    ``enum`` / ``const`` without string values."""
    narrowed = dict(schema)
    if "type" in schema:
        narrowed["type"] = sorted(kinds - {"string"})
    if isinstance(schema.get("enum"), list):
        narrowed["enum"] = [v for v in schema["enum"] if not isinstance(v, str)]
    return narrowed


def has_own_pattern(schema: Any) -> bool:
    """A string schema with a ``pattern``, or a ``format`` pushmask knows: XGrammar holds such a
    string to that constraint alone and does not filter it by ``excludes``."""
    if not isinstance(schema, dict):
        return False
    return "pattern" in schema or isinstance(schema.get("format"), str) and format_dfa(schema["format"]) is not None


def plain_string_dfa(schema: Any, where: str) -> Dfa | None:
    """The strings a schema of strings only allows (``type`` string, ``minLength``, ``maxLength``,
    ``pattern``, ``format``, ``enum`` / ``const`` of strings); None for any other schema."""
    if not isinstance(schema, dict) or _kinds(schema) != {"string"} or set(schema) - _STRING_KEYS:
        return None
    return _string_values(schema, where)


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
    names = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
    return {names.get(type(v), "object") for v in values}


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


def _unsupported(where: str, message: str) -> GrammarError:
    from .structural_tag import UnsupportedFormatError  # the structural tag front end's error

    return UnsupportedFormatError(f"{where}: {message}")
