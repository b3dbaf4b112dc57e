"""One dispatch from a constraint's kind and text to grammar IR: `to_grammar(kind, spec)`.

The compiler (masks/compiler.py), the vLLM backend and `generate` all go through it, so each
front end is called in one place with the budgets of one `Limits` object.

The JSON Schema front end (and structural tags, which embed it) is imported on first use: it
builds its string automata when imported, which would double the time of `import pushmask` for
users who only compile grammars or regexes.
"""

from __future__ import annotations

from typing import Any, Callable

from .ebnf import parse_ebnf
from .errors import CompileClock
from .ir import Grammar, alt, lit
from .lark_frontend import parse_lark
from .limits import DEFAULT_LIMITS, Limits
from .regex import parse_regex

__all__ = ["FRONT_ENDS", "JSON_LAYOUT_OPTIONS", "choice_grammar", "json_schema_options", "to_grammar"]

FRONT_ENDS = ("json_schema", "ebnf", "lark", "regex", "structural_tag", "choice")
"""The kinds `to_grammar` accepts."""

JSON_LAYOUT_OPTIONS = ("any_whitespace", "indent", "separators", "strict_mode", "max_whitespace_cnt", "any_order",
                       "whitespace", "max_whitespace", "additional_properties_default", "property_order")
"""compile_json_schema's layout and policy names (XGrammar's and pushmask's): json_schema_options."""


def to_grammar(kind: str, spec: Any, *, limits: Limits = DEFAULT_LIMITS, token_id: Callable | None = None,
               clock: CompileClock | None = None, **options: Any) -> Grammar:
    """The grammar IR of one constraint.

    Parameters
    ----------
    kind : str
        One of FRONT_ENDS: "json_schema" (a schema as dict, JSON text or pydantic model class),
        "ebnf" (XGrammar / GBNF text), "lark", "regex", "structural_tag" (XGrammar's document) or
        "choice" (a list of strings, exactly one of which is matched).
    spec : Any
        The constraint itself, in the form `kind` names.
    limits : Limits
        The budgets every front end is held to (nesting, repetition bounds, rule states, schema
        depth).
    token_id : callable, optional
        Token text or id -> id (TokenizerInfo.token_id), resolving token terminals in EBNF, Lark
        and structural tags.
    clock : CompileClock, optional
        The wall-clock limit of the compile this is part of (JSON Schema and structural tags
        check it between subschemas).
    **options
        The front end's own options: ``root`` (ebnf), ``start`` (lark), ``triggers`` and
        json_schema_to_grammar's options for the JSON bodies (structural_tag; strict
        ``additional_properties_default="declared"`` unless given), GrammarCompiler.compile_json_schema's
        keyword arguments (json_schema: the layout names in JSON_LAYOUT_OPTIONS, XGrammar's and
        pushmask's, are resolved by json_schema_options; the others go to json_schema_to_grammar).

    Returns
    -------
    Grammar
        Grammar IR, before the passes (grammar/passes.py: normalize).
    """
    if kind == "json_schema":
        layout = {name: options.pop(name) for name in JSON_LAYOUT_OPTIONS if name in options}
        from .json_schema import json_schema_to_grammar  # on first use: see the module docstring

        return json_schema_to_grammar(spec, clock=clock, limits=limits, **json_schema_options(**layout), **options)
    if kind == "ebnf":
        return parse_ebnf(spec, max_nesting=limits.max_nesting, max_repeat=limits.max_repeat, token_id=token_id,
                          **options)
    if kind == "lark":
        return parse_lark(spec, max_states=limits.max_rule_states, max_nesting=limits.max_nesting,
                          token_id=token_id, **options)
    if kind == "regex":
        return parse_regex(spec, limits.max_rule_states, limits.max_nesting, **options)
    if kind == "structural_tag":
        options.setdefault("additional_properties_default", "declared")  # XGrammar's strict default
        triggers = options.pop("triggers", None)
        from .structural_tag import structural_tag_to_grammar  # on first use: see the module docstring

        return structural_tag_to_grammar(spec, triggers, token_id=token_id, clock=clock, limits=limits, **options)
    if kind == "choice":
        return choice_grammar(spec, **options)
    raise ValueError(f"unknown grammar kind {kind!r}; pass one of {', '.join(FRONT_ENDS)}")


def choice_grammar(choices: list[str]) -> Grammar:
    """The grammar matching exactly one of the given strings (built as IR: no escaping)."""
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
        raise ValueError(f"a choice request needs a non-empty list of strings, got {choices!r}")
    return Grammar({"root": alt(*(lit(c) for c in choices))}, root="root")


def json_schema_options(*, any_whitespace=None, indent=None, separators=None, strict_mode=None,
                        max_whitespace_cnt=None, any_order=None, whitespace=None, max_whitespace=None,
                        additional_properties_default=None, property_order=None) -> dict[str, Any]:
    """json_schema_to_grammar's layout and policy options from xgrammar's keyword arguments and
    pushmask's own names (each xgrammar name with its pushmask twin; giving both with different
    values is an error).  As in xgrammar:

    - strict_mode=True (the default; additional_properties_default="declared"): an object schema
      that declares members (properties, patternProperties, required, ...), or an array schema
      with prefixItems, takes no members or items beyond them unless the schema says what else
      may come (additionalProperties, items, ...); strict_mode=False is the schema's own language.
    - any_whitespace=True: any JSON whitespace between tokens (indent and separators are then
      ignored); False: the exact layout of json.dumps with `indent` and `separators`, whose
      default is (", ", ": ") on one line and (",", ": ") with indent.
    - max_whitespace_cnt=N: at most N characters in each whitespace run; any_order=True: object
      members in any order.

    Left unset, any_whitespace takes pushmask's meaning: flexible whitespace unless indent,
    separators or whitespace="compact" fix the layout.
    """
    def merged(xgr_name, xgr_value, pm_name, pm_value):
        if xgr_value is not None and pm_value is not None and xgr_value != pm_value:
            raise ValueError(f"compile_json_schema: {xgr_name}={xgr_value!r} contradicts {pm_name}={pm_value!r}; "
                             f"pass one of them")
        return pm_value if pm_value is not None else xgr_value

    if additional_properties_default is None:  # strict_mode decides, strict by default as in xgrammar
        additional_properties = "declared" if strict_mode is None or strict_mode else True
    elif strict_mode is not None and bool(strict_mode) == (additional_properties_default is True):
        raise ValueError(f"compile_json_schema: strict_mode={strict_mode!r} contradicts "
                         f"additional_properties_default={additional_properties_default!r}; pass one of them")
    else:
        additional_properties = additional_properties_default
    order = merged("any_order", None if any_order is None else ("any" if any_order else "definition"),
                   "property_order", property_order)
    out: dict[str, Any] = {
        "additional_properties_default": additional_properties,
        "property_order": order or "definition",
        "max_whitespace": merged("max_whitespace_cnt", max_whitespace_cnt, "max_whitespace", max_whitespace),
        "whitespace": whitespace or "flexible",
        "indent": indent,
        "separators": separators,
    }
    if any_whitespace is None:
        return out
    if whitespace is not None and (whitespace == "flexible") != bool(any_whitespace):
        raise ValueError(f"compile_json_schema: any_whitespace={any_whitespace!r} contradicts "
                         f"whitespace={whitespace!r}; pass one of them")
    if any_whitespace:
        out.update(whitespace="flexible", indent=None, separators=None)
    elif whitespace != "compact":
        out["separators"] = separators or ((",", ": ") if indent is not None else (", ", ": "))
    return out
