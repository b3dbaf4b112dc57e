"""Does the grammar's language meet a regular language?  Summary saturation of the pushdown
automaton against a *template automaton* (an NFA over bytes), in numba.

This is pushdown reachability in the style of Earley / Bar-Hillel: facts are

    entry    (key_s, key_q)   a rule instance that starts in PDA state key_s at template state
                              key_q (key_s is the rule's start for a call; any state of the rule for
                              a *bridge*, below; key (-3 - frame, -1) for a frame of a given stack)
    item     (e, s, q)        entry e's rule instance is in PDA state s at template state q
    summary  (e, q)           entry e's rule instance can end at template state q

and saturation adds, until nothing changes: byte steps (a PDA byte edge and a template transition
that share a byte), calls (a reference edge starts the callee's entry at q and registers the caller),
returns (a callee's summary moves each caller to its return state) and ends (an accepting state
gives a summary).  The languages intersect iff the bottom entry gets a summary at a final template
state.  Every fact is a triple over finite sets, so saturation ends; the caller bounds the work
by the size it lets the item buffer grow to.

Template automaton.  Explicit states [0, n_explicit): byte-range transitions (CSR x_ptr, x_lo,
x_hi, x_dst), epsilon moves (eps_ptr, eps_dst) and final flags; state 0 is the start.  Then token
blocks: block k is one token slot, its states n_explicit + k * n_nodes + node over the nodes of a
token trie (children CSR t_ptr / t_byte / t_child, t_depth, t_end = some token ends here).  A token
ending at a node of depth d leaves block k along each exit x in [blk_ptr[k], blk_ptr[k + 1]) to
exit_target[x] + min(d, exit_cap[x]), when exit_max[x] < 0 or d <= exit_max[x] (so a byte-bounded
gap that follows can count the token's bytes).

Epsilon moves and block exits are *bridged*: an item (e, s, q) crossing to q2 starts the entry
(s, q2) and ends e wherever that entry ends.  What happens after q2 then depends on s alone, not on
where e began, so the part of the template behind a gap or a token slot is parsed once per state
instead of once per origin.

Every fact keeps its first derivation (p1: an item, p2: a summary, byte: the byte consumed), so a
witness string can be read back; with `record` set, every derivation edge is kept too, so that
`useful_facts` can mark the facts that lie on some accepting run (which token slots' tokens do).
Callers that are equal in (callee, caller entry, return state) share one caller record, which is
a node of that graph too: an item is on a run iff its record leads to a return on one.
Buffers have fixed capacities; a full one returns ERR_* and the caller grows it and resumes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..core.jit import njit
from ..grammar.fsm.graph_kernels import grouped, mark_reaching
from .kernels import ROOT, find_byte_target, pda_views

FOUND = 1
DONE = 0
ERR_ITEMS = -1
ERR_SUMMARIES = -2
ERR_ENTRIES = -3
ERR_CALLS = -4
ERR_EDGES = -5
ERR_EXITS = -6

# Row layouts (int64).  Every fact's key is its first three columns (two-part keys pad with 0),
# so one hash-table routine serves all four kinds.
ITEM_COLUMNS = 6  # entry, state, template state | p1 (item), p2 (summary), byte
I_P1, I_P2, I_BYTE = 3, 4, 5
SUMMARY_COLUMNS = 6  # entry, template state, 0 | next summary of the entry, p1 (item), p2 (summary)
S_NEXT, S_P1, S_P2 = 3, 4, 5
ENTRY_COLUMNS = 5  # key state, key template state, 0 | first caller record, first summary
E_CALLS, E_SUMS = 3, 4
CALL_COLUMNS = 6  # callee, caller entry, return state (-1: the caller entry ends) | first caller item,
K_ITEM, K_NEXT, K_REPLAYED = 3, 4, 5  # next record of the callee, 1 once the callee's summaries were replayed
# Counters (cnt): items, summaries, entries, call records, edges, exits at 0-5, then:
C_DONE_ITEMS = 6  # items processed
C_DONE_SUMS = 7  # summaries processed
C_STARTED = 8  # 1 once the start stacks are in
C_FOUND = 9  # the first summary that ends the parse at a final state (-1: none yet)
N_COUNTERS = 10
# Helpers get -1 as np.int64(-1): numba compiles a literal argument into a specialization of its own.


# -- records ---------------------------------------------------------------------------------------
# The kernels' arguments that always travel together, one record each.  A record's NamedTuple class
# declares its field order once and Python builds it by keyword (infill.py), but hands it to
# `saturate` as a plain tuple, tuple(record): numba reads a plain tuple's type in C and a
# NamedTuple's in Python, 4 microseconds more a call.  Inside numba a tuple is a struct, passed to
# _call / _return at no cost; each kernel unpacks it by position at its top into locals named as
# the fields (tests/test_infill.py checks the names against `_fields`).


class TemplateAutomaton(NamedTuple):
    """The template automaton (see the module docstring), all int64.  Built per query by
    infill._Builder.arrays; the caller's record (and _Saturated.tpl) keeps the arrays alive
    during the call.  The kernel only reads them."""

    x_ptr: np.ndarray  # byte-range transitions of the explicit states: CSR over states
    x_lo: np.ndarray
    x_hi: np.ndarray
    x_dst: np.ndarray
    eps_ptr: np.ndarray  # epsilon moves: CSR over states
    eps_dst: np.ndarray
    final: np.ndarray  # per explicit state, 1: final
    n_explicit: int
    blk_ptr: np.ndarray  # exits of token block k: [blk_ptr[k], blk_ptr[k + 1])
    exit_target: np.ndarray
    exit_cap: np.ndarray
    exit_max: np.ndarray


class TrieAutomaton(NamedTuple):
    """The token trie's automaton (build_trie_automaton), all int64.  Built once per TokenTrie and
    kept by infill's weak cache beside it (a template without token gaps gets a constant empty
    one); the caller holds it during the call.  The kernel only reads it."""

    t_ptr: np.ndarray  # children: CSR over nodes
    t_byte: np.ndarray
    t_child: np.ndarray
    t_depth: np.ndarray
    t_end: np.ndarray  # per node, 1: some token ends here
    n_nodes: int


class StartStacks(NamedTuple):
    """The stacks to start from, all int64: top states and frames (init_s[k], init_f[k]), the
    frame pool's return states and parents (ROOT at the bottom).  Built per query (fresh arrays,
    or copies of a matcher's pool); the caller holds it during the call.  The kernel only reads it."""

    init_s: np.ndarray
    init_f: np.ndarray
    frame_state: np.ndarray
    frame_parent: np.ndarray


