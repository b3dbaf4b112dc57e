"""Type-check pushmask with mypy (settings from pyproject.toml's [tool.mypy]; extra arguments go to
mypy): `mypy -p pushmask` over the package as the wheel lays it out (.ci/package_tree.py), since
the repository root, which is the package, is not a folder named `pushmask`.
"""

from __future__ import annotations

import os
import subprocess
import sys

from package_tree import REPO, link_package

TREE = REPO / "build" / "typecheck"


def main() -> int:
    tree = link_package(TREE)
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
