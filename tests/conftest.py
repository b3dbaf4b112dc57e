"""Session fixtures over the shared tokenizers (helpers live in support.py)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from support import grammar_compiler

# CI runs the same examples every time (a failure found by chance locally gets a regression test).
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def smollm2_compiler():
    return grammar_compiler("smollm2")


@pytest.fixture(scope="session")
def llama3_compiler():
    return grammar_compiler("llama3")
