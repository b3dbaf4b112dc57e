"""Token terminals (`<|special|>`, `<[id]>`), token budgets over them, and structural tags
(the token-level formats and any_text's token limit included).

Masks are checked by brute force against an independent oracle: the `regex` package's partial
matching says whether a text is a prefix of the language (a token terminal is a private-use
character in the oracle's pattern), and every token of a small vocabulary is tried at every step
of random walks.  Tool-call outputs on the real Llama-3 vocabulary are checked with json.loads
and jsonschema."""

from __future__ import annotations

import json
import random

import jsonschema
import numpy as np
import pytest
from support import decodable_prefix, grammar_compiler, hf_tokenizer, json_prefix_viable, tokenizer_info

import pushmask as pm
from pushmask.core.errors import GrammarError

regex = pytest.importorskip(
    "regex", reason="the oracle uses the regex package's partial matching (transformers needs it)"
)

# A small raw vocabulary: text pieces, two special tokens used as terminals, a stop token, and
# ordinary tokens holding the byte 0xFF (which spells token terminals inside the automaton).
TEXT_TOKENS = [
    "a",
    "b",
    "ab",
    " ",
    "{",
    "}",
    "x",
    "y",
    "<",
    "f",
    "=",
    ">",
    "</",
    "/",
    "0",
    "1",
    "01",
    "<f=",
    "<f=a>",
    "</f>",
    ",",
    "f=b>",
    "a<",
    "b<f",
]
SPECIAL = {"<|python_tag|>": len(TEXT_TOKENS), "<tool>": len(TEXT_TOKENS) + 1}
STOP = len(TEXT_TOKENS) + 2
FF_TOKENS = [b"\xff", b"a\xff"]
PRIVATE = {SPECIAL["<|python_tag|>"]: "\ue000", SPECIAL["<tool>"]: "\ue001"}


def small_info() -> pm.TokenizerInfo:
    vocab = [t.encode() for t in TEXT_TOKENS] + [None, None, None] + FF_TOKENS
    return pm.TokenizerInfo(
        vocab,
        vocab_type="raw",
        stop_token_ids=[STOP],
        special_token_ids=list(SPECIAL.values()),
        special_token_texts=SPECIAL,
    )


@pytest.fixture(scope="module")
def small_compiler():
    return pm.GrammarCompiler(small_info())


def oracle_text(compiled, token: int) -> str | None:
    """What the oracle sees for a token: its text, a private character for a special token the
    grammar names; None (never allowed) for other specials and for bytes that are not UTF-8 text."""
    info = compiled.tokenizer_info
    if token in PRIVATE:
        return PRIVATE[token] if token in compiled.token_terminals else None
    data = info.decoded_vocab[token]
    if not data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def check_walks(compiled, pattern: str, walks: int = 25, steps: int = 14, seed: int = 0) -> int:
    """Random walks over allowed tokens; at every step the mask must equal, token by token,
    "the text so far plus this token is a prefix of the language" (the stop token: "the text
    is in the language").  Returns how many masks were checked."""
    oracle = regex.compile(pattern)
    info = compiled.tokenizer_info
    rng = random.Random(seed)
    checked = 0
    for _ in range(walks):
        matcher = pm.GrammarMatcher(compiled)
        text = ""
        for _ in range(steps):
            mask = matcher.get_next_token_mask()
            for token in range(info.vocab_size):
                if token == STOP:
                    expected = oracle.fullmatch(text) is not None
                else:
                    piece = oracle_text(compiled, token)
                    expected = piece is not None and oracle.fullmatch(text + piece, partial=True) is not None
                assert mask[token] == expected, (text, token, info.decoded_vocab[token], expected)
            checked += 1
            allowed = np.flatnonzero(mask).tolist()
            assert allowed, f"the mask is empty after {text!r}, which the oracle says is viable"
            token = rng.choice(allowed)
            if token == STOP:
                break
            assert matcher.accept_token(token)
            text += oracle_text(compiled, token)
    return checked


