"""One dispatch from a constraint's kind and text to grammar IR: `to_grammar(kind, spec)`.

The compiler (masks/compiler.py), the vLLM backend and `generate` all go through it, so each
front end is called in one place with the budgets of one `Limits` object.

The JSON Schema front end (and structural tags, which embed it) is imported on first use: it
builds its string automata when imported, which would double the time of `import pushmask` for
users who only compile grammars or regexes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Any, NamedTuple

from ..core.errors import ArgumentTypeError, CompileClock, InvalidArgumentError
from ..core.limits import DEFAULT_LIMITS, Limits
from .ebnf import parse_ebnf
from .ir import Grammar, alt, lit
from .json_options import JsonOptions
from .lark_frontend import parse_lark
from .regex import parse_regex

__all__ = ["FRONT_ENDS", "GrammarKind", "choice_grammar", "grammar_kind", "to_grammar"]

FRONT_ENDS = ("json_schema", "ebnf", "lark", "regex", "structural_tag", "choice")
"""The kinds `to_grammar` accepts."""


def to_grammar(
    kind: str,
    spec: Any,
    *,
    limits: Limits = DEFAULT_LIMITS,
    token_id: Callable | None = None,
    clock: CompileClock | None = None,
    json_options: JsonOptions | None = None,
    **options: Any,
) -> Grammar:
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
    json_options : JsonOptions, optional
        How JSON Schemas compile (json_schema, and the JSON bodies of structural tags); the
        defaults (strict mode) if None.  Built once by the caller's entry point and passed on
        unchanged.
    **options
        The front end's own options: ``root`` (ebnf), ``start`` (lark), ``triggers``
        (structural_tag); none for json_schema.

    Returns
    -------
    Grammar
        Grammar IR, before the passes (grammar/passes.py: normalize).
    """
    if json_options is not None and kind not in ("json_schema", "structural_tag"):
        raise InvalidArgumentError(
            f"json_options apply to JSON Schemas and structural tags, not to a {kind} constraint"
        )
    json_options = JsonOptions.of(json_options, {}, "to_grammar")
    if kind == "json_schema":
        if options:
            raise ArgumentTypeError(
                f"to_grammar: pass JSON Schema options as json_options=JsonOptions(...), not as "
                f"keywords ({', '.join(sorted(options))})"
            )
        from .json_schema import json_schema_to_grammar  # on first use: see the module docstring

        return json_schema_to_grammar(spec, json_options, clock=clock, limits=limits)
    if kind == "ebnf":
        return parse_ebnf(
            spec, max_nesting=limits.max_nesting, max_repeat=limits.max_repeat, token_id=token_id, **options
        )
    if kind == "lark":
        return parse_lark(
            spec, max_states=limits.max_rule_states, max_nesting=limits.max_nesting, token_id=token_id, **options
        )
    if kind == "regex":
        return parse_regex(spec, limits.max_rule_states, limits.max_nesting, **options)
    if kind == "structural_tag":
        from .structural_tag import structural_tag_to_grammar  # on first use: see the module docstring

        return structural_tag_to_grammar(
            spec, token_id=token_id, clock=clock, limits=limits, json_options=json_options, **options
        )
    if kind == "choice":
        return choice_grammar(spec, **options)
    raise InvalidArgumentError(f"unknown grammar kind {kind!r}; pass one of {', '.join(FRONT_ENDS)}")


class GrammarKind(NamedTuple):
    """Which reader a grammar text goes to ("ebnf", "lark" or "json") and why, in words."""

    kind: str
    reason: str


_SUFFIX_KINDS = {".ebnf": "ebnf", ".gbnf": "ebnf", ".bnf": "ebnf", ".lark": "lark", ".json": "json"}
_COMMENT = re.compile(r"(#|//).*$")


def grammar_kind(text: Any, file_name: str | None = None) -> GrammarKind:
    """The one place that decides whether a grammar text is EBNF (GBNF) or Lark.

    A file name ending in .ebnf / .gbnf / .bnf / .lark / .json decides; else text that parses as
    a JSON object or array is "json" (a schema or a document, not a grammar: the caller says
    where it goes); else a `::=` outside comments means EBNF, anything else Lark (vLLM's test,
    so requests split as they do for xgrammar).
    """
    if file_name is not None:
        suffix = PurePath(file_name).suffix.lower()
        if suffix in _SUFFIX_KINDS:
            return GrammarKind(_SUFFIX_KINDS[suffix], f"the file name ends in {suffix}")
    if not isinstance(text, str) or not text:
        return GrammarKind("ebnf", "empty or not text (the EBNF reader says what it expects)")
    if text.lstrip()[:1] in ("{", "["):
        try:
            json.loads(text)
            return GrammarKind("json", "the text is a JSON document")
        except ValueError:
            pass
    for number, line in enumerate(text.split("\n"), start=1):
        if "::=" in _COMMENT.sub("", line):
            return GrammarKind("ebnf", f"line {number} defines a rule with '::='")
    return GrammarKind("lark", "no rule is defined with '::=' (EBNF's), so Lark's 'name: ...' syntax")


def choice_grammar(choices: list[str]) -> Grammar:
    """The grammar matching exactly one of the given strings (built as IR: no escaping)."""
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
        raise InvalidArgumentError(f"a choice request needs a non-empty list of strings, got {choices!r}")
    return Grammar({"root": alt(*(lit(c) for c in choices))}, root="root")
