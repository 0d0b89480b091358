# Two commands do everything on a fresh machine:
#   make run   — set up the virtualenv with what serving needs and start the gateway on
#                config/gateway.yaml
#   make test  — add the test tools to the virtualenv and run lint + the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config/gateway.yaml

.PHONY: run test lint bench setup setup-test setup-dev setup-litellm engines browser clean

# One virtualenv, three install levels: serving (the package), test (+ test extras) and dev
# (+ profilers). Each level's stamp is redone when pyproject.toml changes. Packages are installed
# with uv (pinned, installed from PyPI into the virtualenv itself), several times faster than
# pip on a clean clone.
UV_VERSION := 0.13.9
INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python

$(BIN)/.created:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet 'uv==$(UV_VERSION)'
	touch $@

$(BIN)/.serve: pyproject.toml $(BIN)/.created
	$(INSTALL) -e .
	touch $@

$(BIN)/.test: pyproject.toml $(BIN)/.created
	$(INSTALL) -e '.[test]'
	touch $@

$(BIN)/.dev: pyproject.toml $(BIN)/.created
	$(INSTALL) -e '.[dev]'
	touch $@

setup: $(BIN)/.serve
setup-test: $(BIN)/.test
setup-dev: $(BIN)/.dev

run: setup
	$(BIN)/crossway serve --config $(CONFIG)

# The engines the tests start privately (tests/engines): Debian's redis-server and postgresql,
# installed when missing (as root, or through sudo).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
engines:
	@command -v redis-server >/dev/null 2>&1 && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	  || { $(SUDO) apt-get update -qq && \
	       $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	       redis-server postgresql >/dev/null; }

# The browser the UI tests drive (tests/e2e/browser.py): Debian's chromium, installed when
# missing. Playwright's own browser download is not used.
browser:
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] \
	  || { $(SUDO) apt-get update -qq && \
	       $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	       chromium >/dev/null; }

lint: setup-test
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# The suite runs on up to four pytest-xdist workers, one test file per worker at a time (the
# e2e files share their gateways between tests); each worker starts its own engines.
test: setup-test engines browser lint
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest -q --numprocesses auto --maxprocesses 4 --dist loadfile
	$(BIN)/coverage combine -q
	$(BIN)/coverage report

bench: setup
	$(BIN)/python -m bench

# Opt-in, for `python -m bench --targets passthrough,gateway,litellm` only: LiteLLM's proxy in a
# virtualenv of its own, never a dependency of the project. Pinned (1.82.7 and 1.82.8 were
# compromised releases on PyPI: never those).
LITELLM_VENV    ?= .venv-litellm
LITELLM_VERSION ?= 1.80.0
$(LITELLM_VENV)/bin/.litellm-$(LITELLM_VERSION):
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/pip install --quiet --upgrade pip
	$(LITELLM_VENV)/bin/pip install --quiet 'litellm[proxy]==$(LITELLM_VERSION)'
	touch $@

setup-litellm: $(LITELLM_VENV)/bin/.litellm-$(LITELLM_VERSION)

clean:
	rm -rf $(VENV) $(LITELLM_VENV) .pytest_cache .ruff_cache