class Facts(NamedTuple):
    """The fact buffers (row layouts above), their hash tables (rehash), the derivation edges,
    the bridges' (item, caller record) rows and the counters, all int64.  infill._Buffers owns
    them and builds the record afresh for each call (a full buffer is replaced between calls).
    The kernel writes all of them: rows, tables and counters."""

    items: np.ndarray
    item_table: np.ndarray
    sums: np.ndarray
    sum_table: np.ndarray
    ents: np.ndarray
    ent_table: np.ndarray
    calls: np.ndarray
    call_table: np.ndarray
    edges: np.ndarray
    exits: np.ndarray
    cnt: np.ndarray


_MIX_A = 0x27D4EB2F165667C5
_MIX_B = 0x165667B19E3779F9
_MIX_C = 0x61C8864680B583EB
_MIX_D = 0x94D049BB133111EB - (1 << 64)  # as a signed 64-bit constant


@njit(cache=True, inline="always")
def _hash(a, b, c):
    h = a * np.int64(_MIX_A) + b * np.int64(_MIX_B) + c * np.int64(_MIX_C)
    h ^= h >> 29
    h *= np.int64(_MIX_D)
    return h ^ (h >> 32)


@njit(cache=True)
def _intern(rows, table, n, a, b, c):
    """(row id, is_new) of key (a, b, c) in columns 0-2 of rows[:n]; (-1, False) when rows is full.

    The table holds row id + 1 per slot (0: empty) and is at least twice the row capacity."""
    mask = table.shape[0] - 1
    i = _hash(a, b, c) & mask
    while True:
        v = table[i]
        if v == 0:
            if n >= rows.shape[0]:
                return -1, False
            rows[n, 0] = a
            rows[n, 1] = b
            rows[n, 2] = c
            table[i] = n + 1
            return n, True
        r = v - 1
        if rows[r, 0] == a and rows[r, 1] == b and rows[r, 2] == c:
            return r, False
        i = (i + 1) & mask


