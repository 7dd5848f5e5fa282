# One entry point for set-up, the main job and the tests. Everything lives in ./.venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[tf,dev]'
	touch $(STAMP)

demo: $(STAMP)   ## install, then run the main job on the bundled samples
	MLFLOW_DISABLE_TELEMETRY=true TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/jobcast demo

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) lint   ## install, then run the whole test suite
	MLFLOW_DISABLE_TELEMETRY=true TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m pytest -q --durations=15 --nbmake tests notebooks

bench: $(STAMP)   ## performance and accuracy benchmarks (results go to docs/)
	$(BIN)/python benchmarks/ingest_throughput.py
	$(BIN)/python benchmarks/e2e_accuracy.py

clean:
	rm -rf $(VENV) demo-out .pytest_cache .ruff_cache
