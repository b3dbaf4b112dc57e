"""Loading and preparing a JSON Schema document for the grammar compiler (see the package docstring):
parsing, the metaschema check, and the normalisation below.

Every document (the root and every remote one) is rewritten once, up front, into one dialect
-- draft 2020-12 spelling -- so the compiler only knows one set of keywords:

- draft-04 `id` -> `$id`; draft <= 7 `$id: "#name"` -> `$anchor: name`;
- draft-04 boolean exclusiveMinimum/exclusiveMaximum -> numeric ones;
- array-form `items` (draft <= 2019-09) -> `prefixItems`, `additionalItems` -> `items`;
- `dependencies` -> `dependentRequired` / `dependentSchemas`;
- in drafts <= 7 a `$ref` makes its sibling keywords inert, so they are dropped (definitions
  are kept, since pointers may lead into them);
- keywords a draft does not know (e.g. `const` in draft-04) are dropped, as that draft ignores them;
- every `$ref` becomes an absolute URI (resolved against the enclosing `$id`s), so subschemas
  can be copied, merged and memoised without carrying their base URI along.

A JSON pointer in a `$ref` still names the *original* location; the few pointers that cross a
renamed keyword (`#/items/0` in a draft-04 document) are translated when they are looked up.
"""

from __future__ import annotations

import difflib
import json
import re
from urllib.parse import quote, unquote, urldefrag, urljoin

import jsonschema

from ...core.caches import BoundedCache, memoized
from ...core.errors import InvalidJSONError, LimitExceededError, SchemaError
from ...core.limits import DEFAULT_LIMITS
from ...core.recursion import load_json_text
from .keywords import canonical_json
from .metaschema import DRAFTS_KEPT, fast_valid

DEFAULT_BASE = "https://pushmask.invalid/schema.json"

DRAFT_URIS = {
    "draft4": ("draft-04",),
    "draft6": ("draft-06",),
    "draft7": ("draft-07",),
    "draft2019-09": ("2019-09",),
    "draft2020-12": ("2020-12",),
}
DRAFT_ORDER = ["draft4", "draft6", "draft7", "draft2019-09", "draft2020-12"]

# Keywords whose value is a schema, a list of schemas, or a name -> schema map.
SCHEMA_KEYS = (
    "not",
    "if",
    "then",
    "else",
    "additionalProperties",
    "additionalItems",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "items",
)
LIST_KEYS = ("allOf", "anyOf", "oneOf", "prefixItems")
MAP_KEYS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# Keywords whose values are instances (data), never schemas to rewrite.
VALUE_KEYS = frozenset({"enum", "const", "default", "examples"})

# Keywords introduced after a draft; that draft (and earlier ones) ignores them.
_NEW_IN = {
    "draft6": {"const", "contains", "propertyNames", "examples"},
    "draft7": {"if", "then", "else", "contentMediaType", "contentEncoding"},
    "draft2019-09": {
        "dependentRequired",
        "dependentSchemas",
        "minContains",
        "maxContains",
        "$anchor",
        "unevaluatedItems",
        "unevaluatedProperties",
        "$recursiveRef",
        "$recursiveAnchor",
        "$defs",
    },
    "draft2020-12": {"prefixItems", "$dynamicRef", "$dynamicAnchor"},
}


_JSON_SCALARS = (str, int, float, bool, type(None))


