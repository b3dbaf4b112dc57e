"""numba kernels that build a rule body's Thompson NFA from its pre-order encoding (the integer
stream automata/dfa.py's structure digest writes) and hand it to `dfa_kernels.construct`.

The stream: each node in pre-order as a tag and its fields, a node met again (the IR is a DAG)
as (BACK, visit number):
    SEQ / ALT count, then the items      REPEAT min max (-1: unbounded), then the item
    BYTES length (the bytes follow in the literal stream)      REF position of the rule
    CHARS / BYTE_RANGES count, then count (lo, hi) pairs       FSM length of its digest (skipped
    in the literal stream; its layout comes apart, in visit order)
Nodes are numbered by visit (order of first appearance), so a node number stands for one IR object.
"""

from __future__ import annotations

import numpy as np

from ..core.jit import njit
from .dfa_kernels import ERR_TOO_MANY_NFA_STATES, construct, literal_trie, no_automaton

SEQ, ALT, BYTES, REPEAT, REF, CHARS, BYTE_RANGES, FSM, BACK = range(-9, 0)
"""Tags of the stream (negative: never a count or a position)."""
ERR_TOO_MANY_TRIE_STATES = -5  # the literal tries outgrew their own budget


@njit(cache=True)
def parse_nodes(numbers):
    """The node table of a stream: (number of nodes, kind[node], arg[node, 3], children).
    SEQ / ALT: arg = (first child slot, count); REPEAT: (child slot, min, max); BYTES: (offset in
    the literal stream, length); REF: (position,); CHARS / BYTE_RANGES: (offset in `numbers` of
    the first lo, count); FSM: (index among the FSM nodes,).  Child slots index `children`, which
    holds node numbers.  Node 0 is the root."""
    size = numbers.shape[0] // 2 + 1  # every entry takes at least two numbers
    kind = np.empty(size, np.int64)
    arg = np.zeros((size, 3), np.int64)
    children = np.empty(size, np.int64)
    next_slot = np.empty(size, np.int64)  # parse stack: the open SEQ / ALT / REPEAT nodes
    slots_left = np.empty(size, np.int64)
    top = 0
    n_nodes = n_slots = literal = n_fsms = 0
    pos = 0
    while pos < numbers.shape[0]:
        tag = numbers[pos]
        n_items = 0
        if tag == BACK:
            node = numbers[pos + 1]
            pos += 2
        else:
            node = n_nodes
            n_nodes += 1
            kind[node] = tag
            if tag == SEQ or tag == ALT:
                n_items = numbers[pos + 1]
                arg[node, 0] = n_slots
                arg[node, 1] = n_items
                pos += 2
            elif tag == REPEAT:
                n_items = 1
                arg[node, 0] = n_slots
                arg[node, 1] = numbers[pos + 1]
                arg[node, 2] = numbers[pos + 2]
                pos += 3
            elif tag == BYTES:
                arg[node, 0] = literal
                arg[node, 1] = numbers[pos + 1]
                literal += numbers[pos + 1]
                pos += 2
            elif tag == REF:
                arg[node, 0] = numbers[pos + 1]
                pos += 2
            elif tag == CHARS or tag == BYTE_RANGES:
                arg[node, 0] = pos + 2
                arg[node, 1] = numbers[pos + 1]
                pos += 2 + 2 * numbers[pos + 1]
            else:  # FSM: its digest bytes are not needed here
                arg[node, 0] = n_fsms
                n_fsms += 1
                literal += numbers[pos + 1]
                pos += 2
        if top > 0:
            children[next_slot[top - 1]] = node
            next_slot[top - 1] += 1
            slots_left[top - 1] -= 1
            while top > 0 and slots_left[top - 1] == 0:
                top -= 1
        if n_items > 0:
            next_slot[top] = n_slots
            slots_left[top] = n_items
            n_slots += n_items
            top += 1
    return n_nodes, kind, arg, children


@njit(cache=True, inline="always")
def _memo_slot(keys, key):
    """The slot of `key` in the open-addressing table `keys` (-1: a free slot; a power of two
    slots), or the free slot where it goes."""
    mask = keys.shape[0] - 1
    slot = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
    while keys[slot] != key and keys[slot] != -1:
        slot = (slot + 1) & mask
    return slot


