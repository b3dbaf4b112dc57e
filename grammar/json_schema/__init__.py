"""JSON Schema -> grammar IR: the structural part (objects, arrays, combinators, references).

`json_schema_to_grammar(schema, ...)` returns a `Grammar` whose language is a set of JSON texts
every one of which validates against `schema` (soundness), and which contains the usual
serialisations of valid instances (completeness) within the documented limits below.

How it works
------------
1. The document is checked against its metaschema (`SchemaError` with a JSON pointer), then
   rewritten into draft 2020-12 spelling with absolute `$ref`s (documents.py) and
   registered with `referencing`, which resolves `$id`, `$anchor` and JSON pointers.
2. Each subschema is turned into *disjunctive normal form*: a list of "flat" conjunctions
   (typed `Term`s, forms.py: keywords without allOf/anyOf/oneOf/not/if/dependent*), by merging allOf
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
   its own IR rule, memoised by the canonical JSON of the subschema (with the indent depth and the
   `Mode`: lenient, value checks), so
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
  for the dynamic scope that reaches it (dynamic.py), one copy per (target, scope).
- unevaluatedProperties / unevaluatedItems next to in-place applicators: per DNF term the
  evaluated members are its properties / patterns / items (and `contains` matches, 2020-12);
  `not` and failed `if` conditions evaluate nothing (UNANNOTATED).  Exact unless two anyOf
  branches match one instance at once (then stricter, never wider).
- Unsatisfiable schemas raise SchemaError, or with unsatisfiable="empty" (validation) compile
  to the empty language; unsatisfiable subschemas drop their branch, member or item.

Value checks (value_checks=True, the default): uniqueItems on item types that are not a small
enum compiles to an array rule without it, a oneOf whose branches overlap on objects, arrays or
strings (and cannot be negated) to the union of its branches, and an object whose minProperties
needs two or more undeclared members (their names never running out) to its counted members;
`Grammar.checks` names those rules, and the matcher (masks/value_checks.py) rejects the bytes that
close a duplicate item, a repeated member name or a value that jsonschema rejects against the
subschema.  Analyses that need exact terms (disjointness,
finite value sets, propertyNames: `exact_dnf`) still treat an overlapping oneOf as unsupported.

What cannot be expressed exactly (oneOf overlapping on numbers, `not` of uniqueItems / contains /
dependentSchemas, maxContains without a negatable `contains`, ...) raises
`UnsupportedSchemaError(keyword, pointer)`; with `lenient=True` it is widened instead and
`warnings.warn` says what was widened.


Modules: documents (loading, metaschema check, $ref/$id normalisation), dynamic ($dynamicRef
scopes), closing (strict mode: which positions are closed), keywords (the vocabulary of flat
terms), forms (a flat term typed: `Term` with its number / string / object / array forms,
`parse_term` checks each keyword's value once), context (what the emitter and the algebra share:
options, `Mode`, limits, diagnostics, the document registry), algebra (`SchemaAlgebra`: DNF of
`Term`s and `RefMarker`s, its counters in an `AlgebraState`; it reads schemas and never emits),
merge (`merge_terms`, the conjunction of two terms, pure functions over forms), one_of (oneOf and
disjointness) and negation (`not`), functions over the algebra; emit (`Emitter`: rules, memo,
values, enums/consts, counted repetitions; it holds the context and the algebra), objects, arrays
and scalars (strings, numbers): functions over the emitter that read one term's forms; layout
(whitespace), leaves (the string/number automata, memoised), convert (`json_schema_to_grammar`).
"""

from .convert import json_schema_to_grammar
from .layout import INDENT_DEPTH_LIMIT

__all__ = ["json_schema_to_grammar", "INDENT_DEPTH_LIMIT"]
