"""Strict mode: closing object schemas (additionalProperties false) and tuples (items false)
where that only removes instances, so every output still validates against the schema as the
JSON Schema spec reads it.

Closing a subschema narrows what it accepts.  That narrows the whole schema only where the
subschema is used *positively*: an instance the closed schema accepts must then be accepted by
the spec schema too.  The rule, applied by `close_document`:

- positive (closed): the root; properties, patternProperties, additionalProperties,
  dependentSchemas, items, prefixItems, unevaluated* values; allOf and anyOf branches; then and
  else; contains without maxContains (fewer matches still reach minContains only if the spec's
  matches do); $defs and anything else a `$ref` from a positive position reaches.
- negative (spec meaning, never closed): `not`, an `if` condition (closing it would skip `then`
  and take `else`), `contains` when maxContains counts matches, and everything below those.
  A `$ref` there leads into a *spec copy* of its document, registered under another URI
  (`spec_uri`), so a `$defs` entry reached from both polarities has both meanings.
- oneOf in a positive position means "exactly one branch matches as the spec reads it, and
  some closed branch matches": `oneOf` keeps the spec branches (what jsonschema and the
  compiler count) and CLOSED_ONE_OF holds the closed ones (what the compiler emits, see
  one_of.py).  Closed branch i matching implies spec branch i matches, so the result is a subset.
- a document with `$dynamicAnchor`/`$recursiveAnchor` is not closed at all: a dynamic reference
  from a negative position could otherwise resolve into a closed copy.
- an object schema or tuple that closing would leave without any value (`required` naming a
  member it does not declare, minProperties past its declared members, minItems past
  prefixItems) stays open, with one warning per document; past minProperties its declared
  members become required, so that as few undeclared members as possible are needed.  Where
  closing still leaves the whole schema no value (a oneOf whose closed branches all match two
  spec branches), json_schema_to_grammar compiles the spec language, with a warning.

unevaluatedProperties/Items need no special case: a closed subschema that succeeds evaluates
the same members as the spec one, and one that fails evaluates none, which leaves more members
to the unevaluated* schema, so it is stricter, never wider.  additional_properties_default=False
(close every object schema) follows the same polarity rule.
"""

from __future__ import annotations

import re
import warnings

from .documents import VALUE_KEYS, spec_uri

CLOSED_ONE_OF = "x-pushmask-closed-oneOf"
"""Next to `oneOf` (spec branches) in a positive position: the closed branches, in order."""

_DECLARING_KEYWORDS = (
    "properties",
    "patternProperties",
    "required",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
)
"""With additional_properties_default="declared" (XGrammar's strict mode), an object schema with one of
these keywords takes no undeclared members; one with none of them (`{"type": "object"}`) any."""
_REF_KEYS = ("$id", "$ref", "$dynamicRef", "$recursiveRef")
_DYNAMIC_ANCHORS = ("$dynamicAnchor", "$recursiveAnchor")
_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def spec_copy(node, keys=_REF_KEYS):
    """A normalised document (or subschema) with every $id and reference (`keys`) moved into the
    spec copies: the same schema, whose references never reach a closed subschema."""
    if isinstance(node, list):
        return [spec_copy(v, keys) for v in node]
    if not isinstance(node, dict):
        return node
    return {
        k: v if k in VALUE_KEYS else spec_uri(v) if k in keys and isinstance(v, str) else spec_copy(v, keys)
        for k, v in node.items()
    }


def _spec_subtree(node):
    """A negative position in the closed document: its references lead into the spec copies; its
    $ids stay, so references from positive positions still find them (with the spec meaning)."""
    return spec_copy(node, _REF_KEYS[1:])


def close_document(doc, only_declared: bool):
    """The normalised document `doc` with strict mode applied where it narrows (module docstring).
    only_declared: close only object schemas with a _DECLARING_KEYWORDS keyword ("declared"),
    and tuples; else every object schema (additional_properties_default=False)."""
    if _mentions(doc, _DYNAMIC_ANCHORS):
        return doc
    closer = _Closer(only_declared)
    out = closer.positive(doc, "#")
    if closer.kept_open:
        warnings.warn(
            "pushmask: strict mode leaves the object schema(s) at "
            + ", ".join(closer.kept_open[:5])
            + " open: closing them would leave no valid value (required or minProperties names members "
            "the schema does not declare, or minItems exceeds prefixItems)",
            stacklevel=6,
        )
    return out


