"""Constrained infilling: can a partial output -- fixed text with gaps between -- still be completed
to a string of the grammar, and which tokens may fill a given gap next?

A `Template` is a sequence of fixed byte strings and `Gap`s.  A gap holds between `min` and `max`
bytes (optionally from a given alphabet) or tokens of the grammar's tokenizer; `max=None` leaves
it unbounded.  The template is a regular language; `can_complete` decides whether the grammar's
language meets it, by summary saturation of the grammar's pushdown automaton against the
template's automaton (automata/saturation.py).  The answer is exact for every kind of gap: token
gaps become copies of the token trie.

`allowed_tokens` gives the mask for the first token of one gap with everything around it fixed:
token t is allowed iff the template with that gap replaced by t followed by the rest of the gap
(one token fewer, or len(t) bytes fewer) can be completed.  One saturation with a trie slot at the
gap and a backward pass over the recorded derivations answers it for the whole vocabulary.

Value checks (uniqueItems, overlapping oneOf: masks/value_checks.py) are not part of the
automaton the saturation reads, so a grammar with checked rules is refused
(`InfillValueChecksError`) rather than answered for its unchecked superset.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..automata import saturation
from ..automata.kernels import POOL_HEADER, ROOT
from ..core.errors import (
    ArgumentTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    LimitExceededError,
    MatcherStateError,
    UnsupportedSchemaError,
)
from .compiler import CompiledGrammar
from .matcher import GrammarMatcher
from .trie import TokenTrie

MAX_ITEMS = 2_000_000
"""Default bound on the parse items one check may create (about 100 bytes each, derivations
included); past it the check raises LimitExceededError instead of running on."""

GAP_UNITS = ("bytes", "tokens")


@dataclass(frozen=True)
class Gap:
    """A hole in a template: between `min` and `max` units (max None: no bound), the unit being a
    byte or a token of the grammar's tokenizer.  A bytes gap may hold only bytes of `alphabet`."""

    min: int = 0
    max: int | None = None
    unit: str = "bytes"
    alphabet: bytes | None = None

    def __post_init__(self):
        if self.unit not in GAP_UNITS:
            raise InvalidArgumentError(f"Gap unit must be one of {GAP_UNITS}, got {self.unit!r}")
        if not isinstance(self.min, int) or self.min < 0:
            raise InvalidArgumentError(f"Gap min must be an integer >= 0, got {self.min!r}")
        if self.max is not None and (not isinstance(self.max, int) or self.max < self.min):
            raise InvalidArgumentError(f"Gap max must be None or an integer >= min ({self.min}), got {self.max!r}")
        if self.alphabet is not None:
            if self.unit != "bytes":
                raise InvalidArgumentError("only a bytes gap takes an alphabet (a token gap holds whole tokens)")
            if not isinstance(self.alphabet, (bytes, bytearray)) or not self.alphabet:
                raise InvalidArgumentError("Gap alphabet must be a non-empty bytes object (the bytes the gap may hold)")
            object.__setattr__(self, "alphabet", bytes(sorted(set(self.alphabet))))

    @classmethod
    def any(cls) -> Gap:
        """Any byte string, empty included."""
        return cls()

    @classmethod
    def bytes(cls, max: int | None = None, *, min: int = 0, alphabet: bytes | None = None) -> Gap:
        """At most `max` (None: any number) and at least `min` bytes, from `alphabet` if given."""
        return cls(min, max, "bytes", alphabet)

    @classmethod
    def tokens(cls, max: int | None = None, *, min: int = 0) -> Gap:
        """At most `max` (None: any number) and at least `min` tokens of the tokenizer."""
        return cls(min, max, "tokens")

    def less(self, n: int) -> Gap:
        """The same gap after n of its units are used."""
        return Gap(max(self.min - n, 0), None if self.max is None else self.max - n, self.unit, self.alphabet)

    def byte_ranges(self) -> list[tuple[int, int]]:
        """The bytes a bytes gap may hold, as inclusive ranges."""
        if self.alphabet is None:
            return [(0, 255)]
        ranges: list[tuple[int, int]] = []
        for b in self.alphabet:
            if ranges and ranges[-1][1] == b - 1:
                ranges[-1] = (ranges[-1][0], b)
            else:
                ranges.append((b, b))
        return ranges


