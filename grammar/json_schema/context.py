"""What one compile shares between its emitter and its schema algebra: options, `Limits`, `Mode`,
diagnostics, and the document registry that resolves references."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from urllib.parse import urldefrag

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from ...core.errors import CompileClock, SchemaError, UnsupportedSchemaError
from ...core.limits import DEFAULT_LIMITS, Limits
from ..json_options import JsonOptions
from .closing import close_document, spec_copy
from .documents import (
    DEFAULT_BASE,
    count_key,
    draft_of,
    join_uri,
    normalize_document,
    original_uri,
    spec_uri,
    translate_pointer,
)
from .dynamic import DynamicScopes
from .forms import Term
from .keywords import ANNOTATIONS

MAX_INLINE_DEPTH = 40
"""References expanded in place (through allOf/anyOf/oneOf/not, no object or array between) may
nest this deep; deeper means a reference cycle that cannot be expanded (UnsupportedSchemaError)."""


@dataclass(frozen=True)
class Mode:
    """What a compile may do where a keyword cannot be expressed exactly: widen it (lenient) and
    leave it to a value check in the matcher (value_checks).  The analyses that need exact terms
    (a oneOf's negated form, disjointness, finite value sets) narrow it for their extent
    (`CompileContext.narrowed`); a subschema's rule depends on it, so the memo keys on it."""

    lenient: bool
    value_checks: bool


class NeedsDynamicScopes(Exception):
    """Several dynamic anchors: compile again with references specialised per dynamic scope."""


class UnsatisfiableSchema(SchemaError):
    """No instance satisfies the whole schema (json_schema_to_grammar decides what that gives)."""


def _closed(doc, addl_default):
    """A normalised document with strict mode applied where it narrows (closing.py)."""
    if addl_default is True:
        return doc
    return close_document(doc, only_declared=addl_default == "declared")


class _Retriever:
    """The registry's `retrieve`: another document, prepared as the root is (a spec_uri asks for
    its spec copy), and the raw documents retrieved, each once.  A retrieved document's `$id`s
    (its root's, when it differs from where it was retrieved, and those of its subschemas) name
    resources too, served from it: the registry does not look inside a retrieved document for
    them, and their URIs may be served nowhere (a test suite's remotes).  Its own object, not a method of
    CompileContext: the context holds the registry, and a registry holding the context back would
    make a reference cycle that keeps the whole document alive until the collector runs."""

    def __init__(self, retrieve_raw, draft, addl_default):
        self.retrieve_raw = retrieve_raw
        self.draft = draft
        self.addl_default = addl_default
        self.retrieved: list = []
        self.retrieved_uris: set[str] = set()
        self.identified: dict[str, object] = {}  # $id (no fragment) -> its normalised subschema

    def __call__(self, uri: str) -> Resource:
        original = original_uri(uri)
        if self.retrieve_raw is None:
            raise Unresolvable(uri)
        doc = self.identified.get(original)
        if doc is None:
            raw = self.retrieve_raw(original)
            if original not in self.retrieved_uris:  # count each document's dynamic anchors once
                self.retrieved_uris.add(original)
                self.retrieved.append(raw)
            doc = normalize_document(raw, original, draft_of(raw, self.draft))
            self._identify(doc)
        doc = _closed(doc, self.addl_default) if original == uri else spec_copy(doc)
        return DRAFT202012.create_resource(doc)

    def _identify(self, node) -> None:
        """Remember the subschemas of a normalised document by their absolute `$id`s."""
        if isinstance(node, dict):
            if isinstance(node.get("$id"), str):
                self.identified.setdefault(urldefrag(node["$id"])[0], node)
            for key, value in node.items():
                if key not in ("enum", "const", "default", "examples"):
                    self._identify(value)
        elif isinstance(node, list):
            for value in node:
                self._identify(value)


class CompileContext:
    """What the emitter and the schema algebra of one compile share: the options, limits and
    `Mode`; the documents (registry, references, jsonschema checks); the diagnostics (widenings
    warned about, the first reason for an empty language).  The emitter (emit.py) and its algebra
    each hold it as `ctx`; the rules are the emitter's own."""

    def __init__(self, schema, options: JsonOptions, *, dynamic_scopes=False, limits: Limits = DEFAULT_LIMITS):
        self.options = options  # read-only: one object for the whole compile (grammar/json_options.py)
        self.property_order = options.property_order
        self.limits = limits
        self.mode = Mode(lenient=options.lenient, value_checks=options.value_checks)
        self.addl_default = options.additional_properties_default
        self.widened: set[tuple[str, str]] = set()  # (keyword, pointer) warned about, shared by retries
        self.empty_reason: tuple[str, str] | None = None
        self.clock = CompileClock()  # no limit unless json_schema_to_grammar sets one
        self.draft = draft_of(schema)
        root_base = schema.get("$id") if isinstance(schema, dict) and isinstance(schema.get("$id"), str) else None
        if self.draft == "draft4" and isinstance(schema, dict) and isinstance(schema.get("id"), str):
            root_base = schema["id"]
        # A relative root $id ("example.org/a.json") is resolved against the default base once,
        # so that the root's own $id does not join onto itself when the document is normalized.
        root_url = urldefrag(root_base)[0] if root_base else ""
        self.base = join_uri(DEFAULT_BASE, root_url) if root_url else DEFAULT_BASE
        normalized = normalize_document(schema, self.base, self.draft)
        self.root = _closed(normalized, self.addl_default)
        retriever = _Retriever(options.retrieve, self.draft, self.addl_default)
        self.retrieved = retriever.retrieved
        # referencing's stub of attrs' `frozen` hides the field's alias `retrieve` from mypy
        self.registry = Registry(retrieve=retriever).with_resource(  # type: ignore[call-arg]
            self.base, DRAFT202012.create_resource(self.root)
        )
        if self.root is not normalized:  # strict mode: negative positions refer to the spec copy
            self.registry = self.registry.with_resource(
                spec_uri(self.base), DRAFT202012.create_resource(spec_copy(normalized))
            )
        self.registry = self.registry.crawl()
        self.resolver = self.registry.resolver()
        self.validator_cls = jsonschema.Draft202012Validator
        if dynamic_scopes:  # several dynamic anchors: specialise references per dynamic scope
            self.root = DynamicScopes(
                lambda uri: self.lookup(uri, "#"), self._register, limits.max_dynamic_copies
            ).specialise_root(self.root, self.base)

    def dynamic_anchors(self, ref_key: str) -> int:
        """How many anchors a `$dynamicRef` ($dynamicAnchor) or `$recursiveRef` ($recursiveAnchor)
        may resolve to across the root and the retrieved documents."""
        anchor_key = "$dynamicAnchor" if ref_key == "$dynamicRef" else "$recursiveAnchor"
        return count_key(self.root, anchor_key) + sum(count_key(d, anchor_key) for d in self.retrieved)

    def _register(self, uri: str, schema) -> None:
        self.registry = self.registry.with_resource(uri, DRAFT202012.create_resource(schema))
        self.resolver = self.registry.resolver()

    def lookup(self, uri: str, pointer: str):
        url, frag = urldefrag(uri)
        errors = []
        for candidate in translate_pointer(frag) if frag.startswith("/") else [frag]:
            target = url + ("#" + candidate if candidate else "")
            try:
                return self.resolver.lookup(target).contents
            except Unresolvable as exc:
                errors.append(str(exc))
            except Exception as exc:  # malformed documents from retrieval, bad pointers
                errors.append(f"{type(exc).__name__}: {exc}")
        raise SchemaError(f"unresolvable $ref {uri!r} ({errors[0]}); define the target or fix the reference", pointer)

    def unsupported(self, keyword: str, pointer: str, detail: str) -> None:
        """Raise UnsupportedSchemaError, or under lenient=True warn that the keyword is widened."""
        if not self.mode.lenient:
            raise UnsupportedSchemaError(keyword, pointer, detail)
        if (keyword, pointer) in self.widened:
            return  # one warning per widening, however often the compile meets it
        self.widened.add((keyword, pointer))
        warnings.warn(f"pushmask: widened {keyword!r} at {pointer or '#'}: {detail}", stacklevel=4)

    def value_checks_allowed(self) -> bool:
        """May a keyword the grammar cannot express become a value check in the matcher?  Not
        where the caller needs the grammar itself exact (a negation's positive form)."""
        return self.mode.value_checks

    @contextmanager
    def narrowed(self, **changes: bool):
        """`self.mode` with `changes` (e.g. value_checks=False) for the extent of a with-block."""
        outer = self.mode
        self.mode = replace(outer, **changes)
        try:
            yield
        finally:
            self.mode = outer

    def note_empty(self, pointer: str, why: str) -> None:
        if self.empty_reason is None:
            self.empty_reason = (pointer, why)

    def enum_values(self, term: Term) -> list:
        """The values of a flat term's enum that meet its other keywords.  Every value meets the
        enum itself, so only the rest is checked (jsonschema's enum check scans the whole list per
        value: quadratic in its size)."""
        return self.valid_values(term.as_schema(drop=("enum",)), list(term.enum or ()))

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
            except Exception:  # noqa: BLE001 -- jsonschema's errors on a value are undocumented: leave it out
                pass
        return out

    def validates(self, schema, instance) -> bool:
        """jsonschema's verdict for an instance against a (normalised, 2020-12) subschema."""
        try:
            validator = self.validator_cls(schema, registry=self.registry)
            return validator.is_valid(instance)
        except Exception:  # noqa: BLE001 -- a subschema jsonschema cannot evaluate: be conservative
            return False
