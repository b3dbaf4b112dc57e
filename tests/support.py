"""Shared test helpers: where the shared data lives, the real tokenizers loaded once per test
session, and the accept oracles every test file uses.

A plain module (not conftest) so tests can import it unambiguously: tests/vllm has a conftest too.

The shared data (tokenizers/, data/maskbench-dev, data/json-schema-test-suite) is looked up in
$PUSHMASK_SHARED, else in ../shared beside the repository. A test that needs a missing part skips
saying so; under CI (the CI environment variable set, as .ci/run runs) it fails instead, and
conftest.py stops the whole session before any test runs.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PUSHMASK_SHARED") or REPO.parent / "shared")
TOKENIZERS = SHARED / "tokenizers"
DATA = SHARED / "data"
TOKENIZER_NAMES = ("llama3", "qwen", "mistral", "smollm2")
# Everything the suite reads from the shared folder.
SHARED_PARTS = tuple(TOKENIZERS / name for name in TOKENIZER_NAMES) + (
    DATA / "maskbench-dev",
    DATA / "json-schema-test-suite",
)
UNDER_CI = bool(os.environ.get("CI"))


def missing_shared_parts() -> list[Path]:
    return [path for path in SHARED_PARTS if not path.is_dir()]


def missing_shared_message(missing: list[Path]) -> str:
    what = ", ".join(map(str, missing)) if SHARED.is_dir() else f"the whole folder {SHARED}"
    return (
        f"shared test data missing: {what}. Set PUSHMASK_SHARED to the folder "
        f"holding tokenizers/ and data/ (unset, it is ../shared beside the repository: {REPO.parent / 'shared'})"
    )


def require_shared(path: Path) -> Path:
    """`path` (under SHARED) when it exists; otherwise the calling test skips, or fails under CI."""
    if not path.exists():
        message = missing_shared_message([path])
        if UNDER_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


@functools.cache
def hf_tokenizer(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(require_shared(TOKENIZERS / name)))


@functools.cache
def tokenizer_info(name: str):
    import pushmask

    return pushmask.TokenizerInfo.from_huggingface(hf_tokenizer(name))


@functools.cache
def grammar_compiler(name: str):
    """One compiler per tokenizer for the whole session, so tests share the mask cache like users do."""
    import pushmask

    return pushmask.GrammarCompiler(tokenizer_info(name))


def dev_instances(tokenizer_name: str, n: int, steps: int, every: int = 1) -> list[tuple[dict, list[int]]]:
    """n MaskBench-dev schemas (every `every`-th file, sorted by name) with the first `steps`
    tokens of a valid instance (schemas whose instance has fewer are passed over)."""
    hf = hf_tokenizer(tokenizer_name)
    rows = []
    for path in sorted(require_shared(DATA / "maskbench-dev").glob("*.json"))[::every]:
        item = json.loads(path.read_text())
        valid = [t["data"] for t in item.get("tests", []) if t["valid"]]
        if not valid:
            continue
        tokens = hf.encode(json.dumps(valid[0], ensure_ascii=False), add_special_tokens=False)
        if len(tokens) >= steps:
            rows.append((item["schema"], tokens[:steps]))
        if len(rows) == n:
            break
    return rows


def accepts_text(compiled, text: str | bytes) -> bool:
    """Is `text` a complete string of the compiled grammar (fed as one string)?"""
    import pushmask

    matcher = pushmask.GrammarMatcher(compiled)
    return matcher.accept_string(text) and matcher.can_end()


def accepts_token_ids(compiled, token_ids) -> bool:
    """Is this token sequence a complete string of the compiled grammar (fed token by token)?"""
    import pushmask

    matcher = pushmask.GrammarMatcher(compiled)
    return all(matcher.accept_token(t) for t in token_ids) and matcher.can_end()


_EDGE_CACHE: dict = {}


def edges_by_state(fsm) -> dict:
    """A CharFsm's transitions grouped by source state (for the brute-force IR matchers);
    only the latest automaton is kept, keyed by identity."""
    key = id(fsm)
    if key not in _EDGE_CACHE or _EDGE_CACHE[key][0] is not fsm:
        by_state: dict = {}
        for s, lo, hi, t in fsm.transitions:
            by_state.setdefault(s, []).append((lo, hi, t))
        _EDGE_CACHE.clear()
        _EDGE_CACHE[key] = (fsm, by_state)
    return _EDGE_CACHE[key][1]


class CompileTimeout(Exception):
    """A compile ran past compile_with_timeout's limit."""


