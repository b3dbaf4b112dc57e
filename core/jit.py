"""numba's `njit` for pushmask's kernels, with prepared caches: no JIT wait in a fresh environment.

`pushmask warmup` compiles every kernel signature pushmask uses for LLVM's *generic* CPU of the
architecture and stores the code in `kernel-cache/` beside this file; wheels ship that folder.
Code for the generic CPU runs on any CPU of the architecture, so a process that also compiles
for the generic CPU (chosen here, before numba's first compile) loads it instead of compiling.

A kernel's code is looked up first in numba's usual cache (NUMBA_CACHE_DIR, else `__pycache__`
beside the source, else the user's cache folder: wherever numba would cache it), then in the
prepared folder, which is only ever read outside `pushmask warmup`, so a read-only
site-packages works. Whatever had to be compiled is saved in numba's usual cache. A prepared
file that does not fit this process (another numba or llvmlite version, other sources -- a
kernel's sources are its file and every kernel file, since numba compiles the kernels a kernel
calls into its code --, a truncated file) is never loaded: the kernel compiles once, one log line says why, and later
processes find the result in numba's usual cache.

A process that compiles a kernel says so on stderr at once (`CompileNotice`): why, how much there
is to compile (read from the `prepared-pyXY.json` manifests `pushmask warmup` writes), then a
running count, so a first mask that waits for numba never waits in silence. It compiles less than
numba alone would (`KernelDispatcher`: one signature where numba makes one per literal argument)
and not alone (`CompileAhead`: worker processes compile the first mask's kernels meanwhile).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import inspect
import json
import logging
import os
import pickle
import re
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Literal, cast

from .caches import memoized

# Where prepared kernels are read (and written by `pushmask warmup`); PUSHMASK_KERNEL_CACHE moves it.
PREPARED_DIR = Path(os.environ.get("PUSHMASK_KERNEL_CACHE") or Path(__file__).resolve().parent / "kernel-cache")
GENERIC_CPU = "generic"

log = logging.getLogger("pushmask")


def _choose_generic_cpu() -> str | None:
    """Make numba compile for the generic CPU unless it is too late or the user chose another
    CPU; the reason prepared kernels can't apply in this process, or None."""
    requested = os.environ.get("NUMBA_CPU_NAME")
    if requested is None:
        numba_config = sys.modules.get("numba.core.config")
        if numba_config is None:  # numba not imported yet: it reads the variable at import
            os.environ["NUMBA_CPU_NAME"] = GENERIC_CPU
        else:
            from numba.core.registry import cpu_target

            # The CPU target's code generator is made, with the CPU it targets, at the first jit
            # decorator of the process; changing the setting after that would mislabel its code.
            if "_toplevel_target_context" in vars(cpu_target):
                return "numba made code for this machine's CPU before pushmask was imported"
            os.environ["NUMBA_CPU_NAME"] = GENERIC_CPU
            numba_config.reload_config()
    from numba.core import config

    settings = vars(config)  # numba makes its settings the module's globals at run time: untyped
    if settings["CPU_NAME"] != GENERIC_CPU:
        return f"NUMBA_CPU_NAME={settings['CPU_NAME']} is set"
    if settings["CPU_FEATURES"]:
        return f"NUMBA_CPU_FEATURES={settings['CPU_FEATURES']} is set"
    return None


NOT_GENERIC = _choose_generic_cpu()

import llvmlite  # noqa: E402 - numba must see NUMBA_CPU_NAME at import
import numba  # noqa: E402
from numba.core import event, types  # noqa: E402
from numba.core.caching import (  # noqa: E402
    CompileResultCacheImpl,
    FunctionCache,
    IndexDataCacheFile,
    _CacheLocator,
    _SourceFileBackedLocatorMixin,
)
from numba.core.registry import CPUDispatcher  # noqa: E402

if NOT_GENERIC:
    log.warning(
        "pushmask: %s, so its prepared kernels (compiled for the generic CPU) do not apply; each "
        "kernel compiles on first use, once (then numba's cache has it)",
        NOT_GENERIC,
    )

# This interpreter's tag in kernel file names (numba's: `py311`), and its prepared set's manifest.
PYTHON_TAG = "py%d%d%s" % (sys.version_info[0], sys.version_info[1], getattr(sys, "abiflags", ""))

