# prme-pg developer commands. `make check` is the one command that installs what
# the tests need on a fresh Debian/Ubuntu machine and runs lint and every test.
# The virtual environment is installed once per pyproject.toml: a stamp file in it
# records what was installed, so a second `make demo` or `make check` installs nothing.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# PG_MAJOR=16 make check: another PostgreSQL major for the system packages and the test
# harness (environment variables reach the recipes as they are; see README.md).

.PHONY: check setup system-deps venv lint test pg-prove demo bench clean

check: setup lint test

setup: system-deps venv

system-deps:
	scripts/install-system-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The package alone (what `make demo` needs), and the package with its dev tools.
$(VENV)/.installed-package: pyproject.toml | $(BIN)/python
	@echo "installing prme-pg and its dependencies (psycopg, duckdb, rich, ...) into $(VENV), once:"
	$(BIN)/python -m pip install --progress-bar on -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed-package

venv: $(VENV)/.installed-dev

lint:
	$(BIN)/ruff check prme_pg tests bench scripts/seal-migration scripts/new-migration scripts/pg-prove scripts/generate-proxy
	$(BIN)/ruff format --check prme_pg tests bench scripts/seal-migration scripts/new-migration scripts/pg-prove scripts/generate-proxy
	$(BIN)/mypy
	$(BIN)/sqlfluff lint sql/postgres

test:
	$(BIN)/pytest

# The pgTAP files under pg_prove, on a throwaway database with every migration applied.
pg-prove: setup
	$(BIN)/python scripts/pg-prove

demo: $(VENV)/.installed-package
	$(BIN)/prme-pg demo ./memories

bench: setup
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