def compile_with_timeout(compile_, seconds: int):
    """compile_() with warnings silenced, or "unsupported" (a pushmask schema or budget error) or
    "timeout" past `seconds` (SIGALRM, main thread only)."""
    import signal
    import warnings

    from pushmask.core.errors import LimitExceededError, SchemaError

    def alarm(*_):
        raise CompileTimeout()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return compile_()
    except (SchemaError, LimitExceededError):
        return "unsupported"
    except CompileTimeout:
        return "timeout"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def compile_with_hang_guard(compile_, seconds: int, what: str):
    """compile_with_timeout, but a compile past `seconds` fails the calling test (naming `what`)
    instead of being counted: a guard against hangs, generous enough never to fire on a slow
    machine, so that what a test counts does not depend on timing."""
    compiled = compile_with_timeout(compile_, seconds)
    if isinstance(compiled, str) and compiled == "timeout":
        pytest.fail(f"compiling {what} did not finish in {seconds} s: a hang, or a pathological slowdown")
    return compiled


STRUCTURAL_BYTES = frozenset(b'"{}[],:0123456789-.')


def short_structural_tokens(info):
    """Token ids of at most two structural JSON bytes: walks that prefer them close strings and
    brackets often enough to finish."""
    import numpy as np

    decoded = info.decoded_vocab
    return np.array(
        [
            t
            for t in range(len(decoded))
            if decoded[t] and len(decoded[t]) <= 2 and all(b in STRUCTURAL_BYTES for b in decoded[t])
        ],
        dtype=np.int64,
    )


def mask_walk(compiled, rng, short, max_tokens: int = 160, prefix_viable=None) -> bytes | None:
    """One random mask-guided output: each step takes a token the filled bitmask allows (a short
    structural one with probability 0.8, a stop token with probability 0.3 when one is allowed,
    or surely when only stop tokens are), and every allowed token must be accepted.  The text
    when the matcher terminated on a stop token, None when the walk ran out of steps.  An empty
    mask before termination fails the calling test, and so does a prefix written so far (its
    decodable head) that `prefix_viable`, an independent oracle, says no sentence extends."""
    import numpy as np

    import pushmask

    info = compiled.tokenizer_info
    stop = np.array(sorted(set(info.stop_token_ids)), dtype=np.int64)
    matcher = pushmask.GrammarMatcher(compiled)
    bitmask = pushmask.allocate_token_bitmask(1, info.vocab_size)
    out = b""
    for _ in range(max_tokens):
        matcher.fill_next_token_bitmask(bitmask, 0)
        bits = np.unpackbits(np.asarray(bitmask)[0].view(np.uint8), bitorder="little")[: info.vocab_size]
        allowed = np.flatnonzero(bits)
        assert allowed.size, f"the mask is empty before the output is finished, after {out[-200:]!r}"
        ends = allowed[np.isin(allowed, stop)]
        text = allowed[~np.isin(allowed, stop)]
        if ends.size and (not text.size or rng.random() < 0.3):
            assert matcher.accept_token(int(ends[0])), "an allowed stop token was refused"
            assert matcher.is_terminated()
            return out
        pool = np.intersect1d(text, short) if rng.random() < 0.8 else text
        tid = int(rng.choice(pool if pool.size else text))
        assert matcher.accept_token(tid), f"allowed token {tid} was refused after {out[-200:]!r}"
        out += info.decoded_vocab[tid]
        if prefix_viable is not None:
            assert prefix_viable(decodable_prefix(out)), f"the mask allowed a dead prefix {out[-200:]!r}"
    return None


UNIQUE_STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


def unique_strings_prefix_ok(text: str) -> bool:
    """Oracle: can `text` be completed to an array of distinct strings (json.loads, jsonschema)?
    Tries tails that finish an open escape, close an open string with characters no walk writes
    (as escapes), then the array; whitespace anywhere JSON allows it."""
    import json

    import jsonschema

    validator = jsonschema.Draft202012Validator(UNIQUE_STRINGS)
    fresh = "\\u00e9\\u00e8"
    for head in ("", "n", "0000", "000", "00", "0"):
        for tail in ("", "[]", "]", '"]', fresh + '"]', '"' + fresh + '"]', ' "' + fresh + '"]'):
            try:
                value = json.loads(text + head + tail)
            except ValueError:
                continue
            if validator.is_valid(value):
                return True
    return False


