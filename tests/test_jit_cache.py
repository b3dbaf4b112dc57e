"""Prepared kernel caches (core/jit.py): fresh processes load them instead of compiling, and a
prepared file that does not fit (another numba or llvmlite, other sources, truncated) is never
loaded but compiled once, said in one log line, and cached in numba's usual cache.

Every check runs fresh subprocesses with their own empty NUMBA_CACHE_DIR and reads numba's
dispatcher statistics (cache hits / misses) and the cache folders; nothing is timed. A tiny kernel
written by the test stands for pushmask's kernels (same decorator, same cache), so its prepared
folder can be damaged freely; one test checks pushmask's own prepared kernels end to end.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

KERNEL = textwrap.dedent("""
    from pushmask.core.jit import njit

    @njit(cache=True)
    def triangle(n):
        total = 0
        for i in range(n):
            total += i
        return total
""")

RUN_KERNEL = textwrap.dedent("""
    import json, sys
    if "--numba-first" in sys.argv:  # another library compiles with numba before pushmask is imported
        import numba
        numba.njit(lambda x: x + 1)(1)
    import pushmask.core.jit as jit
    if "--prepare" in sys.argv:
        jit.start_preparing()
    import toy_kernels
    stats = toy_kernels.triangle.stats
    result = toy_kernels.triangle(10)
    print(json.dumps({"result": result, "hits": sum(stats.cache_hits.values()),
                      "misses": sum(stats.cache_misses.values())}))
""")


def _run(
    code: str,
    *args: str,
    prepared: Path,
    cache: Path | None,
    path: Path | None = None,
    env: dict | None = None,
    prefix: tuple = (),
) -> tuple[dict, list[str]]:
    """Run `code` in a fresh interpreter; its last stdout line as JSON, and its pushmask log lines
    (but the compile notice's, which test_compiling_is_said_at_once checks)."""
    environ = dict(os.environ, PUSHMASK_KERNEL_CACHE=str(prepared), PYTHONPATH=str(path or ""))
    environ.pop("NUMBA_CACHE_DIR", None)
    environ.pop("NUMBA_CPU_NAME", None)
    if cache is not None:
        environ["NUMBA_CACHE_DIR"] = str(cache)
    environ.update(env or {})
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", code, *args], env=environ, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    logs = [line for line in proc.stderr.splitlines() if line.startswith("pushmask:") and not _is_notice(line)]
    return json.loads(proc.stdout.strip().splitlines()[-1]), logs


def _is_notice(line: str) -> bool:
    return line.startswith(("pushmask: compiling ", "pushmask: compiled "))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy kernel's module folder and its prepared folder, made by a `--prepare` run."""
    root = tmp_path_factory.mktemp("jit")
    (root / "src").mkdir()
    (root / "src" / "toy_kernels.py").write_text(KERNEL)
    prepared = root / "prepared"
    out, logs = _run(RUN_KERNEL, "--prepare", prepared=prepared, cache=root / "unused", path=root / "src")
    assert out == {"result": 45, "hits": 0, "misses": 1} and not logs
    assert not (root / "unused").exists() or not list((root / "unused").rglob("*.nb*"))
    return root / "src", prepared


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.rglob("*.nb*")} if folder.exists() else {}


def test_fresh_process_loads_the_prepared_kernel(toy, tmp_path):
    src, prepared = toy
    before = _files(prepared)
    out, logs = _run(RUN_KERNEL, prepared=prepared, cache=tmp_path / "cache", path=src)
    assert out == {"result": 45, "hits": 1, "misses": 0} and not logs
    assert not _files(tmp_path / "cache")  # nothing compiled, nothing written
    assert _files(prepared) == before


CALLEE = textwrap.dedent("""
    from pushmask.core.jit import njit

    @njit(cache=True)
    def step(x):
        return x + STEP
""")

CALLER = textwrap.dedent("""
    from pushmask.core.jit import njit
    import toy_callee

    @njit(cache=True)
    def twice(x):
        return toy_callee.step(toy_callee.step(x))
""")

RUN_CALLER = textwrap.dedent("""
    import json
    import toy_caller
    stats = toy_caller.twice.stats
    result = toy_caller.twice(0)
    print(json.dumps({"result": result, "hits": sum(stats.cache_hits.values()),
                      "misses": sum(stats.cache_misses.values())}))
""")


