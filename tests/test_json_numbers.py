"""JSON number leaf grammars (grammar/json_numbers.py) against json + jsonschema as oracles.

The grammars are CharFsm expressions over ASCII; a direct simulation of the automaton (no engine)
decides membership.  For random values and bounds, json.dumps(value) (and other spellings:
"n.0", "-0", exponent forms) must be accepted exactly when jsonschema says the value is valid;
random walks through the automaton must only produce texts that json.loads parses to valid
values.  multipleOf is checked against exact decimal arithmetic (see json_numbers' docstring for
why not jsonschema's float division).
"""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction

import jsonschema
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support import edges_by_state  # noqa: E402

from pushmask.core.errors import SchemaError, UnsupportedSchemaError
from pushmask.grammar.ir import NOTHING, CharFsm, Expr
from pushmask.grammar.json_numbers import (
    integer_expr,
    integer_range_dfa,
    natural_range_dfa,
    number_expr,
    number_literal_expr,
)

VALIDATOR = jsonschema.Draft202012Validator
NUMBER_RE = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"


def matches(expr: Expr, text: str) -> bool:
    """Run the automaton (deterministic or not) over the text."""
    if expr == NOTHING:
        return False
    assert isinstance(expr, CharFsm)
    by_state = edges_by_state(expr)
    states = {expr.initial}
    for ch in text:
        cp = ord(ch)
        states = {t for s in states for lo, hi, t in by_state.get(s, ()) if lo <= cp <= hi}
        if not states:
            return False
    return bool(states & expr.finals)


def sample_walk(expr: CharFsm, rng: random.Random, max_len: int = 30) -> str | None:
    if expr == NOTHING:
        return None
    by_state = edges_by_state(expr)
    s, out = expr.initial, []
    for _ in range(max_len):
        if s in expr.finals and rng.random() < 0.3:
            return "".join(out)
        edges = by_state.get(s)
        if not edges:
            break
        lo, hi, t = rng.choice(edges)
        out.append(chr(rng.randint(lo, hi)))
        s = t
    return "".join(out) if s in expr.finals else None


def schema_for(kind: str, bounds: dict) -> dict:
    keys = {
        "minimum": "minimum",
        "maximum": "maximum",
        "exclusive_minimum": "exclusiveMinimum",
        "exclusive_maximum": "exclusiveMaximum",
        "multiple_of": "multipleOf",
    }
    return {"type": kind, **{keys[k]: v for k, v in bounds.items() if v is not None}}


def decimal_multiple_ok(text: str, multiple_of) -> bool:
    """Exact decimal reading of multipleOf (0.01 means 1/100) on the decimal the text spells."""
    if multiple_of is None:
        return True
    step = Fraction(repr(multiple_of)) if isinstance(multiple_of, float) else Fraction(multiple_of)
    return (Fraction(text) / step).denominator == 1


def is_valid(kind: str, bounds: dict, text: str) -> bool:
    """jsonschema on json.loads(text) for type and bounds; exact decimal arithmetic for multipleOf."""
    value = json.loads(text)
    rest = {k: v for k, v in bounds.items() if k != "multiple_of"}
    if not VALIDATOR(schema_for(kind, rest)).is_valid(value):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return bounds.get("multiple_of") is None
    return decimal_multiple_ok(text, bounds.get("multiple_of"))


def respellings(value) -> list[str]:
    """json.dumps plus other spellings of the same number."""
    texts = [json.dumps(value)]
    if isinstance(value, int):
        texts += [f"{value}.0", f"{value}.00"]  # equal to value only up to 2**53
        if value == 0:
            texts.append("-0")
    elif math.isfinite(value):
        texts += [repr(value).replace("e", "E"), f"{value:.17g}" if "e" not in f"{value:.17g}" else repr(value)]
        if value == int(value) and abs(value) < 1e15:
            texts.append(str(int(value)))
    return texts


# ---------------------------------------------------------------------------------------------
# Digit-range automata.


@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 9), (1, 10), (5, 123), (99, 1000), (7, None), (0, None), (1234, 1299)])
def test_natural_range_dfa_exhaustive(lo, hi):
    dfa = natural_range_dfa(lo, hi)
    top = (hi if hi is not None else lo * 3 + 20) + 20
    for n in range(top):
        assert dfa.accepts(str(n)) == (lo <= n and (hi is None or n <= hi)), n
    assert not dfa.accepts("") and not dfa.accepts("00") and not dfa.accepts("01")