def check_json_document(doc, max_depth: int = DEFAULT_LIMITS.max_schema_depth) -> None:
    """SchemaError at the first value that is not JSON data (a tuple, a set, bytes, a non-string
    key), LimitExceededError where objects and arrays nest deeper than `max_depth`.  Iterative,
    so any depth is checked without recursing."""
    stack = [(doc, "#", 0)]
    while stack:
        node, pointer, depth = stack.pop()
        if isinstance(node, _JSON_SCALARS):
            continue
        if depth >= max_depth:
            raise LimitExceededError(
                f"the schema nests objects/arrays deeper than {max_depth} levels (at {pointer}, "
                "the max_schema_depth budget); move deep parts into $defs with $ref, or raise "
                "Limits.max_schema_depth"
            )
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise SchemaError(f"object key {key!r} is a {type(key).__name__}; JSON keys are strings", pointer)
                stack.append((value, f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}", depth + 1))
        elif isinstance(node, list):
            stack.extend((value, f"{pointer}/{i}", depth + 1) for i, value in enumerate(node))
        else:
            hint = "; use a list" if isinstance(node, tuple) else ""
            raise SchemaError(
                f"a {type(node).__name__} is not JSON data (objects, arrays, strings, numbers, "
                f"booleans and null are){hint}",
                pointer,
            )


def join_uri(base: str, ref: str) -> str:
    """urljoin that also handles fragment-only references against non-hierarchical bases (urn:)."""
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", ref):
        return ref
    return urljoin(base, ref)


def draft_of(schema, default: str = "draft2020-12") -> str:
    """The draft named by `$schema` (unknown or missing -> `default`)."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if isinstance(uri, str):
        for draft, marks in DRAFT_URIS.items():
            if any(mark in uri for mark in marks):
                return draft
    return default


def _unknown_keywords(draft: str) -> set[str]:
    index = DRAFT_ORDER.index(draft)
    out: set[str] = set()
    for later in DRAFT_ORDER[index + 1 :]:
        out |= _NEW_IN[later]
    if draft != "draft2019-09":
        out |= {"$recursiveRef", "$recursiveAnchor"}
    if draft in ("draft2019-09", "draft2020-12"):
        out |= {"dependencies", "additionalItems"} if draft == "draft2020-12" else {"dependencies"}
    return out


def normalize_document(doc, base: str, draft: str):
    """Rewrite `doc` (found at URI `base`) into 2020-12 spelling with absolute `$ref`s."""
    unknown = _unknown_keywords(draft)
    # "definitions" is a plain container in every draft: keep it so pointers into it resolve.
    unknown.discard("definitions")
    unknown.discard("$defs")
    return _normalize(doc, base, draft, unknown, is_root=True)


def _normalize(node, base: str, draft: str, unknown: set[str], is_root: bool = False):
    if not isinstance(node, dict):
        return node  # booleans (and malformed values, rejected by the metaschema check)
    node = dict(node)
    old = draft in ("draft4", "draft6", "draft7")
    if draft == "draft4" and isinstance(node.get("id"), str):
        node["$id"] = node.pop("id")
    if old and "$ref" in node:
        # Siblings of $ref are ignored in drafts <= 7 (keep containers pointers may lead into).
        node = {k: v for k, v in node.items() if k in ("$ref", "definitions", "$defs", "$schema")}
    for key in list(node):
        if key in unknown:
            del node[key]
    anchors: list[str] = []
    if isinstance(node.get("$id"), str):
        ident = node["$id"]
        if old and ident.startswith("#"):
            del node["$id"]
            anchors.append(ident[1:])
        else:
            url, frag = urldefrag(ident)
            if old and frag:
                anchors.append(frag)
            if url:
                base = join_uri(base, url)
                node["$id"] = base
            else:
                node.pop("$id", None)
    if anchors:
        node["$anchor"] = anchors[0]
    if isinstance(node.get("$ref"), str):
        node["$ref"] = join_uri(base, node["$ref"])
    for key in ("$dynamicRef", "$recursiveRef"):
        if isinstance(node.get(key), str):
            node[key] = join_uri(base, node[key])
    # draft-04 boolean exclusive bounds
    for excl, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(excl), bool):
            flag = node.pop(excl)
            if flag and bound in node:
                node[excl] = node.pop(bound)
    # tuple items
    if draft != "draft2020-12" and isinstance(node.get("items"), list):
        node["prefixItems"] = node.pop("items")
        if "additionalItems" in node:
            node["items"] = node.pop("additionalItems")
    node.pop("additionalItems", None)  # without tuple items it has no effect
    if "dependencies" in node:
        deps = node.pop("dependencies")
        if isinstance(deps, dict):
            for name, dep in deps.items():
                if isinstance(dep, list):
                    node.setdefault("dependentRequired", {})[name] = dep
                else:
                    node.setdefault("dependentSchemas", {})[name] = dep
    recurse = lambda sub: _normalize(sub, base, draft, unknown)  # noqa: E731
    for key in SCHEMA_KEYS:
        if key in node and isinstance(node[key], (dict, bool)):
            node[key] = recurse(node[key])
    for key in LIST_KEYS:
        if isinstance(node.get(key), list):
            node[key] = [recurse(sub) for sub in node[key]]
    for key in MAP_KEYS:
        if isinstance(node.get(key), dict):
            node[key] = {name: recurse(sub) for name, sub in node[key].items()}
    # A non-keyword member may still hold a schema that a $ref points at ("#/Sample"): rewrite
    # it the same way (the compiler ignores non-keywords, so this only serves such references).
    for key, value in node.items():
        if isinstance(value, dict) and key not in VALUE_KEYS and key not in SCHEMA_KEYS and key not in MAP_KEYS:
            node[key] = recurse(value)
    return node


def translate_pointer(fragment: str) -> list[str]:
    """Candidate 2020-12 spellings of an original-draft JSON pointer (first = unchanged)."""
    parts = fragment.split("/")
    out = [fragment]
    changed = []
    for i, part in enumerate(parts):
        nxt = parts[i + 1] if i + 1 < len(parts) else ""
        if part == "items" and nxt.isdigit():
            changed.append("prefixItems")
        elif part == "additionalItems":
            changed.append("items")
        elif part == "dependencies":
            changed.append("dependentSchemas")
        else:
            changed.append(part)
    alt = "/".join(changed)
    if alt != fragment:
        out.append(alt)
    return out


def escape_pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


SPEC_COPY = "https://pushmask.invalid/spec/"
"""Strict mode's spec copies of documents (closing.py) live under this prefix."""


def spec_uri(uri: str) -> str:
    """The URI of `uri`'s place in the spec copy of its document: SPEC_COPY + the quoted URI."""
    url, frag = urldefrag(uri)
    return SPEC_COPY + quote(url, safe="") + ("#" + frag if frag else "")


def original_uri(uri: str) -> str:
    """The inverse of spec_uri (other URIs unchanged)."""
    if not uri.startswith(SPEC_COPY):
        return uri
    url, frag = urldefrag(uri)
    return unquote(url[len(SPEC_COPY) :]) + ("#" + frag if frag else "")


def uri_pointer(uri: str) -> str:
    uri = original_uri(uri)
    url, frag = urldefrag(uri)
    if url == DEFAULT_BASE:
        return "#" + frag
    return uri


def count_key(node, key: str) -> int:
    if isinstance(node, dict):
        return (key in node) + sum(count_key(v, key) for k, v in node.items() if k not in ("enum", "const"))
    if isinstance(node, list):
        return sum(count_key(v, key) for v in node)
    return 0


def load_schema(schema):
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    if isinstance(schema, (str, bytes)):
        try:
            return load_json_text(schema, "schema")
        except json.JSONDecodeError as exc:
            raise InvalidJSONError(
                f"the schema is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", "#"
            ) from None
    return schema


def check_metaschema(schema) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"a JSON Schema must be an object or a boolean, got {type(schema).__name__}", "#")
    # jsonschema looks a `$schema` up as a URI: one that is not a string is checked (and
    # refused) by the 2020-12 metaschema instead of crashing that look-up
    named = isinstance(schema.get("$schema"), str)
    cls = jsonschema.validators.validator_for(schema if named else {}, default=jsonschema.Draft202012Validator)
    if fast_valid(schema, cls, _inlined_metaschema, _metaschema_formats(cls)) or _each_node_valid(schema, cls):
        return
    try:  # some node fails: the whole check finds the error jsonschema reports (its best match)
        cls.check_schema(_distinct_subschemas(schema), format_checker=_metaschema_formats(cls))
    except jsonschema.exceptions.SchemaError as exc:
        message, path = _metaschema_failure(exc)
        raise SchemaError(
            f"invalid schema: {message}", "#" + "".join(f"/{escape_pointer(str(p))}" for p in path)
        ) from None


