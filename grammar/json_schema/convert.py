"""The compiler, assembled from its parts, and the entry point `json_schema_to_grammar`."""

from __future__ import annotations

import warnings
from typing import Any

from ...core.errors import CompileClock, GrammarError, LimitExceededError, SchemaError
from ...core.limits import DEFAULT_LIMITS, Limits
from .. import passes
from ..ir import NOTHING, Grammar, seq
from ..json_options import JsonOptions
from .context import CompileContext, NeedsDynamicScopes, UnsatisfiableSchema
from .documents import check_json_document, check_metaschema, load_schema
from .emit import Emitter


class _Compiler(Emitter):
    """One compile of one schema document: see the package docstring for how it works."""

    def __init__(self, schema, options: JsonOptions, **keywords):
        super().__init__(CompileContext(schema, options, **keywords))

    def compile(self) -> Grammar:
        """The grammar of the whole document (rules nothing derives or the root cannot reach dropped)."""
        layout = self.layout
        value = self.value(self.ctx.root, "#", layout.start_depth())
        dynamic = self.algebra_state.static_dynamic
        if dynamic and self.ctx.dynamic_anchors(dynamic) > 1:
            raise NeedsDynamicScopes()
        self.rules = {"root": seq(layout.root_ws, value, layout.root_ws), **self.rules}
        grammar = Grammar(self.rules, "root", checks=self.checks)
        return _prune(grammar, self.ctx.empty_reason)


EMPTY_LANGUAGE = Grammar({"root": NOTHING}, "root", allow_empty=True)
"""What an unsatisfiable schema compiles to with unsatisfiable="empty": no JSON text at all."""


def _prune(grammar: Grammar, reason) -> Grammar:
    """Drop rules that derive nothing (references to them become NOTHING) and rules the root
    cannot reach, with the passes' own steps; an unsatisfiable root is a SchemaError at the
    schema location `reason` names."""
    try:
        productive = passes.check_productive(grammar)
    except GrammarError:
        where, why = reason if reason else ("#", "no JSON value satisfies the schema")
        raise UnsatisfiableSchema(f"the schema is unsatisfiable: {why}; fix or relax the constraints", where) from None
    return passes.remove_unreachable(productive)


def json_schema_to_grammar(
    schema,
    options: JsonOptions | None = None,
    *,
    clock: CompileClock | None = None,
    limits: Limits = DEFAULT_LIMITS,
    **keywords: Any,
) -> Grammar:
    """Compile a JSON Schema (dict, JSON text, or pydantic model class) into grammar IR.

    options: the JsonOptions of the compile (grammar/json_options.py: layout, strict mode, member
    order, value checks, unsatisfiable schemas, lenient, retrieve); the defaults if None, with
    `keywords` (its field names, or XGrammar's) applied on top.  The same defaults as
    GrammarCompiler.compile_json_schema: strict mode, flexible whitespace, definition order.
    limits: the budgets (core/limits.py): max_schema_depth, max_schema_rules, max_schema_branches,
    max_object_expr, max_dynamic_copies and max_string_states apply here; LimitExceededError (or
    UnsupportedSchemaError for string automata) past one.
    clock: a wall-clock compile limit, checked once per subschema compiled.

    An unsatisfiable schema raises SchemaError, or with options.unsatisfiable="empty" (for
    validation: the Test Suite, validate-corpus) gives the empty language, whose matcher allows
    no token and no EOS.  Under options.value_checks, uniqueItems on open item types and oneOf
    whose branches overlap (on objects, arrays or strings) compile to a superset named in
    `Grammar.checks`, which the matcher checks on each closed value.
    """
    options = JsonOptions.of(options, keywords, "json_schema_to_grammar")
    schema = load_schema(schema)
    check_json_document(schema, limits.max_schema_depth)
    try:
        check_metaschema(schema)
        if schema is False:
            if options.unsatisfiable == "empty":
                return EMPTY_LANGUAGE.copy()
            raise SchemaError(
                "the schema is unsatisfiable: the schema is false; use true or {} to allow any value", "#"
            )
        widened: set[tuple[str, str]] = set()  # one warning per widening across the retries below

        def compile_(additional) -> Grammar:
            compile_options = options.replace(additional_properties_default=additional)

            def once(dynamic_scopes: bool) -> Grammar:
                comp = _Compiler(schema, compile_options, dynamic_scopes=dynamic_scopes, limits=limits)
                if clock is not None:
                    comp.ctx.clock = clock
                comp.ctx.widened = widened
                return comp.compile()

            try:
                return once(dynamic_scopes=False)
            except NeedsDynamicScopes:
                return once(dynamic_scopes=True)

        try:
            try:
                return compile_(options.additional_properties_default)
            except UnsatisfiableSchema:
                if options.additional_properties_default is True:
                    raise
                # strict mode never turns a satisfiable schema into an error: the spec language
                grammar = compile_(True)
                warnings.warn(
                    "pushmask: closing object schemas (strict mode) leaves this schema no valid value; "
                    "it is compiled without closing them (the schema's own language)",
                    stacklevel=2,
                )
                return grammar
        except UnsatisfiableSchema as exc:
            if options.unsatisfiable == "empty":
                return EMPTY_LANGUAGE.copy()
            raise SchemaError(exc.message, exc.pointer) from None
    except RecursionError:
        raise LimitExceededError(
            "the schema nests too deeply to compile (Python's recursion limit); move deep "
            "parts into $defs with $ref, or lower max_schema_depth so that budget "
            "stops it first"
        ) from None
