"""The schema algebra: a subschema as a disjunctive normal form of flat terms, and the
conjunction (merge) of two terms; unevaluated* and static dynamic references are rewritten here."""

from __future__ import annotations

import math
from fractions import Fraction

from ..errors import BudgetExceededError, SchemaError, UnsupportedSchemaError
from .context import MAX_INLINE_DEPTH, CompileContext, _NeedsDynamicScopes
from .documents import _uri_pointer
from .keywords import (
    _APPLICATORS, _KNOWN, ANNOTATIONS, FLAT_KEYS, UNANNOTATED, WITNESS, _canon, _is_true, _json_equal, _RefMarker,
    _as_schema, _as_terms, _types_of,
)
from .leaves import _search
from .negation import _flat_exclusion

class AlgebraMixin:
    """DNF construction and merging (methods of the compiler; `self` is its CompileContext)."""

    def exact_dnf(self, schema, pointer: str) -> list:
        """dnf() for analyses that read the terms as the exact set (disjointness, finite value
        sets, member-name automata): a value check only makes the value at a `value` position
        exact, so here an overlapping oneOf raises UnsupportedSchemaError as without checks (and
        nested oneOfs are not followed through their negations, which multiplies the work)."""
        with self.narrowed(value_checks=False):
            return self.dnf(schema, pointer)

    def dnf(self, schema, pointer: str) -> list:
        """Flat conjunctions (dicts) and _RefMarkers whose union is `schema`."""
        if schema is True:
            return [{}]
        if schema is False:
            return []
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {schema!r}", pointer)
        for key in ("$dynamicRef", "$recursiveRef"):
            if key in schema:
                schema = self._static_dynamic_ref(schema, key, pointer)
        constraining = [k for k in schema if k not in ANNOTATIONS and k in _KNOWN]
        if constraining == ["$ref"]:
            return [_RefMarker(schema["$ref"])]
        unevaluated = [k for k in ("unevaluatedProperties", "unevaluatedItems")
                       if k in schema and not _is_true(schema[k])]
        if unevaluated and any(k in schema for k in _APPLICATORS):
            return self._unevaluated_dnf(schema, unevaluated, pointer)
        for key in unevaluated:
            schema = self._reduce_unevaluated(schema, key, pointer)
        flat = {k: v for k, v in schema.items() if k in FLAT_KEYS}
        if "const" in schema:
            const = schema["const"]
            flat["enum"] = [v for v in flat["enum"] if _json_equal(v, const)] if "enum" in flat else [const]
        not_schema = schema.get("not")
        if not_schema is not None and _flat_exclusion(not_schema, schema):
            flat["not"] = {"anyOf": [{k: not_schema[k] for k in ("enum", "pattern", "type", "multipleOf")
                                      if k in not_schema}]}
            not_schema = None
        factors: list[list] = [[flat]]
        if "$ref" in schema:
            factors.append(self.inline_ref(schema["$ref"], pointer))
        for i, sub in enumerate(schema.get("allOf", ())):
            factors.append(self.dnf(sub, f"{pointer}/allOf/{i}"))
        if "anyOf" in schema:
            factors.append([b for i, sub in enumerate(schema["anyOf"]) for b in self.dnf(sub, f"{pointer}/anyOf/{i}")])
        if "oneOf" in schema:
            factors.append(self.one_of(schema, flat, pointer))
        if not_schema is not None:
            factors.append(self.dnf(self.negate(not_schema, f"{pointer}/not"), f"{pointer}/not"))
        if "if" in schema and "then" not in schema and "else" not in schema and self.no_negation:
            # a lone `if` constrains nothing, but when it holds it evaluates members for unevaluated*:
            # the instances where it holds, with its annotations, or any instance without them
            factors.append(self.dnf({"anyOf": [schema["if"], True]}, f"{pointer}/if"))
        if "if" in schema and ("then" in schema or "else" in schema):
            cond = schema["if"]
            then = schema.get("then", True)
            other = schema.get("else", True)
            factors.append(self.dnf({"anyOf": [{"allOf": [cond, then]}, {"allOf": [{"not": cond}, other]}]},
                                    f"{pointer}/if"))
        for name, deps in (schema.get("dependentRequired") or {}).items():
            factors.append(self.dnf({"anyOf": [{"properties": {name: False}}, {"required": [name, *deps]}]},
                                    f"{pointer}/dependentRequired"))
        for name, dep in (schema.get("dependentSchemas") or {}).items():
            factors.append(self.dnf({"anyOf": [{"properties": {name: False}},
                                               {"required": [name], "allOf": [dep]}]},
                                    f"{pointer}/dependentSchemas"))
        return self.product(factors, pointer)

    def product(self, factors: list[list], pointer: str) -> list:
        result: list = [{}]
        for factor in factors:
            combined = []
            for left in result:
                for right in factor:
                    combined.extend(_as_terms(self.merge(left, right, pointer)))
                    if len(combined) > self.limits.max_schema_branches:
                        raise BudgetExceededError(
                            f"schema at {pointer} expands to more than {self.limits.max_schema_branches} "
                            "alternatives (Limits.max_schema_branches; anyOf/oneOf/if/dependencies multiply); "
                            "simplify it or raise the limit")
            result = combined
            if not result:
                self.note_empty(pointer, "the combined constraints (allOf/anyOf/...) exclude every instance")
                break
        return result

    def inline_ref(self, uri: str, pointer: str) -> list:
        if self.inline_depth > MAX_INLINE_DEPTH:
            raise UnsupportedSchemaError("$ref", pointer, "reference cycle through allOf/anyOf/oneOf/not "
                                         "with no object or array in between cannot be expanded")
        self.inline_depth += 1
        try:
            return self.dnf(self.lookup(uri, pointer), _uri_pointer(uri))
        finally:
            self.inline_depth -= 1

    def merge(self, a, b, pointer: str):
        """Conjunction of two DNF terms: a flat dict, a list of flat dicts, or None (unsatisfiable)."""
        if isinstance(a, _RefMarker) or isinstance(b, _RefMarker):
            if isinstance(a, _RefMarker) and isinstance(b, dict) and not b:
                return a
            if isinstance(b, _RefMarker) and isinstance(a, dict) and not a:
                return b
            left = self.inline_ref(a.uri, pointer) if isinstance(a, _RefMarker) else [a]
            right = self.inline_ref(b.uri, pointer) if isinstance(b, _RefMarker) else [b]
            return self.merge_all(left, right, pointer)
        return _merge_flat(a, b, self, pointer)

    def merge_all(self, terms: list, others: list, pointer: str) -> list:
        """The DNF of (anyOf terms) and (anyOf others)."""
        out = []
        for term in terms:
            for other in others:
                m = self.merge(term, other, pointer)
                out.extend(_as_terms(m))
        return out

    def restrict_type(self, term, t: str, pointer: str):
        """A DNF term limited to instances of type t; a reference is inlined for that when it
        can be (a branch "$ref" to an object schema without "type" also accepts every string)."""
        if isinstance(term, _RefMarker):
            try:
                return self.merge(term, {"type": [t]}, pointer)
            except (SchemaError, UnsupportedSchemaError, BudgetExceededError):
                return term
        return self.merge(term, {"type": [t]}, pointer) if isinstance(term, dict) else term

    def accepts_value(self, term, value, pointer: str) -> bool:
        """Does a DNF term (a flat dict or a reference) accept this instance?"""
        if isinstance(term, _RefMarker):
            return any(self.accepts_value(t, value, pointer) for t in self.inline_ref(term.uri, pointer))
        return self.validates(_as_schema(term), value)

    def _static_dynamic_ref(self, schema: dict, key: str, pointer: str) -> dict:
        """$dynamicRef/$recursiveRef whose target is unambiguous behave like $ref; with several
        dynamic anchors the schema is compiled again with references specialised per dynamic
        scope (dynamic.py)."""
        uri = schema[key]
        if self.dynamic_anchors(key) <= 1:
            self.static_dynamic = key
            rest = {k: v for k, v in schema.items() if k != key}
            if "$ref" in rest:
                return {**rest, "allOf": [*rest.get("allOf", []), {"$ref": uri}]}
            return {**rest, "$ref": uri}
        raise _NeedsDynamicScopes()

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
        self.no_negation += 1
        try:  # references are inlined in the scope too: their `not`s evaluate nothing either
            terms, flat_terms = self.dnf(rest, pointer), []
            while terms:
                term = terms.pop(0)
                if isinstance(term, _RefMarker):
                    terms[:0] = self.inline_ref(term.uri, pointer)
                else:
                    flat_terms.append(term)
        finally:
            self.no_negation -= 1
        out = []
        for term in flat_terms:
            term = dict(term)
            unannotated = term.pop(UNANNOTATED, [])
            for key in keys:
                if _is_true(term.get(key, False)):
                    continue  # an unevaluated* true among the term's conjuncts evaluates every member
                term = self._reduce_unevaluated({**term, key: schema[key]}, key, pointer)
            factors = [[term]] + [self.dnf(sub, f"{pointer}/not") for sub in unannotated]
            out.extend(self.product(factors, pointer))
        return out

    def _reduce_unevaluated(self, schema: dict, key: str, pointer: str) -> dict:
        """unevaluated* next to flat keywords only: additionalProperties, or the items past
        prefixItems (those matching `contains` are evaluated too, from draft 2020-12 on)."""
        rest = {k: v for k, v in schema.items() if k != key}
        if key == "unevaluatedProperties":
            if "additionalProperties" not in rest:
                rest["additionalProperties"] = schema[key]
            return rest
        if "items" not in rest:
            contains = rest.get("contains")
            if contains is None or self.draft == "draft2019-09":
                rest["items"] = schema[key]
            elif schema[key] is False:
                rest["items"] = contains
            else:
                rest["items"] = {"anyOf": [contains, schema[key]]}
        return rest


