"""Raw memory for kernels: arrays viewed from their addresses (a table of rows naming arrays by
address is how one numba call reaches many grammars' arrays; `Record` declares such a row), memory-order intrinsics, and a
lock that numba kernels and Python share: one int64 word, taken with an atomic compare-and-swap.  A grammar's mask store is written under it, by a batch fill's kernel that meets
a state without a mask (masks/batch_fill.py) as by Python's first visits (masks/state_masks.py),
so neither waits for the other to come back to Python.  Kernels only try it (a row whose grammar
is busy goes back to Python); Python waits for it, yielding the GIL between tries.

`release_fence` keeps a mask's words ahead of the kind that publishes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.extending import intrinsic

from ..core.jit import njit

_WORD = ir.IntType(64)


def pointer_intrinsic(dtype):
    """An intrinsic that views an int64 address as a pointer to `dtype` (carray's argument)."""

    @intrinsic
    def as_pointer(typingctx, address):
        sig = types.CPointer(dtype)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(types.CPointer(dtype)))

        return sig, codegen

    return as_pointer


u8_pointer = pointer_intrinsic(types.uint8)
i32_pointer = pointer_intrinsic(types.int32)
i64_pointer = pointer_intrinsic(types.int64)


@dataclass(frozen=True)
class Array:
    """A Record field of two columns: an array's address, then its length (its first dimension)."""

    name: str


class Record:
    """The layout of a row of an int64 address table: its fields in order, each one column but an
    Array's two (address, then length, read together by i32_array / i64_array and written
    together by put_array, so that no reader pairs an address with another array's length).

    A module binds the columns to plain ints by unpacking the record, then checks the names:

        ROW = Record("ROW_", "template", Array("stacks"), "can_end")
        ROW_TEMPLATE, ROW_STACKS, ROW_CAN_END = ROW
        ROW.check(globals())  # ROW_STACKS is column 1 (its length column 2); ROW.size == 4

    Kernels index rows with those ints, which numba freezes as compile-time constants."""

    def __init__(self, prefix: str, *fields: str | Array):
        self.prefix = prefix
        self.columns: dict[str, int] = {}
        self.arrays: frozenset[str] = frozenset(f.name for f in fields if isinstance(f, Array))
        size = 0
        for field in fields:
            name = field.name if isinstance(field, Array) else field
            self.columns[name] = size
            size += 2 if isinstance(field, Array) else 1
        self.size = size
        """Columns of a row."""

    def __iter__(self) -> Iterator[int]:
        """The fields' first columns, in order (for unpacking into the module's constants)."""
        return iter(self.columns.values())

    def check(self, namespace: Mapping[str, object]) -> None:
        """Raise unless `namespace` binds prefix + NAME to each field's column."""
        for name, column in self.columns.items():
            if namespace.get(self.prefix + name.upper()) != column:
                raise AssertionError(f"{self.prefix}{name.upper()} is not column {column} of {self!r}")

    def __repr__(self) -> str:
        fields = (
            f"{column}-{column + 1} {name} (address, length)" if name in self.arrays else f"{column} {name}"
            for name, column in self.columns.items()
        )
        return f"Record({self.prefix}*: {', '.join(fields)})"


def put_array(row: np.ndarray, field: int, array: np.ndarray) -> None:
    """Name `array` in an Array field of an int64 table row: its address, then its length."""
    row[field] = array.ctypes.data
    row[field + 1] = len(array)


@njit(cache=True, inline="always")
def i32_array(row, field):
    """The int32 array that an Array field of an int64 table row names (put_array)."""
    return carray(i32_pointer(row[field]), row[field + 1])


@njit(cache=True, inline="always")
def i64_array(row, field):
    """The int64 array that an Array field of an int64 table row names (put_array)."""
    return carray(i64_pointer(row[field]), row[field + 1])


@njit(cache=True, inline="always")
def i32_rows(row, field, width):
    """The int32 [length, width] array that an Array field of an int64 table row names (its
    length: the rows)."""
    return carray(i32_pointer(row[field]), (row[field + 1], width))


@njit(cache=True)
def address(array):
    """Where an array's data lies: one numba call costs a fifth of `array.ctypes.data`."""
    return array.ctypes.data


@intrinsic
def release_fence(typingctx):
    """A release fence: the stores before it are seen by other threads before those after it
    (the compiler may not move them across it either)."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        builder.fence("release")
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _compare_and_swap(typingctx, address, expected, new):
    """The int64 at `address` before an atomic "if it is `expected`, make it `new`"."""
    sig = types.int64(types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], _WORD.as_pointer())
        pair = builder.cmpxchg(pointer, args[1], args[2], "acq_rel", "acquire")
        return builder.extract_value(pair, 0)

    return sig, codegen


@intrinsic
def _store_release(typingctx, address, value):
    """Store `value` at `address` (an int64), after every store before it."""
    sig = types.void(types.int64, types.int64)

    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], _WORD.as_pointer())
        builder.store_atomic(args[1], pointer, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _fetch_add(typingctx, address, value):
    """Atomically add `value` to the int64 at `address`; the value before."""
    sig = types.int64(types.int64, types.int64)

    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], _WORD.as_pointer())
        return builder.atomic_rmw("add", pointer, args[1], "monotonic")

    return sig, codegen


@njit(cache=True, inline="always")
def take_next(counter):
    """The next item of work that threads share by a counter (an int64 array of one): each call,
    on any thread, gets a different one (0, 1, 2, ...)."""
    return _fetch_add(counter.ctypes.data, 1)


@njit(cache=True, nogil=True)
def try_lock(address):
    """Take the lock word at `address` if it is free: True if taken."""
    return _compare_and_swap(address, 0, 1) == 0


@njit(cache=True, nogil=True)
def unlock(address):
    """Free the lock word at `address` (taken by this thread)."""
    _store_release(address, 0)


class KernelLock:
    """The lock word, with threading.Lock's acquire / release / `with` for Python; `address` is
    what a kernel takes it by (try_lock, unlock).  `on_release` runs as Python lets go (still
    holding it): what Python changed under the lock, it republishes there for the kernels."""

    def __init__(self, on_release: Callable[[], None] | None = None):
        self._word = np.zeros(1, dtype=np.int64)
        self.address = self._word.ctypes.data
        self._on_release = on_release

    def acquire(self, blocking: bool = True) -> bool:
        while not try_lock(self.address):
            if not blocking:
                return False
            time.sleep(0)  # the holder is a kernel or another thread: let it run
        return True

    def release(self) -> None:
        try:
            if self._on_release is not None:
                self._on_release()
        finally:
            unlock(self.address)

    def locked(self) -> bool:
        return bool(self._word[0])

    def __enter__(self) -> KernelLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