def test_ebnf_token_terminals_by_name_and_id_are_exact(small_compiler):
    tool = SPECIAL["<tool>"]
    grammar = f'root ::= [ab ]* <|python_tag|> "{{" [ab]* "}}" | "x" <[{tool}]> "y"*'
    compiled = small_compiler.compile_grammar(grammar)
    assert set(compiled.token_terminals) == set(SPECIAL.values())
    assert check_walks(compiled, r"[ab ]*\ue000\{[ab]*\}|x\ue001y*") >= 100


def test_lark_token_terminals_are_exact(small_compiler):
    grammar = 'start: WORD? <|python_tag|> "{" INNER? "}" | "x" <tool> "y"*\nWORD: /[ab ]+/\nINNER: /[ab]+/'
    compiled = small_compiler.compile_lark(grammar)
    assert check_walks(compiled, r"[ab ]*\ue000\{[ab]*\}|x\ue001y*", walks=10) >= 40


def test_text_never_reaches_a_token_terminal(small_compiler):
    """The byte 0xFF spells terminals inside the automaton: tokens holding it, and strings holding
    it, are refused everywhere, and the special token's own text is not the token."""
    compiled = small_compiler.compile_grammar('root ::= "a"* <|python_tag|> "b"')
    matcher = pm.GrammarMatcher(compiled)
    ff_ids = [len(TEXT_TOKENS) + 3, len(TEXT_TOKENS) + 4]
    mask = matcher.get_next_token_mask()
    assert not mask[ff_ids].any()
    assert not any(matcher.accept_token(t) for t in ff_ids)
    assert not matcher.accept_string(b"\xff")
    assert not matcher.accept_string("<|python_tag|>")
    assert matcher.find_jump_forward_string() == ""
    assert matcher.accept_token(SPECIAL["<|python_tag|>"])
    assert matcher.find_jump_forward_string() == "b"
    assert matcher.accept_string("b") and matcher.can_end()


def test_token_terminal_errors(small_compiler):
    with pytest.raises(GrammarError, match="no single token"):
        small_compiler.compile_grammar('root ::= "a" <|nope|>')
    with pytest.raises(GrammarError, match="out of range"):
        small_compiler.compile_grammar('root ::= "a" <[999]>')
    with pytest.raises(GrammarError, match="closing"):
        small_compiler.compile_grammar('root ::= "a" <|py tag|>')
    with pytest.raises(pm.BudgetTooSmallError, match="at least 2"):
        pm.GrammarMatcher(small_compiler.compile_grammar('root ::= <tool> "a"'), max_tokens=1)


@pytest.mark.parametrize("budget", [2, 3, 5, 9])
def test_budgets_over_token_terminals_end_in_the_language(small_compiler, budget):
    """A token terminal costs one token: with max_tokens=N every mask-guided walk that never stops
    by choice ends inside the language within N tokens, and the mask is never empty before."""
    compiled = small_compiler.compile_grammar('root ::= [ab ]* <|python_tag|> "{" [ab]* "}" | "x" <tool> "y"*')
    oracle = regex.compile(r"[ab ]*\ue000\{[ab]*\}|x\ue001y*")
    rng = random.Random(budget)
    for _ in range(30):
        matcher = pm.GrammarMatcher(compiled, max_tokens=budget)
        text, tokens = "", 0
        while True:
            allowed = np.flatnonzero(matcher.get_next_token_mask()).tolist()
            assert allowed, f"the mask is empty after {text!r}"
            choices = [t for t in allowed if t != STOP]
            if not choices:
                break
            token = rng.choice(choices)
            assert matcher.accept_token(token)
            text += oracle_text(compiled, token)
            tokens += 1
            assert oracle.fullmatch(text, partial=True), text
        assert tokens <= budget and oracle.fullmatch(text), text


TEXT = r"(?:[^<\ue000\ue001]|<(?!f=))*"  # text (special tokens are not text) without the trigger "<f="
TAG = r"(?:<f=a>[01]+</f>|<f=b>x</f>)"
TAGS = [
    {"type": "tag", "begin": "<f=a>", "content": {"type": "regex", "pattern": "[01]+"}, "end": "</f>"},
    {"type": "tag", "begin": "<f=b>", "content": {"type": "const_string", "value": "x"}, "end": "</f>"},
]


