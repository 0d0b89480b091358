"""The spend rollups: totals from daily sums (tokens, money and media units) equal the sums of
the records, however grouped, filtered and ranged, including records that arrive for a day
already rolled up."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from proxy.db import Database
from proxy.db.schema import spend_rolled_days
from proxy.governance.ledger.records import SpendRecord
from proxy.governance.ledger.rollup import SpendRollup
from proxy.governance.ledger.spend_db import SpendFilter, SpendRepository

NOW = datetime(2026, 12, 10, 15, 30, tzinfo=UTC)
GROUPINGS = [[], ["team"], ["model"], ["provider"], ["day"], ["day", "team"], ["key"],
             ["key", "day"], ["team", "model", "provider"], ["user"], ["key", "model"]]  # fmt: skip


def record(rng: random.Random, i: int, moment: datetime) -> SpendRecord:
    key = rng.randrange(6)
    return SpendRecord(
        id=f"r{i:08d}",
        request_id=f"req-{i}",
        time=moment.timestamp(),
        key_id=None if key == 5 else f"key_{key}",
        key_alias="k",
        team=None if key >= 4 else f"team-{key % 2}",
        user=rng.choice([None, "ann", "bob"]),
        dialect="openai",
        model=rng.choice(["chat", "fast", None]),
        provider=rng.choice(["up", "other"]),
        upstream_model="m",
        input_tokens=rng.randrange(100),
        cache_read_tokens=rng.randrange(10),
        cache_write_tokens=0,
        output_tokens=rng.randrange(50),
        reasoning_tokens=0,
        cost_nanos=rng.choice([None, rng.randrange(1, 10**6)]),
        cost_source="estimated",
        saved_nanos=None,
        status=200,
        error_code=None,
        duration_ms=1.0,
        ttft_ms=None,
        attempts=1,
        fallback=None,
        cache=None,
        **media_units(rng),
    )


def media_units(rng: random.Random) -> dict[str, object]:
    """A media call's units, one record in two (seconds in quarters: sums exact in any order)."""
    return rng.choice(
        [
            {},
            {"audio_seconds": rng.randrange(1, 400) / 4},
            {"characters": rng.randrange(1, 4096)},
            {"images": rng.randrange(1, 10), "image_size": "1024x1024"},
            {"search_units": rng.randrange(1, 5)},
            {},
        ]
    )


@pytest.fixture(params=["sqlite", "postgresql"])
async def ledger(request: pytest.FixtureRequest, tmp_path: Path):
    url = f"sqlite:///{tmp_path}/crossway.db"
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
    database = Database(url)
    rng = random.Random(7)
    records = [
        record(rng, i, NOW - timedelta(seconds=rng.randrange(6 * 86_400))) for i in range(600)
    ]
    rolled = SpendRepository(database, rollup=SpendRollup(database, clock=lambda: NOW))
    await rolled.write(records)
    yield rolled, SpendRepository(database, rollup=None), database, rng
    await database.close()


def ranges():
    day = timedelta(days=1)
    midnight = NOW.replace(hour=0, minute=30) - 5 * day
    return [
        (None, None),
        (midnight - 2 * day, None),  # before the first record
        (midnight, NOW - day),  # partial first and last days
        (NOW - 3 * day, NOW + day),  # into tomorrow
        (NOW.replace(hour=0, minute=0) - 2 * day, NOW.replace(hour=0, minute=0)),  # whole days
        (NOW - timedelta(hours=2), NOW),  # today only
    ]


@pytest.mark.parametrize("group_by", GROUPINGS)
async def test_rolled_up_totals_equal_the_records_sums(ledger, group_by):
    rolled, plain, _, _ = ledger
    for start, end in ranges():
        for team, key_id in ((None, None), ("team-1", None), (None, "key_2")):
            where = SpendFilter(start=start, end=end, team=team, key_id=key_id)
            rows, total = await rolled.totals(where, group_by)
            expected_rows, expected_total = await plain.totals(where, group_by)
            case = (start, end, team, key_id)
            assert total == expected_total, case
            assert sorted(rows, key=repr) == sorted(expected_rows, key=repr), case
            costs = [row["cost_nanos"] for row in rows]
            assert costs == sorted(costs, reverse=True), case


async def test_a_late_record_for_a_rolled_up_day_is_counted(ledger):
    rolled, plain, database, rng = ledger
    everything = SpendFilter()
    before, _ = await rolled.totals(everything, ["day"])
    async with database.connect() as connection:
        days = set((await connection.execute(sa.select(spend_rolled_days.c.day))).scalars())
    assert (NOW - timedelta(days=3)).strftime("%Y-%m-%d") in days  # rolled up by that read
    late = record(rng, 10_000, NOW - timedelta(days=3))
    await rolled.write([late])
    after, total = await rolled.totals(everything, ["day"])
    expected, _ = await plain.totals(everything, ["day"])
    assert sorted(after, key=repr) == sorted(expected, key=repr)
    assert total["requests"] == sum(row["requests"] for row in before) + 1


async def test_warming_rolls_up_every_finished_day(ledger):
    _, _, database, _ = ledger
    await SpendRollup(database, clock=lambda: NOW).warm()
    async with database.connect() as connection:
        days = sorted((await connection.execute(sa.select(spend_rolled_days.c.day))).scalars())
    assert days[-1] == (NOW - timedelta(days=1)).strftime("%Y-%m-%d")  # not today
    assert len(days) == 6


async def test_a_range_from_long_before_the_ledger_rolls_up_only_the_ledgers_days(ledger):
    rolled, plain, database, rng = ledger
    since_1970 = SpendFilter(start=datetime(1970, 1, 1, tzinfo=UTC))
    rows, total = await rolled.totals(since_1970, ["day"])
    assert (rows, total) == await plain.totals(since_1970, ["day"])
    async with database.connect() as connection:
        days = sorted((await connection.execute(sa.select(spend_rolled_days.c.day))).scalars())
    assert len(days) == 6, "only days that have records were rolled up, not 20,000 empty ones"
    earlier = record(rng, 10_001, NOW - timedelta(days=40))  # a journal replayed late
    await rolled.write([earlier])
    _, after = await rolled.totals(since_1970, [])
    assert after["requests"] == total["requests"] + 1


async def test_media_units_are_summed(ledger):
    rolled, plain, _, _ = ledger
    _, total = await rolled.totals(SpendFilter(), [])
    records, _ = await plain.logs(SpendFilter(), limit=1000)
    assert total["images"] == sum(r.images or 0 for r in records) > 0
    assert total["characters"] == sum(r.characters or 0 for r in records) > 0
    assert total["search_units"] == sum(r.search_units or 0 for r in records) > 0
    assert total["audio_seconds"] == sum(r.audio_seconds or 0 for r in records) > 0