_MAX_KEYS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
_MIN_KEYS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")


def _merge_flat(a: dict, b: dict, comp: CompileContext, pointer: str):
    if not a:
        return dict(b)
    if not b:
        return dict(a)
    out = dict(a)
    for key, value in b.items():
        if key not in out:
            out[key] = value
            continue
        mine = out[key]
        if key == "type":
            ta = _types_of({"type": mine})
            tb = _types_of({"type": value})
            both = ta & tb
            if "number" in both:
                both.discard("integer")
            out[key] = sorted(both)
        elif key == "enum":
            out[key] = [v for v in mine if any(_json_equal(v, w) for w in value)]
        elif key in _MAX_KEYS:
            out[key] = max(mine, value)
        elif key in _MIN_KEYS:
            out[key] = min(mine, value)
        elif key == "multipleOf":
            if mine == value:
                continue
            if isinstance(mine, int) and isinstance(value, int):
                out[key] = mine * value // math.gcd(mine, value)
            else:
                fa, fb = Fraction(str(mine)), Fraction(str(value))
                ratio = fa / fb if fa >= fb else fb / fa
                if ratio.denominator == 1:
                    out[key] = max(mine, value)
                else:
                    comp.unsupported("allOf", pointer, "two non-integer multipleOf values that do not divide")
        elif key == "pattern":
            if mine != value:
                out["x-patterns"] = [*out.get("x-patterns", []), value]
        elif key == "x-patterns":
            out[key] = [*mine, *value]
        elif key == "format":
            continue  # format only narrows strings: keeping one of two is still sound
        elif key == "not":  # both are leaf exclusions (see _flat_exclusion): {"anyOf": [...]}
            out[key] = {"anyOf": [*mine["anyOf"], *value["anyOf"]]}
        elif key == "required":
            out[key] = list(dict.fromkeys([*mine, *value]))
        elif key == "uniqueItems":
            out[key] = bool(mine) or bool(value)
        elif key == WITNESS:
            out[key] = [*mine, *(c for c in value if c not in mine)]
        elif key == UNANNOTATED:
            out[key] = [*mine, *value]
        elif key in ("properties", "patternProperties", "additionalProperties", "propertyNames",
                     "prefixItems", "items", "contains"):
            continue  # handled below
        else:
            if _canon(mine) != _canon(value):
                comp.unsupported("allOf", pointer, f"cannot combine two {key!r} keywords")
    _merge_object_keys(out, a, b, comp, pointer)
    _merge_array_keys(out, a, b, comp, pointer)
    if "type" in out and not out["type"]:
        return None
    if "enum" in out and not out["enum"]:
        return None
    return out