@njit(cache=True, inline="always")
def _put_row(rows, i, a, b, c, d):
    """rows[i] = (a, b, c, d): an edge (src, lo, hi, dst)."""
    rows[i, 0] = a
    rows[i, 1] = b
    rows[i, 2] = c
    rows[i, 3] = d


_NO_ROOM = -6  # a buffer of _thompson_nfa_in is full: thompson_nfa starts again with more room
EPS_ROOM, BYTE_ROOM, CODE_POINT_ROOM, REF_ROOM, MEMO_ROOM = range(5)  # rows of each edge buffer, memo slots


@njit(cache=True)
def thompson_nfa(
    numbers,
    literals,
    fsm_ptr,
    fsm_transitions,
    fsm_meta,
    fsm_final_ptr,
    fsm_finals,
    trie_nodes,
    trie_ptr,
    word_offsets,
    words,
    n_positions,
    max_states,
    max_trie_states,
):
    """The Thompson NFA of an encoded body, leading into its final state 0.

    FSM node i: fsm_meta[i] = (number of states, initial state), transitions
    fsm_transitions[fsm_ptr[i]:fsm_ptr[i + 1]] as rows (src, lo, hi, dst) over its states,
    finals fsm_finals[fsm_final_ptr[i]:fsm_final_ptr[i + 1]].  ALT node trie_nodes[t] builds its
    BYTES items as a trie (`literal_trie`) of the sorted distinct words trie_ptr[t]..trie_ptr[t + 1]
    (word w is words[word_offsets[w]:word_offsets[w + 1]]).

    States other than trie states count against max_states, trie states against max_trie_states.
    Returns (status, number of states, start state, trie states, edge rows (eps (src, dst),
    byte and code-point (src, lo, hi, dst), reference (src, local index, dst)), ref_order);
    status 0, or ERR_TOO_MANY_NFA_STATES / ERR_TOO_MANY_TRIE_STATES.  References get local
    indices in the order the construction meets them; ref_order[i] is the position of local
    reference i.

    The construction runs with fixed buffers (`_thompson_nfa_in`: arrays that a loop may replace
    keep numba from optimising it, several times slower) and starts again with more room when one
    fills up; the room it starts with fits bodies without repetitions."""
    n_nodes, kind, arg, children = parse_nodes(numbers)
    n_words = word_offsets.shape[0] - 1
    rooms = np.empty(5, np.int64)
    rooms[EPS_ROOM] = numbers.shape[0] + fsm_finals.shape[0] + n_words + 16
    rooms[BYTE_ROOM] = literals.shape[0] + words.shape[0] + numbers.shape[0] // 2 + 16
    rooms[CODE_POINT_ROOM] = fsm_transitions.shape[0] + numbers.shape[0] // 2 + 16
    rooms[REF_ROOM] = numbers.shape[0] // 2 + 16
    rooms[MEMO_ROOM] = 64
    while rooms[MEMO_ROOM] < numbers.shape[0]:
        rooms[MEMO_ROOM] *= 2
    while True:
        out = _thompson_nfa_in(
            rooms,
            n_nodes,
            kind,
            arg,
            children,
            numbers,
            literals,
            fsm_ptr,
            fsm_transitions,
            fsm_meta,
            fsm_final_ptr,
            fsm_finals,
            trie_nodes,
            trie_ptr,
            word_offsets,
            words,
            n_positions,
            max_states,
            max_trie_states,
        )
        if out[0] != _NO_ROOM:
            return out


