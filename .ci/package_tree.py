"""The package `pushmask` laid out as the wheel has it, as symbolic links under a folder, for tools
that find a package by its folder's name (mypy's `-p`, griffe for the docs' API reference).

The repository root is the package (pyproject.toml's package-dir: `"pushmask" = "."`), so relative
imports follow in the checkout; but the root's folder is named after the checkout, not `pushmask`,
and it also holds what is not the package (tests/, docs/, build/, setup.py, the vLLM plugin
module). The tree links the package's own modules and subpackages only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent


def link_package(parent: Path) -> Path:
    """parent/pushmask/: links to the root's modules and to each top-level subpackage's folder."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    not_package = {"setup.py", *(f"{name}.py" for name in config.get("py-modules", []))}
    shutil.rmtree(parent, ignore_errors=True)
    package = parent / "pushmask"
    package.mkdir(parents=True)
    for path in REPO.glob("*.py"):
        if path.name not in not_package:
            (package / path.name).symlink_to(path)
    for name in config["packages"]:
        if name.count(".") == 1:
            folder = name.split(".")[1]
            (package / folder).symlink_to(REPO / folder, target_is_directory=True)
    return parent
