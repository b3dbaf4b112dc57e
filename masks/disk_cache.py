"""A persistent mask cache on disk, shared by processes and restarts (opt-in).

Masks depend on the tokenizer and on what the mask key says (a state's structure and its rule's
follow pairs), so a mask computed once serves every later process that meets the same state:
restarts of a server and repeated schemas, not new ones.  One file per mask:

    <dir>/v<FORMAT_VERSION>/<tokenizer fingerprint>/<key[:2]>/<key>.mask

A file is a header (magic, format version, payload length, blake2b checksum of the payload) and
the payload: int64 (kind, num_accepted, then the lengths of the StateMask's int32 parts) and the
parts.  Writes go to a temporary file in the same folder and are renamed into place, so a reader
sees a whole file or none; a file that fails its checks (truncated, corrupted, another version)
is deleted and the mask recomputed.

Eviction, in amortised constant time per write.  The processes sharing a folder share nothing
else: each counts the bytes it has written since it last scanned the folder (listed and stat-ed
every file), and scans again once that reaches a slice (SLICE, 10% of `max_bytes`).  A scan that
finds the folder above the low-water mark (LOW_WATER, 80% of the cap) removes the least recently
used files (by mtime, refreshed on every hit) down to it, in one batch.  A scan costs a stat per
file in the folder and comes once per slice of writes: some ten stats per write (files of about
the same size), whatever the cap.  A process's writes that no scan has seen are less than a
slice, so once each process has scanned, the folder stays under 90% of the cap with one process
writing, under the cap with two, and under the cap plus a slice for each further one (threads of
a process count as one: while one scans, the others' writes wait for the next scan).  The first
scan comes after the first slice, so opening a cache costs no scan.

Safe to share between the threads of a process (the matcher fills rows from several): the
counters and the count of unscanned bytes change under a lock, one thread at a time scans, and
the file operations are atomic.  Safe across processes: a reader whose file is evicted meanwhile
has read it whole (on POSIX an open file outlives its removal; on Windows it is not removed) or
misses; the same holds when another process replaces it.  A scan also removes temporary files older than an hour, left by a writer that died
before its rename.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..core.errors import InvalidArgumentError
from .mask_cache import StateMask

FORMAT_VERSION = 1
"""Bump when the file layout or what a mask means (trie order, slices, walk semantics) changes."""

ENV_DIR = "PUSHMASK_MASK_CACHE_DIR"
ENV_MAX_BYTES = "PUSHMASK_MASK_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30

SLICE = 0.1
"""A process scans the folder after writing this fraction of the cap since its last scan..."""
LOW_WATER = 0.8
"""...and evicts down to this fraction of the cap (so two processes stay under the cap)."""
STALE_TEMPORARY_SECONDS = 3600
"""A temporary file this old is a dead writer's, never to be renamed: a scan removes it."""

_MAGIC = b"PMMASK\x00\x01"
_HEADER = struct.Struct("<8sIQ16s")  # magic, format version, payload length, checksum
_PARTS = 4  # StateMask.parts
_TEMPORARY_PREFIX = ".tmp-"


