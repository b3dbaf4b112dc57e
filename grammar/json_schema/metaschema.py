"""A fast pre-check of a schema document against its draft's metaschema, for the common case
that the document is valid: the metaschema compiled once per draft into Python closures, which
walk the document's own keys (jsonschema walks every keyword the metaschema names, at every
subschema, and looks references up in a registry: most of a compile's metaschema time).

It only ever answers "valid" when jsonschema's check would pass: each metaschema keyword it
compiles keeps jsonschema's semantics for that keyword, a metaschema using any other keyword
(or a form of one it does not model) is not compiled at all, and an instance value it cannot
type exactly (not JSON data) makes it answer "not known".  "Not known" sends the caller to
jsonschema, which gives the verdict and words the error (documents.check_metaschema).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from urllib.parse import unquote

import jsonschema

from ...core.caches import BoundedCache

Check = Callable[[object], bool]
"""A compiled metaschema subschema: True when the instance passes it (may raise _Unsure)."""

# Keywords that annotate and never assert: a metaschema subschema holding only these (and the
# assertions below) is compiled; the annotation keywords are skipped.
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "id",
        "$id",
        "$comment",
        "$vocabulary",
        "$defs",
        "definitions",
        "x-vocabularies",  # documents._VOCABULARIES: where the flattened metaschema keeps its $defs
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)

_KINDS = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
_KINDS[type(None)] = "null"
_TYPE_PROBES: tuple[object, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    2**70,
    0.0,
    1.0,
    -2.0,
    1.5,
    "",
    "a",
    [],
    [1],
    {},
    {"a": 1},
)


class _Unsure(Exception):
    """The instance holds a value that is not plain JSON data: jsonschema decides."""


class _NotModelled(Exception):
    """The metaschema uses a keyword (or a form of one) this module does not model."""


def _kind(instance) -> str:
    """The JSON type of `instance` by its exact Python type ("integer" for every int)."""
    kind = _KINDS.get(type(instance))
    if kind is None:
        raise _Unsure
    return kind


def _type_predicates(cls) -> dict[str, Callable[[object], bool]]:
    """`cls`'s JSON types as predicates on plain JSON values; checked on probe values against
    `cls`'s own type checker (draft-04 takes 1.0 as a number only, later drafts as an integer)."""
    whole_floats = cls.TYPE_CHECKER.is_type(1.0, "integer")
    predicates = {
        "object": lambda value: type(value) is dict,
        "array": lambda value: type(value) is list,
        "string": lambda value: type(value) is str,
        "boolean": lambda value: type(value) is bool,
        "null": lambda value: value is None,
        "number": lambda value: type(value) is int or type(value) is float,
        "integer": (
            (lambda value: type(value) is int or type(value) is float and value.is_integer())
            if whole_floats
            else (lambda value: type(value) is int)
        ),
    }
    for name, predicate in predicates.items():
        if any(predicate(value) != cls.TYPE_CHECKER.is_type(value, name) for value in _TYPE_PROBES):
            raise _NotModelled(f"type {name}")
    return predicates


def _unique_key(value):
    """A key equal for values jsonschema's uniqueItems takes as equal (1 and 1.0; not 1 and True)."""
    kind = _kind(value)
    if kind == "array" or kind == "object":
        raise _Unsure  # nested values: left to jsonschema
    return ("number" if kind == "integer" else kind, value)


def _combined(combine: Callable[[Iterable[bool]], bool], parts: list[Check]) -> Check:
    """anyOf (`combine` is `any`) or allOf (`all`) of the parts' checks."""
    return lambda instance: combine(p(instance) for p in parts)


