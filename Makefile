# Two entry points on a fresh clone: `make demo` (the main job) and `make test` (the suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint format bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# not --no-compile: where PYTHONDONTWRITEBYTECODE is set (this machine), every process
	# (each test worker, CLI subprocess and Ray worker) would then compile its imports again
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

# the training job (< 10 min on 2 cores); --resume makes a rerun reuse a finished run in runs/demo
demo: $(STAMP)
	$(BIN)/hetjax train --model bert-base --platform edge --out runs/demo --resume

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -q -n 2 --durations=25
	# the tests marked x64 (together they call every public function) once more in float64
	JAX_ENABLE_X64=1 $(BIN)/pytest -q -n 2 -m x64

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_cost.py
	$(BIN)/python benchmarks/bench_exact.py
	$(BIN)/python benchmarks/bench_exact_many.py
	$(BIN)/python benchmarks/bench_env.py
	$(BIN)/python benchmarks/bench_train.py
	$(BIN)/python benchmarks/bench_cli_cache.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