class DiskMaskCache:
    """Masks on disk for one tokenizer (fingerprint) under `directory`; one per compiler, shared
    by its threads."""

    def __init__(self, directory: str | os.PathLike, fingerprint: str, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes <= 0:
            raise InvalidArgumentError(f"max_bytes must be positive, got {max_bytes}")
        self.root = Path(directory) / f"v{FORMAT_VERSION}" / fingerprint
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.hits = self.writes = self.rejected = self.evicted = 0
        self._lock = threading.Lock()  # guards the counters and the two fields below
        self._unscanned_bytes = 0  # bytes this process wrote since its last scan began
        self._scanning = False  # one thread scans at a time; the others go on writing

    @classmethod
    def from_environment(cls, fingerprint: str) -> DiskMaskCache | None:
        """The cache PUSHMASK_MASK_CACHE_DIR names (PUSHMASK_MASK_CACHE_MAX_BYTES caps it), or None."""
        directory = os.environ.get(ENV_DIR)
        if not directory:
            return None
        raw = os.environ.get(ENV_MAX_BYTES)
        try:
            max_bytes = int(raw) if raw else DEFAULT_MAX_BYTES
        except ValueError:
            raise InvalidArgumentError(f"{ENV_MAX_BYTES} must be an integer number of bytes, got {raw!r}") from None
        return cls(directory, fingerprint, max_bytes)

    def _path(self, key: tuple[str, str]) -> Path:
        name = hashlib.blake2b("|".join(key).encode(), digest_size=20).hexdigest()
        return self.root / name[:2] / f"{name}.mask"

    def get(self, key: tuple[str, str]) -> StateMask | None:
        """The stored mask of `key`, or None (never stored, evicted, or damaged: then removed)."""
        path = self._path(key)
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        mask = _decode(blob)
        if mask is None:
            with self._lock:
                self.rejected += 1
            _remove(path)
            return None
        with self._lock:
            self.hits += 1
        try:
            os.utime(path)  # recently used: evicted last
        except OSError:
            pass
        return mask

    def put(self, key: tuple[str, str], mask: StateMask) -> None:
        """Store `mask` under `key` (a full or read-only disk only costs the cache); after a slice
        of writes, scan the folder and evict."""
        blob = _encode(mask)
        if not _write_atomically(self._path(key), blob):
            return
        with self._lock:
            self.writes += 1
            self._unscanned_bytes += len(blob)
            scan = not self._scanning and self._unscanned_bytes >= SLICE * self.max_bytes
            self._scanning = self._scanning or scan
        if scan:
            self._scan_and_evict()

    def _scan_and_evict(self) -> None:
        """Scan the folder and, above the low-water mark, remove the least recently used files down
        to it (other processes may write and evict meanwhile: a file already gone counts as
        removed)."""
        try:
            with self._lock:  # writes from now on may come too late for the scan: counted anew
                self._unscanned_bytes = 0
            entries = self._scan()
            total = sum(size for _, size, _ in entries)
            removed = 0
            target = LOW_WATER * self.max_bytes
            if total > target:
                entries.sort(key=lambda entry: entry[0])  # least recently used first
                for _, size, path in entries:
                    if total <= target:
                        break
                    try:
                        os.unlink(path)
                        removed += 1
                    except FileNotFoundError:
                        pass  # another process evicted it first
                    except OSError:
                        continue  # still there (open elsewhere, on Windows): still counted
                    total -= size
            with self._lock:
                self.evicted += removed
        finally:
            with self._lock:
                self._scanning = False

    def _scan(self) -> list[tuple[float, int, str]]:
        """(mtime, size, path) of every mask file; stale temporary files are removed on the way.
        Paths stay strings: a scan of thousands of files would spend most of its time making
        Path objects."""
        entries = []
        stale = time.time() - STALE_TEMPORARY_SECONDS
        for folder in _listing(self.root):
            if not folder.is_dir():
                continue
            for entry in _listing(folder.path):
                try:
                    st = entry.stat()
                except OSError:
                    continue  # removed meanwhile
                if entry.name.endswith(".mask"):
                    entries.append((st.st_mtime, st.st_size, entry.path))
                elif entry.name.startswith(_TEMPORARY_PREFIX) and st.st_mtime < stale:
                    _remove(entry.path)
        return entries

    def total_bytes(self) -> int:
        """The bytes of the mask files in the folder now (one scan)."""
        return sum(size for _, size, _ in self._scan())


def _listing(folder: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
    """The entries of `folder`, none if it is gone."""
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return []


def _write_atomically(path: Path, blob: bytes) -> bool:
    """Write `blob` to a temporary file beside `path` and rename it into place, so that readers
    see the whole file or none; False when the disk refused (no temporary file is left)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TEMPORARY_PREFIX)
    except FileNotFoundError:  # the first file of its folder (or the cache was removed): make it
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TEMPORARY_PREFIX)
        except OSError:
            return False
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except OSError:
        _remove(tmp)
        return False
    return True


def _encode(mask: StateMask) -> bytes:
    """The bytes of the file of `mask`: the header, then the payload."""
    parts = mask.parts
    head = np.array([mask.kind, mask.num_accepted, *(len(p) for p in parts)], dtype=np.int64).tobytes()
    payload = head + b"".join(np.ascontiguousarray(p, dtype=np.int32).tobytes() for p in parts)
    checksum = hashlib.blake2b(payload, digest_size=16).digest()
    return _HEADER.pack(_MAGIC, FORMAT_VERSION, len(payload), checksum) + payload


def _decode(blob: bytes) -> StateMask | None:
    """The mask in a file's bytes, or None when they are not a whole, intact file of this version."""
    if len(blob) < _HEADER.size:
        return None
    magic, version, length, checksum = _HEADER.unpack_from(blob)
    payload = blob[_HEADER.size :]
    if magic != _MAGIC or version != FORMAT_VERSION or length != len(payload):
        return None
    if hashlib.blake2b(payload, digest_size=16).digest() != checksum:
        return None
    n_head = 8 * (2 + _PARTS)
    if len(payload) < n_head:
        return None
    head = np.frombuffer(payload[:n_head], dtype=np.int64)
    lengths = head[2:]
    if (lengths < 0).any() or n_head + 4 * int(lengths.sum()) != len(payload):
        return None
    parts, offset = [], n_head
    for n in lengths.tolist():
        parts.append(np.frombuffer(payload[offset : offset + 4 * n], dtype=np.int32).copy())
        offset += 4 * n
    data, positions, ids, lcp = parts  # the _PARTS arrays, in StateMask.parts' order
    return StateMask(int(head[0]), data, positions, ids, lcp, num_accepted=int(head[1]))


def _remove(path: str | os.PathLike) -> None:
    """Remove a file if it can be (gone already, or kept open elsewhere on Windows: no matter)."""
    try:
        os.unlink(path)
    except OSError:
        pass
