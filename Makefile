# Two commands do everything on a fresh machine:
#   make run   — install what serving needs, exactly as uv.lock pins it, and start the gateway on
#                config/gateway.yaml
#   make test  — install the test tools too, exactly as uv.lock pins them, and run lint + the
#                whole test suite
# Nothing resolves at install time: `uv sync --locked` installs the lock's versions (checked
# against the lock's hashes) and fails when uv.lock and pyproject.toml disagree. `make lock`
# re-resolves on purpose; `make test-latest` tries the newest releases without touching the lock.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config/gateway.yaml

.PHONY: run test lint bench setup setup-test setup-dev setup-litellm engines browser clean \
        lock test-latest sbom audit compliance

# uv, the one installer, lives in a virtualenv of its own (so that syncing the project's
# virtualenv to the lock, which removes whatever the lock does not name, never removes uv), and
# is installed from requirements/uv.txt: one version, checked against its published hashes.
UV_VENV := .uv
UV      := $(UV_VENV)/bin/uv
export UV_PROJECT_ENVIRONMENT := $(VENV)
export UV_PYTHON_DOWNLOADS := never
SYNC := $(UV) sync --locked --python $(PYTHON)
CHECK_LOCK := $(UV) lock --locked --quiet --python $(PYTHON) || { echo "uv.lock does not match \
pyproject.toml: run 'make lock' to re-resolve on purpose, review and commit uv.lock" >&2; exit 1; }

$(UV): requirements/uv.txt
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install --quiet --require-hashes --no-deps -r requirements/uv.txt
	touch $@

# Three install levels of one virtualenv: serving (the package), test (+ the test extra) and
# dev (+ profilers). `make test` syncs exactly (anything the lock does not name is removed);
# `make run` and `make setup-dev` add to what is there.
setup: $(UV)
	$(CHECK_LOCK)
	$(SYNC) --inexact

setup-test: $(UV)
	$(CHECK_LOCK)
	$(SYNC) --extra test

setup-dev: $(UV)
	$(CHECK_LOCK)
	$(SYNC) --inexact --extra test --extra dev

run: setup
	$(BIN)/crossway serve --config $(CONFIG)

# Re-resolve every dependency to the newest releases pyproject.toml's ranges allow (an upgrade,
# on purpose): review the diff of uv.lock, run `make test`, commit both.
lock: $(UV)
	$(UV) lock --upgrade --python $(PYTHON)

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

# Style, the layering of ARCHITECTURE.md (import-linter, contracts in pyproject.toml) and types
# (mypy: strict on core, dialects, providers and governance).
lint: setup-test
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

# The suite runs on up to four pytest-xdist workers, one test file per worker at a time (the
# e2e files share their gateways between tests); each worker starts its own engines.
PYTEST_ARGS := -q --numprocesses auto --maxprocesses 4 --dist loadfile
test: setup-test engines browser lint
	$(BIN)/coverage erase
	$(BIN)/coverage run -m pytest $(PYTEST_ARGS)
	$(BIN)/coverage combine -q
	$(BIN)/coverage report

# The suite against the newest releases pyproject.toml's ranges allow, resolved now into a
# virtualenv of its own; uv.lock and $(VENV) are not touched. The way to learn early that a new
# openai, anthropic or aiohttp release breaks something. The one test it leaves out is the one
# that checks the virtualenv against uv.lock.
LATEST_VENV ?= .venv-latest
test-latest: $(UV) engines browser
	rm -rf $(LATEST_VENV)
	$(UV) venv --quiet --python $(PYTHON) $(LATEST_VENV)
	$(UV) pip install --quiet --python $(LATEST_VENV)/bin/python --upgrade -e '.[test]'
	$(UV) pip list --python $(LATEST_VENV)/bin/python | grep -E -i '^(openai|anthropic|aiohttp|msgspec|httpx2?|openai-agents|langchain-openai|structlog|prometheus-client) '
	$(LATEST_VENV)/bin/python -m pytest $(PYTEST_ARGS) \
	  --deselect tests/test_lock.py::test_the_virtualenv_holds_exactly_the_locked_versions

# A CycloneDX 1.5 software bill of materials of everything uv.lock installs (serving, test and
# dev), written offline from the lock.
SBOM ?= crossway.cdx.json
sbom: $(UV)
	$(UV) export --locked --quiet --all-extras --format cyclonedx1.5 --output-file $(SBOM) > /dev/null
	@echo "wrote $(SBOM)"

# Every locked package checked against the OSV vulnerability database (uv's own audit). It needs
# that service on the network, so it is a command of its own, not a step of `make test`.
audit: $(UV)
	$(UV) audit --locked

# The Open Responses compliance suite's HTTP checks against a gateway on the mock provider
# (tools/open_responses.py: the suite's pinned commit cloned with git, its run-time dependencies
# installed with npm, both under .openresponses/). It needs GitHub and the npm registry the first
# time, so it is a command of its own, not a step of `make test`. SUITE=<checkout> runs a checkout
# of your own (moved to the pinned commit); UNPINNED=1 runs SUITE as it is, without git (its
# result is not tied to the pinned commit); ARGS="-v" is passed to the suite.
SUITE ?= .openresponses/suite
compliance: setup
	$(BIN)/python tools/open_responses.py --suite $(SUITE) $(if $(UNPINNED),--unpinned) -- $(ARGS)

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
	rm -rf $(VENV) $(UV_VENV) $(LATEST_VENV) $(LITELLM_VENV) .pytest_cache .ruff_cache
