"""MkDocs hook: the API reference reads pushmask's sources statically (griffe), which finds a
package by its folder's name; the repository root is the package but is not named `pushmask`, so
before the build this lays the package out under build/docs-api/ as the wheel does, with links to
the sources (.ci/package_tree.py)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".ci"))

from package_tree import link_package  # noqa: E402


def on_startup(**kwargs) -> None:
    link_package(ROOT / "build" / "docs-api")
