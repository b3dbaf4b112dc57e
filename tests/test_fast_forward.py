"""Canonical fast-forward (integrations/fast_forward.py, used by pushmask.generate): the tokens it
returns re-spell exactly the dropped tokens plus the forced text, and equal the tokenizer's own
encoding of the text wherever the back-off bound reaches the point where they differ; in
pushmask.generate, an output the grammar forces entirely is the tokenizer's encoding of it, and
the model stays conditioned on the re-tokenized text (the KV cache is cut back correctly)."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from support import DATA, TOKENIZER_NAMES, hf_tokenizer, require_shared, tiny_llama, tokenizer_info  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.integrations.fast_forward import DEFAULT_MAX_BACK, bare_encode, canonical_fast_forward  # noqa: E402


def _texts(n: int) -> list[str]:
    texts = []
    for path in sorted(require_shared(DATA / "maskbench-dev").glob("*.json"))[::53]:
        item = json.loads(path.read_text())
        texts += [json.dumps(t["data"], ensure_ascii=False) for t in item.get("tests", []) if t["valid"]][:1]
        if len(texts) == n:
            break
    return texts


def _common(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_canonical_tokens_respell_the_text_and_match_the_tokenizer(name):
    tok, info = hf_tokenizer(name), tokenizer_info(name)
    vocab = info.decoded_vocab
    rng = random.Random(name)
    checked = equal = 0  # samples; those where the bound reaches the first difference
    for text in _texts(30):
        for _ in range(4):
            cut = rng.randrange(1, len(text))
            prefix, forced = text[:cut], text[cut : cut + rng.randrange(1, 12)]
            generated = bare_encode(tok, info, prefix)  # SentencePiece: without its prefix space
            if generated is None:
                continue  # the tokenizer normalizes text here: not an output it could generate
            back, tokens = canonical_fast_forward(tok, info, generated, forced)
            assert 0 <= back <= DEFAULT_MAX_BACK
            kept = generated[: len(generated) - back]
            assert b"".join(vocab[t] for t in kept + tokens) == (prefix + forced).encode(), (prefix, forced)
            whole = bare_encode(tok, info, prefix + forced)
            checked += 1
            if len(generated) - _common(whole, generated) <= DEFAULT_MAX_BACK:
                assert kept + tokens == whole, (prefix, forced)  # within the back-off bound
                equal += 1
    assert checked >= 60 and equal >= checked // 2


@pytest.fixture(scope="module")
def tok():
    return hf_tokenizer("smollm2")


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


def test_a_forced_output_is_the_tokenizers_encoding(model, tok):
    """A schema with one instance: everything is forced, and the output's tokens are exactly the
    tokenizer's encoding of its text (plain fast-forward splits at each forced piece)."""
    schema = {"const": {"name": "Ann Lee", "tags": ["alpha", "beta"], "ok": True}}  # no number: 12 == 12.0
    for canonical in (True, False):
        result = pm.generate(model, tok, "Say it", schema=schema, max_new_tokens=64, canonical=canonical)
        assert result.complete and result.value == schema["const"]
        body = [t for t in result.token_ids if t != tok.eos_token_id]
        assert result.text == json.dumps(schema["const"])
        if canonical:
            assert body == tok.encode(result.text, add_special_tokens=False)
            assert all(result.forced[: len(body)])


def test_back_off_keeps_the_model_conditioned_on_the_text(model, tok):
    """Greedy with canonical fast-forward on a grammar where the model's last token merges with
    forced text: tokens were backed off, the output is the grammar's, and every token the model
    chose is the argmax of the allowed tokens under logits recomputed from scratch on the final
    token ids (so the KV cache was cut back where tokens were replaced)."""
    import torch

    ebnf = r'root ::= "{\"name\": \"" [a-z]{1,6} "\", \"kind\": \"" ("cat" | "dog") "\"}"'
    compiled = pm.GrammarCompiler(pm.TokenizerInfo.from_huggingface(tok)).compile_grammar(ebnf)
    backed = 0
    for prompt in ("Describe a pet", "Name a dog", "A cat called"):
        result = pm.generate(model, tok, prompt, compiled_grammar=compiled, max_new_tokens=40)
        assert result.complete and re.fullmatch(r'\{"name": "[a-z]{1,6}", "kind": "(cat|dog)"\}', result.text)
        from pushmask.integrations.generate import _prompt_ids

        ids = _prompt_ids(tok, prompt, None)[0].tolist()
        with torch.no_grad():
            logits = model(torch.tensor([ids + result.token_ids])).logits[0]
        matcher = pm.GrammarMatcher(compiled, override_stop_tokens=[tok.eos_token_id])
        for i, token in enumerate(result.token_ids):
            if not result.forced[i]:
                allowed = torch.from_numpy(matcher.get_next_token_mask())
                row = logits[len(ids) + i - 1].masked_fill(~allowed, float("-inf"))
                assert int(row.argmax()) == token, (prompt, i)
            assert matcher.accept_token(token)
        plain = pm.generate(model, tok, prompt, compiled_grammar=compiled, max_new_tokens=40, canonical=False)
        backed += plain.token_ids != result.token_ids
    assert backed  # canonical fast-forward re-tokenized somewhere


def test_assisted_decoding_in_generate_is_lossless(model, tok):
    """pushmask.generate with transformers' prompt-lookup assisted decoding (candidates drafted
    from the context, checked by the model in one forward pass; the processor masks each draft
    position and follows the rejected ones back): greedy outputs equal greedy without it."""
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 4},
        },
        "required": ["name", "tags"],
        "additionalProperties": False,
    }
    prompt = 'Like {"name": "red green", "tags": ["red", "green", "red"]} give one:'
    plain = pm.generate(model, tok, prompt, schema=schema, max_new_tokens=64)
    assisted = pm.generate(model, tok, prompt, schema=schema, max_new_tokens=64, prompt_lookup_num_tokens=3)
    assert plain.complete and assisted.complete
    assert assisted.token_ids == plain.token_ids and assisted.value == plain.value