_preparing = False  # True inside `pushmask warmup`: read and write the prepared folder only
_kernels: weakref.WeakSet[KernelDispatcher] = weakref.WeakSet()  # every njit(cache=True) kernel
_needed: dict[tuple[str, tuple[str, ...]], None] = {}  # (kernel, argument types) in the order first needed
_warned = False


def _warn_once(message: str, *args) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning("pushmask: " + message, *args)


KERNEL_PACKAGES = ("pushmask.grammar.fsm", "pushmask.automata", "pushmask.masks")
"""The packages whose modules define pushmask's kernels (kernel_source_files)."""


@memoized(1, name="kernel package folders (core/jit.py)", table=True)
def _kernel_package_folders() -> tuple[Path, ...]:
    """The folders of KERNEL_PACKAGES (imported here, not at import: they import this module)."""
    import importlib

    return tuple(Path(f).resolve() for name in KERNEL_PACKAGES for f in importlib.import_module(name).__path__)


def _kernel_texts(folders: tuple[Path, ...]) -> dict[Path, bytes]:
    """The files that define kernels (that use `njit`) in these folders, sorted, with their text."""
    texts = {path: path.read_bytes() for folder in folders for path in folder.glob("*.py")}
    return {path: texts[path] for path in sorted(texts) if b"njit" in texts[path]}


def kernel_source_files(folders: list[Path] | None = None) -> list[Path]:
    """The files that define kernels in these folders, default KERNEL_PACKAGES' folders, sorted."""
    return list(_kernel_texts(_kernel_package_folders() if folders is None else tuple(folders)))


def _kernel_sources_digest(folder: Path) -> str:
    """One digest of the kernel files of pushmask's kernel packages and of `folder` (a kernel's
    own). numba stamps a kernel's cached code with its own file only, yet that code holds the
    kernels it calls compiled in, often from other files: a callee changed there would leave its
    callers' cached code stale. So every kernel's stamp carries this digest too: a change to any
    kernel file makes every cached kernel a miss (and the prepared ones stale until `pushmask
    warmup`). pushmask's own kernels share one digest, computed once."""
    folders = _kernel_package_folders()
    return _digest_of_kernel_files(folders if folder in folders else (*folders, folder))


KERNEL_FILES_KEPT = 256
"""Digests of kernel folders and stamps of kernel files kept (pushmask has 22 kernel files)."""


