# Two entry points for a fresh machine (see README.md):
#   make serve   create .venv, install the server (no PyTorch), serve the bundled models in models/repo
#   make serve LANGUAGES=en,de,fr   (or MODELS="Helsinki-NLP/opus-mt-en-de argos:en-es") pull real models
#                into model-repo first (attnserve-export pull: the import extra, PyTorch), then serve them
#   make test    create .venv, install attnserve with the dev extra, run ruff and the whole test suite
#   make test-fast   the same, the unit tier only (a few minutes; tiers: tests/conftest.py)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# onnxruntime build of `make serve`: cpu (onnxruntime) or cuda (onnxruntime-gpu); one per venv.
RUNTIME ?= cpu
# The bundled models, exported from models/zoo and committed (python -m attnserve.export.zoo).
REPO := models/repo

# Models to pull before serving (docs/models.md): every Argos pair among LANGUAGES, and MODELS (Hub ids,
# argos:xx-yy), into PULL_REPO; ARGOS_INDEX: a mirror's index (URL, file or folder) instead of the public one.
LANGUAGES ?=
MODELS ?=
PULL_REPO ?= model-repo
ARGOS_INDEX ?=
PULLS := $(strip $(LANGUAGES)$(MODELS))

.PHONY: serve pull models test test-fast lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# perf_analyzer (tests/server/kserve, attnserve-bench perf) is a binary taken out of the
# tritonclient 2.50.0 wheel; without it those tests are skipped with the reason.
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m attnserve.benchmarks.perf_analyzer install || echo "make: perf_analyzer not installed (its tests will be skipped)"
	touch $@

# The server and client: no PyTorch; the model directories are committed ready to serve.
$(VENV)/.serve-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[$(RUNTIME)]'
	touch $@

# Re-exports models/repo after models/zoo changed (retraining); needs PyTorch (the export extra).
# Up-to-date models are skipped; tests/training/test_zoo_models.py checks the two agree.
models: | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[export]'
	$(BIN)/python -m attnserve.export.zoo --out $(REPO)

# Pulling needs PyTorch, transformers and huggingface_hub (the import extra); serving never does.
$(VENV)/.import-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[import]'
	touch $@

# A model that fails to pull is reported and skipped (exit 1); serve then serves the others.
# MODELS is a list (split on spaces); the others are one value each, quoted: "en, de", "my models".
pull: $(VENV)/.import-installed
	$(BIN)/attnserve-export pull $(MODELS) $(if $(LANGUAGES),--languages '$(LANGUAGES)') \
		--model-repo '$(PULL_REPO)' $(if $(ARGOS_INDEX),--argos-index '$(ARGOS_INDEX)')

# Settings: flags after ARGS=..., ATTNSERVE_* environment variables or --config (docs/cli.md).
ifeq ($(PULLS),)
serve: $(VENV)/.serve-installed
	$(BIN)/attnserve-server --model-repo $(REPO) $(ARGS)
else
serve: $(VENV)/.serve-installed
	$(MAKE) --no-print-directory pull || echo "make: a model failed to pull (see above); serving the others"
	$(BIN)/attnserve-server --model-repo '$(PULL_REPO)' $(ARGS)
endif

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

test-fast: lint
	$(BIN)/python -m pytest -m unit

format: $(VENV)/.dev-installed
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) model-repo build *.egg-info  # models/repo is committed: not removed
