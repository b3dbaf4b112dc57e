"""JSON string leaf grammars (grammar/json_strings.py) against json + jsonschema as oracles.

An IR expression's language is checked with a small brute-force matcher (sets of positions over
the UTF-8 bytes), independent of the engine.  For random strings, json.dumps with and without
ensure_ascii (and random re-spellings with other escapes) must be accepted exactly when
jsonschema says the string is valid; random walks through the automaton must only produce
texts that json.loads and jsonschema accept.
"""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import edges_by_state  # noqa: E402

from pushmask.core.errors import SchemaError, UnsupportedSchemaError
from pushmask.grammar.ecma_regex import pattern_dfa
from pushmask.grammar.fsm.codepoint_dfa import literal_dfa
from pushmask.grammar.ir import NOTHING, Alt, ByteClass, Bytes, CharClass, CharFsm, Expr, Repeat, Seq
from pushmask.grammar.json_formats import format_dfa, is_known_format
from pushmask.grammar.json_strings import (
    ANY_STRING,
    JSON_CHAR,
    encode_json_string,
    json_string_expr,
    string_dfa,
    string_excluding_expr,
    string_expr,
    string_literal_expr,
)

# ---------------------------------------------------------------------------------------------
# Brute-force IR matcher.


def _utf8_char(data: bytes, i: int):
    """(code point, next index) of the UTF-8 character at i, or None."""
    if i >= len(data):
        return None
    b = data[i]
    n = 1 if b < 0x80 else 2 if b >> 5 == 6 else 3 if b >> 4 == 14 else 4 if b >> 3 == 30 else 0
    if not n:
        return None
    try:
        ch = data[i : i + n].decode("utf-8")
    except UnicodeDecodeError:
        return None
    return (ord(ch), i + n) if len(ch) == 1 else None


def _in(ranges, x) -> bool:
    return any(lo <= x <= hi for lo, hi in ranges)


def ends(expr: Expr, data: bytes, i: int) -> set[int]:
    """All positions j such that expr matches data[i:j]."""
    if isinstance(expr, Bytes):
        return {i + len(expr.value)} if data.startswith(expr.value, i) else set()
    if isinstance(expr, CharClass):
        got = _utf8_char(data, i)
        return {got[1]} if got and _in(expr.ranges, got[0]) else set()
    if isinstance(expr, ByteClass):
        return {i + 1} if i < len(data) and _in(expr.ranges, data[i]) else set()
    if isinstance(expr, Seq):
        cur = {i}
        for item in expr.items:
            cur = {j for k in cur for j in ends(item, data, k)}
        return cur
    if isinstance(expr, Alt):
        return {j for item in expr.items for j in ends(item, data, i)}
    if isinstance(expr, Repeat):
        out = {i} if expr.min == 0 else set()
        cur = {i}
        n = 0
        seen = set()
        while cur and (expr.max is None or n < expr.max):
            n += 1
            cur = {j for k in cur for j in ends(expr.item, data, k)}
            if expr.max is None:
                cur -= seen
                seen |= cur
            if n >= expr.min:
                out |= cur
        return out
    if isinstance(expr, CharFsm):
        by_state = edges_by_state(expr)
        out = set()
        states = {(expr.initial, i)}
        seen = set(states)
        while states:
            nxt = set()
            for s, k in states:
                if s in expr.finals:
                    out.add(k)
                got = _utf8_char(data, k)
                if got is None:
                    continue
                for lo, hi, t in by_state.get(s, ()):
                    if lo <= got[0] <= hi and (t, got[1]) not in seen:
                        seen.add((t, got[1]))
                        nxt.add((t, got[1]))
            states = nxt
        return out
    raise TypeError(f"matcher does not handle {type(expr).__name__}")


def matches(expr: Expr, text: str) -> bool:
    data = text.encode("utf-8")
    return len(data) in ends(expr, data, 0)


def sample_walk(expr: CharFsm, rng: random.Random, max_len: int = 40) -> str | None:
    """A random text along the automaton's edges ending in a final state (or None)."""
    by_state = edges_by_state(expr)
    s = expr.initial
    out = []
    for _ in range(max_len):
        if s in expr.finals and rng.random() < 0.25:
            return "".join(out)
        edges = by_state.get(s)
        if not edges:
            break
        lo, hi, t = rng.choice(edges)
        cp = rng.choice([lo, hi, rng.randint(lo, hi)])
        out.append(chr(cp))
        s = t
    return "".join(out) if s in expr.finals else None