@njit(cache=True)
def _add_item(items, item_table, cnt, e, s, q, p1, p2, byte):
    r, new = _intern(items, item_table, cnt[0], e, s, q)
    if new:
        items[r, I_P1] = p1
        items[r, I_P2] = p2
        items[r, I_BYTE] = byte
        cnt[0] += 1
    return r


@njit(cache=True)
def _add_summary(sums, sum_table, ents, cnt, e, q, p1, p2):
    r, new = _intern(sums, sum_table, cnt[1], e, q, np.int64(0))
    if new:
        sums[r, S_NEXT] = ents[e, E_SUMS]  # prepend to the entry's summary list
        ents[e, E_SUMS] = r
        sums[r, S_P1] = p1
        sums[r, S_P2] = p2
        cnt[1] += 1
    return r


@njit(cache=True)
def _entry(ents, ent_table, cnt, key_s, key_q):
    """(entry id, is_new); (-1, False) when full."""
    r, new = _intern(ents, ent_table, cnt[2], key_s, key_q, np.int64(0))
    if new:
        ents[r, E_CALLS] = -1
        ents[r, E_SUMS] = -1
        cnt[2] += 1
    return r, new


@njit(cache=True)
def _add_call(calls, call_table, ents, cnt, callee, caller, ret, item):
    """(id, is_new) of the caller record (callee, caller entry, return state), registering it on
    the callee if new; (-1, False) when full.  Callers equal in all three share one record: their
    returns are the same facts."""
    n, new = _intern(calls, call_table, cnt[3], callee, caller, ret)
    if new:
        calls[n, K_ITEM] = item
        calls[n, K_NEXT] = ents[callee, E_CALLS]
        calls[n, K_REPLAYED] = 0
        ents[callee, E_CALLS] = n
        cnt[3] = n + 1
    return n, new


# Nodes of the derivation graph, as edges hold them: kind + 3 * id.  (exits rows are plain ids:
# the bridging item, its caller record.)
NODE_ITEM = 0
NODE_SUMMARY = 1
NODE_CALL = 2


@njit(cache=True, inline="always")
def _add_edge(edges, cnt, src, dst):
    """Derivation edge between two nodes: dst usable on an accepting run makes src usable; False
    when full."""
    n = cnt[4]
    if n >= edges.shape[0]:
        return False
    edges[n, 0] = src
    edges[n, 1] = dst
    cnt[4] = n + 1
    return True


@njit(cache=True)
def _return(facts, record, caller, ret, citem, k, j, q):
    """A callee's summary j (ending at q) reaches caller record k: the caller moves to its return
    state, or (a bridge, ret < 0) the caller entry ends at q too.  Returns 0 or an ERR_* status."""
    items, item_table, sums, sum_table, ents, ent_table, calls, call_table, edges, exits, cnt = facts
    if ret >= 0:
        r = _add_item(items, item_table, cnt, caller, ret, q, citem, j, np.int64(-1))
        if r < 0:
            return ERR_ITEMS
        dst = NODE_ITEM + 3 * r
    else:
        r = _add_summary(sums, sum_table, ents, cnt, caller, q, citem, j)
        if r < 0:
            return ERR_SUMMARIES
        dst = NODE_SUMMARY + 3 * r
    if record:
        if not _add_edge(edges, cnt, NODE_CALL + 3 * k, dst):
            return ERR_EDGES
        if not _add_edge(edges, cnt, NODE_SUMMARY + 3 * j, dst):
            return ERR_EDGES
    return 0


