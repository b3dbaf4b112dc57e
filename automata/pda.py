"""Grammar IR -> one byte-level pushdown automaton packed into flat numpy arrays.

Tables (S states over all rules, rule r owning the contiguous global ids
rule_first_state[r] .. rule_first_state[r+1]-1, its start state first), all int32 and packed
one after another into `Pda.blob` behind a header of section offsets (kernels.PDA_*):

    state_rule[S]        int32   rule owning the state
    state_accept[S]      int32   1 where the rule may end (pop to the caller)
    byte_ptr[S+1]        int32   CSR offsets into the byte-edge arrays
    byte_lo/byte_hi[E]   int32   inclusive byte range of an edge, edges of a state sorted by lo
    byte_dst[E]          int32   global target state
    ref_ptr[S+1]         int32   CSR offsets into the reference-edge arrays
    ref_rule[R]          int32   rule pushed by the edge
    ref_dst[R]           int32   global state to return to once that rule ends
    rule_start[n_rules]  int32   global start state of each rule
    rule_follow[n_rules * 256]    1 where a byte can come right after the rule ends, in some
                                     caller (byte-level FOLLOW sets; empty for an unreferenced root)
    returns_ptr[n_rules+1] int32 CSR offsets into rule_returns
    rule_returns[...]    int32   the distinct return states of each rule's callers (ref_dst of
                                 the edges that push it), which offline masks walk on into
    root[1]              int32   the root rule

Each rule also gets a structural key (`rule_keys`): equal keys mean equal rule automata with
equal referenced sub-automata, so per-state token masks can be shared across grammars.  A state
gets one too (`Pda.state_key`): the part of its rule it can still reach, so two states of
different rules (an "any key but these names" automaton once past the names, and any other
string of the same continuation) share their mask.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import CompileClock, GrammarError, LimitExceededError
from ..core.jit import njit
from ..core.limits import DEFAULT_LIMITS, Limits
from ..grammar.fsm.graph_kernels import grouped
from ..grammar.ir import Grammar
from . import kernels
from .dfa import RuleDfa, build_rule_dfa

MAX_CONTINUATIONS = 64
"""Return states past which a rule's follow pairs stop looking into its callers (any byte may
then follow each FOLLOW byte; masks/walk.py)."""

STATE_KEY_STATES = 512
"""Reachable states past which a state's mask key falls back to its rule's key and index."""


class _SectionView:
    """A named table of `Pda.blob` as a read-only attribute: the view of one section (kernels.PDA_*)."""

    def __init__(self, section: int):
        self.section = section

    def __get__(self, pda: Pda, owner=None) -> np.ndarray:
        return pda._section(self.section)


@dataclass
class Pda:
    """The packed automaton.  `blob` holds every table (see kernels.PDA_* for its layout); the
    named arrays are views into it for Python-side use."""

    rule_names: list[str]
    rule_keys: list[str]
    rule_first_state: np.ndarray
    blob: np.ndarray
    root_rule: int
    _state_keys: dict = field(default_factory=dict, repr=False, compare=False)
    _rule_hashes: np.ndarray | None = field(default=None, repr=False, compare=False)

    def _section(self, k: int) -> np.ndarray:
        return self.blob[self.blob[k] : self.blob[k + 1]]

    state_accept = _SectionView(kernels.PDA_ACCEPT)
    byte_ptr = _SectionView(kernels.PDA_BYTE_PTR)
    byte_lo = _SectionView(kernels.PDA_BYTE_LO)
    byte_hi = _SectionView(kernels.PDA_BYTE_HI)
    byte_dst = _SectionView(kernels.PDA_BYTE_DST)
    ref_ptr = _SectionView(kernels.PDA_REF_PTR)
    ref_rule = _SectionView(kernels.PDA_REF_RULE)
    ref_dst = _SectionView(kernels.PDA_REF_DST)
    rule_start = _SectionView(kernels.PDA_RULE_START)
    state_rule = _SectionView(kernels.PDA_STATE_RULE)

    @property
    def rule_follow(self) -> np.ndarray:
        return self._section(kernels.PDA_FOLLOW).reshape(-1, 256)

    @property
    def num_states(self) -> int:
        return int(self.rule_first_state[-1])

    def nbytes(self) -> int:
        return self.blob.nbytes + self.rule_first_state.nbytes

    def state_key(self, state: int) -> str:
        """Structural key of what a state can still do: the states of its rule reachable from
        it, numbered breadth-first, with their byte edges, accept flags and references (by the
        referenced rules' keys).  Equal keys mean equal right languages, hence equal masks
        under equal follow pairs.  Past STATE_KEY_STATES reachable states the key is the rule
        key plus the state's index (no sharing beyond the rule's, and no long walk)."""
        return self.state_keys([state])[0]

    def state_keys(self, states) -> list[str]:
        """state_key of each of these states; the shapes of those not keyed yet come from one
        kernel call, each hashed (blake2b: the shared mask cache trusts a key across grammars)."""
        keys = self._state_keys
        new = [s for s in dict.fromkeys(states) if s not in keys]
        if new:
            shapes, ends = _reachable_shapes(
                self.blob, np.array(new, dtype=np.int64), self.rule_hashes, STATE_KEY_STATES
            )
            data = memoryview(shapes).cast("B")
            start = 0
            for state, end in zip(new, (4 * ends).tolist()):
                if end > start:  # "t": int32 shapes (the "s" keys of older versions hashed int64s)
                    keys[state] = "t" + hashlib.blake2b(data[start:end], digest_size=16).hexdigest()
                else:
                    rule, local = self.local_state(state)
                    keys[state] = f"{self.rule_keys[rule]}/{local}"
                start = end
        return [keys[s] for s in states]

    @property
    def rule_hashes(self) -> np.ndarray:
        """64 bits of each rule's key, as two int32s (what a state's shape names a rule by)."""
        if self._rule_hashes is None:
            self._rule_hashes = np.array([int(k[:16], 16) for k in self.rule_keys], dtype=np.uint64).view(np.int32)
        return self._rule_hashes

    def returns(self, rule: int) -> np.ndarray:
        """Global states a caller of `rule` returns to once it ends (int32, ascending)."""
        ptr = self._section(kernels.PDA_RETURNS_PTR)
        return self._section(kernels.PDA_RETURNS)[ptr[rule] : ptr[rule + 1]]

    def local_state(self, state: int) -> tuple[int, int]:
        """(rule, index of the state inside its rule's DFA)."""
        rule = int(self.state_rule[state])
        return rule, state - int(self.rule_first_state[rule])


@njit(cache=True)
def _reachable_shapes(pda, states, rule_hashes, max_states):
    """The reachable shapes of these states, one after another: (int32s, ends[i] where state i's
    shape ends); a state's shape is empty past max_states reachable states."""
    state_rule = kernels.blob_section(pda, kernels.PDA_STATE_RULE)
    rule_start = kernels.blob_section(pda, kernels.PDA_RULE_START)
    most = 0  # states of the largest rule met
    for state in states:
        rule = state_rule[state]
        end = rule_start[rule + 1] if rule + 1 < rule_start.shape[0] else state_rule.shape[0]
        most = max(most, end - rule_start[rule])
    number = np.full(most, -1, dtype=np.int64)  # by state less its rule's first, -1 between states
    order = np.empty(max_states + 1, dtype=np.int64)
    out = np.empty(256 * states.shape[0], dtype=np.int32)
    ends = np.empty(states.shape[0], dtype=np.int64)
    n_out = 0
    for i in range(states.shape[0]):
        first = rule_start[state_rule[states[i]]]
        out, n_out = _reachable_shape(pda, states[i], first, rule_hashes, max_states, number, order, out, n_out)
        ends[i] = n_out
    return out[:n_out], ends


@njit(cache=True, inline="always")
def _rotl(x, b):
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@njit(cache=True, inline="always")
def _sip_rounds(v0, v1, v2, v3, rounds):
    for _ in range(rounds):
        v0 += v1
        v1 = _rotl(v1, 13) ^ v0
        v0 = _rotl(v0, 32)
        v2 += v3
        v3 = _rotl(v3, 16) ^ v2
        v0 += v3
        v3 = _rotl(v3, 21) ^ v0
        v2 += v1
        v1 = _rotl(v1, 17) ^ v2
        v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@njit(cache=True)
def siphash(words, n, k0, k1):
    """SipHash-2-4 of the int32s words[:n] (little-endian bytes) under the key (k0, k1), as an
    int64: a keyed hash, so that inputs cannot be chosen to collide without the key."""
    v0 = k0 ^ np.uint64(0x736F6D6570736575)
    v1 = k1 ^ np.uint64(0x646F72616E646F6D)
    v2 = k0 ^ np.uint64(0x6C7967656E657261)
    v3 = k1 ^ np.uint64(0x7465646279746573)
    low = np.uint64(0xFFFFFFFF)
    i = 0
    while i + 1 < n:
        m = (np.uint64(words[i]) & low) | ((np.uint64(words[i + 1]) & low) << np.uint64(32))
        v3 ^= m
        v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 2)
        v0 ^= m
        i += 2
    m = np.uint64((4 * n) & 0xFF) << np.uint64(56)
    if i < n:
        m |= np.uint64(words[i]) & low
    v3 ^= m
    v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 2)
    v0 ^= m
    v2 ^= np.uint64(0xFF)
    v0, v1, v2, v3 = _sip_rounds(v0, v1, v2, v3, 4)
    return np.int64(v0 ^ v1 ^ v2 ^ v3)