class Template:
    """Fixed text and gaps in order.  Parts: str (UTF-8), bytes, Gap, or None (an unbounded gap)."""

    def __init__(self, parts: Iterable[str | bytes | Gap | None]):
        normal: list[bytes | Gap] = []
        for k, part in enumerate(parts):
            if part is None:
                normal.append(Gap())
            elif isinstance(part, Gap):
                normal.append(part)
            elif isinstance(part, str):
                normal.append(part.encode("utf-8"))
            elif isinstance(part, (bytes, bytearray, memoryview)):
                normal.append(bytes(part))
            else:
                raise ArgumentTypeError(f"template part {k} must be str, bytes, Gap or None, got {type(part).__name__}")
        self.parts: tuple[bytes | Gap, ...] = tuple(normal)

    @classmethod
    def from_segments(cls, segments: Sequence[str | bytes], gaps: Sequence[Gap | None] | None = None) -> Template:
        """segments[0], gaps[0], segments[1], ...; gaps default to unbounded ones."""
        segments = list(segments)
        if not segments:
            raise InvalidArgumentError("a template needs at least one segment (use [''] for an empty one)")
        gaps = [None] * (len(segments) - 1) if gaps is None else list(gaps)
        if len(gaps) != len(segments) - 1:
            raise InvalidArgumentError(
                f"{len(segments)} segments need {len(segments) - 1} gaps between them, got {len(gaps)}"
            )
        parts: list = []
        for k, segment in enumerate(segments):
            if isinstance(segment, Gap) or segment is None:
                raise ArgumentTypeError(f"segment {k} is a gap; segments are text (str or bytes) and gaps go in `gaps`")
            parts.append(segment)
            if k < len(gaps):
                parts.append(gaps[k])
        return cls(parts)

    def replace(self, index: int, *parts: str | bytes | Gap | None) -> Template:
        """The template with part `index` replaced by `parts` (none: removed)."""
        items: list[str | bytes | Gap | None] = list(self.parts)
        items[index : index + 1] = parts
        return Template(items)

    def __repr__(self) -> str:
        return f"Template({list(self.parts)!r})"


class InfillValueChecksError(UnsupportedSchemaError):
    """Infilling was asked of a grammar with value checks, which it cannot evaluate."""

    def __init__(self, keyword: str, pointer: str):
        self.keyword = keyword
        super(UnsupportedSchemaError, self).__init__(
            f"infilling (can_complete, find_completion, allowed_tokens, fill_in_the_middle, diffusion_generate) "
            f"cannot evaluate the value check of {keyword!r}; generate left to right with a GrammarMatcher, "
            "or compile with value_checks=False, lenient=True for a wider grammar without the check",
            pointer,
        )


def refuse_value_checks(compiled: CompiledGrammar) -> None:
    """Raise InfillValueChecksError when the grammar has checked rules: the saturation reads the
    automaton only, whose language is the unchecked superset, so its "yes" could be wrong."""
    for check in compiled.value_checks.values():
        raise InfillValueChecksError(check.keyword, check.pointer)


def _as_template(segments, gaps) -> Template:
    if isinstance(segments, Template):
        if gaps is not None:
            raise InvalidArgumentError("pass gaps only with a list of segments, not with a Template")
        return segments
    if isinstance(segments, (str, bytes)):
        raise ArgumentTypeError("segments must be a list of strings (or a Template), not one string")
    return Template.from_segments(segments, gaps)


# -- the template automaton ----------------------------------------------------------------------


@dataclass(frozen=True)
class _TrieAutomaton:
    """A tokenizer's token trie as automaton arrays (saturation.build_trie_automaton): the kernel's
    record, and each trie position's end node."""

    record: saturation.TrieAutomaton
    end_node: np.ndarray  # per trie position

    @property
    def n_nodes(self) -> int:
        return self.record.n_nodes


def _trie_record(ptr, byte, child, depth, is_end) -> saturation.TrieAutomaton:
    return saturation.TrieAutomaton(
        t_ptr=ptr, t_byte=byte, t_child=child, t_depth=depth, t_end=is_end, n_nodes=len(depth)
    )


