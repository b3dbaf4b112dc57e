"""`$dynamicRef` / `$recursiveRef` with several dynamic anchors, resolved statically per scope.

A dynamic reference's target depends on the *dynamic scope*: the schema resources evaluation went
through on its way (each `$ref` / `$dynamicRef` followed pushes the resource it left).  Along one
path from the root that scope is known when the schema is compiled, so `specialise` rewrites the
(normalised) document: every reference becomes a `$ref` to a copy of its target specialised for
the scope at that point, and dynamic references point at the anchor the scope selects.  Copies
are memoised per (target, scope summary), so recursion through the same scope reuses one copy;
a reference site reached through different scopes gets one copy per scope.

The rules are those of `referencing` (what `jsonschema` runs), which implement the spec:
- `$dynamicRef` to `url#name`, where the resource at url has `$dynamicAnchor: name`: the
  outermost resource in scope with that dynamic anchor, else url's own (otherwise a `$ref`).
- `$recursiveRef` (2019-09) to `#`: when the current resource's root has `$recursiveAnchor:
  true`, the outermost resource of the innermost unbroken run of such resources in scope.
- Following a reference pushes the current resource onto the scope (unless it is the target's
  own and the scope is not empty); entering a subschema with its own `$id` changes the current
  resource without a push.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urldefrag

from ...core.errors import LimitExceededError
from ...core.limits import DEFAULT_LIMITS
from .documents import LIST_KEYS, MAP_KEYS, SCHEMA_KEYS, VALUE_KEYS

PREFIX = "urn:pushmask:dynamic-scope:"
_IDENTIFIERS = ("$id", "$anchor", "$dynamicAnchor", "$recursiveAnchor")


@dataclass(frozen=True)
class _Scope:
    """What resolution needs to know of a dynamic scope: per dynamic anchor name its outermost
    resource, and the outermost resource of the innermost run of $recursiveAnchor resources."""

    dynamic: tuple[tuple[str, str], ...] = ()
    recursive: str | None = None
    entered: bool = False  # some resource was pushed (the first reference pushes even its own)


@dataclass
class _Anchors:
    dynamic: frozenset[str]
    recursive: bool


class DynamicScopes:
    """Rewrites a normalised document's references into scope-specialised `$ref`s.

    lookup(uri) returns the (normalised) subschema at an absolute URI; `register(uri, schema)`
    makes a specialised copy resolvable under its new URI.
    """

    def __init__(
        self,
        lookup: Callable[[str], object],
        register: Callable[[str, object], None],
        max_copies: int = DEFAULT_LIMITS.max_dynamic_copies,
    ):
        self.max_copies = max_copies
        self.lookup = lookup
        self.register = register
        self.copies: dict[tuple[str, _Scope], str] = {}
        self.anchor_cache: dict[str, _Anchors] = {}

    def specialise_root(self, root, base: str):
        return self.copy(root, base, _Scope())

    # -- scopes ----------------------------------------------------------------------------------

    def anchors(self, url: str) -> _Anchors:
        """The dynamic anchor names of the resource at `url` (not of resources nested in it)."""
        if url not in self.anchor_cache:
            names: set[str] = set()
            contents = self.lookup(url)

            def walk(node, top: bool) -> None:
                if isinstance(node, list):
                    for item in node:
                        walk(item, False)
                    return
                if not isinstance(node, dict) or (not top and isinstance(node.get("$id"), str)):
                    return
                if isinstance(node.get("$dynamicAnchor"), str):
                    names.add(node["$dynamicAnchor"])
                for key, value in node.items():
                    if key in MAP_KEYS and isinstance(value, dict):  # names -> schemas ("default" too)
                        walk(list(value.values()), False)
                    elif key not in VALUE_KEYS:
                        walk(value, False)

            walk(contents, True)
            recursive = isinstance(contents, dict) and contents.get("$recursiveAnchor") is True
            self.anchor_cache[url] = _Anchors(frozenset(names), recursive)
        return self.anchor_cache[url]

    def push(self, scope: _Scope, url: str) -> _Scope:
        """The scope once `url` (the resource a reference leaves) has joined it."""
        found = self.anchors(url)
        known = {name for name, _ in scope.dynamic}
        dynamic = scope.dynamic + tuple((name, url) for name in sorted(found.dynamic - known))
        recursive = (scope.recursive or url) if found.recursive else None
        return _Scope(dynamic, recursive, True)

    # -- rewriting -------------------------------------------------------------------------------

    def copy(self, node, base: str, scope: _Scope):
        """`node` with every reference specialised for `scope`; `base` is its resource."""
        if not isinstance(node, dict):
            return node
        if isinstance(node.get("$id"), str):
            base = urldefrag(node["$id"])[0]
        out: dict = {}
        refs: list[str] = []
        for key, value in node.items():
            if key in _IDENTIFIERS or key in ("$defs", "definitions"):
                continue  # resolution happens here; definitions are reached through references
            if key == "$ref" and isinstance(value, str):
                refs.append(self.reference(value, base, scope, dynamic=False))
            elif key == "$dynamicRef" and isinstance(value, str):
                refs.append(self.reference(value, base, scope, dynamic=True))
            elif key == "$recursiveRef" and isinstance(value, str):
                refs.append(self.recursive_reference(base, scope))
            elif key in SCHEMA_KEYS:
                out[key] = self.copy(value, base, scope)
            elif key in LIST_KEYS and isinstance(value, list):
                out[key] = [self.copy(sub, base, scope) for sub in value]
            elif key in MAP_KEYS and isinstance(value, dict):
                out[key] = {name: self.copy(sub, base, scope) for name, sub in value.items()}
            else:
                out[key] = value
        if refs:
            out["$ref"] = refs[0]
            if len(refs) > 1:
                out["allOf"] = [*out.get("allOf", []), *({"$ref": r} for r in refs[1:])]
        return out

    def reference(self, uri: str, base: str, scope: _Scope, dynamic: bool) -> str:
        url, fragment = urldefrag(uri)
        if base != url or not scope.entered:
            scope = self.push(scope, base)
        target, target_base = uri, self.pointer_base(url, fragment) if fragment.startswith("/") else url
        if dynamic and fragment and not fragment.startswith("/") and fragment in self.anchors(url).dynamic:
            outer = next((res for name, res in scope.dynamic if name == fragment), None)
            if outer is not None:
                target, target_base = f"{outer}#{fragment}", outer
        return self.specialised(target, target_base, scope)

    def pointer_base(self, url: str, pointer: str) -> str:
        """The resource a JSON pointer into `url` ends in (the last `$id` on its way)."""
        node, base = self.lookup(url), url
        for part in pointer.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                break
            if isinstance(node, dict) and isinstance(node.get("$id"), str):
                base = urldefrag(node["$id"])[0]
        return base

    def recursive_reference(self, base: str, scope: _Scope) -> str:
        target = scope.recursive if self.anchors(base).recursive and scope.recursive is not None else base
        if target != base or not scope.entered:
            scope = self.push(scope, base)
        return self.specialised(target, target, scope)

    def specialised(self, target: str, target_base: str, scope: _Scope) -> str:
        """The URI of `target`'s copy for `scope` (made on first use)."""
        key = (target, scope)
        if key not in self.copies:
            if len(self.copies) >= self.max_copies:
                raise LimitExceededError(
                    f"$dynamicRef/$recursiveRef resolution needs more than {self.max_copies} "
                    "scope-specialised copies of their targets (Limits.max_dynamic_copies); "
                    "simplify the references or raise the limit"
                )
            uri = self.copies[key] = f"{PREFIX}{len(self.copies)}"
            self.register(uri, self.copy(self.lookup(target), target_base, scope))
        return self.copies[key]