def test_natural_range_with_leading_zeros_and_modulus():
    dfa = natural_range_dfa(3, 40, 7, leading_zeros=True)
    for n in range(60):
        for text in (str(n), "0" + str(n), "00" + str(n)):
            assert dfa.accepts(text) == (3 <= n <= 40 and n % 7 == 0), text


@pytest.mark.parametrize("modulus,excluded", [(1, ()), (3, ()), (12, (8,)), (7, (2, 5))])
@pytest.mark.parametrize("leading_zeros", [False, True])
def test_natural_range_kernel_equals_python_exploration_and_brute_force(modulus, excluded, leading_zeros):
    """The numba exploration against the Python one (kept for remainders past int64): equal
    minimal automata; and both against the definition on every text up to 4 digits."""
    import itertools

    from pushmask.grammar import json_numbers

    for lo, hi in [(0, None), (0, 0), (7, 150), (10, 999), (123, None), (1000, 1000)]:
        cap = len(str(lo)) + 1 if hi is None else len(str(hi))
        kernel = natural_range_dfa(lo, hi, modulus, leading_zeros=leading_zeros, excluded=excluded)
        python = json_numbers._natural_range_dfa_python(
            lo,
            str(lo),
            None if hi is None else str(hi),
            cap,
            modulus,
            math.lcm(modulus, *excluded),
            leading_zeros,
            20_000,
            excluded,
        )
        assert kernel.size == python.size and kernel.finals == python.finals and kernel.trans == python.trans
        for width in range(1, 5):
            for digits in itertools.product("0123456789", repeat=width):
                text = "".join(digits)
                n = int(text)
                canonical = text == str(n)
                wanted = (
                    (canonical or leading_zeros)
                    and n >= lo
                    and (hi is None or n <= hi)
                    and n % modulus == 0
                    and not any(n % k == 0 for k in excluded)
                )
                assert kernel.accepts(text) == wanted, (lo, hi, text)


@pytest.mark.parametrize("lo,hi", [(-15, 123), (-1000, -7), (None, -3), (-2, None), (None, None), (0, 0)])
def test_integer_range_dfa(lo, hi):
    dfa = integer_range_dfa(lo, hi)
    for n in range(-1100, 1100):
        assert dfa.accepts(str(n)) == ((lo is None or n >= lo) and (hi is None or n <= hi)), n
    assert dfa.accepts("-0") == ((lo is None or lo <= 0) and (hi is None or hi >= 0))


# ---------------------------------------------------------------------------------------------
# integer_expr.

BOUND_INTS = st.one_of(st.integers(-300, 300), st.integers(-(10**20), 10**20))
BOUND = st.one_of(st.none(), BOUND_INTS, st.floats(-1000, 1000, allow_nan=False).map(lambda x: round(x, 2)))


@st.composite
def int_bounds(draw):
    bounds = {k: draw(BOUND) for k in ("minimum", "maximum", "exclusive_minimum", "exclusive_maximum")}
    bounds["multiple_of"] = draw(st.one_of(st.none(), st.integers(1, 40), st.sampled_from([0.5, 2.5, 3.0])))
    return bounds


def _try(fn, **kwargs):
    try:
        return fn(**kwargs)
    except SchemaError:
        return None


@settings(max_examples=80, deadline=None)
@given(
    int_bounds(),
    st.lists(st.one_of(st.integers(-400, 400), st.integers(-(10**21), 10**21)), min_size=1, max_size=8),
    st.integers(0, 99),
)
def test_integer_expr_agrees_with_jsonschema(bounds, values, seed):
    expr = _try(integer_expr, **bounds)
    if expr is None:  # SchemaError: really no integer in range
        lower = max([v for v in (bounds["minimum"], bounds["exclusive_minimum"]) if v is not None], default=None)
        assert lower is not None
        for n in range(-400, 401):
            assert not is_valid("integer", bounds, str(n))
        return
    float_divisor = isinstance(bounds["multiple_of"], float)
    for n in values + [v for v in (bounds["minimum"], bounds["maximum"]) if isinstance(v, int)]:
        ok = is_valid("integer", bounds, str(n))
        if float_divisor and abs(n) > 2**53:
            ok = False  # documented restriction: float divisors keep integers exact as floats
        assert matches(expr, str(n)) == ok, (bounds, n)
        if abs(n) <= 2**53:
            assert matches(expr, f"{n}.0") == ok and matches(expr, f"{n}.000") == ok, (bounds, n)
        assert not matches(expr, f"{n}.5") and not matches(expr, f"{n}e0")
    rng = random.Random(seed)
    for _ in range(40):
        text = sample_walk(expr, rng)
        if text is not None:
            assert is_valid("integer", bounds, text), (bounds, text)


