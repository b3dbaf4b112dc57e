"""Token budgets: keep a generation of at most N tokens able to finish inside the grammar.

Every PDA state gets `cost`: tokens that surely finish its rule, from its rule's recorded
shortest completion (automata/completion.py) cut into the fewest tokens of the vocabulary,
separately for each run of bytes between rule references (every tokenization of a valid
continuation is accepted: the matcher works on bytes).  A stack costs the sum over its levels
(top, then each frame's return state) and a parse state the least over its stacks (0 once the
input may end).  The costs are consistent: from a parse state of cost c > 0, the first token of
that tokenization leads to one of cost at most c - 1.  With R tokens left, a token is kept when
the state after it costs at most R - 1, so "cost <= tokens left" holds after every step and a
completion always fits.

Checking a token means running its bytes, so most tokens are cleared without it: `byte_rise[b]`
bounds how much one byte b can raise a stack's cost (the byte edge, then epsilon pushes and
pops), and a token's bytes' sum `token_rise[t]` how much t can; a token with
max-stack-cost + token_rise[t] <= R - 1 is kept unchecked (`rising_tokens` finds the others
without reading the mask words whose tokens all rise less: long runs of spaces rise the most).
The others get closer bounds above and below (`refine`: the bytes the top's own rule takes
count exactly, as inside a string), and only those still undecided run through the automaton
(`check_tokens`); bounds and exact costs are kept per stack set.  With a generous budget no
token is checked and the mask is the unbudgeted one bit for bit.

Value checks (uniqueItems, overlapping oneOf) are not in these costs: the shortest completion may
close a duplicate item.  For such grammars `CheckedBudget` also keeps a token only when a
completion that passes the checks fits after it (a short depth-first search, see there).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..automata import kernels
from ..automata.completion import CHOICE_BYTE, CHOICE_END, CHOICE_REF, UNREACHABLE, ShortestCompletions
from ..automata.kernels import FLAG_END, POOL_HEADER
from ..automata.stack import MAX_TOPS, PDA_BLOB, POOL_BLOB, WS_BLOB
from ..core.caches import BoundedCache
from ..core.errors import BudgetTooSmallError
from ..core.jit import njit
from ..grammar.ir import TOKEN_MARK, token_terminal_bytes

if TYPE_CHECKING:  # the compiler's token regions check tokens with this module's kernels
    from .compiler import CompiledGrammar

BOUNDS_MEMO_ENTRIES = 4
"""Stack sets whose per-token bounds a matcher keeps (three int32 per vocabulary token each;
read when the matcher is made: bounds_memo)."""

TERMINAL_BYTES = len(token_terminal_bytes(0))
"""A token terminal's bytes in the automaton: TOKEN_MARK and its id (grammar/ir.py)."""

STORED_MAX = np.int64(2**31 - 1)
"""Costs are stored as int32; anything larger (UNREACHABLE) is stored as this."""


@njit(cache=True)
def _token_lengths(data, n, vocab, offsets, ids, out):
    """Lengths of the tokens (ids sorted by bytes) that are prefixes of data[:n], ascending, into
    `out`; returns how many."""
    lo, hi = 0, ids.shape[0]
    count = 0
    k = 0
    while lo < hi:
        t = ids[lo]
        if offsets[t + 1] - offsets[t] == k:  # the shared prefix itself is a token; it sorts first
            out[count] = k
            count += 1
            lo += 1
        if k >= n or lo >= hi:
            break
        c = data[k]
        a, b = lo, hi
        while a < b:
            m = (a + b) // 2
            if vocab[offsets[ids[m]] + k] < c:
                a = m + 1
            else:
                b = m
        first = a
        b = hi
        while a < b:
            m = (a + b) // 2
            if vocab[offsets[ids[m]] + k] <= c:
                a = m + 1
            else:
                b = m
        lo, hi = first, a
        k += 1
    return count


