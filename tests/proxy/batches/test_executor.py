"""The executor: a batch resumes with the lines that have no stored result (a line already run is
never run again), runs them at most ``concurrency`` at a time, writes its files in line order;
a cancel stops it with the lines that ran."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog

from proxy.batches.batches_db import BatchStore, Line, Result
from proxy.batches.contents import DatabaseContents
from proxy.batches.executor import BatchExecutor
from proxy.batches.files import FileStore
from proxy.batches.native import NativeRunner
from proxy.batches.objects import Batch, RequestCounts
from proxy.core.canonical import Principal
from proxy.db import Database
from proxy.runtime.config import BatchesConfig
from tests.waiting import until

OWNER = Principal(key_id="key-1")


class Runner:
    """Answers each line after ``gate`` is open, recording which ran and how many at once."""

    def __init__(self) -> None:
        self.ran: list[int] = []
        self.flying = 0
        self.peak = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def run(self, endpoint: str, batch_id: str, principal: Principal, line: Line) -> Result:
        self.ran.append(line.number)
        self.flying += 1
        self.peak = max(self.peak, self.flying)
        try:
            await self.gate.wait()
            await asyncio.sleep(0)
        finally:
            self.flying -= 1
        failed = line.number % 4 == 3
        return Result(line.number, f"out-{line.number}".encode(), failed)


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path}/batches.db")
    try:
        yield database
    finally:
        await database.close()


def executor(database: Database, runner: Runner, concurrency: int) -> BatchExecutor:
    config = BatchesConfig(concurrency=concurrency, poll_interval=0.05)
    store = BatchStore(database)
    files = FileStore(database, DatabaseContents(database))
    native = NativeRunner(lambda: None)  # type: ignore[arg-type,return-value]  # no native batch here
    return BatchExecutor(store, files, runner, native, config, structlog.get_logger)  # type: ignore[arg-type]


async def create(database: Database, lines: int) -> BatchStore:
    store = BatchStore(database)
    batch = Batch(
        id="batch_1",
        endpoint="/v1/chat/completions",
        input_file_id="file-1",
        completion_window="24h",
        status="validating",
        created_at=1,
        expires_at=2,
        request_counts=RequestCounts(total=lines),
    )
    await store.create(batch, OWNER, [(f"c{n}", b"{}") for n in range(lines)])
    return store


async def ended(store: BatchStore) -> Batch:
    async with asyncio.timeout(20):
        while True:
            batch = await store.get("batch_1", OWNER)
            if batch.status in ("completed", "cancelled"):
                return batch
            await asyncio.sleep(0.01)


async def test_a_batch_resumes_with_the_lines_that_have_no_result(database: Database) -> None:
    store = await create(database, 20)
    await store.record("batch_1", [Result(n, f"out-{n}".encode(), n % 4 == 3) for n in range(7)])
    runner = Runner()
    running = executor(database, runner, 3)
    running.start()
    try:
        batch = await ended(store)
    finally:
        await running.stop(1)
    assert sorted(runner.ran) == list(range(7, 20))  # none of the stored ones again
    assert runner.peak <= 3
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (20, 15, 5)
    files = FileStore(database, DatabaseContents(database))
    assert batch.output_file_id is not None
    assert batch.error_file_id is not None
    output = b"".join([p async for p in await files.read(batch.output_file_id, OWNER)])
    errors = b"".join([p async for p in await files.read(batch.error_file_id, OWNER)])
    assert output.splitlines() == [f"out-{n}".encode() for n in range(20) if n % 4 != 3]
    assert errors.splitlines() == [f"out-{n}".encode() for n in range(20) if n % 4 == 3]


async def test_a_cancel_ends_the_batch_with_the_lines_that_ran(database: Database) -> None:
    store = await create(database, 50)
    runner = Runner()
    runner.gate.clear()
    running = executor(database, runner, 2)
    running.start()
    try:
        await until(lambda: len(runner.ran) >= 2, seconds=20, what="two lines running")
        await store.request_cancel("batch_1", OWNER)
        running.cancel("batch_1")
        runner.gate.set()
        batch = await ended(store)
    finally:
        await running.stop(1)
    assert batch.status == "cancelled"
    assert batch.request_counts.completed + batch.request_counts.failed == len(runner.ran)
    assert len(runner.ran) < 50


async def test_a_stop_lets_the_lines_in_flight_store_their_results(database: Database) -> None:
    store = await create(database, 30)
    runner = Runner()
    runner.gate.clear()
    running = executor(database, runner, 4)
    running.start()
    await until(lambda: len(runner.ran) >= 4, seconds=20, what="four lines running")
    stopping = asyncio.create_task(running.stop(5))
    await asyncio.sleep(0.05)
    runner.gate.set()
    assert await stopping == 0
    assert len(runner.ran) == 4
    assert (await store.counts("batch_1")).completed + (await store.counts("batch_1")).failed == 4
    assert [line.number for line in await store.pending("batch_1", -1, 100)] == list(range(4, 30))
    assert (await store.claim(10, [])) is not None  # released: the next process resumes it