@memoized(KERNEL_FILES_KEPT, name="kernel folder digests (core/jit.py)", table=True)
def _digest_of_kernel_files(folders: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path, text in _kernel_texts(folders).items():
        digest.update(path.name.encode() + b"\0" + text)
    return digest.hexdigest()


@memoized(KERNEL_FILES_KEPT, name="kernel cache stamps, per kernel file (core/jit.py)", table=True)
def _stamp_of(path: str) -> tuple[str, str]:
    """A kernel's cache stamp: its file's content hash with every kernel file's it may call
    (older numba stamps by mtime, which no wheel keeps), and llvmlite's version (numba itself
    checks only its own version; the object code is LLVM's)."""
    own = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    everyone = _kernel_sources_digest(Path(path).resolve().parent)
    return hashlib.sha256(f"{own} {everyone}".encode()).hexdigest(), llvmlite.__version__


class _CheckedCacheFile(IndexDataCacheFile):
    """numba's index + data files, but a file that can't be read is a miss, not a crash (numba
    raises on a truncated file). Prepared files log, once, why they were not used; an unreadable
    file of numba's usual cache is deleted, so the kernel compiled instead takes its place."""

    def __init__(self, cache_path, filename_base, source_path: str, prepared: bool):
        super().__init__(cache_path, filename_base, None)
        self._source_path = source_path
        self._prepared = prepared

    @property
    def _source_stamp(self) -> tuple[str, str]:
        """_stamp_of the kernel's file, read when a cache is first used (not when a kernel
        module is imported: the kernel packages may still be importing then)."""
        return _stamp_of(self._source_path)

    @_source_stamp.setter
    def _source_stamp(self, _unused) -> None:
        """numba's constructor sets the stamp; ours is computed (the getter)."""

    def _reject(self, path: str, why: str) -> None:
        unreadable = why.startswith("unreadable")
        if (self._prepared and not _preparing) or unreadable:  # warmup replaces stale prepared files
            _warn_once(
                "kernel cache file %s is %s, so it is not used: its kernels compile once and are cached "
                "in numba's cache",
                path,
                why,
            )
        if unreadable and not self._prepared:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _load_index(self):
        try:
            with open(self._index_path, "rb") as f:
                version = pickle.load(f)
                data = f.read()
            if version != self._version:
                self._reject(self._index_path, f"for numba {version}, not {self._version}")
                return {}
            stamp, overloads = pickle.loads(data)
        except FileNotFoundError:
            return {}
        except Exception as exc:  # noqa: BLE001 - any unreadable index is a miss
            self._reject(self._index_path, f"unreadable ({type(exc).__name__}: {exc})")
            return {}
        if stamp != self._source_stamp:
            if not self._prepared:
                return {}  # numba's own rule: sources changed since, the entries are stale
            if isinstance(stamp, tuple) and stamp[1:] != self._source_stamp[1:]:
                self._reject(self._index_path, f"for llvmlite {stamp[1]}, not {self._source_stamp[1]}")
            else:
                self._reject(self._index_path, "for other sources (run `pushmask warmup`)")
            return {}
        return overloads

    def _load_data(self, name):
        try:
            return super()._load_data(name)
        except OSError:
            raise  # numba's own miss: the index named a file that is gone
        except Exception as exc:  # noqa: BLE001 - a data file that does not unpickle is a miss
            self._reject(self._data_path(name), f"unreadable ({type(exc).__name__}: {exc})")
            return None

    def index_and_data_names(self) -> set[str]:
        """The index's file name and its data files' names, if the index is current."""
        overloads = self._load_index()
        return {self._index_name, *overloads.values()} if overloads else set()


class _PreparedOnlyLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """Last resort when numba finds no writable cache folder: the prepared folder, read only."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno

    def get_cache_path(self):
        return str(PREPARED_DIR)

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_func, py_file) if os.path.exists(py_file) else None


class _KernelCacheImpl(CompileResultCacheImpl):
    """numba's compile-result cache, with file names that carry the full module name (the
    prepared folder is flat) and a read-only last resort."""

    def __init__(self, py_func):
        self._module = py_func.__module__
        super().__init__(py_func)

    @property
    def _locator_classes(self):
        return [*CompileResultCacheImpl._locator_classes, _PreparedOnlyLocator]

    def get_filename_base(self, fullname, abiflags):
        return super().get_filename_base(f"{self._module}.{fullname.split('.', 1)[1]}", abiflags)


class KernelCache(FunctionCache):
    """A kernel's cache: numba's usual cache first, then the prepared folder."""

    _impl_class = _KernelCacheImpl

    def __init__(self, py_func):
        super().__init__(py_func)
        source, base = inspect.getfile(py_func), self._impl.filename_base
        self._cache_file = _CheckedCacheFile(self._cache_path, base, source, prepared=False)
        self._prepared = _CheckedCacheFile(str(PREPARED_DIR), base, source, prepared=True)
        self._kernel = f"{py_func.__module__}:{py_func.__qualname__}"

    def _load_overload(self, sig, target_context):
        _needed.setdefault((self._kernel, tuple(map(str, sig))), None)
        if not self._enabled:
            return None
        key = self._index_key(sig, target_context.codegen())
        for cache_file in (self._prepared,) if _preparing else (self._cache_file, self._prepared):
            data = cache_file.load(key)
            if data is not None:
                try:
                    return self._impl.rebuild(target_context, data)
                except Exception as exc:  # noqa: BLE001 - code that does not load is recompiled
                    cache_file._reject(cache_file._index_path, f"unreadable ({type(exc).__name__}: {exc})")
        return None

    def _save_overload(self, sig, data):
        if not _preparing:
            try:
                super()._save_overload(sig, data)
            except OSError as exc:  # nowhere writable: the kernel stays compiled in this process only
                log.debug("pushmask: could not cache %s: %s", self._name, exc)
            return
        if self._enabled and self._impl.check_cachable(data):
            PREPARED_DIR.mkdir(parents=True, exist_ok=True)
            self._prepared.save(self._index_key(sig, data.codegen), self._impl.reduce(data))


class KernelDispatcher(CPUDispatcher):
    """numba's CPU dispatcher, but a call from another kernel compiles for the arguments' plain
    types: numba would compile a signature per literal (`closure(..., 0)` and `closure(..., 64)`
    are two), each costing a full compile when no cache has it. The literal converts at the call."""

    _cache: KernelCache  # njit(cache=True) sets it

    def get_call_template(self, args, kws):
        return super().get_call_template(
            tuple(map(types.unliteral, args)), {name: types.unliteral(arg) for name, arg in kws.items()}
        )


def njit(function=None, **options):
    """`numba.njit`; with cache=True the kernel is a KernelDispatcher and its cache a KernelCache."""
    cache = options.pop("cache", False)

    def decorate(py_func):
        dispatcher = numba.njit(**options)(py_func)
        if cache and isinstance(dispatcher, CPUDispatcher):  # NUMBA_DISABLE_JIT returns py_func
            dispatcher.__class__ = KernelDispatcher  # same layout: only get_call_template differs
            dispatcher._cache = KernelCache(py_func)
            _kernels.add(dispatcher)
        return dispatcher

    return decorate if function is None else decorate(function)


def start_preparing() -> None:
    """From now on kernels are looked up in, and compiled into, the prepared folder only
    (`pushmask warmup`); raises if this process does not compile for the generic CPU."""
    global _preparing
    if NOT_GENERIC:
        raise RuntimeError(f"prepared kernels must be compiled for the generic CPU, but {NOT_GENERIC}")
    _preparing = True


def prune_prepared() -> tuple[int, int]:
    """Delete this Python version's prepared files that no current kernel index refers to (older
    sources, removed kernels); (files kept, files deleted)."""
    keep: set[str] = set()
    for kernel in list(_kernels):
        keep |= kernel._cache._prepared.index_and_data_names()
    kept = deleted = 0
    for path in PREPARED_DIR.glob(f"*.{PYTHON_TAG}*"):
        if path.name in keep:
            kept += 1
        elif path.name.endswith((f".{PYTHON_TAG}.nbi", ".nbc")) or ".tmp." in path.name:
            path.unlink(missing_ok=True)
            deleted += 1
    return kept, deleted


def cache_stats() -> tuple[int, int]:
    """(signatures loaded from a cache, signatures compiled) over pushmask's kernels so far."""
    stats = [kernel.stats for kernel in list(_kernels)]
    return (sum(sum(s.cache_hits.values()) for s in stats), sum(sum(s.cache_misses.values()) for s in stats))