def test_integer_expr_details():
    expr = integer_expr(minimum=1.5, maximum=4.2)
    assert [n for n in range(-3, 8) if matches(expr, str(n))] == [2, 3, 4]
    expr = integer_expr(exclusive_minimum=-3, exclusive_maximum=3, multiple_of=2)
    assert [n for n in range(-6, 7) if matches(expr, str(n))] == [-2, 0, 2]
    assert matches(expr, "-0") and matches(expr, "-0.0") and not matches(expr, "-00") and not matches(expr, "02")
    draft4 = integer_expr(minimum=0, zero_fraction=False)
    assert matches(draft4, "5") and not matches(draft4, "5.0")
    # draft-4 boolean exclusiveMinimum
    assert not matches(integer_expr(minimum=0, exclusive_minimum=True), "0")
    big = integer_expr(minimum=10**30)
    assert matches(big, str(10**30)) and not matches(big, str(10**30 - 1)) and matches(big, "9" * 40)
    assert not matches(big, str(10**30) + ".0")  # beyond 2**53 the float would not be exact


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(minimum=3, maximum=2),
        dict(exclusive_minimum=1, exclusive_maximum=2),
        dict(minimum=1.2, maximum=1.8),
        dict(minimum=2, exclusive_maximum=2),
        dict(multiple_of=0),
        dict(multiple_of=-2),
        dict(minimum="1"),
        dict(maximum=float("nan")),
    ],
)
def test_integer_expr_bad_constraints(kwargs):
    with pytest.raises(SchemaError) as info:
        integer_expr(pointer="#/x", **kwargs)
    assert info.value.pointer.startswith("#/x")


def test_integer_multiple_of_budget():
    with pytest.raises(UnsupportedSchemaError) as info:
        integer_expr(multiple_of=10**9 + 7, minimum=-(10**30), maximum=10**30, budget=2000)
    assert info.value.keyword == "multipleOf"


# ---------------------------------------------------------------------------------------------
# number_expr.

# Extreme magnitudes make automata with hundreds of digit states (slow to build in tests), so
# random floats stay moderate and the extremes come from a fixed list.
EXTREMES = [6.603877275640762e16, 9007199254740993, 1e16, 1e-5, 0.1, -0.0, 1e22, 123456.789e-10]
HUGE_AND_TINY = [
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    1e300,
    -1e-300,
]
FLOATS = st.one_of(
    st.floats(-1e20, 1e20, allow_nan=False),
    st.floats(-1e-3, 1e-3, allow_nan=False).filter(lambda x: x == 0 or abs(x) > 1e-30),
    st.sampled_from(EXTREMES),
)
ALL_FLOATS = st.floats(allow_nan=False, allow_infinity=False)
NUM_BOUND = st.one_of(
    st.none(),
    st.integers(-100, 100),
    st.floats(-1e6, 1e6, allow_nan=False),
    FLOATS,
    st.sampled_from([0, 0.1, -0.1, 1e-5, 2.5, 1e16]),
)


@st.composite
def num_bounds(draw):
    return {k: draw(NUM_BOUND) for k in ("minimum", "maximum", "exclusive_minimum", "exclusive_maximum")}


def _near(bounds) -> list:
    out = []
    for v in bounds.values():
        if v is not None:
            v = float(v)
            out += [v, math.nextafter(v, math.inf), math.nextafter(v, -math.inf), v * 10, v / 10, -v]
    return out


