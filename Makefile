# prme-pg developer commands. `make check` is the one command that installs what
# the tests need on a fresh Debian/Ubuntu machine and runs lint and every test.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: check setup system-deps venv lint test demo bench clean

check: setup lint test

setup: system-deps venv

system-deps:
	scripts/install-system-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

venv: $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'

lint:
	$(BIN)/ruff check prme_pg tests bench scripts/seal-migration
	$(BIN)/ruff format --check prme_pg tests bench
	$(BIN)/mypy
	$(BIN)/sqlfluff lint sql/postgres

test:
	$(BIN)/pytest

demo: venv
	$(BIN)/prme-pg demo ./memories

bench: setup
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