def string_body(expr: Expr) -> Expr:
    """What lies between the quotes of a json_string_expr or string_expr result."""
    assert isinstance(expr, Seq) and expr.items[0] == Bytes(b'"') and expr.items[-1] == Bytes(b'"')
    (body,) = expr.items[1:-1]
    return body


def sample_body(body: Expr, rng: random.Random) -> str | None:
    """A random text of a string body: a walk of its automaton, or for a length-only body
    (Repeat of one encoded character) a random count of walked characters."""
    if isinstance(body, Repeat):
        assert isinstance(body.item, CharFsm)
        top = body.min + 6 if body.max is None else body.max
        chars = [sample_walk(body.item, rng, max_len=12) for _ in range(rng.randint(body.min, top))]
        return None if None in chars else "".join(chars)
    return sample_walk(body, rng)


def string_body_fsm(expr: Expr) -> CharFsm:
    """The CharFsm between the quotes of a json_string_expr result."""
    body = string_body(expr)
    assert isinstance(body, CharFsm)
    return body


# ---------------------------------------------------------------------------------------------
# Oracles.

VALIDATOR = jsonschema.Draft202012Validator
FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


def valid(schema: dict, value) -> bool:
    return VALIDATOR(schema, format_checker=FORMAT_CHECKER).is_valid(value)


def respell(value: str, rng: random.Random) -> str:
    """A JSON string literal for value, each character spelled a random legal way."""
    short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    out = ['"']
    for ch in value:
        cp = ord(ch)
        options = []
        if cp >= 0x20 and ch not in '"\\':
            options.append(ch)
        if ch in short:
            options.append(short[ch])
        if cp > 0xFFFF:
            v = cp - 0x10000
            options.append("\\u%04x\\u%04X" % (0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)))
        else:
            options.append("\\u%04x" % cp)
            options.append("\\u%04X" % cp)
        out.append(rng.choice(options))
    out.append('"')
    return "".join(out)


def spellings(value: str, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [json.dumps(value), json.dumps(value, ensure_ascii=False), respell(value, rng), respell(value, rng)]


# Text without lone surrogates (the grammar never produces them; see module docstring).
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
# Alphabet on which ECMA-262 and Python `re` agree for every construct we translate ("\n" is
# out: Python's "$" also matches before a final newline).
AGREE_ALPHABET = 'ab-_.09AZ xz@:/\t\\"é'
AGREE_TEXT = st.text(st.sampled_from(AGREE_ALPHABET), max_size=12)

PATTERNS = [
    "^[a-z]+$",
    "ab",
    "^a.c",
    "b$",
    "^(ab|cd)*$",
    "[0-9]{2,3}",
    "^\\d+-\\w\\s?$",
    "^$",
    "",
    "a|^b|c$",
    "^[^a-c]?x",
    "\\.",
    "^(?:a+)?b{2}$",
    "[\\-z]",
    "\\u00e9",
    "^\\S\\D\\W",
    "^.{3}$",
    "^[a-zA-Z_][a-zA-Z0-9_]*$",
]


def _pattern_cases():
    return [(p, lo, hi) for p in PATTERNS for lo, hi in [(None, None), (2, None), (None, 3), (1, 4)]]


# ---------------------------------------------------------------------------------------------
# Tests.


@pytest.mark.parametrize("text", ["", "a", "é", "\U0001f600", "\x00", '"', "\\", "\u2028"])
def test_json_char_and_any_string_accept_every_encoding(text):
    for s in spellings(text):
        assert matches(ANY_STRING, s), s
    if len(text) == 1:
        for s in spellings(text):
            assert matches(JSON_CHAR, s[1:-1])


@pytest.mark.parametrize(
    "bad", ['"\\ud800"', '"\\udc00x"', '"\x01"', '"a\nb"', '"\\x41"', '"\\U00000041"', '"\\u12"', '"', '"a"b"', "'a'"]
)
def test_any_string_rejects_invalid_json(bad):
    assert not matches(ANY_STRING, bad)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_pattern_cases()), st.one_of(ANY_TEXT, AGREE_TEXT), st.integers(0, 1000))