# ---------------------------------------------------------------------------------------------
# Prefix oracles: can a text still be completed to a sentence?  Independent of pushmask.


def decodable_prefix(data: bytes) -> str:
    """The longest UTF-8 decodable head of `data` (a token walk may stop inside a character)."""
    for cut in range(4):
        try:
            return data[: len(data) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    raise AssertionError(f"not UTF-8: {data[-20:]!r}")


def lark_prefix_viable(parser, text: str, window: int = 48) -> bool:
    """Oracle: can `text` be extended to a sentence of `parser` (a lark.Lark with parser="earley",
    lexer="dynamic_complete": character-level, so it reads keywords glued to names as pushmask
    does)?  A parse that succeeds or runs out of text (UnexpectedEOF) is viable; one that stalls
    at position p is viable when the tail from p, or from a point i shortly before p where
    text[:i] itself runs out of text, is a prefix of a terminal expected there, or of an ignored
    one (a `regex` partial match): that terminal is the one left unfinished."""
    import lark
    import regex

    def expected_at(i: int):
        """Terminals expected after text[:i], or None if text[:i] is dead."""
        try:
            parser.parse(text[:i])
        except lark.exceptions.UnexpectedEOF as error:
            return set(error.expected)
        except lark.exceptions.UnexpectedInput:
            return None
        return {t.name for t in parser.terminals}  # a whole sentence: what may follow is not reported

    def partial(name: str, rest: str) -> bool:
        return bool(regex.fullmatch(parser.get_terminal(name).pattern.to_regexp(), rest, partial=True))

    try:
        parser.parse(text)
        return True
    except lark.exceptions.UnexpectedEOF:
        return True
    except lark.exceptions.UnexpectedCharacters as error:
        stall, allowed = error.pos_in_stream, set(error.allowed)
    ignore = set(parser.lexer_conf.ignore)
    if any(partial(name, text[stall:]) for name in allowed | ignore):
        return True
    names = [t.name for t in parser.terminals]
    for i in range(stall - 1, max(-1, stall - window), -1):  # a terminal begun before the stall
        rest = text[i:]
        hopeful = [name for name in names if partial(name, rest)]
        if hopeful:
            expected = expected_at(i)
            if expected is not None and (expected | ignore) & set(hopeful):
                return True
    return False


JSON_LARK = r"""
?start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" (member ("," member)*)? "}"
member: STRING ":" value
array: "[" (value ("," value)*)? "]"
STRING: /"(?:[^"\\\x00-\x1f]|\\(?:["\\\/bfnrt]|u[0-9a-fA-F]{4}))*"/
NUMBER: /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/
%ignore /[ \t\n\r]+/
"""


@functools.cache
def json_prefix_parser():
    """Strict JSON (RFC 8259) as a lark grammar, for lark_prefix_viable."""
    import lark

    return lark.Lark(JSON_LARK, parser="earley", lexer="dynamic_complete")


def json_prefix_viable(text: str) -> bool:
    """Oracle: can `text` be extended to a JSON text (json.loads)?"""
    return lark_prefix_viable(json_prefix_parser(), text)


_JSON_LITERALS = ("true", "false", "null")


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def json_prefix_completes(text: str) -> bool:
    """Oracle for long walks (json_prefix_viable parses the whole prefix with Earley, ~75 ms at
    300 characters): does json.loads (NaN and Infinity refused) read `text` + a tail that
    finishes the open escape, string, number or literal, a pending member or value, and closes
    the open brackets?  A True is a witness; a False on a viable prefix would be a tail this
    misses (tests/test_soundness.py compares it with json_prefix_viable)."""
    import json
    import re

    stack: list[str] = []
    in_string = key_string = want_key = after_key = False
    escape = None  # None outside an escape, "" after a backslash, "u..." inside \uXXXX
    for ch in text:
        if in_string:
            if escape is None:
                if ch == "\\":
                    escape = ""
                elif ch == '"':
                    in_string, after_key = False, key_string
            elif escape == "" and ch == "u" or escape and len(escape) < 4:
                escape += ch
            else:
                escape = None
        elif ch == '"':
            in_string, key_string, want_key = True, want_key, False
        elif ch in "{[":
            stack.append(ch)
            want_key = ch == "{"
        elif ch in "}]":
            if not stack:
                return False
            stack.pop()
            want_key = False
        elif ch == ",":
            want_key = stack[-1:] == ["{"]
        elif ch == ":":
            after_key = False
    tail = ""
    if in_string:
        tail = ("n" if escape == "" else "0" * (5 - len(escape)) if escape else "") + '"' + (":0" if key_string else "")
    else:
        fragment = re.search(r"[A-Za-z0-9.+\-]*$", text).group()
        if fragment[:1].isalpha():
            tail = next((word[len(fragment) :] for word in _JSON_LITERALS if word.startswith(fragment)), None)
            if tail is None:
                return False
        elif fragment[-1:] in ("-", "+", ".", "e", "E"):
            tail = "0"
        elif not fragment:
            last = text.rstrip()[-1:]
            if after_key:
                tail = ":0"
            elif last in ("", ":") or last == "," and stack[-1:] == ["["]:
                tail = "0"
            elif last == ",":
                tail = '"k":0'
    tail += "".join("}" if bracket == "{" else "]" for bracket in reversed(stack))
    try:
        json.loads(text + tail, parse_constant=_no_constants)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Oracles for the grammar files in tests/grammars: json.gbnf is json.loads, parens.ebnf balanced
# () and [], a .lark file lark's Earley parser (dynamic_complete, character-level like pushmask).

GRAMMARS = REPO / "tests" / "grammars"


@functools.cache
def lark_file_parser(file: str):
    import lark

    return lark.Lark((GRAMMARS / file).read_text(), parser="earley", lexer="dynamic_complete")


def _brackets_ok(text: str, complete: bool) -> bool:
    stack = []
    for ch in text:
        if ch in "([":
            stack.append(ch)
        elif ch not in ")]" or not stack or stack.pop() != {")": "(", "]": "["}[ch]:
            return False
    return not stack or not complete


def grammar_file_accepts(file: str, text: str) -> bool:
    """Is `text` in the language of tests/grammars/`file`?"""
    import json

    import lark

    if file == "json.gbnf":
        try:
            json.loads(text)
        except ValueError:
            return False
        return True
    if file == "parens.ebnf":
        return _brackets_ok(text, complete=True)
    assert file.endswith(".lark"), f"no oracle for {file}"
    try:
        lark_file_parser(file).parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


def grammar_file_prefix_viable(file: str, text: str) -> bool:
    """Can `text` still be completed to a string grammar_file_accepts accepts?"""
    if file == "json.gbnf":
        return json_prefix_viable(text)
    if file == "parens.ebnf":
        return _brackets_ok(text, complete=False)
    assert file.endswith(".lark"), f"no oracle for {file}"
    return lark_prefix_viable(lark_file_parser(file), text)


# ---------------------------------------------------------------------------------------------
# The official JSON Schema Test Suite: its drafts, groups and remote documents.

SUITE = DATA / "json-schema-test-suite"
DRAFTS = ("draft4", "draft6", "draft7", "draft2019-09", "draft2020-12")
METASCHEMAS = {
    "draft4": "http://json-schema.org/draft-04/schema#",
    "draft6": "http://json-schema.org/draft-06/schema#",
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
}
REMOTE = "http://localhost:1234/"


def retrieve(uri: str):
    """Serve the suite's remote documents from the local folder (nothing else is fetched)."""
    if not uri.startswith(REMOTE):
        raise LookupError(f"no network access for {uri}")
    path = SUITE / "remotes" / uri[len(REMOTE) :].split("#")[0]
    return json.loads(path.read_text())


def groups(draft: str):
    """(group id, schema with $schema filled in, tests) for every group of a draft."""
    for path in sorted(require_shared(SUITE / "tests" / draft).glob("*.json")):
        for index, group in enumerate(json.loads(path.read_text())):
            schema = group["schema"]
            if isinstance(schema, dict) and "$schema" not in schema:
                schema = {"$schema": METASCHEMAS[draft], **schema}
            yield f"{path.name}#{index}", schema, group["tests"]


# ---------------------------------------------------------------------------------------------
# Brute-force IR oracles: the strings of bounded length a grammar derives (a least fixpoint,
# so left recursion is fine) and a memoised matcher; independent of the passes under test.

from pushmask.grammar.ir import Alt, ByteClass, Bytes, CharClass, CharFsm, Grammar, Ref, Repeat, Seq  # noqa: E402


def _concat(left: set[str], right: set[str], max_len: int) -> set[str]:
    by_len: dict[int, list[str]] = {}
    for s in right:
        by_len.setdefault(len(s), []).append(s)
    out = set()
    for a in left:
        for n in range(max_len - len(a) + 1):
            for b in by_len.get(n, ()):
                out.add(a + b)
    return out


def _fsm_strings(fsm: CharFsm, alphabet: str, max_len: int) -> set[str]:
    out = set()
    frontier = {("", fsm.initial)}
    for _ in range(max_len + 1):
        nxt = set()
        for text, state in frontier:
            if state in fsm.finals:
                out.add(text)
            if len(text) == max_len:
                continue
            for src, lo, hi, dst in fsm.transitions:
                if src == state:
                    nxt.update((text + c, dst) for c in alphabet if lo <= ord(c) <= hi)
        frontier = nxt
    return out


def _eval(expr, env: dict[str, set[str]], alphabet: str, max_len: int) -> set[str]:
    if isinstance(expr, Bytes):
        text = expr.value.decode("utf-8")
        return {text} if len(text) <= max_len and all(c in alphabet for c in text) else set()
    if isinstance(expr, CharClass):
        return {c for c in alphabet if any(lo <= ord(c) <= hi for lo, hi in expr.ranges)} if max_len else set()
    if isinstance(expr, ByteClass):
        return {c for c in alphabet if ord(c) < 128 and any(lo <= ord(c) <= hi for lo, hi in expr.ranges)}
    if isinstance(expr, CharFsm):
        return _fsm_strings(expr, alphabet, max_len)
    if isinstance(expr, Seq):
        acc = {""}
        for item in expr.items:
            acc = _concat(acc, _eval(item, env, alphabet, max_len), max_len)
        return acc
    if isinstance(expr, Alt):
        return set().union(*(_eval(item, env, alphabet, max_len) for item in expr.items))
    if isinstance(expr, Repeat):
        item = _eval(expr.item, env, alphabet, max_len)
        top = expr.min + max_len if expr.max is None else min(expr.max, expr.min + max_len)
        power = {""}
        out = set()
        for k in range(top + 1):
            if k >= expr.min:
                out |= power
            power = _concat(power, item, max_len)
            if not power:
                break
        return out
    if isinstance(expr, Ref):
        return env[expr.name]
    raise TypeError(expr)


def bounded_language(grammar: Grammar, alphabet: str, max_len: int) -> set[str]:
    """All strings over `alphabet` of length <= max_len that the grammar's root derives."""
    env = {name: set() for name in grammar.rules}
    while True:
        new = {name: _eval(body, env, alphabet, max_len) for name, body in grammar.rules.items()}
        if new == env:
            return env[grammar.root]
        env = new


def ir_accepts(grammar: Grammar, text: str) -> bool:
    """Does the (left-recursion-free) grammar derive `text`?  A memoised top-down matcher
    computing, for each (rule, start), the set of end positions."""
    memo: dict[tuple[str, int], frozenset[int]] = {}
    in_progress: set[tuple[str, int]] = set()
    n = len(text)

    def step(expr, starts) -> set[int]:
        out: set[int] = set()
        for i in starts:
            out |= ends(expr, i)
        return out

    def ends(expr, i: int) -> frozenset[int] | set[int]:
        if isinstance(expr, Bytes):
            lit_text = expr.value.decode("utf-8")
            return {i + len(lit_text)} if text.startswith(lit_text, i) else set()
        if isinstance(expr, (CharClass, ByteClass)):
            return {i + 1} if i < n and any(lo <= ord(text[i]) <= hi for lo, hi in expr.ranges) else set()
        if isinstance(expr, CharFsm):
            out, states, j = set(), {expr.initial}, i
            while states:
                if states & expr.finals:
                    out.add(j)
                if j == n:
                    break
                c = ord(text[j])
                states = {dst for src, lo, hi, dst in expr.transitions if src in states and lo <= c <= hi}
                j += 1
            return out
        if isinstance(expr, Seq):
            positions = {i}
            for item in expr.items:
                positions = step(item, positions)
            return positions
        if isinstance(expr, Alt):
            return step_all(expr.items, i)
        if isinstance(expr, Repeat):
            current = {i}
            for _ in range(expr.min):
                current = step(expr.item, current)
            result = set(current)
            count = expr.min
            frontier = current
            while frontier and (expr.max is None or count < expr.max):
                frontier = step(expr.item, frontier) - (result if expr.max is None else set())
                result |= frontier
                count += 1
            return result
        if isinstance(expr, Ref):
            key = (expr.name, i)
            if key not in memo:
                assert key not in in_progress, f"left recursion through {expr.name}"
                in_progress.add(key)
                memo[key] = frozenset(ends(grammar.rules[expr.name], i))
                in_progress.discard(key)
            return memo[key]
        raise TypeError(expr)

    def step_all(items, i):
        out: set[int] = set()
        for item in items:
            out |= ends(item, i)
        return out

    return n in ends(Ref(grammar.root), 0)


def all_strings(alphabet: str, max_len: int):
    for n in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=n):
            yield "".join(chars)


