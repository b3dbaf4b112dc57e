"""Integer multipleOf (grammar/json_numbers.py: the remainder automaton) against brute force.

For each k the automaton's language, cut at texts of at most MAX_LEN characters, must equal
the texts an enumeration of the integers gives: every multiple of k within the bounds as
Python (and json.dumps) writes it, "-0" when 0 is allowed, and (draft 6+) each followed by
".0", ".00", ...  Equality is checked by counting the automaton's texts of each length (dynamic
programming over its edges) and running every expected text through it: the expected texts are
all accepted, and there are exactly as many accepted texts as expected ones.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from pushmask.core.errors import UnsupportedSchemaError
from pushmask.grammar.json_numbers import _bounds, _integer_dfa, integer_expr

MAX_LEN = 5


def language_counts(dfa, max_len: int) -> list[int]:
    """How many texts of each length 0..max_len the automaton accepts."""
    start, count, lo, hi, target, final = dfa.arrays()
    owner = np.repeat(np.arange(start.shape[0]), count)
    width = hi - lo + 1
    counts = np.zeros(start.shape[0], np.int64)
    counts[0] = 1
    out = []
    for _ in range(max_len + 1):
        out.append(int(counts[final].sum()))
        nxt = np.zeros_like(counts)
        np.add.at(nxt, target, counts[owner] * width)
        counts = nxt
    return out


def accepts_all(dfa, texts: list[str]) -> list[str]:
    """The texts the automaton rejects (run as a batch over its dense ASCII table)."""
    start, count, lo, hi, target, final = dfa.arrays()
    n = start.shape[0]
    table = np.full((n + 1, 128), n, np.int64)  # row n: the dead state
    width = hi - lo + 1
    first = np.repeat(np.cumsum(width) - width, width)
    chars = np.repeat(lo, width) + np.arange(int(width.sum())) - first
    table[np.repeat(np.repeat(np.arange(n), count), width), chars] = np.repeat(target, width)
    accepting = np.append(final, False)
    rejected = []
    for length in sorted({len(t) for t in texts}):
        group = [t for t in texts if len(t) == length]
        codes = np.frombuffer("".join(group).encode("ascii"), np.uint8).reshape(len(group), length)
        state = np.zeros(len(group), np.int64)
        for i in range(length):
            state = table[state, codes[:, i]]
        rejected += [t for t, ok in zip(group, accepting[state]) if not ok]
    return rejected


def expected_texts(k: int, lo: int | None, hi: int | None, zero_fraction: bool, max_len: int) -> list[str]:
    """Brute force: the integer texts (and zero-fraction spellings) of at most max_len characters."""
    bound = 10 ** (max_len - 1)
    out = []
    for n in range(-(bound // k) * k, 10 * bound, k):
        if (lo is not None and n < lo) or (hi is not None and n > hi):
            continue
        texts = [str(n)] + (["-0"] if n == 0 else [])
        for t in texts:
            out.append(t)
            if zero_fraction:
                out.extend(t + "." + "0" * j for j in range(1, max_len - len(t)))
    return [t for t in out if len(t) <= max_len]


def check(k: int, lower=None, upper=None, zero_fraction: bool = True, **bounds) -> None:
    lower_bound, upper_bound = _bounds(
        bounds.get("minimum"),
        bounds.get("maximum"),
        bounds.get("exclusive_minimum"),
        bounds.get("exclusive_maximum"),
        "",
    )
    # a string budget that keeps the zero fractions of every k here (see test_large_k_far_texts)
    dfa = _integer_dfa(lower_bound, upper_bound, k, "", zero_fraction, 100_000)
    lo = None if lower_bound is None else int(lower_bound[0]) + (1 if lower_bound[1] else 0)
    hi = None if upper_bound is None else int(upper_bound[0]) - (1 if upper_bound[1] else 0)
    want = expected_texts(k, lo, hi, zero_fraction, MAX_LEN)
    assert accepts_all(dfa, want) == [], (k, bounds)
    by_length = [0] * (MAX_LEN + 1)
    for t in want:
        by_length[len(t)] += 1
    assert language_counts(dfa, MAX_LEN) == by_length, (k, bounds)


def test_every_k_up_to_2000_unbounded_integer_texts():
    for k in range(1, 2001):
        check(k, zero_fraction=False)


def test_zero_fractions_unbounded():
    for k in [*range(1, 13), 64, 125, 999, 1000, 1024, 2000]:
        check(k)


def test_every_k_up_to_2000_with_random_bounds():
    rng = random.Random(27)
    for k in range(1, 2001):
        a, b = sorted(rng.randint(-1_200, 1_200) for _ in range(2))
        kind = rng.randrange(4)
        bounds = [
            dict(minimum=a, maximum=b),
            dict(exclusive_minimum=a, exclusive_maximum=b),
            dict(minimum=a),
            dict(exclusive_maximum=b),
        ][kind]
        check(k, zero_fraction=rng.random() < 0.5, **bounds)


@pytest.mark.parametrize("k", [65536, 99991, 100000])
def test_large_k(k):
    check(k, zero_fraction=False)
    check(k, minimum=-3 * k, maximum=5 * k)
    check(k, exclusive_minimum=-k, exclusive_maximum=9 * k + 1)
    check(k, minimum=1)
    check(k, exclusive_maximum=0)


def test_large_k_far_texts():
    """Past MAX_LEN: long multiples (and their neighbours) through the automaton."""
    for k in (65536, 99991, 100000, 1000, 1024):
        dfa = _integer_dfa(None, None, k, "", True, 20_000)
        for n in (k * 123456789, -k * 98765, k * 2**20 + 1, k * 7 - 1):
            assert dfa.accepts(str(n)) == (n % k == 0), (k, n)
        assert not dfa.accepts(f"{k * 3 + 1}.0")
        # zero fractions of an unbounded range need the multiples up to 2**53 (about 16 copies of
        # the remainder automaton): kept within the budget, else left out (narrower, never wider)
        assert dfa.accepts(f"{k * 3}.0") == dfa.accepts("-0.00") == (k not in (65536, 99991)), k
        assert not dfa.accepts(f"{k * 2**60}.0")  # past 2**53 a float is not exact: no zero fraction


@pytest.mark.parametrize("k", [100_003, 2**20, 123_456_789])
def test_too_large_k_is_refused_with_a_fix(k):
    with pytest.raises(UnsupportedSchemaError, match="smaller multipleOf") as info:
        integer_expr(multiple_of=k, pointer="#/x")
    assert info.value.pointer == "#/x"
    integer_expr(multiple_of=k, minimum=0, maximum=1000 * k)  # few multiples: spelled out


def test_remainder_automaton_is_minimal_as_built():
    """multiples_dfa skips the minimiser (Dfa.minimal): the minimiser must find nothing to merge."""
    from pushmask.grammar.fsm import string_kernels
    from pushmask.grammar.fsm.codepoint_dfa import Dfa
    from pushmask.grammar.json_numbers import multiples_dfa

    for k in (3, 7, 99, 997, 9973, 99991, 1000, 64, 120):
        dfa = multiples_dfa(k)
        assert dfa.minimal, k
        assert Dfa.from_arrays(*string_kernels.minimize(*dfa.arrays())).size == dfa.size, k
        signed = _integer_dfa(None, None, k, "", False, 20_000)  # "-" into the same automaton
        assert signed.minimal, k
        assert Dfa.from_arrays(*string_kernels.minimize(*signed.arrays())).size == signed.size, k


def _bound_ok(n: int, bounds: dict) -> bool:
    return (
        ("minimum" not in bounds or n >= bounds["minimum"])
        and ("maximum" not in bounds or n <= bounds["maximum"])
        and ("exclusive_minimum" not in bounds or n > bounds["exclusive_minimum"])
        and ("exclusive_maximum" not in bounds or n < bounds["exclusive_maximum"])
    )


@pytest.mark.parametrize(
    "bounds",
    [{}, dict(minimum=-50 * 99991, maximum=300 * 99991), dict(exclusive_minimum=0, exclusive_maximum=2000 * 99991 + 5)],
)
def test_big_k_number_and_integer_sampled(bounds):
    """k = 99991, integer and number: random multiples and their neighbours, near and far (with
    bounds the few multiples are spelled out), against Python integer arithmetic; a number also
    takes the zero-fraction spellings of the multiples it accepts (up to 2**53), never a fraction
    or an exponent."""
    from pushmask.grammar.json_numbers import number_dfa

    k = 99991
    rng = random.Random(46)
    lower, upper = _bounds(
        bounds.get("minimum"),
        bounds.get("maximum"),
        bounds.get("exclusive_minimum"),
        bounds.get("exclusive_maximum"),
        "",
    )
    integer = _integer_dfa(lower, upper, k, "", False, 20_000)
    number = number_dfa(multiple_of=k, **bounds)
    samples = [0, k, -k, 2 * k, k - 1, k + 1]
    for _ in range(300):
        n = k * rng.choice([rng.randint(-3000, 3000), rng.randint(-(10**12), 10**12)])
        samples += [n, n + rng.choice([-1, 1, rng.randint(2, k - 1)])]
    for n in samples:
        want = n % k == 0 and _bound_ok(n, bounds)
        assert integer.accepts(str(n)) == want, (bounds, n)
        assert number.accepts(str(n)) == want, (bounds, n)
        assert not number.accepts(f"{n}.5") and not number.accepts(f"{n}e0")
        if want and bounds:  # unbounded: the zero fractions would pass the string budget (left out)
            assert number.accepts(f"{n}.0") and number.accepts(f"{n}.000"), (bounds, n)
        elif not want:
            assert not number.accepts(f"{n}.0"), (bounds, n)


def test_big_k_with_a_far_bound_is_refused_quickly_and_clearly():
    """A remainder automaton of 10**5 states times a bound's digits passes Limits.max_rule_states:
    refused by the product's first step past the budget, naming multipleOf and its pointer."""
    from pushmask.grammar.json_numbers import number_expr

    for build in (integer_expr, number_expr):
        with pytest.raises(UnsupportedSchemaError, match="smaller multipleOf") as info:
            build(multiple_of=99991, minimum=123456789, pointer="#/x")
        assert info.value.keyword == "multipleOf" and info.value.pointer == "#/x"
