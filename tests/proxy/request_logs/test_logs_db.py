"""The request_logs table on SQLite and PostgreSQL: idempotent batches, lookups by id or request
id, filtered cursor pages, pruning by age."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from proxy.db import Database
from proxy.request_logs.logs_db import LogFilter, RequestLogRepository
from tests.proxy.request_logs.records_factory import log_record


@pytest.fixture(params=["sqlite", "postgresql"])
async def repository(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[RequestLogRepository]:
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path}/data/crossway.db"
    database = Database(url)
    yield RequestLogRepository(database)
    await database.close()


async def test_records_come_back_field_for_field_and_once(
    repository: RequestLogRepository,
) -> None:
    written = [log_record(i, stream=i % 2 == 0, truncated=i == 3) for i in range(1, 6)]
    await repository.write(written)
    await repository.write(written[:2])  # a journal replayed: ignored ids
    page, cursor = await repository.find(LogFilter(), 100)
    assert cursor is None
    assert [record.id for record in page] == [r.id for r in reversed(written)]
    assert all(record.request is None for record in page)  # listings carry no payloads
    found = await repository.get("id-0003")
    assert found == written[2]


async def test_get_by_request_id_finds_the_newest(repository: RequestLogRepository) -> None:
    await repository.write([log_record(1, request_id="same"), log_record(2, request_id="same")])
    found = await repository.get("same")
    assert found is not None
    assert found.id == "id-0002"
    assert await repository.get("nothing") is None


async def test_filters_and_pages(repository: RequestLogRepository) -> None:
    records = [
        log_record(i, key_id="key_a" if i < 6 else "key_b", status=200 if i % 3 else 429)
        for i in range(10)
    ]
    await repository.write(records)
    page, cursor = await repository.find(LogFilter(key_id="key_a"), 4)
    assert [r.id for r in page] == ["id-0005", "id-0004", "id-0003", "id-0002"]
    rest, end = await repository.find(LogFilter(key_id="key_a"), 4, cursor)
    assert [r.id for r in rest] == ["id-0001", "id-0000"]
    assert end is None
    refused, _ = await repository.find(LogFilter(statuses=(400, 499)), 100)
    assert {r.id for r in refused} == {"id-0000", "id-0003", "id-0006", "id-0009"}
    start = datetime.fromtimestamp(1_800_000_007, UTC)
    late, _ = await repository.find(LogFilter(start=start, team="eng", model="chat"), 100)
    assert [r.id for r in late] == ["id-0009", "id-0008", "id-0007"]
    with pytest.raises(ValueError, match="cursor"):
        await repository.find(LogFilter(), 10, "not-a-cursor")


async def test_prune_deletes_what_is_older_than_the_bound(
    repository: RequestLogRepository,
) -> None:
    await repository.write([log_record(i) for i in range(5)])
    pruned = await repository.prune(datetime.fromtimestamp(1_800_000_003, UTC))
    assert pruned == 3
    left, _ = await repository.find(LogFilter(), 10)
    assert [r.id for r in left] == ["id-0004", "id-0003"]