# Weak, not registered caches: infilling's data of one trie or grammar, kept beside the object (not
# in it) and gone with it.
_TRIE_AUTOMATA: weakref.WeakKeyDictionary[TokenTrie, _TrieAutomaton] = weakref.WeakKeyDictionary()
_NO_TRIE = _TrieAutomaton(  # templates without token gaps
    _trie_record(*(np.zeros(n, dtype=np.int64) for n in (2, 0, 0, 1, 1))), np.zeros(0, dtype=np.int64)
)
_PDA_BLOBS: weakref.WeakKeyDictionary[CompiledGrammar, np.ndarray] = weakref.WeakKeyDictionary()


def _pda_blob(compiled: CompiledGrammar) -> np.ndarray:
    """The grammar's automaton tables as int64, the one integer type the saturation kernel is
    compiled for."""
    blob = _PDA_BLOBS.get(compiled)
    if blob is None:
        blob = _PDA_BLOBS[compiled] = compiled.pda.blob.astype(np.int64)
    return blob


def _trie_automaton(trie: TokenTrie) -> _TrieAutomaton:
    """The trie automaton of a compiler's vocabulary, built once per TokenTrie."""
    got = _TRIE_AUTOMATA.get(trie)
    if got is None:
        *arrays, end_node = saturation.build_trie_automaton(
            trie.tok_offsets.astype(np.int64), trie.tok_bytes.astype(np.int64), trie.lcp.astype(np.int64)
        )
        got = _TRIE_AUTOMATA[trie] = _TrieAutomaton(_trie_record(*arrays), end_node)
    return got


