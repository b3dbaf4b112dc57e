"""Contract tests for the vLLM backend.  They run only where vLLM is installed (the separate
venv that `make test-vllm` builds); elsewhere each test module skips itself with
pytest.importorskip("vllm.v1.structured_output.backend_types") -- the submodule, because with
pytest's rootdir on sys.path this folder is itself a namespace package named "vllm".  This
conftest imports no vLLM at module level: a skip raised here would abort `pytest tests/vllm`,
where pytest loads it before collection."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
from support import TOKENIZERS, require_shared

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

SMOLLM2 = TOKENIZERS / "smollm2"


@pytest.fixture(scope="session", autouse=True)
def _working_directory_outside_the_package(tmp_path_factory):
    """Run the session from an empty folder: vLLM inspects models in `python -m` subprocesses,
    which put their working directory first on sys.path, and the repository root is the package
    pushmask, whose kernels/ would be found there as Hugging Face's `kernels`."""
    before = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(before)


TINY_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 49152,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
    "tie_word_embeddings": True,
}


def make_tiny_model(folder: Path) -> Path:
    """A random-weight Llama folder (config.json + the smollm2 tokenizer files)."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in SMOLLM2.iterdir():
        shutil.copy(item, folder / item.name)
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA_CONFIG))
    return folder


def add_tokens(folder: Path, texts: list[str]) -> list[int]:
    """Add ordinary tokens (decoded as their text, as Qwen3's <think>) to a tiny model's tokenizer
    and widen its vocabulary to hold them; returns their ids."""
    from tokenizers import AddedToken, Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.add_tokens([AddedToken(text, normalized=False) for text in texts])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] = max(config["vocab_size"], -(-tokenizer.get_vocab_size() // 64) * 64)
    (folder / "config.json").write_text(json.dumps(config))
    return [tokenizer.token_to_id(text) for text in texts]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    require_shared(SMOLLM2)
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def make_vllm_config(model: Path, *, disable_any_whitespace: bool = False, num_speculative_tokens: int = 0):
    from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig, StructuredOutputsConfig, VllmConfig

    model_config = ModelConfig(model=str(model), tokenizer=str(model), dtype="float32", max_model_len=256)
    parallel_config = ParallelConfig()
    kwargs = {"parallel_config": parallel_config}
    if num_speculative_tokens:  # n-gram drafting needs no draft model
        kwargs["speculative_config"] = SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=num_speculative_tokens,
            prompt_lookup_max=3,
            prompt_lookup_min=1,
            target_model_config=model_config,
            target_parallel_config=parallel_config,
        )
    return VllmConfig(
        model_config=model_config,
        structured_outputs_config=StructuredOutputsConfig(
            backend="xgrammar", disable_any_whitespace=disable_any_whitespace
        ),
        **kwargs,
    )


@pytest.fixture(scope="session")
def make_config(tiny_model):
    """make_config(**options) -> a VllmConfig for the tiny model (see make_vllm_config)."""
    return lambda **options: make_vllm_config(tiny_model, **options)


@pytest.fixture(scope="session")
def vllm_config(tiny_model):
    return make_vllm_config(tiny_model)


@pytest.fixture(scope="session")
def compact_vllm_config(tiny_model):
    return make_vllm_config(tiny_model, disable_any_whitespace=True)


@pytest.fixture(scope="session")
def tokenizer(vllm_config):
    from vllm.tokenizers import cached_tokenizer_from_config

    return cached_tokenizer_from_config(model_config=vllm_config.model_config)


@pytest.fixture(scope="session")
def vocab_size(vllm_config) -> int:
    return vllm_config.model_config.get_vocab_size()


def _backends(config, tokenizer, vocab_size):
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    from pushmask.integrations.vllm import PushmaskBackend

    return (
        PushmaskBackend(config, tokenizer=tokenizer, vocab_size=vocab_size),
        XgrammarBackend(config, tokenizer=tokenizer, vocab_size=vocab_size),
    )


@pytest.fixture(scope="session")
def backends(vllm_config, tokenizer, vocab_size):
    """(pushmask, xgrammar) backends on the same real VllmConfig, flexible JSON whitespace."""
    return _backends(vllm_config, tokenizer, vocab_size)


@pytest.fixture(scope="session")
def compact_backends(compact_vllm_config, tokenizer, vocab_size):
    """(pushmask, xgrammar) backends with disable_any_whitespace=True (compact JSON)."""
    return _backends(compact_vllm_config, tokenizer, vocab_size)


def words(vocab_size: int) -> int:
    return math.ceil(vocab_size / 32)