# ---------------------------------------------------------------------------------------------
# Toy problems for the sampler tests (ASAp, AWRS, SMC): a deterministic hashed toy LM over the
# SmolLM2 vocabulary, two small grammars, and an exact oracle by depth-first enumeration.

import hashlib  # noqa: E402
import math  # noqa: E402
from collections import Counter  # noqa: E402

import numpy as np  # noqa: E402

from pushmask.grammar.ir import alt, iter_nodes, lit, ref, rep, seq  # noqa: E402
from pushmask.masks.matcher import GrammarMatcher  # noqa: E402


class HashedToyLM:
    """logits(prefix) = bias[t] + scale * N(0, 1), seeded by a hash of the prefix, on `support`;
    -inf elsewhere.  Deterministic across runs and platforms; counts its calls."""

    def __init__(self, vocab_size: int, biases: dict[int, float], *, scale: float = 1.5, salt: bytes = b""):
        self.vocab_size = vocab_size
        self.support = np.array(sorted(biases), dtype=np.int64)
        self.bias = np.array([biases[t] for t in self.support], dtype=np.float64)
        self.scale = scale
        self.salt = salt
        self.calls = 0

    def __call__(self, token_ids: list[int]) -> np.ndarray:
        self.calls += 1
        digest = hashlib.blake2b(np.asarray(token_ids, dtype=np.int64).tobytes(), key=self.salt, digest_size=8).digest()
        noise = np.random.default_rng(int.from_bytes(digest, "little")).standard_normal(len(self.support))
        logits = np.full(self.vocab_size, -np.inf)
        logits[self.support] = self.bias + self.scale * noise
        return logits


