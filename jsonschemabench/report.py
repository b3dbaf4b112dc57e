"""Summaries of result files: status counts, mask-time and compile-time percentiles, plots.

Several result files (one per engine) are shown side by side, one column each.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .protocol import STATUSES

PERCENTILES = (50, 75, 90, 99, 99.9)

STATUS_LABELS = {
    "pass": "passing",
    "compile_error": "compile error",
    "validation_error": "validation error (valid rejected)",
    "invalidation_error": "invalidation error (invalid accepted)",
    "engine_error": "engine error",
    "timeout": "timeout",
    "crash": "crash",
    "oom": "memory limit",
}


@dataclass
class RunSummary:
    """Everything the report needs from one result file."""

    label: str
    records: list[dict]
    statuses: Counter = field(default_factory=Counter)
    mask_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    compile_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ttfm_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    peak_rss_mb: float = 0.0
    cache_bytes: int = 0

    @classmethod
    def from_records(cls, label: str, records: list[dict]) -> RunSummary:
        summary = cls(label, records)
        summary.statuses = Counter(r.get("status", "crash") for r in records)
        summary.mask_us = np.array([t for r in records for t in r.get("mask_us") or []], dtype=np.float64)
        summary.compile_us = np.array([r["compile_us"] for r in records if r.get("compile_us") is not None])
        summary.ttfm_us = np.array([r["ttfm_us"] for r in records if r.get("ttfm_us") is not None])
        summary.peak_rss_mb = max((r.get("peak_rss_mb") or 0 for r in records), default=0)
        summary.cache_bytes = max((r.get("cache_bytes") or 0 for r in records), default=0)
        return summary

    @property
    def num_tests(self) -> int:
        return sum(r.get("num_tests", 0) for r in self.records)

    @property
    def tests_failed(self) -> int:
        return sum(len(r.get("failures") or []) for r in self.records)


def read_records(path: str | Path) -> list[dict]:
    """Records of a JSONL result file; torn or blank lines (an interrupted run) are skipped."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "id" in record:
                records.append(record)
    return records


def load_summaries(paths: list[str | Path]) -> list[RunSummary]:
    """One summary per file, labelled by engine (plus the file name when engines repeat)."""
    loaded = [(Path(p), read_records(p)) for p in paths]
    engines = [(records[0].get("engine") if records else None) or path.stem for path, records in loaded]
    repeated = {name for name in engines if engines.count(name) > 1}
    summaries = []
    for (path, records), engine in zip(loaded, engines):
        label = f"{engine} ({path.name})" if engine in repeated else engine
        summaries.append(RunSummary.from_records(label, records))
    return summaries


def percentile_row(values: np.ndarray) -> list[str]:
    """p50 .. p99.9, max and mean of `values` (microseconds), formatted; dashes when empty."""
    if values.size == 0:
        return ["-"] * (len(PERCENTILES) + 2)
    cells = [_fmt_us(float(np.percentile(values, p))) for p in PERCENTILES]
    cells.append(_fmt_us(float(values.max())))
    cells.append(_fmt_us(float(values.mean())))
    return cells