def manifest_path(tag: str = PYTHON_TAG) -> Path:
    """The manifest of one Python's prepared set: what built it and how much it holds."""
    return PREPARED_DIR / f"prepared-{tag}.json"


def needed_signatures() -> list[list]:
    """Every kernel signature this process has needed so far (loaded or compiled), in the order
    first needed: [["module:qualname", [argument type, ...]], ...], those `parse_type` reads only."""
    readable = []
    for kernel, arg_types in _needed:
        try:
            for text in arg_types:
                parse_type(text)
        except ValueError:
            continue
        readable.append([kernel, list(arg_types)])
    return readable


_ARRAY_TYPE = re.compile(r"(readonly )?array\((\w+), (\d+)d, ([CFA])\)")


def parse_type(text: str) -> types.Type:
    """The numba type whose str() is `text`: a scalar (`int64`, `bool`, `float64`) or an array
    (`array(int32, 1d, C)`); ValueError for anything else (what kernels take from Python)."""

    def scalar(name: str) -> types.Type:
        found = getattr(types, "boolean" if name == "bool" else name, None)
        if not isinstance(found, types.Number | types.Boolean):
            raise ValueError(f"not a numba scalar type: {name!r}")
        return found

    array = _ARRAY_TYPE.fullmatch(text)
    parsed: types.Type
    if array:
        layout = cast(Literal["C", "F", "A"], array[4])  # the pattern's [CFA]
        parsed = types.Array(scalar(array[2]), int(array[3]), layout, readonly=bool(array[1]))
    else:
        parsed = scalar(text)
    if str(parsed) != text:
        raise ValueError(f"not a numba type this reads: {text!r}")
    return parsed


