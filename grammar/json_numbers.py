"""JSON number tokens under JSON Schema numeric constraints, as grammar IR.

Every language here is built as a deterministic automaton over ASCII (`Dfa` from
codepoint_dfa) by comparing digits against the bounds as they are read -- the classic
digit-range construction, done as an automaton instead of a regex -- and handed over as
one IR `CharFsm`.

What a text means.  `json.loads` turns a text without '.', 'e' or 'E' into a Python int
(exact), and any other text into a float (the nearest double, overflowing to +-inf); the
`jsonschema` library then compares that value with the bounds exactly.  So:

- integer texts are compared exactly with the bound;
- fraction/exponent texts are accepted when their *rounded* value meets the bound.  For a
  bound we find the extreme double d allowed and accept the exact decimal x when it lies
  strictly inside the midpoint between d and its outside neighbour (so it rounds to d or
  further in).  This makes "0.1" valid for minimum 0.1 although 0.1 < float(0.1) exactly,
  and "0.99999999999999999" invalid for exclusiveMaximum 1 (it rounds to 1.0).  A bound of
  exactly zero uses x >= 0 / x <= 0 instead (so "-0.0" counts as 0, tiny negatives don't).

Policies (documented choices, all sound):

- `integer_expr` accepts integer texts, and by default also the same integer followed by
  ".0", ".00", ... (draft 6+: 1.0 is an integer, and jsonschema agrees), but only for
  |n| <= 2**53 where the float is exact.  Exponent texts ("1e2") are not accepted for
  integers.  "-0" is accepted when 0 is allowed (json.loads gives 0).
- `number_expr` without bounds accepts the whole JSON number syntax.  With bounds, exponent
  texts are accepted in normalised scientific form only -- one non-zero digit before the
  point, as repr/json.dumps write them ("1e-05", "-2.5E+300") -- so the exponent tells the
  magnitude and the automaton stays finite.  With multipleOf, exponent texts are rejected.
- An integer multipleOf k is the remainder automaton of k, built directly (`multiples_dfa`);
  k whose automaton passes Limits.max_rule_states is refused at once.  Zero fractions of an
  unbounded range need the multiples up to 2**53 (about 16 copies of it): past
  Limits.max_string_states they are left out (integer texts only).  A `number` with an integer
  multipleOf is the same automaton (integer texts and their zero fractions).  The remainder
  automaton is minimal as built (`Dfa.minimal`), so no minimiser pass runs over its 10**5 states.
- multipleOf uses the *decimal* value of the schema's number (0.01 means 1/100, as the
  spec says).  The jsonschema library divides floats instead and wrongly rejects about one
  in six exact multiples of 0.01 (e.g. 0.07 / 0.01 = 7.000000000000001); we follow the
  spec there.  A float divisor restricts integer texts to |n| <= 2**53 (exact as floats).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

import numpy as np

from ..core.caches import memoized
from ..core.errors import SchemaError
from ..core.limits import DEFAULT_LIMITS
from .fsm import number_kernels, string_kernels
from .fsm.codepoint_dfa import Dfa, StateLimitExceeded, budgeted, dfa_to_char_fsm, literal_dfa
from .ir import NOTHING, Expr

__all__ = ["integer_expr", "number_expr", "number_literal_expr", "integer_range_dfa", "number_dfa", "natural_range_dfa"]

_DIGIT = (ord("0"), ord("9"))
_MAX_EXACT_INT = 2**53
_MAX_DOUBLE = Fraction(1.7976931348623157e308)
_HALF_TOP_ULP = (Fraction(2) ** 1024 - _MAX_DOUBLE) / 2  # half the gap from the largest double to 2**1024


# ---------------------------------------------------------------------------------------------
# Small automaton helpers.


def _cmp(a: str, b: str) -> int:
    return (a > b) - (a < b)


def _literal(text: str) -> Dfa:
    trans = [[(ord(c), ord(c), i + 1)] for i, c in enumerate(text)] + [[]]
    return Dfa(trans, [len(text)])


def _chain(first: Dfa, sep: Iterable[str], second: Dfa) -> Dfa:
    """first, then one of the characters `sep`, then second (sep must not continue `first`)."""
    if first.is_empty() or second.is_empty():
        return Dfa([[]], ())
    offset = first.size
    trans = [list(edges) for edges in first.trans]
    for f in first.finals:
        used = {cp for lo, hi, _ in trans[f] for cp in range(lo, hi + 1)} if trans[f] else set()
        for ch in sep:
            assert ord(ch) not in used, "separator collides with a continuation"
            trans[f].append((ord(ch), ord(ch), offset))
        trans[f].sort()
    trans.extend([(lo, hi, t + offset) for lo, hi, t in edges] for edges in second.trans)
    return Dfa(trans, (f + offset for f in second.finals)).trim()


def _prefixed(ch: str, dfa: Dfa) -> Dfa:
    return _chain(_literal(""), ch, dfa)


def _union_all(dfas: list[Dfa], budget: int) -> Dfa:
    out = Dfa([[]], ())
    for d in dfas:
        if not d.is_empty():
            out = d if out.is_empty() else out.union(d, budget, minimize=False)
    return out


# ---------------------------------------------------------------------------------------------
# Natural numbers in a range: the digit-range automaton.


def natural_range_dfa(
    lo: int,
    hi: int | None,
    modulus: int = 1,
    *,
    leading_zeros: bool = False,
    budget: int = DEFAULT_LIMITS.max_string_states,
    excluded: tuple[int, ...] = (),
) -> Dfa:
    """Decimal texts of naturals n with lo <= n <= hi (hi None: unbounded), n % modulus == 0 and
    n % k != 0 for every k in `excluded` (`not: {multipleOf: k}`).

    Canonical texts ("0" or no leading zero) unless leading_zeros.  The state tracks the
    number of digits read (capped once only their count matters), how the digits compare
    with the same-length prefix of each bound, and n mod modulus.
    """
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return Dfa([[]], ())
    ls = str(lo)
    hs = None if hi is None else str(hi)
    cap = len(ls) + 1 if hs is None else len(hs)
    wanted, modulus = modulus, math.lcm(modulus, *excluded)  # track n mod every divisor's lcm
    if modulus * 10 * (cap + 1) < 2**62:  # the kernel's int64 state keys and remainders
        status, *arrays = number_kernels.natural_range(
            np.array([int(c) for c in ls], np.int64),
            np.array([int(c) for c in hs or ""], np.int64),
            hs is not None,
            cap,
            wanted,
            modulus,
            np.array(excluded, np.int64),
            lo == 0,
            leading_zeros,
            budget,
        )
        if status == number_kernels.OVER_BUDGET:
            raise StateLimitExceeded("integer automaton", budget)
        return Dfa.from_arrays(*string_kernels.minimize(*string_kernels.trim(*arrays)))
    return _natural_range_dfa_python(lo, ls, hs, cap, wanted, modulus, leading_zeros, budget, excluded)


def _natural_range_dfa_python(lo, ls, hs, cap, wanted, modulus, leading_zeros, budget, excluded) -> Dfa:
    """natural_range_dfa explored in Python, for remainders past int64 (and as the kernel's oracle)."""

    def is_final(key):
        if key[0] == "zero":
            return lo == 0 and key[1] and not excluded  # 0 is a multiple of everything
        _, m, c_lo, c_hi, r = key
        if r % wanted != 0 or any(r % k == 0 for k in excluded):
            return False
        ok_lo = m > len(ls) or (m == len(ls) and c_lo >= 0)
        ok_hi = hs is None or m < len(hs) or (m == len(hs) and c_hi <= 0)
        return ok_lo and ok_hi

    def step(key):
        if key[0] == "zero":
            seen = key[1]
            if seen and not leading_zeros:
                return
            edges = []
            for d in range(10):
                if d == 0:
                    nxt = ("zero", True)
                else:
                    nxt = advance(0, 0, 0, 0, d)
                if nxt is not None:
                    edges.append((ord("0") + d, ord("0") + d, nxt))
            yield from edges
            return
        _, m, c_lo, c_hi, r = key
        for d in range(10):
            nxt = advance(m, c_lo, c_hi, r, d)
            if nxt is not None:
                yield ord("0") + d, ord("0") + d, nxt

    def advance(m, c_lo, c_hi, r, d):
        if hs is not None and m >= len(hs):
            return None
        ch = str(d)
        n_lo = (c_lo or _cmp(ch, ls[m])) if m < len(ls) else 1
        n_hi = 0
        if hs is not None:
            n_hi = c_hi or _cmp(ch, hs[m])
        m2 = min(m + 1, cap)
        return ("num", m2, n_lo, n_hi, (r * 10 + d) % modulus)

    return Dfa.explore(("zero", False), step, is_final, budget, "integer automaton").minimize()


# ---------------------------------------------------------------------------------------------
# Non-negative decimals "I.F" (or "I" with optional fraction) against decimal bounds.


def _decimal_parts(x: Fraction) -> tuple[str, str]:
    """Integer and fraction digit strings of a non-negative finite decimal (no trailing zeros)."""
    assert x >= 0
    q = x.denominator
    while q % 2 == 0:
        q //= 2
    while q % 5 == 0:
        q //= 5
    assert q == 1, "not a finite decimal"
    k = 0  # the smallest power of ten that clears the denominator
    while (x * 10**k).denominator != 1:
        k += 1
    n = int(x * 10**k)
    s = str(n).rjust(k + 1, "0")
    if k == 0:
        return s, ""
    return s[:-k], s[-k:].rstrip("0")


def _decimal_dfa(
    lower: tuple[Fraction, bool] | None,
    upper: tuple[Fraction, bool] | None,
    *,
    fraction: str = "required",
    one_digit: bool = False,
    modulus: tuple[int, int] | None = None,
    budget: int = DEFAULT_LIMITS.max_string_states,
) -> Dfa:
    """Texts "I.F" of non-negative decimals x with bounds (value, strict) on each side.

    fraction: "required" ("I.F"), "optional" ("I" or "I.F").  one_digit: I is a single
    non-zero digit (scientific mantissa).  modulus (p, d): x * 10**d must be an integer
    multiple of p (so at most d significant fraction digits).
    """
    lo_i, lo_f = _decimal_parts(lower[0]) if lower else ("0", "")
    lo_strict = lower[1] if lower else False
    hi_parts = _decimal_parts(upper[0]) if upper else None
    hi_strict = upper[1] if upper else False
    p, dm = modulus if modulus else (1, 0)
    fcap = max(len(lo_f), len(hi_parts[1]) if hi_parts else 0, dm) + 1
    icap = len(lo_i) + 1 if hi_parts is None else len(hi_parts[0])

    def finish_int(m, c, bound_int):
        if m < len(bound_int):
            return -1
        if m > len(bound_int):
            return 1
        return c

    def frac_ok(key):
        _, f, c_lo, c_hi, r = key
        if r * 10 ** max(dm - f, 0) % p:
            return False
        # digits the text lacks count as zeros: a bound with more (non-zero) digits is larger
        if c_lo == 0 and f < len(lo_f):
            c_lo = -1
        if hi_parts is not None and c_hi == 0 and f < len(hi_parts[1]):
            c_hi = -1
        ok_lo = c_lo > 0 or (c_lo == 0 and not lo_strict)
        ok_hi = hi_parts is None or c_hi < 0 or (c_hi == 0 and not hi_strict)
        return ok_lo and ok_hi

    def to_frac_key(key):
        """The fraction-phase key right after the integer part (before any fraction digit)."""
        _, m, c_lo, c_hi, r, _zero = key
        return ("F", 0, finish_int(m, c_lo, lo_i), finish_int(m, c_hi, hi_parts[0]) if hi_parts else -1, r)

    def is_final(key):
        if key[0] == "I":
            return fraction == "optional" and key[1] > 0 and frac_ok(to_frac_key(key))
        if key[0] == "F":
            return key[1] > 0 and frac_ok(key)
        return False

    def step(key):
        if key[0] == "I":
            _, m, c_lo, c_hi, r, zero = key
            if m > 0:
                yield ord("."), ord("."), ("dot",) + to_frac_key(key)[1:]
            if zero or (one_digit and m == 1):
                return
            for d in range(10):
                if m == 0 and d == 0 and one_digit:
                    continue
                if hi_parts is not None and m >= len(hi_parts[0]):
                    break
                ch = str(d)
                n_lo = (c_lo or _cmp(ch, lo_i[m])) if m < len(lo_i) else 1
                n_hi = (c_hi or _cmp(ch, hi_parts[0][m])) if hi_parts is not None else -1
                yield ord(ch), ord(ch), ("I", min(m + 1, icap), n_lo, n_hi, (r * 10 + d) % p, m == 0 and d == 0)
            return
        # "dot" (no fraction digit yet) and "F" phases read fraction digits the same way
        _, f, c_lo, c_hi, r = key
        for d in range(10):
            if f >= dm and d != 0 and modulus:
                continue
            ch = str(d)
            n_lo = c_lo or _cmp(ch, lo_f[f] if f < len(lo_f) else "0")
            n_hi = (c_hi or _cmp(ch, hi_parts[1][f] if f < len(hi_parts[1]) else "0")) if hi_parts else -1
            n_r = (r * 10 + d) % p if f < dm else r
            yield ord(ch), ord(ch), ("F", min(f + 1, fcap), n_lo, n_hi, n_r)

    return Dfa.explore(("I", 0, 0, 0, 0, False), step, is_final, budget, "number automaton").minimize()


# ---------------------------------------------------------------------------------------------
# Bounds.


def _exact(value, name: str, pointer: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"{name} must be a number, got {value!r}", f"{pointer}/{name}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SchemaError(f"{name} must be finite, got {value!r}", f"{pointer}/{name}")
    return Fraction(value)


def _bounds(minimum, maximum, exclusive_minimum, exclusive_maximum, pointer):
    """(lower, upper), each (exact value, strict) or None; draft-4 boolean exclusives are honoured."""
    lower = upper = None
    if minimum is not None:
        lower = (_exact(minimum, "minimum", pointer), exclusive_minimum is True)
    if maximum is not None:
        upper = (_exact(maximum, "maximum", pointer), exclusive_maximum is True)
    if exclusive_minimum is not None and not isinstance(exclusive_minimum, bool):
        v = _exact(exclusive_minimum, "exclusiveMinimum", pointer)
        if lower is None or v >= lower[0]:
            lower = (v, True)
    if exclusive_maximum is not None and not isinstance(exclusive_maximum, bool):
        v = _exact(exclusive_maximum, "exclusiveMaximum", pointer)
        if upper is None or v <= upper[0]:
            upper = (v, True)
    if lower and upper and (lower[0] > upper[0] or (lower[0] == upper[0] and (lower[1] or upper[1]))):
        raise SchemaError(f"no number satisfies the bounds {_show(lower, upper)}", pointer)
    return lower, upper


def _show(lower, upper):
    left = "(" if lower and lower[1] else "["
    right = ")" if upper and upper[1] else "]"
    return f"{left}{float(lower[0]) if lower else '-inf'}, {float(upper[0]) if upper else 'inf'}{right}"


def _int_range(lower, upper) -> tuple[int | None, int | None]:
    lo = hi = None
    if lower:
        v, strict = lower
        lo = math.floor(v) + 1 if strict else math.ceil(v)
    if upper:
        v, strict = upper
        hi = math.ceil(v) - 1 if strict else math.floor(v)
    return lo, hi


def _double(x: Fraction) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def _satisfies(d: float, bound: tuple[Fraction, bool], side: str) -> bool:
    if math.isinf(d):
        return (d > 0) == (side == "lower")
    v, strict = bound
    x = Fraction(d)
    if side == "lower":
        return x > v if strict else x >= v
    return x < v if strict else x <= v


def _float_text_bound(bound: tuple[Fraction, bool] | None, side: str) -> tuple[Fraction, bool] | None:
    """Bound on the exact decimal x of a float text so that its rounded value meets `bound`.

    Returns (X, strict): x > X (lower side) or x < X (upper side); non-strict when X is 0 or
    when the midpoint X itself rounds inward.
    """
    if bound is None:
        return None
    toward = math.inf if side == "lower" else -math.inf  # direction into the allowed region
    away = -toward
    d = _double(bound[0])
    # the extreme allowed double: step inward until allowed, then outward while still allowed
    while not _satisfies(d, bound, side):
        d = math.nextafter(d, toward)
    while not math.isinf(d):
        out = math.nextafter(d, away)
        if math.isinf(out) or not _satisfies(out, bound, side):
            break
        d = out
    if math.isinf(d):  # only the overflow value is allowed
        edge = _MAX_DOUBLE + _HALF_TOP_ULP
        return (edge if side == "lower" else -edge), True
    if d == 0.0:
        return Fraction(0), False
    out = math.nextafter(d, away)
    x = Fraction(d)
    if math.isinf(out):
        gap = abs(x - Fraction(math.nextafter(d, toward)))  # the outward gap (to 2**1024) is the same
        return (x - gap / 2 if side == "lower" else x + gap / 2), True
    mid = (x + Fraction(out)) / 2
    if _double(mid) == d:
        # the midpoint rounds inward (even mantissa); repr can write exactly such a text for
        # large numbers, e.g. 6.603877275640762e+16, so keep the exact, non-strict bound
        return mid, False
    # Any X between the midpoint and the nearest decimal of 17 significant digits beyond it
    # works: nothing past X rounds outward, and every 17-digit spelling (repr, %.17g) of an
    # allowed double stays inside.  The shortest such X keeps the automaton small (an exact
    # midpoint near 1e-308 has ~750 significant digits).
    scale = Fraction(10) ** (_magnitude(abs(mid)) - 16)
    if side == "lower":
        grid = math.floor(mid / scale) * scale + scale
    else:
        grid = math.ceil(mid / scale) * scale - scale
    return _shortest_decimal_between(mid, grid, side), True


def _shortest_decimal_between(mid: Fraction, shown: Fraction, side: str) -> Fraction:
    """A decimal with few digits in [mid, shown) (lower side) or (shown, mid] (upper side)."""
    top = max(abs(mid), abs(shown))
    p = _magnitude(top) + 1 if top else 0
    while True:
        scale = Fraction(10) ** p
        if side == "lower":
            c = math.ceil(mid / scale) * scale
            if mid <= c < shown:
                return c
        else:
            c = math.floor(mid / scale) * scale
            if shown < c <= mid:
                return c
        p -= 1


# ---------------------------------------------------------------------------------------------
# Exponent texts.


def _exponent_value_dfa(lo: int | None, hi: int | None, budget: int) -> Dfa:
    """Texts [+-]?[0-9]+ (leading zeros allowed) of integers in [lo, hi] (None: unbounded)."""
    parts = []
    if hi is None or hi >= 0:
        pos = natural_range_dfa(max(lo, 0) if lo is not None else 0, hi, leading_zeros=True, budget=budget)
        parts += [pos, _prefixed("+", pos)]
    if lo is None or lo <= 0:
        # "-n" means -n; "-0" is 0
        neg_lo = max(-hi, 0) if hi is not None else 0
        neg_hi = -lo if lo is not None else None
        parts.append(_prefixed("-", natural_range_dfa(neg_lo, neg_hi, leading_zeros=True, budget=budget)))
    return _union_all(parts, budget)


def _magnitude(x: Fraction) -> int:
    """floor(log10(x)) for x > 0, exactly."""
    e = len(str(x.numerator)) - len(str(x.denominator))
    while Fraction(10) ** e > x:
        e -= 1
    while Fraction(10) ** (e + 1) <= x:
        e += 1
    return e


def _scientific_dfa(lower, upper, budget: int) -> Dfa:
    """Texts M[eE]E of non-negative x = M * 10**E, M in [1, 10) written [1-9](.[0-9]+)?, within bounds."""
    if upper is not None and (upper[0] < 0 or (upper[0] == 0)):
        return Dfa([[]], ())  # scientific texts are positive
    e_lo = _magnitude(lower[0]) if lower and lower[0] > 0 else None
    e_hi = _magnitude(upper[0]) if upper else None
    pieces = []

    def piece(m_lower, m_upper, exp_lo, exp_hi):
        if exp_lo is not None and exp_hi is not None and exp_lo > exp_hi:
            return
        mant = _decimal_dfa(m_lower, m_upper, fraction="optional", one_digit=True, budget=budget)
        pieces.append(_chain(mant, "eE", _exponent_value_dfa(exp_lo, exp_hi, budget)))

    def scaled(bound, e):
        return (bound[0] / Fraction(10) ** e, bound[1]) if bound else None

    if e_lo is not None and e_hi is not None and e_lo == e_hi:
        piece(scaled(lower, e_lo), scaled(upper, e_lo), e_lo, e_lo)
        return _union_all(pieces, budget)
    if e_lo is not None:
        piece(scaled(lower, e_lo), None, e_lo, e_lo)
    if e_hi is not None:
        piece(None, scaled(upper, e_hi), e_hi, e_hi)
    inner_lo = e_lo + 1 if e_lo is not None else None
    inner_hi = e_hi - 1 if e_hi is not None else None
    piece(None, None, inner_lo, inner_hi)
    return _union_all(pieces, budget)


# ---------------------------------------------------------------------------------------------
# Signed languages.


def _mirror(bound):
    return (-bound[0], bound[1]) if bound else None


def _nonneg_side(lower, upper):
    """Bounds for the magnitude x of a non-negative text, or None if no x >= 0 fits."""
    if upper is not None and (upper[0] < 0 or (upper[0] == 0 and upper[1])):
        return None
    if lower is not None and lower[0] < 0:
        lower = None
    return lower, upper


def _signed(build, lower, upper, budget: int) -> Dfa:
    """Union of build(lower', upper') for texts without sign and '-' + build(...) for negatives."""
    parts = []
    pos = _nonneg_side(lower, upper)
    if pos is not None:
        parts.append(build(*pos))
    neg = _nonneg_side(_mirror(upper), _mirror(lower))
    if neg is not None:
        parts.append(_prefixed("-", build(*neg)))
    return _union_all(parts, budget)


# ---------------------------------------------------------------------------------------------
# Multiples of an integer k: the remainder automaton, built directly.


ENUMERATE_MULTIPLES = 4096
"""A bounded range holding at most this many multiples of k is spelled out as literals (a trie)
instead of intersecting the remainder automaton with the range's."""


@memoized(64, name="multipleOf remainder automata (grammar/json_numbers.py)")
def multiples_dfa(k: int, budget: int = DEFAULT_LIMITS.max_rule_states) -> Dfa:
    """Canonical decimal texts of the naturals divisible by k, minimised.

    k = m * 10**c with m prime to 10 is read as "n mod m, and how many trailing zeros (up to
    c)"; any other k as "n mod k": one state per pair plus the start and "0" states, built
    with numpy in one go; StateLimitExceeded before anything is built when that count passes
    `budget` (so a huge k is refused at once).  Memoised (callers copy before changing arrays).
    """
    c, m = 0, k
    while m % 10 == 0:
        m //= 10
        c += 1
    if math.gcd(m, 10) != 1:  # 10**c | n and m | n then say less than k | n: track n mod k
        c, m = 0, k
    size = m * (c + 1) + 2
    if size > budget:
        raise StateLimitExceeded(f"the remainder automaton of multipleOf {k} ({size} states)", budget)
    digits = np.arange(10, dtype=np.int64)
    r = np.repeat(np.arange(m, dtype=np.int64), c + 1)
    z = np.tile(np.arange(c + 1, dtype=np.int64), m)
    # state 0: start; 1: the text "0"; 2 + r * (c + 1) + z: remainder r, z trailing zeros so far
    nr = (10 * r[:, None] + digits) % m
    nz = np.where(digits == 0, np.minimum(z[:, None] + 1, c), 0)
    body = 2 + nr * (c + 1) + nz
    first = 2 + (digits[1:] % m) * (c + 1)  # the start reads a first digit 1..9 (no zero before it)
    target = np.concatenate([[1], first, body.reshape(-1)])
    lo = np.concatenate([digits, np.tile(digits, m * (c + 1))]) + ord("0")
    count = np.array([10, 0] + [10] * (m * (c + 1)), np.int64)
    start = np.cumsum(count) - count
    final = np.concatenate([[False, True], (r == 0) & (z == c)])
    arrays = string_kernels.trim(start, count, lo, lo.copy(), target, final)
    if c == 0 and math.gcd(m, 10) == 1:
        # already minimal: for m prime to 10 every two remainders r != r' part on some digit
        # string w (w = -r * 10**len(w) mod m written with len(w) digits), and the start and "0"
        # states differ from all of them; minimising 10**5 states would cost a second
        dfa = Dfa.from_arrays(*arrays)
        dfa.minimal = True
        return dfa
    return Dfa.from_arrays(*arrays).minimize()


def _positive_multiples(k: int, budget: int) -> Dfa:
    """multiples_dfa(k) without "0" (the start's first edge, on '0', leads to it alone)."""
    start, count, lo, hi, target, final = multiples_dfa(k, budget).arrays()
    assert lo[0] == hi[0] == ord("0") and count[0] > 0
    count = count.copy()
    count[0] -= 1
    return Dfa.from_arrays(*string_kernels.trim(np.cumsum(count) - count, count, lo[1:], hi[1:], target[1:], final))


def _natural_multiples(lo: int, hi: int | None, k: int, budget: int) -> Dfa:
    """Canonical texts of naturals n in [lo, hi] (hi None: unbounded) with n % k == 0: the
    multiples spelled out when a bounded range holds few, else the remainder automaton (alone,
    without "0", or intersected with the range's automaton); StateLimitExceeded past `budget`."""
    lo = max(lo, 0)
    first = -(-lo // k) * k  # the least multiple >= lo
    if hi is not None:
        if first > hi:
            return Dfa([[]], ())
        if (hi - first) // k < ENUMERATE_MULTIPLES:
            return literal_dfa([str(n) for n in range(first, hi + 1, k)])
    elif lo <= k:  # every positive multiple is >= lo
        return multiples_dfa(k, budget) if lo == 0 else _positive_multiples(k, budget)
    return multiples_dfa(k, budget).intersect(natural_range_dfa(lo, hi, budget=budget), budget)


def _signed_multiples(lo: int | None, hi: int | None, k: int, budget: int) -> Dfa:
    """Canonical integer texts of n in [lo, hi] with n % k == 0 ("-0" too when 0 is in range)."""
    none = Dfa([[]], ())
    pos = _natural_multiples(max(lo, 0) if lo is not None else 0, hi, k, budget) if hi is None or hi >= 0 else none
    neg = (
        _natural_multiples(max(-hi, 0) if hi is not None else 0, None if lo is None else -lo, k, budget)
        if lo is None or lo <= 0
        else none
    )
    return _sign_split(pos, neg)


def _sign_split(positive: Dfa, negative: Dfa) -> Dfa:
    """positive | "-" negative, neither accepting the empty text: a new start state with the
    positive start's edges and '-' into the negative automaton (no product: the size is the
    sum, or the positive one's plus one when both are the same minimal automaton)."""
    if negative.is_empty():
        return positive
    p_start, p_count, p_lo, p_hi, p_tgt, p_final = positive.arrays()
    n_pos = p_start.shape[0]
    if all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(positive.arrays(), negative.arrays())):
        # '-' leads to the positive start itself, which has no edge on '-'
        n_lo, n_hi, n_tgt, n_count, n_final, minus = (np.zeros(0, np.int64),) * 4 + (np.zeros(0, np.bool_), 1)
    else:
        _, n_count, n_lo, n_hi, n_tgt, n_final = negative.arrays()
        minus = n_pos + 1
    head = slice(p_start[0], p_start[0] + p_count[0])
    # state 0: the new start; 1 .. n_pos: positive; n_pos + 1 ..: negative ('-' sorts before digits)
    lo = np.concatenate([[ord("-")], p_lo[head], p_lo, n_lo])
    hi = np.concatenate([[ord("-")], p_hi[head], p_hi, n_hi])
    tgt = np.concatenate([[minus], p_tgt[head] + 1, p_tgt + 1, n_tgt + n_pos + 1])
    count = np.concatenate([[1 + p_count[0]], p_count, n_count])
    final = np.concatenate([[False], p_final, n_final])
    dfa = Dfa.from_arrays(*string_kernels.trim(np.cumsum(count) - count, count, lo, hi, tgt, final))
    # '-' into a minimal positive automaton itself keeps it minimal: the new start is the one
    # state with an edge on '-' (so it differs from every other), the rest stay apart
    dfa.minimal = positive.minimal and minus == 1
    return dfa


def _zero_fractions(dfa: Dfa) -> Dfa:
    """dfa's integer texts, and each followed by "." and one or more "0": every final state gets
    an edge on '.' (which no integer text continues with) into two new states."""
    start, count, lo, hi, tgt, final = dfa.arrays()
    n = start.shape[0]
    extra = final.astype(np.int64)
    new_count = count + extra
    new_start = np.cumsum(new_count) - new_count
    owner = np.repeat(np.arange(n), count)
    position = new_start[owner] + extra[owner] + (np.arange(owner.shape[0]) - start[owner])
    dots = new_start[final]
    size = int(new_count.sum()) + 2
    new_lo, new_hi, new_tgt = (np.empty(size, np.int64) for _ in range(3))
    for out, old, add in ((new_lo, lo, ord(".")), (new_hi, hi, ord(".")), (new_tgt, tgt, n)):
        out[position] = old
        out[dots] = add
    new_lo[-2:] = new_hi[-2:] = ord("0")
    new_tgt[-2:] = n + 1  # n: after '.', n + 1: after one or more '0' (final)
    count = np.concatenate([new_count, [1, 1]])
    return Dfa.from_arrays(
        *string_kernels.trim(
            np.cumsum(count) - count, count, new_lo, new_hi, new_tgt, np.concatenate([final, [False, True]])
        )
    )


def _multiple_integer_dfa(
    lo: int | None, hi: int | None, k: int, zero_fraction: bool, budget: int, fraction_budget: int
) -> Dfa:
    """Integer texts of n in [lo, hi] with n % k == 0 (automata within `budget` states), and with
    zero_fraction also "n.0", "n.00", ... for |n| <= 2**53.  When the range reaches past 2**53
    and the multiples up to 2**53 (or their union with the rest) pass `fraction_budget` states,
    the zero-fraction texts are left out: integer texts only, narrower, never wider."""
    dfa = _signed_multiples(lo, hi, k, budget)
    if not zero_fraction or dfa.is_empty():
        return dfa
    small_lo = -_MAX_EXACT_INT if lo is None else max(lo, -_MAX_EXACT_INT)
    small_hi = _MAX_EXACT_INT if hi is None else min(hi, _MAX_EXACT_INT)
    if (small_lo, small_hi) == (lo, hi):
        return _zero_fractions(dfa)
    if small_lo > small_hi or 16 * multiples_dfa(k, budget).size > fraction_budget:
        return dfa  # the multiples up to 2**53 need about 16 copies of the remainder automaton
    try:
        fractions = _zero_fractions(_signed_multiples(small_lo, small_hi, k, fraction_budget))
        return dfa.union(fractions, fraction_budget, minimize=False)
    except StateLimitExceeded:
        return dfa


def _decimal_multiple(multiple_of, pointer) -> tuple[int, int]:
    """multipleOf as p / 10**d with p, d integers (decimal reading of the schema's number)."""
    if (
        isinstance(multiple_of, bool)
        or not isinstance(multiple_of, (int, float))
        or not multiple_of > 0
        or (isinstance(multiple_of, float) and not math.isfinite(multiple_of))
    ):
        raise SchemaError(f"multipleOf must be a number > 0, got {multiple_of!r}", f"{pointer}/multipleOf")
    value = Fraction(repr(multiple_of)) if isinstance(multiple_of, float) else Fraction(multiple_of)
    d = 0
    while (value * 10**d).denominator != 1:
        d += 1
    return int(value * 10**d), d


def integer_range_dfa(
    lo: int | None,
    hi: int | None,
    modulus: int = 1,
    budget: int = DEFAULT_LIMITS.max_string_states,
    excluded: tuple[int, ...] = (),
) -> Dfa:
    """Canonical integer texts ("-0" included when 0 is in range) of n in [lo, hi], n % modulus == 0,
    n % k != 0 for k in `excluded`."""
    parts = []
    if hi is None or hi >= 0:
        parts.append(
            natural_range_dfa(max(lo, 0) if lo is not None else 0, hi, modulus, budget=budget, excluded=excluded)
        )
    if lo is None or lo <= 0:
        neg_lo = max(-hi, 0) if hi is not None else 0
        neg_hi = -lo if lo is not None else None
        parts.append(_prefixed("-", natural_range_dfa(neg_lo, neg_hi, modulus, budget=budget, excluded=excluded)))
    return _union_all(parts, budget)


def _integer_dfa(
    lower,
    upper,
    multiple_of,
    pointer,
    zero_fraction: bool,
    budget: int,
    empty_is_error: bool = True,
    excluded: tuple[int, ...] = (),
    remainder_budget: int = DEFAULT_LIMITS.max_rule_states,
) -> Dfa:
    lo, hi = _int_range(lower, upper)
    if lo is not None and hi is not None and lo > hi:
        if empty_is_error:
            raise SchemaError(f"no integer satisfies the bounds {_show(lower, upper)}", pointer)
        return Dfa([[]], ())
    modulus = 1
    float_divisor = False
    if multiple_of is not None:
        p, d = _decimal_multiple(multiple_of, pointer)
        modulus = p // math.gcd(p, 10**d)  # n * 10**d % p == 0
        float_divisor = isinstance(multiple_of, float)
    if float_divisor:  # jsonschema divides floats: keep integers exact as floats
        lo = -_MAX_EXACT_INT if lo is None else max(lo, -_MAX_EXACT_INT)
        hi = _MAX_EXACT_INT if hi is None else min(hi, _MAX_EXACT_INT)
        if lo > hi:
            return Dfa([[]], ())
    if modulus > 1 and not excluded:
        return _multiple_integer_dfa(lo, hi, modulus, zero_fraction, remainder_budget, budget)
    dfa = integer_range_dfa(lo, hi, modulus, budget, excluded)
    if zero_fraction:
        small = integer_range_dfa(
            max(lo, -_MAX_EXACT_INT) if lo is not None else -_MAX_EXACT_INT,
            min(hi, _MAX_EXACT_INT) if hi is not None else _MAX_EXACT_INT,
            modulus,
            budget,
            excluded,
        )
        zeros = Dfa([[(ord("0"), ord("0"), 1)], [(ord("0"), ord("0"), 1)]], [1])  # 0+
        dfa = dfa.union(_chain(small, ".", zeros), budget, minimize=False)
    return dfa


def _guard(keyword: str, at: str, fn, *args, **kwargs):
    """Run fn, turning an exhausted state budget into UnsupportedSchemaError(keyword, at)."""
    return budgeted(
        keyword,
        at,
        fn,
        *args,
        hint="use a smaller multipleOf (or one of the form m * 10**c with a "
        "small m not divisible by 2 or 5), narrower bounds, or an enum of "
        "the allowed values",
        **kwargs,
    )


def integer_expr(
    *,
    minimum=None,
    maximum=None,
    exclusive_minimum=None,
    exclusive_maximum=None,
    multiple_of=None,
    pointer: str = "",
    zero_fraction: bool = True,
    budget: int = DEFAULT_LIMITS.max_string_states,
    not_multiple_of: tuple[int, ...] = (),
    remainder_budget: int = DEFAULT_LIMITS.max_rule_states,
) -> Expr:
    """JSON texts of integers within the bounds (int or float, draft-4 boolean exclusives too).

    zero_fraction: also accept "n.0", "n.00", ... for |n| <= 2**53 (draft 6+; pass False for
    draft 4, where 1.0 is not an integer).  Empty ranges raise SchemaError; automata past the
    budget raise UnsupportedSchemaError naming multipleOf (or minimum).  An integer multipleOf
    builds its remainder automaton (and its products with the bounds) within
    `remainder_budget` states (Limits.max_rule_states: the rule holds that automaton).
    """
    lower, upper = _bounds(minimum, maximum, exclusive_minimum, exclusive_maximum, pointer)
    keyword = "multipleOf" if multiple_of is not None else "minimum"
    dfa = _guard(
        keyword,
        pointer,
        _integer_dfa,
        lower,
        upper,
        multiple_of,
        pointer,
        zero_fraction,
        budget,
        excluded=tuple(not_multiple_of),
        remainder_budget=remainder_budget,
    )
    return dfa_to_char_fsm(dfa.minimize())


def number_dfa(
    *,
    minimum=None,
    maximum=None,
    exclusive_minimum=None,
    exclusive_maximum=None,
    multiple_of=None,
    pointer: str = "",
    budget: int = DEFAULT_LIMITS.max_string_states,
    remainder_budget: int = DEFAULT_LIMITS.max_rule_states,
) -> Dfa:
    """The Dfa behind number_expr (see the module docstring for the policies); an integer
    multipleOf builds its remainder automaton within `remainder_budget` states, as integer_expr."""
    lower, upper = _bounds(minimum, maximum, exclusive_minimum, exclusive_maximum, pointer)
    if multiple_of is not None:
        p, d = _decimal_multiple(multiple_of, pointer)
        if d == 0:  # an integer divisor leaves integral values: integer texts and their zero fractions
            return _integer_dfa(
                lower,
                upper,
                multiple_of,
                pointer,
                True,
                budget,
                empty_is_error=False,
                remainder_budget=remainder_budget,
            )
        ints = _integer_dfa(
            lower, upper, multiple_of, pointer, False, budget, empty_is_error=False, remainder_budget=budget
        )
        flo, fhi = _float_text_bound(lower, "lower"), _float_text_bound(upper, "upper")
        fracs = _signed(lambda lo, hi: _decimal_dfa(lo, hi, modulus=(p, d), budget=budget), flo, fhi, budget)
        return _union_all([ints, fracs], budget)
    if lower is None and upper is None:
        return _any_number_dfa()
    ints = _integer_dfa(lower, upper, None, pointer, False, budget, empty_is_error=False)
    flo, fhi = _float_text_bound(lower, "lower"), _float_text_bound(upper, "upper")
    fracs = _signed(lambda lo, hi: _decimal_dfa(lo, hi, budget=budget), flo, fhi, budget)
    sci = _signed(lambda lo, hi: _scientific_dfa(lo, hi, budget), flo, fhi, budget)
    return _union_all([ints, fracs, sci], budget)


def _any_number_dfa() -> Dfa:
    # states: 0 start, 1 after '-', 2 after '0', 3 int digits, 4 after '.', 5 frac digits,
    # 6 after e, 7 after exponent sign, 8 exponent digits
    d = _DIGIT
    trans = [
        [(ord("-"), ord("-"), 1), (ord("0"), ord("0"), 2), (ord("1"), ord("9"), 3)],
        [(ord("0"), ord("0"), 2), (ord("1"), ord("9"), 3)],
        [(ord("."), ord("."), 4), (ord("E"), ord("E"), 6), (ord("e"), ord("e"), 6)],
        [(ord("."), ord("."), 4), (d[0], d[1], 3), (ord("E"), ord("E"), 6), (ord("e"), ord("e"), 6)],
        [(d[0], d[1], 5)],
        [(d[0], d[1], 5), (ord("E"), ord("E"), 6), (ord("e"), ord("e"), 6)],
        [(ord("+"), ord("+"), 7), (ord("-"), ord("-"), 7), (d[0], d[1], 8)],
        [(d[0], d[1], 8)],
        [(d[0], d[1], 8)],
    ]
    for edges in trans:
        edges.sort()
    return Dfa(trans, [2, 3, 5, 8])


def non_integral_dfa() -> Dfa:
    """Number texts whose value is certainly not an integer: a fraction with a nonzero digit and
    no exponent ("1.5", "-0.25"), or one nonzero digit, an optional fraction and a negative
    exponent ("1e-07", "2.5e-05": 0 < |value| < 1).  json.dumps writes every non-integral float
    in one of these forms; other spellings of non-integers ("15e-1") are not accepted."""
    d, nz = _DIGIT, (ord("1"), ord("9"))
    e = [(ord("E"), ord("E"), 7), (ord("e"), ord("e"), 7)]
    # 0 start, 1 after '-', 2 int "0", 3 int [1-9]\d+, 4 '.', 5 frac without nonzero, 6 frac with
    # nonzero (final), 7 'e', 8 'e-', 9 exponent with nonzero (final), 10 exponent zeros so far,
    # 11 single nonzero int digit, 12 its '.', 13 its fraction digits
    trans = [
        [(ord("-"), ord("-"), 1), (ord("0"), ord("0"), 2), (nz[0], nz[1], 11)],
        [(ord("0"), ord("0"), 2), (nz[0], nz[1], 11)],
        [(ord("."), ord("."), 4)],
        [(ord("."), ord("."), 4), (d[0], d[1], 3)],
        [(ord("0"), ord("0"), 5), (nz[0], nz[1], 6)],
        [(ord("0"), ord("0"), 5), (nz[0], nz[1], 6)],
        [(ord("0"), ord("0"), 5), (nz[0], nz[1], 6)],
        [(ord("-"), ord("-"), 8)],
        [(ord("0"), ord("0"), 10), (nz[0], nz[1], 9)],
        [(d[0], d[1], 9)],
        [(ord("0"), ord("0"), 10), (nz[0], nz[1], 9)],
        [(ord("."), ord("."), 12), (d[0], d[1], 3), *e],
        [(ord("0"), ord("0"), 13), (nz[0], nz[1], 14)],
        [(ord("0"), ord("0"), 13), (nz[0], nz[1], 14), *e],
        [(ord("0"), ord("0"), 13), (nz[0], nz[1], 14), *e],
    ]
    for edges in trans:
        edges.sort()
    return Dfa(trans, [6, 9, 14])


def number_expr(
    *,
    minimum=None,
    maximum=None,
    exclusive_minimum=None,
    exclusive_maximum=None,
    multiple_of=None,
    pointer: str = "",
    budget: int = DEFAULT_LIMITS.max_string_states,
    non_integral: bool = False,
    not_multiple_of: tuple[int, ...] = (),
    remainder_budget: int = DEFAULT_LIMITS.max_rule_states,
) -> Expr:
    """JSON texts of numbers within the bounds and (optionally) multiples of `multiple_of`;
    non_integral: only those `non_integral_dfa` accepts (for `not: {type: integer}`);
    not_multiple_of: integers k none of which the value is a multiple of (`not: {multipleOf: k}`):
    the integers left by residue, plus the non-integral spellings (never multiples of an integer)."""
    keyword = "multipleOf" if multiple_of is not None else "minimum"
    bounds = dict(
        minimum=minimum,
        maximum=maximum,
        exclusive_minimum=exclusive_minimum,
        exclusive_maximum=exclusive_maximum,
        multiple_of=multiple_of,
        pointer=pointer,
        budget=budget,
    )
    dfa = _guard(keyword, pointer, number_dfa, remainder_budget=remainder_budget, **bounds)
    if non_integral or not_multiple_of:
        dfa = _guard(keyword, pointer, dfa.intersect, non_integral_dfa(), budget)
    if not_multiple_of and not non_integral:
        lower, upper = _bounds(minimum, maximum, exclusive_minimum, exclusive_maximum, pointer)
        ints = _guard(
            keyword,
            pointer,
            _integer_dfa,
            lower,
            upper,
            multiple_of,
            pointer,
            False,
            budget,
            empty_is_error=False,
            excluded=tuple(not_multiple_of),
        )
        dfa = _guard(keyword, pointer, dfa.union, ints, budget)
    return dfa_to_char_fsm(dfa.minimize())


def number_literal_expr(value, pointer: str = "") -> Expr:
    """Every JSON number text equal to `value` (as jsonschema compares const/enum: 1 == 1.0).

    Covers what json.dumps writes ("1", "1.0", "1e-05", "1.5e+300") plus other spellings of
    the same value ("1.00", "-0", "0.10"); exponent spellings only in normalised form.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"number_literal_expr needs an int or float, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        return NOTHING  # json.dumps writes NaN/Infinity, which is not JSON
    return number_expr(minimum=value, maximum=value, pointer=pointer)