def test_a_kernel_whose_callee_changed_in_another_file_is_compiled_again(tmp_path):
    """numba compiles a callee into its caller's cached code but stamps that code with the
    caller's file only; pushmask's stamp also covers the kernel files beside it and its own, so a
    changed callee is never run as its old code through a caller's cache."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "toy_caller.py").write_text(CALLER)
    runs = []
    for step in (1, 1, 5):
        (src / "toy_callee.py").write_text(CALLEE.replace("STEP", str(step)))
        runs.append(_run(RUN_CALLER, prepared=tmp_path / "prepared", cache=tmp_path / "cache", path=src)[0])
    assert runs == [
        {"result": 2, "hits": 0, "misses": 1},
        {"result": 2, "hits": 1, "misses": 0},  # the cache is used while nothing changed
        {"result": 10, "hits": 0, "misses": 1},  # not the stale 2 of the callee's old code
    ]


def test_kernel_stamps_cover_every_file_that_defines_a_loaded_kernel():
    """Every pushmask kernel loaded in this process lives in a file the kernel digest covers."""
    import pushmask  # noqa: F401 - loads the kernel modules
    from pushmask.core import jit

    covered = {path.resolve() for path in jit.kernel_source_files()}
    kernel_files = {
        Path(module.__file__).resolve()
        for name, module in list(sys.modules.items())
        if name.startswith("pushmask.")
        and getattr(module, "__file__", None)
        and any(
            isinstance(value, jit.KernelDispatcher) and value.py_func.__module__ == name
            for value in vars(module).values()
        )
    }
    assert len(kernel_files) >= 15 and kernel_files <= covered


def _index(prepared: Path) -> Path:
    (index,) = prepared.glob("toy_kernels.triangle-*.nbi")
    return index


def _split_index(data: bytes) -> tuple[str, bytes]:
    """An index file's numba version and the rest (a pickle of (source stamp, entries))."""
    stream = io.BytesIO(data)
    version = pickle.load(stream)
    return version, data[stream.tell() :]


def _with_version(data: bytes, version: str) -> bytes:
    """The index file with its numba version replaced."""
    return pickle.dumps(version, protocol=-1) + _split_index(data)[1]


def _with_stamp(data: bytes, change) -> bytes:
    """The index file with its source stamp replaced by change(stamp)."""
    version, rest = _split_index(data)
    stamp, entries = pickle.loads(rest)
    return pickle.dumps(version, protocol=-1) + pickle.dumps((change(stamp), entries), protocol=-1)


DAMAGE = {
    "numba version": ("numba 0.0.1", lambda p: _index(p).write_bytes(_with_version(_index(p).read_bytes(), "0.0.1"))),
    "llvmlite version": (
        "llvmlite 0.0.2",
        lambda p: _index(p).write_bytes(_with_stamp(_index(p).read_bytes(), lambda stamp: (stamp[0], "0.0.2"))),
    ),
    "other sources": (
        "other sources",
        lambda p: _index(p).write_bytes(_with_stamp(_index(p).read_bytes(), lambda stamp: ("0" * 64, stamp[1]))),
    ),
    "truncated index": ("unreadable", lambda p: _index(p).write_bytes(_index(p).read_bytes()[:-7])),
    "truncated data": (
        "unreadable",
        lambda p: [
            f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2]) for f in p.glob("toy_kernels.triangle-*.nbc")
        ],
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_prepared_file_that_does_not_fit_is_compiled_once_and_cached(toy, tmp_path, damage):
    src, prepared = toy
    reason, apply = DAMAGE[damage]
    broken = tmp_path / "prepared"
    shutil.copytree(prepared, broken)
    apply(broken)
    cache = tmp_path / "cache"
    out, logs = _run(RUN_KERNEL, prepared=broken, cache=cache, path=src)
    assert out == {"result": 45, "hits": 0, "misses": 1}
    assert len(logs) == 1 and reason in logs[0], logs
    assert _files(cache)  # the compiled kernel went to numba's usual cache
    out, logs = _run(RUN_KERNEL, prepared=broken, cache=cache, path=src)
    assert out == {"result": 45, "hits": 1, "misses": 0} and not logs


