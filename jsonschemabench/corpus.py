"""Reading schema corpora: MaskBench files, plain schema files and the JSON Schema Test Suite.

Every input becomes a list of `CorpusItem`s (an id, a schema and its tests). Ids are stable
(relative file paths, plus `#group` for suite files) because `--resume` matches on them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class CorpusError(ValueError):
    """An input path or file that cannot be read as a schema corpus."""


@dataclass
class CorpusItem:
    """One schema to compile plus its instances; `tests` is a list of {"data", "valid"} dicts."""

    id: str
    schema: Any
    tests: list[dict] = field(default_factory=list)
    source: str = ""

    def to_task(self) -> dict:
        return {"id": self.id, "schema": self.schema, "tests": self.tests, "source": self.source}


def _json_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*.json") if p.is_file())
    if path.is_file():
        return [path]
    raise CorpusError(f"no such file or folder: {path}")


def _relative_id(file: Path, root: Path) -> str:
    if root.is_dir():
        return file.relative_to(root).as_posix()
    return file.name


def _check_tests(tests: Any, where: str) -> list[dict]:
    if not isinstance(tests, list) or not all(
        isinstance(t, dict) and "data" in t and isinstance(t.get("valid"), bool) for t in tests
    ):
        raise CorpusError(f'{where}: \'tests\' must be a list of {{"data": ..., "valid": true|false}}')
    return [{"data": t["data"], "valid": t["valid"]} for t in tests]


def _suite_items(doc: list, item_id: str, source: str) -> list[CorpusItem]:
    items = []
    for index, group in enumerate(doc):
        if not isinstance(group, dict) or "schema" not in group:
            raise CorpusError(f'{source}: group {index} is not a {{"schema", "tests"}} object')
        tests = _check_tests(group.get("tests", []), f"{source} group {index}")
        description = str(group.get("description", "")).strip()
        items.append(CorpusItem(f"{item_id}#{index}", group["schema"], tests, description))
    return items


def items_from_file(file: Path, item_id: str, suite: bool = False) -> list[CorpusItem]:
    """Items of one file: a MaskBench record, a suite group list, or a plain schema (no tests)."""
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorpusError(f"{file}: not a JSON file ({exc})") from exc
    if suite or isinstance(doc, list):
        if not isinstance(doc, list):
            raise CorpusError(f"{file}: a JSON Schema Test Suite file must hold a list of groups")
        return _suite_items(doc, item_id, str(file))
    if isinstance(doc, dict) and "schema" in doc and ("tests" in doc or "meta" in doc):
        return [CorpusItem(item_id, doc["schema"], _check_tests(doc.get("tests", []), str(file)), str(file))]
    if isinstance(doc, (dict, bool)):
        return [CorpusItem(item_id, doc, [], str(file))]
    raise CorpusError(f"{file}: expected a schema object, a MaskBench record or a list of suite groups")


def load_corpus(paths: Iterable[str | Path], suite: bool = False) -> list[CorpusItem]:
    """All items under `paths` (files, or folders searched recursively for *.json), in a stable order.

    With `suite=True` every file is read in the JSON Schema Test Suite layout."""
    items: list[CorpusItem] = []
    seen: set[str] = set()
    for raw in paths:
        root = Path(raw)
        for file in _json_files(root):
            base_id = _relative_id(file, root)
            for item in items_from_file(file, base_id, suite=suite):
                if item.id in seen:  # the same name under two roots: keep both, distinguishable
                    item.id = f"{file.as_posix()}{item.id[len(base_id) :]}"
                seen.add(item.id)
                items.append(item)
    return items


def sample_items(items: list[CorpusItem], n: int | None, seed: int = 0) -> list[CorpusItem]:
    """A reproducible random subset of `n` items (all of them when n is None or too large)."""
    if n is None or n >= len(items):
        return list(items)
    if n < 0:
        raise CorpusError("--sample must be positive")
    return random.Random(seed).sample(items, n)


def small_schemas_spread(folder: str | Path, count: int, max_chars: int) -> list[tuple[str, Any]]:
    """(file stem, schema) of the schemas in `folder` whose JSON has at most max_chars characters:
    every k-th by file name (so sources mix) to make `count`, then the rest as fallbacks for
    schemas a caller skips.  Deterministic; empty when the folder is missing."""
    folder = Path(folder)
    small = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        doc = json.loads(path.read_text(encoding="utf-8"))
        schema = doc.get("schema", doc) if isinstance(doc, dict) else doc
        if isinstance(schema, dict) and len(json.dumps(schema)) <= max_chars:
            small.append((path.stem, schema))
    step = max(1, len(small) // max(count, 1))
    spread = small[::step]
    return spread + [item for item in small if item not in spread]


@dataclass
class GenerationTask:
    """One schema to generate against: its chat messages (the schema shown in the system prompt)
    and a jsonschema validator with format checks for the outputs."""

    name: str
    schema: Any
    messages: list[dict]
    validator: Any


def generation_tasks(tokenizer, folder: str | Path, count: int, max_chars: int) -> list[GenerationTask]:
    """Up to `count` small schemas spread over `folder` (see small_schemas_spread) that pushmask
    compiles for `tokenizer` (unsupported ones are skipped), ready for generation runs."""
    import jsonschema

    from ..core.errors import UnsupportedSchemaError
    from ..integrations.generate import compile_constraint

    tasks: list[GenerationTask] = []
    for name, schema in small_schemas_spread(folder, count, max_chars):
        if len(tasks) == count:
            break
        try:
            compile_constraint(tokenizer, schema=schema)
        except UnsupportedSchemaError:
            continue  # outside what a grammar can express; the compiler says so
        messages = [
            {
                "role": "system",
                "content": "Answer with one JSON value following this JSON Schema:\n" + json.dumps(schema),
            },
            {"role": "user", "content": "Give an example."},
        ]
        validator_cls = jsonschema.validators.validator_for(schema)
        tasks.append(
            GenerationTask(name, schema, messages, validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER))
        )
    return tasks
