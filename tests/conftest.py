"""Session fixtures over the shared tokenizers (helpers live in support.py)."""

from __future__ import annotations

import os

import pytest

from support import grammar_compiler, hf_tokenizer

try:
    from hypothesis import settings
except ImportError:  # the vLLM environment (make test-vllm) has no hypothesis
    settings = None

# CI runs the same examples every time (a failure found by chance locally gets a regression test).
if settings is not None:
    settings.register_profile("ci", derandomize=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")


@pytest.fixture(scope="session")
def smollm2_compiler():
    return grammar_compiler("smollm2")


@pytest.fixture(scope="session")
def llama3_compiler():
    return grammar_compiler("llama3")


@pytest.fixture(scope="session")
def llama3_tokenizer():
    return hf_tokenizer("llama3")