@njit(cache=True)
def state_hash(pda, state, rule_hashes, secret, memo):
    """A 128-bit keyed hash of a state's key (Pda.state_key: its reachable shape, or past
    STATE_KEY_STATES states its rule and index), as (h0, h1) under the four uint64s `secret`;
    memo[3 * state: 3 * state + 3] keeps (h0, h1, 1) once computed."""
    if memo[3 * state + 2] != 0:
        return memo[3 * state], memo[3 * state + 1]
    state_rule = kernels.blob_section(pda, kernels.PDA_STATE_RULE)
    rule_start = kernels.blob_section(pda, kernels.PDA_RULE_START)
    rule = state_rule[state]
    first = rule_start[rule]
    end = rule_start[rule + 1] if rule + 1 < rule_start.shape[0] else state_rule.shape[0]
    number = np.full(end - first, -1, dtype=np.int64)
    order = np.empty(STATE_KEY_STATES + 1, dtype=np.int64)
    out, n_out = _reachable_shape(
        pda, state, first, rule_hashes, STATE_KEY_STATES, number, order, np.empty(256, dtype=np.int32), 0
    )
    if n_out == 0:  # a shape starts with an accept flag (0 or 1), never -1
        out[0] = -1
        out[1] = rule_hashes[2 * rule]
        out[2] = rule_hashes[2 * rule + 1]
        out[3] = state - first
        n_out = 4
    h0 = siphash(out, n_out, secret[0], secret[1])
    h1 = siphash(out, n_out, secret[2], secret[3])
    memo[3 * state] = h0
    memo[3 * state + 1] = h1
    memo[3 * state + 2] = 1
    return h0, h1