def test_pattern_and_length_agree_with_jsonschema(case, value, seed):
    pattern, lo, hi = case
    expr = string_expr(pattern=pattern, min_length=lo, max_length=hi)
    schema = {"type": "string", "pattern": pattern}
    if lo is not None:
        schema["minLength"] = lo
    if hi is not None:
        schema["maxLength"] = hi
    ok = valid(schema, value)
    agree = all(ch in AGREE_ALPHABET for ch in value)
    for text in spellings(value, seed):
        got = matches(expr, text)
        if got:
            assert ok, (pattern, value, text)  # soundness: always
        elif agree:
            assert not ok, (pattern, value, text)  # completeness where the two regex dialects agree


@pytest.mark.parametrize("pattern,lo,hi", _pattern_cases())
def test_random_walks_are_valid_strings(pattern, lo, hi):
    expr = string_expr(pattern=pattern, min_length=lo, max_length=hi)
    schema = {
        "type": "string",
        "pattern": pattern,
        **({"minLength": lo} if lo else {}),
        **({"maxLength": hi} if hi is not None else {}),
    }
    if expr == NOTHING:
        # "^$" with minLength > 0: in ECMA-262 "^$" matches only "", which minLength excludes.
        # jsonschema agrees on every text without a newline (Python's "$" also matches before one).
        rng = random.Random(1)
        texts = ["", "a", " ", "ab" * 3] + [
            "".join(rng.choice(AGREE_ALPHABET) for _ in range(rng.randint(0, 6))) for _ in range(100)
        ]
        assert not any(valid(schema, t) for t in texts)
        assert matches(string_expr(pattern=pattern), '""')  # the pattern alone is satisfiable
        return
    body = string_body(expr)
    rng = random.Random(hash((pattern, lo, hi)) & 0xFFFF)
    walked = 0
    for _ in range(150):
        text = sample_body(body, rng)
        if text is None:
            continue
        walked += 1
        value = json.loads('"' + text + '"')
        assert valid(schema, value), (pattern, text, value)
        assert matches(expr, '"' + text + '"'), (pattern, text)
    assert walked > 0
    if isinstance(body, Repeat):  # length-only: the bounds themselves, against jsonschema
        for n in {body.min, body.min - 1, (body.max or body.min + 5), (body.max or body.min + 5) + 1} - {-1}:
            value = "é" * n
            for text in spellings(value):
                assert matches(expr, text) == valid(schema, value), (pattern, lo, hi, text)


def _literal_language(expr) -> set[bytes]:
    """Every text of a finite expression built from Bytes, Seq and Alt."""
    if isinstance(expr, Bytes):
        return {expr.value}
    if isinstance(expr, Seq):
        texts = {b""}
        for item in expr.items:
            texts = {a + b for a in texts for b in _literal_language(item)}
        return texts
    if isinstance(expr, Alt):
        return set().union(*(_literal_language(item) for item in expr.items))
    raise AssertionError(f"unexpected node in a literal: {expr!r}")


@pytest.mark.parametrize("value", ["", "abc", 'q"uote\\', "tab\t/nl\n", "é\u2028\U0001f600x", "\x00\x1f\x7f"])
def test_string_literal_expr_accepts_exactly_the_value(value):
    """Literals take the spellings json.dumps writes (both ensure_ascii modes), and every text
    they accept decodes to exactly the value (soundness)."""
    expr = string_literal_expr(value)
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert matches(expr, text), text
    for other in {value + "a", value[:-1], "a" + value, value.upper() if value.upper() != value else value + "b"}:
        if other != value:
            assert not any(matches(expr, t) for t in spellings(other, 3)), other
    for text in _literal_language(expr):
        assert json.loads(text) == value, text


@settings(max_examples=80, deadline=None)
@given(st.one_of(ANY_TEXT, st.sampled_from(["id", "name", "x-1", "x-", "xa", "name2", ""])), st.integers(0, 99))
def test_string_excluding_expr(value, seed):
    excluded = {"id", "name"}
    patterns = ["^x-", "[0-9]$"]
    expr = string_excluding_expr(excluded, patterns)
    ok = value not in excluded and not any(re.search(p, value) for p in patterns)
    for text in spellings(value, seed):
        assert matches(expr, text) == ok, (value, text)
    constrained = string_excluding_expr(excluded, patterns, pattern_constraint="^[a-z]+$", max_length=3)
    ok2 = ok and re.fullmatch("[a-z]+", value) is not None and len(value) <= 3
    assert matches(constrained, json.dumps(value)) == ok2


