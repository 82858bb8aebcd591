# The two commands of the README's Quickstart, plus the helpers they stand on.
#   make demo  — set up .venv and run the main job
#   make test  — ruff (lint + format check), mypy and the whole pytest suite
#   make dist  — the wheel and sdist in dist/ (pip install dist/flodl-*.whl anywhere)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is pinned by constraints.txt so pip never pulls a multi-GB CUDA build on a CPU machine.
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: demo test lint format bench dist clean

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

test: lint
	$(PY) -m pytest

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
