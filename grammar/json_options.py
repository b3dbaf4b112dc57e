"""`JsonOptions`: every option of a JSON Schema compile in one frozen, hashable object.

It is built once at a public entry point (GrammarCompiler.compile_json_schema, json_schema_to_grammar,
`pushmask.generate`, the CLI, the vLLM / SGLang backends), passed down unchanged, and is part of
the compile-cache keys, so the same schema with the same options gives the same automaton through
every entry point.  XGrammar's keyword names (`strict_mode`, `any_whitespace`, `indent`,
`separators`, `max_whitespace_cnt`, `any_order`) are reconciled with pushmask's in one place,
`JsonOptions.from_xgrammar`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["JsonOptions", "XGRAMMAR_NAMES"]

XGRAMMAR_NAMES = ("any_whitespace", "indent", "separators", "strict_mode", "max_whitespace_cnt", "any_order")
"""XGrammar's keyword arguments of compile_json_schema, accepted by `JsonOptions.from_xgrammar`."""

_JSON_WHITESPACE = " \t\n\r"


@dataclass(frozen=True)
class JsonOptions:
    """How a JSON Schema compiles (defaults in brackets).

    Layout
        whitespace ["flexible"]: any JSON whitespace between tokens and around the value, or
            "compact" (none).  indent [None]: the layout of ``json.dumps(indent=N)``.
        separators [None]: the exact (item, key) separators, as in ``json.dumps``.
        max_whitespace [None]: at most this many characters in each flexible whitespace run.
        root_whitespace [True]: False refuses whitespace around the top-level value (XGrammar's).
    Policy
        additional_properties_default ["declared"]: what a missing ``additionalProperties``
            means.  "declared" is strict mode (XGrammar's default, for generation): an object
            schema that declares members, or an array schema with ``prefixItems``, takes nothing
            beyond them unless the schema says what else may come; True: the schema's own
            language (any members); False: no undeclared members anywhere.  Closing applies
            only where it narrows the language (grammar/json_schema/closing.py: never inside
            `not`, an `if` condition, the other branches of a oneOf, ...).
        property_order ["definition"]: members in the order the schema lists them, or "any".
        value_checks [True]: ``uniqueItems`` on open item types and overlapping ``oneOf`` compile
            to a superset the matcher checks on each closed value; False raises
            UnsupportedSchemaError for them.
        unsatisfiable ["error"]: a schema no instance satisfies raises SchemaError, or with
            "empty" compiles to the empty language (validation).
        lenient [False]: widen what cannot be expressed exactly (with a warning) instead of
            raising UnsupportedSchemaError.
        retrieve [None]: URI -> schema document, for ``$ref`` to other documents (none is
            fetched otherwise); part of the equality (and cache key) by identity.
        string_excludes [()]: texts no JSON string may hold as written between its quotes
            (escapes not decoded), keys and literals included; strings held to a ``pattern`` or
            a known ``format`` are not filtered (XGrammar's structural-tag ``excludes``).

    Presets: ``JsonOptions()`` (the defaults above), ``JsonOptions.xgrammar()``,
    ``JsonOptions.generation()`` and ``JsonOptions.validation()``; each takes field overrides.
    """

    whitespace: str = "flexible"
    indent: int | str | None = None
    separators: tuple[str, str] | None = None
    max_whitespace: int | None = None
    root_whitespace: bool = True
    additional_properties_default: bool | str = "declared"
    property_order: str = "definition"
    value_checks: bool = True
    unsatisfiable: str = "error"
    lenient: bool = False
    retrieve: Callable[[str], Any] | None = None
    string_excludes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _one_of(self.whitespace, ("flexible", "compact"), "whitespace")
        _one_of(self.property_order, ("definition", "any"), "property_order")
        _one_of(self.unsatisfiable, ("error", "empty"), "unsatisfiable")
        if self.additional_properties_default not in (True, False, "declared") or not isinstance(
            self.additional_properties_default, (bool, str)
        ):
            raise InvalidArgumentError(
                "JsonOptions.additional_properties_default must be True, False or 'declared', "
                f"got {self.additional_properties_default!r}"
            )
        for name in ("root_whitespace", "value_checks", "lenient"):
            _typed(getattr(self, name), bool, name)
        if self.max_whitespace is not None:
            _typed(self.max_whitespace, int, "max_whitespace", "a non-negative int or None")
            if self.max_whitespace < 0:
                raise InvalidArgumentError(
                    f"JsonOptions.max_whitespace must be >= 0 or None, got {self.max_whitespace}"
                )
        if self.indent is not None:
            _typed(self.indent, (int, str), "indent", "an int, a string of whitespace or None")
            if isinstance(self.indent, str) and self.indent.strip(_JSON_WHITESPACE):
                raise InvalidArgumentError(f"JsonOptions.indent must be JSON whitespace, got {self.indent!r}")
        if self.separators is not None:
            seps = self.separators
            if not isinstance(seps, (tuple, list)) or len(seps) != 2 or not all(isinstance(s, str) for s in seps):
                raise ArgumentTypeError(f"JsonOptions.separators must be a pair of strings, got {seps!r}")
            for sep, mark in zip(seps, ",:"):
                if sep.strip(_JSON_WHITESPACE) != mark:
                    raise InvalidArgumentError(
                        f"JsonOptions.separators: {sep!r} must be {mark!r} with JSON whitespace "
                        "around it, as in json.dumps"
                    )
            object.__setattr__(self, "separators", tuple(seps))
        excludes = self.string_excludes
        if not isinstance(excludes, (tuple, list)) or not all(isinstance(e, str) and e for e in excludes):
            raise ArgumentTypeError(
                f"JsonOptions.string_excludes must be a sequence of non-empty strings, got {excludes!r}"
            )
        object.__setattr__(self, "string_excludes", tuple(excludes))
        if self.retrieve is not None and not callable(self.retrieve):
            raise ArgumentTypeError(
                f"JsonOptions.retrieve must be a callable URI -> schema or None, got {type(self.retrieve).__name__}"
            )

    # -- presets -------------------------------------------------------------------------------

    @classmethod
    def xgrammar(cls, **changes: Any) -> JsonOptions:
        """XGrammar's defaults as vLLM calls it: strict mode, any whitespace between tokens, none
        around the top-level value."""
        return cls(root_whitespace=False).replace(**changes)

    @classmethod
    def generation(cls, **changes: Any) -> JsonOptions:
        """What `pushmask.generate` and ``pushmask generate`` use: strict mode in the layout
        json.dumps writes (``{"a": 1, "b": [1, 2]}``), so a model cannot format oddly or loop
        on whitespace."""
        return cls(separators=(", ", ": ")).replace(**changes)

    @classmethod
    def validation(cls, **changes: Any) -> JsonOptions:
        """For checking existing documents (``validate-corpus``, the Test Suite): the schema's own
        language (no strict mode), members in any order, any whitespace, and an unsatisfiable
        schema as the empty language."""
        return cls(additional_properties_default=True, property_order="any", unsatisfiable="empty").replace(**changes)

    @classmethod
    def from_xgrammar(
        cls,
        *,
        any_whitespace: bool | None = None,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        strict_mode: bool | None = None,
        max_whitespace_cnt: int | None = None,
        any_order: bool | None = None,
        base: JsonOptions | None = None,
        **changes: Any,
    ) -> JsonOptions:
        """The options XGrammar's keyword arguments name, over `base` (the defaults if None), with
        pushmask's field names in `changes`.  Giving an XGrammar name and its pushmask twin with
        different values is an error.  As in XGrammar:

        - strict_mode=True (the default) is additional_properties_default="declared"; False is True.
        - any_whitespace=True: any JSON whitespace (indent and separators ignored); False: the
          layout of json.dumps with `indent` and `separators` (default (", ", ": ") on one line,
          (",", ": ") with indent).  Left unset, pushmask's meaning: flexible whitespace unless
          indent, separators or whitespace="compact" fix the layout.
        - max_whitespace_cnt is max_whitespace; any_order=True is property_order="any".
        """
        base = JsonOptions() if base is None else _checked(base, "from_xgrammar", "base")
        _known(changes, "JsonOptions.from_xgrammar")
        if strict_mode is not None:
            _typed(strict_mode, bool, "strict_mode")
            _twin(
                changes,
                "additional_properties_default",
                "declared" if strict_mode else True,
                "strict_mode",
                strict_mode,
                same=lambda pm: (pm is not True) == strict_mode,
            )
        if any_order is not None:
            _typed(any_order, bool, "any_order")
            _twin(changes, "property_order", "any" if any_order else "definition", "any_order", any_order)
        if max_whitespace_cnt is not None:
            _twin(changes, "max_whitespace", max_whitespace_cnt, "max_whitespace_cnt", max_whitespace_cnt)
        if indent is not None:
            changes["indent"] = indent
        if separators is not None:
            changes["separators"] = separators
        if any_whitespace is not None:
            _typed(any_whitespace, bool, "any_whitespace")
            whitespace = changes.get("whitespace")
            if whitespace is not None and (whitespace == "flexible") != any_whitespace:
                raise InvalidArgumentError(
                    f"any_whitespace={any_whitespace!r} contradicts whitespace={whitespace!r}; pass one of them"
                )
            if any_whitespace:
                changes.update(whitespace="flexible", indent=None, separators=None)
            elif changes.get("whitespace", base.whitespace) != "compact":
                layout_indent = changes.get("indent", base.indent)
                changes["separators"] = (
                    changes.get("separators")
                    or base.separators
                    or ((",", ": ") if layout_indent is not None else (", ", ": "))
                )
        return base.replace(**changes)

    # -- use ------------------------------------------------------------------------------------

    def replace(self, **changes: Any) -> JsonOptions:
        """These options with some fields changed (an unknown name is a TypeError naming the known ones)."""
        _known(changes, "JsonOptions.replace")
        return dataclasses.replace(self, **changes) if changes else self

    @property
    def strict(self) -> bool:
        """Strict mode: object schemas that declare members take no others (XGrammar's strict_mode)."""
        return self.additional_properties_default == "declared"

    @classmethod
    def of(cls, options: JsonOptions | dict[str, Any] | None, keywords: dict[str, Any], where: str) -> JsonOptions:
        """The options of a public entry point: `options` (a JsonOptions, a dict of keyword
        arguments, or None for the defaults) with `keywords` (XGrammar's names or pushmask's)
        applied on top; built here once, then passed down unchanged."""
        if isinstance(options, dict):
            options = cls.from_xgrammar(**options)
        elif options is not None:
            _checked(options, where, "options")
        if not keywords:
            return options if options is not None else cls()
        unknown = sorted(set(keywords) - set(XGRAMMAR_NAMES) - _FIELDS)
        if unknown:
            raise ArgumentTypeError(
                f"{where}: unknown JSON option {unknown[0]!r}; the options are "
                f"{', '.join(sorted(_FIELDS))} (or XGrammar's {', '.join(XGRAMMAR_NAMES)})"
            )
        return cls.from_xgrammar(base=options, **keywords)


