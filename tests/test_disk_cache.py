"""The persistent mask cache: masks served from disk equal freshly computed ones, across
processes writing at once; damaged files are rejected and recomputed; a format bump starts a new
cache; eviction keeps the folder under its cap, least recently used first, in batches, also with two
processes or several threads writing at once; an evicted mask is a miss, never a wrong mask."""

from __future__ import annotations

import multiprocessing
import os
import threading

import numpy as np
import pytest
from support import hf_tokenizer, tokenizer_info

import pushmask as pm
from pushmask.masks import disk_cache

SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "string", "maxLength": 4}, "b": {"type": "integer"}},
        "required": ["a"],
    },
    {"type": "array", "items": {"enum": ["x", "yz", 3]}},
]
TEXTS = ['{"a": "héé", "b": -12}', '["x", 3, "yz"]']


def _fills(compiler: pm.GrammarCompiler) -> list[np.ndarray]:
    """The bitmask before every token of TEXTS (smollm2 tokens) under each schema."""
    tokenizer = hf_tokenizer("smollm2")
    out = []
    for schema, text in zip(SCHEMAS, TEXTS):
        matcher = pm.GrammarMatcher(compiler.compile_json_schema(schema))
        bitmask = pm.allocate_token_bitmask(1, matcher.vocab_size)
        for token in tokenizer.encode(text, add_special_tokens=False):
            matcher.fill_next_token_bitmask(bitmask)
            out.append(np.asarray(bitmask)[0].copy())
            assert matcher.accept_token(token)
    return out


@pytest.fixture(scope="module")
def reference() -> list[np.ndarray]:
    return _fills(pm.GrammarCompiler(tokenizer_info("smollm2"), cache_enabled=False))


def _mask_files(directory) -> list:
    return sorted(p for p in directory.rglob("*.mask"))


def test_masks_from_disk_equal_fresh_ones(tmp_path, reference):
    first = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path)
    assert all(np.array_equal(a, b) for a, b in zip(_fills(first), reference))
    written = first.cache_stats()["disk_writes"]
    assert written > 0 and len(_mask_files(tmp_path)) == written
    second = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path)  # a restart
    assert all(np.array_equal(a, b) for a, b in zip(_fills(second), reference))
    stats = second.cache_stats()
    assert stats["disk_hits"] == written and stats["disk_writes"] == 0


def test_environment_variable_enables_it(tmp_path, monkeypatch):
    monkeypatch.setenv(disk_cache.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(disk_cache.ENV_MAX_BYTES, "123456")
    compiler = pm.GrammarCompiler(tokenizer_info("smollm2"))
    assert compiler.disk_cache is not None and compiler.disk_cache.max_bytes == 123456
    monkeypatch.setenv(disk_cache.ENV_MAX_BYTES, "lots")
    with pytest.raises(ValueError, match="PUSHMASK_MASK_CACHE_MAX_BYTES"):
        pm.GrammarCompiler(tokenizer_info("smollm2"))
    monkeypatch.delenv(disk_cache.ENV_DIR)
    assert pm.GrammarCompiler(tokenizer_info("smollm2")).disk_cache is None


def _worker(directory: str) -> None:
    _fills(pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=directory))


def test_two_processes_writing_at_once(tmp_path, reference):
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_worker, args=(str(tmp_path),)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(300)
        assert w.exitcode == 0
    files = _mask_files(tmp_path)
    assert files and not list(tmp_path.rglob(".tmp-*"))  # no torn or stray temporary files
    for path in files:
        assert disk_cache._decode(path.read_bytes()) is not None, path
    third = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path)
    assert all(np.array_equal(a, b) for a, b in zip(_fills(third), reference))
    assert third.cache_stats()["disk_writes"] == 0


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "version"])
def test_damaged_files_are_rejected_and_recomputed(tmp_path, reference, damage):
    _fills(pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path))
    files = _mask_files(tmp_path)
    for path in files:
        blob = bytearray(path.read_bytes())
        if damage == "truncate":
            blob = blob[: len(blob) - 3]
        elif damage == "flip":
            blob[-1] ^= 0x40
        elif damage == "empty":
            blob = b""
        else:
            blob[8:12] = (disk_cache.FORMAT_VERSION + 1).to_bytes(4, "little")
        path.write_bytes(bytes(blob))
    again = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path)
    assert all(np.array_equal(a, b) for a, b in zip(_fills(again), reference))
    stats = again.cache_stats()
    assert stats["disk_hits"] == 0 and stats["disk_rejected"] == len(files) == stats["disk_writes"]
    assert all(disk_cache._decode(p.read_bytes()) is not None for p in _mask_files(tmp_path))


