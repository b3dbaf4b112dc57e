"""Contract tests of pushmask's SGLang grammar backend against SGLang's real classes (0.5.23).

SGLang's server does not install on a CPU-only machine with its dependencies (it pins torch
2.14.1 and CUDA kernels), but its grammar modules import with `pip install --no-deps sglang`
plus the pure-Python packages they import: `make test-sglang` builds that environment
(.venv-sglang) and runs this file there.  Where SGLang's own xgrammar backend imports too (with
xgrammar installed), masks are compared with it."""

from __future__ import annotations

import inspect
import json
from types import SimpleNamespace

import numpy as np
import pytest

base = pytest.importorskip(
    "sglang.srt.constrained.base_grammar_backend",
    reason="SGLang is not installed here (make test-sglang runs these tests in .venv-sglang)",
)
torch = pytest.importorskip("torch")
jsonschema = pytest.importorskip("jsonschema")

from support import hf_tokenizer  # noqa: E402

from pushmask.integrations import sglang as pm_sglang  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"const": "event"},
    },
    "required": ["id", "tags", "kind"],
}
TEXT = '{"id": 42, "tags": ["a", "bc"], "kind": "event"}'


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer("smollm2")


@pytest.fixture(scope="module")
def backend(tokenizer):
    pm_sglang.register()
    args = SimpleNamespace(constrained_json_disable_any_whitespace=True, constrained_json_max_whitespace_cnt=None)
    return base.GRAMMAR_BACKEND_REGISTRY["pushmask"](args, tokenizer, len(tokenizer), {tokenizer.eos_token_id})


def _dispatch(backend, kind, key):
    return backend._init_value_dispatch((kind, key), False)


def test_registered_and_a_valid_choice(backend):
    from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES

    assert "pushmask" in GRAMMAR_BACKEND_CHOICES
    assert isinstance(backend, base.BaseGrammarBackend) and not backend.any_whitespace
    assert backend.compiler.cache_limit_bytes > 0  # bounded: a long-running server stops growing


def test_grammar_object_implements_sglangs_interface(backend):
    """Every method SGLang's BaseGrammarObject leaves unimplemented is overridden, with the
    base class's parameter names."""
    grammar = _dispatch(backend, "json", json.dumps(SCHEMA))
    assert isinstance(grammar, base.BaseGrammarObject)
    for name, member in vars(base.BaseGrammarObject).items():
        func = member.__func__ if isinstance(member, staticmethod) else member
        if not callable(func) or name.startswith("__") or name == "maybe_init_reasoning":
            continue
        ours = inspect.getattr_static(pm_sglang.PushmaskGrammar, name)
        if "NotImplementedError" in inspect.getsource(func) or name in ("is_terminated", "copy"):
            assert ours is not member, f"{name} is not implemented"
        ours_func = ours.__func__ if isinstance(ours, staticmethod) else ours
        assert list(inspect.signature(ours_func).parameters) == list(inspect.signature(func).parameters), name


def _allowed(row) -> np.ndarray:
    return np.unpackbits(np.asarray(row).view(np.uint8), bitorder="little").astype(bool)