class _Builder:
    """Builds a template's automaton state by state.  `cur` is always the newest explicit state,
    so a gap can start in it and the states it adds are consecutive.  Targets below zero stand
    for the root of token block -1 - target until `arrays` resolves them."""

    def __init__(self):
        self.n = 1  # explicit state 0 is the start
        self.transitions: list[tuple[int, int, int, int]] = []  # (source, lo, hi, target)
        self.text_runs: list[tuple[int, bytes]] = []  # (first state, bytes): a chain of single-byte transitions
        self.epsilons: list[tuple[int, int]] = []
        self.blocks: list[list[tuple[int, int, int]]] = []  # per block its exits (target, cap, max)
        self.slot_block = -1

    def new_state(self) -> int:
        self.n += 1
        return self.n - 1

    def new_block(self) -> int:
        self.blocks.append([])
        return len(self.blocks) - 1

    def text(self, cur: int, data: bytes) -> int:
        if data:
            assert cur == self.n - 1
            self.text_runs.append((cur, data))
            self.n += len(data)
        return self.n - 1 if data else cur

    def part(self, cur: int, part: bytes | Gap) -> int:
        if isinstance(part, bytes):
            return self.text(cur, part)
        if part.unit == "bytes":
            return self._byte_chain(cur, part)
        return self._token_gap(cur, part.min, part.max)

    def _byte_chain(self, first: int, gap: Gap) -> int:
        """States first .. first + L, state first + i having read i bytes (L: max, or min when
        unbounded, where the last state loops); returns the exit state, first + L."""
        length = gap.min if gap.max is None else gap.max
        ranges = gap.byte_ranges()
        state = first
        for i in range(length):
            nxt = self.new_state()
            assert nxt == first + i + 1
            self.transitions.extend((state, lo, hi, nxt) for lo, hi in ranges)
            state = nxt
        if gap.max is None:
            self.transitions.extend((state, lo, hi, state) for lo, hi in ranges)
        else:
            self.epsilons.extend((first + i, state) for i in range(gap.min, length))
        return state

    def _token_gap(self, cur: int, lo: int, hi: int | None) -> int:
        """Between lo and hi tokens: one trie block per token, the last one looping when hi is None."""
        if hi == 0:
            return cur
        exit_state = self.new_state()
        count = hi if hi is not None else max(lo, 1)
        blocks = [self.new_block() for _ in range(count)]
        self.epsilons.append((cur, -1 - blocks[0]))
        if lo == 0:
            self.epsilons.append((cur, exit_state))
        for k, block in enumerate(blocks):
            exits = self.blocks[block]
            if k + 1 < count:
                exits.append((-1 - blocks[k + 1], 0, -1))
            elif hi is None:
                exits.append((-1 - block, 0, -1))
            if k + 1 >= lo:
                exits.append((exit_state, 0, -1))
        return exit_state

    def slot(self, cur: int, gap: Gap) -> int:
        """The first token of `gap` in a block of its own (self.slot_block), then the rest of the
        gap: one token fewer, or as many bytes fewer as the token has."""
        block = self.slot_block = self.new_block()
        self.epsilons.append((cur, -1 - block))
        first = self.new_state()
        if gap.unit == "tokens":
            self.blocks[block].append((first, 0, -1))
            return self._token_gap(first, max(gap.min - 1, 0), None if gap.max is None else gap.max - 1)
        cap = gap.min if gap.max is None else gap.max
        self.blocks[block].append((first, cap, -1 if gap.max is None else gap.max))
        return self._byte_chain(first, gap)

    def arrays(self, final_state: int, n_nodes: int) -> saturation.TemplateAutomaton:
        n = self.n

        def resolve(target: int) -> int:
            return target if target >= 0 else n + (-1 - target) * n_nodes

        def csr(sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            order = np.argsort(sources, kind="stable")
            ptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(sources, minlength=n), out=ptr[1:])
            return ptr, order

        chunks = [np.array(self.transitions, dtype=np.int64).reshape(-1, 4)]
        for first, data in self.text_runs:
            chain = np.empty((len(data), 4), dtype=np.int64)
            chain[:, 0] = np.arange(first, first + len(data))
            chain[:, 1] = chain[:, 2] = np.frombuffer(data, dtype=np.uint8)
            chain[:, 3] = chain[:, 0] + 1
            chunks.append(chain)
        rows = np.concatenate(chunks)
        x_ptr, order = csr(rows[:, 0])
        rows = rows[order]
        eps_ptr, order = csr(np.array([e[0] for e in self.epsilons], dtype=np.int64))
        eps_dst = np.array([resolve(e[1]) for e in self.epsilons], dtype=np.int64)[order]
        final = np.zeros(n, dtype=np.int64)
        final[final_state] = 1
        blk_ptr = np.zeros(len(self.blocks) + 1, dtype=np.int64)
        np.cumsum([len(exits) for exits in self.blocks], out=blk_ptr[1:])
        exits = [x for exits in self.blocks for x in exits]
        return saturation.TemplateAutomaton(
            x_ptr=x_ptr,
            x_lo=rows[:, 1].copy(),
            x_hi=rows[:, 2].copy(),
            x_dst=rows[:, 3].copy(),
            eps_ptr=eps_ptr,
            eps_dst=eps_dst,
            final=final,
            n_explicit=n,
            blk_ptr=blk_ptr,
            exit_target=np.array([resolve(x[0]) for x in exits], dtype=np.int64),
            exit_cap=np.array([x[1] for x in exits], dtype=np.int64),
            exit_max=np.array([x[2] for x in exits], dtype=np.int64),
        )


# -- saturation ----------------------------------------------------------------------------------


@dataclass
class _Saturated:
    status: int
    bottom: int
    found: int
    items: np.ndarray
    sums: np.ndarray
    n_calls: int
    edges: np.ndarray
    exits: np.ndarray
    tpl: saturation.TemplateAutomaton
    trie: _TrieAutomaton

    def witness(self, j: int) -> bytes:
        """The bytes of summary j's first derivation: w(fact) = w(p1) + w(p2) + its byte."""
        out = bytearray()
        stack = [(1, j)]  # (0: item, 1: summary, 2: a byte)
        while stack:
            kind, k = stack.pop()
            if kind == 2:
                out.append(k)
                continue
            if kind == 0:
                p1, p2, byte = self.items[k, saturation.I_P1 :].tolist()
            else:
                (p1, p2), byte = self.sums[k, saturation.S_P1 :].tolist(), -1
            if byte >= 0:
                stack.append((2, byte))
            if p2 >= 0:
                stack.append((1, p2))
            if p1 >= 0:
                stack.append((0, p1))
        return bytes(out)

    def final_summaries(self) -> np.ndarray:
        """Ids of the summaries that end the whole parse at a final template state."""
        sums, n = self.sums, self.tpl.n_explicit
        q = sums[:, 1]
        hit = (sums[:, 0] == self.bottom) & (q < n)
        hit[hit] = self.tpl.final[q[hit]] != 0
        return np.flatnonzero(hit)


