# Two commands do everything on a fresh machine:
#   make run   — set up the virtualenv and start the gateway on config/gateway.yaml
#   make test  — set up the virtualenv and run lint + the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config/gateway.yaml

.PHONY: run test lint bench setup clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/.installed

run: setup
	$(BIN)/crossway serve --config $(CONFIG)

lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

test: setup lint
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