def test_decoding_loop_as_sglang_runs_it(backend, tokenizer):
    """Masks allow each token of a valid text and nothing the grammar refuses (brute force on a
    sample); apply_vocab_mask puts -inf exactly on masked columns; the stop token terminates;
    rollback, copy and jump-forward behave as SGLang expects."""
    grammar = _dispatch(backend, "json", json.dumps(SCHEMA))
    vocab = len(tokenizer)
    mask = grammar.allocate_vocab_mask(vocab, 2, "cpu")
    assert mask.dtype == torch.int32 and tuple(mask.shape) == (2, (vocab + 31) // 32)
    tokens = tokenizer.encode(TEXT, add_special_tokens=False) + [tokenizer.eos_token_id]
    rng = np.random.default_rng(0)
    for token in tokens:
        grammar.fill_vocab_mask(mask, 1)
        allowed = _allowed(mask[1])[:vocab]
        assert allowed[token]
        probe = grammar.matcher.fork()
        for t in rng.choice(vocab, 300, replace=False):
            assert allowed[t] == probe.check_token(int(t)), t
        logits = torch.randn(1, vocab)
        grammar.apply_vocab_mask(logits, grammar.move_vocab_mask(mask[1:2], "cpu"))
        assert torch.equal(torch.isfinite(logits[0]), torch.from_numpy(allowed))
        grammar.accept_token(token)
    assert grammar.is_terminated()
    grammar.rollback(1)
    assert not grammar.is_terminated()
    with pytest.raises(ValueError):
        grammar.accept_token(tokenizer.encode("}", add_special_tokens=False)[0])
    grammar.reset_vocab_mask(mask)
    assert bool((mask == -1).all())

    fresh = grammar.copy()  # a new state, as SGLang copies cached grammars
    assert not fresh.is_terminated() and fresh.matcher.num_accepted_tokens == 0
    prefix = tokenizer.encode('{"id": 7, "tags": []', add_special_tokens=False)
    for token in prefix:
        fresh.accept_token(token)
    helper = fresh.try_jump_forward(tokenizer)
    assert helper is not None
    forced, _state = fresh.jump_forward_str_state(helper)
    assert forced == ', "kind": "event"}'
    text = tokenizer.decode(prefix) + forced
    retokenized = tokenizer.encode(text, add_special_tokens=False)
    fresh.jump_and_retokenize(prefix, retokenized, _state)
    assert fresh.matcher.can_end()
    jsonschema.validate(json.loads(text), SCHEMA)


def test_batched_fill_and_invalid_requests(backend, tokenizer):
    grammars = [
        _dispatch(backend, "json", json.dumps(SCHEMA)),
        _dispatch(backend, "regex", r"[0-9]{2,4}"),
        _dispatch(backend, "ebnf", 'root ::= "yes" | "no"'),
        _dispatch(backend, "json", "$$ANY$$"),
    ]
    for grammar, text in zip(grammars, ['{"id": 1', "12", "y", "[1, "]):
        for token in tokenizer.encode(text, add_special_tokens=False):
            grammar.accept_token(token)
    vocab = len(tokenizer)
    batched = grammars[0].allocate_vocab_mask(vocab, 5, "cpu")
    rows = [4, 0, 2, 1]
    grammars[0].fill_vocab_mask_batched([base.GrammarRow(r, g) for r, g in zip(rows, grammars)], batched)
    for row, grammar in zip(rows, grammars):
        single = grammar.allocate_vocab_mask(vocab, 1, "cpu")
        grammar.fill_vocab_mask(single, 0)
        assert torch.equal(batched[row], single[0])
    assert bool((batched[3] == -1).all())  # unlisted rows untouched
    for kind, key in (
        ("json", "{not json"),
        ("json", '{"type": "nonsense"}'),
        ("regex", "(ab"),
        ("ebnf", "root ::= missing_rule"),
    ):
        assert isinstance(_dispatch(backend, kind, key), base.InvalidGrammarObject), key
    assert isinstance(_dispatch(backend, "structural_tag", '{"format": {}}'), base.InvalidGrammarObject)


def test_masks_equal_sglangs_xgrammar_backend(backend, tokenizer):
    """SGLang's own xgrammar backend, same settings (no free whitespace), fills the same masks on
    text tokens (xgrammar also lets special tokens' text into strings; pushmask never does)."""
    try:
        from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend
    except ImportError as exc:
        pytest.skip(f"SGLang's xgrammar backend does not import here: {exc}")
    theirs = XGrammarGrammarBackend(
        tokenizer, vocab_size=len(tokenizer), model_eos_token_ids=[tokenizer.eos_token_id], any_whitespace=False
    )
    special = [i for i, t in tokenizer.added_tokens_decoder.items() if t.special and i != tokenizer.eos_token_id]
    vocab = len(tokenizer)
    for kind, key, text in (
        ("json", json.dumps(SCHEMA), TEXT),
        ("regex", r"(ab|cd)+[0-9]{1,3}", "abcdab12"),
        ("ebnf", 'root ::= "say " ("yes" | "no") "!"', "say no!"),
    ):
        a, b = _dispatch(backend, kind, key), _dispatch(theirs, kind, key)
        mask_a, mask_b = a.allocate_vocab_mask(vocab, 1, "cpu"), b.allocate_vocab_mask(vocab, 1, "cpu")
        for token in tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]:
            a.fill_vocab_mask(mask_a, 0)
            b.fill_vocab_mask(mask_b, 0)
            got, want = _allowed(mask_a[0])[:vocab], _allowed(mask_b[0])[:vocab]
            want[special] = False
            assert np.array_equal(got, want), (kind, token)
            a.accept_token(token)
            b.accept_token(token)
        assert a.is_terminated() and b.is_terminated()


# -- structural tags, the reasoner wrapper and the token budget ---------------------------------

TOOL = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6}}, "required": ["city"]}
HERMES = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<tool_call>"],
        "tags": [
            {
                "type": "tag",
                "begin": '<tool_call>{"name": "w", "arguments": ',
                "content": {"type": "json_schema", "json_schema": TOOL},
                "end": "}</tool_call>",
            }
        ],
    },
}


def _walk_accepts(grammar, tokenizer, text: str) -> bool:
    vocab = len(tokenizer)
    mask = grammar.allocate_vocab_mask(vocab, 1, "cpu")
    for token in tokenizer.encode(text, add_special_tokens=False):
        grammar.fill_vocab_mask(mask, 0)
        if not _allowed(mask[0])[token]:
            return False
        grammar.accept_token(token)
    return True


