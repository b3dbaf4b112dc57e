"""The compiler, assembled from its parts, and the entry point `json_schema_to_grammar`."""

from __future__ import annotations

import warnings
from typing import Any, Callable

from .. import passes
from ..errors import BudgetExceededError, CompileClock, GrammarError, SchemaError
from ..ir import NOTHING, Grammar, seq
from ..limits import DEFAULT_LIMITS, Limits
from .algebra import AlgebraMixin
from .arrays import ArraysMixin
from .context import CompileContext, _NeedsDynamicScopes, _Unsatisfiable
from .documents import _check_metaschema, _load, check_json_document
from .emit import EmitMixin
from .negation import NegationMixin
from .objects import ObjectsMixin
from .one_of import OneOfMixin


class _Compiler(ObjectsMixin, ArraysMixin, EmitMixin, OneOfMixin, NegationMixin, AlgebraMixin, CompileContext):
    """One compile of one schema document: see the package docstring for how it works."""

    def compile(self) -> Grammar:
        """The grammar of the whole document (rules nothing derives or the root cannot reach dropped)."""
        layout = self.layout
        value = self.value(self.root, "#", layout.start_depth())
        if self.static_dynamic and self.dynamic_anchors(self.static_dynamic) > 1:
            raise _NeedsDynamicScopes()
        self.rules = {"root": seq(layout.root_ws, value, layout.root_ws), **self.rules}
        grammar = Grammar(self.rules, "root", checks=self.checks)
        return _prune(grammar, self.empty_reason)


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
        raise _Unsatisfiable(f"the schema is unsatisfiable: {why}; fix or relax the constraints", where) from None
    return passes.remove_unreachable(productive)


def json_schema_to_grammar(schema, *, whitespace: str = "flexible", indent=None, max_whitespace=None,
                           additional_properties_default: bool = True, lenient: bool = False, separators=None,
                           retrieve: Callable[[str], Any] | None = None,
                           property_order: str = "definition",
                           root_whitespace: bool = True, value_checks: bool = True,
                           clock: CompileClock | None = None, unsatisfiable: str = "error",
                           limits: Limits = DEFAULT_LIMITS) -> Grammar:
    """Compile a JSON Schema (dict, JSON text, or pydantic model class) into grammar IR.

    whitespace: "flexible" (any JSON whitespace between tokens and around the value) or "compact".
    indent: json.dumps(indent=N) layout.  max_whitespace: cap on each whitespace run (flexible).
    separators: exact (item, key) separators as in json.dumps.  additional_properties_default:
    False treats a missing additionalProperties on object schemas as false; "declared" (XGrammar's
    strict mode) only on object schemas that declare members (properties, required, ...), and
    closes tuples (prefixItems) the same way; both close only where that narrows the language
    (closing.py: not inside `not`, an `if` condition, ...).  lenient: widen what
    cannot be expressed exactly (with a warning) instead of raising UnsupportedSchemaError.
    retrieve: uri -> schema document, for `$ref`s to other documents (none are fetched otherwise).
    property_order: "definition" (default, as XGrammar and llguidance do) takes an object's members
    in the order the schema lists them, which also keeps generation on one path; "any" accepts
    them in any order (JSON objects are unordered), for validating existing documents.
    limits: the budgets (grammar/limits.py): max_schema_depth, max_schema_rules, max_schema_branches,
    max_object_expr, max_dynamic_copies and max_string_states apply here; BudgetExceededError (or
    UnsupportedSchemaError for string automata) past one.
    clock: a wall-clock compile limit, checked once per subschema compiled.
    root_whitespace: False refuses whitespace before and after the top-level value (XGrammar's
    layout; between tokens flexible whitespace stays).
    unsatisfiable: what a schema no instance satisfies compiles to: "error" (default, for
    generation, where it is a mistake) raises SchemaError; "empty" (for validation: the Test
    Suite, validate-corpus) gives the empty language, whose matcher allows no token and no EOS.
    value_checks: uniqueItems on open item types and oneOf whose branches overlap (on objects,
    arrays or strings) compile to a superset named in `Grammar.checks`, which the matcher checks
    on each closed value; False raises UnsupportedSchemaError for them (or widens, if lenient).
    """
    if unsatisfiable not in ("error", "empty"):
        raise ValueError(f"unsatisfiable must be 'error' or 'empty', not {unsatisfiable!r}")
    schema = _load(schema)
    check_json_document(schema, limits.max_schema_depth)
    try:
        _check_metaschema(schema)
        if schema is False:
            if unsatisfiable == "empty":
                return EMPTY_LANGUAGE.copy()
            raise SchemaError("the schema is unsatisfiable: the schema is false; use true or {} to allow any value",
                              "#")
        def compile_(additional) -> Grammar:
            def once(dynamic_scopes: bool) -> Grammar:
                comp = _Compiler(schema, whitespace=whitespace, indent=indent, max_whitespace=max_whitespace,
                                 additional_properties_default=additional, lenient=lenient,
                                 separators=separators, retrieve=retrieve, property_order=property_order,
                                 root_whitespace=root_whitespace, dynamic_scopes=dynamic_scopes,
                                 value_checks=value_checks, limits=limits)
                if clock is not None:
                    comp.clock = clock
                return comp.compile()

            try:
                return once(dynamic_scopes=False)
            except _NeedsDynamicScopes:
                return once(dynamic_scopes=True)

        try:
            try:
                return compile_(additional_properties_default)
            except _Unsatisfiable:
                if additional_properties_default is True:
                    raise
                # strict mode never turns a satisfiable schema into an error: the spec language
                grammar = compile_(True)
                warnings.warn("pushmask: closing object schemas (strict mode) leaves this schema no valid value; "
                              "it is compiled without closing them (the schema's own language)", stacklevel=2)
                return grammar
        except _Unsatisfiable as exc:
            if unsatisfiable == "empty":
                return EMPTY_LANGUAGE.copy()
            raise SchemaError(exc.message, exc.pointer) from None
    except RecursionError:
        raise BudgetExceededError("the schema nests too deeply to compile (Python's recursion limit); move deep "
                                  "parts into $defs with $ref, or lower max_schema_depth so that budget "
                                  "stops it first") from None
