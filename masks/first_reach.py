"""The kernel states a grammar's first tokens reach, found at compile so that their masks are
ready before a new request's second batch step needs them (CompiledGrammar.ensure_first_masks).

A server's first step after a new request is cheap (the start states' masks are computed at
compile), but the step after it is not: every new row enters states no fill has visited, all in
the same step.  Those states are the kernels of the start stack set advanced over each token it
accepts; thousands of tokens lead to a handful of states (``{"`` and `` {"`` to the same
member-name states, every whitespace token to one), so one kernel call walks the token trie from
the start stacks, sharing each prefix's steps among the tokens under it as the mask walks do
(masks/walk.py), and keeps each kernel state once.

Only the first token: after two, the states are as many as the prefixes of the member names.
For the 64 schemas of benchmarks/serve_batch.py, the states after one token are 355 (their
masks 80-90 ms of CPU, which the rows' second step then finds ready: it visits 221 of them),
those after two another 3,181 (374 ms more, of which the rows visit about 140).

The budget.  A mask computed here costs the compile what it would cost the step (the same
kernel), but at the step every row of the batch waits for it; so a state is worth computing when
the chance that the request visits it is not small, and the budget only keeps a grammar whose
first tokens reach many states, or states whose masks are slow (a counted repetition's take a
few ms each), from adding much to its compile.  Measured on MaskBench dev schemas (llama3, every
56th of them): 4 states at the median, 8 at p90, 31 at most, adding 0.9 ms to a compile at the
median, 1.4 at p90, 3.8 at most.
"""

from __future__ import annotations

import numpy as np

from ..automata.kernels import (
    ERR_BUFFER_FULL,
    ERR_TOO_MANY_TOPS,
    WS_HEADER,
    closure,
    has_epsilon,
    step_byte,
    ws_buffer_p,
)
from ..core.jit import njit
from .trie import TRIE_HEADER

MAX_STATES = 32
"""The most states whose masks a compile computes this way (0: none): every dev schema's."""
MAX_SECONDS = 0.01
"""The CPU seconds (of the compiling thread) after which no more chunks of masks are computed:
more than any dev schema needs, about half a typical schema's whole compile."""
FIRST_CHUNK = 1
"""States whose masks are computed before the time spent is looked at (one mask may take a few
ms: a counted repetition's)."""
MAX_STEPS = 1 << 13
"""The most byte steps the walk takes (about 0.3 ms): a dev schema's walk takes 1,400 at the
median and 3,800 at most; a grammar whose start takes most of the vocabulary (free text) stops
there, the tokens walked by then having shown the few states they all lead to."""


def next_chunk(done: int, seconds: float) -> int:
    """How many more states' masks to compute after `done` of them took `seconds` of CPU: what
    the rest of MAX_SECONDS fits at the cost per state so far (0: stop, none would fit)."""
    left = MAX_SECONDS - seconds
    if left <= 0:
        return 0
    return int(left * done / seconds) if seconds > 0 else done


FR_FOUND, FR_STEPS = range(2)
"""run_first_reach's counts: states found, byte steps taken."""


@njit(cache=True, nogil=True)
def run_first_reach(pda, pool, ws, stacks, trie, token_ids, max_tops, max_steps, seen, found, counts):
    """Walk the token trie (blob and ids of one order, masks/trie.py) from the closed packed
    stack set `stacks` (kernels.run_advance's layout) and append to `found` each kernel state
    straight after a whole token that is not marked in `seen` (one byte per PDA state), marking
    it.  Stops when `found` is full or counts[FR_STEPS] reaches max_steps.  Returns 0, or an
    ERR_* status (make room and call again: it walks again, `seen` keeping what it found).  A
    prefix too ambiguous to follow (max_tops) is not followed: its fill will say so."""
    bs = WS_HEADER
    size = ws[1]
    n_positions = trie[0]
    lcp = TRIE_HEADER + n_positions + 1
    tok_bytes = lcp + n_positions
    next_lower = tok_bytes + trie[1]
    lv_start = np.zeros(ws[2], dtype=np.int64)  # per depth: the level's stacks in the buffer,
    lv_n = np.zeros(ws[2], dtype=np.int64)  # their number
    lv_kernel = np.zeros(ws[2], dtype=np.int64)  # and how many of them are the kernel
    n = stacks.shape[0] // 2
    if n > size:
        return ERR_BUFFER_FULL
    bp = ws_buffer_p(ws)
    for i in range(n):
        ws[bs + i] = stacks[i]
        ws[bp + i] = stacks[n + i]
    lv_n[0] = n
    n_found = counts[FR_FOUND]
    steps = counts[FR_STEPS]
    built = 0
    i = 0
    while i < n_positions and n_found < found.shape[0] and steps < max_steps:
        t0 = trie[TRIE_HEADER + i]
        length = trie[TRIE_HEADER + i + 1] - t0
        built = min(built, trie[lcp + i], length)
        d = built
        m = 0
        while d < length and lv_n[d] > 0:
            src = lv_start[d]
            n = lv_n[d]
            dst = src + n
            if dst + n > size:
                m = ERR_BUFFER_FULL
                break
            m = step_byte(pda, ws, src, n, trie[tok_bytes + t0 + d], dst)
            kernel = m
            if m > 1 or (m == 1 and has_epsilon(pda, ws[bs + dst])):
                m, _, kernel = closure(pda, pool, ws, dst, m, max_tops, 0)
                if m == ERR_TOO_MANY_TOPS:
                    m = 0
                elif m < 0:
                    break
            steps += 1
            d += 1
            lv_start[d] = dst
            lv_n[d] = m
            lv_kernel[d] = kernel
        if m < 0:  # make room: what was found so far stays found
            counts[FR_FOUND] = n_found
            counts[FR_STEPS] = steps
            return m
        built = d
        i += 1
        if d == length and lv_n[d] > 0:
            for k in range(lv_kernel[d]):
                s = ws[bs + lv_start[d] + k]
                if seen[s] == 0 and n_found < found.shape[0]:
                    seen[s] = 1
                    found[n_found] = s
                    n_found += 1
        else:  # the prefix of d bytes is dead: skip the tokens under it
            while i < n_positions and trie[lcp + i] >= d:
                i = trie[next_lower + i]
    counts[FR_FOUND] = n_found
    counts[FR_STEPS] = steps
    return 0


def reached_states(runner, trie, stacks: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """The kernel states (not marked in `seen`, which this marks) that the packed closed stack
    set `stacks` reaches over each token of the trie, at most MAX_STATES of them, walking at most
    MAX_STEPS byte steps; int64, in the trie order of the first token that reaches each."""
    found = np.empty(MAX_STATES, dtype=np.int64)
    counts = np.zeros(2, dtype=np.int64)
    while True:
        status = run_first_reach(
            runner.pda.blob,
            runner.pool.blob,
            runner.ws.blob,
            stacks,
            trie.blob,
            trie.token_ids,
            runner.limits.max_stack_tops,
            MAX_STEPS,
            seen,
            found,
            counts,
        )
        if status == 0:
            return found[: counts[FR_FOUND]]
        runner.handle(status)
