"""XGrammar's ``Grammar`` constructors over pushmask's grammar IR: ``Grammar.from_ebnf``,
``from_json_schema``, ``from_regex``, ``from_structural_tag``, ``builtin_json_grammar``,
``union`` and ``concat``, with XGrammar's arguments and meanings.  The result is a Grammar that
``GrammarCompiler.compile_grammar`` (or ``compile_ir``) compiles.

This module sets them, and ``serialize_json`` / ``deserialize_json``, on grammar/ir.py's Grammar:
the IR sits below the front ends and the serialized form they are written with, so it cannot
import them; everything that builds on the IR imports pushmask's __init__, which imports this."""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import ArgumentTypeError, GrammarError, InvalidArgumentError
from .frontends import to_grammar
from .ir import (
    TOKEN_CLASS_BASE,
    TOKEN_MARK,
    Bytes,
    Expr,
    Grammar,
    Ref,
    alt,
    map_leaves,
    map_refs,
    seq,
    token_terminal_bytes,
)
from .json_checks import ValueCheck
from .json_options import JsonOptions
from .lark_dialect import NAMED_GRAMMAR_NAME
from .serialization import grammar_from_json, serialize_json

__all__ = [
    "builtin_json_grammar",
    "concat",
    "from_ebnf",
    "from_json_schema",
    "from_lark",
    "from_regex",
    "from_structural_tag",
    "union",
]


def from_ebnf(ebnf_string: str, *, root_rule_name: str = "root") -> Grammar:
    """The grammar of EBNF text (XGrammar / GBNF dialect) whose start is `root_rule_name`;
    token terminals by id (``<[128010]>``) only, since no tokenizer names them here."""
    _text(ebnf_string, "ebnf_string", "from_ebnf")
    # A Regex(...) pattern pushmask cannot compile is raised when the grammar is compiled, as in
    # XGrammar (Grammar.refusal): reading the grammar does not build its automata.
    return to_grammar("ebnf", ebnf_string, root=root_rule_name, defer_compile_errors=True)


def from_json_schema(
    schema: Any,
    *,
    any_whitespace: bool = True,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    strict_mode: bool = True,
    max_whitespace_cnt: int | None = None,
    print_converted_ebnf: bool = False,
    any_order: bool = False,
) -> Grammar:
    """The grammar of the JSON values `schema` accepts, with XGrammar's layout keywords and
    strict mode (JsonOptions.from_xgrammar reads them as compile_json_schema does) over
    XGrammar's defaults (JsonOptions.xgrammar: no whitespace around the top-level value)."""
    keywords = {
        "any_whitespace": any_whitespace,
        "indent": indent,
        "separators": separators,
        "strict_mode": strict_mode,
        "max_whitespace_cnt": max_whitespace_cnt,
        "any_order": any_order,
    }
    options = JsonOptions.of(JsonOptions.xgrammar(), keywords, "Grammar.from_json_schema")
    return _printed(to_grammar("json_schema", schema, json_options=options), print_converted_ebnf)


def from_lark(lark_string: str, *, tokenizer_info: Any = None, named_grammars: Any = None) -> Grammar:
    """The grammar of Lark text (start rule ``start``), read as pushmask's Lark front end reads
    it, XGrammar's dialect included (docs/grammars.md).  ``tokenizer_info`` resolves special
    tokens ``<|name|>`` now (else the text needs only token ids ``<[ID]>``); ``named_grammars``
    maps each name ``@name`` may use to a Grammar or to Lark text."""
    _text(lark_string, "lark_string", "from_lark")
    token_id = None if tokenizer_info is None else tokenizer_info.token_id
    return to_grammar(
        "lark", lark_string, token_id=token_id, named_grammars=checked_named_grammars(named_grammars, "from_lark")
    )


def checked_named_grammars(named_grammars: Any, where: str) -> dict[str, Grammar | str] | None:
    """XGrammar's ``named_grammars`` checked: a dict of names ``@name`` can spell to a Grammar or
    to Lark text (TypeError / GrammarError in XGrammar's words otherwise)."""
    if named_grammars is None:
        return None
    if not isinstance(named_grammars, dict):
        raise ArgumentTypeError(f"{where}: named_grammars must be a dictionary, got {type(named_grammars).__name__}")
    for name, value in named_grammars.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{where}: named_grammars names must be strings, got {name!r:.60}")
        if not isinstance(value, (Grammar, str)):
            raise ArgumentTypeError(
                f"{where}: named_grammars values must be Grammar instances or Lark strings, "
                f"got {type(value).__name__} for {name!r}"
            )
        if not NAMED_GRAMMAR_NAME.fullmatch(name):
            raise GrammarError(f"{where}: Invalid named grammar name {name!r}: use letters, digits, '_' and '-'")
    return dict(named_grammars)


def from_regex(regex_string: str, *, print_converted_ebnf: bool = False) -> Grammar:
    """The grammar of the strings the regular expression matches whole."""
    _text(regex_string, "regex_string", "from_regex")
    return _printed(to_grammar("regex", regex_string), print_converted_ebnf)