def test_a_format_bump_starts_a_new_cache(tmp_path, reference, monkeypatch):
    _fills(pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path))
    monkeypatch.setattr(disk_cache, "FORMAT_VERSION", disk_cache.FORMAT_VERSION + 1)
    bumped = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path)
    assert all(np.array_equal(a, b) for a, b in zip(_fills(bumped), reference))
    assert bumped.cache_stats()["disk_hits"] == 0
    assert {p.name for p in tmp_path.iterdir()} == {
        f"v{disk_cache.FORMAT_VERSION - 1}",
        f"v{disk_cache.FORMAT_VERSION}",
    }


@pytest.fixture(scope="module")
def stored_masks(tmp_path_factory) -> list:
    """The masks a disk cache stores while TEXTS are filled: real sizes and kinds."""
    directory = tmp_path_factory.mktemp("stored")
    _fills(pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=directory))
    return [disk_cache._decode(p.read_bytes()) for p in _mask_files(directory)]


def _same(a, b) -> bool:
    return (a.kind, a.num_accepted) == (b.kind, b.num_accepted) and all(map(np.array_equal, a.parts, b.parts))


def _file_bytes(mask) -> int:
    return len(disk_cache._encode(mask))


def test_eviction_keeps_the_cap_least_recently_used_first(tmp_path):
    compiler = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path)
    _fills(compiler)
    files = _mask_files(tmp_path)
    total = sum(p.stat().st_size for p in files)
    cache = compiler.disk_cache
    for i, path in enumerate(files):  # an order of use: the last file is the most recent
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    keep = files[0]
    os.utime(keep, (2_000_000, 2_000_000))  # used again just now
    cache.max_bytes = total // 2
    cache._scan_and_evict()
    left = _mask_files(tmp_path)
    assert sum(p.stat().st_size for p in left) <= disk_cache.LOW_WATER * cache.max_bytes
    assert keep in left and files[1] not in left  # the oldest went first
    assert cache.evicted == len(files) - len(left)


def test_many_writes_stay_under_the_cap_with_few_scans(tmp_path, stored_masks, monkeypatch):
    """Writes past the cap evict by themselves, one process keeping the folder under the low-water
    mark plus a slice; the folder is scanned once per slice of writes, not on every write."""
    sizes = [_file_bytes(m) for m in stored_masks]
    cache = disk_cache.DiskMaskCache(tmp_path, "fp", max_bytes=4 * sum(sizes))
    scans = []
    scan = cache._scan_and_evict
    monkeypatch.setattr(cache, "_scan_and_evict", lambda: scans.append(1) or scan())
    written = 0
    for k in range(20 * len(stored_masks)):
        mask = stored_masks[k % len(stored_masks)]
        cache.put((str(k), "x"), mask)
        written += _file_bytes(mask)
        assert cache.total_bytes() < (disk_cache.LOW_WATER + disk_cache.SLICE) * cache.max_bytes
    assert cache.evicted > 0 and written > 3 * cache.max_bytes
    assert 0 < len(scans) <= written / (disk_cache.SLICE * cache.max_bytes)
    assert len(_mask_files(tmp_path)) == cache.writes - cache.evicted


