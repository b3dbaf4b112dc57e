"""Run XGrammar 0.2.8's own Python tests against pushmask under the name `xgrammar` (or against
the real XGrammar), one file at a time, and compare the two runs file by file.

    python benchmarks/xgrammar_suite.py run --target xgrammar --xgrammar-path /tmp/xgr --out real.json
    python benchmarks/xgrammar_suite.py run --target pushmask --out pushmask.json [--files test_lark.py]
    python benchmarks/xgrammar_suite.py compare real.json pushmask.json [--reasons]
    python benchmarks/xgrammar_suite.py check [--files ...]   # `make test`'s regression gate

`run` fetches XGrammar's sdist with pip (once, into --cache), unpacks its `tests/python`, and runs
pytest on each file in a subprocess with a per-file timeout.  For `--target pushmask` the import
path starts with a shim package `xgrammar` that *is* `pushmask` (`xgrammar.X` is `pushmask.X`), so
what passes is what a user switching the import would see.  Hugging Face model names are mapped to
the tokenizers in ../shared/tokenizers (MODEL_MAP); a test of another model fails on both sides and
so never counts.  `compare` prints the per-file table (tests passing on XGrammar; of those, how many
test XGrammar's internals, and how many pass on pushmask) and groups the rest by first failure.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

XGRAMMAR_VERSION = "0.2.8"
REPO = Path(__file__).resolve().parent.parent
TOKENIZERS = REPO.parent / "shared" / "tokenizers"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pushmask-xgrammar-suite"

# Model names the tests load -> the local tokenizer directory that stands in for them.  Llama-2's
# SentencePiece byte-fallback vocabulary of 32,000 is stood in for by Mistral's (the same kind and
# size): the few tests checking Llama-2's exact ids then fail on both sides and do not count.
MODEL_MAP = [
    (r"meta-llama/(Meta-)?Llama-3(\.\d)?-\d+B(-Instruct)?$", "llama3"),
    (r"meta-llama/Llama-2-7b(-chat)?-hf$", "mistral"),
    (r"Qwen/Qwen2(\.5)?-[\d.]+B(-Instruct|-Chat)?$", "qwen"),
    (r"mistralai/", "mistral"),
    (r"HuggingFaceTB/SmolLM2", "smollm2"),
]

# A test that names one of these (directly or through a helper of its file) checks XGrammar's
# internals -- its EBNF text, its charset table, its grammar functors -- not the behaviour pushmask
# promises; the issue lets those stay out.
INTERNAL_MARKERS = re.compile(
    r"_json_schema_to_ebnf|_regex_to_ebnf|_ebnf_to_grammar_no_normalization|GrammarFunctor|"
    r"_BYTE_LEVEL_CHARSET|_get_allow_empty_rule_ids|_print_grammar_fsms|_generate_float_regex|"
    r"_generate_range_regex|expected_grammar|"
    r"str\(\w*grammar\w*\)|str\(\s*\w+\.compile_\w+\([^()]*\)\.grammar\s*\)"  # XGrammar's printed EBNF
)

SHIM = '''"""`xgrammar` is `pushmask`: `import xgrammar.X` gives `pushmask.X` (the suite runner's shim)."""
import importlib
import importlib.abc
import importlib.util
import sys

import pushmask


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.startswith("xgrammar."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        target = "pushmask." + spec.name[len("xgrammar."):]
        try:
            return importlib.import_module(target)
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(f"No module named {spec.name!r} ({target} is missing)") from error

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Alias())
sys.modules["xgrammar"] = pushmask
'''

PLUGIN = f'''"""Suite runner plugin: maps the Hugging Face model names XGrammar's tests load to local
tokenizers, and writes each test's outcome as a JSON line as soon as it is known (so a file that
runs past its timeout still reports the tests it finished)."""
import json
import os
import re

MODEL_MAP = {MODEL_MAP!r}
TOKENIZERS = {str(TOKENIZERS)!r}


def _local(name):
    for pattern, folder in MODEL_MAP:
        if re.match(pattern, name):
            return os.path.join(TOKENIZERS, folder)
    return None


def pytest_configure(config):
    import transformers

    original = transformers.AutoTokenizer.from_pretrained.__func__

    def from_pretrained(cls, name, *args, **kwargs):
        if isinstance(name, str) and not os.path.isdir(name):
            local = _local(name)
            if local is None:
                raise OSError(f"not runnable here: no local tokenizer for {{name}}")
            name = local
        return original(cls, name, *args, **kwargs)

    transformers.AutoTokenizer.from_pretrained = classmethod(from_pretrained)


def _message(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message
    return str(report.longrepr or "")


def _write(nodeid, when, outcome, message):
    with open(os.environ["XGR_SUITE_LOG"], "a") as log:
        log.write(json.dumps({{"test": nodeid.split("::", 1)[-1], "when": when, "outcome": outcome,
                              "message": message[:500]}}) + "\\n")


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _write(report.nodeid, report.when, report.outcome, "" if report.passed else _message(report))


def pytest_collectreport(report):
    if report.failed:
        _write(report.nodeid + "::(collection)", "collect", "failed", _message(report))
'''


def fetch_tests(cache: Path) -> Path:
    """XGrammar's `tests/python` from its sdist, downloaded with pip into `cache` once."""
    tests = cache / f"xgrammar-{XGRAMMAR_VERSION}" / "tests" / "python"
    if tests.is_dir():
        return tests
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"xgrammar-{XGRAMMAR_VERSION}.tar.gz"
    if not sdist.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "xgrammar"]
            + [f"xgrammar=={XGRAMMAR_VERSION}", "-d", str(cache)],
            check=True,
        )
    with tarfile.open(sdist) as archive:
        archive.extractall(cache, filter="data")
    return tests


def run_file(test_file: Path, pythonpath: list[str], timeout: float, workdir: Path) -> dict:
    """Run one test file with pytest; {test: [outcome, first failure line]} from the plugin's log
    (outcome "passed", "failed", "error" for a failed setup or teardown, or "skipped")."""
    log = workdir / f"{test_file.stem}.jsonl"
    log.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(pythonpath), XGR_SUITE_LOG=str(log))
    env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_TOKEN="offline"
    )  # HF_TOKEN: only lifts the hf_token_required skips
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    command += ["-p", "_xgr_suite_models", str(test_file)]
    start = time.monotonic()
    status = "ran"
    try:
        subprocess.run(command, cwd=test_file.parent, env=env, timeout=timeout, capture_output=True)
    except subprocess.TimeoutExpired:
        status = "timeout"
    tests: dict[str, list[str]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        entry = json.loads(line)
        outcome = (
            entry["outcome"] if entry["when"] == "call" else ("error" if entry["outcome"] == "failed" else "skipped")
        )
        if tests.get(entry["test"], ["passed"])[0] == "passed":  # the first phase that did not pass decides
            tests[entry["test"]] = [outcome, entry["message"]]
    return {"status": status, "seconds": round(time.monotonic() - start, 1), "tests": tests}


def run(args: argparse.Namespace) -> None:
    tests_dir = fetch_tests(Path(args.cache))
    files = args.files or sorted(p.name for p in tests_dir.glob("test_*.py"))
    results = {"target": args.target, "files": {}}
    if Path(args.out).exists() and args.files:  # refresh some files of an earlier run
        results = json.loads(Path(args.out).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        shim = Path(tmp)
        (shim / "_xgr_suite_models.py").write_text(PLUGIN)
        if args.target == "pushmask":
            (shim / "xgrammar").mkdir()
            (shim / "xgrammar" / "__init__.py").write_text(SHIM)
            pythonpath = [str(shim), str(REPO)]
        else:
            pythonpath = [str(shim), args.xgrammar_path]
        for name in files:
            result = run_file(tests_dir / name, pythonpath, args.timeout, shim)
            results["files"][name] = result
            counts = Counter(outcome for outcome, _ in result["tests"].values())
            print(f"{name}: {result['status']} {result['seconds']} s {dict(counts)}", flush=True)
            Path(args.out).write_text(json.dumps(results, indent=1))


def internal_tests(test_file: Path) -> set[str]:
    """Names of the file's test functions that reach XGrammar internals (INTERNAL_MARKERS), directly
    or through the file's own helper functions."""
    tree = ast.parse(test_file.read_text())
    source = test_file.read_text()
    functions = {
        node.name: ast.get_source_segment(source, node) or ""
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    internal = {name for name, text in functions.items() if INTERNAL_MARKERS.search(text)}
    changed = True
    while changed:  # a function calling an internal helper is internal too
        changed = False
        for name, text in functions.items():
            if name not in internal and any(re.search(rf"\b{helper}\(", text) for helper in internal):
                internal.add(name)
                changed = True
    return {name for name in internal if name.startswith("test")}


def test_function(test_id: str) -> str:
    """The test function's name in a test id: the parameters (`[...]`, which may hold `::`, as
    IPv6 addresses do) cut off first, then any class prefix."""
    return test_id.split("[", 1)[0].split("::")[-1]


def reason(message: str) -> str:
    """A failure message cut to its kind: the first line, numbers and quoted values blanked."""
    line = message.strip().splitlines()[0] if message.strip() else "(no message)"
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", line)
    return re.sub(r"\d+", "N", line)[:160]


def compare(args: argparse.Namespace) -> None:
    real = json.loads(Path(args.real).read_text())["files"]
    ours = json.loads(Path(args.pushmask).read_text())["files"]
    tests_dir = fetch_tests(Path(args.cache))
    print("| file | pass on XGrammar | internals | non-internal | pass on pushmask |")
    print("|---|---:|---:|---:|---:|")
    totals = Counter()
    reasons: dict[str, list[str]] = defaultdict(list)
    for name in sorted(real):
        passing = [t for t, (outcome, _) in real[name]["tests"].items() if outcome == "passed"]
        internal_names = internal_tests(tests_dir / name)
        internal = [t for t in passing if test_function(t) in internal_names]
        external = [t for t in passing if t not in internal]
        our_tests = ours.get(name, {"tests": {}, "status": "not run"})
        ok = [t for t in external if our_tests["tests"].get(t, ["missing"])[0] == "passed"]
        for test in external:
            if test in ok:
                continue
            outcome, message = our_tests["tests"].get(test, ["missing", f"not reported ({our_tests['status']})"])
            if outcome == "missing" and "(collection)" in our_tests["tests"]:
                message = "file does not import: " + our_tests["tests"]["(collection)"][1]
            reasons[reason(message)].append(f"{name}::{test}")
        totals.update(xgr=len(passing), internal=len(internal), external=len(external), ours=len(ok))
        print(f"| {name} | {len(passing)} | {len(internal)} | {len(external)} | {len(ok)} |")
    print(f"| **total** | {totals['xgr']} | {totals['internal']} | {totals['external']} | {totals['ours']} |")
    if args.reasons:
        print("\nStill failing (non-internal), by first failure:")
        for text, tests in sorted(reasons.items(), key=lambda item: -len(item[1])):
            files = Counter(t.split("::")[0] for t in tests)
            print(f"{len(tests):5d}  {text}  [{', '.join(f'{f} {n}' for f, n in files.most_common(4))}]")


RESULTS = REPO / "benchmarks" / "results" / "xgrammar_suite"
CHECK_FILES = [
    "test_recursion_depth.py",
    "test_tokenizer_utils.py",
    "test_grammar_union_concat.py",
    "test_grammar_matcher_macro.py",
    "test_grammar_substring_macro.py",
]
"""The fast files `check` runs by default (about a minute together)."""


def check(args: argparse.Namespace) -> None:
    """Run `args.files` on pushmask; exit 1 if a test the recorded pushmask run passed fails now."""
    recorded = json.loads((RESULTS / "pushmask.json").read_text())["files"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "now.json"
        run(
            argparse.Namespace(
                cache=args.cache, target="pushmask", files=args.files, timeout=args.timeout, out=str(out)
            )
        )
        now = json.loads(out.read_text())["files"]
    regressions = [
        f"{name}::{test}: {now[name]['tests'].get(test, ['missing', now[name]['status']])}"
        for name in args.files
        for test, (outcome, _) in recorded[name]["tests"].items()
        if outcome == "passed" and now[name]["tests"].get(test, ["missing"])[0] != "passed"
    ]
    print("\n".join(regressions) or f"no regressions in {len(args.files)} files")
    sys.exit(1 if regressions else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="where the sdist is kept")
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run the suite file by file")
    run_parser.add_argument("--target", choices=["pushmask", "xgrammar"], default="pushmask")
    run_parser.add_argument("--xgrammar-path", default="/tmp/xgr", help="where the real xgrammar is installed")
    run_parser.add_argument("--files", nargs="*", help="test file names (default: all)")
    run_parser.add_argument("--timeout", type=float, default=900, help="seconds per file")
    run_parser.add_argument("--out", required=True, help="the results file (JSON)")
    compare_parser = sub.add_parser("compare", help="the per-file table of two runs")
    compare_parser.add_argument("real")
    compare_parser.add_argument("pushmask")
    compare_parser.add_argument("--reasons", action="store_true", help="group what still fails")
    check_parser = sub.add_parser("check", help="rerun some files; fail on a test that passed in the recorded run")
    check_parser.add_argument("--files", nargs="*", default=CHECK_FILES)
    check_parser.add_argument("--timeout", type=float, default=600, help="seconds per file")
    args = parser.parse_args()
    {"run": run, "compare": compare, "check": check}[args.command](args)


if __name__ == "__main__":
    main()