def test_string_excluding_everything_is_nothing():
    assert string_excluding_expr([], [""]) == NOTHING
    assert string_excluding_expr(["a"], [], pattern_constraint="^a$") == NOTHING


FORMAT_SAMPLES = {
    "date": [
        "2024-02-29",
        "2023-02-29",
        "2000-02-29",
        "1900-02-29",
        "2023-04-31",
        "2023-12-31",
        "2023-13-01",
        "2023-1-01",
        "0000-01-01",
        "2023-06-15x",
    ],
    "date-time": [
        "2023-06-15T12:34:56Z",
        "2023-06-15t12:34:56.123+05:30",
        "2023-06-15T24:00:00Z",
        "2023-06-15 12:34:56Z",
        "2023-06-15T12:34:56",
    ],
    "time": ["12:34:56Z", "23:59:59.5-01:00", "12:34Z", "25:00:00Z"],
    "duration": ["P1Y2M3DT4H5M6S", "PT5M", "P2W", "P", "PT", "P1YT", "P1.5Y"],
    "email": ["a@b.co", "first.last+tag@example.com", "a@", "@b", "a b@c.d", "a..b@c.d"],
    "hostname": ["example.com", "a-b.c", "-a.com", "a_b.com", "x" * 64, "localhost"],
    "ipv4": ["192.168.0.1", "255.255.255.255", "256.0.0.1", "01.2.3.4", "1.2.3", "0.0.0.0"],
    "ipv6": [
        "::1",
        "::",
        "fe80::1",
        "2001:db8::8a2e:370:7334",
        "1:2:3:4:5:6:7:8",
        "1:2:3:4:5:6:7:8:9",
        "::ffff:192.168.0.1",
        "1::2::3",
        "fe80::1%eth0",
        "12345::",
    ],
    "uuid": [
        "123e4567-e89b-12d3-a456-426614174000",
        "123E4567-E89B-12D3-A456-426614174000",
        "123e4567e89b12d3a456426614174000",
        "123e4567-e89b-12d3-a456-42661417400",
    ],
    "uri": ["http://example.com/a?b=c#d", "urn:isbn:0451450523", "//no-scheme", "http://a b"],
    "uri-reference": ["/path", "", "#frag", "http://x.y", "a b"],
    "json-pointer": ["", "/a/b", "/a~0b~1", "a", "/~2"],
    "relative-json-pointer": ["0", "1/a", "2#", "-1", "01"],
    "uri-template": ["http://x/{id}", "{+path}/here", "{a,b}", "{", "x{y"],
    "regex": ["^[a-zA-Z0-9_]{3,16}$", "(a|b)*c", "*", "\\", "a{2,1}", "[z-a]", "(", "a**", "^*", "\\bx\\b"],
}


@pytest.mark.parametrize("fmt", sorted(FORMAT_SAMPLES))
def test_formats_are_sound_for_jsonschema_and_accept_common_values(fmt):
    expr = string_expr(format=fmt)
    schema = {"type": "string", "format": fmt}
    accepted = 0
    for value in FORMAT_SAMPLES[fmt]:
        got = matches(expr, json.dumps(value))
        if got:
            accepted += 1
            assert valid(schema, value), (fmt, value)
    assert accepted >= 1
    body = string_body_fsm(expr)
    rng = random.Random(3)
    for _ in range(150):
        text = sample_walk(body, rng, max_len=60)
        if text is not None:
            assert valid(schema, json.loads('"' + text + '"')), (fmt, text)


@pytest.mark.parametrize(
    "fmt,value",
    [
        ("date", "2024-02-29"),
        ("date", "2023-12-31"),
        ("date-time", "2023-06-15T12:34:56.5+05:30"),
        ("time", "00:00:00z"),
        ("email", "x@example.org"),
        ("hostname", "sub.example.com"),
        ("ipv4", "10.0.0.255"),
        ("ipv6", "::ffff:10.0.0.1"),
        ("ipv6", "2001:db8::1"),
        ("uuid", "00000000-0000-0000-0000-000000000000"),
        ("uri", "https://example.com/x?y#z"),
        ("json-pointer", "/a~1b"),
        ("relative-json-pointer", "0#"),
        ("duration", "P3DT4H"),
        ("uri-template", "/users/{id}{?q,page}"),
        ("regex", "^[a-zA-Z0-9_]{3,16}$"),
        ("regex", "^(?:[a-z]+\\.)*[a-z]{2,}$"),
        ("regex", "^\\d{1,3}(\\.\\d+)?\\s*(px|em|%)$"),
        ("regex", ""),
        ("regex", "[\\w.-]+@[^@\\s]+"),
        ("regex", "^\\/api\\/v[0-9]{1,2}\\/"),
    ],
)
def test_formats_accept_typical_values(fmt, value):
    assert matches(string_expr(format=fmt), json.dumps(value))


