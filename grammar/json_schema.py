"""JSON Schema -> grammar IR: the structural part (objects, arrays, combinators, references).

`json_schema_to_grammar(schema, ...)` returns a `Grammar` whose language is a set of JSON texts
every one of which validates against `schema` (soundness), and which contains the usual
serialisations of valid instances (completeness) within the documented limits below.

How it works
------------
1. The document is checked against its metaschema (`SchemaError` with a JSON pointer), then
   rewritten into draft 2020-12 spelling with absolute `$ref`s (json_schema_docs.py) and
   registered with `referencing`, which resolves `$id`, `$anchor` and JSON pointers.
2. Each subschema is turned into *disjunctive normal form*: a list of "flat" conjunctions
   (plain keyword dicts without allOf/anyOf/oneOf/not/if/dependent*), by merging allOf
   branches, distributing anyOf/oneOf over their siblings, rewriting if/then/else and
   dependencies as anyOf, and pushing `not` inwards where it has a positive form.
   Subschemas below properties/items stay lazy (`{"allOf": [a, b]}`) until they are compiled,
   so recursive schemas never get expanded more than once.
   oneOf is exact when its branches are provably disjoint (types, consts/enums, bounds, a
   discriminator property that one branch requires and whose values the other excludes; checks
   budgeted by MAX_DISJOINT_CHECKS), when it only rules out a type that two branches accept wholesale,
   or when every branch can be negated: oneOf [B1..Bn] = anyOf_i (Bi and not Bj, j != i).
3. Each flat conjunction becomes, per allowed type, a leaf token (json_strings / json_numbers)
   or an object/array grammar.  Every compiled object/array schema and every `$ref` target gets
   its own IR rule, memoised by the canonical JSON of the subschema (and the indent depth), so
   identical subschemas share a rule and recursion becomes a recursive rule.  An object with
   many optional members is split into "members" checkpoint rules every few members, so no rule
   body grows quadratically (or exponentially, with min/maxProperties).

Documented limits (completeness, never soundness)
------------------------------------------------
- Member order.  property_order="definition" (the default) takes definition order (below).
  With property_order="any", objects without maxProperties (and with minProperties no larger
  than the number of required members) accept their members in any order.  Up to
  ANY_ORDER_MAX_MEMBERS (6) named members this is exact: each at most once, required ones
  present, other members (additionalProperties / patternProperties) anywhere.
  Larger objects track only the required members (see `interleaved_members`): optional and
  additional members may come anywhere, and an optional name may repeat (json.loads keeps the
  last value, which validates too).  Past INTERLEAVE_ANY_ORDER_REQUIRED required members those
  keep the order of `properties` or of `required` among themselves.  Objects with
  maxProperties, and every object with property_order="definition", take definition order:
  the properties of `properties` in the order the schema lists them (required ones cannot be
  skipped, optional ones may be), then `required` names not listed in `properties`, then any
  other members.  When allOf/$ref/anyOf
  branches are merged, the node's own properties come first, then each branch's new ones in
  branch order.  `const`/`enum` objects are accepted in the key order given.
- "integer" accepts integer literals and, from draft 6 on, zero fractions such as 1.0 (as the
  json_numbers leaf does); exponent spellings of integers (1e2) are not accepted.
- Enums of more than BIG_ENUM (64) values accept numbers in the spellings json.dumps writes
  ("5", "5.0", "0.25"), so the whole enum is one set of literals (a trie); smaller enums accept
  every spelling of the value ("5.00", "2.5e-1").  A string value holding a lone surrogate is
  accepted as json.dumps escapes it ("\\ud800").
- `format` narrows strings (sound), although `jsonschema` treats it as an annotation.
- Duplicate member names are not prevented among additional members (json.loads keeps the
  last one, which validates too).  So that minProperties never over-counts, a schema that needs
  two or more additional members to reach it raises UnsupportedSchemaError('minProperties').
- Negations that hold when some member breaks a keyword (not additionalProperties /
  patternProperties / propertyNames) take that member as the object's last one (see WITNESS);
  its key is a named member or matches none of the object's patterns.
- `not: {type: integer}` accepts the non-integral spellings of `json_numbers.non_integral_dfa`
  (what json.dumps writes for non-integral floats), not e.g. "15e-1".
- With `indent`, nesting deeper than `INDENT_DEPTH_LIMIT` levels falls back to flexible
  whitespace (still valid JSON for the schema).

Beyond context-free structure, resolved at compile time:
- `$dynamicRef` / `$recursiveRef` with several dynamic anchors: every reference is specialised
  for the dynamic scope that reaches it (json_schema_dynamic.py), one copy per (target, scope).
- unevaluatedProperties / unevaluatedItems next to in-place applicators: per DNF term the
  evaluated members are its properties / patterns / items (and `contains` matches, 2020-12);
  `not` and failed `if` conditions evaluate nothing (UNANNOTATED).  Exact unless two anyOf
  branches match one instance at once (then stricter, never wider).
- Unsatisfiable schemas raise SchemaError, or with unsatisfiable="empty" (validation) compile
  to the empty language; unsatisfiable subschemas drop their branch, member or item.

Value checks (value_checks=True, the default): uniqueItems on item types that are not a small
enum compiles to an array rule without it, and a oneOf whose branches overlap on objects, arrays
or strings (and cannot be negated) to the union of its branches; `Grammar.checks` names those
rules, and the matcher (masks/value_checks.py) rejects the bytes that close a duplicate item or a
value that jsonschema rejects against the subschema.  Analyses that need exact terms (disjointness,
finite value sets, propertyNames: `exact_dnf`) still treat an overlapping oneOf as unsupported.

What cannot be expressed exactly (oneOf overlapping on numbers, `not` of uniqueItems / contains /
dependentSchemas, maxContains without a negatable `contains`, ...) raises
`UnsupportedSchemaError(keyword, pointer)`; with `lenient=True` it is widened instead and
`warnings.warn` says what was widened.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable
from urllib.parse import urldefrag

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from . import passes
from .errors import BudgetExceededError, CompileClock, GrammarError, SchemaError, UnsupportedSchemaError
from .ir import (
    EPSILON, NOTHING, Alt, CharClass, CharFsm, Expr, Grammar, Ref, Repeat, Seq, alt, lit, opt, rep, seq,
    star,
)
from .json_strings import string_literal_expr
from .json_schema_dynamic import DynamicScopes
from .value_checks import UniqueItems, ValidatesSchema
from .json_schema_docs import (
    DEFAULT_BASE, MAX_SCHEMA_DEPTH, VALUE_KEYS, check_json_document, draft_of, join_uri, normalize_document,
    translate_pointer,
)

__all__ = ["json_schema_to_grammar", "INDENT_DEPTH_LIMIT"]

INDENT_DEPTH_LIMIT = 12
"""Nesting depth up to which `indent=` layout is exact; deeper values use flexible whitespace."""

MAX_RULES = 20_000
MAX_BRANCHES = 512
MAX_DISJOINT_CHECKS = 2000
"""Pairwise disjointness checks one oneOf (with the oneOfs its branches reach) may make; past
it branches count as overlapping (conservative: the oneOf is then negated or unsupported)."""
MAX_INLINE_DEPTH = 40
ANY_ORDER_MAX_MEMBERS = 6
"""With property_order="any", objects with at most this many named members accept them in any
order exactly (2^n states); larger ones only track their required members."""
UNIQUE_ENUM_MAX = 8
"""uniqueItems is exact for items from an enum of at most this many values (2^n states)."""
COUNT_BLOCK = 64
"""Repetition counts past this (e.g. maxItems 4096) are built from blocks (see `counted`)."""
STRING_COUNT_BLOCK = 1024
"""Strings with only a length bound count characters directly up to this many, in a chain of
rules of this many past it (each character a raw code point or a reference to one shared escape
rule, ~8 states a count; see `chained`)."""
SHORT_STRING = 64
"""Length bounds up to this go into the string's code-point automaton (escapes spelt out)."""
ITEM_RULE_SIZE = 40
"""Array items bigger than this become a rule when repeated a bounded number of times."""
INTERLEAVE_ANY_ORDER_REQUIRED = 8
"""Larger objects track which required members were written (2^r states) up to this many of
them; past it the required ones keep the order of `properties` or of `required` among themselves."""
MAX_OBJECT_EXPR = 40_000
BIG_ENUM = 64
"""Enums with more values than this take each number in the spellings json.dumps writes ("5",
"5.0", "0.25"), so the whole enum is one set of literals (a trie); smaller enums take every
spelling of a number's value ("5.00", "2.5e-1")."""
MAX_PATTERN_GROUPS = 5

ALL_TYPES = ("null", "boolean", "object", "array", "number", "string", "integer")
_WS_RANGES = ((9, 10), (13, 13), (32, 32))

# Keywords that constrain nothing (annotations, containers of definitions, identifiers).
ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly",
    "contentMediaType", "contentEncoding", "contentSchema", "$schema", "$id", "$anchor", "$defs",
    "definitions", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "discriminator", "nullable",
})
WITNESS = "\x00witness"
"""Internal flat keyword (no schema can spell it: JSON Schema keys never start with NUL) for the
negation of additionalProperties / patternProperties / propertyNames: a list of conditions
{"pattern": p or None, "names": [...], "patterns": [...], "value": schema, ["key_not": schema]},
each met by a 'witness' member: a key matching p (None: any key) that is none of `names`,
matches none of `patterns` (nor `key_not`, a propertyNames schema), with a value valid for
`value`.  The witnesses are the object's last members, with
keys that no later witness can have, because json.loads keeps the last of repeated names: so
the parsed object really holds each witness's value."""
UNANNOTATED = "\x00unannotated"
"""Internal flat keyword: a list of schemas a term must also satisfy that evaluate no member or
item for unevaluatedProperties/Items (the `not`s in its scope, `if` conditions that failed)."""
# Keywords that stay in a flat conjunction (merged by `_merge_flat`).
FLAT_KEYS = frozenset({
    "type", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "format", "properties", "required", "additionalProperties",
    "patternProperties", "propertyNames", "minProperties", "maxProperties", "prefixItems", "items",
    "contains", "minContains", "maxContains", "minItems", "maxItems", "uniqueItems",
    "unevaluatedProperties", "unevaluatedItems", WITNESS, UNANNOTATED,
})
MAX_WITNESSES = 3
_APPLICATORS = ("$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentRequired",
                "dependentSchemas", "$dynamicRef", "$recursiveRef")
_KNOWN = FLAT_KEYS | ANNOTATIONS | set(_APPLICATORS) | {"const"}