@njit(cache=True)
def _call(facts, record, done_sums, caller, citem, key_s, key_q, ret):
    """Item citem of entry `caller` starts entry (key_s, key_q) and returns to state ret (or, ret < 0,
    ends with it: a bridge).  A new caller record replays the summaries the callee already
    processed; it is marked replayed only once all are, so a call cut short by a full buffer is
    replayed again when the item is processed again.  Recording, the item leads to the record
    (and a bridge is listed in `exits`)."""
    items, item_table, sums, sum_table, ents, ent_table, calls, call_table, edges, exits, cnt = facts
    e2, _ = _entry(ents, ent_table, cnt, key_s, key_q)
    if e2 < 0:
        return ERR_ENTRIES
    if _add_item(items, item_table, cnt, e2, key_s, key_q, np.int64(-1), np.int64(-1), np.int64(-1)) < 0:
        return ERR_ITEMS
    k, _ = _add_call(calls, call_table, ents, cnt, e2, caller, ret, citem)
    if k < 0:
        return ERR_CALLS
    if record:
        if not _add_edge(edges, cnt, NODE_ITEM + 3 * citem, NODE_CALL + 3 * k):
            return ERR_EDGES
        if ret < 0:
            n = cnt[5]
            if n >= exits.shape[0]:
                return ERR_EXITS
            exits[n, 0] = citem
            exits[n, 1] = k
            cnt[5] = n + 1
    if calls[k, K_REPLAYED] == 0:
        j = ents[e2, E_SUMS]
        while j >= 0:
            if j < done_sums:  # unprocessed summaries will meet this record themselves
                status = _return(facts, record, caller, ret, calls[k, K_ITEM], k, j, sums[j, 1])
                if status != 0:
                    return status
            j = sums[j, S_NEXT]
        calls[k, K_REPLAYED] = 1
    return 0