def single_token_ids(tok, *texts: str) -> list[int]:
    """The id of each text, which must be one token of the tokenizer."""
    out = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == 1, f"{text!r} is not one SmolLM2 token"
        out.append(ids[0])
    return out


def binary_problem(compiler):
    """{00000} U {1 followed by 4 bits}; the LM also gives mass to '2', 'a' and the stop token
    everywhere, so forced zeros lose more mass than free bits and GCD over-weights 00000."""
    tok = hf_tokenizer("smollm2")
    bit = alt(lit("0"), lit("1"))
    grammar = Grammar({"root": alt(lit("00000"), seq(lit("1"), ref("bits"))), "bits": rep(bit, 4, 4)})
    compiled = compiler.compile_ir(grammar, normalize=False)
    zero, one = single_token_ids(tok, "0", "1")
    biases = {zero: 1.0, one: 1.0, tok.eos_token_id: 0.0}
    biases.update({t: -0.5 for t in single_token_ids(tok, "2", "a")})
    lm = HashedToyLM(compiler.tokenizer_info.vocab_size, biases, scale=0.8, salt=b"binary")
    return lm, compiled


def balanced(n: int) -> list[str]:
    """Balanced parenthesis strings with n pairs."""
    if n == 0:
        return [""]
    return sorted({"(" + a + ")" + b for k in range(n) for a in balanced(k) for b in balanced(n - 1 - k)})


