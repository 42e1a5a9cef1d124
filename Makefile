# Two entry points for a fresh machine (see README.md):
#   make serve   create .venv, install attnserve, build the default model repository, start the server
#   make test    create .venv, install attnserve with the dev extra, run ruff and the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: serve models test lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# perf_analyzer (tests/server/kserve, attnserve-bench perf) is a binary taken out of the
# tritonclient 2.50.0 wheel; without it those tests are skipped with the reason.
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m attnserve.benchmarks.perf_analyzer install || echo "make: perf_analyzer not installed (its tests will be skipped)"
	touch $@

# The server itself needs no torch; the export extra (torch CPU) is needed once, to turn the
# committed weights in models/zoo into ONNX model directories.
$(VENV)/.serve-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[export]'
	touch $@

# Builds model-repo/ (git-ignored) from the committed weights; up-to-date models are skipped.
models: $(VENV)/.serve-installed
	$(BIN)/python -m attnserve.export.zoo --out model-repo

# Settings: flags after ARGS=..., ATTNSERVE_* environment variables or --config (see README).
serve: models
	$(BIN)/attnserve-server --model-repo model-repo $(ARGS)

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

format: $(VENV)/.dev-installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) model-repo build *.egg-info