def _metaschema_failure(error) -> tuple[str, list]:
    """(message, path) of a metaschema failure.  Where the value fails an `enum` (a type name,
    also inside an anyOf such as `type`'s "a name or a list of names"), the message lists the
    valid values and the nearest one to a misspelt string instead of jsonschema's "is not valid
    under any of the given schemas"; a failing string (a list's item) is preferred to a whole
    value, as it is the one to correct."""
    enums, pending = [], [error]
    while pending:
        failure = pending.pop(0)  # breadth first: the enum nearest the reported error first
        if failure.validator == "enum" and isinstance(failure.validator_value, list):
            enums.append(failure)
        pending.extend(failure.context)
    if not enums:
        return error.message, list(error.path)
    failure = next((f for f in enums if isinstance(f.instance, str)), enums[0])
    values = failure.validator_value
    message = f"{failure.instance!r:.80} is not one of {', '.join(map(repr, values))}"
    if isinstance(failure.instance, str):
        nearest = difflib.get_close_matches(failure.instance, [v for v in values if isinstance(v, str)], n=1)
        if nearest:
            message += f"; did you mean {nearest[0]!r}?"
    return message, list(failure.absolute_path)


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


@memoized(
    DRAFTS_KEPT, name="JSON Schema metaschema format checkers, per draft (grammar/json_schema/documents.py)", table=True
)
def _metaschema_formats(cls) -> jsonschema.FormatChecker:
    """The draft's format checker for schemas, with `_is_ecma_regex` as format "regex"."""
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = {**cls.FORMAT_CHECKER.checkers, "regex": (_is_ecma_regex, re.error)}
    return checker


