"""The wheel for the Python that builds it, with that Python's prepared kernels.

Prepared kernels (`core/kernel-cache/`, written by `pushmask warmup`, one set per Python) are
x86-64 machine code that loads only under the CPython, numba and llvmlite that built it. Where
this Python's set is prepared, the wheel ships that set alone, is tagged for this CPython and
platform (`cp312-cp312-linux_x86_64`, not `py3-none-any`) and pins numba and llvmlite to the
versions in the set's manifest (`prepared-pyXY.json`). Without a set (the sdist never carries one)
the wheel is pure Python and its kernels compile on first use. The rest is in pyproject.toml.
"""

import json
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

KERNEL_CACHE = Path(__file__).parent / "core" / "kernel-cache"
TAG = "py%d%d%s" % (sys.version_info[0], sys.version_info[1], getattr(sys, "abiflags", ""))
DEPENDENCIES = ["numpy>=1.24", "numba>=0.59", "lark>=1.1", "interegular>=0.3", "jsonschema>=4.18", "regex>=2022.1"]

# An sdist is built from the same tree, but carries no kernels (MANIFEST.in): no pins either.
prepared = (
    "sdist" not in sys.argv
    and any(KERNEL_CACHE.glob(f"*.{TAG}.nbi"))
    and (KERNEL_CACHE / f"prepared-{TAG}.json").is_file()
)
if prepared:
    manifest = json.loads((KERNEL_CACHE / f"prepared-{TAG}.json").read_text())
    pins = {"numba": f"numba=={manifest['numba']}", "llvmlite": f"llvmlite=={manifest['llvmlite']}"}
    DEPENDENCIES = [pins.get(spec.split(">")[0], spec) for spec in DEPENDENCIES] + [pins["llvmlite"]]


class KernelDistribution(Distribution):
    """A distribution with prepared kernels is platform-specific, as one with C extensions is:
    bdist_wheel then tags it with this interpreter's ABI and platform."""

    def has_ext_modules(self):
        return prepared


class BuildPy(build_py):
    """The repository root is the package `pushmask` (pyproject.toml, package-dir): its files that
    are not the package's (this one, the top-level modules of py-modules) stay out of it."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        if package != "pushmask":
            return modules
        not_package = {"setup", *(self.distribution.py_modules or [])}
        return [entry for entry in modules if entry[1] not in not_package]


KERNELS = [f"kernel-cache/*.{TAG}.nbi", f"kernel-cache/*.{TAG}.*.nbc", f"kernel-cache/prepared-{TAG}.json"]

# The repository root is the package `pushmask`, so in an editable install this file is also the
# module `pushmask.setup`: importing it (a walk over the package's modules) must not run a build.
# Builds run it as a script (setuptools' build backend execs it as __main__).
if __name__ == "__main__":
    setup(
        distclass=KernelDistribution,
        cmdclass={"build_py": BuildPy},
        install_requires=DEPENDENCIES,
        package_data={
            "pushmask.core": KERNELS if prepared else [],
            # `pushmask generate --schema examples/person.json ...` (its --help) works from a wheel too.
            "pushmask.examples": ["*.json", "*.ebnf", "*.lark"],
        },
    )
