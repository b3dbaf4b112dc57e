"""The schema algebra: a subschema as a disjunctive normal form of flat terms (typed `Term`s,
forms.py), and the conjunction (merge) of two terms; unevaluated* and static dynamic references
are rewritten here.

`SchemaAlgebra` reads schemas and never emits grammar: its state is the depth and budget counters
of the analyses under way (`AlgebraState`, which the emitter owns and passes in); what it shares
with the emitter comes through the `CompileContext` (documents, mode, diagnostics).  oneOf
(one_of.py) and `not` (negation.py) are functions over it; the merge of two terms (merge.py) is
a pure function over forms."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...core.errors import LimitExceededError, SchemaError, UnsupportedSchemaError
from .context import MAX_INLINE_DEPTH, CompileContext, NeedsDynamicScopes
from .documents import uri_pointer
from .forms import TOP, RefMarker, Term, as_terms, parse_term
from .keywords import (
    ANNOTATIONS,
    APPLICATORS,
    FLAT_KEYS,
    KNOWN,
    is_true,
    json_equal,
)
from .merge import merge_terms
from .negation import flat_exclusion, negate
from .one_of import one_of


@dataclass
class AlgebraState:
    """The counters of the analyses under way in one compile: the emitter owns it and hands it to
    its `SchemaAlgebra`; nothing else of the algebra changes while a compile runs."""

    inline_depth: int = 0  # references expanded in place, nested (MAX_INLINE_DEPTH)
    no_negation: int = 0  # > 0 in the scope of unevaluated*: `not` evaluates nothing
    one_of_depth: int = 0  # oneOfs nested in the one under way (its disjoint_checks budget)
    disjoint_checks: int = 0
    overlapping_one_ofs: int = 0  # oneOfs left to a value check so far (the emitter reads it)
    static_dynamic: str | None = None  # a $dynamicRef/$recursiveRef read as $ref


class SchemaAlgebra:
    """DNF construction and merging for one compile over the documents of `ctx`, with the
    counters in `state` (the emitter's)."""

    def __init__(self, ctx: CompileContext, state: AlgebraState):
        self.ctx = ctx
        self.limits = ctx.limits
        self.state = state

    def exact_dnf(self, schema, pointer: str) -> list:
        """dnf() for analyses that read the terms as the exact set (disjointness, finite value
        sets, member-name automata): a value check only makes the value at a `value` position
        exact, so here an overlapping oneOf raises UnsupportedSchemaError as without checks (and
        nested oneOfs are not followed through their negations, which multiplies the work)."""
        with self.ctx.narrowed(value_checks=False):
            return self.dnf(schema, pointer)

    def dnf(self, schema, pointer: str) -> list:
        """Flat conjunctions (`Term`s, forms.py) and RefMarkers whose union is `schema`."""
        if schema is True:
            return [TOP]
        if schema is False:
            return []
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {schema!r}", pointer)
        for key in ("$dynamicRef", "$recursiveRef"):
            if key in schema:
                schema = self._static_dynamic_ref(schema, key, pointer)
        constraining = [k for k in schema if k not in ANNOTATIONS and k in KNOWN]
        if constraining == ["$ref"]:
            return [RefMarker(schema["$ref"])]
        unevaluated = [
            k for k in ("unevaluatedProperties", "unevaluatedItems") if k in schema and not is_true(schema[k])
        ]
        if unevaluated and any(k in schema for k in APPLICATORS):
            return self._unevaluated_dnf(schema, unevaluated, pointer)
        flat = {k: v for k, v in schema.items() if k in FLAT_KEYS}
        if "const" in schema:
            const = schema["const"]
            flat["enum"] = [v for v in flat["enum"] if json_equal(v, const)] if "enum" in flat else [const]
        not_schema = schema.get("not")
        if not_schema is not None and flat_exclusion(not_schema, schema):
            flat["not"] = {
                "anyOf": [{k: not_schema[k] for k in ("enum", "pattern", "type", "multipleOf") if k in not_schema}]
            }
            not_schema = None
        term = parse_term(flat, pointer)
        for key in unevaluated:
            term = self._reduce_unevaluated(term, key, schema[key])
        factors: list[list] = [[term]]
        if "$ref" in schema:
            factors.append(self.inline_ref(schema["$ref"], pointer))
        for i, sub in enumerate(schema.get("allOf", ())):
            factors.append(self.dnf(sub, f"{pointer}/allOf/{i}"))
        if "anyOf" in schema:
            factors.append([b for i, sub in enumerate(schema["anyOf"]) for b in self.dnf(sub, f"{pointer}/anyOf/{i}")])
        if "oneOf" in schema:
            factors.append(one_of(self, schema, term, pointer))
        if not_schema is not None:
            factors.append(self.dnf(negate(self, not_schema, f"{pointer}/not"), f"{pointer}/not"))
        if "if" in schema and "then" not in schema and "else" not in schema and self.state.no_negation:
            # a lone `if` constrains nothing, but when it holds it evaluates members for unevaluated*:
            # the instances where it holds, with its annotations, or any instance without them
            factors.append(self.dnf({"anyOf": [schema["if"], True]}, f"{pointer}/if"))
        if "if" in schema and ("then" in schema or "else" in schema):
            cond = schema["if"]
            then = schema.get("then", True)
            other = schema.get("else", True)
            factors.append(
                self.dnf({"anyOf": [{"allOf": [cond, then]}, {"allOf": [{"not": cond}, other]}]}, f"{pointer}/if")
            )
        for name, deps in (schema.get("dependentRequired") or {}).items():
            factors.append(
                self.dnf(
                    {"anyOf": [{"properties": {name: False}}, {"required": [name, *deps]}]},
                    f"{pointer}/dependentRequired",
                )
            )
        for name, dep in (schema.get("dependentSchemas") or {}).items():
            factors.append(
                self.dnf(
                    {"anyOf": [{"properties": {name: False}}, {"required": [name], "allOf": [dep]}]},
                    f"{pointer}/dependentSchemas",
                )
            )
        return self.product(factors, pointer)

    def product(self, factors: list[list], pointer: str) -> list:
        result: list = [TOP]
        for factor in factors:
            combined = []
            for left in result:
                for right in factor:
                    combined.extend(as_terms(self.merge(left, right, pointer)))
                    if len(combined) > self.limits.max_schema_branches:
                        raise LimitExceededError(
                            f"schema at {pointer} expands to more than {self.limits.max_schema_branches} "
                            "alternatives (Limits.max_schema_branches; anyOf/oneOf/if/dependencies multiply); "
                            "simplify it or raise the limit"
                        )
            result = combined
            if not result:
                self.ctx.note_empty(pointer, "the combined constraints (allOf/anyOf/...) exclude every instance")
                break
        return result

    def inline_ref(self, uri: str, pointer: str) -> list:
        if self.state.inline_depth > MAX_INLINE_DEPTH:
            raise UnsupportedSchemaError(
                "$ref",
                pointer,
                "reference cycle through allOf/anyOf/oneOf/not with no object or array in between cannot be expanded",
            )
        self.state.inline_depth += 1
        try:
            return self.dnf(self.ctx.lookup(uri, pointer), uri_pointer(uri))
        finally:
            self.state.inline_depth -= 1

    def merge(self, a, b, pointer: str):
        """Conjunction of two DNF terms: a term, a list of terms, or None (unsatisfiable)."""
        if isinstance(a, RefMarker) or isinstance(b, RefMarker):
            if isinstance(a, RefMarker) and isinstance(b, Term) and b.is_top():
                return a
            if isinstance(b, RefMarker) and isinstance(a, Term) and a.is_top():
                return b
            left = self.inline_ref(a.uri, pointer) if isinstance(a, RefMarker) else [a]
            right = self.inline_ref(b.uri, pointer) if isinstance(b, RefMarker) else [b]
            return self.merge_all(left, right, pointer)
        return merge_terms(a, b, self.ctx.unsupported, pointer)

    def merge_all(self, terms: list, others: list, pointer: str) -> list:
        """The DNF of (anyOf terms) and (anyOf others)."""
        out = []
        for term in terms:
            for other in others:
                m = self.merge(term, other, pointer)
                out.extend(as_terms(m))
        return out

    def restrict_type(self, term, t: str, pointer: str):
        """A DNF term limited to instances of type t; a reference is inlined for that when it
        can be (a branch "$ref" to an object schema without "type" also accepts every string)."""
        only_t = Term(type=frozenset([t]))
        if isinstance(term, RefMarker):
            try:
                return self.merge(term, only_t, pointer)
            except (SchemaError, UnsupportedSchemaError, LimitExceededError):
                return term
        return self.merge(term, only_t, pointer)

    def accepts_value(self, term, value, pointer: str) -> bool:
        """Does a DNF term (a flat term or a reference) accept this instance?"""
        if isinstance(term, RefMarker):
            return any(self.accepts_value(t, value, pointer) for t in self.inline_ref(term.uri, pointer))
        return self.ctx.validates(term.as_schema(), value)

    def _static_dynamic_ref(self, schema: dict, key: str, pointer: str) -> dict:
        """$dynamicRef/$recursiveRef whose target is unambiguous behave like $ref; with several
        dynamic anchors the schema is compiled again with references specialised per dynamic
        scope (dynamic.py)."""
        uri = schema[key]
        if self.ctx.dynamic_anchors(key) <= 1:
            self.state.static_dynamic = key
            rest = {k: v for k, v in schema.items() if k != key}
            if "$ref" in rest:
                return {**rest, "allOf": [*rest.get("allOf", []), {"$ref": uri}]}
            return {**rest, "$ref": uri}
        raise NeedsDynamicScopes()

    def _unevaluated_dnf(self, schema: dict, keys: list[str], pointer: str) -> list:
        """unevaluatedProperties/Items next to in-place applicators, term by term.

        Each DNF term is one choice of succeeding branches; the members (items) its conjuncts
        evaluate are exactly its properties/patternProperties/additionalProperties (prefixItems/
        items/contains), so the unevaluated schema becomes the term's additionalProperties
        (items).  Other branches that happen to succeed as well could only evaluate more, so this
        is sound; it is exact unless several anyOf branches match at once.  `not` evaluates
        nothing (nor does an `if` that fails): in this scope `negate` keeps it apart
        (UNANNOTATED), and it joins the term only after the term's evaluated members are fixed.
        """
        rest = {k: v for k, v in schema.items() if k not in keys}
        self.state.no_negation += 1
        try:  # references are inlined in the scope too: their `not`s evaluate nothing either
            terms, flat_terms = self.dnf(rest, pointer), []
            while terms:
                term = terms.pop(0)
                if isinstance(term, RefMarker):
                    terms[:0] = self.inline_ref(term.uri, pointer)
                else:
                    flat_terms.append(term)
        finally:
            self.state.no_negation -= 1
        out = []
        for term in flat_terms:
            unannotated, term = term.unannotated, replace(term, unannotated=())
            for key in keys:
                own = term.object.unevaluated if key == "unevaluatedProperties" else term.array.unevaluated
                if is_true(own if own is not None else False):
                    continue  # an unevaluated* true among the term's conjuncts evaluates every member
                term = self._reduce_unevaluated(term, key, schema[key])
            factors = [[term]] + [self.dnf(sub, f"{pointer}/not") for sub in unannotated]
            out.extend(self.product(factors, pointer))
        return out

    def _reduce_unevaluated(self, term: Term, key: str, value) -> Term:
        """unevaluated* next to flat keywords only: additionalProperties, or the items past
        prefixItems (those matching `contains` are evaluated too, from draft 2020-12 on)."""
        if key == "unevaluatedProperties":
            o = term.object
            return replace(term, object=replace(o, unevaluated=None, additional=_first(o.additional, value)))
        a = term.array
        items = a.items
        if items is None:
            if a.contains is None or self.ctx.draft == "draft2019-09":
                items = value
            elif value is False:
                items = a.contains
            else:
                items = {"anyOf": [a.contains, value]}
        return replace(term, array=replace(a, unevaluated=None, items=items))


def _first(x, y):
    return y if x is None else x
