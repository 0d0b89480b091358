"""PostgreSQL stopped while a ``crossway serve`` process (two workers) serves: every request's
ledger record reaches the database once it is back — counted by request id against the ids
the clients were given — and none arrives twice.

The outage is an immediate shutdown (SIGQUIT by PID) while 100 requests are in the upstream,
so that batches are cut mid-write (a write PostgreSQL committed but never acknowledged is
journaled too, and its replay must not duplicate it); 100 more are served while it is down.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.scaleout import COST, FREE, Client, instances, poll
from tests.engines import PostgresServer


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    http = Client()
    yield http
    await http.close()


def ledger_counts(server: PostgresServer) -> tuple[int, int]:
    """(records, distinct request ids) in the ledger; (-1, -1) while it cannot answer."""
    try:
        rows, distinct = server.sql("SELECT count(*), count(DISTINCT request_id) FROM spend").split(
            "|"
        )
    except subprocess.CalledProcessError:  # not accepting connections yet
        return -1, -1
    return int(rows), int(distinct)


async def test_postgresql_stopped_while_serving_every_record_arrives_once(
    tmp_path: Path, own_postgres: PostgresServer, redis_url: str, client: Client
):
    with instances(
        tmp_path,
        1,
        workers=2,
        redis_url=redis_url,
        database_url=own_postgres.url,
        plugins=COST,
    ) as (served,):
        url = served.url
        request_ids: list[str] = []

        async def load(round_: int, model: str = "echo") -> list[int]:
            replies = await asyncio.gather(
                *(client.chat(url, FREE, f"ledger {round_} {i}", model=model) for i in range(100))
            )
            request_ids.extend(headers["x-request-id"] for _, headers in replies)
            return [status for status, _ in replies]

        async def recorded(total: int) -> bool:
            return await asyncio.to_thread(ledger_counts, own_postgres) == (total, total)

        assert await load(0) == [200] * 100
        await poll(lambda: recorded(100), seconds=20.0, what="the first 100 records", every=0.2)

        in_flight = asyncio.ensure_future(load(1, model="slow"))

        async def all_in_flight() -> bool:
            return await client.metric(url, "crossway_requests_in_flight") >= 50

        await poll(all_in_flight, seconds=10.0, what="the round to be in flight")
        await asyncio.to_thread(own_postgres.kill)
        assert await in_flight == [200] * 100, "the ledger never fails a request"
        assert await load(2) == [200] * 100
        assert await client.metric(url, "crossway_ledger_pending") > 0

        async def journaled() -> bool:  # the writer's next batch (within a second) fails
            return await client.metric(url, "crossway_ledger_journaled_total") > 0

        await poll(journaled, seconds=10.0, what="records journaled while PostgreSQL is down")

        await asyncio.to_thread(own_postgres.start)
        # The writer retries the database 5 s after its last failure, then replays the journal.
        await poll(
            lambda: recorded(300), seconds=60.0, what="every record after the restart", every=0.2
        )

        async def nothing_pending() -> bool:
            return await client.metric(url, "crossway_ledger_pending") == 0

        await poll(nothing_pending, seconds=10.0, what="the journal replayed")
        stored = own_postgres.sql("SELECT request_id FROM spend").split()
        assert sorted(stored) == sorted(request_ids), "each request's record, and only once"
        assert await client.metric(url, "crossway_ledger_dropped_total") == 0