@pytest.mark.parametrize(
    "at_least_one, stop_after_first, pattern",
    [
        (False, False, f"{TEXT}(?:{TAG}{TEXT})*"),
        (True, False, f"{TAG}{TEXT}(?:{TAG}{TEXT})*"),
        (False, True, f"{TEXT}{TAG}?"),
        (True, True, TAG),
    ],
)
def test_triggered_tags_are_exact(small_compiler, at_least_one, stop_after_first, pattern):
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<f="],
            "tags": TAGS,
            "at_least_one": at_least_one,
            "stop_after_first": stop_after_first,
        },
    }
    compiled = small_compiler.compile_structural_tag(tag)
    assert check_walks(compiled, pattern, walks=20, steps=16, seed=int(at_least_one) * 2 + stop_after_first) >= 60


def test_tags_with_separator_token_tags_and_any_text_are_exact(small_compiler):
    fmt = {
        "type": "sequence",
        "elements": [
            {"type": "tags_with_separator", "tags": TAGS, "separator": ","},
            {
                "type": "tag",
                "begin": {"type": "token", "token": "<tool>"},
                "content": {"type": "any_text"},
                "end": "</f>",
            },
            {
                "type": "or",
                "elements": [
                    {"type": "token", "token": SPECIAL["<|python_tag|>"]},
                    {"type": "const_string", "value": "y"},
                ],
            },
        ],
    }
    compiled = small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    pattern = rf"(?:{TAG}(?:,{TAG})*)?\ue001(?:[^<\ue000\ue001]|<(?!/f>))*</f>(?:\ue000|y)"
    assert check_walks(compiled, pattern, walks=20, steps=16) >= 60


FREE = r"[^\ue000\ue001]*"  # free text: any text (special tokens are not text)
TOOL_TAG = {
    "type": "tag",
    "begin": {"type": "token", "token": "<tool>"},
    "content": {"type": "regex", "pattern": "[01]+"},
    "end": "</f>",
}


@pytest.mark.parametrize(
    "at_least_one, stop_after_first, pattern",
    [
        (False, False, rf"{TEXT}(?:\ue001[01]+</f>{TEXT})*"),
        (True, False, rf"\ue001[01]+</f>{TEXT}(?:\ue001[01]+</f>{TEXT})*"),
        (False, True, rf"{TEXT}(?:\ue001[01]+</f>)?"),
    ],
)
def test_token_triggered_tags_are_exact(small_compiler, at_least_one, stop_after_first, pattern):
    """Tags that begin with a trigger token; the excluded token's text ("<f=") is no free text."""
    fmt = {
        "type": "token_triggered_tags",
        "trigger_tokens": [SPECIAL["<tool>"]],
        "tags": [TOOL_TAG],
        "exclude_tokens": ["<f="],
        "at_least_one": at_least_one,
        "stop_after_first": stop_after_first,
    }
    compiled = small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    assert set(compiled.token_terminals) == {SPECIAL["<tool>"]}
    assert check_walks(compiled, pattern, walks=15, steps=14, seed=int(at_least_one) * 2 + stop_after_first) >= 40


@pytest.mark.parametrize("loop", [True, False])
def test_dispatch_and_token_dispatch_are_exact(small_compiler, loop):
    body = {"type": "regex", "pattern": "a>[01]+</f>"}
    fmt = {"type": "dispatch", "rules": [["<f=", body]], "excludes": ["x"], "loop": loop}
    text = r"(?:[^<x\ue000\ue001]|<(?!f=))*"
    pattern = rf"{text}(?:<f=a>[01]+</f>{text})*" if loop else rf"{text}(?:<f=a>[01]+</f>)?"
    compiled = small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    assert check_walks(compiled, pattern, walks=15, steps=14, seed=loop) >= 40
    fmt = {
        "type": "token_dispatch",
        "loop": loop,
        "rules": [
            ["<tool>", {"type": "const_string", "value": "x"}],
            [SPECIAL["<|python_tag|>"], {"type": "regex", "pattern": "[ab]+;"}],
        ],
    }
    branch = r"(?:\ue001x|\ue000[ab]+;)"
    pattern = rf"{FREE}(?:{branch}{FREE})*" if loop else rf"{FREE}{branch}?"
    compiled = small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    assert check_walks(compiled, pattern, walks=15, steps=14, seed=2 + loop) >= 40


