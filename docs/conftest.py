"""The code examples of docs/*.md run as tests (Sybil; the README's: test_readme.py): every
```python block of a page runs in order in one namespace, so a page's examples can build on each
other (under pytest-xdist, run them with `--dist loadfile`), and docs that drift from the code fail
`make test`. A block that needs what an environment may lack is marked
`<!-- skip: next if(missing("module"), reason="...") -->` in the page."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest

# The repository root is the package `pushmask`; on sys.path (`python -m pytest` from the root puts
# it there) its folders would shadow top-level packages: kernels/ hides Hugging Face's `kernels`.
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _ROOT]

try:
    from sybil import Sybil
    from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser
except ImportError:  # the vLLM / SGLang environments run tests/ only and have no Sybil
    Sybil = None


def _missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


@pytest.fixture(scope="session")
def _gguf_tokenizers_read_once():
    """Pages load the default model's tokenizer from its GGUF file, which transformers converts
    anew on every call (about 6 s); one conversion serves every page of the session."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        yield
        return
    original = AutoTokenizer.from_pretrained
    descriptor = AutoTokenizer.__dict__["from_pretrained"]

    @functools.cache
    def read(path, gguf_file):
        return original(path, gguf_file=gguf_file)

    def from_pretrained(path, *args, gguf_file=None, **kwargs):
        if gguf_file is None or args or kwargs:
            return original(path, *args, gguf_file=gguf_file, **kwargs)
        return read(str(path), gguf_file)

    AutoTokenizer.from_pretrained = staticmethod(from_pretrained)
    yield
    AutoTokenizer.from_pretrained = descriptor


def _setup(namespace: dict) -> None:
    namespace["missing"] = _missing


def pages(patterns: list[str], path: str = ".") -> Sybil:
    """The Sybil that runs the python blocks of the pages matching `patterns` under `path`."""
    return Sybil(
        parsers=[PythonCodeBlockParser(), SkipParser()],
        patterns=patterns,
        path=path,
        setup=_setup,
        fixtures=["_gguf_tokenizers_read_once"],
    )


if Sybil is not None:
    pytest_collect_file = pages(["*.md"]).pytest()
