"""The persistent mask cache: masks served from disk equal freshly computed ones, across
processes writing at once; damaged files are rejected and recomputed; a format bump starts a new
cache; eviction keeps the folder under its cap, least recently used first."""

from __future__ import annotations

import multiprocessing
import os

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


def test_eviction_keeps_the_cap_least_recently_used_first(tmp_path):
    compiler = pm.GrammarCompiler(tokenizer_info("smollm2"), mask_cache_dir=tmp_path)
    _fills(compiler)
    files = _mask_files(tmp_path)
    sizes = {p: p.stat().st_size for p in files}
    masks = [disk_cache._decode(p.read_bytes()) for p in files]
    total = sum(sizes.values())
    cache = compiler.disk_cache
    for i, path in enumerate(files):  # an order of use: the last file is the most recent
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    keep = files[0]
    os.utime(keep, (2_000_000, 2_000_000))  # used again just now
    cache.max_bytes = total // 2
    cache._evict()
    left = _mask_files(tmp_path)
    assert sum(p.stat().st_size for p in left) <= 0.9 * cache.max_bytes
    assert keep in left and files[1] not in left  # the oldest went first
    assert cache.evicted == len(files) - len(left)
    # writes past the cap evict by themselves
    small = disk_cache.DiskMaskCache(tmp_path / "small", "fp", max_bytes=3 * max(sizes.values()))
    for k, mask in enumerate(masks):
        small.put((str(k), "x"), mask)
        assert small.total_bytes() <= small.max_bytes
    assert small.evicted > 0