def _fmt_us(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f} s"
    if value >= 1e3:
        return f"{value / 1e3:.2f} ms"
    return f"{value:.1f} µs"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_report(summaries: list[RunSummary]) -> str:
    """The Markdown report: counts per status, then timing percentiles, one column per run."""
    labels = [s.label for s in summaries]
    parts = ["# Corpus validation report", ""]
    ids = [set(r["id"] for r in s.records) for s in summaries]
    if len(summaries) > 1:
        common = set.intersection(*ids) if ids else set()
        parts += [f"Schemas in every file: {len(common)}.", ""]

    rows = [["schemas"] + [str(len(s.records)) for s in summaries]]
    for status in STATUSES:
        if status in ("engine_error", "oom") and not any(s.statuses[status] for s in summaries):
            continue
        rows.append([STATUS_LABELS[status]] + [_count_pct(s.statuses[status], len(s.records)) for s in summaries])
    rows.append(["tests (instances)"] + [str(s.num_tests) for s in summaries])
    rows.append(["tests failed"] + [str(s.tests_failed) for s in summaries])
    rows.append(["tokens"] + [str(s.mask_us.size) for s in summaries])
    if any(s.peak_rss_mb for s in summaries):
        rows.append(["peak RSS of a worker"] + [f"{s.peak_rss_mb:.0f} MB" if s.peak_rss_mb else "-" for s in summaries])
    if any(s.cache_bytes for s in summaries):
        rows.append(
            ["largest cross-schema cache"]
            + [f"{s.cache_bytes / 2**20:.1f} MB" if s.cache_bytes else "-" for s in summaries]
        )
    parts += ["## Results", "", _table(["", *labels], rows), ""]

    stat_names = [f"p{p:g}" for p in PERCENTILES] + ["max", "mean"]
    for title, attribute, note in (
        ("Mask time per token", "mask_us", "fill the full mask and commit the token"),
        ("Compile time", "compile_us", "schemas that compiled"),
        ("Time to first mask", "ttfm_us", "compile + first mask"),
    ):
        timing_rows = [
            [s.label, str(getattr(s, attribute).size)] + percentile_row(getattr(s, attribute)) for s in summaries
        ]
        parts += [f"## {title} ({note})", "", _table(["engine", "n", *stat_names], timing_rows), ""]

    error_types = [Counter(_error_type(r) for r in s.records if r.get("status") == "compile_error") for s in summaries]
    all_types = sorted(set().union(*error_types), key=lambda t: -sum(c[t] for c in error_types))
    if all_types:
        # Clean refusals (SchemaError, UnsupportedSchemaError, CompileError) versus Python
        # exceptions such as TypeError or RecursionError, which point at engine bugs.
        type_rows = [[name] + [str(c[name]) for c in error_types] for name in all_types]
        parts += ["## Compile errors by exception type", "", _table(["", *labels], type_rows), ""]

    failing = [(s.label, r) for s in summaries for r in s.records if r.get("status") != "pass"]
    if failing:
        parts += ["## Failures (first 20 per engine)", ""]
        shown: Counter = Counter()
        for label, record in failing:
            if shown[label] >= 20:
                continue
            shown[label] += 1
            detail = record.get("error") or "; ".join(
                f"test {f.get('test', f.get('generated'))}: {f.get('detail')}"
                for f in (record.get("failures") or [])[:3]
            )
            parts.append(f"- {label} `{record['id']}`: {record['status']}: {_one_line(detail)}")
        parts.append("")
    return "\n".join(parts)


def _error_type(record: dict) -> str:
    if record.get("error_type"):
        return record["error_type"]
    name = str(record.get("error", "")).split(":", 1)[0]
    return name if name.isidentifier() else "unknown"


def _count_pct(count: int, total: int) -> str:
    return f"{count} ({100.0 * count / total:.1f}%)" if total else str(count)


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def write_plots(summaries: list[RunSummary], folder: str | Path) -> list[Path]:
    """PNG plots of the mask-time, compile-time and time-to-first-mask distributions, one curve
    per run (overlaid). Left: the empirical CDF on a log time axis; right: the fraction of
    values above each time on log-log axes, where the tails (p99, p99.9, max) are visible."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, attribute, title in (
        ("mask_time.png", "mask_us", "Mask time per token"),
        ("compile_time.png", "compile_us", "Compile time per schema"),
        ("ttfm.png", "ttfm_us", "Time to first mask per schema"),
    ):
        figure, (cdf_axes, tail_axes) = plt.subplots(1, 2, figsize=(12, 4.5))
        plotted = False
        for summary in summaries:
            values = np.sort(getattr(summary, attribute))
            values = values[values > 0]
            if values.size == 0:
                continue
            below = np.arange(1, values.size + 1) / values.size
            label = f"{summary.label} (n={values.size})"
            cdf_axes.step(values, below, where="post", label=label)
            above = 1.0 - np.arange(values.size) / values.size  # fraction >= each value, never 0
            tail_axes.step(values, above, where="post", label=label)
            plotted = True
        for axes, ylabel in ((cdf_axes, "fraction ≤ time"), (tail_axes, "fraction ≥ time (log)")):
            axes.set_xlabel("time (µs, log scale)")
            axes.set_ylabel(ylabel)
            axes.grid(True, which="both", alpha=0.3)
            if plotted:
                axes.set_xscale("log")
                axes.legend(loc="lower right" if axes is cdf_axes else "lower left")
            else:
                axes.text(0.5, 0.5, "no data", transform=axes.transAxes, ha="center")
        if plotted:
            tail_axes.set_yscale("log")
        figure.suptitle(title)
        figure.tight_layout()
        path = folder / name
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written
