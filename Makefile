# The two commands of the README's Quickstart, plus the helpers they stand on.
#   make demo  — set up .venv and run the main job
#   make test  — ruff (lint + format check), mypy and the whole pytest suite
#   make dist  — the wheel and sdist in dist/ (pip install dist/flodl-*.whl anywhere)
#   make test-torch TORCH=2.4.0 [ARGS=tests/graph] — the suite under another torch release
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned by constraints.txt so pip never pulls a multi-GB CUDA build on a CPU machine.
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: demo test test-torch lint format bench dist clean

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) torch==2.13.0 numpy
	$(PIP_INSTALL) -e '.[dev,hf]'
	touch $@

demo: $(VENV)/.installed
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) examples/demo.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The suite runs on TEST_WORKERS processes (pytest-xdist); the slowest tests are listed at the end.
TEST_WORKERS ?= 2

test: lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The suite under another torch release, in a venv of its own (.venv-torch-X.Y.Z), for a release
# that CI (torch 2.13) does not run: flodl supports torch>=2.4. PyPI's Linux wheels are CUDA builds
# (3-5 GB with their libraries) that run on the CPU. transformers 5 needs torch 2.6 or later, so
# older torch gets transformers 4 (see docs/development.md for the parity cells it fails).
TORCH_VENV := .venv-torch-$(TORCH)
test-torch:
	@test -n "$(TORCH)" || { echo "usage: make test-torch TORCH=2.4.0 [ARGS=tests/graph]" >&2; exit 2; }
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(PYTHON) -c 'import sys; v = sys.argv[1]; old = tuple(map(int, v.split(".")[:2])) < (2, 6); \
	print(f"torch=={v}" + ("\ntransformers<5" if old else ""))' $(TORCH) > $(TORCH_VENV)/constraints.txt
	$(TORCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  -c $(TORCH_VENV)/constraints.txt torch==$(TORCH) -e '.[dev,hf]'
	PATH="$(CURDIR)/$(TORCH_VENV)/bin:$$PATH" $(TORCH_VENV)/bin/python -m pytest $(ARGS)

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(VENV)/.installed
	$(PY) benchmarks/run.py

dist: $(VENV)/.installed
	rm -rf dist
	$(PY) -m build --no-isolation --outdir dist .
	@ls dist

clean:
	rm -rf $(VENV) build dist .pytest_cache .ruff_cache .mypy_cache demo-output