@njit(cache=True)
def _state_costs(pda, order, kind, arg, nxt, vocab, offsets, ids, max_token_length):
    """Per state, tokens that surely finish its rule (UNREACHABLE where it cannot end).

    Along a state's recorded shortest completion, a run of byte steps inside its rule is cut
    into tokens, each token taken so that the rest costs least; a reference costs the referenced
    rule's start plus the return state.  So from a state of cost c > 0, some token (or epsilon
    move) reaches a stack costing at most c - 1: a budget that covers the cost always fits.
    States come in `order`, after the states their completions lead to."""
    rule_start = kernels.blob_section(pda, kernels.PDA_RULE_START)
    cost = np.full(kind.shape[0], UNREACHABLE, dtype=np.int64)
    run = np.empty(max_token_length, dtype=np.uint8)
    chain = np.empty(max_token_length + 1, dtype=np.int64)
    lengths = np.empty(max_token_length + 1, dtype=np.int64)
    for s in order:
        k = kind[s]
        if k == CHOICE_END:
            cost[s] = 0
        elif k == CHOICE_REF:
            cost[s] = min(cost[rule_start[arg[s]]] + cost[nxt[s]], UNREACHABLE)
        else:
            n = 0
            u = s
            while n < max_token_length and kind[u] == CHOICE_BYTE:
                if arg[u] == TOKEN_MARK and n > 0:
                    break  # text tokens stop before a token terminal
                run[n] = arg[u]
                chain[n] = u
                n += 1
                u = nxt[u]
                if run[0] == TOKEN_MARK and n == TERMINAL_BYTES:
                    break
            chain[n] = u  # chain[j]: the state after the run's first j bytes
            best = UNREACHABLE
            if run[0] == TOKEN_MARK:  # a token terminal: its bytes are one token
                if n == TERMINAL_BYTES:
                    best = 1 + cost[chain[n]]
            else:
                for i in range(_token_lengths(run, n, vocab, offsets, ids, lengths)):
                    if lengths[i] > 0:
                        best = min(best, 1 + cost[chain[lengths[i]]])
            cost[s] = best
    return cost


@njit(cache=True)
def _epsilon_extremes(pda, cost, sign):
    """Per top state v, sign times the most sign * (change of a stack's cost) that epsilon moves
    from v can make (sign 1: the greatest rise, >= 0; sign -1: the greatest fall, <= 0).  A push
    replaces v's level by the callee's start and the return state; a pop removes an accepting
    level (cost 0) and goes on from any return state of the rule's callers.  A fixpoint; none
    within n rounds means a cycle that keeps changing the cost: unbounded."""
    accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start = kernels.pda_views(pda)
    state_rule = kernels.blob_section(pda, kernels.PDA_STATE_RULE)
    returns_ptr = kernels.blob_section(pda, kernels.PDA_RETURNS_PTR)
    returns = kernels.blob_section(pda, kernels.PDA_RETURNS)
    n = accept.shape[0]
    ext = np.zeros(n, dtype=np.int64)
    rounds = 0
    changed = True
    while changed:
        changed = False
        rounds += 1
        if rounds > n + 1:
            ext[:] = UNREACHABLE
            break
        for v in range(n):
            best = ext[v]
            for e in range(ref_ptr[v], ref_ptr[v + 1]):
                callee = rule_start[ref_rule[e]]
                change = cost[callee] + cost[ref_dst[e]] - cost[v]
                best = max(best, min(sign * change + ext[callee], UNREACHABLE))
            if accept[v]:
                rule = state_rule[v]
                for k in range(returns_ptr[rule], returns_ptr[rule + 1]):
                    best = max(best, ext[returns[k]])
            if best > ext[v]:
                ext[v] = best
                changed = True
    return sign * ext


@njit(cache=True)
def _byte_rises(pda, cost, eps):
    """byte_rise[256]: the most one byte can raise a stack's cost (its edge, then the epsilon
    rise `eps` of the state it reaches); see the module docstring."""
    accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start = kernels.pda_views(pda)
    n = accept.shape[0]
    rise = np.full(256, -UNREACHABLE, dtype=np.int64)
    for u in range(n):
        if cost[u] >= UNREACHABLE:
            continue  # a stack through u costs UNREACHABLE: budgeted fills check every token then
        for e in range(byte_ptr[u], byte_ptr[u + 1]):
            v = byte_dst[e]
            step = min(cost[v] - cost[u] + eps[v], UNREACHABLE)
            for b in range(byte_lo[e], byte_hi[e] + 1):
                rise[b] = max(rise[b], step)
    for b in range(256):
        if rise[b] == -UNREACHABLE:
            rise[b] = 0  # no edge takes b: no token with it is ever allowed
    return rise


