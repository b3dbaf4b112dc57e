"""Session fixtures over the shared tokenizers (helpers live in support.py), and the session-level
check that the shared data is there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import (
    UNDER_CI,
    Oracle,
    binary_problem,
    grammar_compiler,
    hf_tokenizer,
    missing_shared_message,
    missing_shared_parts,
    paren_problem,
)

# The repository root is the package `pushmask`; on sys.path (`python -m pytest` from the root puts
# it there) its folders would shadow top-level packages: kernels/ hides Hugging Face's `kernels`.
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != _ROOT]

try:
    from hypothesis import settings
except ImportError:  # the vLLM environment (make test-vllm) has no hypothesis
    settings = None

# CI runs the same examples every time (a failure found by chance locally gets a regression test).
if settings is not None:
    settings.register_profile("ci", derandomize=True)
    if UNDER_CI:
        settings.load_profile("ci")


def pytest_sessionstart(session):
    """Under CI missing shared data fails the run before any test starts (elsewhere the tests that
    need it skip, each saying what is missing)."""
    missing = missing_shared_parts()
    if missing and UNDER_CI:
        pytest.exit(f"CI is set and {missing_shared_message(missing)}", returncode=pytest.ExitCode.TESTS_FAILED)


def pytest_terminal_summary(terminalreporter):
    """Say once, even under -q, why tests skipped for want of the shared data."""
    missing = missing_shared_parts()
    if missing:
        terminalreporter.write_line(f"tests that need it skipped: {missing_shared_message(missing)}")


@pytest.fixture(scope="session")
def smollm2_compiler():
    return grammar_compiler("smollm2")


@pytest.fixture(scope="session")
def llama3_compiler():
    return grammar_compiler("llama3")


@pytest.fixture(scope="session")
def llama3_tokenizer():
    return hf_tokenizer("llama3")


@pytest.fixture(scope="module")
def binary(smollm2_compiler):
    """The binary toy problem of support: (toy LM, compiled grammar, exact oracle)."""
    lm, compiled = binary_problem(smollm2_compiler)
    return lm, compiled, Oracle(lm, compiled)


@pytest.fixture(scope="module")
def parens(smollm2_compiler):
    """The balanced-parentheses toy problem of support: (toy LM, compiled grammar, exact oracle)."""
    lm, compiled = paren_problem(smollm2_compiler)
    return lm, compiled, Oracle(lm, compiled)
