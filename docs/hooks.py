"""MkDocs hook: the API reference reads pushmask's sources statically (griffe), which expects a
package's subpackages inside its folder. pushmask maps them from top-level folders
(pyproject.toml's [tool.setuptools.package-dir]), so before the build this lays the package out
under build/docs-api/ as the wheel does, with links to the sources."""

from __future__ import annotations

import shutil
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "build" / "docs-api"


def on_startup(**kwargs) -> None:
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(TARGET, ignore_errors=True)
    # Parents first, so each subpackage's link lands inside its parent's folder.
    for package, folder in sorted(package_dirs.items(), key=lambda item: item[0].count(".")):
        link = TARGET.joinpath(*package.split("."))
        source = (ROOT / folder).resolve()
        if package.count(".") == 0:
            link.mkdir(parents=True)
            for entry in source.iterdir():
                link.joinpath(entry.name).symlink_to(entry)
        else:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(source, target_is_directory=True)