class FastMetaschema:
    """One draft's metaschema compiled to closures; `valid(document)` is True only where
    jsonschema's check of the document passes, and False where that is not known."""

    def __init__(self, cls, metaschema, format_checker: jsonschema.FormatChecker):
        if cls not in (
            jsonschema.Draft4Validator,
            jsonschema.Draft6Validator,
            jsonschema.Draft7Validator,
            jsonschema.Draft201909Validator,
            jsonschema.Draft202012Validator,
        ):
            raise _NotModelled(cls.__name__)
        self.metaschema = metaschema
        self.formats = format_checker
        self.is_type = _type_predicates(cls)
        self.legacy = cls in (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator)
        self.draft4 = cls is jsonschema.Draft4Validator
        self.compiled: dict[str, Check] = {}  # by JSON pointer into the metaschema
        self.root = self._at("")

    def valid(self, document) -> bool:
        try:
            return self.root(document)
        except (_Unsure, RecursionError):
            return False

    def _at(self, pointer: str) -> Check:
        """The compiled subschema at `pointer` ("" the root), compiled once; a reference into
        a subschema still being compiled (recursion) calls it through the table."""
        if pointer not in self.compiled:
            self.compiled[pointer] = lambda instance: self.compiled[pointer](instance)  # until compiled
            node = self.metaschema
            for token in pointer.split("/")[1:]:
                token = unquote(token).replace("~1", "/").replace("~0", "~")
                if isinstance(node, list) and token.isdigit():
                    node = node[int(token)]
                elif isinstance(node, dict) and token in node:
                    node = node[token]
                else:
                    raise _NotModelled(f"$ref #{pointer}")
            self.compiled[pointer] = self._compile(node)
        return self.compiled[pointer]

    def _ref(self, ref) -> Check:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise _NotModelled(f"$ref {ref!r}")
        pointer = ref[1:]
        compiled = self.compiled

        def follow(instance) -> bool:
            return compiled[pointer](instance)

        self._at(pointer)
        return follow

    def _compile(self, schema) -> Check:
        """One metaschema subschema as a closure: its assertions, each as jsonschema applies it."""
        if schema is True or schema == {}:
            return lambda instance: True
        if schema is False:
            return lambda instance: False
        if not isinstance(schema, dict):
            raise _NotModelled(repr(schema))
        if self.legacy and "$ref" in schema:
            return self._ref(schema["$ref"])  # drafts <= 7: a $ref's siblings are ignored
        checks: list[Check] = []
        keys = set(schema) - _ANNOTATIONS
        if "$ref" in keys:
            checks.append(self._ref(schema["$ref"]))
        if "type" in keys:
            checks.append(self._type(schema["type"]))
        if "enum" in keys:
            checks.append(self._enum(schema["enum"]))
        for name in ("anyOf", "allOf"):
            if name in keys:
                if not isinstance(schema[name], list) or not schema[name]:
                    raise _NotModelled(name)
                parts = [self._compile(part) for part in schema[name]]
                checks.append(_combined(any if name == "anyOf" else all, parts))
        if keys & {"properties", "additionalProperties", "propertyNames", "dependencies"}:
            checks.append(self._object(schema))
        if keys & {"items", "minItems", "uniqueItems"}:
            checks.append(self._array(schema))
        if keys & {"minimum", "exclusiveMinimum"}:
            checks.append(self._number(schema))
        if keys & {"format", "pattern"}:
            checks.append(self._string(schema))
        modelled = {"$ref", "type", "enum", "anyOf", "allOf", "properties", "additionalProperties", "propertyNames"}
        modelled |= {"dependencies", "items", "minItems", "uniqueItems", "minimum", "exclusiveMinimum"}
        if keys - modelled - {"format", "pattern"}:
            raise _NotModelled(", ".join(sorted(keys - modelled - {"format", "pattern"})))
        if len(checks) == 1:
            return checks[0]
        return lambda instance: all(check(instance) for check in checks)

    def _type(self, names) -> Check:
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list) or not all(name in self.is_type for name in names):
            raise _NotModelled(f"type {names!r}")
        predicates = [self.is_type[name] for name in names]

        def check(instance) -> bool:
            _kind(instance)  # the predicates are exact on plain JSON values only
            return any(predicate(instance) for predicate in predicates)

        return check

    def _enum(self, values) -> Check:
        if not isinstance(values, list) or not all(type(value) is str for value in values):
            raise _NotModelled("enum")  # jsonschema's equality of strings is str's
        allowed = frozenset(values)
        return lambda instance: type(instance) is str and instance in allowed

    def _object(self, schema) -> Check:
        properties = {name: self._compile(sub) for name, sub in schema.get("properties", {}).items()}
        additional = schema.get("additionalProperties", True)
        others = None if additional is True else self._compile(additional)
        names = self._compile(schema["propertyNames"]) if "propertyNames" in schema else None
        requires: dict[str, tuple[str, ...]] = {}
        for name, dependency in schema.get("dependencies", {}).items():
            if not isinstance(dependency, list) or not all(isinstance(item, str) for item in dependency):
                raise _NotModelled("dependencies")
            requires[name] = tuple(dependency)

        def check(instance) -> bool:
            if type(instance) is not dict:
                _kind(instance)
                return True
            for key, value in instance.items():
                sub = properties.get(key)
                if sub is not None:
                    if not sub(value):
                        return False
                elif others is not None and not others(value):
                    return False
                if names is not None and not names(key):
                    return False
                if key in requires and not all(needed in instance for needed in requires[key]):
                    return False
            return True

        return check

    def _array(self, schema) -> Check:
        items = schema.get("items", True)
        if isinstance(items, list):
            raise _NotModelled("items as a list")
        each = self._compile(items)
        min_items = schema.get("minItems", 0)
        unique = schema.get("uniqueItems", False)
        if type(min_items) is not int or type(unique) is not bool:
            raise _NotModelled("minItems / uniqueItems")

        def check(instance) -> bool:
            if type(instance) is not list:
                _kind(instance)
                return True
            if len(instance) < min_items or not all(each(item) for item in instance):
                return False
            return not unique or len({_unique_key(item) for item in instance}) == len(instance)

        return check

    def _number(self, schema) -> Check:
        low, exclusive = schema.get("minimum"), schema.get("exclusiveMinimum")
        if self.draft4:  # draft-04: a boolean exclusiveMinimum makes minimum strict
            if not isinstance(exclusive, (bool, type(None))):
                raise _NotModelled("exclusiveMinimum")
            low, strict = (low, None) if not exclusive else (None, low)
        else:
            strict = exclusive
        for bound in (low, strict):
            if bound is not None and type(bound) not in (int, float):
                raise _NotModelled("minimum")

        def check(instance) -> bool:
            if type(instance) is not int and type(instance) is not float:
                _kind(instance)
                return True
            return (low is None or instance >= low) and (strict is None or instance > strict)

        return check

    def _string(self, schema) -> Check:
        pattern, form = schema.get("pattern"), schema.get("format")
        if pattern is not None and not isinstance(pattern, str) or form is not None and not isinstance(form, str):
            raise _NotModelled("pattern / format")
        search = re.compile(pattern).search if pattern is not None else None
        conforms = self.formats.conforms

        def check(instance) -> bool:
            if search is not None and type(instance) is str and not search(instance):
                return False
            _kind(instance)
            return form is None or conforms(instance, form)  # as jsonschema: any type, its checker decides

        return check


DRAFTS_KEPT = 16
"""Per-draft objects kept (fast checks, format checkers, metaschema validators): jsonschema has
six drafts."""
_compiled: BoundedCache[type, FastMetaschema | None] = BoundedCache(
    DRAFTS_KEPT,
    name="JSON Schema fast metaschema checks, per draft (grammar/json_schema/metaschema.py)",
    table=True,
)


def fast_valid(document, cls, metaschema_of: Callable[[type], object], format_checker) -> bool:
    """True when `document` is known to pass `cls`'s metaschema (`metaschema_of(cls)`, asked
    once per draft, checked with `format_checker`); False when jsonschema must decide."""
    fast = _compiled.get_or_make(cls, lambda: _fast_metaschema(cls, metaschema_of, format_checker))
    return fast is not None and fast.valid(document)


def _fast_metaschema(cls, metaschema_of: Callable[[type], object], format_checker) -> FastMetaschema | None:
    """`cls`'s FastMetaschema, or None where its metaschema uses what FastMetaschema does not model."""
    try:
        return FastMetaschema(cls, metaschema_of(cls), format_checker)
    except _NotModelled:
        return None