def _next_pow2(n: int) -> int:
    return 1 << max(4, (int(n) - 1).bit_length())


def _start_stacks(compiled: CompiledGrammar, start: saturation.StartStacks | None) -> saturation.StartStacks:
    """A matcher's stacks, or by default the root rule's start over the ROOT frame."""
    if start is not None:
        return start
    pda = compiled.pda
    none = np.zeros(1, dtype=np.int64)
    return saturation.StartStacks(
        init_s=np.array([pda.rule_start[pda.root_rule]], dtype=np.int64),
        init_f=np.array([ROOT], dtype=np.int64),
        frame_state=none,
        frame_parent=none,
    )


def _first_capacities(guess: int, record: bool, max_items: int) -> dict[str, int]:
    """Buffer rows to start with, from a guess of the items (a template state holds a few; a token
    slot reached everywhere about one per trie node).  A full buffer grows fourfold and the
    saturation resumes, so a low guess costs copies, not a restart."""
    return {
        "items": min(max_items, max(1 << 12, guess)),
        "sums": max(1 << 10, guess // 4),
        "ents": max(1 << 10, guess // 4),
        "calls": max(1 << 10, guess // 4),
        "edges": max(1 << 13, 2 * guess) if record else 1,
        "exits": max(1 << 8, guess // 4) if record else 1,
    }


class _Buffers:
    """The saturation's fact buffers and their hash tables; `grow` enlarges one in place of a
    restart (the kernel resumes where it stopped)."""

    TABLES = ("items", "sums", "ents", "calls")  # the buffers with a hash table
    COLUMNS = {
        "items": saturation.ITEM_COLUMNS,
        "sums": saturation.SUMMARY_COLUMNS,
        "ents": saturation.ENTRY_COLUMNS,
        "calls": saturation.CALL_COLUMNS,
        "edges": 2,
        "exits": 2,
    }

    def __init__(self, caps: dict[str, int]):
        self.rows = {name: np.empty((caps[name], self.COLUMNS[name]), dtype=np.int64) for name in self.COLUMNS}
        self.tables = {name: np.zeros(2 * _next_pow2(caps[name]), dtype=np.int64) for name in self.TABLES}
        self.cnt = np.zeros(saturation.N_COUNTERS, dtype=np.int64)

    def count(self, name: str) -> int:
        return int(self.cnt[list(self.COLUMNS).index(name)])

    def grow(self, name: str, capacity: int) -> None:
        old = self.rows[name]
        rows = np.empty((capacity, old.shape[1]), dtype=np.int64)
        n = self.count(name)
        rows[:n] = old[:n]
        self.rows[name] = rows
        if name in self.TABLES:
            table = np.zeros(2 * _next_pow2(capacity), dtype=np.int64)
            saturation.rehash(rows, n, table)
            self.tables[name] = table

    def facts(self) -> saturation.Facts:
        """The kernel's record of the buffers as they are now (grow replaces a buffer: build it
        again for each call)."""
        r, t = self.rows, self.tables
        return saturation.Facts(
            items=r["items"],
            item_table=t["items"],
            sums=r["sums"],
            sum_table=t["sums"],
            ents=r["ents"],
            ent_table=t["ents"],
            calls=r["calls"],
            call_table=t["calls"],
            edges=r["edges"],
            exits=r["exits"],
            cnt=self.cnt,
        )


_ERRORS = {
    saturation.ERR_ITEMS: "items",
    saturation.ERR_SUMMARIES: "sums",
    saturation.ERR_ENTRIES: "ents",
    saturation.ERR_CALLS: "calls",
    saturation.ERR_EDGES: "edges",
    saturation.ERR_EXITS: "exits",
}


def _saturate(
    compiled: CompiledGrammar,
    builder: _Builder,
    final_state: int,
    start: saturation.StartStacks | None,
    *,
    record: bool,
    stop_early: bool,
    max_items: int,
) -> _Saturated:
    if not isinstance(max_items, int) or max_items < 1:
        raise InvalidArgumentError(f"max_items must be a positive integer, got {max_items!r}")
    trie = _trie_automaton(compiled.compiler.trie) if builder.blocks else _NO_TRIE
    tpl = builder.arrays(final_state, trie.n_nodes)
    stacks = _start_stacks(compiled, start)
    caps = _first_capacities(
        4 * tpl.n_explicit + len(builder.blocks) * len(trie.record.t_child) + 4 * len(stacks.init_s), record, max_items
    )
    buffers = _Buffers(caps)
    kernel_records = (tuple(tpl), tuple(trie.record), tuple(stacks))  # plain tuples: see saturation's records
    while True:
        status, bottom = saturation.saturate(
            _pda_blob(compiled), *kernel_records, tuple(buffers.facts()), record, stop_early
        )
        if status >= 0:
            rows = buffers.rows
            return _Saturated(
                int(status),
                int(bottom),
                int(buffers.cnt[saturation.C_FOUND]),
                rows["items"][: buffers.count("items")],
                rows["sums"][: buffers.count("sums")],
                buffers.count("calls"),
                rows["edges"][: buffers.count("edges")],
                rows["exits"][: buffers.count("exits")],
                tpl,
                trie,
            )
        which = _ERRORS[int(status)]
        capacity = len(buffers.rows[which])
        if which == "items" and capacity >= max_items:
            raise LimitExceededError(
                f"infilling needs more than max_items={max_items} parse items for this template; bound its "
                "gaps (Gap.bytes(max=...)), use fewer token gaps or less text, or pass a larger max_items"
            )
        caps[which] = min(max_items, 4 * capacity) if which == "items" else 4 * capacity
        if buffers.cnt[saturation.C_STARTED]:
            buffers.grow(which, caps[which])
        else:  # the start stacks did not fit: start over
            buffers = _Buffers(caps)


def _build(
    parts: Sequence[str | bytes | Gap | None], builder: _Builder | None = None, cur: int = 0
) -> tuple[_Builder, int]:
    """Add the parts to a builder (a new one by default) from state cur; returns (builder, last state)."""
    builder = builder or _Builder()
    for part in Template(parts).parts:
        cur = builder.part(cur, part)
    return builder, cur


# -- public API ----------------------------------------------------------------------------------


def can_complete(
    grammar: CompiledGrammar | GrammarMatcher,
    segments,
    gaps: Sequence[Gap | None] | None = None,
    *,
    max_items: int = MAX_ITEMS,
) -> bool:
    """True iff some string of the grammar matches the template: segments[0], a string that fits
    gaps[0], segments[1], ...  (`segments` may also be a Template).  Given a GrammarMatcher instead
    of a compiled grammar, the template continues the text the matcher has accepted (its parse is
    picked up, not redone).  Exact for every kind of gap; raises LimitExceededError past
    max_items parse items instead of running on."""
    compiled, start = _grammar_and_start(grammar)
    return _search(compiled, _as_template(segments, gaps).parts, start, max_items).status == saturation.FOUND


def find_completion(
    grammar: CompiledGrammar | GrammarMatcher,
    segments,
    gaps: Sequence[Gap | None] | None = None,
    *,
    max_items: int = MAX_ITEMS,
) -> bytes | None:
    """A string that matches the template and completes the grammar (after the matcher's text,
    given a matcher), or None if there is none; see can_complete."""
    compiled, start = _grammar_and_start(grammar)
    result = _search(compiled, _as_template(segments, gaps).parts, start, max_items)
    return result.witness(result.found) if result.status == saturation.FOUND else None


def allowed_tokens(
    grammar: CompiledGrammar | GrammarMatcher, template: Template, position: int, *, max_items: int = MAX_ITEMS
) -> np.ndarray:
    """Bool mask over the vocabulary for the first token of gap `template.parts[position]`
    (after the matcher's text, given a GrammarMatcher).

    Token t is allowed iff the template with that gap replaced by t and the rest of the gap (one
    token fewer, or len(t) bytes fewer) can be completed; t itself may be any token of the
    vocabulary (a bytes gap's alphabet binds the rest of the gap).  Stop tokens are allowed iff
    the gap may be empty and the template without it can be completed (the gap may end here)."""
    compiled, start = _grammar_and_start(grammar)
    if not isinstance(template, Template):
        template = Template(template)
    if not isinstance(position, int) or not -len(template.parts) <= position < len(template.parts):
        raise IndexOutOfRangeError(f"position {position!r} is outside the template's {len(template.parts)} parts")
    position %= len(template.parts)
    before, gap, after = template.parts[:position], template.parts[position], template.parts[position + 1 :]
    if not isinstance(gap, Gap):
        raise InvalidArgumentError(
            f"template part {position} is fixed text, not a Gap; a mask is for a gap's first token"
        )
    info = compiled.tokenizer_info
    mask = np.zeros(info.vocab_size, dtype=bool)
    if gap.max is None or gap.max > 0:
        builder, cur = _build(before)
        builder, cur = _build(after, builder, builder.slot(cur, gap))
        result = _saturate(compiled, builder, cur, start, record=True, stop_early=False, max_items=max_items)
        if result.status == saturation.FOUND:
            mask[_slot_tokens(result, builder.slot_block, compiled.compiler.trie)] = True
    if gap.min == 0 and info.stop_token_ids:
        empty_ok = _search(compiled, before + after, start, max_items).status == saturation.FOUND
        mask[list(info.stop_token_ids)] = empty_ok
    return mask


def _search(
    compiled: CompiledGrammar,
    parts: Sequence[str | bytes | Gap | None],
    start: saturation.StartStacks | None,
    max_items: int,
) -> _Saturated:
    """Saturate until the first completion (from the root, or from a matcher's stacks)."""
    builder, final_state = _build(parts)
    return _saturate(compiled, builder, final_state, start, record=False, stop_early=True, max_items=max_items)


def _slot_tokens(result: _Saturated, block: int, trie: TokenTrie) -> np.ndarray:
    """Ids of the tokens that leave the slot block on some accepting run: a token ending at a node
    is allowed iff an item there bridges out through a caller record that is on such a run."""
    n_items, n_sums = len(result.items), len(result.sums)
    useful = saturation.useful_facts(
        n_items, n_sums, result.n_calls, result.edges, len(result.edges), result.final_summaries()
    )
    base = result.tpl.n_explicit + block * result.trie.n_nodes
    exits = result.exits
    leaving = exits[useful[n_items + n_sums + exits[:, 1]], 0]
    q = result.items[leaving, 2]
    nodes = q[(q >= base) & (q < base + result.trie.n_nodes)] - base
    good = np.zeros(result.trie.n_nodes, dtype=bool)
    good[nodes] = True
    return trie.token_ids[good[result.trie.end_node]]


def _grammar_and_start(
    grammar: CompiledGrammar | GrammarMatcher,
) -> tuple[CompiledGrammar, saturation.StartStacks | None]:
    """(compiled grammar, start stacks): a matcher's current parse as stacks for the saturation --
    (top states, frames, frame return states, frame parents) -- or None to start at the root."""
    if isinstance(grammar, CompiledGrammar):
        refuse_value_checks(grammar)
        return grammar, None
    if not isinstance(grammar, GrammarMatcher):
        raise ArgumentTypeError(f"expected a CompiledGrammar or a GrammarMatcher, got {type(grammar).__name__}")
    refuse_value_checks(grammar.compiled_grammar)
    if grammar.is_terminated():
        raise MatcherStateError(
            "allowed_tokens: the matcher has terminated (a stop token was accepted); nothing can follow: "
            "pass a matcher before its stop token, or call rollback() on it"
        )
    kernel_s, kernel_p, pool = grammar.parse_stacks()
    blob, h = pool.blob, POOL_HEADER
    capacity = int(blob[1])
    return grammar.compiled_grammar, saturation.StartStacks(
        init_s=kernel_s.astype(np.int64),
        init_f=kernel_p.astype(np.int64),
        frame_state=blob[h : h + capacity].astype(np.int64),
        frame_parent=blob[h + capacity : h + 2 * capacity].astype(np.int64),
    )
