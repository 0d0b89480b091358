"""The durable store: one SQL database per process, SQLite by default, PostgreSQL for several.

:class:`Database` is created once per process from ``database.url`` and kept across config
reloads (like the state store). Nothing is opened until :meth:`Database.open` — a gateway that
uses no key, team or ledger never creates a file. Opening creates and migrates the schema
(Alembic, ``proxy/db/migrations``) under a lock, so that workers or instances starting together
migrate once: a file lock beside a SQLite file, an advisory lock on PostgreSQL.

SQLite files are created with mode 0600 (SQLite gives its ``-wal`` and ``-shm`` files the same
mode), in WAL mode so that readers never wait for the writer, with a 5 s busy timeout so that
the CLI writing beside a running gateway waits instead of failing. A SQLite file deleted or
replaced under the running process is noticed (connections opened earlier would go on writing to
the old file, and what they wrote would be lost): while the path has no file, :meth:`Database.
connect` fails instead of creating an empty one; once a file is there again, the connections to
the old one are closed and new ones open it; a transaction during which the file changed is
reported failed. SQL is SQLAlchemy Core with bound parameters only; the repositories (``keys``,
``teams``, …) each own one table group. On PostgreSQL, whose text cannot hold a NUL character,
every NUL in a bound string is stored (and looked up) as U+FFFD, so no client's string fails a
statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}
_SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=5000",
    "PRAGMA foreign_keys=ON",
)
_MIGRATION_LOCK_ID = 0x63726F7373776179  # "crossway": the PostgreSQL advisory lock


class DatabaseError(Exception):
    """The database cannot be used: a bad URL, a file that cannot be created, a failed
    migration. The message never includes the URL's password."""


class Database:
    """The process's SQL database (module docstring). Not usable before :meth:`open`."""

    def __init__(self, url: str) -> None:
        """Raises :class:`DatabaseError` for a URL of no supported kind (``sqlite:///path``,
        ``postgresql://…``)."""
        try:
            parsed = make_url(url)
        except sa.exc.ArgumentError:
            raise DatabaseError("database.url is not a database URL") from None
        driver = _DRIVERS.get(parsed.drivername.split("+")[0])
        if driver is None:
            raise DatabaseError(
                f"database.url: unsupported kind {parsed.drivername!r} "
                "(use sqlite:///path or postgresql://...)"
            )
        self._url: URL = parsed.set(drivername=driver)
        self._path: Path | None = None
        if driver.startswith("sqlite"):
            if not parsed.database or parsed.database == ":memory:":
                raise DatabaseError("database.url: a SQLite database must be a file path")
            self._path = Path(parsed.database)
        self._engine: AsyncEngine | None = None
        self._opening = asyncio.Lock()
        self._file: tuple[int, int] | None = None  # the SQLite file the pool has open

    @property
    def description(self) -> str:
        """The URL without its password, for logs and ``check``."""
        return self._url.render_as_string(hide_password=True)

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for a server database."""
        return self._path

    @property
    def engine(self) -> AsyncEngine:
        """The engine; raises :class:`DatabaseError` before :meth:`open`."""
        if self._engine is None:
            raise DatabaseError("the database is not open")
        return self._engine

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` has connected (and :meth:`close` has not run since)."""
        return self._engine is not None

    async def open(self) -> None:
        """Create the database if needed, migrate it to the newest schema, and keep a
        connection pool (idempotent, safe to call concurrently). Raises :class:`DatabaseError`."""
        if self._engine is not None:
            return
        async with self._opening:
            if self._engine is not None:
                return
            engine = self._create_engine()
            try:
                await self._migrate(engine)
            except DatabaseError:
                await engine.dispose()
                raise
            except Exception as exc:
                await engine.dispose()
                raise DatabaseError(
                    f"cannot open the database {self.description}: {type(exc).__name__}: {exc}"
                ) from None
            self._engine = engine
            self._file = _identity(self._path)

    async def close(self) -> None:
        """Close every pooled connection (idempotent)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            await engine.dispose()

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction, committed when the block ends without an error.

        For SQLite, raises :class:`DatabaseError` when the file is missing (creating none), and
        after the block when the file was deleted or replaced while it ran (what it wrote may
        be in the old file only); connections to a file no longer at the path are closed first.
        """
        engine = self.engine
        if self._path is None:
            async with engine.begin() as connection:
                yield connection
            return
        await self._follow_file(engine)
        async with engine.begin() as connection:
            yield connection
        if _identity(self._path) != self._file:
            raise DatabaseError(
                f"the database file {self._path} was deleted or replaced during a transaction"
            )

    async def _follow_file(self, engine: AsyncEngine) -> None:
        """Close the pool's connections when the file at the path is not the one they have
        open; raise :class:`DatabaseError` while there is none."""
        current = _identity(self._path)
        if current != self._file:
            self._file = current
            await engine.dispose()
        if current is None:
            raise DatabaseError(f"the database file {self._path} is missing")

    def _create_engine(self) -> AsyncEngine:
        if self._path is None:
            engine = create_async_engine(self._url, pool_pre_ping=True)
            sa.event.listen(engine.sync_engine, "before_cursor_execute", _bind, retval=True)
            return engine
        _create_private_file(self._path)
        engine = create_async_engine(self._url)

        @sa.event.listens_for(engine.sync_engine, "connect")
        def _pragmas(dbapi_connection: Any, record: Any) -> None:
            cursor = dbapi_connection.cursor()
            for pragma in _SQLITE_PRAGMAS:
                cursor.execute(pragma)
            cursor.close()

        return engine

    async def _migrate(self, engine: AsyncEngine) -> None:
        async with self._file_lock(), engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                await connection.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK_ID}
                )
            await connection.run_sync(_upgrade)

    @contextlib.asynccontextmanager
    async def _file_lock(self) -> AsyncIterator[None]:
        """An exclusive lock on ``<file>.lock`` while a SQLite file is migrated (waited for
        in a thread: the event loop keeps running)."""
        if self._path is None:
            yield
            return
        descriptor = os.open(f"{self._path}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            await asyncio.to_thread(fcntl.flock, descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # releases the lock


def _identity(path: Path | None) -> tuple[int, int] | None:
    """The device and inode of the file at ``path``; None when there is none (or it cannot be
    looked at)."""
    if path is None:
        return None
    try:
        status = os.stat(path)
    except OSError:  # gone, or its directory is
        return None
    return status.st_dev, status.st_ino


def _bind(
    connection: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
) -> tuple[str, Any]:
    """PostgreSQL's parameters with every NUL character replaced (U+FFFD): its text cannot
    hold one, and a client's string may carry one (an end user, a model name, a filter), which
    would fail the statement — a ledger batch with the record of every other request in it."""
    return statement, _without_nul(parameters)


def _without_nul(value: Any) -> Any:
    """``value`` (a parameter, or a tuple, list or dict of them) with NUL in its strings
    replaced; the same object when it has none."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, (list, tuple)):
        cleaned = [_without_nul(item) for item in value]
        if all(new is old for new, old in zip(cleaned, value, strict=True)):
            return value
        return type(value)(cleaned)
    if isinstance(value, dict):
        return {name: _without_nul(item) for name, item in value.items()}
    return value


def _create_private_file(path: Path) -> None:
    """Create ``path`` (and its directory, 0700) with mode 0600 unless it exists."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except FileExistsError:
        if path.is_file():
            return
        raise DatabaseError(f"cannot create the database file {path}: not a directory") from None
    except OSError as exc:
        raise DatabaseError(f"cannot create the database file {path}: {exc.strerror}") from None
    os.close(descriptor)


def _upgrade(connection: sa.Connection) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