def region_oracle(region: str, after: str, piece: str, end: str) -> bool:
    """Once a region's tokens are spent with `region` its text then: `piece` (after the text
    `after` that followed) is allowed iff the region ends at some point of that text and `end`
    (the rest of the format) continues from there -- the region's text never grows."""
    return any(
        end.startswith(region[cut:] + after + piece) for cut in range(len(region) + 1) if "</f>" not in region[:cut]
    )


@pytest.mark.parametrize("limit", [0, 1, 4])
def test_any_text_max_tokens_closes_the_region_after_its_tokens(small_compiler, limit):
    """A thinking budget: <tool> any_text(max_tokens=N) </f> then "y".  Until N tokens started
    in the region the mask is the language's (the regex oracle); after them, only what ends the
    region where it is (region_oracle); every walk finishes, and counted by the oracle (tokens
    that start before the region's end tag) the region never gets more than N."""
    fmt = {
        "type": "sequence",
        "elements": [
            {
                "type": "tag",
                "begin": {"type": "token", "token": "<tool>"},
                "content": {"type": "any_text", "max_tokens": limit},
                "end": "</f>",
            },
            {"type": "const_string", "value": "y"},
        ],
    }
    compiled = small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    oracle = regex.compile(r"\ue001(?:[^<\ue000\ue001]|<(?!/f>))*</f>y")
    info = compiled.tokenizer_info
    rng = random.Random(limit)
    for _ in range(12):
        matcher = pm.GrammarMatcher(compiled)
        text, starts, closed_at = "", [], None
        for _ in range(limit + 12):
            mask = matcher.get_next_token_mask()
            if closed_at is None and text and sum(1 for s in starts if s >= 1) >= limit and "</f>" not in text:
                closed_at = len(text)
            for token in range(info.vocab_size):
                piece = oracle_text(compiled, token)
                if token == STOP:
                    expected = oracle.fullmatch(text) is not None
                elif piece is None:
                    expected = False
                elif closed_at is not None:
                    expected = region_oracle(text[1:closed_at], text[closed_at:], piece, "</f>y")
                else:
                    expected = oracle.fullmatch(text + piece, partial=True) is not None
                assert mask[token] == expected, (text, info.decoded_vocab[token], closed_at)
            allowed = np.flatnonzero(mask).tolist()
            assert allowed, f"the mask is empty after {text!r}"
            token = rng.choice(allowed)
            if token == STOP:
                break
            assert matcher.accept_token(token)
            starts.append(len(text))
            text += oracle_text(compiled, token)
        assert oracle.fullmatch(text), text
        end = text.index("</f>")
        assert sum(1 for s in starts if 1 <= s < end) <= limit, (text, starts)


def test_legacy_forms_match_the_new_one(small_compiler):
    schema = {"type": "integer"}
    legacy = {"structures": [{"begin": "<f=a>", "schema": schema, "end": "</f>"}], "triggers": ["<f="]}
    new = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<f="],
            "tags": [
                {
                    "type": "tag",
                    "begin": "<f=a>",
                    "content": {"type": "json_schema", "json_schema": schema},
                    "end": "</f>",
                }
            ],
        },
    }
    for form in (legacy, json.dumps(legacy), new, json.dumps(new)):
        compiled = small_compiler.compile_structural_tag(form)
        assert check_walks(compiled, rf"{TEXT}(?:<f=a>[ ]*(?:0|1(?:[01])*)[ ]*</f>{TEXT})*", walks=6) >= 20


