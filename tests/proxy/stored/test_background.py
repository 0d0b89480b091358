"""The background runner's parts in isolation: the event log's order, caps and live reading
(:class:`~proxy.stored.background.EventLog`), and the database store's leases — a running
response read ``failed`` once its lease has passed, swept at start-up, and renewal telling the
runner which responses it no longer holds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from proxy.core.errors import BadRequest
from proxy.db import Database
from proxy.stored.background import EventLog
from proxy.stored.response_store import STOPPED, StoredResponse
from proxy.stored.responses_db import DatabaseResponseStore


def frames(*numbers: int) -> bytes:
    return b"".join(b'event: e\ndata: {"sequence_number":%d}\n\n' % n for n in numbers)


async def read(log: EventLog, after: int) -> bytes:
    return b"".join([chunk async for chunk in log.follow(after)])


async def test_the_log_replays_from_starting_after_then_follows_live() -> None:
    log = EventLog()
    log.add(frames(0, 1, 2))
    reader = asyncio.ensure_future(read(log, 0))
    await asyncio.sleep(0)
    log.add(frames(3))
    log.close()
    assert await reader == frames(1, 2, 3)
    assert await read(log, -1) == frames(0, 1, 2, 3)


async def test_past_its_caps_the_oldest_events_go_and_an_older_start_is_a_400() -> None:
    log = EventLog(max_events=2)
    log.add(frames(0, 1, 2))
    log.close()
    assert log.first == 1
    assert await read(log, 0) == frames(1, 2)
    with pytest.raises(BadRequest) as refused:
        log.check(-1)
    assert refused.value.param == "starting_after"
    by_bytes = EventLog(max_bytes=len(frames(0)) * 2)
    by_bytes.add(frames(0, 1, 2, 3))
    assert by_bytes.first == 2


async def test_a_reader_fallen_behind_the_caps_gets_an_error_event() -> None:
    log = EventLog(max_events=1)
    log.add(frames(0))
    stream = log.follow(-1)
    assert await anext(stream) == frames(0)
    log.add(frames(1, 2))
    dropped = await anext(stream)
    assert dropped.startswith(b"event: error\n")
    assert b'"code":"events_dropped"' in dropped


@pytest.fixture
async def database(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path}/lease.db")


def body(status: str) -> bytes:
    return msgspec.json.encode({"id": "resp_1", "status": status, "error": None})


async def test_a_running_response_reads_failed_once_its_lease_passed_and_is_swept(
    database: Database,
) -> None:
    now = [1_000.0]
    store = DatabaseResponseStore(
        database, ttl=3600, max_entries=10, max_bytes=10**6, lease=10, clock=lambda: now[0]
    )
    try:
        await store.put("resp_1", StoredResponse("a", body("in_progress"), b"[]", b"[]", True))
        held = await store.get("resp_1", "a")
        assert held is not None
        assert held.running
        assert await store.sweep() == 0
        now[0] += 5
        assert await store.renew(["resp_1", "resp_gone"]) == ["resp_gone"]
        now[0] += 9  # within the renewed lease
        renewed = await store.get("resp_1", "a")
        assert renewed is not None
        assert msgspec.json.decode(renewed.body)["status"] == "in_progress"
        now[0] += 2  # past it: the process running it stopped
        record = await store.get("resp_1", "a")
        assert record is not None
        assert not record.running
        failed = msgspec.json.decode(record.body)
        assert (failed["status"], failed["error"]["message"]) == ("failed", STOPPED)
        assert await store.sweep() == 1
        assert await store.sweep() == 0
        assert await store.renew(["resp_1"]) == ["resp_1"]  # no longer held as running
    finally:
        await database.close()
