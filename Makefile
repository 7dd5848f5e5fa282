# One entry point for set-up, the main job and the tests. Everything lives in ./.venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# PyTorch's CPU build (200 MB instead of several GB of CUDA libraries): a local wheel where the
# package index offers one, else PyTorch's CPU index.
TORCH_CPU ?= torch==2.13.0+cpu

.PHONY: demo test lint typecheck bench clean system-deps

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q '$(TORCH_CPU)' \
	  || $(BIN)/python -m pip install -q torch --index-url https://download.pytorch.org/whl/cpu
	$(BIN)/python -m pip install -q -e '.[tf,torch,ray,history,dev]'
	touch $(STAMP)

demo: $(STAMP)   ## install, then run the main job on the bundled samples
	MLFLOW_DISABLE_TELEMETRY=true TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/jobcast demo

lint: $(STAMP)
	$(BIN)/ruff check .

# mypy on the rooms pyproject.toml's [tool.mypy] lists: 0 errors.
typecheck: $(STAMP)
	$(BIN)/mypy

# The tests start a real Prometheus and PostgreSQL and render the report in a real Chromium
# (Debian packages, run on 127.0.0.1 only). Installed here when missing; the tests also try.
system-deps:
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null \
	    && command -v chromium >/dev/null \
	    && (command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1); \
	then :; \
	elif command -v apt-get >/dev/null; then \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    prometheus chromium postgresql) >/dev/null \
	  || echo "warning: could not install prometheus/chromium/postgresql: their tests will skip"; \
	fi

test: $(STAMP) lint typecheck system-deps   ## install, then run the whole test suite
	MLFLOW_DISABLE_TELEMETRY=true TF_CPP_MIN_LOG_LEVEL=2 $(BIN)/python -m pytest -q --durations=20 --nbmake tests notebooks

bench: $(STAMP)   ## performance and accuracy benchmarks (results go to docs/)
	$(BIN)/python benchmarks/ingest_throughput.py
	$(BIN)/python benchmarks/e2e_wallclock.py

clean:
	rm -rf $(VENV) demo-out .pytest_cache .ruff_cache
