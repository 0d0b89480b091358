# Two commands do everything on a fresh machine:
#   make run   — set up the virtualenv with what serving needs and start the gateway on
#                config/gateway.yaml
#   make test  — add the test tools to the virtualenv and run lint + the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config/gateway.yaml

.PHONY: run test lint bench setup setup-test setup-dev clean

# One virtualenv, three install levels: serving (the package), test (+ test extras) and dev
# (+ profilers). Each level's stamp is redone when pyproject.toml changes.
$(BIN)/.created:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	touch $@

$(BIN)/.serve: pyproject.toml $(BIN)/.created
	$(BIN)/pip install --quiet -e .
	touch $@

$(BIN)/.test: pyproject.toml $(BIN)/.created
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

$(BIN)/.dev: pyproject.toml $(BIN)/.created
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/.serve
setup-test: $(BIN)/.test
setup-dev: $(BIN)/.dev

run: setup
	$(BIN)/crossway serve --config $(CONFIG)

lint: setup-test
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

test: setup-test lint
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest -q
	$(BIN)/coverage combine -q
	$(BIN)/coverage report

bench: setup
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