def test_reads_after_eviction_miss_never_a_wrong_mask(tmp_path, reference):
    uncapped = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path / "all")
    _fills(uncapped)
    total = sum(p.stat().st_size for p in _mask_files(tmp_path / "all"))
    capped = pm.GrammarCompiler(
        tokenizer_info("smollm2"), mask_cache_dir=tmp_path / "capped", mask_cache_max_bytes=total // 3
    )
    assert all(np.array_equal(a, b) for a, b in zip(_fills(capped), reference))
    assert capped.cache_stats()["disk_evicted"] > 0
    restart = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path / "capped")  # uncapped
    assert all(np.array_equal(a, b) for a, b in zip(_fills(restart), reference))
    stats, masks = restart.cache_stats(), uncapped.cache_stats()["disk_writes"]
    assert 0 < stats["disk_hits"] < masks and stats["disk_writes"] == masks - stats["disk_hits"]
    assert stats["disk_rejected"] == 0


def _capped_writer(directory: str, cap: int, masks: list, seed: int, failures) -> None:
    """Write and read back masks of one key space with another process: key k holds masks[k % n]."""
    cache = disk_cache.DiskMaskCache(directory, "fp", cap)
    rng = np.random.default_rng(seed)
    for _ in range(600):
        k = int(rng.integers(4 * len(masks)))
        cache.put((str(k), "x"), masks[k % len(masks)])
        j = int(rng.integers(4 * len(masks)))
        mask = cache.get((str(j), "x"))
        if mask is not None and not _same(mask, masks[j % len(masks)]):
            failures.put(j)


def test_two_processes_writing_to_one_capped_folder(tmp_path, stored_masks):
    cap = sum(map(_file_bytes, stored_masks))  # a quarter of the key space fits
    context = multiprocessing.get_context("fork")
    failures = context.Queue()
    workers = [
        context.Process(target=_capped_writer, args=(str(tmp_path), cap, stored_masks, seed, failures))
        for seed in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    assert failures.empty()  # no read gave a mask other than its key's
    cache = disk_cache.DiskMaskCache(tmp_path, "fp", cap)
    assert 0 < cache.total_bytes() <= cap
    for path in _mask_files(tmp_path):
        assert disk_cache._decode(path.read_bytes()) is not None, path
    assert not list(tmp_path.rglob(".tmp-*"))


def test_threads_sharing_one_cache(tmp_path, stored_masks):
    """Threads writing and reading one capped cache at once: every write and hit counted, every
    read the right mask, the folder's files exactly those written and not evicted."""
    n = len(stored_masks)
    cache = disk_cache.DiskMaskCache(tmp_path, "fp", max_bytes=sum(map(_file_bytes, stored_masks)) // 2)
    wrong, hits = [], []

    def work(thread: int) -> None:
        found = 0
        for k in range(thread * n, (thread + 1) * n):
            cache.put((str(k), "x"), stored_masks[k % n])
            j = k - n // 2
            mask = cache.get((str(j), "x"))
            if mask is not None:
                found += 1
                if not _same(mask, stored_masks[j % n]):
                    wrong.append(j)
        hits.append(found)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and cache.evicted > 0
    assert cache.writes == 4 * n and cache.hits == sum(hits)
    assert len(_mask_files(tmp_path)) == cache.writes - cache.evicted
    assert not list(tmp_path.rglob(".tmp-*"))


def test_failed_writes_and_stale_temporary_files_leave_nothing(tmp_path, stored_masks, monkeypatch):
    cache = disk_cache.DiskMaskCache(tmp_path, "fp", max_bytes=10 * _file_bytes(stored_masks[0]))
    stale = tmp_path / "v1" / "fp" / "ab" / ".tmp-dead"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a mask")
    os.utime(stale, (1_000_000, 1_000_000))  # a writer that died long ago
    fresh = stale.with_name(".tmp-live")
    fresh.write_bytes(b"being written")

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(disk_cache.os, "replace", refuse)
    cache.put(("a", "x"), stored_masks[0])
    assert cache.writes == 0 and cache.get(("a", "x")) is None
    assert {p.name for p in tmp_path.rglob(".tmp-*")} == {".tmp-dead", ".tmp-live"}
    cache.total_bytes()  # a scan
    assert {p.name for p in tmp_path.rglob(".tmp-*")} == {".tmp-live"}
