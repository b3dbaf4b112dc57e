"""A persistent mask cache on disk, shared by processes and restarts (opt-in).

Masks depend on the tokenizer and on what the mask key says (a state's structure and its rule's
follow pairs), so a mask computed once serves every later process that meets the same state:
restarts of a server and repeated schemas, not new ones.  One file per mask:

    <dir>/v<FORMAT_VERSION>/<tokenizer fingerprint>/<key[:2]>/<key>.mask

A file is a header (magic, format version, payload length, blake2b checksum of the payload) and
the payload: int64 (kind, num_accepted, then the lengths of the StateMask's int32 parts) and the
parts.  Writes go to a temporary file in the same folder and are renamed into place, so a reader
sees a whole file or none; a file that fails its checks (truncated, corrupted, another version)
is deleted and the mask recomputed.  Past `max_bytes` the least recently used files (by mtime,
refreshed on every hit) are evicted down to 90% of the cap.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from pathlib import Path

import numpy as np

from ..grammar.core.errors import InvalidArgumentError
from .mask_cache import StateMask

FORMAT_VERSION = 1
"""Bump when the file layout or what a mask means (trie order, slices, walk semantics) changes."""

ENV_DIR = "PUSHMASK_MASK_CACHE_DIR"
ENV_MAX_BYTES = "PUSHMASK_MASK_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30

_MAGIC = b"PMMASK\x00\x01"
_HEADER = struct.Struct("<8sIQ16s")  # magic, format version, payload length, checksum
_PARTS = 4  # StateMask.parts


class DiskMaskCache:
    """Masks on disk for one tokenizer (fingerprint) under `directory`."""

    def __init__(self, directory: str | os.PathLike, fingerprint: str, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes <= 0:
            raise InvalidArgumentError(f"max_bytes must be positive, got {max_bytes}")
        self.root = Path(directory) / f"v{FORMAT_VERSION}" / fingerprint
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.hits = self.writes = self.rejected = self.evicted = 0
        self._bytes = self._scan_bytes()

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
        path = self._path(key)
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        mask = _decode(blob)
        if mask is None:
            self.rejected += 1
            _remove(path)
            return None
        self.hits += 1
        try:
            os.utime(path)  # recently used: evicted last
        except OSError:
            pass
        return mask

    def put(self, key: tuple[str, str], mask: StateMask) -> None:
        path = self._path(key)
        blob = _encode(mask)
        try:
            path.parent.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except OSError:
            return  # a full or read-only disk only costs the cache
        self.writes += 1
        self._bytes += len(blob)
        if self._bytes > self.max_bytes:
            self._evict()

    def _files(self) -> list[Path]:
        return [p for p in self.root.glob("*/*.mask")]

    def _scan_bytes(self) -> int:
        total = 0
        for p in self._files():
            try:
                total += p.stat().st_size
            except OSError:
                pass
        return total

    def _evict(self) -> None:
        """Remove the least recently used files until the folder is under 90% of the cap (other
        processes may write meanwhile: the figure is re-read from the folder)."""
        entries = []
        for p in self._files():
            try:
                st = p.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, p))
        entries.sort()
        total = sum(size for _, size, _ in entries)
        target = int(0.9 * self.max_bytes)
        for _, size, p in entries:
            if total <= target:
                break
            if _remove(p):
                self.evicted += 1
            total -= size
        self._bytes = total

    def total_bytes(self) -> int:
        return self._scan_bytes()


def _encode(mask: StateMask) -> bytes:
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
    return StateMask(int(head[0]), *parts, num_accepted=int(head[1]))


def _remove(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False
