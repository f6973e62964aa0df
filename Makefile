# Two entry points on a fresh clone: `make demo` (the main job) and `make test` (the suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/hetjax evaluate --model bert-base --platform edge --placement by-class --batch 8

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -q -n 2

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_cost.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
