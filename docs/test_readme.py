"""The README's code runs as written: its python blocks in order in one namespace, as
conftest.py runs each page of docs/ (the README sits above docs/, out of that conftest's reach)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("sybil", reason="the README's examples run under Sybil (the dev extra)")

from conftest import _setup, pages  # noqa: E402

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_examples_run(_gguf_tokenizers_read_once):
    document = pages(["README.md"], path=str(README.parent)).parse(README)
    _setup(document.namespace)
    examples = list(document)
    assert examples, "README.md has no python block to run"
    for example in examples:
        example.evaluate()