def from_structural_tag(tags: Any, triggers: Any = None) -> Grammar:
    """The grammar of a structural tag document (or XGrammar's older items and triggers);
    ``token`` formats by id only, since no tokenizer names them here.  JSON bodies with
    XGrammar's defaults (JsonOptions.xgrammar)."""
    return to_grammar("structural_tag", tags, triggers=triggers, json_options=JsonOptions.xgrammar())


def builtin_json_grammar() -> Grammar:
    """XGrammar's JSON grammar: a JSON object or array (its root takes no other value), any
    members and items, JSON whitespace inside."""
    return from_json_schema({"type": ["object", "array"]}, strict_mode=False)


def union(*grammars: Grammar) -> Grammar:
    """The grammar of the strings any of `grammars` matches."""
    return _combine(grammars, alt, "union")


def concat(*grammars: Grammar) -> Grammar:
    """The grammar of a string of the first grammar, then one of the second, and so on."""
    return _combine(grammars, seq, "concat")


def _combine(grammars: tuple, join, name: str) -> Grammar:
    """The rules of every grammar under a prefix of its own, and a root that joins their roots."""
    if not grammars:
        raise InvalidArgumentError(f"Grammar.{name} needs at least one grammar")
    for i, grammar in enumerate(grammars):
        if not isinstance(grammar, Grammar):
            raise ArgumentTypeError(
                f"Grammar.{name}: argument {i} is a {type(grammar).__name__}, not a Grammar "
                "(make one with Grammar.from_ebnf / from_json_schema / from_regex)"
            )
    rules: dict[str, Expr] = {}
    positions: dict[str, tuple[int, int]] = {}
    checks: dict[str, ValueCheck] = {}
    token_classes: dict[int, frozenset[int]] = {}
    temperatures: dict[str, float] = {}
    roots: list[Expr] = []
    for i, grammar in enumerate(grammars):
        prefix = f"g{i}_"
        renumbered = _renumbered_classes(grammar.token_classes, len(token_classes))
        for rule, body in grammar.rules.items():
            body = map_refs(body, lambda r: Ref(prefix + r.name))
            rules[prefix + rule] = _renumber_classes(body, renumbered) if renumbered else body
        positions.update({prefix + rule: at for rule, at in grammar.positions.items()})
        checks.update({prefix + rule: check for rule, check in grammar.checks.items()})
        temperatures.update({prefix + rule: t for rule, t in grammar.temperatures.items()})
        token_classes.update({renumbered[t][1]: ids for t, ids in grammar.token_classes.items()})
        roots.append(Ref(prefix + grammar.root))
    rules["root"] = join(*roots)
    refusal = next((g.refusal for g in grammars if g.refusal is not None), None)  # raised when compiled
    # A part that is empty on purpose (an unsatisfiable schema) may leave the whole empty.
    return Grammar(
        rules,
        "root",
        positions,
        any(g.allow_empty for g in grammars),
        checks,
        token_classes=token_classes,
        temperatures=temperatures,
        refusal=refusal,
    )


def _renumbered_classes(classes: dict[int, frozenset[int]], first: int) -> dict[int, tuple[bytes, int]]:
    """A part's token-class terminals (ExcludeToken) numbered on from `first` in the whole:
    old terminal id -> (the old terminal's bytes, the new terminal id)."""
    return {old: (token_terminal_bytes(old), TOKEN_CLASS_BASE + first + k) for k, old in enumerate(sorted(classes))}


def _renumber_classes(body: Expr, renumbered: dict[int, tuple[bytes, int]]) -> Expr:
    """`body` with its token-class terminals renumbered.  A terminal's first byte, TOKEN_MARK,
    occurs nowhere else, so a match of a terminal's bytes is that terminal."""
    new_bytes = {old: token_terminal_bytes(new) for old, new in renumbered.values()}
    pattern = re.compile(b"|".join(re.escape(old) for old in new_bytes))

    def renumber(leaf: Expr) -> Expr:
        if isinstance(leaf, Bytes) and TOKEN_MARK in leaf.value:
            return Bytes(pattern.sub(lambda match: new_bytes[match.group()], leaf.value))
        return leaf

    return map_leaves(body, renumber)


def _text(value: Any, name: str, where: str) -> None:
    if not isinstance(value, str):
        raise ArgumentTypeError(f"Grammar.{where}: {name} must be a str, got {type(value).__name__}")


def _printed(grammar: Grammar, show: bool) -> Grammar:
    """XGrammar's print_converted_ebnf: the rules, as pushmask renders its IR."""
    if show:
        print(grammar)
    return grammar


# XGrammar's names on the IR's Grammar (see the module docstring).
for _function in (
    from_ebnf,
    from_lark,
    from_json_schema,
    from_regex,
    from_structural_tag,
    builtin_json_grammar,
    union,
    concat,
):
    setattr(Grammar, _function.__name__, staticmethod(_function))
Grammar.serialize_json = serialize_json
Grammar.deserialize_json = staticmethod(grammar_from_json)