@settings(max_examples=150, deadline=None)
@given(
    num_bounds(),
    st.lists(st.one_of(ALL_FLOATS, st.integers(-(10**20), 10**20), st.floats(-1e3, 1e3)), max_size=6),
    st.integers(0, 99),
)
def test_number_expr_agrees_with_jsonschema(bounds, values, seed):
    expr = _try(number_expr, **bounds)
    if expr is None:
        return  # empty range: checked by test_number_expr_bad_constraints
    for v in values + _near(bounds):
        if isinstance(v, float) and not math.isfinite(v):
            continue
        texts = respellings(v)
        ok = is_valid("number", bounds, texts[0])
        assert matches(expr, texts[0]) == ok, (bounds, v, texts[0])
        for text in texts[1:]:
            if matches(expr, text):  # other spellings: sound, and accepted when normalised
                assert is_valid("number", bounds, text), (bounds, text)
    rng = random.Random(seed)
    for _ in range(40):
        text = sample_walk(expr, rng)
        if text is not None:
            assert is_valid("number", bounds, text), (bounds, text)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([0.01, 0.5, 0.25, 2.5, 3, 0.05, 1, 10]),
    st.one_of(st.none(), st.integers(-50, 50), st.floats(-50, 50).map(lambda x: round(x, 3))),
    st.one_of(st.none(), st.integers(-50, 50), st.floats(-50, 50).map(lambda x: round(x, 3))),
    st.lists(st.one_of(st.integers(-60, 60), st.floats(-60, 60).map(lambda x: round(x, 3))), max_size=8),
    st.integers(0, 99),
)
def test_number_multiple_of_is_exact_decimal(step, lo, hi, values, seed):
    bounds = {"minimum": lo, "maximum": hi, "multiple_of": step}
    expr = _try(number_expr, **bounds)
    assume(expr is not None)
    for v in values:
        ok = is_valid("number", bounds, json.dumps(v))
        assert matches(expr, json.dumps(v)) == ok, (bounds, v)
    rng = random.Random(seed)
    for _ in range(30):
        text = sample_walk(expr, rng)
        if text is not None:
            assert is_valid("number", bounds, text), (bounds, text)


def test_number_expr_details():
    expr = number_expr(minimum=0.1, exclusive_maximum=1)
    for text, ok in [
        ("0.1", True),
        ("0.09999", False),
        ("0.99", True),
        ("1", False),
        ("1.0", False),
        ("0.99999999999999999", False),  # rounds to 1.0
        ("9.9e-1", True),
        ("1e-1", True),
        ("1E-2", False),
        ("5e-01", True),
        ("0", False),
    ]:
        assert matches(expr, text) == ok, text
    anything = number_expr()
    for text in ["0", "-0", "1.5", "-1e400", "12E+3", "0.0e-0"]:
        assert matches(anything, text)
    for text in ["01", "1.", ".5", "+1", "1e", "--1", "0x10", "NaN", "Infinity", ""]:
        assert not matches(anything, text), text
    zero_up = number_expr(minimum=0)
    assert matches(zero_up, "-0.0") and matches(zero_up, "1e400") and not matches(zero_up, "-1e-5")


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(minimum=3, maximum=2.5),
        dict(minimum=1, exclusive_maximum=1),
        dict(exclusive_minimum=0.5, maximum=0.5),
        dict(multiple_of=0),
    ],
)
def test_number_expr_bad_constraints(kwargs):
    with pytest.raises(SchemaError):
        number_expr(**kwargs)


@settings(max_examples=70, deadline=None)
@given(st.one_of(FLOATS, st.integers(-(10**20), 10**20)), st.one_of(ALL_FLOATS, st.integers(-(10**6), 10**6)))
def test_number_literal_expr(value, other):
    check_literal(value, other)


def check_literal(value, *others):
    expr = number_literal_expr(value)
    assert matches(expr, json.dumps(value))
    for text in respellings(value) + [t for other in others for t in respellings(other)]:
        assert matches(expr, text) == (json.loads(text) == value), (value, text)


@pytest.mark.parametrize("value", HUGE_AND_TINY)
def test_extreme_magnitudes(value):
    check_literal(value, 0, -value, math.nextafter(value, 0))
    for bounds in (dict(minimum=value), dict(exclusive_maximum=value)):
        expr = number_expr(**bounds)
        for v in [value, -value, 0.0, 1.0, math.nextafter(value, math.inf), math.nextafter(value, -math.inf)]:
            if not math.isfinite(v):
                continue  # json.dumps would write Infinity, which is not JSON
            text = json.dumps(v)
            assert matches(expr, text) == is_valid("number", bounds, text), (bounds, text)


def test_number_literal_expr_rejects_bool():
    with pytest.raises(TypeError):
        number_literal_expr(True)
    assert number_literal_expr(float("nan")) == NOTHING


def test_end_to_end_through_engine(smollm2_compiler):
    from support import accepts_text

    from pushmask.grammar.ir import Grammar

    compiler = smollm2_compiler
    cg = compiler.compile_ir(Grammar({"root": integer_expr(minimum=-20, maximum=130, multiple_of=5)}))
    for n in list(range(-30, 20)) + [125, 130, 131, 135]:
        assert accepts_text(cg, str(n)) == (-20 <= n <= 130 and n % 5 == 0), n
    cg = compiler.compile_ir(Grammar({"root": number_expr(minimum=0.5, maximum=2)}))
    for text, ok in [("0.5", True), ("2", True), ("2.0001", False), ("1e0", True), ("0.49", False)]:
        assert accepts_text(cg, text) == ok, text