@njit(cache=True, inline="always")
def _frames_cost(pool, cost, p):
    """Cost of the levels under a top: the return states of frame p and its parents."""
    cap = pool[1]
    total = np.int64(0)
    while p >= 0:
        total += cost[pool[POOL_HEADER + p]]
        p = pool[POOL_HEADER + cap + p]
    return min(total, UNREACHABLE)


@njit(cache=True, inline="always")
def _stack_cost(pool, cost, s, p):
    return min(cost[s] + _frames_cost(pool, cost, p), UNREACHABLE)


@njit(cache=True, nogil=True)
def cost_range(pool, cost, stacks):
    """(least, greatest) cost over a packed stack set (states, then parents)."""
    n = stacks.shape[0] // 2
    lo = UNREACHABLE
    hi = np.int64(0)
    for i in range(n):
        c = _stack_cost(pool, cost, stacks[i], stacks[n + i])
        lo = min(lo, c)
        hi = max(hi, c)
    return lo, hi


@njit(cache=True, nogil=True)
def refine(pda, pool, stacks, cost, eps, eps_fall, byte_rise, token_rise, vocab, offsets, candidates, upper, lower):
    """upper[t] and lower[t] for each candidate t: closer bounds on the cost after t than the
    byte rises give (lower -1: none known).  From each stack whose top takes the token's first
    byte, the bytes its own rule takes count exactly (a step inside the top's DFA changes the
    top's cost only), and the epsilon moves after the last byte within eps_fall .. eps; wherever
    the top may leave its rule (an epsilon move: a reference or an end) before the token ends,
    that path is bounded above by the epsilon rise and the rest of the token's byte rises, and
    not below."""
    byte_ptr = kernels.blob_section(pda, kernels.PDA_BYTE_PTR)
    byte_lo = kernels.blob_section(pda, kernels.PDA_BYTE_LO)
    byte_hi = kernels.blob_section(pda, kernels.PDA_BYTE_HI)
    byte_dst = kernels.blob_section(pda, kernels.PDA_BYTE_DST)
    n = stacks.shape[0] // 2
    tops = np.empty(n, dtype=np.int64)
    below_max = np.empty(n, dtype=np.int64)  # the greatest and least cost of the levels under each distinct top
    below_min = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        s = stacks[i]
        c = _frames_cost(pool, cost, stacks[n + i])
        j = 0
        while j < m and tops[j] != s:
            j += 1
        if j == m:
            tops[m] = s
            below_max[m] = c
            below_min[m] = c
            m += 1
        else:
            below_max[j] = max(below_max[j], c)
            below_min[j] = min(below_min[j], c)
    for k in range(candidates.shape[0]):
        t = candidates[k]
        start, end = offsets[t], offsets[t + 1]
        worst = np.int64(0)
        best = UNREACHABLE
        for j in range(m):
            u = tops[j]
            i = start
            rest = token_rise[t]  # byte rises of the token's bytes from i on
            while i < end:
                v = kernels.find_byte_target(byte_ptr, byte_lo, byte_hi, byte_dst, u, vocab[i])
                if v < 0:
                    break
                rest -= byte_rise[vocab[i]]
                u = v
                i += 1
                if i < end and kernels.has_epsilon(pda, u):
                    worst = max(worst, below_max[j] + cost[u] + eps[u] + rest)
                    best = -1
            if i == end:
                worst = max(worst, below_max[j] + cost[u] + eps[u])
                best = min(best, below_min[j] + cost[u] + eps_fall[u])
        upper[t] = min(worst, STORED_MAX)
        lower[t] = max(min(best, STORED_MAX), -1)


@njit(cache=True, nogil=True)
def check_tokens(pda, pool, ws, stacks, vocab, offsets, candidates, cost, max_tops, exact):
    """exact[t] for each candidate t still at -1: the cost of the parse after t (UNREACHABLE if
    t is rejected).  Returns 0, or an ERR_* status (the caller makes room and calls again; the
    values written stay right)."""
    bp = kernels.ws_buffer_p(ws)
    for i in range(candidates.shape[0]):
        t = candidates[i]
        if exact[t] >= 0:
            continue
        status, offset, n_kernel, n, flags = kernels.advance(
            pda, pool, ws, stacks, vocab, offsets[t], offsets[t + 1], max_tops
        )
        if status < 0:
            return status
        best = UNREACHABLE
        if status == 0:
            if flags & FLAG_END:
                best = 0
            else:
                for j in range(n):
                    s = ws[kernels.WS_HEADER + offset + j]
                    p = ws[bp + offset + j]
                    best = min(best, _stack_cost(pool, cost, s, p))
        exact[t] = min(best, STORED_MAX)
    return 0