_FIELDS = frozenset(f.name for f in dataclasses.fields(JsonOptions))


def _checked(options: Any, where: str, name: str) -> JsonOptions:
    if not isinstance(options, JsonOptions):
        raise ArgumentTypeError(
            f"{where}: {name} must be a pushmask.JsonOptions, got {type(options).__name__}; "
            "build one with JsonOptions(...) or a preset such as JsonOptions.generation()"
        )
    return options


def _known(changes: dict[str, Any], where: str) -> None:
    unknown = sorted(set(changes) - _FIELDS)
    if unknown:
        raise ArgumentTypeError(
            f"{where}: unknown JSON option {unknown[0]!r}; the options are {', '.join(sorted(_FIELDS))}"
        )


def _twin(changes: dict[str, Any], pm_name: str, value: Any, xgr_name: str, xgr_value: Any, same: Any = None) -> None:
    """Set `pm_name` from its XGrammar twin, unless `changes` already holds a different value."""
    if pm_name in changes and changes[pm_name] is not None:
        if not (same(changes[pm_name]) if same else changes[pm_name] == value):
            raise InvalidArgumentError(
                f"{xgr_name}={xgr_value!r} contradicts {pm_name}={changes[pm_name]!r}; pass one of them"
            )
        return
    changes[pm_name] = value


def _one_of(value: Any, allowed: tuple[Any, ...], name: str) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise InvalidArgumentError(f"JsonOptions.{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def _typed(value: Any, expected: Any, name: str, wanted: str = "") -> None:
    types = expected if isinstance(expected, tuple) else (expected,)
    if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
        wanted = wanted or " or ".join(t.__name__ for t in types)
        raise ArgumentTypeError(f"JsonOptions.{name} must be {wanted}, got {value!r}")