@njit(cache=True)
def _visit(t, first, number, order, n, max_states):
    """Give state t (of the rule whose states start at `first`) the next breadth-first number n
    on its first visit; return how many states are numbered, or -1 past max_states."""
    if number[t - first] < 0:
        if n > max_states:
            return -1
        number[t - first] = n
        order[n] = t
        n += 1
    return n


@njit(cache=True)
def _reachable_shape(pda, state, first, rule_hashes, max_states, number, order, out, n_out):
    """Append to out[n_out:] the reachable part of a state's rule as int32s, states numbered
    breadth-first from it: per state its accept flag, byte edges (lo, hi, target number) and
    references (rule hash: rule_hashes[2r], [2r + 1]; target number); nothing past max_states
    reachable states.  Returns (out, grown if need be, its new length); number[] (by state less
    `first`, its rule's first state) is -1 again after."""
    accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, _ = kernels.pda_views(pda)
    start = n_out
    number[state - first] = 0
    order[0] = state
    n = 1
    i = 0
    while i < n:
        s = order[i]
        i += 1
        need = 3 + 3 * (byte_ptr[s + 1] - byte_ptr[s]) + 3 * (ref_ptr[s + 1] - ref_ptr[s])
        if n_out + need > out.shape[0]:
            grown = np.empty(2 * (n_out + need), dtype=np.int32)
            grown[:n_out] = out[:n_out]
            out = grown
        out[n_out] = accept[s]
        out[n_out + 1] = byte_ptr[s + 1] - byte_ptr[s]
        n_out += 2
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            t = byte_dst[e]
            n = _visit(t, first, number, order, n, max_states)
            if n < 0:
                break
            out[n_out] = byte_lo[e]
            out[n_out + 1] = byte_hi[e]
            out[n_out + 2] = number[t - first]
            n_out += 3
        if n < 0:
            break
        out[n_out] = ref_ptr[s + 1] - ref_ptr[s]
        n_out += 1
        for e in range(ref_ptr[s], ref_ptr[s + 1]):
            t = ref_dst[e]
            n = _visit(t, first, number, order, n, max_states)
            if n < 0:
                break
            out[n_out] = rule_hashes[2 * ref_rule[e]]
            out[n_out + 1] = rule_hashes[2 * ref_rule[e] + 1]
            out[n_out + 2] = number[t - first]
            n_out += 3
        if n < 0:
            break
    for k in range(max_states + 1 if n < 0 else n):
        number[order[k] - first] = -1
    return out, start if n < 0 else n_out


