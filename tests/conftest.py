"""Session fixtures over the shared tokenizers (helpers live in support.py)."""

from __future__ import annotations

import pytest

from support import grammar_compiler


@pytest.fixture(scope="session")
def smollm2_compiler():
    return grammar_compiler("smollm2")


@pytest.fixture(scope="session")
def llama3_compiler():
    return grammar_compiler("llama3")
