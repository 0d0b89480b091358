"""Pytest fixtures over :mod:`tests.engines` (loaded for every test by ``-p`` in pyproject).

- ``redis_server``: one private Redis for the session; ``redis_url`` empties it before the test
  that asks and gives its URL.
- ``postgres_server``: one private PostgreSQL for the session; ``postgres_url`` gives the test a
  database of its own (created empty; dropped after).
- ``own_redis``: a Redis for one test alone, which the test may kill and restart.
- ``own_postgres``: a PostgreSQL for one test alone (started), which the test may kill and
  restart on the same port and data directory.
- ``redis_cluster``: a Redis Cluster of three nodes for one test alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.engines import PostgresServer, RedisCluster, RedisServer, redis_command

_databases = itertools.count()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    assert redis_command(redis_server.port, "FLUSHALL").startswith(b"+OK")
    return redis_server.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.stop(remove=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"test_{next(_databases)}"
    postgres_server.sql(f"CREATE DATABASE {name}", database="postgres")
    yield postgres_server.url.rsplit("/", 1)[0] + "/" + name
    postgres_server.sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", database="postgres")


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.stop(remove=True)


@pytest.fixture
def redis_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster().start()
    yield cluster
    cluster.stop()