def build_pda(grammar: Grammar, limits: Limits = DEFAULT_LIMITS, clock: CompileClock | None = None) -> Pda:
    """Build every rule's DFA and pack them; the grammar must already be normalised.  `clock`
    (a wall-clock limit) is checked before each rule."""
    grammar.check_compilable()
    names = list(grammar.rules)
    if grammar.root not in grammar.rules:
        raise GrammarError(f"the grammar has no root rule {grammar.root!r}")
    index = {name: i for i, name in enumerate(names)}
    dfas: list[RuleDfa] = []
    total = 0
    for name in names:
        if clock is not None:
            clock.check(f"the automaton of rule {name!r}")
        dfa = _as_rule_dfa(build_rule_dfa(grammar.rules[name], limits.max_rule_states))
        for ref_name in dfa.refs:
            if ref_name not in index:
                line, col = grammar.positions.get(name, (None, None))
                raise GrammarError(f"rule {name!r} references undefined rule {ref_name!r}", line, col)
        total += dfa.num_states
        if total > limits.max_total_states:
            raise LimitExceededError(
                f"grammar automaton exceeds {limits.max_total_states} states; "
                "reduce the grammar size or raise the max_total_states limit"
            )
        dfas.append(dfa)

    blob, first = _packed(dfas, index, index[grammar.root])
    return Pda(
        rule_names=names,
        rule_keys=_rule_keys(dfas, index),
        rule_first_state=first,
        blob=blob,
        root_rule=index[grammar.root],
    )


