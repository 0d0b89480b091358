"""Pytest fixtures over :mod:`tests.engines` (loaded for every test by ``-p`` in pyproject).

- ``redis_server``: one private Redis for the session; ``redis_url`` empties it before the test
  that asks and gives its URL.
- ``postgres_server``: one private PostgreSQL for the session; ``postgres_url`` gives the test a
  database of its own (created empty; dropped after).
- ``own_redis``: a Redis for one test alone, which the test may kill and restart.
- ``own_postgres``: a PostgreSQL for one test alone (started), which the test may kill and
  restart on the same port and data directory.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator

import pytest

from tests.engines import PostgresServer, RedisServer

_databases = itertools.count()


def redis_command(port: int, *args: str) -> bytes:
    """Send one command to the Redis on ``port`` and return its raw reply line."""
    encoded = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encoded)
        return sock.recv(1 << 20)


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