def paren_problem(compiler):
    """Balanced parentheses of length 2..6, with several tokenizations per string."""
    tok = hf_tokenizer("smollm2")
    strings = [s for n in (1, 2, 3) for s in balanced(n)]
    compiled = compiler.compile_ir(Grammar({"root": alt(*(lit(s) for s in strings))}), normalize=False)
    biases = {t: 0.5 for t in single_token_ids(tok, "(", ")", "()")}
    biases[tok.eos_token_id] = 0.0
    biases.update({t: -0.5 for t in single_token_ids(tok, "x", " ", "[", "]")})
    lm = HashedToyLM(compiler.tokenizer_info.vocab_size, biases, scale=1.5, salt=b"parens")
    return lm, compiled


# -- the oracle -------------------------------------------------------------------------------


def _log_softmax(x):
    top = np.max(x)
    return x - top - np.log(np.sum(np.exp(x - top)))


class Oracle:
    """Every grammatical sequence's P(w) (stop included), c(u) for every grammatical prefix, Z,
    and the exact distributions Q and Q_GCD, by depth-first search with a matcher."""

    def __init__(self, lm, compiled):
        matcher = GrammarMatcher(compiled)
        stops = set(matcher.stop_token_ids)
        self.p: dict[tuple, float] = {}
        self.gcd: dict[tuple, float] = {}
        self.c: dict[tuple, float] = {}

        def visit(prefix: tuple, p: float, g: float) -> float:
            probs = np.exp(_log_softmax(lm(list(prefix))))
            allowed = np.flatnonzero(matcher.get_next_token_mask())
            allowed = [int(t) for t in allowed if probs[t] > 0]
            mass = sum(probs[t] for t in allowed)
            c = 0.0
            for t in allowed:
                if t in stops:
                    self.p[prefix] = self.p.get(prefix, 0.0) + p * probs[t]
                    self.gcd[prefix] = self.gcd.get(prefix, 0.0) + g * probs[t] / mass
                    c += probs[t]
                else:
                    assert matcher.accept_token(t)
                    c += probs[t] * visit(prefix + (t,), p * probs[t], g * probs[t] / mass)
                    matcher.rollback(1)
            self.c[prefix] = c
            return c

        self.z = visit((), 1.0, 1.0)
        self.q = {w: p / self.z for w, p in self.p.items()}
        assert math.isclose(sum(self.gcd.values()), 1.0, rel_tol=1e-9)