@njit(cache=True)
def saturate(pda, template, trie, stacks, facts, record, stop_early):
    """Saturate from the stacks (init_s[k], init_f[k]) at template state 0 (frames: frame_state /
    frame_parent, ROOT at the bottom).  Returns (status, bottom entry): FOUND (the bottom entry
    ended at a final state, the first such summary in cnt[C_FOUND]; with stop_early nothing more
    is done), DONE, or ERR_* (a buffer is full).

    Resumable: after ERR_* the caller grows the full buffer (rebuilding its table with `rehash`)
    and calls again with the same cnt; the fact being processed is processed again, which only
    repeats idempotent additions.  A first call takes zeroed cnt and tables (a power of two at
    least twice their buffer's rows)."""
    x_ptr, x_lo, x_hi, x_dst, eps_ptr, eps_dst, final, n_explicit, blk_ptr, exit_target, exit_cap, exit_max = template
    t_ptr, t_byte, t_child, t_depth, t_end, n_nodes = trie
    init_s, init_f, frame_state, frame_parent = stacks
    items, item_table, sums, sum_table, ents, ent_table, calls, call_table, edges, exits, cnt = facts
    accept, bp, bl, bh, bd, rp, rr, rd, rs = pda_views(pda)
    absent = np.int64(-1)
    if cnt[C_STARTED] == 0:
        # Frame entries: the frame below a stack top is the entry of the rule instance that returns
        # into it; each one's single caller record is the frame below it (ROOT: the bottom entry).
        # A full buffer here means starting over (the caller clears everything).
        for k in range(init_s.shape[0]):
            f = init_f[k]
            top = absent
            below_of = absent  # the entry made in the previous round, whose caller record is missing
            below_ret = absent
            while True:
                e, new = _entry(ents, ent_table, cnt, -3 - f, absent)
                if e < 0:
                    return ERR_ENTRIES, absent
                if below_of >= 0:
                    k2, _ = _add_call(calls, call_table, ents, cnt, below_of, e, below_ret, absent)
                    if k2 < 0:
                        return ERR_CALLS, absent
                    calls[k2, K_REPLAYED] = 1  # a new entry has no summaries to replay
                if top < 0:
                    top = e
                if not new or f == ROOT:
                    break
                below_of = e
                below_ret = frame_state[f]
                f = frame_parent[f]
            if _add_item(items, item_table, cnt, top, init_s[k], np.int64(0), absent, absent, absent) < 0:
                return ERR_ITEMS, absent
        cnt[C_STARTED] = 1
        cnt[C_FOUND] = -1
    bottom, _ = _entry(ents, ent_table, cnt, np.int64(-3 - ROOT), absent)

    while cnt[C_DONE_ITEMS] < cnt[0] or cnt[C_DONE_SUMS] < cnt[1]:
        done_sums = cnt[C_DONE_SUMS]
        if done_sums < cnt[1]:
            j = done_sums
            e = sums[j, 0]
            q = sums[j, 1]
            if e == bottom and q < n_explicit and final[q] != 0:
                if cnt[C_FOUND] < 0:
                    cnt[C_FOUND] = j
                if stop_early:
                    return FOUND, bottom
            c = ents[e, E_CALLS]
            while c >= 0:
                status = _return(facts, record, calls[c, 1], calls[c, 2], calls[c, K_ITEM], c, j, q)
                if status != 0:
                    return status, bottom
                c = calls[c, K_NEXT]
            cnt[C_DONE_SUMS] = j + 1
            continue

        i = cnt[C_DONE_ITEMS]
        e = items[i, 0]
        s = items[i, 1]
        q = items[i, 2]
        # Byte steps.
        if q < n_explicit:
            for x in range(x_ptr[q], x_ptr[q + 1]):
                tlo = x_lo[x]
                thi = x_hi[x]
                for ed in range(bp[s], bp[s + 1]):
                    lo = bl[ed]
                    if lo > thi:
                        break
                    if bh[ed] < tlo:
                        continue
                    r = _add_item(items, item_table, cnt, e, bd[ed], x_dst[x], i, absent, max(lo, tlo))
                    if r < 0:
                        return ERR_ITEMS, bottom
                    if record and not _add_edge(edges, cnt, NODE_ITEM + 3 * i, NODE_ITEM + 3 * r):
                        return ERR_EDGES, bottom
            for x in range(eps_ptr[q], eps_ptr[q + 1]):
                status = _call(facts, record, done_sums, e, i, s, eps_dst[x], absent)
                if status != 0:
                    return status, bottom
        else:
            block = (q - n_explicit) // n_nodes
            node = q - n_explicit - block * n_nodes
            base = q - node
            for c in range(t_ptr[node], t_ptr[node + 1]):
                b = t_byte[c]
                t = find_byte_target(bp, bl, bh, bd, s, b)
                if t >= 0:
                    r = _add_item(items, item_table, cnt, e, t, base + t_child[c], i, absent, b)
                    if r < 0:
                        return ERR_ITEMS, bottom
                    if record and not _add_edge(edges, cnt, NODE_ITEM + 3 * i, NODE_ITEM + 3 * r):
                        return ERR_EDGES, bottom
            if t_end[node] != 0:
                d = t_depth[node]
                for x in range(blk_ptr[block], blk_ptr[block + 1]):
                    if exit_max[x] < 0 or d <= exit_max[x]:
                        status = _call(facts, record, done_sums, e, i, s, exit_target[x] + min(d, exit_cap[x]), absent)
                        if status != 0:
                            return status, bottom
        # Calls.
        for r in range(rp[s], rp[s + 1]):
            status = _call(facts, record, done_sums, e, i, rs[rr[r]], q, rd[r])
            if status != 0:
                return status, bottom
        # Ends.
        if accept[s] != 0:
            j = _add_summary(sums, sum_table, ents, cnt, e, q, i, absent)
            if j < 0:
                return ERR_SUMMARIES, bottom
            if record and not _add_edge(edges, cnt, NODE_ITEM + 3 * i, NODE_SUMMARY + 3 * j):
                return ERR_EDGES, bottom
        cnt[C_DONE_ITEMS] = i + 1
    return (FOUND if cnt[C_FOUND] >= 0 else DONE), bottom


