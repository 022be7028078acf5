# envbuild developer entry points. `make demo` and `make test` work on a fresh machine:
# both create .venv and install envbuild with its dev tools first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXAMPLE ?= images/torch-train

.PHONY: install check lint test test-fast demo golden e2e bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check envbuild tests benchmarks
	$(BIN)/ruff format --check envbuild tests benchmarks
	$(BIN)/mypy

# What CI runs (with `make e2e`): lint, types, the whole test suite without live network.
check: lint test

test: $(STAMP)
	$(BIN)/pytest -q -m "not network and not e2e and not gpu"

# The main job on the default example: resolve its targets, check its lock, render it (to a
# file: its NVIDIA_REQUIRE_CUDA alone is 2 KB), and say which recorded hosts it runs on.
demo: $(STAMP)
	$(BIN)/envbuild resolve --framework torch --gpu H100 --gpu L4 --driver 570.124.06
	$(BIN)/envbuild lock --check $(EXAMPLE)
	$(BIN)/envbuild render $(EXAMPLE) -o build/demo/Dockerfile
	$(BIN)/envbuild validate --hosts tests/fixtures/hosts/fleet-doctor.jsonl --lock $(EXAMPLE)

# Regenerate the byte-exact golden Dockerfiles; review the diff.
golden: $(STAMP)
	$(BIN)/python -m tests.golden.regenerate

# The real build -> smoke -> tag path on the local engine (see tests/e2e.sh).
e2e: $(STAMP)
	bash tests/e2e.sh

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
