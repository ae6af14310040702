# Developer entry points. Every target creates the virtual environment it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test lint bench install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The demo needs the app, its API docs extra and the example project's requirements only.
$(VENV)/.demo-installed: pyproject.toml project/requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[docs]' -r project/requirements.txt
	touch $@

# Tests, lint and benchmarks need the dev extra too (which holds everything the demo needs).
$(VENV)/.installed: pyproject.toml project/requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]' -r project/requirements.txt
	touch $@ $(VENV)/.demo-installed

install: $(VENV)/.installed

## demo: set up, migrate, replay the bundled sample transcript through the agent as user "demo" (SQLite, compaction in process: no broker needed) and print how to log in
demo: $(VENV)/.demo-installed
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py demo --username demo

## test: run the test suite on DATABASE_URL (SQLite when unset)
test: install
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python manage.py makemigrations --check --dry-run

## bench: run the benchmarks on DATABASE_URL (PostgreSQL; see docs/benchmarks.md)
bench: install
	$(BIN)/python -m bench.run
