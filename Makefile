# Quick start: `make demo` runs the nightly CRM-to-List sync against the local emulator;
# `make test` runs ruff, mypy and the test suite. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck unit venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

test: lint typecheck unit

# The nightly CRM-to-List DAG, three nights in a row against a local emulator (examples/demo.py).
.PHONY: demo
demo: $(STAMP)
	$(BIN)/python examples/demo.py

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache
