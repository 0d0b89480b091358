"""Retention: the sweep deletes the batches that ended more than ``retention_days`` ago with their
lines and files, and the files whose ``expires_at`` passed — and nothing else (a running batch, a
recent one, an upload without ``expires_after``); sweepers running at once do not fail each
other (on SQLite and PostgreSQL); with ``retention_days`` None batches are kept, expired files
still go."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import structlog

from proxy.batches.batches_db import BatchStore, Result
from proxy.batches.contents import DatabaseContents
from proxy.batches.files import FileStore
from proxy.batches.objects import Batch, RequestCounts, Status
from proxy.batches.retention import Retention
from proxy.core.canonical import Principal
from proxy.core.errors import NotFound
from proxy.db import Database
from proxy.db.schema import batch_file_parts, batch_files, batch_lines

OWNER = Principal(key_id="key-1")
DAY = 24 * 3600
START = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = float(START)

    def __call__(self) -> float:
        return self.now


class Parts:
    def __init__(self, database: Database) -> None:
        self.clock = Clock()
        self.database = database
        self.batches = BatchStore(database, self.clock)
        self.files = FileStore(database, DatabaseContents(database), self.clock)

    def retention(self, days: float | None = 30) -> Retention:
        return Retention(
            self.batches,
            self.files,
            self.database,
            retention_days=days,
            look_every=0.05,
            logger=structlog.get_logger,
            clock=self.clock,
        )

    async def file(self, expires_after: int | None = None, purpose: str = "batch") -> str:
        async def pieces() -> AsyncIterator[bytes]:
            yield b'{"line": 1}\n'

        made = await self.files.create(OWNER, "f.jsonl", purpose, pieces(), 100, expires_after)
        return made.id

    async def batch(self, batch_id: str, status: Status, *, files: bool = True) -> Batch:
        """A batch of two lines created now, then ``status`` (an ended one: now, with an
        output and an error file expiring 30 days later when ``files``)."""
        now = int(self.clock())
        batch = Batch(
            id=batch_id,
            endpoint="/v1/chat/completions",
            input_file_id="file-x",
            completion_window="24h",
            status="validating",
            created_at=now,
            expires_at=now + DAY,
            request_counts=RequestCounts(total=2),
        )
        await self.batches.create(batch, OWNER, [("a", b"{}"), ("b", b"{}")])
        if status == "in_progress":
            batch.status = status
        else:
            await self.batches.record(batch_id, [Result(0, b"ok", False), Result(1, b"no", True)])
            batch.status, batch.completed_at = status, now
            if files:
                batch.output_file_id = await self.file(30 * DAY, "batch_output")
                batch.error_file_id = await self.file(30 * DAY, "batch_output")
        await self.batches.save(batch, lease=None)
        return batch

    async def file_rows(self, table: sa.Table, column: sa.Column[str], ids: list[str]) -> int:
        async with self.database.connect() as connection:
            query = sa.select(sa.func.count()).select_from(table).where(column.in_(ids))
            return int((await connection.execute(query)).scalar_one())


async def no_ended_batch(parts: Parts) -> None:
    """Wait until no ended batch is left."""
    async with asyncio.timeout(10):
        while True:
            if not await parts.batches.ended_before(0, 10):
                return
            await asyncio.sleep(0.02)


@pytest.fixture(params=["sqlite"])
async def parts(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Parts]:
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path}/retention.db"
    database = Database(url)
    try:
        yield Parts(database)
    finally:
        await database.close()


@pytest.mark.parametrize("parts", ["sqlite", "postgresql"], indirect=True)
async def test_the_sweep_deletes_what_is_old_and_nothing_else(parts: Parts) -> None:
    kept_input = await parts.file()
    brief_input = await parts.file(expires_after=3600)
    old = await parts.batch("batch_old", "completed")
    running = await parts.batch("batch_running", "in_progress")
    parts.clock.now += 10 * DAY
    recent = await parts.batch("batch_recent", "expired")
    assert await parts.retention().sweep() == (0, 1)  # only the brief upload, long expired
    parts.clock.now = START + 30 * DAY + 1
    swept = await asyncio.gather(parts.retention().sweep(), parts.retention().sweep())
    assert sum(batches for batches, _ in swept) >= 1  # sweepers at once: neither fails

    for batch_id in ("batch_old",):
        with pytest.raises(NotFound):
            await parts.batches.get(batch_id, OWNER)
    assert await parts.batches.outcomes("batch_old", -1, 10) == []
    old_files = [old.output_file_id or "", old.error_file_id or ""]
    assert await parts.file_rows(batch_files, batch_files.c.id, [*old_files, brief_input]) == 0
    assert await parts.file_rows(batch_file_parts, batch_file_parts.c.file_id, old_files) == 0

    assert (await parts.batches.get(running.id, OWNER)).status == "in_progress"
    assert (await parts.batches.get(recent.id, OWNER)).status == "expired"
    for batch_id in (running.id, recent.id):
        assert len(await parts.batches.outcomes(batch_id, -1, 10)) == 2
    for file_id in (kept_input, recent.output_file_id, recent.error_file_id):
        assert file_id is not None
        assert (await parts.files.get(file_id, OWNER)).id == file_id
        assert b"".join([p async for p in await parts.files.read(file_id, OWNER)])
    assert await parts.retention().sweep() == (0, 0)

    parts.clock.now = START + 40 * DAY + 1  # the recent batch's turn
    assert await parts.retention().sweep() == (1, 0)
    with pytest.raises(NotFound):
        await parts.batches.get(recent.id, OWNER)
    assert (await parts.batches.get(running.id, OWNER)).status == "in_progress"
    assert (await parts.files.get(kept_input, OWNER)).id == kept_input


async def test_without_retention_days_batches_stay_and_expired_files_go(parts: Parts) -> None:
    batch = await parts.batch("batch_1", "completed", files=False)
    brief = await parts.file(expires_after=3600)
    parts.clock.now += 400 * DAY
    assert await parts.retention(days=None).sweep() == (0, 1)
    assert (await parts.batches.get(batch.id, OWNER)).status == "completed"
    with pytest.raises(NotFound):
        await parts.files.get(brief, OWNER)


async def test_the_loop_sweeps_at_start_and_again_when_due(parts: Parts) -> None:
    await parts.database.open()
    await parts.batch("batch_1", "completed", files=False)
    parts.clock.now += 31 * DAY
    retention = parts.retention()
    retention.start()
    try:
        await no_ended_batch(parts)
        await parts.batch("batch_2", "completed", files=False)
        parts.clock.now += 31 * DAY  # an hour of the clock passed: the next look sweeps
        await no_ended_batch(parts)
    finally:
        await retention.stop()
    async with parts.database.connect() as connection:
        left = await connection.execute(sa.select(sa.func.count()).select_from(batch_lines))
        assert left.scalar_one() == 0