def test_email_matches_rfc_5321_mailboxes_with_hostname_domains():
    """The email format against a Python `re` of RFC 5321's Mailbox (Dot-string or Quoted-string
    local part, section 4.1.2) with LDH-label domains, on hand-picked and random strings; the
    JSON texts spell the quote and backslash of a quoted local part as escapes."""
    atext = r"[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]"
    qcontent = r"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\x5c[\x20-\x7e])"
    label = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
    mailbox = re.compile(rf'(?:{atext}+(?:\.{atext}+)*|"{qcontent}*")@{label}(?:\.{label})*')
    dfa = format_dfa("email")
    expr = string_expr(format="email")
    schema = {"type": "string", "format": "email"}
    valid_addresses = ['"john doe"@example.com', '""@example.com', '"a\\"b"@x.y', '"a@b\\\\"@x', '"joe..bloggs"@x']
    invalid_addresses = ['"a"b"@x', '"a\\"@x', '"a\tb"@x', '"\u00e9"@x', 'a"b"@x', '"a"."b"@x', '"a\\\u00e9"@x']
    for value in valid_addresses:
        assert mailbox.fullmatch(value) and dfa.accepts(value), value
        assert matches(expr, json.dumps(value)) and valid(schema, value), value
    for value in invalid_addresses:
        assert not mailbox.fullmatch(value) and not dfa.accepts(value), value
        assert not matches(expr, json.dumps(value)), value
    rng = random.Random(45)
    alphabet = ['"', "\\", " ", "a", "@", ".", "-", "\t", "\x7f", "\u00e9", "!", "("]
    for _ in range(4000):
        local = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7)))
        value = rng.choice([local, f'"{local}"']) + rng.choice(["@x.y", "@-x", "", "@a"])
        assert dfa.accepts(value) == bool(mailbox.fullmatch(value)), value


def test_date_rejects_impossible_days():
    expr = string_expr(format="date")
    for value in ["2023-02-29", "2100-02-29", "2023-04-31", "2023-02-30"]:
        assert not matches(expr, json.dumps(value)), value
    for value in ["2024-02-29", "2000-02-29", "2023-01-31"]:
        assert matches(expr, json.dumps(value)), value


def test_ipv4_and_ipv6_match_ipaddress_module_on_random_samples():
    import ipaddress

    rng = random.Random(5)
    for fmt, parse in (("ipv4", ipaddress.IPv4Address), ("ipv6", ipaddress.IPv6Address)):
        dfa = format_dfa(fmt)
        for _ in range(300):
            if fmt == "ipv4":
                value = ".".join(
                    str(rng.choice([0, 1, 9, 10, 99, 100, 199, 200, 249, 250, 255, 256, rng.randint(0, 300)]))
                    for _ in range(rng.choice([3, 4, 4, 4, 5]))
                )
            else:
                addr = ipaddress.IPv6Address(rng.getrandbits(128) & ~((1 << rng.randint(0, 128)) - 1))
                value = rng.choice([addr.compressed, addr.exploded, str(addr).upper()])
            try:
                parse(value)
                ok = True
            except ValueError:
                ok = False
            assert dfa.accepts(value) == ok, (fmt, value)


def test_unknown_format_is_an_annotation():
    assert not is_known_format("color-hex")
    assert format_dfa("color-hex") is None
    assert string_expr(format="color-hex") == ANY_STRING