def _both(x, y):
    if x is None or _is_true(x):
        return y
    if y is None or _is_true(y):
        return x
    if x is False or y is False:
        return False
    if _canon(x) == _canon(y):
        return x
    return {"allOf": [x, y]}


def _applicable(f: dict, name: str, pointer: str):
    """The schema `f` applies to a member called `name` that its own `properties` do not list."""
    matching = [s for p, s in (f.get("patternProperties") or {}).items() if _search(p, name, pointer)]
    if matching:
        out = None
        for s in matching:
            out = _both(out, s)
        return out
    return f.get("additionalProperties")


def _merge_object_keys(out: dict, a: dict, b: dict, comp: CompileContext, pointer: str) -> None:
    keys = ("properties", "patternProperties", "additionalProperties", "propertyNames")
    if not any(k in a for k in keys) or not any(k in b for k in keys):
        return
    pa, pb = a.get("properties") or {}, b.get("properties") or {}
    props = {}
    for name in list(pa) + [n for n in pb if n not in pa]:
        left = pa[name] if name in pa else _applicable(a, name, pointer)
        right = pb[name] if name in pb else _applicable(b, name, pointer)
        merged = _both(left, right)
        props[name] = True if merged is None else merged
    if props:
        out["properties"] = props
    qa, qb = a.get("patternProperties") or {}, b.get("patternProperties") or {}
    if qa or qb:
        pats = dict(qa)
        for p, s in qb.items():
            pats[p] = _both(pats.get(p), s) if p in pats else s
        for own, other in ((qa, b), (qb, a)):
            for p in own:
                other_pats = other.get("patternProperties") or {}
                if p not in other_pats and not _is_true(other.get("additionalProperties", True)):
                    comp.unsupported("allOf", pointer, "patternProperties combined with another branch's "
                                     "additionalProperties")
        out["patternProperties"] = pats
    addl = _both(a.get("additionalProperties"), b.get("additionalProperties"))
    if addl is not None:
        out["additionalProperties"] = addl
    names = _both(a.get("propertyNames"), b.get("propertyNames"))
    if names is not None:
        out["propertyNames"] = names


def _merge_array_keys(out: dict, a: dict, b: dict, comp: CompileContext, pointer: str) -> None:
    if "prefixItems" in a or "prefixItems" in b or ("items" in a and "items" in b):
        pa, pb = a.get("prefixItems") or [], b.get("prefixItems") or []
        ia, ib = a.get("items", True), b.get("items", True)
        n = max(len(pa), len(pb))
        prefix = []
        for i in range(n):
            left = pa[i] if i < len(pa) else ia
            right = pb[i] if i < len(pb) else ib
            merged = _both(left, right)
            prefix.append(True if merged is None else merged)
        if prefix:
            out["prefixItems"] = prefix
        items = _both(ia, ib)
        if items is None or _is_true(items):
            out.pop("items", None)
        else:
            out["items"] = items
    if "contains" in a and "contains" in b and _canon(a["contains"]) != _canon(b["contains"]):
        comp.unsupported("allOf", pointer, "two different 'contains' keywords; kept the first")