def test_structural_tags_are_compiled_by_pushmask(backend, tokenizer):
    """Calls the schema allows pass, one it refuses (maxLength) is cut where it breaks; the legacy
    `structures` form keeps SGLang's at_least_one.  (SGLang's xgrammar backend is no oracle here:
    its structural tags ignore the whitespace flags and let control characters into strings.)"""
    grammar = _dispatch(backend, "structural_tag", json.dumps(HERMES))
    assert isinstance(grammar, pm_sglang.PushmaskGrammar)
    assert _walk_accepts(
        grammar, tokenizer, 'Sure. <tool_call>{"name": "w", "arguments": {"city": "Oslo"}}</tool_call> ok'
    )
    refused = _dispatch(backend, "structural_tag", json.dumps(HERMES))
    assert not _walk_accepts(
        refused, tokenizer, '<tool_call>{"name": "w", "arguments": {"city": "Stockholm"}}</tool_call>'
    )
    legacy = {
        "structures": [{"begin": '<tool_call>{"name": "w", "arguments": ', "schema": TOOL, "end": "}</tool_call>"}],
        "triggers": ["<tool_call>"],
        "at_least_one": True,
    }
    assert not _walk_accepts(_dispatch(backend, "structural_tag", json.dumps(legacy)), tokenizer, "text first")
    # The JSON body follows the backend's layout (compact separators here), as SGLang's flags say.
    assert not _walk_accepts(
        _dispatch(backend, "structural_tag", json.dumps(HERMES)),
        tokenizer,
        '<tool_call>{"name": "w", "arguments": {"city":"Rome"}}</tool_call>',
    )


STRINGS = {"type": "array", "items": {"type": "string"}}


def _budgeted_walk(grammar, req, tokenizer, thinking: list[int], budget: int, seed: int) -> str:
    """Decode as SGLang's scheduler does (fill, sample among allowed, accept), the first tokens
    forced to `thinking`; returns the text after them."""
    from sglang.srt.constrained.grammar_manager import GrammarManager

    manager = GrammarManager.__new__(GrammarManager)  # its scheduler is all this step reads
    manager.scheduler = SimpleNamespace(model_config=SimpleNamespace())
    manager._apply_request_reasoning_config(req)  # where the budget reaches the grammar
    vocab = grammar.allocate_vocab_mask(len(tokenizer), 1, "cpu")
    rng = np.random.default_rng(seed)
    out = []
    while not grammar.is_terminated():
        assert len(req.output_ids) < budget, "the budget was exceeded"
        vocab.fill_(-1)  # SGLang resets the rows before a step
        grammar.fill_vocab_mask(vocab, 0)
        allowed = np.flatnonzero(_allowed(vocab[0])[: len(tokenizer)])
        if len(req.output_ids) < len(thinking):
            token = thinking[len(req.output_ids)]
            assert allowed.size == len(tokenizer), "the thinking is free"
        else:
            assert allowed.size, "empty mask"
            token = int(rng.choice(allowed))
            out.append(token)
        grammar.accept_token(token)
        req.output_ids.append(token)
    return tokenizer.decode(out[:-1])


def test_max_new_tokens_reaches_the_matcher(backend, tokenizer):
    """An array of strings that random sampling never closes: with max_new_tokens=10 every walk
    ends on the stop token within 10 tokens and the text is complete JSON."""
    for seed in range(4):
        grammar = _dispatch(backend, "json", json.dumps(STRINGS))
        req = SimpleNamespace(
            grammar=grammar, output_ids=[], sampling_params=SimpleNamespace(max_new_tokens=10, custom_params=None)
        )
        text = _budgeted_walk(grammar, req, tokenizer, [], 10, seed)
        jsonschema.validate(json.loads(text), STRINGS)


def test_reasoning_is_free_then_the_answer_budgeted_by_what_is_left(tokenizer):
    """--reasoning-parser deepseek-r1: pushmask is wrapped in SGLang's ReasonerGrammarBackend;
    the thinking is unconstrained, then the JSON answer finishes within max_new_tokens less the
    thinking's tokens."""
    import copy

    thinking_tokenizer = copy.deepcopy(tokenizer)
    thinking_tokenizer.add_tokens(["<think>", "</think>"])
    args = SimpleNamespace(
        constrained_json_disable_any_whitespace=True,
        constrained_json_max_whitespace_cnt=None,
        reasoning_parser="deepseek-r1",
    )
    from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend, ReasonerGrammarObject

    wrapped = base.GRAMMAR_BACKEND_REGISTRY["pushmask"](
        args, thinking_tokenizer, len(thinking_tokenizer), {thinking_tokenizer.eos_token_id}
    )
    assert isinstance(wrapped, ReasonerGrammarBackend)
    end = thinking_tokenizer.convert_tokens_to_ids("</think>")
    thinking = thinking_tokenizer.encode("I will think it over", add_special_tokens=False) + [end]
    for seed in range(3):
        grammar = wrapped._init_value_dispatch(("json", json.dumps(STRINGS)), True)
        assert isinstance(grammar, ReasonerGrammarObject) and isinstance(grammar.grammar, pm_sglang.PushmaskGrammar)
        req = SimpleNamespace(
            grammar=grammar,
            output_ids=[],
            sampling_params=SimpleNamespace(max_new_tokens=len(thinking) + 9, custom_params=None),
        )
        text = _budgeted_walk(grammar, req, thinking_tokenizer, thinking, len(thinking) + 9, seed)
        jsonschema.validate(json.loads(text), STRINGS)