@njit(cache=True)
def rehash(rows, n, table):
    """Fill a fresh (zeroed) table with rows[:n], keyed by their first three columns."""
    mask = table.shape[0] - 1
    for r in range(n):
        i = _hash(rows[r, 0], rows[r, 1], rows[r, 2]) & mask
        while table[i] != 0:
            i = (i + 1) & mask
        table[i] = r + 1


@njit(cache=True)
def useful_facts(n_items, n_sums, n_calls, edges, n_edges, roots):
    """Mark the nodes from which a derivation leads to one of the `roots` (summary ids): backward
    reachability over the recorded edges.  Returns a bool array over items, then summaries (at
    n_items + j), then caller records (at n_items + n_sums + k)."""
    n = n_items + n_sums + n_calls
    offset = np.array([0, n_items, n_items + n_sums], dtype=np.int64)
    sources = np.empty(n_edges, dtype=np.int64)
    targets = np.empty(n_edges, dtype=np.int64)
    for k in range(n_edges):  # edge ends are ids tagged by kind (id * 3 + kind): node numbers here
        sources[k] = offset[edges[k, 0] % 3] + edges[k, 0] // 3
        targets[k] = offset[edges[k, 1] % 3] + edges[k, 1] // 3
    ptr, preds = grouped(targets, sources, n)
    useful = np.zeros(n, dtype=np.bool_)
    for j in roots:
        useful[n_items + j] = True
    return mark_reaching(useful, ptr, preds)


@njit(cache=True)
def build_trie_automaton(tok_offsets, tok_bytes, lcp):
    """The token trie as an automaton: node 0 is the root and the node of byte k of tok_bytes is
    1 + k (prefixes shared with the previous token reuse that token's nodes, so some ids stay
    unused).  Returns (child CSR ptr, child byte, child node, depth, is_end, end node of each trie
    position)."""
    n = lcp.shape[0]
    n_nodes = 1 + tok_bytes.shape[0]
    parent = np.full(n_nodes, -1, dtype=np.int64)
    depth = np.zeros(n_nodes, dtype=np.int64)
    is_end = np.zeros(n_nodes, dtype=np.int64)
    end_node = np.empty(n, dtype=np.int64)
    longest = 0
    for p in range(n):
        longest = max(longest, tok_offsets[p + 1] - tok_offsets[p])
    path = np.zeros(longest + 1, dtype=np.int64)  # path[d]: node of the current token's first d bytes
    for p in range(n):
        a = tok_offsets[p]
        length = tok_offsets[p + 1] - a
        for d in range(lcp[p] + 1, length + 1):
            node = 1 + a + d - 1
            parent[node] = path[d - 1]
            depth[node] = d
            path[d] = node
        end_node[p] = path[length]
        is_end[path[length]] = 1
    # Children grouped by parent; tokens are sorted, so each parent's children come in byte order.
    ptr = np.zeros(n_nodes + 1, dtype=np.int64)
    for v in range(1, n_nodes):
        if parent[v] >= 0:
            ptr[parent[v] + 1] += 1
    for v in range(n_nodes):
        ptr[v + 1] += ptr[v]
    fill = ptr[:-1].copy()
    child = np.empty(ptr[n_nodes], dtype=np.int64)
    byte = np.empty(ptr[n_nodes], dtype=np.int64)
    for v in range(1, n_nodes):
        u = parent[v]
        if u >= 0:
            child[fill[u]] = v
            byte[fill[u]] = tok_bytes[v - 1]
            fill[u] += 1
    return ptr, byte, child, depth, is_end, end_node
