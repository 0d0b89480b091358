"""Daily sums of the spend ledger, so that the spend API's totals do not rescan every record.

A million records summed per request take seconds; the same totals from per-day sums take
milliseconds. Two rollups are kept, each small for the questions it answers:

- ``spend_by_day`` — per day, team, model and provider (no key: with thousands of keys a
  per-key row would be as many rows as records);
- ``spend_by_key_day`` — per day, key and team.

A day is rolled up once it is over (UTC), the first time a total needs it (or when the gateway
warms the rollups at start, :meth:`SpendRollup.warm`), in one ``INSERT … SELECT`` over that
day's records, and marked in ``spend_rolled_days``. Today, and the partial first and last days
of a range given as times, are summed from the records themselves over the time index. A
record written for a day that is already rolled up (a journal replayed after an outage) drops
that day's sums and mark in the same transaction (:meth:`forget`), so that it is rolled up
again from the records. A total that groups or filters by end user is not served here (the
caller sums the records): end users may be as many as requests.

Every group value that is NULL in the records is kept as ``''`` (a primary key cannot hold
NULL) and turned back into None when read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.db import Database, DatabaseError
from proxy.db.schema import spend, spend_by_day, spend_by_key_day, spend_rolled_days

SUMS = (
    "requests",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_nanos",
    "saved_nanos",
    "audio_seconds",
    "characters",
    "images",
    "search_units",
)
"""What each rollup row sums (a count, then column sums): whole numbers but for
``audio_seconds`` (:func:`summed`)."""
_DAY = timedelta(days=1)
_BY_DAY = ("team", "model", "provider")
_BY_KEY = ("key_id", "team")
_LABELS = {"key": "key_id", "team": "team", "model": "model", "provider": "provider"}
Raw = Callable[[AsyncConnection, datetime, datetime], Awaitable[list[dict[str, Any]]]]


def _rollup_for(labels: set[str]) -> sa.Table | None:
    """The rollup that has every one of ``labels`` (group fields and filters), or None."""
    if labels <= set(_BY_DAY):
        return spend_by_day
    if labels <= set(_BY_KEY):
        return spend_by_key_day
    return None


def day_of(moment: datetime) -> str:
    """The UTC day of ``moment`` (``YYYY-MM-DD``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def midnight(day: str) -> datetime:
    """The start of ``day`` (UTC)."""
    return datetime.fromisoformat(day).replace(tzinfo=UTC)


class SpendRollup:
    """The two daily rollups of ``database`` (module docstring); ``clock`` gives the current
    time (aware UTC). Each day is rolled up in a transaction of its own, so that a read that
    gives up (its deadline) keeps the days it finished."""

    def __init__(self, database: Database, clock: Callable[[], datetime] | None = None) -> None:
        self._database = database
        self._clock = clock or (lambda: datetime.now(UTC))

    def today(self) -> datetime:
        """The start of the current UTC day: days before it are over."""
        return midnight(day_of(self._clock()))

    def serves(
        self, group_by: Sequence[str], team: str | None, key_id: str | None, user: str | None
    ) -> bool:
        """Whether totals grouped by ``group_by`` with these filters can come from a rollup."""
        if user is not None or any(group not in (*_LABELS, "day") for group in group_by):
            return False
        labels = {_LABELS[g] for g in group_by if g != "day"}
        labels |= {"team"} if team is not None else set()
        labels |= {"key_id"} if key_id is not None else set()
        return _rollup_for(labels) is not None

    async def totals(
        self,
        start: datetime | None,
        end: datetime | None,
        group_by: Sequence[str],
        equal: dict[str, str],
        raw: Raw,
    ) -> list[dict[str, Any]]:
        """Grouped sums over [``start``, ``end``) (None: from the first record, until now) with
        the ``equal`` filters (``team``, ``key_id``), largest cost first: the whole days that
        are over from a rollup (rolled up first where needed), the rest from
        ``raw(connection, start, end)``, the caller's grouped query over the records. A range
        that starts before the first record starts at its day: however early a client's
        ``start``, no empty day before the ledger began is rolled up."""
        labels = {_LABELS[g] for g in group_by if g != "day"} | set(equal)
        table = _rollup_for(labels)
        assert table is not None, "totals() of what serves() refused"
        today = self.today()
        first = await self._first_record()
        if first is None:
            return []
        if start is None or start < _floor_day(first):
            start = _floor_day(first)  # nothing is earlier: the days before are never rolled up
        end = today + _DAY if end is None else end
        whole_from, whole_to = _ceil_day(start), min(_floor_day(end), today)
        async with self._database.connect() as connection:
            if whole_from >= whole_to:
                return merge(await raw(connection, start, end), group_by)
        await self.ensure(whole_from, whole_to)
        async with self._database.connect() as connection:
            rows = await self._read(connection, table, whole_from, whole_to, group_by, equal)
            if start < whole_from:
                rows += await raw(connection, start, whole_from)
            if whole_to < end:
                rows += await raw(connection, whole_to, end)
        return merge(rows, group_by)

    async def _first_record(self) -> datetime | None:
        async with self._database.connect() as connection:
            first = (await connection.execute(sa.select(sa.func.min(spend.c.time)))).scalar()
        return None if first is None else _aware(first)

    async def ensure(self, start: datetime, end: datetime) -> None:
        """Roll up every day in [``start``, ``end``) that is not rolled up yet, one
        transaction per day."""
        days = []
        day = start
        while day < end:
            days.append(day_of(day))
            day += _DAY
        if not days:
            return
        query = sa.select(spend_rolled_days.c.day).where(
            spend_rolled_days.c.day >= days[0], spend_rolled_days.c.day <= days[-1]
        )
        async with self._database.connect() as connection:
            rolled = set((await connection.execute(query)).scalars())
        for missing in [d for d in days if d not in rolled]:
            async with self._database.connect() as connection:
                await self._roll_up_day(connection, missing)

    async def _roll_up_day(self, connection: AsyncConnection, day: str) -> None:
        begin, finish = midnight(day), midnight(day) + _DAY
        insert = _insert_for(connection)
        for table, fields in ((spend_by_day, _BY_DAY), (spend_by_key_day, _BY_KEY)):
            columns = [sa.func.coalesce(spend.c[f], "").label(f) for f in fields]
            select = (
                sa.select(sa.literal(day).label("day"), *columns, *_sum_columns())
                .where(spend.c.time >= begin, spend.c.time < finish)
                .group_by(*(spend.c[f] for f in fields))
            )
            names = ["day", *fields, *SUMS]
            await connection.execute(
                insert(table).from_select(names, select).on_conflict_do_nothing()
            )
        await connection.execute(
            insert(spend_rolled_days)
            .values(day=day, rolled_at=datetime.now(UTC))
            .on_conflict_do_nothing()
        )

    async def _read(
        self,
        connection: AsyncConnection,
        table: sa.Table,
        start: datetime,
        end: datetime,
        group_by: Sequence[str],
        equal: dict[str, str],
    ) -> list[dict[str, Any]]:
        keys = [
            (g if g == "day" else _LABELS[g], table.c["day" if g == "day" else _LABELS[g]])
            for g in group_by
        ]
        query = sa.select(
            *(column.label(label) for label, column in keys),
            *(sa.func.coalesce(sa.func.sum(table.c[name]), 0).label(name) for name in SUMS),
        ).where(table.c.day >= day_of(start), table.c.day < day_of(end))
        for name, value in equal.items():
            query = query.where(table.c[name] == value)
        query = query.group_by(*(column for _, column in keys))
        rows = []
        for row in await connection.execute(query):
            mapping = dict(row._mapping)
            for label, _ in keys:
                if mapping[label] == "":
                    mapping[label] = None
            rows.append(mapping)
        return rows

    async def forget(self, connection: AsyncConnection, days: Iterable[str]) -> None:
        """Drop the sums and mark of ``days`` (records arrived for them after their roll-up)."""
        days = sorted(set(days))
        if not days:
            return
        for table in (spend_by_day, spend_by_key_day, spend_rolled_days):
            await connection.execute(table.delete().where(table.c.day.in_(days)))

    async def warm(self) -> None:
        """Roll up every day of the ledger that is over and not rolled up yet (the gateway
        starts this in the background; a database that cannot answer is left for later)."""
        await self._database.open()
        first = await self._first_record()
        if first is not None:
            await self.ensure(_floor_day(first), self.today())


def merge(rows: list[dict[str, Any]], group_by: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of the same group summed into one, largest cost first."""
    labels = [g if g == "day" else _LABELS[g] for g in group_by]
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[label] for label in labels)
        found = merged.get(key)
        if found is None:
            merged[key] = {
                **{label: row[label] for label in labels},
                **{name: summed(name, row[name]) for name in SUMS},
            }
        else:
            for name in SUMS:
                found[name] += summed(name, row[name])
    return sorted(
        merged.values(),
        key=lambda r: (-r["cost_nanos"], *((r[label] is None, r[label] or "") for label in labels)),
    )


def summed(name: str, value: Any) -> int | float:
    """The sum ``name`` read back as a number (None is 0): ``audio_seconds`` a float, every
    other a Python int (PostgreSQL answers sums of BIGINT as ``Decimal``)."""
    return float(value or 0) if name == "audio_seconds" else int(value or 0)


def _sum_columns() -> list[sa.Label[Any]]:
    columns = [sa.func.count().label("requests")]
    columns += [sa.func.coalesce(sa.func.sum(spend.c[name]), 0).label(name) for name in SUMS[1:]]
    return columns


def _insert_for(connection: AsyncConnection) -> Any:
    return sqlite.insert if connection.dialect.name == "sqlite" else postgresql.insert


def _ceil_day(moment: datetime) -> datetime:
    floor = _floor_day(moment)
    return floor if floor == moment else floor + _DAY


def _floor_day(moment: datetime) -> datetime:
    return midnight(day_of(moment))


def _aware(moment: datetime | str) -> datetime:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


async def warm_in_background(rollup: SpendRollup, logger: Any) -> None:
    """:meth:`SpendRollup.warm`, logging (not raising) a database that cannot answer."""
    try:
        await rollup.warm()
    except (sa.exc.SQLAlchemyError, DatabaseError, OSError) as exc:
        logger.warning("spend_rollup_not_warmed", reason=f"{type(exc).__name__}: {exc}")