def test_a_truncated_file_in_numbas_cache_is_replaced(toy, tmp_path):
    src, _ = toy
    empty, cache = tmp_path / "no-prepared", tmp_path / "cache"
    assert _run(RUN_KERNEL, prepared=empty, cache=cache, path=src)[0]["misses"] == 1
    for data in cache.rglob("*.nbc"):
        data.write_bytes(data.read_bytes()[:100])
    out, logs = _run(RUN_KERNEL, prepared=empty, cache=cache, path=src)
    assert out == {"result": 45, "hits": 0, "misses": 1} and len(logs) == 1 and "unreadable" in logs[0]
    out, logs = _run(RUN_KERNEL, prepared=empty, cache=cache, path=src)
    assert out == {"result": 45, "hits": 1, "misses": 0} and not logs


def test_numba_used_for_the_host_cpu_first(toy, tmp_path):
    """Another library compiled for the host CPU first: one log line, the kernel compiles (and is
    cached for the next such process), and results are right."""
    src, prepared = toy
    cache = tmp_path / "cache"
    out, logs = _run(RUN_KERNEL, "--numba-first", prepared=prepared, cache=cache, path=src)
    assert out == {"result": 45, "hits": 0, "misses": 1}
    assert len(logs) == 1 and "before pushmask was imported" in logs[0]
    out, logs = _run(RUN_KERNEL, "--numba-first", prepared=prepared, cache=cache, path=src)
    assert out == {"result": 45, "hits": 1, "misses": 0} and len(logs) == 1


def test_another_cpu_named_by_the_user(toy, tmp_path):
    """NUMBA_CPU_NAME names this machine's CPU: one log line says the prepared kernels do not
    apply, and the kernel compiles for that CPU."""
    import llvmlite.binding

    src, prepared = toy
    host = {"NUMBA_CPU_NAME": llvmlite.binding.get_host_cpu_name()}
    out, logs = _run(RUN_KERNEL, prepared=prepared, cache=tmp_path / "cache", path=src, env=host)
    assert out == {"result": 45, "hits": 0, "misses": 1}
    assert len(logs) == 1 and f"NUMBA_CPU_NAME={host['NUMBA_CPU_NAME']} is set" in logs[0]


def test_parallel_processes_share_an_empty_cache(toy, tmp_path):
    """Four processes compile into the same empty cache at once (no prepared kernel); every one
    gets the right result and the cache they leave loads cleanly."""
    src, _ = toy
    empty, cache = tmp_path / "no-prepared", tmp_path / "cache"
    environ = dict(os.environ, PUSHMASK_KERNEL_CACHE=str(empty), PYTHONPATH=str(src), NUMBA_CACHE_DIR=str(cache))
    environ.pop("NUMBA_CPU_NAME", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN_KERNEL], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr
        assert json.loads(stdout.strip().splitlines()[-1])["result"] == 45
    out, logs = _run(RUN_KERNEL, prepared=empty, cache=cache, path=src)
    assert out == {"result": 45, "hits": 1, "misses": 0} and not logs


