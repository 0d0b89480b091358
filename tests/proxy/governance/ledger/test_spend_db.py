"""proxy/governance/ledger/spend_db.py: a batch of ledger records goes in as one insert on SQLite
and on PostgreSQL, every field comes back as written (None, floats, the time to the microsecond),
and writing ids the table already has adds nothing (a journal's replay)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from proxy.db import Database
from proxy.governance.ledger.records import RecordIds, SpendRecord
from proxy.governance.ledger.spend_db import (
    _INSERTED,
    _MAX_STATEMENT_ROWS,
    SpendFilter,
    SpendRepository,
    _parameter_limit,
)
from proxy.governance.ledger.spend_db import _SQLITE_GROUP as SQLITE_GROUP

IDS = RecordIds()
MOMENT = datetime(2026, 11, 1, 12, 30, 15, 123456, tzinfo=UTC).timestamp()


def record(i: int, **fields: object) -> SpendRecord:
    values: dict = dict(
        id=IDS(),
        request_id=f"req-{i}",
        time=MOMENT + i,
        key_id=f"key_{i % 3}",
        key_alias="ci",
        team="search" if i % 2 else None,
        user=None,
        dialect="openai",
        model="fast",
        provider="mock",
        upstream_model="echo",
        input_tokens=3 + i,
        cache_read_tokens=0,
        cache_write_tokens=1,
        output_tokens=2,
        reasoning_tokens=0,
        cost_nanos=7000 * i,
        cost_source="estimated",
        saved_nanos=None,
        status=200,
        error_code=None,
        duration_ms=1.5 + i,
        ttft_ms=None,
        attempts=1,
        fallback=None,
        cache=None,
    )
    values.update(fields)
    return SpendRecord(**values)


@pytest.fixture(params=["sqlite", "postgresql"])
async def repository(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator:
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite:///{tmp_path}/data/crossway.db"
    database = Database(url)
    yield SpendRepository(database)
    await database.close()


async def test_a_batch_comes_back_field_for_field(repository: SpendRepository) -> None:
    written = [record(i) for i in range(1, 6)]
    written.append(
        record(
            9,
            user="ann@example.com",
            saved_nanos=12,
            error_code="budget_exceeded",
            status=429,
            ttft_ms=0.25,
            fallback="fast->slow",
            cache="hit",
            cost_nanos=None,
            cost_source=None,
        )
    )
    written.append(record(10, dialect="openai_speech", characters=4096))
    written.append(record(11, dialect="openai_transcriptions", audio_seconds=12.345))
    written.append(
        record(12, dialect="openai_images", images=2, image_size="1024x1024", image_quality="hd")
    )
    written.append(record(13, dialect="rerank", search_units=3))
    await repository.write(written)
    stored, cursor = await repository.logs(SpendFilter(), limit=100)
    assert cursor is None
    assert sorted(stored, key=lambda r: r.id) == sorted(written, key=lambda r: r.id)


async def test_ids_already_stored_are_skipped(repository: SpendRepository) -> None:
    first = [record(i) for i in range(1, 501)]
    await repository.write(first)
    await repository.write([*first[:250], again := record(1000)])  # a journal replayed in part
    rows, total = await repository.totals(SpendFilter(), [])
    assert total["requests"] == 501
    assert total["cost_nanos"] == sum(r.cost_nanos or 0 for r in [*first, again])
    assert rows == [total]


async def test_the_day_column_groups_in_utc(repository: SpendRepository) -> None:
    late = datetime(2026, 11, 20, 23, 59, 59, tzinfo=UTC).timestamp()  # a day gone by
    await repository.write([record(1, time=late), record(2, time=late + 2)])
    rows, _ = await repository.totals(SpendFilter(), ["day"])
    assert sorted((row["day"], row["requests"]) for row in rows) == [
        ("2026-11-20", 1),
        ("2026-11-21", 1),
    ]


async def test_times_keep_the_microsecond_as_datetime_rounds_it(
    repository: SpendRepository,
) -> None:
    # Half a microsecond either way, a carry into the next second (and the next day), and a
    # batch whose records change second and go back: each time comes back as datetime makes it.
    midnight = datetime(2026, 11, 21, tzinfo=UTC).timestamp()
    times = [
        MOMENT + 0.0000005,
        MOMENT + 0.0000015,
        MOMENT + 0.9999994,
        MOMENT + 0.9999996,
        midnight - 0.0000004,
        MOMENT + 3.25,
        MOMENT + 0.5,
    ]
    written = [record(i, time=moment) for i, moment in enumerate(times)]
    await repository.write(written)
    stored, _ = await repository.logs(SpendFilter(), limit=100)
    by_id = {r.id: r.time for r in stored}
    assert [by_id[r.id] for r in written] == [
        datetime.fromtimestamp(moment, UTC).timestamp() for moment in times
    ]


def test_a_statement_binds_as_many_rows_as_the_librarys_parameter_limit_allows() -> None:
    limit = _parameter_limit()
    with contextlib.closing(sqlite3.connect(":memory:")) as connection:
        assert limit == connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) >= 999
    assert min(limit // len(_INSERTED), _MAX_STATEMENT_ROWS) == SQLITE_GROUP
    # (the batches below write statements of SQLITE_GROUP rows for real)


@pytest.mark.parametrize("count", [SQLITE_GROUP, 2 * SQLITE_GROUP, 2 * SQLITE_GROUP + 1])
async def test_batches_of_whole_groups_and_a_rest_all_arrive(
    repository: SpendRepository, count: int
) -> None:
    # SQLite inserts in statements of SQLITE_GROUP rows and one of the rest: every row of every
    # statement lands, none twice.
    written = [record(i) for i in range(count)]
    await repository.write(written)
    stored, _ = await repository.logs(SpendFilter(), limit=count + 1)
    assert sorted(stored, key=lambda r: r.id) == sorted(written, key=lambda r: r.id)


async def test_a_nul_in_a_clients_string_fails_no_batch(repository: SpendRepository) -> None:
    """PostgreSQL's text cannot hold NUL: a record naming such an end user or model failed its
    whole batch (every other request's record with it). It is stored as U+FFFD, and a filter
    naming it finds it."""
    written = [record(1, user="ann\x00", model="fa\x00st"), record(2)]
    await repository.write(written)
    stored, _ = await repository.logs(SpendFilter(user="ann\x00"), limit=100)
    assert [r.request_id for r in stored] == ["req-1"]
    assert stored[0].user in ("ann\x00", "ann\ufffd")  # SQLite keeps it; PostgreSQL cannot
    _, total = await repository.totals(SpendFilter(), [])
    assert total["requests"] == 2
