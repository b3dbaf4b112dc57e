"""Token healing (masks/healing.py, GrammarLogitsProcessor.heal_prompt, pushmask.generate's
token_healing=True): the first-token mask equals a brute-force check over the vocabulary on all
four tokenizers; outputs start with the removed prompt bytes and the rest stays inside the
grammar (json.loads + jsonschema, lark's parser)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from support import TOKENIZER_NAMES, grammar_compiler, hf_tokenizer, lark_file_parser, tiny_llama  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.masks.healing import fill_healing_mask  # noqa: E402

jsonschema = pytest.importorskip("jsonschema")
torch = pytest.importorskip("torch")

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def _brute_force(compiled, removed: bytes, max_tokens=None) -> np.ndarray:
    """Every token that starts with `removed` and whose rest a fresh matcher accepts (and, with a
    budget, can still finish after), by a check per token."""
    info = compiled.tokenizer_info
    allowed = np.zeros(info.vocab_size, dtype=bool)
    matcher = pm.GrammarMatcher(compiled, max_tokens=max_tokens)
    for t, spelled in enumerate(info.decoded_vocab):
        if t in info.stop_token_ids or not spelled.startswith(removed):
            continue
        rest = spelled[len(removed) :]
        if not rest:
            allowed[t] = True
        elif matcher.accept_string(rest):
            allowed[t] = matcher.remaining_tokens is None or matcher.min_tokens_to_finish() <= matcher.remaining_tokens
            matcher.rollback(1)
    return allowed


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_healing_mask_equals_brute_force(name):
    compiler = grammar_compiler(name)
    cases = [
        (compiler.compile_json_schema(PERSON), b" ", None),
        (compiler.compile_json_schema(PERSON), b":", 40),
        (compiler.compile_regex(r"[a-z]+ing"), b"h", None),
        (compiler.compile_regex(r'"[a-z ]+"'), b'"', None),
    ]
    for compiled, removed, budget in cases:
        matcher = pm.GrammarMatcher(compiled, max_tokens=budget)
        words = np.zeros((matcher.vocab_size + 31) // 32, dtype=np.int32)
        fill_healing_mask(matcher, removed, words)
        got = np.unpackbits(words.view(np.uint8), bitorder="little")[: matcher.vocab_size].astype(bool)
        expected = _brute_force(compiled, removed, budget)
        assert (got == expected).all(), (name, removed, np.flatnonzero(got != expected)[:10])
        assert expected.sum() >= 1
        assert matcher.num_accepted_tokens == 0  # left where it was


@pytest.fixture(scope="module")
def tok():
    return hf_tokenizer("smollm2")


@pytest.fixture(scope="module")
def model():
    return tiny_llama(3)


PROMPTS = ["Here is the JSON: ", "JSON:", "Person: {", 'The record is "']


@pytest.mark.parametrize("sample", [False, True])
def test_generate_with_token_healing_stays_in_the_schema(model, tok, sample):
    for prompt in PROMPTS:
        ids = tok.encode(prompt, add_special_tokens=False)
        removed = tok.convert_tokens_to_string([tok.convert_ids_to_tokens(ids[-1])])
        result = pm.generate(
            model,
            tok,
            prompt,
            schema=PERSON,
            max_new_tokens=48,
            chat_template=False,
            token_healing=True,
            do_sample=sample,
        )
        assert result.healed_prefix == removed
        assert result.text.startswith(removed), (prompt, result.text)
        assert result.complete
        value = json.loads(result.text[len(removed) :])
        jsonschema.validate(value, PERSON)
        assert value == result.value
        first = tok.decode([result.token_ids[0]])
        assert first.startswith(removed)


def test_generate_with_token_healing_and_a_lark_grammar(model, tok):
    text = (Path(__file__).parent / "grammars" / "arithmetic.lark").read_text()
    parser = lark_file_parser("arithmetic.lark")
    for prompt in ("Compute 1 +", "Result = ", "x ="):
        result = pm.generate(
            model, tok, prompt, grammar=text, max_new_tokens=24, chat_template=False, token_healing=True, do_sample=True
        )
        assert result.text.startswith(result.healed_prefix) and result.healed_prefix
        if result.complete:
            parser.parse(result.text[len(result.healed_prefix) :])


def test_processor_heals_a_batch(model, tok):
    """model.generate with the processor directly: each row's first token starts with its
    removed bytes; the rest of each row is a JSON instance of the schema."""
    compiled = grammar_compiler("smollm2").compile_json_schema(PERSON)
    eos = tok.eos_token_id
    processor = pm.hf.GrammarLogitsProcessor(compiled, eos_token_id=eos, max_new_tokens=48, token_healing=True)
    prompts = ["Person: {", "A person: "]
    batch = tok(prompts, return_tensors="pt", padding=True, padding_side="left")  # rows end with their text
    healed = processor.heal_prompt(batch["input_ids"])
    out = model.generate(
        input_ids=healed,
        attention_mask=batch["attention_mask"][:, :-1],
        logits_processor=[processor],
        max_new_tokens=48,
        do_sample=True,
        pad_token_id=eos,
        eos_token_id=eos,
    )
    for row in range(len(prompts)):
        removed = processor.healed_bytes(row)
        assert removed == compiled.tokenizer_info.decoded_vocab[int(batch["input_ids"][row, -1])]
        generated = [t for t in out[row, healed.shape[1] :].tolist() if t != eos]
        data = compiled.tokenizer_info.decode_tokens(generated)
        assert data.startswith(removed)
        jsonschema.validate(json.loads(data[len(removed) :]), PERSON)


def test_heal_prompt_needs_the_flag_and_text(tok):
    compiled = grammar_compiler("smollm2").compile_json_schema(PERSON)
    with pytest.raises(ValueError, match="token_healing=True"):
        pm.hf.GrammarLogitsProcessor(compiled).heal_prompt(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="spells no text"):
        pm.hf.GrammarLogitsProcessor(compiled, token_healing=True).heal_prompt(torch.tensor([[5, 6, 2]]))


def test_healing_follows_num_return_sequences(model, tok):
    """Rows b * n ... b * n + n - 1 come from prompt b: each heals with its prompt's bytes."""
    compiled = grammar_compiler("smollm2").compile_json_schema(PERSON)
    eos = tok.eos_token_id
    processor = pm.hf.GrammarLogitsProcessor(compiled, eos_token_id=eos, max_new_tokens=40, token_healing=True)
    batch = tok(["Person: {", "A person: "], return_tensors="pt", padding=True, padding_side="left")
    healed = processor.heal_prompt(batch["input_ids"])
    out = model.generate(
        input_ids=healed,
        attention_mask=batch["attention_mask"][:, :-1],
        logits_processor=[processor],
        max_new_tokens=40,
        do_sample=True,
        num_return_sequences=2,
        pad_token_id=eos,
        eos_token_id=eos,
    )
    vocab = compiled.tokenizer_info.decoded_vocab
    for row in range(4):
        removed = vocab[int(batch["input_ids"][row // 2, -1])]
        assert processor.healed_bytes(row) == removed
        data = compiled.tokenizer_info.decode_tokens([t for t in out[row, healed.shape[1] :].tolist() if t != eos])
        assert data.startswith(removed)
        jsonschema.validate(json.loads(data[len(removed) :]), PERSON)


@pytest.mark.parametrize("family", ["hermes", "llama", "mistral"])
def test_healing_into_a_tool_call_format(family):
    """Token healing x structural tags (pm.tool_call_structural_tag, the family's own tokenizer):
    the first-token mask equals the brute force, the token the tokenizer itself writes for the
    removed bytes followed by the call is among them, and walks that start with a random healing
    token end in calls the family's parser reads and jsonschema accepts (test_tool_formats'
    RENDER / PARSE, as the serving parsers read them)."""
    from support import short_structural_tokens
    from test_tool_formats import PARSE, RENDER, TOKENIZER, TOOLS, encode, valid

    from pushmask.grammar.tool_formats import tool_call_structural_tag
    from pushmask.masks.healing import accept_healing_token

    name = TOKENIZER[family]
    tag = tool_call_structural_tag(family, TOOLS[1:], tool_choice="required", parallel_tool_calls=False)
    compiled = grammar_compiler(name).compile_structural_tag(tag, any_whitespace=False)
    info = compiled.tokenizer_info
    call = RENDER[family]([("get_time", {"utc": True})])
    short = short_structural_tokens(info)
    rng = np.random.default_rng(4)
    finished = 0
    for removed in (b" ", b"\n", call[:1].encode()):
        matcher = pm.GrammarMatcher(compiled)
        words = np.zeros((matcher.vocab_size + 31) // 32, dtype=np.int32)
        fill_healing_mask(matcher, removed, words)
        allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[: matcher.vocab_size].astype(bool)
        assert (allowed == _brute_force(compiled, removed)).all(), (family, removed)
        own = encode(name, removed.decode() + call)[0]  # the grammar's text starts after `removed`
        if info.decoded_vocab[own].startswith(removed):
            assert allowed[own], (family, removed, info.decoded_vocab[own])
        for first in rng.choice(np.flatnonzero(allowed), size=min(3, int(allowed.sum())), replace=False).tolist():
            matcher = pm.GrammarMatcher(compiled)
            assert accept_healing_token(matcher, removed, first) is not None
            out = info.decoded_vocab[first][len(removed) :]
            for _ in range(250):
                ids = np.flatnonzero(matcher.get_next_token_mask())
                assert ids.size, (family, removed, out)
                stops = [t for t in ids.tolist() if t in set(info.stop_token_ids)]
                if stops and (len(stops) == ids.size or rng.random() < 0.3):
                    assert matcher.accept_token(stops[0])
                    break
                text_ids = np.setdiff1d(ids, stops)
                pool = np.intersect1d(text_ids, short)
                token = int(rng.choice(pool if pool.size and rng.random() < 0.8 else text_ids))
                assert matcher.accept_token(token)
                out += info.decoded_vocab[token]
            if matcher.is_terminated():
                finished += 1
                assert valid(PARSE[family](out.decode())), (family, removed, out)
    assert finished >= 3