@njit(cache=True, nogil=True)
def rising_tokens(words, word_rise, token_rise, has_bytes, slack, out):
    """The allowed tokens (bits of `words`) with bytes and token_rise > slack, ascending, into
    `out`; returns how many.  A word whose tokens all rise at most slack (`word_rise`) is skipped
    without looking at its bits, so a budget that cannot bind costs one pass over the words."""
    n_tokens = token_rise.shape[0]
    count = 0
    for w in range(word_rise.shape[0]):
        bits = words[w]
        if bits == 0 or word_rise[w] <= slack:
            continue
        for b in range(32):
            if bits & (np.int32(1) << np.int32(b)):
                t = w * 32 + b
                if t < n_tokens and has_bytes[t] and token_rise[t] > slack:
                    out[count] = t
                    count += 1
    return count


class _StackSetBounds:
    """What the budget has learnt about the tokens after one stack set (it depends on nothing
    else): refine's bounds and the exact cost (-1: not computed yet), per token id, set only at
    the ids in `known` (sorted): a step meets a handful of candidates, and filling three
    vocabulary-long arrays per new stack set cost more than the rest of the budget.  Inside a
    string consecutive steps keep the same stacks, so a tight stretch computes them once."""

    def __init__(self, vocab_size: int):
        self.upper, self.lower, self.exact = np.empty((3, vocab_size), dtype=np.int32)
        self.known = np.empty(0, dtype=np.int64)

    def unknown(self, candidates: np.ndarray) -> np.ndarray:
        """The candidates (ascending) with nothing set yet; from now on they count as known,
        their exact cost not computed."""
        known = self.known
        at = np.minimum(np.searchsorted(known, candidates), len(known) - 1)
        fresh = candidates[known[at] != candidates] if len(known) else candidates
        if len(fresh):
            self.exact[fresh] = -1
            self.known = np.sort(np.concatenate([known, fresh]))
        return fresh