def _canon(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _json_equal(a, b) -> bool:
    """JSON Schema equality: 1 == 1.0, but True != 1; objects ignore key order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _is_true(schema) -> bool:
    return schema is True or (isinstance(schema, dict) and not (set(schema) & (_KNOWN - ANNOTATIONS)))


def _types_of(flat: dict) -> set[str]:
    """Allowed JSON types; "integer" stands for integers only, "number" includes them."""
    t = flat.get("type")
    if t is None:
        return set(ALL_TYPES)
    out = set([t] if isinstance(t, str) else t)
    if "number" in out:
        out.add("integer")
    return out


@dataclass(frozen=True)
class _RefMarker:
    """A conjunction that is exactly one `$ref` (compiled as a reference to the target's rule)."""

    uri: str


# ---------------------------------------------------------------------------------------------
# Layout: where whitespace goes.


class _Layout:
    """Token separators for one nesting depth.

    depth None means "depth-independent": flexible or compact whitespace, or fixed separators.
    With indent, depth d gives json.dumps(indent=N) text at that depth.
    """

    def __init__(self, whitespace: str, indent, max_whitespace, separators, root_whitespace: bool = True):
        if whitespace not in ("flexible", "compact"):
            raise ValueError(f"whitespace must be 'flexible' or 'compact', got {whitespace!r}")
        if max_whitespace is not None and (not isinstance(max_whitespace, int) or max_whitespace < 0):
            raise ValueError(f"max_whitespace must be a non-negative int, got {max_whitespace!r}")
        if isinstance(indent, int) and not isinstance(indent, bool):
            indent = " " * indent if indent >= 0 else None
        elif indent is not None and not isinstance(indent, str):
            raise ValueError(f"indent must be an int or a string, got {indent!r}")
        self.indent = indent
        if separators is not None:
            item_sep, key_sep = separators
        elif indent is not None:
            item_sep, key_sep = ",", ": "
        elif whitespace == "compact":
            item_sep, key_sep = ",", ":"
        else:
            item_sep, key_sep = None, None
        self.fixed = separators is not None or indent is not None or whitespace == "compact"
        self.item_sep, self.key_sep = item_sep, key_sep
        cls = CharClass(_WS_RANGES)
        self.flex_ws = rep(cls, 0, max_whitespace)
        self.root_ws = EPSILON if self.fixed or not root_whitespace else self.flex_ws

    def child(self, depth):
        if self.indent is None or depth is None:
            return None
        return depth + 1 if depth + 1 < INDENT_DEPTH_LIMIT else None

    def start_depth(self):
        return 0 if self.indent is not None else None

    def parts(self, depth, open_: str, close: str):
        """(open, first_prefix, next_prefix, colon, item_end, close_empty, close_nonempty)."""
        if self.indent is not None and depth is not None:
            inner = "\n" + self.indent * (depth + 1)
            outer = "\n" + self.indent * depth
            return (lit(open_), lit(inner), lit(self.item_sep + inner), lit(self.key_sep), EPSILON,
                    lit(close), lit(outer + close))
        if self.fixed and not (self.indent is not None and depth is None):
            return (lit(open_), EPSILON, lit(self.item_sep), lit(self.key_sep), EPSILON, lit(close), lit(close))
        ws = self.flex_ws
        return (seq(lit(open_), ws), EPSILON, seq(lit(","), ws), seq(ws, lit(":"), ws), ws, lit(close), lit(close))


# ---------------------------------------------------------------------------------------------
# The compiler.


class _Compiler:
    def __init__(self, schema, *, whitespace, indent, max_whitespace, additional_properties_default, lenient,
                 separators, retrieve, property_order="definition", root_whitespace=True,
                 dynamic_scopes=False, value_checks=True):
        if property_order not in ("any", "definition"):
            raise ValueError(f"property_order must be 'any' or 'definition', not {property_order!r}")
        self.property_order = property_order
        self.lenient = lenient
        self.layout = _Layout(whitespace, indent, max_whitespace, separators, root_whitespace)
        self.addl_default = additional_properties_default
        self.retrieve_raw = retrieve
        self.rules: dict[str, Expr] = {}
        self.memo: dict[tuple, Expr] = {}
        self.escape_rule: Ref | None = None  # the shared escape rule of counted strings (json_char)
        self.recursed: set[str] = set()
        self.names: dict[str, int] = {}
        self.empty_reason: tuple[str, str] | None = None
        self.inline_depth = 0
        self.retrieved: list = []
        self.no_negation = 0
        self.one_of_depth = 0
        self.disjoint_checks = 0
        self.value_checks = value_checks
        self.checks: dict[str, object] = {}  # rule name -> value check (grammar/value_checks.py)
        self.overlapping_one_ofs = 0  # oneOfs left to a value check so far (see `value`)
        self.no_value_checks = 0  # > 0 where a superset would not be exact (one_of_by_negation)
        self.static_dynamic: str | None = None
        self.clock = CompileClock()  # no limit unless json_schema_to_grammar sets one
        self.draft = draft_of(schema)
        root_base = schema.get("$id") if isinstance(schema, dict) and isinstance(schema.get("$id"), str) else None
        if self.draft == "draft4" and isinstance(schema, dict) and isinstance(schema.get("id"), str):
            root_base = schema["id"]
        # A relative root $id ("example.org/a.json") is resolved against the default base once,
        # so that the root's own $id does not join onto itself when the document is normalized.
        self.base = join_uri(DEFAULT_BASE, urldefrag(root_base)[0]) if root_base and urldefrag(root_base)[0] else DEFAULT_BASE
        self.root = self._prepare(schema, self.base, self.draft)
        self.registry = Registry(retrieve=self._retrieve).with_resource(
            self.base, Resource(self.root, specification=DRAFT202012))
        self.registry = self.registry.crawl()
        self.resolver = self.registry.resolver()
        self.validator_cls = jsonschema.Draft202012Validator
        if dynamic_scopes:  # several dynamic anchors: specialise references per dynamic scope
            self.root = DynamicScopes(lambda uri: self.lookup(uri, "#"), self._register).specialise_root(
                self.root, self.base)

    def _register(self, uri: str, schema) -> None:
        self.registry = self.registry.with_resource(uri, Resource(schema, specification=DRAFT202012))
        self.resolver = self.registry.resolver()

    # -- documents and references ------------------------------------------------------------

    def _prepare(self, doc, base, draft):
        doc = normalize_document(doc, base, draft)
        if self.addl_default is not True:
            doc = _forbid_additional(doc, only_declared=self.addl_default == "declared")
        return doc

    def _retrieve(self, uri: str) -> Resource:
        if self.retrieve_raw is None:
            raise Unresolvable(uri)
        raw = self.retrieve_raw(uri)
        self.retrieved.append(raw)
        draft = draft_of(raw, self.draft)
        return Resource(self._prepare(raw, uri, draft), specification=DRAFT202012)

    def lookup(self, uri: str, pointer: str):
        url, frag = urldefrag(uri)
        errors = []
        for candidate in (translate_pointer(frag) if frag.startswith("/") else [frag]):
            target = url + ("#" + candidate if candidate else "")
            try:
                return self.resolver.lookup(target).contents
            except Unresolvable as exc:
                errors.append(str(exc))
            except Exception as exc:  # malformed documents from retrieval, bad pointers
                errors.append(f"{type(exc).__name__}: {exc}")
        raise SchemaError(f"unresolvable $ref {uri!r} ({errors[0]}); define the target or fix the reference",
                          pointer)

    # -- helpers -------------------------------------------------------------------------------

    def unsupported(self, keyword: str, pointer: str, detail: str) -> None:
        """Raise UnsupportedSchemaError, or under lenient=True warn that the keyword is widened."""
        if not self.lenient:
            raise UnsupportedSchemaError(keyword, pointer, detail)
        warnings.warn(f"pushmask: widened {keyword!r} at {pointer or '#'}: {detail}", stacklevel=4)

    def value_checks_allowed(self) -> bool:
        """May a keyword the grammar cannot express become a value check in the matcher?  Not
        where the caller needs the grammar itself exact (a negation's positive form)."""
        return self.value_checks and not self.no_value_checks

    def note_empty(self, pointer: str, why: str) -> None:
        if self.empty_reason is None:
            self.empty_reason = (pointer, why)

    def new_rule(self, hint: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]+", "_", hint).strip("_")[:40] or "r"
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        name = base if n == 0 else f"{base}_{n}"
        while name in self.rules or name == "root":  # "root" is the grammar's start rule, added last
            n += 1
            name = f"{base}_{n}"
        if len(self.rules) >= MAX_RULES:
            raise BudgetExceededError(f"JSON Schema compiles to more than {MAX_RULES} rules; "
                                      "simplify the schema or split it")
        self.rules[name] = NOTHING
        return name

    def rule_ref(self, hint: str, body: Expr) -> Ref:
        """A new rule holding `body`, referenced: copies of the reference stay one automaton."""
        name = self.new_rule(hint)
        self.rules[name] = body
        return Ref(name)

    def enum_values(self, term: dict) -> list:
        """The values of a flat term's enum that meet its other keywords.  Every value meets the
        enum itself, so only the rest is checked (jsonschema's enum check scans the whole list per
        value: quadratic in its size)."""
        return self.valid_values({k: v for k, v in _as_schema(term).items() if k != "enum"}, term["enum"])

    def valid_values(self, schema: dict, values: list) -> list:
        """The values jsonschema accepts against a (normalised, 2020-12) subschema: one validator
        for all of them, and none when the subschema holds only annotations."""
        if set(schema) <= ANNOTATIONS:
            return list(values)
        try:
            validator = self.validator_cls(schema, registry=self.registry)
        except Exception:  # noqa: BLE001 -- as in `validates`: be conservative
            return []
        out = []
        for value in values:
            try:
                if validator.is_valid(value):
                    out.append(value)
            except Exception:  # noqa: BLE001
                pass
        return out

    def validates(self, schema, instance) -> bool:
        """jsonschema's verdict for an instance against a (normalised, 2020-12) subschema."""
        try:
            validator = self.validator_cls(schema, registry=self.registry)
            return validator.is_valid(instance)
        except Exception:  # noqa: BLE001 -- a subschema jsonschema cannot evaluate: be conservative
            return False

    # -- entry ---------------------------------------------------------------------------------

    def compile(self) -> Grammar:
        layout = self.layout
        value = self.value(self.root, "#", layout.start_depth())
        if self.static_dynamic:
            key = self.static_dynamic
            anchor_key = "$dynamicAnchor" if key == "$dynamicRef" else "$recursiveAnchor"
            if _count_key(self.root, anchor_key) + sum(_count_key(d, anchor_key) for d in self.retrieved) > 1:
                raise _NeedsDynamicScopes()
        self.rules = {"root": seq(layout.root_ws, value, layout.root_ws), **self.rules}
        grammar = Grammar(self.rules, "root", checks=self.checks)
        return _prune(grammar, self.empty_reason)

    # -- values --------------------------------------------------------------------------------

    def value(self, schema, pointer: str, depth) -> Expr:
        """The IR for any JSON text valid against `schema` at indent depth `depth`."""
        self.clock.check(f"the subschema at {pointer}")
        if schema is True or (isinstance(schema, dict) and _is_true(schema)):
            return self.generic(depth)
        if schema is False:
            self.note_empty(pointer, "false schema")
            return NOTHING
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {schema!r}", pointer)
        key = (_canon(schema), depth)
        hit = self.memo.get(key)
        if hit is not None:
            if isinstance(hit, Ref):
                self.recursed.add(hit.name)
            return hit
        name = self.new_rule(_hint(schema, pointer))
        self.memo[key] = Ref(name)
        overlapping = self.overlapping_one_ofs
        branches = self.dnf(schema, pointer)
        if self.overlapping_one_ofs != overlapping:
            # a oneOf here compiled to the union of its branches: the value is checked against
            # this whole subschema when it closes, so the rule stays a rule (never inlined)
            self.checks[name] = ValidatesSchema(schema, self.validator_cls(schema, registry=self.registry), pointer)
        exprs = []
        structural = False
        for branch in branches:
            if isinstance(branch, _RefMarker):
                target = self.lookup(branch.uri, pointer)
                exprs.append(self.value(target, _uri_pointer(branch.uri), depth))
                structural = True
            else:
                expr, is_struct = self.flat(branch, pointer, depth)
                exprs.append(expr)
                structural |= is_struct
        body = alt(*exprs) if exprs else NOTHING
        if body == NOTHING and not branches:
            self.note_empty(pointer, "no instance satisfies all the constraints")
        if name not in self.recursed and name not in self.checks and (
                isinstance(body, Ref) or (not structural and _size(body) <= 60)):
            del self.rules[name]
            self.memo[key] = body
            return body
        self.rules[name] = body
        return Ref(name)

    def generic(self, depth) -> Expr:
        """Shared rules for any JSON value."""
        key = ("generic", depth)
        if key in self.memo:
            return self.memo[key]
        from .json_strings import ANY_STRING

        names = {k: self.new_rule(f"json_{k}" + ("" if depth is None else f"_d{depth}"))
                 for k in ("value", "object", "array")}
        self.memo[key] = Ref(names["value"])
        if ("json_string",) not in self.memo:
            sname = self.new_rule("json_string")
            self.rules[sname] = ANY_STRING
            self.memo[("json_string",)] = Ref(sname)
            nname = self.new_rule("json_number")
            self.rules[nname] = _number_expr(pointer="#")
            self.memo[("json_number",)] = Ref(nname)
        string, number = self.memo[("json_string",)], self.memo[("json_number",)]
        child = self.generic(self.layout.child(depth)) if self.layout.child(depth) != depth else Ref(names["value"])
        o_open, o_first, o_next, colon, end, close_e, close_ne = self.layout.parts(depth, "{", "}")
        member = seq(string, colon, child, end)
        self.rules[names["object"]] = alt(
            seq(o_open, close_e), seq(o_open, o_first, member, rep(seq(o_next, member), 0, None), close_ne))
        a_open, a_first, a_next, _, end, close_e, close_ne = self.layout.parts(depth, "[", "]")
        item = seq(child, end)
        self.rules[names["array"]] = alt(
            seq(a_open, close_e), seq(a_open, a_first, item, rep(seq(a_next, item), 0, None), close_ne))
        self.rules[names["value"]] = alt(Ref(names["object"]), Ref(names["array"]), string, number,
                                         lit("true"), lit("false"), lit("null"))
        return Ref(names["value"])

    # -- disjunctive normal form ---------------------------------------------------------------

    def exact_dnf(self, schema, pointer: str) -> list:
        """dnf() for analyses that read the terms as the exact set (disjointness, finite value
        sets, member-name automata): a value check only makes the value at a `value` position
        exact, so here an overlapping oneOf raises UnsupportedSchemaError as without checks (and
        nested oneOfs are not followed through their negations, which multiplies the work)."""
        self.no_value_checks += 1
        try:
            return self.dnf(schema, pointer)
        finally:
            self.no_value_checks -= 1

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
                    merged = self.merge(left, right, pointer)
                    if isinstance(merged, list):
                        combined.extend(merged)
                    elif merged is not None:
                        combined.append(merged)
                    if len(combined) > MAX_BRANCHES:
                        raise BudgetExceededError(
                            f"schema at {pointer} expands to more than {MAX_BRANCHES} alternatives "
                            "(anyOf/oneOf/if/dependencies multiply); simplify it")
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
            out = []
            for x in left:
                for y in right:
                    m = self.merge(x, y, pointer)
                    if isinstance(m, list):
                        out.extend(m)
                    elif m is not None:
                        out.append(m)
            return out
        return _merge_flat(a, b, self, pointer)

    def one_of(self, schema: dict, siblings: dict, pointer: str) -> list:
        """oneOf as anyOf when its branches (with their siblings) are provably disjoint."""
        if self.one_of_depth == 0:
            self.disjoint_checks = 0
        self.one_of_depth += 1
        try:
            return self._one_of(schema, siblings, pointer)
        finally:
            self.one_of_depth -= 1

    def _one_of(self, schema: dict, siblings: dict, pointer: str) -> list:
        groups = []
        for i, sub in enumerate(schema["oneOf"]):
            terms = []
            for term in self.dnf(sub, f"{pointer}/oneOf/{i}"):
                merged = self.merge(siblings, term, pointer)
                terms.extend(_as_terms(merged))
            groups.append(terms)
        # Decide type by type: a type on which the branches are disjoint is exact; a type that two
        # branches accept without any constraint is excluded (every such instance matches both).
        excluded = []
        doubled_values = []  # null/true/false/[] values that two or more branches accept

        def accepting(groups, value) -> int:
            return sum(1 for g in groups if any(self.accepts_value(x, value, pointer) for x in g))

        for t in ("null", "boolean", "object", "array", "string", "number"):
            restricted = []
            for g in groups:
                terms = []
                for term in g:
                    terms.extend(_as_terms(self.restrict_type(term, t, pointer)))
                restricted.append(terms)
            live = [g for g in restricted if g]
            if len(live) < 2:
                continue
            if all(self.disjoint(x, y, 0) for i, gi in enumerate(live) for gj in live[i + 1:]
                   for x in gi for y in gj):
                continue
            if t in ("null", "boolean"):  # few values: count the branches accepting each one
                doubled_values += [v for v in ((None,) if t == "null" else (True, False)) if accepting(live, v) >= 2]
                continue
            if t == "array" and self.disjoint_when_non_empty(live):
                # the branches share only [] (at most): it is invalid when two or more accept it
                if accepting(live, []) >= 2:
                    doubled_values.append([])
                continue
            total = sum(1 for g in live if any(isinstance(x, dict) and _total_on(x, t) for x in g))
            if total >= 2:
                excluded.append(t)
                continue
            exact = self.one_of_by_negation(schema, siblings, pointer)
            if exact is not None:
                return exact
            if t != "number" and self.value_checks_allowed():
                # the union of the branches; `value` checks the closed value against the schema
                # (a number's end is only known from the byte after it, outside the value's rule)
                self.overlapping_one_ofs += 1
                continue
            self.unsupported("oneOf", f"{pointer}/oneOf",
                             f"branches may overlap on {t} values, so 'exactly one' cannot be expressed"
                             + ("; widened to anyOf" if self.lenient else ""))
            break
        out = [t for g in groups for t in g]
        if excluded:
            keep = [t for t in ("null", "boolean", "object", "array", "string", "number") if t not in excluded]
            out = self.merge_all(out, [{"type": keep}], pointer) if keep else []
        for value in doubled_values:
            out = self.merge_all(out, self.dnf(self.negate({"const": value}, pointer), pointer), pointer)
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

    def disjoint_when_non_empty(self, groups: list) -> bool:
        """Are the branches' array terms disjoint on non-empty arrays (their first items cannot
        match two branches)?"""
        def first_item(term):
            if not isinstance(term, dict):
                return None
            prefix = term.get("prefixItems") or []
            return prefix[0] if prefix else term.get("items", True)

        for i, gi in enumerate(groups):
            for gj in groups[i + 1:]:
                for x in gi:
                    for y in gj:
                        a, b = first_item(x), first_item(y)
                        if a is None or b is None or not self._schemas_disjoint(a, b, 1):
                            return False
        return True

    def merge_all(self, terms: list, others: list, pointer: str) -> list:
        """The DNF of (anyOf terms) and (anyOf others)."""
        out = []
        for term in terms:
            for other in others:
                m = self.merge(term, other, pointer)
                out.extend(_as_terms(m))
        return out

    def accepts_value(self, term, value, pointer: str) -> bool:
        """Does a DNF term (a flat dict or a reference) accept this instance?"""
        if isinstance(term, _RefMarker):
            return any(self.accepts_value(t, value, pointer) for t in self.inline_ref(term.uri, pointer))
        return self.validates(_as_schema(term), value)

    def one_of_by_negation(self, schema: dict, siblings: dict, pointer: str) -> list | None:
        """oneOf [B1..Bn] = anyOf_i (Bi and not Bj for every j != i), when each `not` has a
        positive form; None when some negation cannot be expressed (or the expansion is too big)."""
        branches = schema["oneOf"]
        lenient, self.lenient = self.lenient, False  # a widened negation would not be exact
        self.no_value_checks += 1
        try:
            out = []
            for i, branch in enumerate(branches):
                others = [{"not": other} for j, other in enumerate(branches) if j != i]
                for term in self.dnf({"allOf": [branch, *others]}, f"{pointer}/oneOf/{i}"):
                    merged = self.merge(siblings, term, pointer)
                    out.extend(_as_terms(merged))
                if len(out) > MAX_BRANCHES:
                    return None
            return out
        except (UnsupportedSchemaError, BudgetExceededError):
            return None
        finally:
            self.lenient = lenient
            self.no_value_checks -= 1

    # -- disjointness (for oneOf) --------------------------------------------------------------

    def disjoint(self, x, y, level: int) -> bool:
        """True only when no instance can satisfy both terms (conservative)."""
        self.disjoint_checks += 1
        if level > 6 or self.disjoint_checks > MAX_DISJOINT_CHECKS:
            return False
        if isinstance(x, _RefMarker) or isinstance(y, _RefMarker):
            try:
                xs = self.inline_ref(x.uri, "#") if isinstance(x, _RefMarker) else [x]
                ys = self.inline_ref(y.uri, "#") if isinstance(y, _RefMarker) else [y]
            except (SchemaError, BudgetExceededError):
                return False
            return all(self.disjoint(a, b, level + 1) for a in xs for b in ys)
        tx, ty = _types_of(x), _types_of(y)
        common = tx & ty
        if not common:
            return True
        if "enum" in x and not self.valid_values(_as_schema(y), x["enum"]):
            return True
        if "enum" in y and not self.valid_values(_as_schema(x), y["enum"]):
            return True
        return all(self._disjoint_on(t, x, y, level) for t in common)

    def _disjoint_on(self, t: str, x: dict, y: dict, level: int) -> bool:
        if t in ("integer", "number"):
            lo_x, hi_x = _num_range(x)
            lo_y, hi_y = _num_range(y)
            return _ranges_disjoint(lo_x, hi_x, lo_y, hi_y)
        if t == "string":
            return _len_disjoint(x, y, "minLength", "maxLength")
        if t == "array":
            if _len_disjoint(x, y, "minItems", "maxItems"):
                return True
            px, py = x.get("prefixItems", []), y.get("prefixItems", [])
            need = max(x.get("minItems", 0), y.get("minItems", 0))
            for i in range(min(len(px), len(py), need)):
                if self._schemas_disjoint(px[i], py[i], level):
                    return True
            return False
        if t == "object":
            if _len_disjoint(x, y, "minProperties", "maxProperties"):
                return True
            req_x, req_y = set(x.get("required", [])), set(y.get("required", []))
            for name in req_x | req_y:
                sx, sy = _property_schema(x, name), _property_schema(y, name)
                if (name in req_y and sx is False) or (name in req_x and sy is False):
                    return True
                # one side has the member (required), and its value can satisfy only one side
                if sx is not None and sy is not None and self._schemas_disjoint(sx, sy, level):
                    return True
            # both closed (additionalProperties false), one needs a member, no name fits both
            needs_member = any(f.get("required") or f.get("minProperties", 0) >= 1 for f in (x, y))
            return needs_member and _closed_names_disjoint(x, y)
        return False

    def _schemas_disjoint(self, a, b, level: int) -> bool:
        try:
            xs, ys = self.exact_dnf(a, "#"), self.exact_dnf(b, "#")
        except (SchemaError, BudgetExceededError):
            return False
        return all(self.disjoint(p, q, level + 1) for p in xs for q in ys)

    # -- negation ------------------------------------------------------------------------------

    def negate(self, schema, pointer: str):
        """A positive schema for `not schema`, or UnsupportedSchemaError."""
        if schema is True:
            return False
        if schema is False:
            return True
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {schema!r}", pointer)
        if _is_true(schema):
            return False
        if self.no_negation:  # in the scope of unevaluated*: `not` evaluates nothing
            return {UNANNOTATED: [{"not": schema}]}
        unevaluated = ("unevaluatedProperties", "unevaluatedItems")
        if any(not _is_true(schema.get(k, True)) for k in unevaluated):
            # unevaluated* depends on its siblings: negate the whole schema's terms, which hold none
            return self.negate({"anyOf": [_as_schema(t) for t in self.dnf(schema, pointer)]}, pointer)
        if "$ref" in schema and [k for k in schema if k in _KNOWN and k not in ANNOTATIONS] == ["$ref"]:
            if self.inline_depth > MAX_INLINE_DEPTH:
                raise UnsupportedSchemaError("not", pointer, "negation of a recursive reference")
            self.inline_depth += 1
            try:
                return self.negate(self.lookup(schema["$ref"], pointer), pointer)
            finally:
                self.inline_depth -= 1
        parts: list = []
        for key, value in schema.items():
            if key in ANNOTATIONS or key not in _KNOWN or key == "format" or key in unevaluated:
                continue  # (unevaluated* true always holds)
            part = _negate_keyword(key, value, schema, self, pointer)
            if part is _WIDEN:
                continue
            parts.append(part)
        return {"anyOf": parts} if parts else False

    # -- dynamic references / unevaluated* -----------------------------------------------------

    def _static_dynamic_ref(self, schema: dict, key: str, pointer: str) -> dict:
        """$dynamicRef/$recursiveRef whose target is unambiguous behave like $ref; with several
        dynamic anchors the schema is compiled again with references specialised per dynamic
        scope (json_schema_dynamic.py)."""
        uri = schema[key]
        anchor_key = "$dynamicAnchor" if key == "$dynamicRef" else "$recursiveAnchor"
        count = _count_key(self.root, anchor_key) + sum(_count_key(d, anchor_key) for d in self.retrieved)
        if count <= 1:
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

    # -- flat conjunctions ---------------------------------------------------------------------

    def flat(self, f: dict, pointer: str, depth) -> tuple[Expr, bool]:
        """(IR, structural?) for one flat conjunction."""
        types = _types_of(f)
        if not types:
            self.note_empty(pointer, "no type satisfies every 'type' constraint")
            return NOTHING, False
        if "enum" in f:
            values = self.enum_values(f)
            if not values:
                self.note_empty(pointer, "no enum/const value satisfies the other constraints")
            if len(values) > BIG_ENUM:  # numbers as json.dumps writes them: a literal set (a trie)
                exprs = [alt(*map(lit, _number_spellings(v))) if _json_type(v) in ("integer", "number")
                         else self.literal(v, depth) for v in values]
            else:
                exprs = [self.literal(v, depth) for v in values]
            return alt(*exprs) if exprs else NOTHING, any(isinstance(v, (list, dict)) for v in values)
        exprs = []
        structural = False
        for t in ("object", "array", "string", "number", "integer", "boolean", "null"):
            if t not in types or (t == "integer" and "number" in types):
                continue
            if t == "object":
                exprs.append(self.object(f, pointer, depth))
                structural = True
            elif t == "array":
                exprs.append(self.array(f, pointer, depth))
                structural = True
            elif t == "string":
                exprs.append(self.string(f, pointer))
            elif t in ("number", "integer"):
                exprs.append(self.number(f, pointer, integer=(t == "integer")))
            elif t == "boolean":
                exprs.append(alt(lit("true"), lit("false")))
            else:
                exprs.append(lit("null"))
        return alt(*exprs) if exprs else NOTHING, structural

    def literal(self, value, depth) -> Expr:
        """Every accepted spelling of one JSON value (objects keep their key order)."""
        if value is None:
            return lit("null")
        if isinstance(value, bool):
            return lit("true" if value else "false")
        if isinstance(value, (int, float)):
            return _cached_leaf("literal", {"value": value})
        if isinstance(value, str):
            return string_literal_expr(value)
        child = self.layout.child(depth)
        if isinstance(value, list):
            o, first, nxt, _, end, close_e, close_ne = self.layout.parts(depth, "[", "]")
            if not value:
                return seq(o, close_e)
            items = [seq(first if i == 0 else nxt, self.literal(v, child), end) for i, v in enumerate(value)]
            return seq(o, *items, close_ne)
        o, first, nxt, colon, end, close_e, close_ne = self.layout.parts(depth, "{", "}")
        if not value:
            return seq(o, close_e)
        items = [seq(first if i == 0 else nxt, string_literal_expr(k), colon, self.literal(v, child), end)
                 for i, (k, v) in enumerate(value.items())]
        return seq(o, *items, close_ne)

    # -- scalars -------------------------------------------------------------------------------

    def string(self, f: dict, pointer: str) -> Expr:
        from .codepoint_dfa import any_string_dfa, literal_dfa
        from .ecma_regex import pattern_dfa
        from .json_formats import format_dfa
        from .json_strings import ANY_STRING, check_lengths, json_string_expr, string_dfa
        patterns = [f["pattern"]] if "pattern" in f else []
        patterns += f.get("x-patterns", [])
        # a pattern that finds a match in every string (e.g. "([a-z]+)?") constrains nothing
        patterns = [p for p in patterns if not isinstance(p, str)
                    or not pattern_dfa(p, f"{pointer}/pattern").is_universal()]
        fmt = f.get("format") if isinstance(f.get("format"), str) else None
        exclusions = f["not"]["anyOf"] if "not" in f else []
        excluded = [v for part in exclusions for v in part.get("enum", [])]
        excluded_patterns = [part["pattern"] for part in exclusions if "pattern" in part]
        lo, hi = check_lengths(f.get("minLength"), f.get("maxLength"), pointer, allow_empty=True)
        if hi is not None and lo > hi:  # e.g. merged from allOf/oneOf branches: this term is empty
            self.note_empty(pointer, f"minLength {lo} > maxLength {hi}: no string satisfies both")
            return NOTHING
        if max(lo, hi or 0) > SHORT_STRING and not patterns and not exclusions and \
                (fmt is None or format_dfa(fmt) is None):
            # only a length constraint: count characters, escapes as one shared rule
            key = ("string_chars", lo, hi)
            if key not in self.memo:  # one rule per length bound: shared by its strings, not inlined
                self.memo[key] = self.rule_ref("string_chars", self.chained(self.json_char(), lo, hi, "string_chars",
                                                                            STRING_COUNT_BLOCK))
            return seq(lit('"'), self.memo[key], lit('"'))
        try:
            dfa = string_dfa(min_length=lo, max_length=hi, pattern=patterns[0] if patterns else None, format=fmt,
                             pointer=pointer)
        except UnsupportedSchemaError as exc:
            if exc.keyword != "format" or not self.lenient:
                raise
            self.unsupported("format", pointer, str(exc.message))
            dfa = string_dfa(min_length=lo, max_length=hi, pattern=patterns[0] if patterns else None,
                             pointer=pointer)
        if dfa is None and len(patterns) <= 1 and not exclusions:
            return ANY_STRING
        if dfa is None:
            dfa = any_string_dfa()
        for extra in patterns[1:]:
            dfa = _dfa_op(dfa.intersect, pattern_dfa(extra, f"{pointer}/allOf"), "pattern", pointer)
        if excluded:
            dfa = _dfa_op(dfa.difference, literal_dfa(excluded), "not", pointer)
        for pattern in excluded_patterns:
            dfa = _dfa_op(dfa.difference, pattern_dfa(pattern, f"{pointer}/not/pattern"), "not", pointer)
        return json_string_expr(dfa, pointer)

    def json_char(self) -> Expr:
        """One JSON string character: a raw code point, or a reference to the escape rule
        (backslash escapes and surrogate pairs), so counted strings hold it once."""
        from .json_strings import JSON_ESCAPE, RAW_STRING_CHAR

        if self.escape_rule is None:
            self.escape_rule = self.rule_ref("string_escape", JSON_ESCAPE)
        return alt(RAW_STRING_CHAR, self.escape_rule)

    def counted(self, item: Expr, lo: int, hi: int | None, hint: str, block: int = COUNT_BLOCK) -> Expr:
        """item{lo,hi}, where no automaton grows past `block` copies of `item`.

        Past that, B = item{b} (b = block) becomes a rule and, for n = q*b + r,
        item{0,n} = B{0,q-1} item{0,b-1} | B{q} item{0,r}; so a text is parsed at most two ways
        at once per level (inside a block, or in the final partial run), and the states of B and
        of the partial run (a rule too) are shared by every block, so are their masks.  Counts
        past b*b nest the same way.
        """
        b = block
        key = ("counted", item, lo, hi, b)
        if key in self.memo:
            return self.memo[key]
        if max(lo, hi or 0) <= b:
            result = rep(item, lo, hi)
        else:
            unit = self.rule_ref(hint, rep(item, b, b))
            at_least = seq(self.counted(unit, lo // b, lo // b, hint, b), rep(item, lo % b, lo % b))
            if hi is None:
                result = seq(at_least, star(item))
            elif hi - lo <= b:
                result = seq(at_least, rep(item, 0, hi - lo))
            else:
                q, r = divmod(hi - lo, b)
                partial = self.rule_ref(hint, rep(item, 0, b - 1))
                result = seq(at_least, alt(seq(self.counted(unit, 0, q - 1, hint, b), partial),
                                           seq(self.counted(unit, q, q, hint, b), rep(item, 0, r))))
        self.memo[key] = result
        return result

    def chained(self, item: Expr, lo: int, hi: int | None, hint: str, block: int) -> Expr:
        """item{lo,hi} as a chain: past `block` copies, item{block} then a call of a rule for
        the rest, item{lo-block, hi-block} built the same way.

        Unlike `counted`'s blocks, which a token leaves by returning from a rule (a step only the
        real stack decides, so masks there defer every token that crosses), a chain is left by a
        call at the end of a rule: tokens across the boundary stay context-independent.  The
        chain's rules have one body shape, so their DFA is built once.
        """
        key = ("chained", item, lo, hi, block)
        if key in self.memo:
            return self.memo[key]
        if max(lo, hi or 0) <= block:
            result = rep(item, lo, hi)
        else:
            rest = self.rule_ref(hint, self.chained(item, max(lo - block, 0), None if hi is None else hi - block,
                                                    hint, block))
            result = seq(rep(item, block, block), rest)
            if lo < block:
                result = alt(rep(item, lo, block - 1), result)
        self.memo[key] = result
        return result

    def finite_values(self, schema) -> list | None:
        """The distinct values a schema allows when it is an enum (or const) of at most
        UNIQUE_ENUM_MAX values, else None."""
        try:
            terms = self.exact_dnf(schema, "#")
        except (SchemaError, UnsupportedSchemaError, BudgetExceededError):
            return None
        values: list = []
        for term in terms:
            if not isinstance(term, dict) or "enum" not in term:
                return None
            for v in self.enum_values(term):
                if not any(_json_equal(v, w) for w in values):
                    values.append(v)
                    if len(values) > UNIQUE_ENUM_MAX:
                        return None
        return values or None

    def number(self, f: dict, pointer: str, integer: bool) -> Expr:
        kwargs = dict(minimum=f.get("minimum"), maximum=f.get("maximum"),
                      exclusive_minimum=f.get("exclusiveMinimum"), exclusive_maximum=f.get("exclusiveMaximum"),
                      multiple_of=f.get("multipleOf"), pointer=pointer)
        lo, hi = _num_range(f)
        if _ranges_disjoint(lo, hi, lo, hi):
            self.note_empty(pointer, "minimum/maximum leave no number")
            return NOTHING
        exclusions = f.get("not", {}).get("anyOf", ())
        non_integral = any(part.get("type") == "integer" for part in exclusions)
        if integer and non_integral:
            return NOTHING
        not_multiple_of = tuple(sorted({int(part["multipleOf"]) for part in exclusions if "multipleOf" in part}))
        if not_multiple_of:
            kwargs["not_multiple_of"] = not_multiple_of
        if integer:
            kwargs["zero_fraction"] = self.draft != "draft4"
        elif non_integral:
            kwargs["non_integral"] = True
        try:
            return _integer_expr(**kwargs) if integer else _number_expr(**kwargs)
        except UnsupportedSchemaError as exc:
            if not self.lenient or exc.keyword != "multipleOf":
                raise
            self.unsupported("multipleOf", pointer, exc.message)
            kwargs["multiple_of"] = None
            return _integer_expr(**kwargs) if integer else _number_expr(**kwargs)
        except SchemaError as exc:  # the leaf reports an empty range (e.g. no integer in (1, 2))
            self.note_empty(exc.pointer or pointer, exc.message)
            return NOTHING

    # -- objects -------------------------------------------------------------------------------

    def object(self, f: dict, pointer: str, depth) -> Expr:
        props: dict = dict(f.get("properties") or {})
        required = list(dict.fromkeys(f.get("required") or []))
        patterns: dict = dict(f.get("patternProperties") or {})
        addl = f.get("additionalProperties", True)
        names_schema = f.get("propertyNames", True)
        min_p = int(f.get("minProperties", 0))
        max_p = f.get("maxProperties")
        max_p = int(max_p) if max_p is not None else None
        if max_p is not None and min_p > max_p:
            self.note_empty(pointer, "minProperties > maxProperties")
            return NOTHING
        child = self.layout.child(depth)
        o, first, nxt, colon, end, close_e, close_ne = self.layout.parts(depth, "{", "}")
        from .json_strings import string_literal_expr

        names_true = _is_true(names_schema)
        names_terms = None
        if not names_true:
            names_terms = []
            for term in self.exact_dnf(names_schema, f"{pointer}/propertyNames"):
                names_terms.extend(self.inline_ref(term.uri, pointer) if isinstance(term, _RefMarker) else [term])
        finite_names = None
        if names_terms is not None and all(isinstance(t, dict) and "enum" in t for t in names_terms):
            finite_names = [v for t in names_terms for v in t["enum"] if isinstance(v, str)]

        def schema_for(name: str, in_props: bool):
            parts = [props[name]] if in_props else []
            matching = [p for p in patterns if _search(p, name, pointer)]
            parts += [patterns[p] for p in matching]
            if not in_props and not matching:
                parts.append(addl)
            if not names_true and not self.validates(names_schema, name):
                return False
            parts = [p for p in parts if not _is_true(p)]
            if any(p is False for p in parts):
                return False
            if not parts:
                return True
            return parts[0] if len(parts) == 1 else {"allOf": parts}

        order = list(props) + [r for r in required if r not in props]
        if finite_names is not None:
            order += [n for n in dict.fromkeys(finite_names) if n not in order]
        members = []  # (expr, required)
        required_rank = []  # per required member (in member order): its index in `required`
        for name in order:
            schema = schema_for(name, name in props)
            vexpr = self.value(schema, f"{pointer}/properties/{_escape(name)}", child) \
                if schema is not False else NOTHING
            is_req = name in required
            if vexpr == NOTHING:
                if is_req:
                    self.note_empty(f"{pointer}/required", f"required property {name!r} cannot have any value")
                    return NOTHING
                continue
            members.append((seq(string_literal_expr(name), colon, vexpr, end), is_req))
            if is_req:
                required_rank.append(required.index(name))

        extra = None
        if finite_names is None:
            extra = self.extra_members(order, patterns, addl, names_schema, names_terms, pointer, colon, end, child)
        if WITNESS in f:
            conditions = f[WITNESS]
            if min_p > 1 or len(conditions) > MAX_WITNESSES or (max_p is not None and len(conditions) > 1):
                # a witness may repeat an earlier name, so it cannot count towards minProperties
                self.unsupported("not", pointer, "member conditions next to minProperties > 1, several of them "
                                 f"next to maxProperties, or more than {MAX_WITNESSES} of them")
            min_p = 0  # the witness is a member
            if max_p is not None:
                max_p -= 1  # ...and counts at most once
                if max_p < 0:
                    return NOTHING
            names = None if names_true else self.names_dfa(names_schema, pointer)

            def member(conds, later=()):
                return self.witness_member(conds, later, order, lambda n: schema_for(n, n in props), patterns,
                                           addl, names, pointer, colon, end, child)

            # one member meeting every condition, or one member per condition (in some order)
            options = [member(conditions)]
            if len(conditions) > 1:
                for perm in itertools.permutations(conditions):
                    parts = [member([c], perm[j + 1:]) for j, c in enumerate(perm)]
                    options.append(seq(*[x for j, part in enumerate(parts) for x in ((nxt, part) if j else (part,))]))
            witnesses = alt(*options)
            if witnesses == NOTHING:
                return NOTHING
            # the witnesses close every object: they are the last members
            close_e, close_ne = seq(first, witnesses, close_ne), seq(nxt, witnesses, close_ne)
        return self.object_body(members, extra, min_p, max_p, (o, first, nxt, close_e, close_ne), pointer,
                                required_rank)

    def witness_fits(self, condition, pointer: str):
        """The keys a WITNESS condition allows."""
        from .codepoint_dfa import any_string_dfa, literal_dfa
        from .ecma_regex import pattern_dfa
        where = f"{pointer}/not/patternProperties"
        fits = pattern_dfa(condition["pattern"], where) if condition["pattern"] is not None else any_string_dfa()
        for p in condition["patterns"]:
            fits = _dfa_op(fits.difference, pattern_dfa(p, where), "not", pointer)
        if condition["names"]:
            fits = _dfa_op(fits.difference, literal_dfa(condition["names"]), "not", pointer)
        if "key_not" in condition:  # not propertyNames: a name outside the names schema
            fits = _dfa_op(fits.difference, self.names_dfa(condition["key_not"], pointer), "not", pointer)
        return fits

    def names_dfa(self, schema, pointer: str):
        """The member names a propertyNames schema allows, as a Dfa (string constraints or an enum)."""
        from .codepoint_dfa import any_string_dfa, literal_dfa
        from .json_strings import string_dfa
        if schema is False:
            return literal_dfa([])
        allowed = None
        for term in self.exact_dnf(schema, f"{pointer}/propertyNames"):
            if not isinstance(term, dict) or (set(term) - {"type", "minLength", "maxLength", "pattern", "format",
                                                          "enum"}) or "string" not in _types_of(term):
                raise UnsupportedSchemaError("not", f"{pointer}/not/propertyNames",
                                             "only string length/pattern/format or enum name constraints negate")
            if "enum" in term:
                dfa = literal_dfa([v for v in self.enum_values(term) if isinstance(v, str)])
            else:
                dfa = string_dfa(min_length=term.get("minLength"), max_length=term.get("maxLength"),
                                 pattern=term.get("pattern"), format=term.get("format"), pointer=pointer)
                dfa = dfa if dfa is not None else any_string_dfa()
            allowed = dfa if allowed is None else _dfa_op(allowed.union, dfa, "not", pointer)
        return allowed if allowed is not None else literal_dfa([])

    def witness_member(self, conditions, later, defined, schema_for, patterns, addl, names, pointer, colon, end,
                       child):
        """The IR of one member meeting all `conditions` (see WITNESS), with a key no `later`
        condition allows and a value valid for whatever else applies to its key here: its own
        schema for a named member, else the schemas of the patterns it matches, else
        additionalProperties."""
        from .codepoint_dfa import literal_dfa
        from .json_strings import string_literal_expr
        where = f"{pointer}/not"
        fits = self.witness_fits(conditions[0], pointer)
        for condition in conditions[1:]:
            fits = _dfa_op(fits.intersect, self.witness_fits(condition, pointer), "not", pointer)
        for condition in later:
            fits = _dfa_op(fits.difference, self.witness_fits(condition, pointer), "not", pointer)
        if names is not None:  # propertyNames of this object
            fits = _dfa_op(fits.intersect, names, "not", pointer)
        wanted = [c["value"] for c in conditions if not _is_true(c["value"])]
        wanted_value = True if not wanted else wanted[0] if len(wanted) == 1 else {"allOf": wanted}
        alternatives = []
        for name in defined:
            own = schema_for(name)
            if own is False or not fits.accepts(name):
                continue
            value = self.value(wanted_value if _is_true(own) else {"allOf": [own, wanted_value]}, where, child)
            if value != NOTHING:
                alternatives.append(seq(string_literal_expr(name), colon, value, end))
        key_dfa = fits
        if defined:
            key_dfa = _dfa_op(key_dfa.difference, literal_dfa(defined), "not", pointer)
        alternatives += self.unnamed_members(key_dfa, patterns, addl, wanted_value, pointer, colon, end, child)
        return alt(*alternatives)

    def extra_members(self, defined, patterns, addl, names_schema, names_terms, pointer, colon, end, child):
        """The IR of one member not named in `properties`, or None when there can be none."""
        from .codepoint_dfa import any_string_dfa, literal_dfa
        from .json_strings import string_dfa
        if addl is False and not patterns:
            return None
        key_dfa = any_string_dfa()
        if names_terms is not None:
            if not names_terms:
                return None
            if len(names_terms) != 1 or not isinstance(names_terms[0], dict) or \
                    set(names_terms[0]) - {"type", "minLength", "maxLength", "pattern", "format"} or \
                    "string" not in _types_of(names_terms[0]):
                self.unsupported("propertyNames", f"{pointer}/propertyNames",
                                 "only string length/pattern/format or enum constraints on names are supported")
            else:
                t = names_terms[0]
                d = string_dfa(min_length=t.get("minLength"), max_length=t.get("maxLength"), pattern=t.get("pattern"),
                               format=t.get("format"), pointer=f"{pointer}/propertyNames")
                if d is not None:
                    key_dfa = d
        if defined:
            key_dfa = _dfa_op(key_dfa.difference, literal_dfa(defined), "additionalProperties", pointer)
        alternatives = self.unnamed_members(key_dfa, patterns, addl, True, pointer, colon, end, child)
        if not alternatives:
            return None
        expr = alt(*alternatives)
        return self.rule_ref("extra_member", expr) if _size(expr) > 200 else expr

    def unnamed_members(self, key_dfa, patterns, addl, also, pointer, colon, end, child) -> list:
        """Member alternatives for keys in `key_dfa` (none of them a named property), one per set
        of patterns a key can match: the value must satisfy those patterns' schemas (or
        additionalProperties when it matches none), and the schema `also`."""
        from .ecma_regex import pattern_dfa
        from .json_strings import json_string_expr
        pats = list(patterns)
        if len(pats) > 24:
            raise UnsupportedSchemaError("patternProperties", f"{pointer}/patternProperties", "more than 24 patterns")
        pdfas = [pattern_dfa(p, f"{pointer}/patternProperties") for p in pats]
        overlapping = any(_dfa_op(pdfas[i].intersects, pdfas[j], "patternProperties", pointer)
                          for i in range(len(pats)) for j in range(i + 1, len(pats)))
        if overlapping and len(pats) > MAX_PATTERN_GROUPS:
            raise UnsupportedSchemaError("patternProperties", f"{pointer}/patternProperties",
                                         f"more than {MAX_PATTERN_GROUPS} overlapping patterns")

        def value_schema(mask: int):
            """The value schema of a key matching exactly the patterns in `mask` (bit i: pattern i)."""
            parts = [*([patterns[p] for i, p in enumerate(pats) if mask >> i & 1] if mask else [addl]), also]
            parts = [p for p in parts if not _is_true(p)]
            if any(p is False for p in parts):
                return False
            return True if not parts else parts[0] if len(parts) == 1 else {"allOf": parts}

        # a key matches one subset of the patterns; with pairwise disjoint patterns, at most one
        masks = range(1 << len(pats)) if overlapping else [0] + [1 << i for i in range(len(pats))]
        wanted = {mask for mask in masks if value_schema(mask) is not False}
        alternatives = []
        for mask, dfa in _keys_by_patterns(key_dfa, pdfas, overlapping, wanted, pointer):
            vexpr = self.value(value_schema(mask), f"{pointer}/additionalProperties", child)
            if vexpr == NOTHING:
                continue
            alternatives.append(seq(json_string_expr(dfa, pointer, "additionalProperties"), colon, vexpr, end))
        return alternatives

    def object_body(self, members, extra, min_p, max_p, parts, pointer, required_rank=()) -> Expr:
        """Members in order (required ones mandatory), then `extra` repeated; counts in [min_p, max_p].
        With property_order="any" (and counts that allow it) members come in any order instead."""
        o, first, nxt, close_e, close_ne = parts
        n = len(members)
        cap = max_p if max_p is not None else max(min_p, 1)
        memo: dict[tuple[int, int], Expr] = {}
        chunk = 8 if cap == 1 else 4

        required_count = sum(1 for _, is_req in members if is_req)

        def tail(k: int) -> Expr:
            lo = max(0, min_p - k)
            hi = None if max_p is None else max_p - k
            if extra is not None and lo >= 2 and k >= required_count:  # k < required_count: unreachable
                # two additional members could share a name, and json.loads would count them once
                self.unsupported("minProperties", pointer, f"{lo} additional members would be needed to reach "
                                 "minProperties, and a grammar cannot keep their names distinct")
            if hi is not None and hi < lo:
                return NOTHING
            close = close_e if k == 0 else close_ne
            if extra is None:
                return close if lo == 0 else NOTHING
            if k == 0:
                options = [close_e] if lo == 0 else []
                if hi is None or hi >= 1:
                    options.append(seq(first, extra, rep(seq(nxt, extra), max(lo - 1, 0),
                                                         None if hi is None else hi - 1), close_ne))
                return alt(*options) if options else NOTHING
            return seq(rep(seq(nxt, extra), lo, hi), close)

        if self.property_order == "any" and n >= 1 and max_p is None and min_p <= required_count:
            # every instance writes its required members, so it has at least min_p members
            if n <= ANY_ORDER_MAX_MEMBERS:
                return seq(o, self.any_order_members(members, extra, first, nxt, close_e, close_ne))
            return seq(o, self.interleaved_members(members, extra, first, nxt, close_e, close_ne, required_rank))

        # F(i, k): members i.. given k members written so far (k capped at `cap` when unbounded).
        for i in range(n, -1, -1):
            for k in range(cap, -1, -1):
                if i == n:
                    memo[(i, k)] = tail(k)
                    continue
                item, is_req = members[i]
                nk = k + 1 if max_p is not None else min(k + 1, cap)
                if not is_req and nk == k > 0:
                    # the count stays capped: "member i or not, then the same rest", written
                    # linearly; alt(take, rest) would copy the rest twice per member as a tree
                    memo[(i, k)] = seq(opt(seq(nxt, item)), memo[(i + 1, k)])
                    continue
                take = NOTHING
                if max_p is None or k + 1 <= max_p:
                    take = seq(first if k == 0 else nxt, item, memo[(i + 1, nk)])
                memo[(i, k)] = take if is_req else alt(take, memo[(i + 1, k)])
            if 0 < i < n and i % chunk == 0:
                # Checkpoint: the states at position i become rules, so every rule body stays a
                # small tree (a shared sub-expression would otherwise be copied quadratically or
                # exponentially often by anything that walks expressions as trees).
                for k in range(cap + 1):
                    if memo[(i, k)] != NOTHING:
                        name = self.new_rule("members")
                        self.rules[name] = memo[(i, k)]
                        memo[(i, k)] = Ref(name)
        body = memo[(0, 0)]
        if _tree_size(body) > MAX_OBJECT_EXPR:
            raise BudgetExceededError(f"object schema at {pointer} has too many optional properties combined "
                                      "with minProperties/maxProperties; simplify it")
        return seq(o, body)

    def any_order_members(self, members, extra, first, nxt, close_e, close_ne) -> Expr:
        """The members in any order, each at most once, required ones present; additional members
        (`extra`, when allowed) anywhere between them.

        Each member becomes a rule, so this object's automaton only tracks which members are
        still to come (2^n states for n members) and the key bytes decide which member rule
        goes on.  Sub-expressions are shared per set of remaining members.
        """
        refs = [self.rule_ref("member", item) for item, _ in members]
        required = [is_req for _, is_req in members]
        memo: dict[tuple[frozenset[int], bool], Expr] = {}

        def rest(remaining: frozenset[int], written: bool) -> Expr:
            key = (remaining, written)
            if key not in memo:
                options = []
                if not any(required[i] for i in remaining):
                    options.append(close_ne if written else close_e)
                if extra is not None and not written:
                    options.append(seq(first, extra, rest(remaining, True)))
                for i in sorted(remaining):
                    options.append(seq(nxt if written else first, refs[i], rest(remaining - {i}, True)))
                body = alt(*options)
                if extra is not None and written:
                    body = seq(star(seq(nxt, extra)), body)
                memo[key] = body
            return memo[key]

        return rest(frozenset(range(len(members))), False)

    def interleaved_members(self, members, extra, first, nxt, close_e, close_ne, required_rank=()) -> Expr:
        """The members in any order: required ones exactly once, optional and additional ones freely.

        For objects too large to track which members were written (2^n states), only the
        required members are tracked: in any order when there are at most
        INTERLEAVE_ANY_ORDER_REQUIRED of them, else in definition order or in the order of the
        `required` array (`required_rank`) among themselves.  An optional name may then repeat;
        json.loads keeps the last value, which is valid too, so the parsed instance still
        validates (the caller ensures min_p <= required and no max_p).
        """
        required = [item for item, is_req in members if is_req]
        optional = [item for item, is_req in members if not is_req] + ([extra] if extra is not None else [])
        free = self.rule_ref("optional_member", alt(*optional)) if optional else NOTHING
        any_order = len(required) <= INTERLEAVE_ANY_ORDER_REQUIRED
        if any_order and len(required) > 1:
            required = [self.rule_ref("member", item) for item in required]
        state_rules: dict[int, str] = {}
        chains = [list(range(len(required)))]
        if len(required_rank) == len(required):
            by_rank = sorted(range(len(required)), key=lambda i: required_rank[i])
            if by_rank != chains[0]:
                chains.append(by_rank)

        def pending(written: int) -> list[int]:
            todo = [i for i in range(len(required)) if not written >> i & 1]
            if any_order:
                return todo
            # the next member of each order whose prefix is exactly what was written
            count = len(required) - len(todo)
            nexts = {chain[count] for chain in chains if count < len(chain)
                     and all(written >> i & 1 for i in chain[:count])}
            return sorted(nexts)

        def after(written: int) -> Expr:
            """At least one member written; `written` is the bit set of required ones written."""
            if written not in state_rules:
                name = state_rules[written] = self.new_rule("members")
                todo = pending(written)
                options = [] if todo else [close_ne]
                options += [seq(nxt, required[i], after(written | 1 << i)) for i in todo]
                self.rules[name] = seq(star(seq(nxt, free)), alt(*options))
            return Ref(state_rules[written])

        options = [] if required else [close_e]
        if optional:
            options.append(seq(first, free, after(0)))
        options += [seq(first, required[i], after(1 << i)) for i in pending(0)]
        return alt(*options)

    # -- arrays --------------------------------------------------------------------------------

    def array(self, f: dict, pointer: str, depth) -> Expr:
        prefix = list(f.get("prefixItems") or [])
        items = f.get("items", True)
        min_i = int(f.get("minItems", 0))
        max_i = f.get("maxItems")
        max_i = int(max_i) if max_i is not None else None
        if items is False:
            max_i = len(prefix) if max_i is None else min(max_i, len(prefix))
        if max_i is not None and min_i > max_i:
            self.note_empty(pointer, "minItems > maxItems (or more items required than allowed)")
            return NOTHING
        child = self.layout.child(depth)
        o, first, nxt, _, end, close_e, close_ne = self.layout.parts(depth, "[", "]")
        if f.get("uniqueItems") is True and (max_i is None or max_i > 1):
            values = self.finite_values(items) if not prefix and f.get("contains") is None else None
            if values is not None and min_i <= 1 and (max_i is None or max_i >= len(values)):
                # distinct items from a finite set: each value at most once, in any order
                members = [(seq(self.literal(v, child), end), False) for v in values]
                empty = close_e if min_i == 0 else NOTHING
                return seq(o, self.any_order_members(members, None, first, nxt, empty, close_ne))
            if self.value_checks_allowed():
                # any array of the items; the matcher rejects the bytes closing a duplicate item
                name = self.new_rule(f"unique_{_hint(f, pointer)}")
                self.rules[name] = self.array({k: v for k, v in f.items() if k != "uniqueItems"}, pointer, depth)
                self.checks[name] = UniqueItems(f"{pointer}/uniqueItems")
                return Ref(name)
            self.unsupported("uniqueItems", f"{pointer}/uniqueItems",
                             "a grammar cannot require distinct array items (except up to "
                             f"{UNIQUE_ENUM_MAX} values of an enum); widened to allow duplicates")
        contains = f.get("contains")
        min_c = int(f.get("minContains", 1)) if contains is not None else 0
        max_c = f.get("maxContains") if contains is not None else None
        max_c = int(max_c) if max_c is not None else None
        if contains is not None and max_c is not None and min_c > max_c:
            self.note_empty(pointer, "minContains > maxContains")
            return NOTHING
        if contains is not None and min_c == 0 and max_c is None:
            contains = None

        def schema_at(i: int):
            return prefix[i] if i < len(prefix) else items

        def item_exprs(i: int):
            """(unmarked, marked) IR for position i: marked items satisfy `contains`."""
            s = schema_at(i)
            ptr = f"{pointer}/prefixItems/{i}" if i < len(prefix) else f"{pointer}/items"
            if contains is None:
                return self.value(s, ptr, child), NOTHING
            marked = self.value({"allOf": [s, contains]} if not _is_true(s) else contains, f"{pointer}/contains", child)
            if max_c is None:
                return self.value(s, ptr, child), marked
            unmarked = self.value({"allOf": [s, {"not": contains}]}, f"{pointer}/contains", child)
            return unmarked, marked

        P = len(prefix)
        if contains is None:
            # Positions before S = max(P, 1) one by one, then a counted repetition.
            S = max(P, 1)
            rest = None if max_i is not None and max_i <= S else item_exprs(S)[0] if items is not False else None
            lo = max(0, min_i - S)
            hi = None if max_i is None else max_i - S
            if rest is None or rest == NOTHING:
                tail = close_ne if lo == 0 else NOTHING
            else:
                if max(lo, hi or 0) > 2 and _size(rest) > ITEM_RULE_SIZE:
                    # a rule, so counted copies of the item are references, not automaton copies
                    rest = self.rule_ref("item", rest)
                tail = seq(self.counted(seq(nxt, rest, end), lo, hi, "items_block"), close_ne)
            expr = tail
            for i in range(S - 1, -1, -1):
                unmarked = item_exprs(i)[0] if i < P or items is not False else NOTHING
                can_end = i >= min_i
                take = NOTHING
                if (max_i is None or i < max_i) and unmarked != NOTHING:
                    take = seq(first if i == 0 else nxt, unmarked, end, expr)
                stop = (close_e if i == 0 else close_ne) if can_end else NOTHING
                expr = alt(stop, take)
            return seq(o, expr)

        # With contains: states (position, count of marked items).
        limit = max_i if max_i is not None else max(P, min_i, 1)
        if limit > 200 or (max_c or min_c) > 200:
            raise UnsupportedSchemaError("contains", f"{pointer}/contains",
                                         "contains with more than 200 counted positions")
        c_cap = max_c if max_c is not None else min_c
        ex = {i: item_exprs(i) for i in range(min(limit, P) + 1)}

        def items_at(i):
            if i in ex:
                return ex[i]
            if items is False:
                return NOTHING, NOTHING
            return ex.setdefault(i, item_exprs(i)) if i < P else ex.setdefault(P, item_exprs(P))

        memo: dict = {}

        def loop_tail(c: int) -> Expr:
            """Unbounded items after `limit` (>= 1 written) holding `c` marked items so far."""
            key = ("loop", c)
            if key not in memo:
                unmarked, marked = items_at(limit)
                u = rep(seq(nxt, unmarked, end), 0, None) if unmarked != NOTHING else EPSILON
                options = []
                if c >= min_c:
                    options.append(close_ne)
                if marked != NOTHING and (max_c is not None and c + 1 <= max_c or max_c is None and c < min_c):
                    options.append(seq(nxt, marked, end, loop_tail(c + 1)))
                memo[key] = seq(u, alt(*options)) if options else NOTHING
            return memo[key]

        def state(i: int, c: int) -> Expr:
            key = (i, c)
            if key in memo:
                return memo[key]
            if i == limit and max_i is None:
                result = loop_tail(c) if i > 0 else NOTHING
                memo[key] = result
                return result
            options = []
            if i >= min_i and c >= min_c:
                options.append(close_e if i == 0 else close_ne)
            if max_i is None or i < max_i:
                unmarked, marked = items_at(i)
                prefix_sep = first if i == 0 else nxt
                if unmarked != NOTHING:
                    options.append(seq(prefix_sep, unmarked, end, state(i + 1, c)))
                if marked != NOTHING and (max_c is None or c + 1 <= max_c):
                    nc = c + 1 if max_c is not None else min(c + 1, c_cap)
                    options.append(seq(prefix_sep, marked, end, state(i + 1, nc)))
            result = alt(*options) if options else NOTHING
            memo[key] = result
            return result

        return seq(o, state(0, 0))


# ---------------------------------------------------------------------------------------------
# Merging flat conjunctions.

_MAX_KEYS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
_MIN_KEYS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")


def _merge_flat(a: dict, b: dict, comp: _Compiler, pointer: str):
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


def _merge_object_keys(out: dict, a: dict, b: dict, comp: _Compiler, pointer: str) -> None:
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


def _merge_array_keys(out: dict, a: dict, b: dict, comp: _Compiler, pointer: str) -> None:
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


# ---------------------------------------------------------------------------------------------
# Negation of single keywords.

_WIDEN = object()
_NUMERIC_NEG = {"minimum": "exclusiveMaximum", "exclusiveMinimum": "maximum", "maximum": "exclusiveMinimum",
                "exclusiveMaximum": "minimum"}
_COUNT_NEG = {"minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
              "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
              "minProperties": ("object", "maxProperties", -1), "maxProperties": ("object", "minProperties", 1)}


def _negate_keyword(key: str, value, schema: dict, comp: _Compiler, pointer: str):
    if key == "type":
        allowed = _types_of({"type": value})
        rest = [t for t in ("null", "boolean", "object", "array", "string") if t not in allowed]
        parts = [{"type": rest}] if rest else []
        if "integer" in allowed and "number" not in allowed:
            parts.append({"type": "number", "not": {"type": "integer"}})  # the non-integral numbers
        elif "number" not in allowed:
            parts.append({"type": "number"})
        return {"anyOf": parts} if parts else False
    if key in ("enum", "const"):
        return _negate_enum(value if key == "enum" else [value], comp, pointer)
    if key == "pattern":
        return {"type": "string", "not": {"pattern": value}}
    if key == "multipleOf" and _positive_whole(value):
        return {"type": "number", "not": {"multipleOf": int(value)}}
    if key in _NUMERIC_NEG:
        return {"type": "number", _NUMERIC_NEG[key]: value}
    if key in _COUNT_NEG:
        t, other, delta = _COUNT_NEG[key]
        bound = int(value) + delta
        return False if bound < 0 else {"type": t, other: bound}
    if key == "required":
        return {"type": "object", "anyOf": [{"properties": {n: False}} for n in value]} if value else False
    if key == "properties":
        parts = [{"type": "object", "required": [n], "properties": {n: {"not": s}}}
                 for n, s in value.items() if s is not True]
        return {"anyOf": parts} if parts else False
    if key == "additionalProperties":  # some member outside properties/patternProperties breaks it
        return {"type": "object", WITNESS: [{"pattern": None, "names": sorted(schema.get("properties") or {}),
                                             "patterns": sorted(schema.get("patternProperties") or {}),
                                             "value": True if value is False else {"not": value}}]}
    if key == "propertyNames":  # some member name breaks it
        if value is True or _is_true(value):
            return False
        return {"type": "object", WITNESS: [{"pattern": None, "names": [], "patterns": [], "value": True,
                                             "key_not": value}]}
    if key == "patternProperties":  # some member matching a pattern has a value its schema rejects
        parts = [{"type": "object", WITNESS: [{"pattern": p, "names": [], "patterns": [], "value": {"not": s}}]}
                 for p, s in value.items() if s is not True]
        return {"anyOf": parts} if parts else False
    if key == "prefixItems":  # some item has a value its position's schema rejects
        parts = [{"type": "array", "minItems": i + 1, "prefixItems": [True] * i + [{"not": s}]}
                 for i, s in enumerate(value) if s is not True]
        return {"anyOf": parts} if parts else False
    if key == "items" and value is False:  # more items than prefixItems lists
        return {"type": "array", "minItems": len(schema.get("prefixItems") or []) + 1}
    if key == "items" and "prefixItems" not in schema:
        return False if value is True else {"type": "array", "contains": {"not": value}}
    if key == "contains" and "minContains" not in schema and "maxContains" not in schema:
        return {"type": "array", "items": {"not": value}}
    if key == "allOf":
        return {"anyOf": [{"not": s} for s in value]}
    if key == "anyOf":
        return {"allOf": [{"not": s} for s in value]}
    if key == "oneOf" and len(value) <= 8:
        # not exactly one: none of the branches, or two of them at once
        pairs = [{"allOf": [value[i], value[j]]} for i in range(len(value)) for j in range(i + 1, len(value))]
        return {"anyOf": [{"allOf": [{"not": s} for s in value]}, *pairs]}
    if key == "not":
        return value
    if key == "$ref":
        return comp.negate(comp.lookup(value, pointer), pointer)
    comp.unsupported("not", f"{pointer}/{key}", f"the negation of {key!r} cannot be expressed; widened by "
                     "ignoring this part of 'not'")
    return _WIDEN


def _negate_enum(values: list, comp: _Compiler, pointer: str):
    kinds = {_json_type(v) for v in values}
    parts: list = []
    rest = [t for t in ("null", "boolean", "object", "array", "string") if t not in kinds]
    numbers = sorted({v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if not numbers:
        rest.append("number")
    if rest:
        parts.append({"type": rest})
    strings = [v for v in values if isinstance(v, str)]
    if strings:
        parts.append({"type": "string", "not": {"enum": strings}})
    bools = {v for v in values if isinstance(v, bool)}
    if bools and len(bools) < 2:
        parts.append({"enum": [not next(iter(bools))]})
    if numbers:
        ranges = [{"exclusiveMaximum": numbers[0]}]
        for lo, hi in zip(numbers, numbers[1:]):
            ranges.append({"exclusiveMinimum": lo, "exclusiveMaximum": hi})
        ranges.append({"exclusiveMinimum": numbers[-1]})
        parts.extend({"type": "number", **r} for r in ranges)
    for kind, excluding in (("array", _not_this_array), ("object", _not_this_object)):
        excluded = [v for v in values if _json_type(v) == kind]
        if excluded:
            parts.append({"type": kind, "allOf": [excluding(v) for v in excluded]})
    return {"anyOf": parts}


def _not_this_array(value: list) -> dict:
    """Arrays other than `value`: another length, or another item at some position."""
    n = len(value)
    parts: list = [{"minItems": n + 1}]
    if n:
        parts.append({"maxItems": n - 1})
    parts += [{"minItems": n, "maxItems": n, "prefixItems": [True] * i + [{"not": {"const": item}}]}
              for i, item in enumerate(value)]
    return {"anyOf": parts}


def _not_this_object(value: dict) -> dict:
    """Objects other than `value`: a member missing, a member with another value, or (with all
    of them present) one more member.  No branch lets a named member repeat, so json.loads
    cannot turn an accepted text into `value`."""
    names = list(value)
    parts: list = [{"properties": {name: False}} for name in names]
    parts += [{"required": [name], "properties": {name: {"not": {"const": v}}}} for name, v in value.items()]
    parts.append({"required": names, "minProperties": len(names) + 1} if names else {"minProperties": 1})
    return {"anyOf": parts}


_TYPE_KEYWORDS = {
    "object": ("properties", "required", "additionalProperties", "patternProperties", "propertyNames",
               "minProperties", "maxProperties", "unevaluatedProperties", WITNESS),
    "array": ("prefixItems", "items", "contains", "minItems", "maxItems", "uniqueItems", "unevaluatedItems"),
    "string": ("minLength", "maxLength", "pattern", "format", "not", "x-patterns"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "not"),
    "null": (), "boolean": (),
}


def _total_on(f: dict, t: str) -> bool:
    """Does the flat term accept every value of type t?"""
    if "enum" in f or t not in _types_of(f) or (t == "number" and "number" not in _types_of(f)):
        return False
    for k in _TYPE_KEYWORDS[t]:
        if k not in f:
            continue
        value = f[k]
        if k in ("properties", "patternProperties"):  # maps of schemas: every one must be true
            if not all(_is_true(sub) for sub in value.values()):
                return False
        elif k == "required" or not _is_true(value):
            return False
    return True


def _as_schema(f: dict) -> dict:
    """A flat conjunction as a real 2020-12 schema (for jsonschema checks)."""
    if "x-patterns" not in f:
        return f
    out = {k: v for k, v in f.items() if k != "x-patterns"}
    out["allOf"] = [{"pattern": p} for p in f["x-patterns"]]
    return out


def _number_spellings(value) -> list[str]:
    """Texts json.loads reads as a number equal to `value` (as jsonschema compares), the ones
    json.dumps writes: the int and, up to 2**53 where the float is exact, its float spelling
    (1 and 1.0); a float's repr and, when integral and exact, its int spelling."""
    exact = abs(value) <= 2 ** 53
    if isinstance(value, float):
        if not math.isfinite(value):
            return []
        return [repr(value), str(int(value))] if value.is_integer() and exact else [repr(value)]
    return [str(value), f"{value}.0"] if exact else [str(value)]


def _as_terms(merged) -> list:
    """What `merge` returns (a term, a list of terms, or None for unsatisfiable) as a list."""
    return merged if isinstance(merged, list) else [] if merged is None else [merged]


def _positive_whole(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0 and value == int(value)


def _flat_exclusion(schema, parent: dict) -> bool:
    """`not` that the leaf automata compile as a difference: `{enum: [strings]}`, `{pattern: p}`
    next to `type: string`, `{type: integer}` next to `type: number`.  (Non-strings satisfy the
    first negation; the others reject other types, hence the sibling type.)"""
    if not isinstance(schema, dict):
        return False
    keys = set(schema) - ANNOTATIONS
    if keys == {"enum"}:
        return bool(schema["enum"]) and all(isinstance(v, str) for v in schema["enum"])
    if keys == {"type"}:  # not integer next to type number: the non-integral numbers
        return schema["type"] == "integer" and parent.get("type") == "number"
    if keys == {"multipleOf"}:  # next to a numeric type: the numbers that are no multiple of k
        return _positive_whole(schema["multipleOf"]) and parent.get("type") in ("number", "integer")
    return keys == {"pattern"} and isinstance(schema["pattern"], str) and parent.get("type") == "string"


# ---------------------------------------------------------------------------------------------
# Small helpers.


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _uri_pointer(uri: str) -> str:
    url, frag = urldefrag(uri)
    if url == DEFAULT_BASE:
        return "#" + frag
    return uri


def _hint(schema: dict, pointer: str) -> str:
    tail = pointer.rsplit("/", 1)[-1] if "/" in pointer else "value"
    if isinstance(schema.get("title"), str):
        tail = schema["title"]
    return tail if tail and not tail[0].isdigit() else f"item_{tail}"


_search_cache: dict[tuple[str, str], bool] = {}


def _search(pattern: str, name: str, pointer: str) -> bool:
    """Does the (ECMA, unanchored) pattern match `name`?  Decided by our pattern automaton."""
    key = (pattern, name)
    if key not in _search_cache:
        if len(_search_cache) > 65536:
            _search_cache.clear()
        from .ecma_regex import pattern_dfa
        _search_cache[key] = pattern_dfa(pattern, f"{pointer}/patternProperties").accepts(name)
    return _search_cache[key]


def _closed_names_disjoint(x: dict, y: dict) -> bool:
    """Both terms are closed objects and no member name is allowed by both (conservative:
    a name excluded by other keywords still counts as allowed)."""
    from .codepoint_dfa import StateBudgetExceeded as _Budget
    from .ecma_regex import pattern_dfa

    sources = []
    for f in (x, y):
        if f.get("additionalProperties") is not False:
            return False
        names = [n for n, sub in (f.get("properties") or {}).items() if sub is not False]
        patterns = [p for p, sub in (f.get("patternProperties") or {}).items() if sub is not False]
        sources.append((set(names), patterns))
    (names_x, patterns_x), (names_y, patterns_y) = sources
    if names_x & names_y:
        return False
    if any(_search(p, n, "#") for p in patterns_y for n in names_x) or \
            any(_search(p, n, "#") for p in patterns_x for n in names_y):
        return False
    try:
        return all(pattern_dfa(p, "#").intersect(pattern_dfa(q, "#")).is_empty()
                   for p in patterns_x for q in patterns_y)
    except (_Budget, UnsupportedSchemaError):
        return False


def _property_schema(f: dict, name: str):
    props = f.get("properties") or {}
    if name in props:
        return props[name]
    return _applicable(f, name, "#")


def _num_range(f: dict):
    lo = (f.get("minimum"), False)
    if f.get("exclusiveMinimum") is not None and (lo[0] is None or f["exclusiveMinimum"] >= lo[0]):
        lo = (f["exclusiveMinimum"], True)
    hi = (f.get("maximum"), False)
    if f.get("exclusiveMaximum") is not None and (hi[0] is None or f["exclusiveMaximum"] <= hi[0]):
        hi = (f["exclusiveMaximum"], True)
    return lo, hi


def _ranges_disjoint(lo_x, hi_x, lo_y, hi_y) -> bool:
    lo = max((b for b in (lo_x, lo_y) if b[0] is not None), key=lambda b: (b[0], b[1]), default=None)
    hi = min((b for b in (hi_x, hi_y) if b[0] is not None), key=lambda b: (b[0], not b[1]), default=None)
    if lo is None or hi is None:
        return False
    return lo[0] > hi[0] or (lo[0] == hi[0] and (lo[1] or hi[1]))


def _len_disjoint(x: dict, y: dict, lo_key: str, hi_key: str) -> bool:
    lo = max(x.get(lo_key, 0), y.get(lo_key, 0))
    his = [v for v in (x.get(hi_key), y.get(hi_key)) if v is not None]
    return bool(his) and lo > min(his)


def _count_key(node, key: str) -> int:
    if isinstance(node, dict):
        return (key in node) + sum(_count_key(v, key) for k, v in node.items() if k not in ("enum", "const"))
    if isinstance(node, list):
        return sum(_count_key(v, key) for v in node)
    return 0


def _keys_by_patterns(key_dfa, pdfas: list, overlapping: bool, wanted: set[int], pointer: str) -> list:
    """(mask, keys) in mask order for each mask in `wanted` (bit i: pattern i) whose keys -- those
    of `key_dfa` matching exactly the patterns in it -- are not empty, as minimal Dfas.

    Minimal automata are canonical (equal languages, equal Dfas), so the keys matching disjoint
    pattern i are key_dfa & pdfas[i], with nothing to subtract.  Overlapping patterns are taken
    depth first, pattern by pattern, so masks share the automata of their common choices.
    """
    def op(fn, pdfa):
        return _dfa_op(fn, pdfa, "patternProperties", pointer)

    found: dict[int, object] = {}
    if not overlapping:
        if 0 in wanted:
            dfa = key_dfa
            for pdfa in pdfas:
                dfa = op(dfa.difference, pdfa)
                if dfa.is_empty():
                    break
            found[0] = dfa
        for i, pdfa in enumerate(pdfas):
            if 1 << i in wanted:
                found[1 << i] = op(key_dfa.intersect, pdfa)
    else:
        def walk(i: int, mask: int, dfa) -> None:
            """Choices made for patterns 0..i-1 (in `mask`); `dfa` the keys that match them."""
            if i == len(pdfas):
                found[mask] = dfa
                return
            low = (1 << (i + 1)) - 1
            for choice, fn in ((mask | 1 << i, dfa.intersect), (mask, dfa.difference)):
                if any(m & low == choice for m in wanted):  # some wanted mask makes this choice
                    keys = op(fn, pdfas[i])
                    if not keys.is_empty():
                        walk(i + 1, choice, keys)

        if wanted and not key_dfa.is_empty():
            walk(0, 0, key_dfa)
    return [(mask, found[mask]) for mask in sorted(found) if not found[mask].is_empty()]


def _dfa_op(fn: Callable, other, keyword: str, pointer: str):
    from .codepoint_dfa import StateBudgetExceeded as _Budget
    try:
        return fn(other)
    except _Budget as exc:
        raise UnsupportedSchemaError(keyword, pointer, f"{exc}; simplify the constraint") from None


_DECLARING_KEYWORDS = ("properties", "patternProperties", "required", "minProperties", "maxProperties",
                       "dependentRequired", "dependentSchemas", "dependencies")
"""With additional_properties_default="declared" (XGrammar's strict mode), an object schema with one of
these keywords takes no undeclared members; one with none of them (`{"type": "object"}`) any."""


def _forbid_additional(node, only_declared: bool = False):
    """additional_properties_default=False: object schemas without additionalProperties get false.
    only_declared ("declared", XGrammar's strict mode): only those with a _DECLARING_KEYWORDS
    keyword, and a tuple (prefixItems, or a list of items before 2020-12) gets no further items
    unless the schema says what else may come."""
    if isinstance(node, list):
        return [_forbid_additional(v, only_declared) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("enum", "const", "default", "examples"):
            out[k] = v
        elif k in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
            out[k] = {n: _forbid_additional(s, only_declared) for n, s in v.items()} if isinstance(v, dict) else v
        else:
            out[k] = _forbid_additional(v, only_declared)
    t = node.get("type")
    is_object = (t == "object" or (isinstance(t, list) and "object" in t) or "properties" in node
                 or "patternProperties" in node)
    if only_declared:
        is_object = is_object and any(k in node for k in _DECLARING_KEYWORDS)
    if is_object and "additionalProperties" not in node and "unevaluatedProperties" not in node:
        out["additionalProperties"] = False
    if only_declared and "unevaluatedItems" not in node:
        if "prefixItems" in node and "items" not in node:
            out["items"] = False
        elif isinstance(node.get("items"), list) and "additionalItems" not in node:
            out["additionalItems"] = False
    return out


def _size(expr: Expr) -> int:
    if isinstance(expr, (Seq, Alt)):
        return 1 + sum(_size(e) for e in expr.items)
    if isinstance(expr, Repeat):
        return 1 + _size(expr.item)
    if isinstance(expr, CharFsm):
        return len(expr.transitions)
    return 1


def _tree_size(expr: Expr) -> int:
    cache: dict[int, int] = {}

    def size(e):
        k = id(e)
        if k in cache:
            return cache[k]
        if isinstance(e, (Seq, Alt)):
            n = 1 + sum(size(i) for i in e.items)
        elif isinstance(e, Repeat):
            n = 1 + size(e.item)
        else:
            n = 1
        cache[k] = n
        return n
    return size(expr)


_leaf_cache: dict = {}


def clear_leaf_cache() -> None:
    """Forget the memoised leaf automata: numbers, patterns, formats (for cold-start measurements)."""
    from . import ecma_regex, json_formats

    _leaf_cache.clear()
    ecma_regex._pattern_dfa_cached.cache_clear()
    json_formats._format_dfa_cached.cache_clear()


def _cached_leaf(kind: str, kwargs: dict) -> Expr:
    """Leaf automata are pure functions of their arguments and can be slow: memoise them."""
    key = (kind, tuple(sorted((k, repr(v)) for k, v in kwargs.items() if k != "pointer")))
    if key not in _leaf_cache:
        if len(_leaf_cache) > 4096:
            _leaf_cache.clear()
        from . import json_numbers
        fn = {"integer": json_numbers.integer_expr, "number": json_numbers.number_expr,
              "literal": json_numbers.number_literal_expr}[kind]
        _leaf_cache[key] = fn(**kwargs)
    return _leaf_cache[key]


def _integer_expr(**kwargs) -> Expr:
    return _cached_leaf("integer", kwargs)


def _number_expr(**kwargs) -> Expr:
    return _cached_leaf("number", kwargs)


# ---------------------------------------------------------------------------------------------
# Pruning: drop rules that derive nothing, and rules the root cannot reach.


class _NeedsDynamicScopes(Exception):
    """Several dynamic anchors: compile again with references specialised per dynamic scope."""


class _Unsatisfiable(SchemaError):
    """No instance satisfies the whole schema (json_schema_to_grammar decides what that gives)."""


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


# ---------------------------------------------------------------------------------------------
# Entry point.


def _load(schema):
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    if isinstance(schema, (str, bytes)):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"the schema is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                              "#") from None
    return schema


def _check_metaschema(schema) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"a JSON Schema must be an object or a boolean, got {type(schema).__name__}", "#")
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(_distinct_subschemas(schema), format_checker=_metaschema_formats(cls))
    except jsonschema.exceptions.SchemaError as exc:
        path = "".join(f"/{_escape(str(p))}" for p in exc.path)
        raise SchemaError(f"invalid schema: {exc.message}", "#" + path) from None


def _is_ecma_regex(pattern) -> bool:
    """Format "regex" for the metaschema check: what Python's `re` compiles, and patterns with
    ECMA-262 'u' mode property escapes (\\p{L}), which `re` lacks, when `regex` compiles them."""
    if not isinstance(pattern, str):
        return True
    try:
        re.compile(pattern)
        return True
    except re.error:
        if not re.search(r"\\[pP]\{", pattern):
            raise
    import regex
    try:
        regex.compile(pattern, regex.V0)
    except regex.error as exc:
        raise re.error(str(exc)) from None
    return True


_FORMAT_CHECKERS: dict = {}


def _metaschema_formats(cls) -> jsonschema.FormatChecker:
    """The draft's format checker for schemas, with `_is_ecma_regex` as format "regex"."""
    if cls not in _FORMAT_CHECKERS:
        checker = jsonschema.FormatChecker(formats=())
        checker.checkers = {**cls.FORMAT_CHECKER.checkers, "regex": (_is_ecma_regex, re.error)}
        _FORMAT_CHECKERS[cls] = checker
    return _FORMAT_CHECKERS[cls]


_SUBSCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})


def _distinct_subschemas(node):
    """The document with each name -> subschema map (properties, $defs, ...) keeping only the
    first name of each distinct subschema: the metaschema gives equal subschemas equal verdicts
    and ignores these names, so the check is the same, and an error still points at the first
    offending name.  10,000 properties of one type are checked once instead of 10,000 times."""
    if isinstance(node, list):
        return [_distinct_subschemas(value) for value in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in VALUE_KEYS:  # data: the metaschema takes any
            out[key] = value
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            seen: set[str] = set()
            kept = {}
            for name, sub in value.items():
                canon = _canon(sub)
                if canon not in seen:
                    seen.add(canon)
                    kept[name] = _distinct_subschemas(sub)
            out[key] = kept
        else:
            out[key] = _distinct_subschemas(value)
    return out


def json_schema_to_grammar(schema, *, whitespace: str = "flexible", indent=None, max_whitespace=None,
                           additional_properties_default: bool = True, lenient: bool = False, separators=None,
                           retrieve: Callable[[str], Any] | None = None,
                           property_order: str = "definition", max_depth: int = MAX_SCHEMA_DEPTH,
                           root_whitespace: bool = True, value_checks: bool = True,
                           clock: CompileClock | None = None, unsatisfiable: str = "error") -> Grammar:
    """Compile a JSON Schema (dict, JSON text, or pydantic model class) into grammar IR.

    whitespace: "flexible" (any JSON whitespace between tokens and around the value) or "compact".
    indent: json.dumps(indent=N) layout.  max_whitespace: cap on each whitespace run (flexible).
    separators: exact (item, key) separators as in json.dumps.  additional_properties_default:
    False treats a missing additionalProperties on object schemas as false; "declared" (XGrammar's
    strict mode) only on object schemas that declare members (properties, required, ...), and
    closes tuples (prefixItems) the same way.  lenient: widen what
    cannot be expressed exactly (with a warning) instead of raising UnsupportedSchemaError.
    retrieve: uri -> schema document, for `$ref`s to other documents (none are fetched otherwise).
    property_order: "definition" (default, as XGrammar and llguidance do) takes an object's members
    in the order the schema lists them, which also keeps generation on one path; "any" accepts
    them in any order (JSON objects are unordered), for validating existing documents.
    max_depth: objects and arrays may nest this deep in the document (BudgetExceededError past it).
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
    check_json_document(schema, max_depth)
    try:
        _check_metaschema(schema)
        if schema is False:
            if unsatisfiable == "empty":
                return EMPTY_LANGUAGE.copy()
            raise SchemaError("the schema is unsatisfiable: the schema is false; use true or {} to allow any value",
                              "#")
        def compile_(dynamic_scopes: bool) -> Grammar:
            comp = _Compiler(schema, whitespace=whitespace, indent=indent, max_whitespace=max_whitespace,
                             additional_properties_default=additional_properties_default, lenient=lenient,
                             separators=separators, retrieve=retrieve, property_order=property_order,
                             root_whitespace=root_whitespace, dynamic_scopes=dynamic_scopes,
                             value_checks=value_checks)
            if clock is not None:
                comp.clock = clock
            return comp.compile()

        try:
            try:
                return compile_(dynamic_scopes=False)
            except _NeedsDynamicScopes:
                return compile_(dynamic_scopes=True)
        except _Unsatisfiable as exc:
            if unsatisfiable == "empty":
                return EMPTY_LANGUAGE.copy()
            raise SchemaError(exc.message, exc.pointer) from None
    except RecursionError:
        raise BudgetExceededError("the schema nests too deeply to compile (Python's recursion limit); move deep "
                                  "parts into $defs with $ref, or lower max_schema_depth so that budget "
                                  "stops it first") from None