def test_regex_format_is_a_sound_subset_of_what_re_compiles():
    """Format "regex" is a regular subset (groups nested <= 3 deep): every sampled value
    compiles with Python's re (jsonschema's check); common malformed regexes are rejected."""
    dfa = format_dfa("regex")
    rng = random.Random(11)
    for _ in range(3000):
        state, text = 0, []
        while dfa.trans[state] and not (state in dfa.finals and rng.random() < 0.1):
            lo, hi, state = rng.choice(dfa.trans[state])
            text.append(chr(rng.randint(lo, min(hi, lo + 300))))
        re.compile("".join(text))  # raises re.error if the subset were unsound
    for bad in ["*", "\\", "a{2,1}", "[z-a]", "(", ")", "a)", "a**", "^*", "[]", "(?<n>a)", "[\\d-z]", "\\B*"]:
        assert not dfa.accepts(bad), bad
    assert dfa.accepts("((a|b)+c)?") and not dfa.accepts("((((a))))")  # nesting depth 3, not 4


@pytest.mark.parametrize(
    "pattern",
    [
        "(?=a)",
        "(?!a)",
        "(?<=a)b",
        "(a)\\1",
        "\\bword",
        "\\p{Greek}",
        "a{,3}",
        "[]",
        "(?<name>a)",
        "\\a",
        "(?i)a",
        "a**",
        "[z-a]",
        "(",
        "a)",
    ],
)
def test_untranslatable_patterns_raise_unsupported(pattern):
    with pytest.raises(UnsupportedSchemaError) as info:
        string_expr(pattern=pattern, pointer="#/p")
    assert info.value.keyword == "pattern" and info.value.pointer == "#/p/pattern"


def test_length_errors():
    with pytest.raises(SchemaError):
        string_expr(min_length=3, max_length=2, pointer="#/s")
    with pytest.raises(SchemaError):
        string_expr(min_length=-1)
    with pytest.raises(UnsupportedSchemaError):
        string_expr(pattern="[a-z]{3}", max_length=10**7)
    with pytest.raises(UnsupportedSchemaError) as info:  # too big a product: lenient callers drop the format
        string_expr(format="hostname", max_length=200, pointer="#/e")
    assert info.value.keyword == "format" and info.value.pointer == "#/e/format"
    expr = string_expr(format="ipv4", max_length=8)  # small products are exact
    assert matches(expr, '"10.0.0.1"') and not matches(expr, '"10.0.0.10"')


def test_pattern_semantics_details():
    # '.' excludes ECMA line terminators; '$' only at the very end (Python would also allow "\n")
    dfa = pattern_dfa("^a.$")
    assert dfa.accepts("ab") and not dfa.accepts("a\n") and not dfa.accepts("a\u2028") and not dfa.accepts("ab\n")
    # \d is ASCII; \D excludes Unicode digits (where Python's \D and ECMA's \D disagree)
    assert pattern_dfa("^\\d$").accepts("7") and not pattern_dfa("^\\d$").accepts("\u0663")
    assert not pattern_dfa("^\\D$").accepts("\u0663") and pattern_dfa("^\\D$").accepts("x")
    # search semantics
    assert pattern_dfa("b").accepts("abc") and not pattern_dfa("^b").accepts("abc")
    # an escape for a code point above U+FFFF in the text is a surrogate pair
    expr = string_expr(pattern="^.$")
    assert matches(expr, '"\\ud83d\\ude00"') and matches(expr, json.dumps("\U0001f600", ensure_ascii=False))
    assert not matches(expr, '"\\ud83d"') and not matches(expr, '"\\ude00\\ud83d"')


LOOKAHEAD_PATTERNS = [
    "^(?!@@)[@a-zA-Z0-9_-]+$",
    "^(?!io\\.papermc\\.)([a-zA-Z_$][a-zA-Z\\d_$]*\\.)*[a-zA-Z_$]\\w*$",
    "^(?!pattern$).*$",
    "^(?=[^=]+$)(?!\\s+$)(.|\\n)+$",
    "^(?=.*\\d)(?=.*[a-z])\\S{3,8}$",
    "^(?!.*(ab|\\{c\\})).*x$",
]


@pytest.mark.parametrize("pattern", LOOKAHEAD_PATTERNS)
def test_lookaheads_after_a_leading_caret_agree_with_re(pattern):
    """^(?=X)(?!Y)R is R's language intersected with X.* and minus Y.*: never accepts what
    re.search rejects, and equals it on text without newlines (where ECMA and Python agree)."""
    dfa = pattern_dfa(pattern)
    rng = random.Random(7)
    alphabet = "@ab_-.io\\papermcPT=: {}$1x\n"
    texts = ["pattern", "pattern\n", "@@x", "@x", "io.papermc.x", "io.x", "abc1x", "a1b", "  ", "=", "a{c}x"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(3000)]
    for text in texts:
        if dfa.accepts(text) or "\n" not in text:
            assert dfa.accepts(text) == bool(re.search(pattern, text)), (pattern, text)


