"""Token-limited regions: rules a generation may spend at most N tokens in (structural tags'
``any_text`` with ``max_tokens``, a thinking budget).

A region is one rule of the automaton (passes keep it a rule, Grammar.token_limits).  The
matcher counts, per region, the tokens that start while the parse may be inside it (some stack
of the closure has its top in the rule); the count starts again from 0 when a token starts
outside.  Once N tokens are spent and the parse may still be inside, the region is closed: the
stacks whose top is in the rule are dropped.  A region's rule always accepts where it is (any
text, up to its excluded strings or end tag), so the closure already holds the stacks that
returned from it: what is left is the same parse with the region ended there, and the next token
must start after it.  Dropping stacks never raises the fewest tokens needed to finish (the
returned stacks cost what the dropped ones did), so a token budget stays satisfiable.

A closed parse is not a set of "straight after a byte" stacks, whose precomputed masks the fill
unions, so its mask is computed by running every token through it (one numba call).
"""

from __future__ import annotations

import numpy as np

from ..automata.stack import MAX_TOPS, PDA_BLOB, POOL_BLOB, WS_BLOB
from .budget import STORED_MAX, check_tokens


class TokenRegions:
    """A compiled grammar's token-limited rules: which state belongs to which region, and each
    region's limit."""

    def __init__(self, pda, limits_by_rule: dict[int, int]):
        self.rules = np.array(sorted(limits_by_rule), dtype=np.int64)
        self.limits = tuple(int(limits_by_rule[r]) for r in self.rules.tolist())
        slot_of_rule = np.full(len(pda.rule_names), -1, dtype=np.int64)
        slot_of_rule[self.rules] = np.arange(len(self.rules))
        self.state_slot = slot_of_rule[pda.state_rule]  # state -> region slot, -1 outside every region
        self._zero_cost = np.zeros(pda.num_states, dtype=np.int64)

    def inside(self, stacks: np.ndarray) -> np.ndarray:
        """Per region, whether some stack of the packed closed set has its top in it."""
        tops = stacks[: len(stacks) // 2]
        slots = self.state_slot[tops]
        found = np.zeros(len(self.rules), dtype=bool)
        found[slots[slots >= 0]] = True
        return found

    def counts_after(self, counts: tuple[int, ...], before: np.ndarray) -> tuple[int, ...]:
        """The counts after one more token that started where `before` says the parse may be."""
        return tuple(c + 1 if inside else 0 for c, inside in zip(counts, before.tolist()))

    def spent(self, counts: tuple[int, ...], inside: np.ndarray) -> np.ndarray:
        """The regions to close: their tokens are spent and the parse may still be inside."""
        return np.array([inside[k] and counts[k] >= self.limits[k] for k in range(len(counts))], dtype=bool)

    def close(self, stacks: np.ndarray, spent: np.ndarray) -> np.ndarray:
        """The packed closed stack set without the stacks whose top is in a spent region."""
        half = len(stacks) // 2
        tops = stacks[:half]
        slots = self.state_slot[tops]
        keep = ~((slots >= 0) & spent[np.maximum(slots, 0)])
        return np.concatenate([tops[keep], stacks[half:][keep]])

    def fill(
        self,
        words: np.ndarray,
        stacks: np.ndarray,
        runner,
        token_ids: np.ndarray,
        vocab: np.ndarray,
        offsets: np.ndarray,
    ) -> None:
        """Set the bits of the text tokens a closed parse accepts (stop and terminal tokens are
        the caller's): every candidate runs through the automaton once."""
        exact = np.full(len(offsets) - 1, -1, dtype=np.int32)
        runner.run(
            check_tokens,
            PDA_BLOB,
            POOL_BLOB,
            WS_BLOB,
            stacks,
            vocab,
            offsets,
            token_ids,
            self._zero_cost,
            MAX_TOPS,
            exact,
        )
        accepted = token_ids[exact[token_ids] < STORED_MAX]
        bits = np.zeros(32 * len(words), dtype=bool)
        bits[accepted] = True
        words |= np.packbits(bits, bitorder="little").view(np.int32)
