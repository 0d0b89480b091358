"""proxy/db: the database is created private, in WAL mode, migrated once, and reopened as is;
the repositories and the migrations run the same on SQLite and on PostgreSQL (a private
server, :mod:`tests.engines`), where instances starting together migrate once under an
advisory lock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from proxy.db import Database, DatabaseError
from proxy.db.schema import VERSION_TABLE
from proxy.governance.auth.keys_db import KeyRepository
from proxy.governance.auth.records import KeyRecord, TeamRecord
from proxy.governance.auth.teams_db import TeamRepository

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def key(key_id: str = "key_1", team: str | None = None, **fields) -> KeyRecord:
    values = dict(
        id=key_id,
        alias="a",
        key_prefix="sk-cw-abcd",
        team=team,
        user="u",
        models=["fast"],
        rpm=1,
        tpm=None,
        max_parallel=None,
        blocked=False,
        expires_at=None,
        metadata={"owner": "x"},
        created_at=NOW,
    )
    values.update(fields)
    return KeyRecord(**values)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_url")
    return f"sqlite:///{tmp_path}/data/crossway.db"


@pytest.fixture
async def database(url: str):
    db = Database(url)
    await db.open()
    yield db
    await db.close()


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_a_new_file_is_private_in_wal_mode_and_migrated(tmp_path: Path):
    db = Database(f"sqlite:///{tmp_path}/data/crossway.db")
    assert not (tmp_path / "data").exists()  # nothing happens before open()
    await db.open()
    try:
        path = tmp_path / "data" / "crossway.db"
        assert mode(path) == 0o600
        assert mode(tmp_path / "data") == 0o700
        async with db.connect() as connection:
            journal = (await connection.execute(sa.text("PRAGMA journal_mode"))).scalar()
            version = (
                await connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))
            ).scalar()
            await connection.execute(sa.text("SELECT id FROM keys"))  # the table exists
        assert journal == "wal"
        assert version == "0013"  # the newest migration
        for name in os.listdir(tmp_path / "data"):  # -wal, -shm, .lock: all private
            assert mode(tmp_path / "data" / name) == 0o600, name
    finally:
        await db.close()


async def test_reopening_and_concurrent_opens_migrate_once(database: Database, url: str):
    await KeyRepository(database).insert(key(), "h" * 64)
    others = [Database(url) for _ in range(3)]
    await asyncio.gather(*(other.open() for other in others), database.open())
    try:
        for other in others:
            assert await KeyRepository(other).get("key_1") == key()
    finally:
        for other in others:
            await other.close()


async def test_instances_starting_together_on_postgresql_migrate_once(postgres_url: str):
    # A fresh database, four instances opening it at once: one migrates under the advisory
    # lock, the others wait for it and find the schema at its newest version.
    instances = [Database(postgres_url) for _ in range(4)]
    await asyncio.gather(*(db.open() for db in instances))
    try:
        async with instances[0].connect() as connection:
            versions = (
                await connection.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))
            ).all()
        assert len(versions) == 1
        for db in instances:
            assert await KeyRepository(db).list() == []
    finally:
        for db in instances:
            await db.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://x/y", "unsupported kind 'mysql'"),
        ("sqlite://", "must be a file path"),
        ("not a url", "not a database URL"),
    ],
)
def test_unsupported_urls_are_refused(url: str, message: str):
    with pytest.raises(DatabaseError, match=message):
        Database(url)


def test_the_description_hides_a_password():
    db = Database("postgresql://crossway:s3cret@db:5432/crossway")
    assert "s3cret" not in db.description
    assert db.description.startswith("postgresql+asyncpg://crossway:***@db:5432")


async def test_a_file_that_cannot_be_created_is_a_clear_error(tmp_path: Path):
    (tmp_path / "file").write_text("")
    db = Database(f"sqlite:///{tmp_path}/file/crossway.db")
    with pytest.raises(DatabaseError, match="cannot create the database file"):
        await db.open()


def backup(source: Path, target: Path) -> None:
    """A consistent copy of the SQLite database ``source`` (as an operator's backup is)."""
    with (
        contextlib.closing(sqlite3.connect(source)) as original,
        contextlib.closing(sqlite3.connect(target)) as copy,
    ):
        original.backup(copy)


def key_ids(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        return [row[0] for row in connection.execute("SELECT id FROM keys ORDER BY id")]


async def test_a_deleted_file_fails_writes_until_it_is_restored(tmp_path: Path):
    # Connections opened earlier would write on into the deleted file (in WAL mode SQLite lets
    # them): every such write would be lost. Instead they fail, and nothing creates an empty
    # database in its place; once a file is back, writes go to it.
    path = tmp_path / "data" / "crossway.db"
    db = Database(f"sqlite:///{path}")
    await db.open()
    repository = KeyRepository(db)
    try:
        await repository.insert(key("key_1"), "a" * 64)
        backup(path, tmp_path / "backup.db")
        for name in ("crossway.db", "crossway.db-wal", "crossway.db-shm"):
            (path.parent / name).unlink(missing_ok=True)
        with pytest.raises(DatabaseError, match="is missing"):
            await repository.insert(key("key_2"), "b" * 64)
        assert not path.exists()
        (tmp_path / "backup.db").rename(path)  # restored
        await repository.insert(key("key_3"), "c" * 64)
    finally:
        await db.close()
    assert key_ids(path) == ["key_1", "key_3"]


async def test_a_transaction_the_file_was_replaced_under_is_reported_failed(tmp_path: Path):
    path = tmp_path / "data" / "crossway.db"
    db = Database(f"sqlite:///{path}")
    await db.open()
    repository = KeyRepository(db)
    try:
        await repository.insert(key("key_1"), "a" * 64)
        backup(path, tmp_path / "backup.db")

        async def read_while_replaced() -> None:
            async with db.connect() as connection:
                await connection.execute(sa.text("SELECT count(*) FROM keys"))
                os.replace(tmp_path / "backup.db", path)  # meanwhile

        with pytest.raises(DatabaseError, match="deleted or replaced during a transaction"):
            await read_while_replaced()
        await repository.insert(key("key_2"), "b" * 64)  # into the file now at the path
    finally:
        await db.close()
    assert key_ids(path) == ["key_1", "key_2"]


async def test_keys_round_trip_with_their_team(database: Database):
    keys, teams = KeyRepository(database), TeamRepository(database)
    team = TeamRecord(
        id="search",
        models=["fast"],
        rpm=5,
        tpm=None,
        max_parallel=2,
        metadata=None,
        created_at=NOW,
    )
    await teams.insert(team)
    await keys.insert(key("key_1", team="search", expires_at=NOW), "a" * 64)
    await keys.insert(key("key_2"), "b" * 64)
    found = await keys.by_hash("a" * 64)
    assert found == (key("key_1", team="search", expires_at=NOW), team)
    assert await keys.by_hash("b" * 64) == (key("key_2"), None)
    assert await keys.by_hash("c" * 64) is None
    assert [k.id for k in await keys.list()] == ["key_1", "key_2"]
    assert [k.id for k in await keys.list("search")] == ["key_1"]
    assert await keys.count_in_team("search") == 1
    updated = await keys.update("key_2", {"user": None, "blocked": True, "models": None})
    assert updated == (key("key_2", user=None, blocked=True, models=None), "b" * 64)
    assert await keys.update("nope", {"rpm": 2}) is None
    assert await keys.delete("key_2") == "b" * 64
    assert await keys.delete("key_2") is None
    assert await teams.update("search", {"rpm": None}) is not None
    assert (await teams.get("search")).rpm is None
    assert await teams.delete("search")
    assert not await teams.delete("search")


async def test_queries_are_parameterised(database: Database):
    keys = KeyRepository(database)
    await keys.insert(key(), "h" * 64)
    hostile = "' OR '1'='1"
    assert await keys.by_hash(hostile) is None
    assert await keys.get(hostile) is None
    assert await keys.list(hostile) == []
    assert await keys.get("key_1") is not None