VALID_SUBSCHEMAS_KEPT = 20_000
"""Subschemas known to pass the metaschema, kept per process (least recently stored first out):
JSON strings, numbers and members recur across schemas, and jsonschema's check costs about
0.2-0.5 ms per subschema."""
_valid_subschemas: BoundedCache[tuple[type, str], bool] = BoundedCache(
    VALID_SUBSCHEMAS_KEPT,
    name="JSON Schema subschemas that passed the metaschema check (grammar/json_schema/documents.py)",
)
_NODE_MAPS = MAP_KEYS + ("dependencies",)


def _each_node_valid(schema, cls) -> bool:
    """True when the document passes `cls`'s metaschema, checked in one call with each subschema
    known valid from earlier compiles replaced by {} (valid wherever a schema goes): a
    metaschema checks each position it takes a schema at against its own root ($ref "#",
    $dynamicRef "#meta", $recursiveRef "#"), so a subschema's verdict does not depend on what
    encloses it.  Those checked anew are remembered.  False: the caller checks the whole
    document, which finds and words the error."""
    meta = _meta_checks.get_or_make(cls, lambda: _MetaCheck(cls))
    checked: list[str] = []
    if not meta.validator.is_valid(meta.without_known(schema, checked)):
        return False
    for canon in checked:
        _valid_subschemas.put((cls, canon), True)
    return True


class _MetaCheck:
    """A draft's metaschema validator and the keywords its metaschema checks subschemas at,
    found by asking it (a draft ignores the keywords of later drafts: a subschema under one of
    them is not checked, so it must not be remembered as valid)."""

    def __init__(self, cls):
        self.cls = cls
        self.validator = cls(_inlined_metaschema(cls), format_checker=_metaschema_formats(cls))
        bad = {"type": 5}  # no draft takes a number for "type"
        self.schema_keys = {key for key in SCHEMA_KEYS if self._checks({key: {}}, {key: bad})}
        self.list_keys = {key for key in LIST_KEYS + ("items",) if self._checks({key: [{}]}, {key: [bad]})}
        self.map_keys = {key for key in _NODE_MAPS if self._checks({key: {"a": {}}}, {key: {"a": bad}})}

    def _checks(self, good, bad) -> bool:
        return self.validator.is_valid(good) and not self.validator.is_valid(bad)

    def without_known(self, value, checked: list[str]):
        """The subschema `value` with its subschemas known valid replaced by {} ({} if it is
        known itself); the canonical texts of the object subschemas kept (its own included)
        appended to `checked`."""
        if not isinstance(value, dict):
            return value  # booleans stay: draft-04 takes them in few places
        canon = canonical_json(value)
        if (self.cls, canon) in _valid_subschemas:
            return {}
        checked.append(canon)
        out = {}
        for key, sub in value.items():
            if key in self.schema_keys:
                out[key] = self.without_known(sub, checked)
            elif key in self.list_keys and isinstance(sub, list):
                out[key] = [self.without_known(item, checked) for item in sub]
            elif key in self.map_keys and isinstance(sub, dict):
                out[key] = {name: self.without_known(item, checked) for name, item in sub.items()}
            else:
                out[key] = sub
        return out


