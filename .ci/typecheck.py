"""Type-check the installed layout of pushmask with mypy.

The package maps folders of the repository onto subpackages (pyproject.toml,
[tool.setuptools.package-dir]: `pushmask.grammar` is `grammar/`), which mypy cannot follow
through the editable install's import hook.  This builds that layout as a tree of symbolic links
under build/typecheck/ and runs `mypy -p pushmask` on it (settings from [tool.mypy]); extra
arguments go to mypy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / "build" / "typecheck"


def link_tree() -> Path:
    """build/typecheck/pushmask/... with every package of package-dir linked where it installs."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = config.get("package-dir", {})
    shutil.rmtree(TREE, ignore_errors=True)
    for package in sorted(config["packages"]):
        source = REPO / package_dir.get(package, package.replace(".", "/"))
        parent = package.rpartition(".")[0]
        if parent and package not in package_dir:
            continue  # inside its parent's folder, which is linked whole
        target = TREE / package.replace(".", "/")
        if package == "pushmask":  # the root: its files, beside the linked subpackages
            target.mkdir(parents=True)
            for path in source.glob("*.py"):
                (target / path.name).symlink_to(path)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source, target_is_directory=True)
    return TREE


def main() -> int:
    tree = link_tree()
    env = {**os.environ, "MYPYPATH": str(tree)}
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(REPO / "pyproject.toml"),
        "-p",
        "pushmask",
        *sys.argv[1:],
    ]
    return subprocess.call(command, cwd=REPO, env=env)


if __name__ == "__main__":
    sys.exit(main())