def test_negative_lookaheads_are_widened_to_both_engines():
    # Python's '$' also matches before a final newline: (?!a$) must reject "a\n" (re does)
    dfa = pattern_dfa("^(?!a$)[a\n]*")
    assert not dfa.accepts("a\n") and dfa.accepts("aa\n") and dfa.accepts("")
    # Python's \d includes Arabic-Indic digits: (?!\d) must reject them (re does)
    dfa = pattern_dfa("^(?!\\d).+")
    assert not dfa.accepts("\u0663x") and not dfa.accepts("7") and dfa.accepts("x7")
    # a lookahead not right after a leading '^' is still unsupported
    for pattern in ["a(?=b)", "^a(?!b)", "^(a(?!b))", "x|^(?!a)b", "^(?!(?!a))"]:
        with pytest.raises(UnsupportedSchemaError):
            pattern_dfa(pattern, "#/p")


def test_patterns_that_match_everything_cost_nothing():
    # an unanchored pattern with an optional match is satisfied by every string
    assert string_dfa(pattern="([A-Z]+)?") is None
    expr = string_expr(pattern="([A-Z]+)?", max_length=4096)
    assert isinstance(expr.items[1], Repeat)
    assert matches(expr, json.dumps("xyz é")) and not matches(expr, json.dumps("x" * 4097))


def test_encoding_past_the_budget_is_unsupported():
    dfa = string_dfa(pattern="^(?:\\S+\\s+){0,3}\\S+$", max_length=30)
    assert json_string_expr(dfa, budget=100_000) != NOTHING
    with pytest.raises(UnsupportedSchemaError) as info:
        json_string_expr(dfa, "#/t", "maxLength", budget=1000)
    assert info.value.pointer == "#/t" and info.value.keyword == "maxLength"


def test_string_tokens_are_memoised_by_content_and_budget():
    """Equal automata built apart give the one token; a cleared memo builds an equal one; an
    error past the budget is raised anew with each call's own pointer (errors are not kept)."""
    import pushmask

    pushmask.clear_caches()
    first = json_string_expr(string_dfa(pattern="^[a-z]{2,5}$"))
    again = json_string_expr(string_dfa(pattern="^[a-z]{2,5}$"))
    assert again is first
    pushmask.clear_caches()
    rebuilt = json_string_expr(string_dfa(pattern="^[a-z]{2,5}$"))
    assert rebuilt is not first and rebuilt == first
    assert matches(rebuilt, json.dumps("abc")) and not matches(rebuilt, json.dumps("a"))
    dfa = string_dfa(pattern="^(?:\\S+\\s+){0,3}\\S+$", max_length=30)
    for pointer in ("#/a", "#/b"):
        with pytest.raises(UnsupportedSchemaError) as info:
            json_string_expr(dfa, pointer, "pattern", budget=1000)
        assert info.value.pointer == pointer


def test_encoding_size_is_modest():
    body = encode_json_string(string_dfa(pattern="^[a-z0-9]{1,20}$"))
    assert body.size < 400
    assert json_string_expr(literal_dfa([])) is not None


def test_end_to_end_through_engine(smollm2_compiler):
    from support import accepts_text

    from pushmask.grammar.ir import Grammar

    compiler = smollm2_compiler
    expr = string_expr(pattern="^[a-c]+$", max_length=4)
    cg = compiler.compile_ir(Grammar({"root": expr}))
    for value, ok in [("abc", True), ("é", False), ("abcab", False), ("", False)]:
        for text in spellings(value):
            assert accepts_text(cg, text) == ok, (value, text)
    cg = compiler.compile_ir(Grammar({"root": string_expr(pattern="^.$")}))  # astral: raw UTF-8 or a pair
    for value, ok in [("\U0001f600", True), ("é", True), ("ab", False), ("\n", False)]:
        for text in spellings(value):
            assert accepts_text(cg, text) == ok, (value, text)
    assert not accepts_text(cg, '"\\ud83d"')


# ---------------------------------------------------------------------------------------------
# The official JSON-Schema-Test-Suite (draft 2020-12) as an oracle: its "valid": false strings
# must all be rejected.  Misses among its valid strings are documented restrictions (leap
# seconds, quoted e-mail local parts, IDN, ECMA/Python regex disagreements).