def write_manifest(compiled: int, seconds: float, first_mask: list | None = None) -> dict:
    """Record this Python's prepared set after `pushmask warmup` (which compiled `compiled`
    signatures in `seconds`): the numba and llvmlite its code loads under (a wheel pins them), the
    signatures it holds (one data file each), the seconds their compile took (a run that
    compiled nothing keeps the last known seconds) and the signatures a first mask needs, in the
    order it needs them (`needed_signatures()`; what `compile_ahead` compiles where none is
    prepared)."""
    previous = _read_manifest(manifest_path()) or {}
    manifest = {
        "python": PYTHON_TAG,
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "signatures": len(list(PREPARED_DIR.glob(f"*.{PYTHON_TAG}.*.nbc"))),
    }
    if compiled:
        manifest["seconds"] = round(seconds)
    elif "seconds" in previous:
        manifest["seconds"] = previous["seconds"]
    if first_mask or "first_mask" in previous:
        manifest["first_mask"] = first_mask or previous["first_mask"]
    PREPARED_DIR.mkdir(parents=True, exist_ok=True)
    manifest_path().write_text(json.dumps(manifest) + "\n")
    return manifest


def _read_manifest(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class CompileNotice:
    """Tells stderr that kernels compile, from the first compile on: one line with why and how
    much, then progress while compiles go on (an updating counter in a terminal, else a line
    every PERIOD seconds, also in the middle of one long compile) and, once nothing has compiled
    for QUIET seconds (or at exit), a line with the total. A daemon thread does the ticking."""

    PERIOD = 15.0
    QUIET = 2.0

    def __init__(self, stream=None):
        self._stream = stream
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._burst_start = 0.0  # when the current run of compiles began
        self._count = 0  # signatures compiled in the current run
        self._open: list[str] = []  # kernels whose compile began and has not ended (callees nest)
        self._last_event = 0.0
        self._last_line = 0.0

    @property
    def stream(self):
        return self._stream or sys.stderr

    def compiling(self, kernel: str) -> None:
        """numba begins to compile a signature of `kernel` (it found it in no cache)."""
        with self._lock:
            now = self._last_event = time.monotonic()
            if not self._count and not self._open:
                self._burst_start = self._last_line = now
            self._open.append(kernel)
            if self._ticker is None:
                self._write(self._first_line(kernel) + "\n")
                self._ticker = threading.Thread(target=self._tick, name="pushmask-compile-notice", daemon=True)
                self._ticker.start()

    def compiled(self) -> None:
        """numba finished compiling a signature (or gave up: a typing error ends it too)."""
        with self._lock:
            self._last_event = time.monotonic()
            self._count += 1
            if self._open:
                self._open.pop()

    def finish(self) -> None:
        """The total line now, if compiles since the last one left it unsaid (at exit)."""
        with self._lock:
            self._total()

    def _tick(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                now = time.monotonic()
                if self._open:
                    self._progress(now)
                elif self._count and now - self._last_event >= self.QUIET:
                    self._total()

    def _progress(self, now: float) -> None:
        elapsed = now - self._burst_start
        kernel = self._open[-1]
        if self._interactive:
            self._write(f"\r{self._prefix} compiling kernel {self._count + 1}: {kernel} ({elapsed:.0f} s)\x1b[K")
        elif now - self._last_line >= self.PERIOD:
            self._last_line = now
            self._write(f"{self._prefix} compiled {self._count} kernels in {elapsed:.0f} s; now {kernel}\n")

    def _total(self) -> None:
        if not self._count or self._open:
            return
        seconds = self._last_event - self._burst_start
        text = f"{self._prefix} compiled {self._count} kernels in {seconds:.0f} s (cached for later processes)"
        self._write(f"\r{text}\x1b[K\n" if self._interactive else text + "\n")
        self._count = 0

    @property
    def _prefix(self) -> str:
        return "pushmask warmup:" if _preparing else "pushmask:"

    @property
    def _interactive(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def _first_line(self, kernel: str) -> str:
        if _preparing:
            return f"pushmask warmup: compiling kernels into {PREPARED_DIR} (a few minutes; a count follows)"
        workers = len(compile_ahead.workers)
        helped = f", {workers} more process{'es' if workers > 1 else ''} helping" if workers else ""
        return (
            f"pushmask: compiling numba kernels for this Python/CPU ({why_compiling(kernel)}): {_how_much()}"
            f"{helped}; they are cached, once; `pushmask warmup` compiles them all ahead"
        )

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stderr
            self.stream.write(text)
            self.stream.flush()


def why_compiling(kernel: str) -> str:
    """Why this process compiles `kernel` instead of loading it prepared."""
    if NOT_GENERIC:
        return NOT_GENERIC
    mine = _read_manifest(manifest_path())
    if mine is None or not any(PREPARED_DIR.glob(f"*.{PYTHON_TAG}.nbi")):  # an sdist has manifests only
        return f"no prepared kernels for CPython {sys.version_info[0]}.{sys.version_info[1]} in {PREPARED_DIR}"
    if (mine.get("numba"), mine.get("llvmlite")) != (numba.__version__, llvmlite.__version__):
        return (
            f"the prepared kernels are for numba {mine.get('numba')} and llvmlite {mine.get('llvmlite')}, "
            f"this is numba {numba.__version__} and llvmlite {llvmlite.__version__}"
        )
    return f"{kernel} is not among the prepared kernels, or they are for other sources"


def _how_much() -> str:
    """How much a process without prepared kernels compiles, from this Python's manifest, else any."""
    paths = [manifest_path(), *sorted(PREPARED_DIR.glob("prepared-*.json"))]
    for manifest in filter(None, map(_read_manifest, paths)):
        if "signatures" in manifest:
            took = f", ~{manifest['seconds']} s where they were prepared" if "seconds" in manifest else ""
            return f"about {manifest['signatures']} kernel signatures in all{took} (a first mask needs a part of them)"
    return "a few seconds per kernel"


compile_notice = CompileNotice()

COMPILE_AHEAD_ENV = "PUSHMASK_COMPILE_AHEAD"  # "0": compile in this process only (workers run so)
MAX_AHEAD_WORKERS = 3


def first_mask_signatures() -> list[list]:
    """The signatures a first mask needs, in order (this Python's manifest, else any's)."""
    paths = [manifest_path(), *sorted(PREPARED_DIR.glob("prepared-*.json"))]
    for manifest in filter(None, map(_read_manifest, paths)):
        if manifest.get("first_mask"):
            return manifest["first_mask"]
    return []


def _cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


class CompileAhead:
    """A process that must compile kernels starts, at its first compile, one worker process per
    spare core (`python -m pushmask.compile_ahead`), which compiles the first mask's signatures
    from the last needed back into numba's cache while this process compiles from the first on:
    numba looks in its cache before each compile, so this process loads what a worker finished
    first. A worker that fails or lags costs nothing but its own CPU (what is missing compiles
    here, as without workers); workers stop when this process ends."""

    def __init__(self):
        self._started = False
        self.workers: list[subprocess.Popen] = []

    def start(self) -> None:
        """Start the workers, once per process, unless this is `pushmask warmup`, numba does not
        compile for the generic CPU here (a worker would), PUSHMASK_COMPILE_AHEAD=0 or no core
        is spare."""
        if self._started:
            return
        self._started = True
        if _preparing or NOT_GENERIC or os.environ.get(COMPILE_AHEAD_ENV) == "0":
            return
        count = min(_cores() - 1, MAX_AHEAD_WORKERS, len(first_mask_signatures()))
        env = dict(os.environ, **{COMPILE_AHEAD_ENV: "0"})
        for index in range(count):
            command = [sys.executable, "-m", "pushmask.compile_ahead", str(os.getpid()), str(index), str(count)]
            try:
                worker = subprocess.Popen(
                    command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
            except OSError as exc:
                log.debug("pushmask: no compile worker: %s", exc)
                break
            self.workers.append(worker)
        if self.workers:
            atexit.register(self.stop)

    def stop(self) -> None:
        """End the workers that still compile (at exit: what they finished stays cached)."""
        for worker in self.workers:
            if worker.poll() is None:
                worker.terminate()
            worker.wait()


compile_ahead = CompileAhead()


class _CompileListener(event.Listener):
    """numba's compile events (begin and end, paired even when a compile fails) of pushmask's
    kernels, for compile_notice."""

    def on_start(self, ev) -> None:
        dispatcher = ev.data["dispatcher"]
        if dispatcher in _kernels:
            function = dispatcher.py_func
            compile_ahead.start()  # first: the notice says how many workers help
            compile_notice.compiling(f"{function.__module__.removeprefix('pushmask.')}.{function.__qualname__}")

    def on_end(self, ev) -> None:
        if ev.data["dispatcher"] in _kernels:
            compile_notice.compiled()


event.register("numba:compile", _CompileListener())
atexit.register(compile_notice.finish)