def test_unsupported_and_malformed_formats_raise_clear_errors(small_compiler):
    def compile_format(fmt):
        return small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})

    with pytest.raises(GrammarError, match="exclude_tokens/0"):
        compile_format({"type": "exclude_token", "exclude_tokens": ["no such token"]})
    with pytest.raises(GrammarError, match="max_tokens"):
        compile_format({"type": "any_text", "max_tokens": -1})
    with pytest.raises(GrammarError, match="not one of the trigger_tokens"):
        compile_format(
            {
                "type": "token_triggered_tags",
                "trigger_tokens": ["<tool>"],
                "tags": [
                    {
                        "type": "tag",
                        "begin": {"type": "token", "token": "<|python_tag|>"},
                        "content": {"type": "any_text"},
                        "end": "x",
                    }
                ],
            }
        )
    with pytest.raises(GrammarError, match="begin with a token"):
        compile_format({"type": "token_triggered_tags", "trigger_tokens": ["<tool>"], "tags": TAGS})
    with pytest.raises(GrammarError, match="no single token"):
        compile_format({"type": "token_dispatch", "rules": [["<nope>", {"type": "any_text"}]]})
    with pytest.raises(GrammarError, match="pair"):
        compile_format({"type": "dispatch", "rules": [["<f="]]})
    with pytest.raises(GrammarError, match="exactly one trigger"):
        compile_format({"type": "triggered_tags", "triggers": ["<g"], "tags": TAGS})
    with pytest.raises(GrammarError, match="not valid JSON"):
        small_compiler.compile_structural_tag("{nope")


# -- real vocabulary: several tools, hermes style (what vLLM's hermes parser sends) -------------

TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
    "add": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "minimum": 0}},
        "required": ["a", "b"],
    },
}


