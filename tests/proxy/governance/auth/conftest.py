"""A real SQLite database, a config, and an authenticator and registry over them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.core.metrics import Metrics
from proxy.db import Database
from proxy.governance.auth.authenticator import Authenticator
from proxy.governance.auth.config import AuthConfig
from proxy.governance.auth.registry import Registry
from proxy.runtime.config import parse_config
from tests.faults import FakeClock

MASTER = "master-" + "m" * 32
DECLARED = "declared-" + "d" * 32

AUTH = f"""
auth:
  master_key: {MASTER}
  cache_ttl: 5
  teams:
    search: {{models: [fast, default], rpm: 100, max_parallel: 3}}
  keys:
    - {{key: {DECLARED}, alias: ci, team: search, models: [fast], rpm: 10}}
"""


def auth_config(text: str = AUTH) -> AuthConfig:
    return parse_config(text, {}).auth


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(f"sqlite:///{tmp_path}/crossway.db")
    await db.open()
    yield db
    await db.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def metrics() -> Metrics:
    return Metrics()


@pytest.fixture
def authenticator(database: Database, metrics: Metrics, clock: FakeClock) -> Authenticator:
    return Authenticator(auth_config(), database, metrics, clock=clock, wall=lambda: 2e9)


@pytest.fixture
def registry(database: Database, authenticator: Authenticator) -> Registry:
    return Registry(database, authenticator)