@njit(cache=True)
def _thompson_nfa_in(
    rooms,
    n_nodes,
    kind,
    arg,
    children,
    numbers,
    literals,
    fsm_ptr,
    fsm_transitions,
    fsm_meta,
    fsm_final_ptr,
    fsm_finals,
    trie_nodes,
    trie_ptr,
    word_offsets,
    words,
    n_positions,
    max_states,
    max_trie_states,
):
    """thompson_nfa with room for rooms[*_ROOM] edges of each kind and rooms[MEMO_ROOM] / 2 memo
    entries (a power of two slots), or _NO_ROOM with the room of the buffer that overflowed grown.

    Built right to left; `build(node, end)` (the root, SEQ and ALT items) is memoised on
    (node, end): a sub-expression that occurs several times in front of the same continuation
    (shared suffixes, as in chains of optional members) becomes one fragment, which is exact
    because both occurrences continue identically.  A REPEAT's copies of its item are built
    unmemoised (each copy is a fresh fragment).  An explicit stack of frames (SEQ, ALT, REPEAT
    nodes being built) replaces recursion."""
    trie_of = np.full(n_nodes, -1, np.int64)
    for t in range(trie_nodes.shape[0]):
        trie_of[trie_nodes[t]] = t
    eps = np.empty((rooms[EPS_ROOM], 2), np.int32)
    byte = np.empty((rooms[BYTE_ROOM], 4), np.int32)
    code_points = np.empty((rooms[CODE_POINT_ROOM], 4), np.int32)
    refs = np.empty((rooms[REF_ROOM], 3), np.int32)
    n_eps = n_byte = n_code_points = n_refs_edges = 0
    ref_local = np.full(n_positions, -1, np.int64)
    ref_order = np.empty(n_positions, np.int64)
    n_refs = 0
    # the memo: start states by (node << 31 | end), an open-addressing table at most half full
    memo_keys = np.full(rooms[MEMO_ROOM], -1, np.int64)
    memo_values = np.empty(rooms[MEMO_ROOM], np.int64)
    n_memo = 0
    # frames: node, end, memoised, calls made, waiting for a call's result, here, aux (ALT: its
    # start state; REPEAT: the state of its current optional copy or loop)
    f_node = np.empty(n_nodes + 1, np.int64)
    f_end = np.empty(n_nodes + 1, np.int64)
    f_memo = np.empty(n_nodes + 1, np.bool_)
    f_calls = np.empty(n_nodes + 1, np.int64)
    f_waiting = np.empty(n_nodes + 1, np.bool_)
    f_here = np.empty(n_nodes + 1, np.int64)
    f_aux = np.empty(n_nodes + 1, np.int64)
    top = 0

    status = 0
    full = need = 0  # with _NO_ROOM: the buffer that overflowed, the rows it needed
    n_states = 1  # the final state, 0
    if max_states < 1:
        status = ERR_TOO_MANY_NFA_STATES
    trie_states = 0
    node, end, memoise = 0, 0, True  # the pending call: build(root, final)
    while status == 0:
        # the pending call: a memoised result, a leaf built at once, or a new frame
        ret = -1
        key = (node << 31) | end
        slot = _memo_slot(memo_keys, key)
        if memoise and memo_keys[slot] == key:
            ret = memo_values[slot]
        else:
            k = kind[node]
            if k == SEQ or k == ALT or k == REPEAT:
                f_node[top] = node
                f_end[top] = end
                f_memo[top] = memoise
                f_calls[top] = 0
                f_waiting[top] = False
                f_here[top] = end
                top += 1
            else:
                count = 1  # states the leaf takes
                if k == BYTES:
                    count = arg[node, 1]
                elif k == FSM:
                    count = fsm_meta[arg[node, 0], 0]
                if n_states - trie_states + count > max_states:
                    status = ERR_TOO_MANY_NFA_STATES
                    break
                first = n_states
                n_states += count
                if k == BYTES:  # a path through `count` fresh states, the last byte into end
                    if n_byte + count > byte.shape[0]:
                        status, full, need = _NO_ROOM, BYTE_ROOM, n_byte + count
                        break
                    here = end
                    for j in range(count - 1, -1, -1):
                        there = first + j
                        b = literals[arg[node, 0] + j]
                        _put_row(byte, n_byte, there, b, b, here)
                        n_byte += 1
                        here = there
                    ret = here
                elif k == CHARS or k == BYTE_RANGES:
                    n_ranges = arg[node, 1]
                    if k == CHARS and n_code_points + n_ranges > code_points.shape[0]:
                        status, full, need = _NO_ROOM, CODE_POINT_ROOM, n_code_points + n_ranges
                        break
                    if k == BYTE_RANGES and n_byte + n_ranges > byte.shape[0]:
                        status, full, need = _NO_ROOM, BYTE_ROOM, n_byte + n_ranges
                        break
                    for r in range(n_ranges):
                        lo = numbers[arg[node, 0] + 2 * r]
                        hi = numbers[arg[node, 0] + 2 * r + 1]
                        if k == CHARS:
                            _put_row(code_points, n_code_points, first, lo, hi, end)
                            n_code_points += 1
                        else:
                            _put_row(byte, n_byte, first, lo, hi, end)
                            n_byte += 1
                    ret = first
                elif k == REF:
                    position = arg[node, 0]
                    if ref_local[position] < 0:
                        ref_local[position] = n_refs
                        ref_order[n_refs] = position
                        n_refs += 1
                    if n_refs_edges + 1 > refs.shape[0]:
                        status, full, need = _NO_ROOM, REF_ROOM, n_refs_edges + 1
                        break
                    refs[n_refs_edges, 0] = first
                    refs[n_refs_edges, 1] = ref_local[position]
                    refs[n_refs_edges, 2] = end
                    n_refs_edges += 1
                    ret = first
                else:  # FSM: one NFA state per automaton state, its finals into end
                    i = arg[node, 0]
                    if n_code_points + fsm_ptr[i + 1] - fsm_ptr[i] > code_points.shape[0]:
                        status, full, need = _NO_ROOM, CODE_POINT_ROOM, n_code_points + fsm_ptr[i + 1] - fsm_ptr[i]
                        break
                    if n_eps + fsm_final_ptr[i + 1] - fsm_final_ptr[i] > eps.shape[0]:
                        status, full, need = _NO_ROOM, EPS_ROOM, n_eps + fsm_final_ptr[i + 1] - fsm_final_ptr[i]
                        break
                    for e in range(fsm_ptr[i], fsm_ptr[i + 1]):
                        _put_row(
                            code_points,
                            n_code_points,
                            first + fsm_transitions[e, 0],
                            fsm_transitions[e, 1],
                            fsm_transitions[e, 2],
                            first + fsm_transitions[e, 3],
                        )
                        n_code_points += 1
                    for e in range(fsm_final_ptr[i], fsm_final_ptr[i + 1]):
                        eps[n_eps, 0] = first + fsm_finals[e]
                        eps[n_eps, 1] = end
                        n_eps += 1
                    ret = first + fsm_meta[i, 1]
                if memoise:
                    if 2 * (n_memo + 1) > memo_keys.shape[0]:
                        status, full, need = _NO_ROOM, MEMO_ROOM, 2 * (n_memo + 1)
                        break
                    memo_keys[slot] = key
                    memo_values[slot] = ret
                    n_memo += 1

        # run frames until one makes a call (or the root's frame returns)
        calling = False
        while not calling and top > 0:
            f = top - 1
            frame = f_node[f]
            k = kind[frame]
            first_child = arg[frame, 0]
            if k == SEQ:  # items right to left, each into the start of the one after it
                n_items = arg[frame, 1]
                if f_waiting[f]:
                    f_here[f] = ret
                    f_calls[f] += 1
                if f_calls[f] < n_items:
                    node, end, memoise = children[first_child + n_items - 1 - f_calls[f]], f_here[f], True
                    calling = True
            elif k == ALT:  # a fresh start state, epsilon edges into each item; literals as a trie
                n_items = arg[frame, 1]
                trie = trie_of[frame] >= 0
                if f_waiting[f]:
                    if n_eps + 1 > eps.shape[0]:
                        status, full, need = _NO_ROOM, EPS_ROOM, n_eps + 1
                        break
                    eps[n_eps, 0] = f_aux[f]
                    eps[n_eps, 1] = ret
                    n_eps += 1
                    f_calls[f] += 1
                else:
                    if n_states - trie_states + 1 > max_states:
                        status = ERR_TOO_MANY_NFA_STATES
                        break
                    f_aux[f] = n_states
                    n_states += 1
                    if trie:
                        t = trie_of[frame]
                        a, b = trie_ptr[t], trie_ptr[t + 1]
                        base = word_offsets[a]
                        next_state, edges, ends = literal_trie(
                            words[base : word_offsets[b]], word_offsets[a : b + 1] - base, f_aux[f], n_states
                        )
                        trie_states += next_state - n_states
                        if trie_states > max_trie_states:
                            status = ERR_TOO_MANY_TRIE_STATES
                            break
                        n_states = next_state
                        if n_byte + edges.shape[0] > byte.shape[0]:
                            status, full, need = _NO_ROOM, BYTE_ROOM, n_byte + edges.shape[0]
                            break
                        if n_eps + ends.shape[0] > eps.shape[0]:
                            status, full, need = _NO_ROOM, EPS_ROOM, n_eps + ends.shape[0]
                            break
                        byte[n_byte : n_byte + edges.shape[0]] = edges
                        n_byte += edges.shape[0]
                        for e in range(ends.shape[0]):
                            eps[n_eps, 0] = ends[e]
                            eps[n_eps, 1] = f_end[f]
                            n_eps += 1
                # items left to right (a trie's literals are already built)
                while trie and f_calls[f] < n_items and kind[children[first_child + f_calls[f]]] == BYTES:
                    f_calls[f] += 1
                if f_calls[f] < n_items:
                    node, end, memoise = children[first_child + f_calls[f]], f_end[f], True
                    calling = True
                else:
                    f_here[f] = f_aux[f]
            else:  # REPEAT: the optional copies (or the loop) from the end, then the required ones
                minimum, maximum = arg[frame, 1], arg[frame, 2]
                n_optional = 1 if maximum < 0 else maximum - minimum
                if f_waiting[f]:
                    if f_calls[f] < n_optional:
                        if n_eps + 1 > eps.shape[0]:
                            status, full, need = _NO_ROOM, EPS_ROOM, n_eps + 1
                            break
                        eps[n_eps, 0] = f_aux[f]
                        eps[n_eps, 1] = ret
                        n_eps += 1
                        f_here[f] = f_aux[f]
                    else:
                        f_here[f] = ret
                    f_calls[f] += 1
                if f_calls[f] < n_optional:
                    # unbounded: loop -> end, loop -> item -> loop; bounded: x{0,k} as
                    # (x (x ...)?)?, every optional copy skipping straight to the end, so epsilon
                    # closures stay O(1) instead of spanning the remaining copies (which made
                    # subset construction quadratic in k)
                    if n_states - trie_states + 1 > max_states:
                        status = ERR_TOO_MANY_NFA_STATES
                        break
                    f_aux[f] = n_states
                    n_states += 1
                    if n_eps + 1 > eps.shape[0]:
                        status, full, need = _NO_ROOM, EPS_ROOM, n_eps + 1
                        break
                    eps[n_eps, 0] = f_aux[f]
                    eps[n_eps, 1] = f_end[f]
                    n_eps += 1
                    node, end, memoise = children[first_child], f_aux[f] if maximum < 0 else f_here[f], False
                    calling = True
                elif f_calls[f] < n_optional + minimum:
                    node, end, memoise = children[first_child], f_here[f], False
                    calling = True
            if calling:
                f_waiting[f] = True
            else:  # the frame returns its start state
                ret = f_here[f]
                top -= 1
                if f_memo[f]:
                    if 2 * (n_memo + 1) > memo_keys.shape[0]:
                        status, full, need = _NO_ROOM, MEMO_ROOM, 2 * (n_memo + 1)
                        break
                    key = (frame << 31) | f_end[f]
                    slot = _memo_slot(memo_keys, key)
                    memo_keys[slot] = key
                    memo_values[slot] = ret
                    n_memo += 1
        if status == 0 and not calling:
            return (
                0,
                n_states,
                ret,
                trie_states,
                eps[:n_eps],
                byte[:n_byte],
                code_points[:n_code_points],
                refs[:n_refs_edges],
                ref_order[:n_refs],
            )
    if status == _NO_ROOM:
        rooms[full] = max(2 * rooms[full], need)
    return status, 0, 0, 0, eps[:0], byte[:0], code_points[:0], refs[:0], ref_order[:0]


@njit(cache=True)
def rule_dfa(
    numbers,
    literals,
    fsm_ptr,
    fsm_transitions,
    fsm_meta,
    fsm_final_ptr,
    fsm_finals,
    trie_nodes,
    trie_ptr,
    word_offsets,
    words,
    n_positions,
    max_states,
    max_trie_states,
):
    """`thompson_nfa` then `dfa_kernels.construct` (DFA states bounded by max_states plus the trie
    states).  Returns (status, ref_order, construct's arrays); status as construct's, or
    thompson_nfa's error."""
    status, n_states, start, trie_states, eps, byte, code_points, refs, ref_order = thompson_nfa(
        numbers,
        literals,
        fsm_ptr,
        fsm_transitions,
        fsm_meta,
        fsm_final_ptr,
        fsm_finals,
        trie_nodes,
        trie_ptr,
        word_offsets,
        words,
        n_positions,
        max_states,
        max_trie_states,
    )
    if status < 0:
        return (status, ref_order) + no_automaton(status)[1:]
    out = construct(n_states, start, 0, eps, byte, code_points, refs, ref_order.shape[0], max_states + trie_states)
    return (out[0], ref_order) + out[1:]
