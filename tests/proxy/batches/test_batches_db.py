"""The batch store: a batch is held by one process at a time under its lease, taken over once the
lease passed; a cancel is never written over; only lines without a result are pending."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.batches.batches_db import BatchStore, Result
from proxy.batches.objects import Batch, RequestCounts
from proxy.core.canonical import Principal
from proxy.core.errors import NotFound
from proxy.db import Database

OWNER = Principal(key_id="key-1", team="team-a")
OTHER = Principal(key_id="key-2")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path}/batches.db")
    try:
        yield database
    finally:
        await database.close()


def batch(batch_id: str = "batch_1") -> Batch:
    return Batch(
        id=batch_id,
        endpoint="/v1/chat/completions",
        input_file_id="file-1",
        completion_window="24h",
        status="validating",
        created_at=1,
        expires_at=2,
        request_counts=RequestCounts(total=3),
    )


LINES = [("a", b"{}"), ("b", b"{}"), ("c", b"{}")]


async def test_a_batch_is_held_by_one_claimer_until_its_lease_passes(database: Database) -> None:
    clock = Clock()
    store = BatchStore(database, clock)
    await store.create(batch(), OWNER, LINES)
    held = await store.claim(10, [])
    assert held is not None
    assert (held.batch.id, held.principal) == ("batch_1", OWNER)
    assert await store.claim(10, []) is None  # another process finds nothing free
    clock.now += 11
    assert (await store.claim(10, [])) is not None  # its holder stopped renewing
    clock.now += 5
    assert await store.renew("batch_1", 10) == "validating"
    clock.now += 6
    assert await store.claim(10, []) is None  # renewed: still held


async def test_a_released_or_ended_batch_is_claimed_or_left_as_it_says(database: Database) -> None:
    store = BatchStore(database, Clock())
    await store.create(batch(), OWNER, LINES)
    held = await store.claim(10, [])
    assert held is not None
    assert await store.claim(10, ["batch_1"]) is None
    await store.save(held.batch, lease=None)
    again = await store.claim(10, [])
    assert again is not None
    again.batch.status = "completed"
    await store.save(again.batch, lease=None)
    assert await store.claim(10, []) is None


async def test_a_cancel_is_never_written_over_by_the_running_process(database: Database) -> None:
    store = BatchStore(database, Clock())
    await store.create(batch(), OWNER, LINES)
    held = await store.claim(10, [])
    assert held is not None
    cancelling = await store.request_cancel("batch_1", OWNER)
    assert cancelling.status == "cancelling"
    held.batch.status = "in_progress"
    assert not await store.save(held.batch, lease=10)
    held.batch.status = "finalizing"
    assert not await store.save(held.batch, lease=10)
    assert (await store.get("batch_1", OWNER)).status == "cancelling"
    held.batch.status = "cancelled"
    assert await store.save(held.batch, lease=None)


async def test_only_lines_without_a_result_are_pending_and_counts_follow(
    database: Database,
) -> None:
    store = BatchStore(database, Clock())
    await store.create(batch(), OWNER, LINES)
    await store.record("batch_1", [Result(0, b"ok", False), Result(2, b"no", True)])
    assert [line.custom_id for line in await store.pending("batch_1", -1, 10)] == ["b"]
    counts = await store.counts("batch_1")
    assert (counts.total, counts.completed, counts.failed) == (3, 1, 1)
    assert [r.line for r in await store.results("batch_1", True, -1, 10)] == [b"no"]
    assert [o[2] for o in await store.outcomes("batch_1", -1, 10)] == [b"ok", None, b"no"]


async def test_a_batch_is_its_owners_only(database: Database) -> None:
    store = BatchStore(database, Clock())
    await store.create(batch(), OWNER, LINES)
    with pytest.raises(NotFound):
        await store.get("batch_1", OTHER)
    with pytest.raises(NotFound):
        await store.request_cancel("batch_1", OTHER)
    assert await store.page(OTHER, after=None, limit=10) == ([], False)
    found, more = await store.page(OWNER, after=None, limit=10)
    assert ([b.id for b in found], more) == (["batch_1"], False)
