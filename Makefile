VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: venv install test test-fast clean

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

venv: $(PY)

# torch first, from the local CPU wheel, so nothing pulls the CUDA build.
install: venv
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,hf]'

test: install
	$(PY) -m pytest -q -n 2 tests

test-fast:
	$(PY) -m pytest -q -x tests -m "not slow"

clean:
	rm -rf $(VENV) build *.egg-info