_meta_checks: BoundedCache[type, _MetaCheck] = BoundedCache(
    DRAFTS_KEPT,
    name="JSON Schema metaschema validators, per draft (grammar/json_schema/documents.py)",
    table=True,
)


def _inlined_metaschema(cls):
    """`cls`'s metaschema with the vocabulary metaschemas its allOf references (drafts 2019-09
    and 2020-12) copied in, and the dynamic self-references ($dynamicRef "#meta",
    $recursiveRef "#") made plain ones ("#"): the same language (the dynamic scope of a
    metaschema check always starts at its root), checked without a registry look-up per
    vocabulary and subschema, which is most of jsonschema's time on these drafts; then the
    vocabularies' allOf made one schema (`_flattened`).  The metaschema itself where it has no
    vocabularies or a reference leads elsewhere."""
    root = cls.META_SCHEMA
    vocabularies = [item.get("$ref") for item in root.get("allOf", ())]
    if not vocabularies or not all(isinstance(ref, str) and "#" not in ref for ref in vocabularies):
        return root
    from jsonschema_specifications import REGISTRY

    position = {ref: i for i, ref in enumerate(vocabularies)}
    base = root["$id"].rsplit("/", 1)[0] + "/"

    def inline(node, vocabulary):
        if isinstance(node, list):
            return [inline(item, vocabulary) for item in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for key, value in node.items():
            if key in ("$id", "$schema", "$vocabulary", "$dynamicAnchor", "$recursiveAnchor") and not isinstance(
                value, dict
            ):
                continue  # identifiers and anchors of the parts: the copy is one document
            if (key, value) in (("$dynamicRef", "#meta"), ("$recursiveRef", "#")):
                out["$ref"] = "#"
            elif key in ("$dynamicRef", "$recursiveRef") and isinstance(value, str):
                raise LookupError(value)
            elif key == "$ref" and isinstance(value, str):
                target, _, fragment = value.partition("#")
                part = position[target] if target else vocabulary  # KeyError: a reference elsewhere
                out["$ref"] = "#" + fragment if part is None else f"#/allOf/{part}{fragment}"
            else:
                out[key] = inline(value, vocabulary)
        return out

    try:
        inlined = inline({key: value for key, value in root.items() if key != "allOf"}, None)
        inlined["allOf"] = [inline(REGISTRY.contents(base + ref), i) for i, ref in enumerate(vocabularies)]
    except (KeyError, LookupError):
        return root
    return _flattened(inlined)


_VOCABULARIES = "x-vocabularies"
"""Where `_flattened` keeps the vocabularies' $defs: not a keyword, so only references read it."""


def _flattened(inlined):
    """The inlined metaschema with its allOf of vocabularies made one schema: the same language,
    checked in about half the time (jsonschema's descent into seven vocabularies per subschema
    is most of the check).  It holds when every vocabulary takes the root's types and
    declares keywords of its own (disjoint `properties`); then the union of the `properties`
    checks what the allOf did.  The vocabularies' $defs move under `_VOCABULARIES` and the
    references into them follow.  `inlined` itself where a vocabulary has anything else."""
    merged = dict(inlined.get("properties", {}))
    kept = {}
    for i, part in enumerate(inlined["allOf"]):
        if not (
            isinstance(part, dict)
            and set(part) <= {"$vocabulary", "$comment", "title", "type", "$defs", "properties"}
            and part.get("type") == inlined.get("type")
            and not set(part.get("properties", {})) & set(merged)
        ):
            return inlined
        merged.update(part.get("properties", {}))
        if "$defs" in part:
            kept[str(i)] = {"$defs": part["$defs"]}

    def moved(node):
        if isinstance(node, list):
            return [moved(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: moved(value) for key, value in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/allOf/"):
            out["$ref"] = f"#/{_VOCABULARIES}/" + ref[len("#/allOf/") :]
        return out

    flat = {key: value for key, value in inlined.items() if key not in ("allOf", "properties", _VOCABULARIES)}
    flat["properties"] = merged
    flat[_VOCABULARIES] = kept
    return moved(flat)


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
                canon = canonical_json(sub)
                if canon not in seen:
                    seen.add(canon)
                    kept[name] = _distinct_subschemas(sub)
            out[key] = kept
        else:
            out[key] = _distinct_subschemas(value)
    return out
