"""`paused_gc()`: the cyclic garbage collector paused for the length of a compile.

A compile allocates millions of small objects (IR nodes, NFA edge lists, memo tuples) that never
form cycles, and each collection rescans all of them: on a 10,000-property schema that costs a
third of the compile.  Reference counting still frees everything; cycles made meanwhile wait
for the next collection after the pause.  Pauses nest and may overlap across threads: the
collector resumes when the last one ends, and only if it was running when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_active_pauses = 0
_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    global _active_pauses, _was_enabled
    with _lock:
        if _active_pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _active_pauses += 1
    try:
        yield
    finally:
        with _lock:
            _active_pauses -= 1
            if _active_pauses == 0 and _was_enabled:
                gc.enable()