def _packed(dfas: list[RuleDfa], index: dict[str, int], root: int) -> tuple[np.ndarray, np.ndarray]:
    """The blob (kernels.PDA_* sections behind a header of their offsets) of the rules' automata
    one after another, local state and reference numbers made global, and each rule's first state
    (and the total).  Every section's size is known before any is written (the return states
    come from the reference edges alone), so each is written once, in place, into the one int32
    blob: no int64 or per-section copies of the tables for a moment.  Each table is one
    concatenation plus one offset added per row (np.repeat of the per-rule offsets), not a numpy
    operation per rule: a schema has thousands of small rules.  `dfas` is never empty (the root
    rule is one of them)."""
    arrays = [dfa.arrays for dfa in dfas]
    n_rules = len(dfas)
    sizes = np.array([len(a[0]) for a in arrays], dtype=np.int64)
    byte_counts = np.array([len(a[2]) for a in arrays], dtype=np.int64)
    ref_counts = np.array([len(a[6]) for a in arrays], dtype=np.int64)
    first = np.zeros(n_rules + 1, dtype=np.int32)
    np.cumsum(sizes, out=first[1:])
    n_states, n_bytes, n_refs = int(first[-1]), int(byte_counts.sum()), int(ref_counts.sum())

    def starts(counts: np.ndarray) -> np.ndarray:
        """Where each rule's rows start among all rules' rows."""
        return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int32)

    def concat(k: int, out: np.ndarray, offsets: np.ndarray | None = None, counts: np.ndarray | None = None) -> None:
        """Array k of every rule's automaton, one after another, into `out`; with `offsets`,
        each rule's rows plus that rule's offset (`counts` rows a rule)."""
        np.concatenate([a[k] for a in arrays], out=out)
        if offsets is not None:
            assert counts is not None  # given with the offsets
            out += np.repeat(offsets, counts)

    def pointers(k: int, counts: np.ndarray, out: np.ndarray) -> None:
        """Global CSR offsets from each rule's local ones (array k, n + 1 offsets a rule) into `out`."""
        out[0] = 0
        np.concatenate([a[k][1:] for a in arrays], out=out[1:])
        out[1:] += np.repeat(starts(counts), sizes)

    # the rules each rule references (global numbers), all rules' lists one after another
    ref_maps = np.array([index[name] for dfa in dfas for name in dfa.refs], dtype=np.int32)
    ref_local = np.empty(n_refs, dtype=np.int32)
    concat(6, ref_local, starts(np.array([len(dfa.refs) for dfa in dfas], dtype=np.int64)), ref_counts)
    ref_rule = ref_maps[ref_local]
    ref_dst = np.empty(n_refs, dtype=np.int32)
    concat(7, ref_dst, first[:-1], ref_counts)
    returns_ptr, returns = _returns(ref_rule, ref_dst, n_rules)

    section_sizes = [n_states, n_states + 1, n_bytes, n_bytes, n_bytes, n_states + 1, n_refs, n_refs, n_rules]
    section_sizes += [n_rules * 256, n_states, n_rules + 1, len(returns), 1]
    assert len(section_sizes) == kernels.PDA_SECTIONS
    offsets = np.cumsum([kernels.PDA_HEADER, *section_sizes])
    blob = np.empty(int(offsets[-1]), dtype=np.int32)
    blob[: kernels.PDA_HEADER] = offsets
    sections = [blob[offsets[k] : offsets[k + 1]] for k in range(kernels.PDA_SECTIONS)]
    concat(0, sections[kernels.PDA_ACCEPT])
    pointers(1, byte_counts, sections[kernels.PDA_BYTE_PTR])
    concat(2, sections[kernels.PDA_BYTE_LO])
    concat(3, sections[kernels.PDA_BYTE_HI])
    concat(4, sections[kernels.PDA_BYTE_DST], first[:-1], byte_counts)
    pointers(5, ref_counts, sections[kernels.PDA_REF_PTR])
    sections[kernels.PDA_REF_RULE][:] = ref_rule
    sections[kernels.PDA_REF_DST][:] = ref_dst
    sections[kernels.PDA_RULE_START][:] = first[:-1]
    sections[kernels.PDA_FOLLOW][:] = _follow_bytes(n_rules, *sections[: kernels.PDA_FOLLOW]).reshape(-1)
    sections[kernels.PDA_STATE_RULE][:] = np.repeat(np.arange(n_rules, dtype=np.int32), sizes)
    sections[kernels.PDA_RETURNS_PTR][:] = returns_ptr
    sections[kernels.PDA_RETURNS][:] = returns
    sections[kernels.PDA_ROOT][0] = root
    return blob, first