def hermes_tag(required: bool) -> dict:
    tags = [
        {
            "type": "tag",
            "begin": f'<tool_call>\n{{"name": "{name}", "arguments": ',
            "content": {"type": "json_schema", "json_schema": schema},
            "end": "}\n</tool_call>",
        }
        for name, schema in TOOLS.items()
    ]
    if required:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": "", "at_least_one": True}
    else:
        fmt = {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": tags}
    return {"type": "structural_tag", "format": fmt}


def call(name: str, arguments) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


def calls_are_valid(text: str, *, free_text: bool) -> bool:
    """The oracle: every <tool_call> block parses with json.loads, names a tool and its
    arguments pass jsonschema under XGrammar's strict mode (no members the schema does not
    declare: additionalProperties false); without free text nothing else may appear."""
    parts = text.split("<tool_call>")  # free text never holds the trigger itself
    if not free_text and parts[0]:
        return False
    if len(parts) == 1:
        return free_text
    for part in parts[1:]:
        if not part.startswith("\n"):
            return False
        body, sep, rest = part[1:].partition("\n</tool_call>")
        if not sep or (rest and not free_text):
            return False
        try:
            value = json.loads(body)
        except json.JSONDecodeError:
            return False
        if set(value) != {"name", "arguments"} or value["name"] not in TOOLS:
            return False
        try:
            jsonschema.validate(value["arguments"], {**TOOLS[value["name"]], "additionalProperties": False})
        except jsonschema.ValidationError:
            return False
    return True


def calls_prefix_viable(text: str) -> bool:
    """Oracle for the 'required' format: can `text` still be completed to calls that
    calls_are_valid accepts?  Finished calls go through calls_are_valid; the unfinished one must
    follow a tool's begin text with arguments that are a JSON prefix (support.json_prefix_viable),
    or finished arguments valid for jsonschema followed by a prefix of the end text."""
    end = "}\n</tool_call>"
    parts = text.split("<tool_call>")
    if len(parts) == 1:
        return "<tool_call>".startswith(text)
    if parts[0] or not all(calls_are_valid("<tool_call>" + part, free_text=False) for part in parts[1:-1]):
        return False
    last = parts[-1]
    if "\n</tool_call>" in last:
        body, _, tail = last.partition("\n</tool_call>")
        return calls_are_valid(f"<tool_call>{body}\n</tool_call>", free_text=False) and "<tool_call>".startswith(tail)
    for name, schema in TOOLS.items():
        begin = f'\n{{"name": "{name}", "arguments": '
        if begin.startswith(last):
            return True
        if not last.startswith(begin):
            continue
        rest = last[len(begin) :]
        if json_prefix_viable(rest):
            return True
        for cut in range(1, len(rest)):
            if end.startswith(rest[cut:]):
                try:
                    arguments = json.loads(rest[:cut])
                except json.JSONDecodeError:
                    continue
                if jsonschema.Draft202012Validator({**schema, "additionalProperties": False}).is_valid(arguments):
                    return True
    return False


CANDIDATES = [
    call("get_weather", {"city": "Paris"}),
    "Let me check. " + call("get_weather", {"city": "Oslo", "unit": "c"}) + " and " + call("add", {"a": -3, "b": 4}),
    call("add", {"a": 1, "b": 2}) + call("get_weather", {"city": "Rome"}),
    call("add", {"a": 1, "b": -2}),  # minimum broken
    call("add", {"a": 1}),  # required missing
    call("add", {"a": 1, "b": 2, "c": 3}),  # extra member (strict, as xgrammar)
    call("get_weather", {"city": "x" * 21}),  # maxLength broken
    call("get_weather", {"city": "Paris", "unit": "k"}),  # enum broken
    call("mul", {"a": 1, "b": 2}),  # no such tool
    "just text, no call",
    "text <tool_call> broken",
]


@pytest.mark.parametrize("required", [False, True])
def test_multi_tool_calls_agree_with_json_and_jsonschema(required):
    compiler = grammar_compiler("llama3")
    tokenizer = hf_tokenizer("llama3")
    compiled = compiler.compile_structural_tag(hermes_tag(required))
    for text in CANDIDATES:
        expected = calls_are_valid(text, free_text=not required)
        matcher = pm.GrammarMatcher(compiled)
        accepted = True
        for token in tokenizer.encode(text, add_special_tokens=False):
            if not matcher.get_next_token_mask()[token]:
                accepted = False
                break
            assert matcher.accept_token(token)
        assert (accepted and matcher.can_end()) == expected, text


def test_sampled_tool_calls_are_valid():
    """Random walks through the 'required' grammar on the real Llama-3 vocabulary (short tokens,
    half the time one that closes a string or object, so walks finish): every finished output
    passes the json/jsonschema oracle, every prefix is viable for calls_prefix_viable, and the
    mask is never empty before the end."""
    compiler = grammar_compiler("llama3")
    info = tokenizer_info("llama3")
    compiled = compiler.compile_structural_tag(hermes_tag(required=True))
    lengths = info.token_lengths
    rng = random.Random(7)
    finished = 0
    for _ in range(6):
        matcher = pm.GrammarMatcher(compiled)
        out = bytearray()
        for _ in range(300):
            allowed = np.flatnonzero(matcher.get_next_token_mask())
            assert allowed.size, f"the mask is empty after {bytes(out)[-200:]!r}"
            stops = [t for t in allowed.tolist() if t in info.stop_token_ids]
            if stops and rng.random() < 0.7:
                finished += 1
                break
            short = [t for t in allowed.tolist() if 0 < lengths[t] <= 2 and t not in stops]
            closing = [t for t in short if any(c in info.decoded_vocab[t] for c in (b'"', b"}", b">"))]
            token = rng.choice(closing if closing and rng.random() < 0.5 else short or allowed.tolist())
            assert matcher.accept_token(int(token))
            out += info.decoded_vocab[int(token)]
            prefix = decodable_prefix(bytes(out))
            assert calls_prefix_viable(prefix), f"the mask allowed a dead prefix {prefix[-200:]!r}"
        else:
            continue
        assert calls_are_valid(out.decode("utf-8"), free_text=False), out
    assert finished >= 3


def test_exclude_token_is_any_one_token_but_the_excluded_ones(small_compiler):
    """Brute force over the whole vocabulary at every step: after "a", one token of any kind
    (text, special, even one holding the reserved byte) but <tool>, "b" and "ab"; then one token
    but nothing excluded, then "}".  Stop tokens are never the class (they end the output)."""
    ids = {text: i for i, text in enumerate(TEXT_TOKENS)}
    fmt = {
        "type": "sequence",
        "elements": [
            {"type": "const_string", "value": "a"},
            {"type": "exclude_token", "exclude_tokens": ["<tool>", ids["b"], "ab"]},
            {"type": "exclude_token", "exclude_tokens": []},
            {"type": "const_string", "value": "}"},
        ],
    }
    compiled = small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    vocab = set(range(compiled.tokenizer_info.vocab_size)) - {STOP}
    steps = [{ids["a"]}, vocab - {SPECIAL["<tool>"], ids["b"], ids["ab"]}, vocab, {ids["}"]}, {STOP}]
    rng = random.Random(3)
    restored = type(compiled).deserialize_json(compiled.serialize_json(), compiled.tokenizer_info)
    for walk in range(20):
        matcher = pm.GrammarMatcher(compiled if walk % 2 else restored)  # the class survives serialization
        for expected in steps:
            mask = matcher.get_next_token_mask()
            assert set(np.flatnonzero(mask).tolist()) == expected
            assert {t for t in range(len(mask)) if matcher.check_token(t)} == expected  # accept agrees
            assert matcher.accept_token(rng.choice(sorted(expected)))
        assert matcher.is_terminated()


def test_exclude_token_beside_text_takes_either(small_compiler):
    """A class open beside text: the class's tokens and the text's tokens are both allowed, and
    each walk ends in the language (one token of the class, or "x" then "y")."""
    fmt = {
        "type": "sequence",
        "elements": [
            {
                "type": "or",
                "elements": [
                    {"type": "exclude_token", "exclude_tokens": ["x", "<|python_tag|>"]},
                    {"type": "const_string", "value": "xy"},
                ],
            },
            {"type": "const_string", "value": "}"},
        ],
    }
    compiled = small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    matcher = pm.GrammarMatcher(compiled)
    allowed = set(np.flatnonzero(matcher.get_next_token_mask()).tolist())
    assert allowed == set(range(compiled.tokenizer_info.vocab_size)) - {STOP, SPECIAL["<|python_tag|>"]}
    assert matcher.accept_token(TEXT_TOKENS.index("x"))  # "x" is not in the class: the text's x
    assert set(np.flatnonzero(matcher.get_next_token_mask()).tolist()) == {TEXT_TOKENS.index("y")}
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_token(TEXT_TOKENS.index("ab")) and matcher.accept_string("}") and matcher.can_end()
    with pytest.raises(ValueError, match="exclude_token"):
        pm.GrammarMatcher(compiled, max_tokens=5)


def test_exclude_token_in_a_tag_leaves_out_the_tags_end_token(small_compiler):
    """As in XGrammar, an exclude_token that is a tag's content, the tag's end a token, never
    takes that token."""
    tool, python_tag = SPECIAL["<tool>"], SPECIAL["<|python_tag|>"]
    fmt = {
        "type": "sequence",
        "elements": [
            {"type": "const_string", "value": "<f="},
            {
                "type": "star",
                "content": {
                    "type": "tag",
                    "begin": "",
                    "end": {"type": "token", "token": "<tool>"},
                    "content": {"type": "exclude_token", "exclude_tokens": ["<|python_tag|>"]},
                },
            },
        ],
    }
    compiled = small_compiler.compile_structural_tag({"type": "structural_tag", "format": fmt})
    ((_, words),) = compiled.token_classes.values()  # the class itself holds neither token
    assert not words[tool >> 5] >> (tool & 31) & 1 and not words[python_tag >> 5] >> (python_tag & 31) & 1
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_string("<f=")
    for token in (TEXT_TOKENS.index("ab"), len(TEXT_TOKENS) + 3, TEXT_TOKENS.index("</f>")):
        mask = matcher.get_next_token_mask()  # one token of the class, then <tool>
        assert not mask[tool] and not mask[python_tag] and mask[STOP] and mask[token]
        assert matcher.accept_token(token)
        assert set(np.flatnonzero(matcher.get_next_token_mask()).tolist()) == {tool}
        assert matcher.accept_token(tool) and matcher.can_end()