class BudgetTable:
    """The per-grammar tables of the token budget (see the module docstring), built on first use
    of a budget with a grammar and shared by its matchers."""

    def __init__(self, compiled: CompiledGrammar):
        info = compiled.tokenizer_info
        pda = compiled.pda
        self.completions = ShortestCompletions(pda)
        vocab, offsets = info.flat_vocab()
        self.vocab, self.offsets = vocab, offsets
        kind, arg, nxt = self.completions.choices
        self.cost = _state_costs(
            pda.blob,
            self.completions.order,
            kind,
            arg,
            nxt,
            vocab,
            offsets,
            info.sorted_grammar_token_ids(),
            max(compiled.compiler.trie.max_token_length, TERMINAL_BYTES),
        )
        self.eps = _epsilon_extremes(pda.blob, self.cost, 1)
        self.eps_fall = _epsilon_extremes(pda.blob, self.cost, -1)
        self.byte_rise = _byte_rises(pda.blob, self.cost, self.eps)
        cumulative = np.concatenate([[0], np.cumsum(self.byte_rise[vocab])])
        self.token_rise = cumulative[offsets[1:]] - cumulative[offsets[:-1]]
        self.max_rise = int(self.token_rise.max()) if len(self.token_rise) else 0
        self.has_bytes = np.diff(offsets) > 0  # stop and special tokens have none: never candidates
        # the short tokens a completion search tries (set by its first search: _search_tokens)
        self.search_tokens: np.ndarray | None = None
        # Token terminals are checked one by one by the matcher (restrict_terminals), whatever their text.
        self.has_bytes[list(compiled.token_terminals)] = False
        # Per mask word (32 token ids), the greatest token_rise of its tokens with bytes (-1: none):
        # a few long tokens (runs of spaces) rise far more than the rest, so the table-wide
        # max_rise rarely clears a budget while most words do.
        words = -(-len(self.token_rise) // 32)
        padded = np.full(32 * words, -1, dtype=np.int64)
        padded[: len(self.token_rise)] = np.where(self.has_bytes, self.token_rise, -1)
        self.word_rise = padded.reshape(words, 32).max(axis=1)

    def parse_cost(self, pool_blob: np.ndarray, stacks: np.ndarray, can_end: bool) -> int:
        """Tokens that surely finish the input from a parse state (its packed closed stacks)."""
        return 0 if can_end else int(cost_range(pool_blob, self.cost, stacks)[0])

    def restrict(
        self, words: np.ndarray, stacks: np.ndarray, remaining: int, runner, stop_ids: np.ndarray, memo: BoundedCache
    ) -> None:
        """Clear the allowed tokens (bits of `words`) after which the parse would cost more than
        remaining - 1 tokens; stop tokens stay as they are.  `memo`: the caller's per-stack-set
        _StackSetBounds (bounds_memo(); frame ids belong to one runner's pool)."""
        limit = remaining - 1
        if limit < 0:
            stops = words.copy()
            words[:] = 0
            for t in stop_ids.tolist():
                words[t >> 5] |= stops[t >> 5] & (np.int32(1) << np.int32(t & 31))
            return
        greatest = int(cost_range(runner.pool.blob, self.cost, stacks)[1])
        slack = limit - greatest
        if self.max_rise <= slack:
            return
        out = np.empty(len(self.token_rise), dtype=np.int64)
        candidates = out[: rising_tokens(words, self.word_rise, self.token_rise, self.has_bytes, slack, out)]
        if not len(candidates):
            return
        known = memo.get_or_make(stacks.tobytes(), lambda: _StackSetBounds(len(self.token_rise)))
        fresh = known.unknown(candidates)
        if len(fresh):
            refine(
                runner.pda.blob,
                runner.pool.blob,
                stacks,
                self.cost,
                self.eps,
                self.eps_fall,
                self.byte_rise,
                self.token_rise,
                self.vocab,
                self.offsets,
                fresh,
                known.upper,
                known.lower,
            )
        over = candidates[known.lower[candidates] > limit]  # surely over: dropped unchecked
        candidates = candidates[(known.upper[candidates] > limit) & (known.lower[candidates] <= limit)]
        if len(candidates):
            runner.run(
                check_tokens,
                PDA_BLOB,
                POOL_BLOB,
                WS_BLOB,
                stacks,
                self.vocab,
                self.offsets,
                candidates,
                self.cost,
                MAX_TOPS,
                known.exact,
            )
        dropped = np.concatenate([over, candidates[known.exact[candidates] > limit]])
        if len(dropped):  # a few ids: their bits cleared one by one (ufunc.at takes repeated words)
            np.bitwise_and.at(words, dropped >> 5, ~np.left_shift(np.int32(1), (dropped & 31).astype(np.int32)))

    def restrict_terminals(self, words: np.ndarray, remaining: int, terminals, after, runner) -> None:
        """Clear the allowed token terminals after which the parse would cost more than
        remaining - 1 tokens; after(t) is the matcher's state after token t (None if refused),
        whose frames live in runner's pool."""
        for t in terminals:
            bit = np.int32(1) << np.int32(t & 31)
            if not words[t >> 5] & bit:
                continue
            state = after(t)
            if state is None or self.parse_cost(runner.pool.blob, state.stacks, state.can_end) > remaining - 1:
                words[t >> 5] &= ~bit


def bounds_memo() -> BoundedCache[bytes, _StackSetBounds]:
    """A matcher's memo for BudgetTable.restrict: the bounds of its last BOUNDS_MEMO_ENTRIES
    stack sets."""
    return BoundedCache(BOUNDS_MEMO_ENTRIES)


# Weak, not a registered cache: a grammar's budget table lives as long as the grammar.
_TABLES: weakref.WeakKeyDictionary[CompiledGrammar, BudgetTable] = weakref.WeakKeyDictionary()
_TABLES_LOCK = threading.Lock()


def budget_table(compiled: CompiledGrammar) -> BudgetTable:
    """The grammar's BudgetTable, built once."""
    with _TABLES_LOCK:
        table = _TABLES.get(compiled)
    if table is None:
        table = BudgetTable(compiled)
        with _TABLES_LOCK:
            table = _TABLES.setdefault(compiled, table)
    return table


def check_budget(
    table: BudgetTable,
    compiled: CompiledGrammar,
    pool_blob: np.ndarray,
    stacks: np.ndarray,
    can_end: bool,
    max_tokens: int,
) -> None:
    """Raise BudgetTooSmallError when the grammar cannot surely finish within max_tokens."""
    need = table.parse_cost(pool_blob, stacks, can_end)
    if need <= max_tokens:
        return
    if need >= UNREACHABLE:
        raise BudgetTooSmallError(
            f"max_tokens={max_tokens}: this grammar has no finite completion from its start (no string ends it)"
        )
    pda = compiled.pda
    start = int(pda.rule_start[pda.root_rule])
    text = table.completions.completion(start, 200)
    shown = f" (for example {_readable(text)!r})" if text is not None else ""
    raise BudgetTooSmallError(
        f"max_tokens={max_tokens} is too small for this grammar: its shortest output takes "
        f"{int(table.completions.dist[start])} bytes{shown}, which pushmask can guarantee to finish in "
        f"{need} tokens; raise max_tokens (max_new_tokens) to at least {need}"
    )


def _readable(text: bytes) -> str:
    """Bytes of a completion as text, each token terminal shown as <[id]> (as EBNF writes it)."""
    parts = text.split(bytes([TOKEN_MARK]))
    out = parts[0].decode("utf-8", "replace")
    for part in parts[1:]:
        code = part[: TERMINAL_BYTES - 1]
        token = 0
        for byte in code:
            token = token << 6 | (byte & 0x3F)
        out += f"<[{token}]>" + part[TERMINAL_BYTES - 1 :].decode("utf-8", "replace")
    return out


_UNSEEN = object()
"""What CheckedBudget.memo gives for a key not searched yet (None is a result: no path)."""


class _Exhausted(Exception):
    """The search of one CheckedBudget verification ran out of nodes."""


class CheckedBudget:
    """The budget for a grammar with value checks: a token is kept only if, after it, a completion
    passing the checks is found within the tokens left, by a deterministic depth-first search that
    tries, at each state, the tokens in order of their unchecked cost (fewest first, then id; at
    most BRANCH of them that pass the checks).

    The search is the same from wherever it starts, so if the current state's search succeeds
    through token t, the search from the state after t succeeds too: that token is always kept,
    and the mask is never empty before the text may end.  A search that runs out of MAX_NODES
    counts as a failure (the token is dropped), and so does every search once a fill has spent
    FILL_NODES.  Searches are memoised per (stacks, open checked
    values, tokens left).

    Cost: a search per allowed token.  Tokens whose unchecked cost leaves MARGIN tokens or more
    to spare are kept without one (a completion passing the checks is taken to need fewer than
    MARGIN tokens more than the shortest one); of the tighter ones, the first MAX_VERIFIED by cost
    are searched and the rest dropped (fewer choices, never a dead end).  The search writes with
    the short tokens only (SEARCH_TOKEN_BYTES bytes at most, or SEARCH_PUNCT_BYTES of JSON
    punctuation and space), which keeps each step of it cheap on large vocabularies."""

    BRANCH = 4
    MAX_NODES = 200
    FILL_NODES = 1000
    MARGIN = 16
    MAX_VERIFIED = 64
    MEMO_ENTRIES = 1 << 14
    SEARCH_TOKEN_BYTES = 2
    SEARCH_PUNCT_BYTES = 6
    _PUNCT = frozenset(b'[]{}",: ')

    def __init__(self, table: BudgetTable, matcher):
        self.table = table
        self.matcher = matcher  # for its runner and checked advance, both shared with its forks
        self.tokens = self._search_tokens(table)  # what the search writes with
        # search results by _key (the path's first token, or None: no path found)
        self.memo: BoundedCache[tuple, int | None] = BoundedCache(self.MEMO_ENTRIES)

    @classmethod
    def _search_tokens(cls, table: BudgetTable) -> np.ndarray:
        """The short tokens (see the class docstring), found once per grammar's table."""
        got = table.search_tokens
        if got is None:
            lengths = np.diff(table.offsets)
            punct = np.zeros(256, dtype=np.int64)
            punct[list(cls._PUNCT)] = 1
            cumulative = np.concatenate([[0], np.cumsum(1 - punct[table.vocab])])
            other = cumulative[table.offsets[1:]] - cumulative[table.offsets[:-1]]  # bytes that are not punctuation
            short = (lengths <= cls.SEARCH_TOKEN_BYTES) | ((lengths <= cls.SEARCH_PUNCT_BYTES) & (other == 0))
            got = table.search_tokens = np.flatnonzero(short & table.has_bytes).astype(np.int64)
        return got

    def finishable(self, state, tokens_left: int) -> bool:
        """Whether the search finds a completion passing the checks within tokens_left tokens."""
        return self._path_token(state, tokens_left) is not None

    def restrict(self, words: np.ndarray, state, remaining: int) -> None:
        """Clear the allowed tokens (bits of `words`, stop tokens aside) after which no completion
        passing the checks is found within remaining - 1 tokens (see the class docstring)."""
        limit = remaining - 1
        allowed = np.unpackbits(words.view(np.uint8), count=len(self.table.has_bytes), bitorder="little").view(bool)
        tokens, costs = self._costs(state, np.flatnonzero(allowed & self.table.has_bytes).astype(np.int64))
        tight = costs > limit - self.MARGIN
        tokens, costs = tokens[tight], costs[tight]
        order = np.lexsort((tokens, costs))
        keep = self._path_token(state, remaining)  # the current state's own path: always kept
        dropped = np.zeros(32 * len(words), dtype=bool)
        nodes = [self.FILL_NODES]  # shared by this fill's searches; once spent, the rest is dropped
        for rank, t in enumerate(tokens[order].tolist()):
            if t == keep:
                continue
            after = None if rank >= self.MAX_VERIFIED or nodes[0] <= 0 else self.matcher._state_after_token(t, state)
            if after is None or not self._within(after, limit, nodes):
                dropped[t] = True
        words &= ~np.packbits(dropped, bitorder="little").view(np.int32)

    def _path_token(self, state, tokens_left: int):
        """The first token of the path the search finds (-1 when the state may end already), or
        None when it finds none."""
        try:
            return self._search(state, tokens_left, [self.MAX_NODES])
        except _Exhausted:
            return None

    def _within(self, state, tokens_left: int, shared: list) -> bool:
        """finishable, its nodes also counted against `shared` (a fill's allowance)."""
        nodes = [min(self.MAX_NODES, shared[0])]
        try:
            return self._search(state, tokens_left, nodes) is not None
        except _Exhausted:
            return False
        finally:
            shared[0] -= min(self.MAX_NODES, shared[0]) - nodes[0]

    def _key(self, state, tokens_left: int) -> tuple:
        scans = tuple(
            sorted(
                ((key, scan.structure(), scan.items, scan.done) for key, scan in state.scans.items()),
                key=lambda entry: entry[0],
            )
        )
        return state.stacks.tobytes(), state.can_end, scans, tokens_left

    def _search(self, state, tokens_left: int, nodes: list):
        if state.can_end:
            return -1
        if tokens_left <= 0:
            return None
        key = self._key(state, tokens_left)
        found = self.memo.get(key, _UNSEEN)
        if found is not _UNSEEN:
            return found
        if nodes[0] <= 0:
            raise _Exhausted
        nodes[0] -= 1
        found, tried = None, 0
        tokens, costs = self._costs(state, self.tokens)
        fits = costs <= tokens_left - 1
        tokens, costs = tokens[fits], costs[fits]
        for t in tokens[np.lexsort((tokens, costs))].tolist():
            after = self.matcher._state_after_token(t, state)
            if after is None:
                continue  # a check fails on t
            if self._search(after, tokens_left - 1, nodes) is not None:
                found = t
                break
            tried += 1
            if tried >= self.BRANCH:
                break
        self.memo.put(key, found)
        return found

    def _costs(self, state, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, the unchecked cost of the parse after each), rejected tokens left out."""
        table = self.table
        exact = np.full(len(table.has_bytes), -1, dtype=np.int32)
        self.matcher._runner.run(
            check_tokens,
            PDA_BLOB,
            POOL_BLOB,
            WS_BLOB,
            state.stacks,
            table.vocab,
            table.offsets,
            tokens,
            table.cost,
            MAX_TOPS,
            exact,
        )
        costs = exact[tokens]
        kept = costs < STORED_MAX
        return tokens[kept], costs[kept]