from support import DATA, require_shared  # noqa: E402

SUITE = DATA / "json-schema-test-suite" / "tests" / "draft2020-12"
SUITE_FILES = [
    f"optional/format/{name}.json"
    for name in sorted(FORMAT_SAMPLES) + ["idn-hostname", "idn-email", "iri", "iri-reference"]
] + [
    "optional/ecmascript-regex.json",
    "pattern.json",
    "minLength.json",
    "maxLength.json",
    "optional/non-bmp-regex.json",
]


@pytest.mark.parametrize("name", SUITE_FILES)
def test_official_suite_strings_are_never_wrongly_accepted(name):
    path = require_shared(SUITE / name)
    checked = accepted_valid = total_valid = 0
    for group in json.loads(path.read_text()):
        schema = group["schema"]
        if not isinstance(schema, dict) or set(schema) - {
            "$schema",
            "pattern",
            "minLength",
            "maxLength",
            "format",
            "type",
        }:
            continue
        try:
            dfa = string_dfa(
                pattern=schema.get("pattern"),
                min_length=schema.get("minLength"),
                max_length=schema.get("maxLength"),
                format=schema.get("format"),
            )
        except UnsupportedSchemaError:
            continue  # \cX, ...: refused, which is the sound answer
        for test in group["tests"]:
            if not isinstance(test["data"], str):
                continue
            checked += 1
            accepted = dfa is None or dfa.accepts(test["data"])
            if not test["valid"]:
                assert not accepted, (name, group["description"], test["data"])
            else:
                total_valid += 1
                accepted_valid += accepted
    assert checked > 0
    if "idn-" not in name:  # internationalised hostnames and e-mail domains: ASCII subset only
        assert accepted_valid >= total_valid / 4, (name, accepted_valid, total_valid)


# ---------------------------------------------------------------------------------------------
# A pattern with a lookbehind: refused, or under lenient=True widened (the lookbehind dropped).

LOOKBEHIND_PATTERNS = ["(?<=a)b", "^x(?<!y)z", "(a(?<=(?<!b)a)b)+", "a(?<=b)*c", "(?<!a)b$", "^(?<=^)ab?"]


@pytest.mark.parametrize("pattern", LOOKBEHIND_PATTERNS)
def test_lookbehind_dropped_is_a_superset_of_re(pattern):
    """Every string over a small alphabet in which Python's re finds a match of the original
    pattern is accepted by the widened pattern's automaton (brute force up to length 5)."""
    from itertools import product

    from pushmask.grammar.ecma_regex import without_lookbehinds

    widened = without_lookbehinds(pattern)
    assert "(?<" not in widened
    dfa = pattern_dfa(widened)
    compiled = re.compile(pattern)
    matched = 0
    for length in range(6):
        for chars in product("abcxyz", repeat=length):
            text = "".join(chars)
            if compiled.search(text):
                matched += 1
                assert dfa.accepts(text), (pattern, widened, text)
    assert matched > 0


def test_lookbehind_pattern_refused_unless_lenient():
    import warnings

    import pushmask as pm
    from pushmask.grammar.json_options import JsonOptions
    from pushmask.grammar.json_schema import json_schema_to_grammar

    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^x(?<!y)z"}}, "required": ["s"]}
    with pytest.raises(UnsupportedSchemaError, match="lookbehind") as info:
        json_schema_to_grammar(schema)
    assert info.value.keyword == "pattern" and info.value.pointer == "#/properties/s/pattern"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grammar = json_schema_to_grammar(schema, options=JsonOptions(lenient=True))
    assert any("widened 'pattern' at #/properties/s/pattern" in str(w.message) for w in caught)
    compiled = pm.GrammarCompiler(pm.TokenizerInfo([bytes([b]) for b in range(256)], vocab_type="raw")).compile_grammar(
        grammar
    )
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_string('{"s": "xz"}') and matcher.can_end()
    assert not pm.GrammarMatcher(compiled).accept_string('{"s": "yz"}')
    # under `not` a dropped lookbehind would narrow the value: still refused
    with pytest.raises(UnsupportedSchemaError, match="lookbehind"):
        json_schema_to_grammar({"type": "string", "not": {"pattern": "(?<=a)b"}}, options=JsonOptions(lenient=True))