def _read_only_prefix() -> tuple:
    """A command prefix under which files this user owns can be made read-only (root ignores
    permissions, so root runs as a mapped ordinary user in a user namespace)."""
    if os.geteuid() != 0:
        return ()
    probe = subprocess.run(["unshare", "--user", "--map-user=1000", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(
            f"running as root and user namespaces are unavailable ({probe.stderr.decode().strip()}), so "
            "no folder can be made read-only for this process"
        )
    return ("unshare", "--user", "--map-user=1000")


def test_read_only_install(toy, tmp_path):
    """Sources and prepared kernels read-only, as in a read-only site-packages: the prepared kernel
    loads; a damaged one compiles into NUMBA_CACHE_DIR, or with no writable cache at all, just runs."""
    src, prepared = toy
    prefix = _read_only_prefix()
    ro_src, ro_prepared, broken = tmp_path / "src", tmp_path / "prepared", tmp_path / "broken"
    shutil.copytree(src, ro_src)
    shutil.copytree(prepared, ro_prepared)
    shutil.copytree(prepared, broken)
    DAMAGE["truncated data"][1](broken)
    nowhere = tmp_path / "home"
    nowhere.mkdir()
    for folder in (ro_src, ro_prepared, broken, nowhere):
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
    no_home = {"HOME": str(nowhere), "XDG_CACHE_HOME": str(nowhere)}
    try:
        out, logs = _run(RUN_KERNEL, prepared=ro_prepared, cache=None, path=ro_src, env=no_home, prefix=prefix)
        assert out == {"result": 45, "hits": 1, "misses": 0} and not logs
        cache = tmp_path / "cache"
        out, logs = _run(RUN_KERNEL, prepared=broken, cache=cache, path=ro_src, prefix=prefix)
        assert out == {"result": 45, "hits": 0, "misses": 1} and len(logs) == 1
        assert _files(cache)
        out, logs = _run(RUN_KERNEL, prepared=broken, cache=None, path=ro_src, env=no_home, prefix=prefix)
        assert out == {"result": 45, "hits": 0, "misses": 1} and len(logs) == 1
        assert not list(tmp_path.rglob("__pycache__/*.nb*"))
    finally:
        for path in tmp_path.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)


FIRST_MASK = textwrap.dedent("""
    import json
    import pushmask, pushmask.core.jit as jit
    from pushmask.warmup import small_vocabulary
    info = small_vocabulary()
    compiled = pushmask.GrammarCompiler(info).compile_json_schema(
        {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
         "required": ["name", "age"]})
    matcher = pushmask.GrammarMatcher(compiled)
    bitmask = pushmask.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    assert matcher.accept_string('{"name": "B')
    matcher.fill_next_token_bitmask(bitmask)
    hits, misses = jit.cache_stats()
    print(json.dumps({"hits": hits, "misses": misses}))
""")


BATCH_STEPS = textwrap.dedent("""
    import json
    import numpy as np
    import pushmask, pushmask.core.jit as jit
    from pushmask.warmup import small_vocabulary
    info = small_vocabulary()
    compiler = pushmask.GrammarCompiler(info)
    schemas = [{"type": "object", "properties": {"k%d" % i: {"type": "string"}, "n": {"type": "integer"}},
                "required": ["k%d" % i]} for i in range(6)]
    matchers = [pushmask.GrammarMatcher(compiler.compile_json_schema(s, property_order="any")) for s in schemas]
    bitmask = pushmask.allocate_token_bitmask(len(matchers), info.vocab_size)
    before = jit.cache_stats()[1]
    rng = np.random.default_rng(0)
    for _ in range(8):  # a server's steps: first visits of all rows' new states in the batch call
        pushmask.batch_fill_next_token_bitmask(matchers, bitmask, max_threads=2)
        for row, matcher in enumerate(matchers):
            words = np.asarray(bitmask[row]).astype(np.uint32)
            allowed = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[: info.vocab_size])
            assert matcher.accept_token(int(rng.choice(allowed)))
    hits, misses = jit.cache_stats()
    print(json.dumps({"hits": hits, "misses": misses, "batch_misses": misses - before}))
""")


@pytest.mark.slow
def test_pushmask_first_mask_uses_prepared_kernels(tmp_path):
    """`pushmask warmup` (it only loads what is already prepared and current), then a fresh process
    with an empty NUMBA_CACHE_DIR compiles a schema and fills masks without compiling a kernel."""
    from pushmask.core import jit

    warm = subprocess.run(
        [sys.executable, "-m", "pushmask", "warmup"],
        capture_output=True,
        text=True,
        timeout=3600,
        env={k: v for k, v in os.environ.items() if k != "NUMBA_CPU_NAME"},
    )
    assert warm.returncode == 0, warm.stderr
    before = _files(jit.PREPARED_DIR)
    out, logs = _run(FIRST_MASK, prepared=jit.PREPARED_DIR, cache=tmp_path / "cache")
    assert out["misses"] == 0 and out["hits"] > 10 and not logs, (out, logs)
    # a server's batch steps of new requests (first visits in the batch kernel, two threads) too
    out, logs = _run(BATCH_STEPS, prepared=jit.PREPARED_DIR, cache=tmp_path / "cache")
    assert out["misses"] == 0 and out["hits"] > 10 and not logs, (out, logs)
    assert not _files(tmp_path / "cache")
    assert _files(jit.PREPARED_DIR) == before


NOTICE = textwrap.dedent("""
    import sys, time
    from numba.core import event
    import pushmask.core.jit as jit
    import toy_kernels

    class Ends(event.Listener):  # registered after pushmask's: says when each compile ended
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            print(f"END {time.monotonic() - started:.3f}", file=sys.stderr, flush=True)

    event.register("numba:compile", Ends())
    started = time.monotonic()
    toy_kernels.triangle(10)
    print(f"DONE {time.monotonic() - started:.3f}", file=sys.stderr)
    print("{}")
""")


def test_compiling_is_said_at_once(toy, tmp_path):
    """No prepared kernel: before the first compile ends, one stderr line says that kernels compile,
    why, how much (from the manifests `pushmask warmup` writes) and that `pushmask warmup` prepares
    them; the total comes at exit. With the kernel prepared, nothing is said."""
    from pushmask.core import jit

    src, prepared = toy
    empty = tmp_path / "no-prepared"
    empty.mkdir()
    (empty / "prepared-py399.json").write_text(json.dumps({"signatures": 123, "seconds": 45}))
    environ = dict(
        os.environ, PUSHMASK_KERNEL_CACHE=str(empty), PYTHONPATH=str(src), NUMBA_CACHE_DIR=str(tmp_path / "c")
    )
    environ.pop("NUMBA_CPU_NAME", None)
    proc = subprocess.run([sys.executable, "-c", NOTICE], env=environ, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    notice = [i for i, line in enumerate(lines) if line.startswith("pushmask: compiling numba kernels")]
    ends = [i for i, line in enumerate(lines) if line.startswith("END ")]
    assert len(notice) == 1 and ends and notice[0] < ends[0], lines
    version = "%d.%d" % sys.version_info[:2]
    assert f"no prepared kernels for CPython {version} in {empty}" in lines[notice[0]]
    assert "about 123 kernel signatures in all, ~45 s" in lines[notice[0]]
    assert "`pushmask warmup` compiles them all ahead" in lines[notice[0]]
    assert lines[-1].startswith("pushmask: compiled 1 kernels in ")
    assert jit.manifest_path().name == f"prepared-{jit.PYTHON_TAG}.json"

    environ.update(PUSHMASK_KERNEL_CACHE=str(prepared), NUMBA_CACHE_DIR=str(tmp_path / "fresh"))
    proc = subprocess.run([sys.executable, "-c", NOTICE], env=environ, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "pushmask:" not in proc.stderr and "END" not in proc.stderr, proc.stderr


def test_compile_notice_ticks_through_a_long_compile():
    """Outside a terminal a line comes every PERIOD seconds even while one kernel compiles on (its
    callee done), no total while it is open, and the total when it ends."""
    import time

    from pushmask.core import jit

    stream = io.StringIO()
    notice = jit.CompileNotice(stream)
    notice.PERIOD = 0.5
    notice.compiling("toy.outer")
    notice.compiling("toy.inner")
    notice.compiled()
    time.sleep(3.5)  # past QUIET: the outer kernel still compiles, so no total yet
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("pushmask: compiling numba kernels for this Python/CPU (")
    assert len(lines) >= 3 and all(line.endswith("now toy.outer") for line in lines[1:]), lines
    assert all("pushmask: compiled 1 kernels in " in line for line in lines[1:])
    notice.compiled()
    notice.finish()
    assert stream.getvalue().splitlines()[-1].startswith("pushmask: compiled 2 kernels in ")


LITERALS = textwrap.dedent("""
    from pushmask.core.jit import njit

    @njit(cache=True)
    def offset(base, by):
        return base + by

    @njit(cache=True)
    def offsets(base):
        return offset(base, 0) + offset(base, 64) + offset(base, base)
""")


def test_literal_arguments_compile_one_signature(tmp_path):
    """A kernel called from another with literal arguments (0, 64) and a variable compiles once,
    for the plain int64 (numba alone would compile a signature per literal)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "toy_literals.py").write_text(LITERALS)
    code = (
        "import json, toy_literals as t; "
        "print(json.dumps({'result': t.offsets(5), 'signatures': [str(s) for s in t.offset.signatures]}))"
    )
    out, _ = _run(code, prepared=tmp_path / "none", cache=tmp_path / "cache", path=tmp_path / "src")
    assert out == {"result": 5 + 69 + 10, "signatures": ["(int64, int64)"]}


def test_parse_type_reads_what_kernels_take_from_python():
    import numba
    import numpy as np

    from pushmask.core import jit

    values = [np.zeros(3, np.int32), np.zeros((2, 2), np.uint8)[:, 0], np.zeros((2, 2), np.float64), 7, True, 0.5]
    for value in values:
        assert jit.parse_type(str(numba.typeof(value))) == numba.typeof(value)
    for text in ("Literal[int](0)", "UniTuple(int64 x 2)", "none", "array(int32, 1d, C) ", "print"):
        with pytest.raises(ValueError):
            jit.parse_type(text)


AHEAD = textwrap.dedent("""
    import json, time
    from pathlib import Path
    import toy_kernels, toy_square

    toy_square.square(3)  # the first compile of the process starts the compile workers
    deadline = time.monotonic() + 300
    cache = Path(__import__("os").environ["NUMBA_CACHE_DIR"])
    while not list(cache.rglob("toy_kernels.triangle-*.nbi")) and time.monotonic() < deadline:
        time.sleep(0.2)
    stats = toy_kernels.triangle.stats
    result = toy_kernels.triangle(10)
    print(json.dumps({"result": result, "hits": sum(stats.cache_hits.values()),
                      "misses": sum(stats.cache_misses.values())}))
""")


def test_compile_workers_compile_the_first_mask_ahead(toy, tmp_path):
    """No prepared kernels: at its first compile a process starts a worker that compiles the
    manifest's first-mask signatures into numba's cache (skipping those it can't), and the process
    loads them from there instead of compiling."""
    from pushmask.core import jit

    if jit._cores() < 2:
        pytest.skip("one core: no compile worker")
    src, _ = toy
    (tmp_path / "src").mkdir()
    shutil.copy(src / "toy_kernels.py", tmp_path / "src")
    (tmp_path / "src" / "toy_square.py").write_text(KERNEL.replace("triangle", "square"))
    empty = tmp_path / "no-prepared"
    empty.mkdir()
    first_mask = [["toy_kernels:triangle", ["int64"]], ["toy_kernels:gone", ["int64"]], ["toy_kernels:triangle", ["?"]]]
    (empty / f"prepared-{jit.PYTHON_TAG}.json").write_text(json.dumps({"first_mask": first_mask}))
    out, _ = _run(AHEAD, prepared=empty, cache=tmp_path / "cache", path=tmp_path / "src")
    assert out == {"result": 45, "hits": 1, "misses": 0}


ORPHAN = textwrap.dedent("""
    import time
    import pushmask.core.jit as jit
    import toy_square

    toy_square.square(3)  # the first compile starts the worker
    print(jit.compile_ahead.workers[0].pid, flush=True)
    time.sleep(600)
""")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] in "ZX"
    except FileNotFoundError:
        return True


def test_a_compile_worker_ends_with_its_parent(toy, tmp_path):
    """The parent is killed while its worker has many signatures left: the worker exits within
    seconds instead of compiling on."""
    from pushmask.core import jit

    if jit._cores() < 2 or not Path("/proc/self/stat").exists():
        pytest.skip("needs two cores and /proc")
    src, _ = toy
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "toy_square.py").write_text(KERNEL.replace("triangle", "square"))
    (tmp_path / "src" / "toy_same.py").write_text(
        "from pushmask.core.jit import njit\n\n@njit(cache=True)\ndef same(x):\n    return x\n"
    )
    dtypes = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"]
    signatures = [[f"array({dtype}, {ndim}d, {layout})"] for dtype in dtypes for ndim in (1, 2, 3) for layout in "CFA"]
    empty = tmp_path / "no-prepared"
    empty.mkdir()
    manifest = {"first_mask": [["toy_same:same", arg_types] for arg_types in signatures]}
    (empty / f"prepared-{jit.PYTHON_TAG}.json").write_text(json.dumps(manifest))
    environ = dict(
        os.environ,
        PUSHMASK_KERNEL_CACHE=str(empty),
        PYTHONPATH=str(tmp_path / "src"),
        NUMBA_CACHE_DIR=str(tmp_path / "c"),
    )
    environ.pop("NUMBA_CPU_NAME", None)
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], env=environ, stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(worker)
    assert len(list((tmp_path / "c").rglob("toy_same.same-*.nbc"))) < len(signatures)
