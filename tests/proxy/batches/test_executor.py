"""The executor: a batch resumes with the lines that have no stored result (a line already run is
never run again), runs them at most ``concurrency`` at a time, writes its files in line order;
a cancel stops it with the lines that ran; once its ``expires_at`` passed it starts no more
lines and ends ``expired``, the lines that did not run ``batch_expired`` in its error file —
also when a process claims it after its expiry, or resumes it mid-finalizing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog

from proxy.batches.batches_db import BatchStore, Line, Result
from proxy.batches.contents import DatabaseContents
from proxy.batches.executor import BatchExecutor
from proxy.batches.files import FileStore
from proxy.batches.native import NativeRunner
from proxy.batches.objects import MESSAGES, Batch, RequestCounts
from proxy.core.canonical import Principal
from proxy.db import Database
from proxy.runtime.config import BatchesConfig
from tests.waiting import until

OWNER = Principal(key_id="key-1")
CREATED = 1_000_000
EXPIRES = CREATED + 24 * 3600


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = CREATED + 5) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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


def executor(
    database: Database, runner: Runner, concurrency: int, clock: Clock | None = None
) -> BatchExecutor:
    clock = clock or Clock()
    config = BatchesConfig(concurrency=concurrency, poll_interval=0.05)
    store = BatchStore(database, clock)
    files = FileStore(database, DatabaseContents(database), clock)
    native = NativeRunner(lambda: None)  # type: ignore[arg-type,return-value]  # no native batch here
    return BatchExecutor(store, files, runner, native, config, structlog.get_logger, clock=clock)  # type: ignore[arg-type]


async def create(
    database: Database, lines: int, endpoint: str = "/v1/chat/completions"
) -> BatchStore:
    store = BatchStore(database)
    batch = Batch(
        id="batch_1",
        endpoint=endpoint,
        input_file_id="file-1",
        completion_window="24h",
        status="validating",
        created_at=CREATED,
        expires_at=EXPIRES,
        request_counts=RequestCounts(total=lines),
    )
    await store.create(batch, OWNER, [(f"c{n}", b"{}") for n in range(lines)])
    return store


async def ended(store: BatchStore) -> Batch:
    async with asyncio.timeout(20):
        while True:
            batch = await store.get("batch_1", OWNER)
            if batch.status in ("completed", "cancelled", "expired"):
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
    files = FileStore(database, DatabaseContents(database), Clock())
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


async def run_to_end(database: Database, store: BatchStore, runner: Runner, clock: Clock) -> Batch:
    """Run the batch with an executor reading ``clock`` until it ended; the batch."""
    running = executor(database, runner, 4, clock)
    running.start()
    try:
        return await ended(store)
    finally:
        await running.stop(1)


async def read(database: Database, file_id: str | None) -> list[bytes]:
    assert file_id is not None
    files = FileStore(database, DatabaseContents(database), Clock(EXPIRES + 7200))
    return b"".join([p async for p in await files.read(file_id, OWNER)]).splitlines()


def assert_expired_lines(lines: list[bytes], custom_ids: list[str]) -> None:
    """``lines`` are OpenAI's ``batch_expired`` error lines of ``custom_ids``, in order."""
    decoded = [json.loads(line) for line in lines]
    assert [line["custom_id"] for line in decoded] == custom_ids
    for line in decoded:
        assert line["response"] is None
        assert line["error"]["code"] == "batch_expired"
        assert line["id"].startswith("batch_req_")


async def test_a_batch_whose_expiry_passes_midway_starts_no_more_lines(database: Database) -> None:
    store = await create(database, 20)
    runner = Runner()
    runner.gate.clear()
    clock = Clock()
    running = executor(database, runner, 2, clock)
    running.start()
    try:
        await until(lambda: len(runner.ran) >= 2, seconds=20, what="two lines running")
        clock.now = EXPIRES  # the window passes while two lines are in flight
        runner.gate.set()
        batch = await ended(store)
    finally:
        await running.stop(1)
    assert runner.ran == [0, 1]  # the lines in flight ended; none started after
    assert (batch.status, batch.expired_at, batch.completed_at) == ("expired", EXPIRES, None)
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (20, 2, 18)
    assert await read(database, batch.output_file_id) == [b"out-0", b"out-1"]
    assert_expired_lines(await read(database, batch.error_file_id), [f"c{n}" for n in range(2, 20)])


async def test_a_batch_claimed_after_its_expiry_ends_expired_at_once(database: Database) -> None:
    store = await create(database, 6)
    await store.record("batch_1", [Result(0, b"out-0", False)])  # ran before a long stop
    runner = Runner()
    batch = await run_to_end(database, store, runner, Clock(EXPIRES + 3600))
    assert runner.ran == []
    assert batch.status == "expired"
    assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 5)
    assert await read(database, batch.output_file_id) == [b"out-0"]
    assert_expired_lines(await read(database, batch.error_file_id), [f"c{n}" for n in range(1, 6)])


async def test_an_expired_batch_resumed_mid_finalizing_still_ends_expired(
    database: Database,
) -> None:
    store = await create(database, 4)
    held = await store.claim(10, [])
    assert held is not None
    batch = held.batch
    batch.status, batch.finalizing_at, batch.expired_at = "finalizing", EXPIRES, EXPIRES
    await store.record("batch_1", [Result(0, b"out-0", False)])
    await store.save(batch, lease=None)  # the process stopped while it wrote the files
    runner = Runner()
    ended_batch = await run_to_end(database, store, runner, Clock(EXPIRES + 60))
    assert runner.ran == []
    assert (ended_batch.status, ended_batch.expired_at) == ("expired", EXPIRES)
    assert_expired_lines(await read(database, ended_batch.error_file_id), ["c1", "c2", "c3"])


async def test_an_expired_message_batch_leaves_the_rest_without_results(
    database: Database,
) -> None:
    store = await create(database, 5, endpoint=MESSAGES)
    await store.record("batch_1", [Result(0, b"out-0", False)])
    runner = Runner()
    batch = await run_to_end(database, store, runner, Clock(EXPIRES))
    assert runner.ran == []
    assert batch.status == "expired"
    assert (batch.output_file_id, batch.error_file_id, batch.usage) == (None, None, None)
    results = [result for _, _, result in await store.outcomes("batch_1", -1, 10)]
    assert results == [b"out-0", None, None, None, None]  # the results route names them expired


async def test_a_batch_that_ran_every_line_completes_even_past_its_expiry(
    database: Database,
) -> None:
    store = await create(database, 3)
    await store.record("batch_1", [Result(n, f"out-{n}".encode(), False) for n in range(3)])
    batch = await run_to_end(database, store, Runner(), Clock(EXPIRES + 1))
    assert (batch.status, batch.expired_at) == ("completed", None)