def kl(p: dict, q: dict) -> float:
    """KL(p || q) in nats; p's support must lie inside q's."""
    return sum(pv * math.log(pv / q[w]) for w, pv in p.items() if pv > 0)


def empirical(samples: list) -> dict:
    """Sampled sequences (pushmask.samplers.asap.Sample) -> their observed frequencies."""
    counts = Counter(tuple(s.token_ids) for s in samples)
    n = len(samples)
    return {w: k / n for w, k in counts.items()}


def chi_square_p(samples: list, q: dict) -> float:
    """Pearson chi-square goodness of fit, outcomes with expected count < 5 pooled into one bin."""
    from scipy.stats import chisquare

    n = len(samples)
    counts = Counter(tuple(s.token_ids) for s in samples)
    assert set(counts) <= set(q), "a sample outside the grammar's support"
    observed, expected = [], []
    pooled_o = pooled_e = 0.0
    for w, qw in q.items():
        if n * qw >= 5:
            observed.append(counts.get(w, 0))
            expected.append(n * qw)
        else:
            pooled_o += counts.get(w, 0)
            pooled_e += n * qw
    if pooled_e > 0:
        observed.append(pooled_o)
        expected.append(pooled_e)
    return float(chisquare(observed, expected).pvalue)


def mean_within(values, target, sigmas=4.0):
    """Is the mean of `values` within `sigmas` standard errors of `target`? (ok, (mean, se, target))"""
    values = np.asarray(values, dtype=float)
    se = values.std() / math.sqrt(len(values))
    return abs(values.mean() - target) <= sigmas * se + 1e-12, (values.mean(), se, target)


def tiny_binary_llama():
    """A tiny random-weight Llama over 320 ids that likes the binary problem's tokens ("0", "1"
    and the stop token), so samples come back quickly."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=320,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight[[2, 32, 33]] *= 8
    return model


def tiny_llama(seed: int, vocab_size: int = 49_152, eos: int = 2):
    """A tiny random-weight Llama over SmolLM2's vocabulary size (eos/pad 2, <|im_end|>)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=vocab_size,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    return LlamaForCausalLM(config).eval()


def iter_refs(expr):
    """Names of the rules referenced inside a grammar IR expression, in a fixed order (a name
    can come up more than once)."""
    return (node.name for node in iter_nodes(expr) if isinstance(node, Ref))