class _Closer:
    """One pass of close_document: the pointers of objects it had to keep open."""

    def __init__(self, only_declared: bool):
        self.only_declared = only_declared
        self.kept_open: list[str] = []

    def positive(self, node, pointer: str):
        """`node` in a positive position: closed where it declares members, its children by
        their own polarity."""
        if isinstance(node, list):
            return [self.positive(v, f"{pointer}/{i}") for i, v in enumerate(node)]
        if not isinstance(node, dict):
            return node
        out = {}
        for k, v in node.items():
            at = f"{pointer}/{k}"
            where = polarity(node, k)
            if where == "value":
                out[k] = v
            elif where == "negative":
                out[k] = _spec_subtree(v)
            elif where == "one_of":
                out.update(self._one_of(v, at))
            elif where == "map":
                out[k] = {n: self.positive(s, f"{at}/{n}") for n, s in v.items()}
            else:
                out[k] = self.positive(v, at)
        added, kept_open = closing_keywords(node, self.only_declared)
        out.update(added)
        self.kept_open += [pointer] * kept_open
        return out

    def _one_of(self, branches: list, pointer: str) -> dict:
        """oneOf in a positive position: the spec branches, and the closed ones when closing
        changes a branch (a reference may lead to a closed subschema, so it counts as a change)."""
        closed = [self.positive(b, f"{pointer}/{i}") for i, b in enumerate(branches)]
        if closed == branches and not _mentions(branches, _REF_KEYS[1:]):
            return {"oneOf": closed}
        return {"oneOf": _spec_subtree(branches), CLOSED_ONE_OF: closed}


def polarity(node: dict, key: str) -> str:
    """The polarity rule (module docstring) for what `node[key]` holds, in a positive `node`:
    "value" (instances, untouched), "negative" (`not`, an `if` condition, `contains` counted by
    maxContains: spec meaning), "one_of" (spec branches count, closed ones are emitted), "map"
    (a name -> subschema map, each positive) or "positive"."""
    value = node[key]
    if key in VALUE_KEYS:
        return "value"
    if key in ("not", "if") or (key == "contains" and "maxContains" in node):
        return "negative"
    if key == "oneOf" and isinstance(value, list):
        return "one_of"
    if key in _MAPS and isinstance(value, dict):
        return "map"
    return "positive"


def closing_keywords(node: dict, only_declared: bool) -> tuple[dict, int]:
    """What strict mode adds to a schema object in a positive position, and how many of its
    parts it had to keep open: additionalProperties false on an object schema (one that
    declares members, with only_declared), items false on a tuple (only_declared), each unless
    it would leave no instance; past minProperties the declared members become required."""
    added: dict = {}
    kept_open = 0
    t = node.get("type")
    is_object = (
        t == "object" or (isinstance(t, list) and "object" in t) or "properties" in node or "patternProperties" in node
    )
    if only_declared:
        is_object = is_object and any(k in node for k in _DECLARING_KEYWORDS)
    if is_object and "additionalProperties" not in node and "unevaluatedProperties" not in node:
        missing = _closing_leaves_no_object(node)
        if missing:
            kept_open += 1
            if missing == "minProperties":  # its own members first: fewest undeclared ones needed
                required = node.get("required", [])
                added["required"] = [*required, *(n for n in _declared(node) if n not in required)]
        else:
            added["additionalProperties"] = False
    if (
        only_declared
        and "unevaluatedItems" not in node
        and isinstance(node.get("prefixItems"), list)
        and "items" not in node
    ):
        if isinstance(node.get("minItems"), (int, float)) and node["minItems"] > len(node["prefixItems"]):
            kept_open += 1
        else:
            added["items"] = False
    return added, kept_open


def _declared(node: dict) -> list[str]:
    """The member names `properties` allows (a false schema allows none)."""
    props = value if isinstance(value := node.get("properties"), dict) else {}
    return [n for n, s in props.items() if s is not False]


def _closing_leaves_no_object(node: dict) -> str | None:
    """The keyword that additionalProperties false would leave no instance: "required" when it
    names a member neither properties nor patternProperties allows, "minProperties" past the
    names properties declares (without patternProperties); None when closing leaves some."""
    props = value if isinstance(value := node.get("properties"), dict) else {}
    patterns = value if isinstance(value := node.get("patternProperties"), dict) else {}

    def allowed(name) -> bool:
        if name in props:
            return props[name] is not False
        for pattern in patterns:
            try:
                if re.search(pattern, name):
                    return True
            except (re.error, TypeError):
                return True  # a pattern `re` cannot read: assume it may allow the name
        return False

    required = value if isinstance(value := node.get("required"), list) else []
    if not all(allowed(name) for name in required if isinstance(name, str)):
        return "required"
    min_props = node.get("minProperties")
    if isinstance(min_props, (int, float)) and not patterns and min_props > len(_declared(node)):
        return "minProperties"
    return None


def _mentions(node, keys) -> bool:
    """Does any subschema in `node` (outside enum/const values) have one of `keys`?"""
    if isinstance(node, list):
        return any(_mentions(v, keys) for v in node)
    if not isinstance(node, dict):
        return False
    return any(k in node for k in keys) or any(_mentions(v, keys) for k, v in node.items() if k not in VALUE_KEYS)