def _returns(ref_rule: np.ndarray, ref_dst: np.ndarray, n_rules: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the distinct return states of each rule's callers (the ref edges' targets)."""
    ptr = np.zeros(n_rules + 1, dtype=np.int32)
    if len(ref_rule) == 0:
        return ptr, np.zeros(0, dtype=np.int32)
    # one int64 per (rule, state) pair, so that a 1-D unique sorts them (unique over axis=1 is
    # several times slower); both fit in 31 bits
    pairs = np.unique((ref_rule.astype(np.int64) << 32) | ref_dst.astype(np.int64))
    np.add.at(ptr, (pairs >> 32) + 1, 1)
    np.cumsum(ptr, out=ptr)
    return ptr, (pairs & 0xFFFFFFFF).astype(np.int32)


def _as_rule_dfa(dfa) -> RuleDfa:
    """`dfa` as a RuleDfa (benchmarks/rule_dfa_time.py loads old versions of automata/dfa.py,
    whose automata only have the per-state lists)."""
    return dfa if isinstance(dfa, RuleDfa) else RuleDfa(dfa.accepting, dfa.byte_edges, dfa.ref_edges, dfa.refs)


@njit(cache=True)
def _propagate_unions(bits, src, dst):
    """Least fixpoint of bits[dst[i]] |= bits[src[i]] for every edge i, by a worklist: each node is
    revisited only when one of its sources grew, so a long chain costs its length, not its square."""
    n = bits.shape[0]
    ptr, targets = grouped(src, dst, n)
    stack = np.arange(n - 1, -1, -1).astype(np.int64)
    top = n
    queued = np.ones(n, dtype=np.bool_)
    while top > 0:
        top -= 1
        v = stack[top]
        queued[v] = False
        for k in range(ptr[v], ptr[v + 1]):
            u = targets[k]
            grew = False
            for w in range(bits.shape[1]):
                merged = bits[u, w] | bits[v, w]
                if merged != bits[u, w]:
                    bits[u, w] = merged
                    grew = True
            if grew and not queued[u]:  # each node is on the stack at most once: n slots suffice
                stack[top] = u
                top += 1
                queued[u] = True


@njit(cache=True)
def _add_byte_range(words, lo, hi):
    """Set bytes lo..hi in a 256-bit set of 4 uint64 words, a word at a time (a wide range, as
    UTF-8 continuation bytes are, costs at most 4 steps instead of one per byte)."""
    for w in range(lo >> 6, (hi >> 6) + 1):
        first_bit = max(lo, w * 64) - w * 64
        width = min(hi, w * 64 + 63) - w * 64 - first_bit + 1
        if width == 64:
            words[w] = ~np.uint64(0)
        else:
            words[w] |= ((np.uint64(1) << np.uint64(width)) - np.uint64(1)) << np.uint64(first_bit)


@njit(cache=True)
def _follow_bytes(n_rules, accept, byte_ptr, byte_lo, byte_hi, byte_dst, ref_ptr, ref_rule, ref_dst, rule_start):
    """FOLLOW sets over bytes: out[r, b] = 1 when byte b may be consumed right after rule r ends.

    A token that ends a rule and then continues with a byte outside its FOLLOW set is rejected in
    every context, so the offline mask can decide it instead of leaving it uncertain.  Three
    least fixpoints over the packed tables, each by a worklist (linear in the tables for the long
    rule chains of wide objects): nullable[s] (s can end its rule without a byte), first[s] (bytes
    consumable first from s, entering callees), then follow.
    """
    n = accept.shape[0]
    n_refs = ref_rule.shape[0]
    ref_src = np.empty(n_refs, dtype=np.int64)
    for s in range(n):
        ref_src[ref_ptr[s] : ref_ptr[s + 1]] = s
    callee = np.empty(n_refs, dtype=np.int64)
    for e in range(n_refs):
        callee[e] = rule_start[ref_rule[e]]
    # nullable: s is nullable when accepting, or when some ref edge has a nullable callee start
    # and a nullable target; re-check s whenever one of those two becomes nullable.
    ptr, edge_of = grouped(
        np.concatenate((callee, ref_dst.astype(np.int64))), np.concatenate((np.arange(n_refs), np.arange(n_refs))), n
    )
    nullable = accept != 0
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for s in range(n):
        if nullable[s]:
            stack[top] = s
            top += 1
    while top > 0:
        top -= 1
        v = stack[top]
        for k in range(ptr[v], ptr[v + 1]):
            e = edge_of[k]
            s = ref_src[e]
            if not nullable[s] and nullable[callee[e]] and nullable[ref_dst[e]]:
                nullable[s] = True
                stack[top] = s
                top += 1
    # first[s]: its own bytes, its callees' first bytes, and past a nullable callee its target's.
    # Only the states a reference edge reads (callee starts, its source and target) need one:
    # they get rows slot[s] of `first`, not every state (32 bytes a state: rules of large string
    # automata hold hundreds of thousands of states and few references).
    slot = np.full(n, -1, dtype=np.int32)
    n_slots = 0
    for e in range(n_refs):
        for s in (callee[e], ref_src[e], np.int64(ref_dst[e])):
            if slot[s] < 0:
                slot[s] = n_slots
                n_slots += 1
    first = np.zeros((n_slots, 4), dtype=np.uint64)  # 256-bit byte sets, 4 words a state
    for s in range(n):
        if slot[s] >= 0:
            for e in range(byte_ptr[s], byte_ptr[s + 1]):
                _add_byte_range(first[slot[s]], byte_lo[e], byte_hi[e])
    n_past = 0
    for e in range(n_refs):
        if nullable[callee[e]]:
            n_past += 1
    first_src = np.empty(n_refs + n_past, dtype=np.int64)
    first_dst = np.empty(n_refs + n_past, dtype=np.int64)
    i = 0
    for e in range(n_refs):
        first_src[i] = slot[callee[e]]
        first_dst[i] = slot[ref_src[e]]
        i += 1
        if nullable[callee[e]]:
            first_src[i] = slot[ref_dst[e]]
            first_dst[i] = slot[ref_src[e]]
            i += 1
    _propagate_unions(first, first_src, first_dst)
    # follow[c] gets first[t] for every call of c returning to t, and follow[r] of the caller's
    # rule r when t can end r without a byte.
    state_rule = np.empty(n, dtype=np.int64)
    for r in range(n_rules):
        end = rule_start[r + 1] if r + 1 < n_rules else n
        state_rule[rule_start[r] : end] = r
    follow = np.zeros((n_rules, 4), dtype=np.uint64)
    n_through = 0
    for e in range(n_refs):
        t = ref_dst[e]
        for w in range(4):
            follow[ref_rule[e], w] |= first[slot[t], w]
        if nullable[t]:
            n_through += 1
    follow_src = np.empty(n_through, dtype=np.int64)
    follow_dst = np.empty(n_through, dtype=np.int64)
    i = 0
    for e in range(n_refs):
        if nullable[ref_dst[e]]:
            follow_src[i] = state_rule[ref_src[e]]
            follow_dst[i] = ref_rule[e]
            i += 1
    _propagate_unions(follow, follow_src, follow_dst)
    out = np.zeros((n_rules, 256), dtype=np.int32)
    for r in range(n_rules):
        for b in range(256):
            out[r, b] = (follow[r, b >> 6] >> np.uint64(b & 63)) & np.uint64(1)
    return out


def _rule_keys(dfas: list[RuleDfa], index: dict[str, int]) -> list[str]:
    """Structural key per rule: its DFA plus, recursively, the keys of the rules it references.

    Rules on a reference cycle are keyed by their whole strongly connected component, visited
    breadth-first from the rule itself, so the key never depends on rule names or numbering.
    """
    succ = [[index[name] for name in dfa.refs] for dfa in dfas]
    ptr = np.zeros(len(dfas) + 1, dtype=np.int64)
    np.cumsum([len(targets) for targets in succ], out=ptr[1:])
    flat = np.array([t for targets in succ for t in targets], dtype=np.int64)
    numbers, n_components = _reference_components(ptr, flat)
    component = numbers.tolist()
    signature = [dfa.digest() for dfa in dfas]
    keys: dict[int, str] = {}

    def key_of(r: int) -> str:
        # Components are keyed in reverse topological order (below), so every rule outside r's
        # component already has its key.
        members = component[r]
        order = [r]
        position = {r: 0}
        i = 0
        while i < len(order):
            for t in succ[order[i]]:
                if component[t] == members and t not in position:
                    position[t] = len(order)
                    order.append(t)
            i += 1
        h = hashlib.sha256()
        for x in order:
            h.update(signature[x])
            for t in succ[x]:
                h.update(b"|in:%d" % position[t] if t in position else b"|out:" + keys[t].encode())
            h.update(b";")
        return h.hexdigest()[:32]

    for r in np.argsort(numbers, kind="stable").tolist():  # by component, in Tarjan's order
        keys[r] = key_of(r)
    return [keys[r] for r in range(len(dfas))]


@njit(cache=True)
def _reference_components(ptr, succ):
    """Tarjan's strongly connected components of the reference graph (rule r references the
    rules succ[ptr[r]:ptr[r + 1]]), iterative: (each rule's component number, how many).  Tarjan
    finishes a component after every component it reaches, so the numbers are in reverse
    topological order: a rule's references lie in its own component or in lower-numbered ones."""
    n = ptr.shape[0] - 1
    index_of = np.full(n, -1, np.int64)
    low = np.zeros(n, np.int64)
    on_stack = np.zeros(n, np.bool_)
    stack = np.empty(n, np.int64)  # Tarjan's stack of visited rules not yet in a component
    top = 0
    path = np.empty(n, np.int64)  # the depth-first path, and the next reference of each rule on it
    next_edge = np.empty(n, np.int64)
    component = np.full(n, -1, np.int64)
    visited = 0
    n_components = 0
    for root in range(n):
        if index_of[root] >= 0:
            continue
        index_of[root] = visited
        low[root] = visited
        visited += 1
        stack[top] = root
        top += 1
        on_stack[root] = True
        path[0] = root
        next_edge[0] = ptr[root]
        depth = 1
        while depth > 0:
            v = path[depth - 1]
            k = next_edge[depth - 1]
            if k < ptr[v + 1]:
                next_edge[depth - 1] = k + 1
                w = succ[k]
                if index_of[w] < 0:
                    index_of[w] = visited
                    low[w] = visited
                    visited += 1
                    stack[top] = w
                    top += 1
                    on_stack[w] = True
                    path[depth] = w
                    next_edge[depth] = ptr[w]
                    depth += 1
                elif on_stack[w]:
                    low[v] = min(low[v], index_of[w])
                continue
            depth -= 1
            if low[v] == index_of[v]:  # v is its component's root: pop the component
                while True:
                    top -= 1
                    w = stack[top]
                    on_stack[w] = False
                    component[w] = n_components
                    if w == v:
                        break
                n_components += 1
            if depth > 0:
                parent = path[depth - 1]
                low[parent] = min(low[parent], low[v])
    return component, n_components
