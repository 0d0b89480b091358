"""The ``spend`` table: the ledger's records, and the sums the spend API and budgets read.

:meth:`SpendRepository.write` is the ledger writer's sink: inserts that skip ids the table
already has (``ON CONFLICT DO NOTHING`` on SQLite and PostgreSQL alike), so that replaying a
journal never duplicates a record. Both bypass SQLAlchemy's per-row processing,
which would cost more than the database's own work, and bind every value as a parameter: on
SQLite statements of as many rows as the library's parameter limit allows, up to
:data:`_MAX_STATEMENT_ROWS` (37 rows where the limit is 999, the smallest SQLite has had; a
whole 500-row batch in one statement on SQLite 3.32 and later), given plain tuples — the driver
gives up the GIL once per statement it steps, and each hand-over with the event loop's thread
can wait for that thread's switch interval, so that a batch stepped row by row took 500 of them
and one statement takes one; on PostgreSQL one statement and one round
trip for the whole batch, ``INSERT … SELECT * FROM unnest($1::VARCHAR(32)[], …)``, each
parameter an array holding one column of the batch. Money is summed in SQL as integers
(nano-dollars); grouping by day uses the stored UTC ``day`` column, the same on every engine.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import chain
from typing import Any, Literal

import sqlalchemy as sa
from msgspec.structs import astuple
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from proxy.db import Database
from proxy.db.schema import spend
from proxy.governance.ledger.records import SpendRecord
from proxy.governance.ledger.rollup import SUMS as _SUM_NAMES
from proxy.governance.ledger.rollup import SpendRollup, merge, summed

Group = Literal["key", "team", "model", "provider", "user", "day", "batch"]
BudgetScope = Literal["key", "team", "user"]
"""Whose spend a budget counts (:data:`proxy.governance.budgets.plans.Scope`)."""
GROUPS: dict[str, tuple[str, sa.Column[Any]]] = {
    "key": ("key_id", spend.c.key_id),
    "team": ("team", spend.c.team),
    "model": ("model", spend.c.model),
    "provider": ("provider", spend.c.provider),
    "user": ("user", spend.c.end_user),
    "day": ("day", spend.c.day),
    "batch": ("batch_id", spend.c.batch_id),
}
TOKEN_FIELDS = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
)
_SUMMED = _SUM_NAMES[1:]  # the columns summed (after the count of requests)
_COLUMN = {"user": "end_user"}  # record field -> column, where they differ
_SCOPES = {"key": spend.c.key_id, "team": spend.c.team, "user": spend.c.end_user}
_KEY_AND_TEAM: tuple[tuple[BudgetScope, sa.Column[Any]], ...] = (
    ("key", spend.c.key_id),
    ("team", spend.c.team),
)
_RECORD_FIELDS = tuple(SpendRecord.__struct_fields__)
_FIELDS_AFTER_TIME = tuple(f for f in _RECORD_FIELDS if f != "time")
_TIME = _RECORD_FIELDS.index("time")  # a record's values before and after it are the row's
_INSERTED = ("time", "day", *(_COLUMN.get(f, f) for f in _FIELDS_AFTER_TIME))
_MAX_STATEMENT_ROWS = 1000  # about 84 bytes of SQL a row: far below the oldest length limit, 1 MB


def _parameter_limit() -> int:
    """How many parameters one statement may bind with this process's SQLite library (999
    before 3.32, 32,766 since, more where a distribution raised it): the limit of a fresh
    connection, as the database's connections have it (nothing here lowers it)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as probe:
        return probe.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)


_SQLITE_GROUP = min(_parameter_limit() // len(_INSERTED), _MAX_STATEMENT_ROWS)
"""Rows per SQLite insert statement."""


def _sqlite_insert(rows: int) -> str:
    """The SQLite insert of ``rows`` rows in one statement."""
    values = ", ".join([f"({', '.join('?' * len(_INSERTED))})"] * rows)
    return f"INSERT INTO spend ({', '.join(_INSERTED)}) VALUES {values} ON CONFLICT (id) DO NOTHING"


_SQLITE_INSERT_GROUP = _sqlite_insert(_SQLITE_GROUP)
_POSTGRES = postgresql.dialect()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves the dialect's __init__ unannotated
_POSTGRES_TYPES = [spend.c[name].type.compile(dialect=_POSTGRES) for name in _INSERTED]
_POSTGRES_INSERT = (
    f"INSERT INTO spend ({', '.join(_INSERTED)}) SELECT * FROM unnest("
    + ", ".join(f"${i}::{kind}[]" for i, kind in enumerate(_POSTGRES_TYPES, 1))
    + ") ON CONFLICT (id) DO NOTHING"
)


class SpendFilter:
    """Which records a query covers: ``start`` (inclusive) to ``end`` (exclusive), and only a
    ``team``, a ``key_id``, a ``user``, a ``model`` (the alias or name the client asked for),
    a ``cache`` result (``hit``, ``miss`` …) or statuses from ``statuses[0]`` to
    ``statuses[1]`` (both inclusive) when given."""

    __slots__ = ("cache", "end", "key_id", "model", "start", "statuses", "team", "user")

    def __init__(
        self,
        start: datetime | None = None,
        end: datetime | None = None,
        team: str | None = None,
        key_id: str | None = None,
        user: str | None = None,
        *,
        model: str | None = None,
        cache: str | None = None,
        statuses: tuple[int, int] | None = None,
    ) -> None:
        self.start = start
        self.end = end
        self.team = team
        self.key_id = key_id
        self.user = user
        self.model = model
        self.cache = cache
        self.statuses = statuses

    def apply(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``query`` restricted to these records."""
        if self.start is not None:
            query = query.where(spend.c.time >= self.start)
        if self.end is not None:
            query = query.where(spend.c.time < self.end)
        if self.team is not None:
            query = query.where(spend.c.team == self.team)
        if self.key_id is not None:
            query = query.where(spend.c.key_id == self.key_id)
        if self.user is not None:
            query = query.where(spend.c.end_user == self.user)
        if self.model is not None:
            query = query.where(spend.c.model == self.model)
        if self.cache is not None:
            query = query.where(spend.c.cache == self.cache)
        if self.statuses is not None:
            query = query.where(spend.c.status.between(*self.statuses))
        return query


class SpendRepository:
    """Writes and reads the ledger. Raises what the driver raises when the database cannot
    answer (the writer journals; the API answers 503)."""

    def __init__(self, database: Database, rollup: SpendRollup | bool | None = True) -> None:
        """``rollup``: the daily sums :meth:`totals` reads (True: this database's; None: sum
        the records every time)."""
        self._database = database
        self._days: dict[int, str] = {}
        self._second: tuple[int, str] = (-1, "")  # a second and its text, as _sqlite_row writes it
        self._rollup = SpendRollup(database) if rollup is True else rollup or None

    async def write(self, records: Sequence[SpendRecord]) -> None:
        """Store every record whose id the table does not have yet (see the module
        docstring); opens the database on first use."""
        if not records:
            return
        await self._database.open()
        late: set[str] = set()  # days that may be rolled up already
        if self._rollup is not None:
            today = self._rollup.today().timestamp()
            late = {self._day(r.time) for r in records if r.time < today}
        async with self._database.connect() as connection:
            if connection.dialect.name == "sqlite":
                await _insert_sqlite(connection, [self._sqlite_row(r) for r in records])
            else:
                rows = [self._postgres_row(record) for record in records]
                columns = tuple(list(column) for column in zip(*rows, strict=True))
                await connection.exec_driver_sql(_POSTGRES_INSERT, columns)
            if late and self._rollup is not None:
                await self._rollup.forget(connection, late)

    async def totals(
        self, where: SpendFilter, group_by: Sequence[Group]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Sums per group (``requests``, the token buckets, ``cost_nanos``, ``saved_nanos``, the
        media units: ``audio_seconds``, ``characters``, ``images``, ``search_units``),
        largest cost first, and the sums of everything ``where`` covers."""
        await self._database.open()
        rollup = self._rollup
        if (
            rollup is not None
            and where.model is None
            and where.cache is None
            and where.statuses is None
            and rollup.serves(group_by, where.team, where.key_id, where.user)
        ):
            equal = {
                name: value
                for name, value in (("team", where.team), ("key_id", where.key_id))
                if value is not None
            }

            async def from_records(
                connection: AsyncConnection, start: datetime, end: datetime
            ) -> list[dict[str, Any]]:
                part = SpendFilter(start, end, where.team, where.key_id)
                return await _grouped(connection, part, group_by)

            rows = await rollup.totals(where.start, where.end, group_by, equal, from_records)
            (total,) = merge(rows, []) or [_numbers(dict.fromkeys(_SUM_NAMES, 0))]
            return rows, total
        async with self._database.connect() as connection:
            rows = await _grouped(connection, where, group_by)
            total = (await connection.execute(where.apply(sa.select(*_sums())))).one()
        return rows, _numbers(dict(total._mapping))

    async def logs(
        self, where: SpendFilter, limit: int, cursor: str | None = None
    ) -> tuple[list[SpendRecord], str | None]:
        """Records newest first, at most ``limit``, after ``cursor``; and the cursor of the next
        page (None at the end). Raises :class:`ValueError` for a cursor this never made."""
        await self._database.open()
        query = where.apply(spend.select())
        if cursor is not None:
            moment, record_id = decode_cursor(cursor)
            query = query.where(
                sa.or_(
                    spend.c.time < moment,
                    sa.and_(spend.c.time == moment, spend.c.id < record_id),
                )
            )
        query = query.order_by(spend.c.time.desc(), spend.c.id.desc()).limit(limit + 1)
        async with self._database.connect() as connection:
            rows = list(await connection.execute(query))
        records = [_record(row._mapping) for row in rows[:limit]]
        more = len(rows) > limit
        last = rows[limit - 1]._mapping if more else None
        return records, None if last is None else encode_cursor(last["time"], last["id"])

    async def key_usage(self, key_ids: Sequence[str]) -> dict[str, tuple[int, datetime]]:
        """``key id -> (nano-dollars ever charged, time of its newest record)`` for the keys of
        ``key_ids`` that have records (one grouped query over the key index)."""
        if not key_ids:
            return {}
        await self._database.open()
        query = (
            sa.select(
                spend.c.key_id,
                sa.func.coalesce(sa.func.sum(spend.c.cost_nanos), 0),
                sa.func.max(spend.c.time),
            )
            .where(spend.c.key_id.in_(list(key_ids)))
            .group_by(spend.c.key_id)
        )
        async with self._database.connect() as connection:
            rows = await connection.execute(query)
            return {key_id: (int(nanos), _aware(last)) for key_id, nanos, last in rows}

    async def day_sums(
        self, since: datetime, limit_users: int
    ) -> list[tuple[BudgetScope, str, str, int]]:
        """``(scope, id, day, nanos)`` for every key, team and (the ``limit_users`` most recent)
        end user with spend since ``since``: what the budget counters are rebuilt from."""
        await self._database.open()
        found: list[tuple[BudgetScope, str, str, int]] = []
        async with self._database.connect() as connection:
            for scope, column in _KEY_AND_TEAM:
                found += await _per_day(connection, scope, column, since, None)
            recent = (
                sa.select(spend.c.end_user)
                .where(spend.c.time >= since, spend.c.end_user.is_not(None))
                .group_by(spend.c.end_user)
                .order_by(sa.func.max(spend.c.time).desc())
                .limit(limit_users)
            )
            found += await _per_day(connection, "user", spend.c.end_user, since, recent)
        return found

    async def lifetime_sums(self) -> list[tuple[BudgetScope, str, int]]:
        """``(scope, id, nanos)`` ever charged, for every key and team."""
        await self._database.open()
        found: list[tuple[BudgetScope, str, int]] = []
        async with self._database.connect() as connection:
            for scope, column in _KEY_AND_TEAM:
                query = (
                    sa.select(column, sa.func.coalesce(sa.func.sum(spend.c.cost_nanos), 0))
                    .where(column.is_not(None))
                    .group_by(column)
                )
                found += [
                    (scope, ident, int(nanos)) for ident, nanos in await connection.execute(query)
                ]
        return found

    async def scope_sums(
        self, scope: str, ident: str, since: datetime
    ) -> tuple[list[tuple[str, int]], int]:
        """One scope's ``(day, nanos)`` since ``since``, and its spend ever (``scope`` is
        ``key``, ``team`` or ``user``)."""
        await self._database.open()
        column = _SCOPES[scope]
        charged = sa.func.coalesce(sa.func.sum(spend.c.cost_nanos), 0)
        per_day = (
            sa.select(spend.c.day, charged)
            .where(column == ident, spend.c.time >= since)
            .group_by(spend.c.day)
        )
        async with self._database.connect() as connection:
            days = [(day, int(nanos)) for day, nanos in await connection.execute(per_day)]
            total = (await connection.execute(sa.select(charged).where(column == ident))).scalar()
        return days, int(total or 0)

    def _postgres_row(self, record: SpendRecord) -> tuple[Any, ...]:
        """The record as :data:`_POSTGRES_INSERT` takes it (a row of its columns): the time an
        aware UTC ``datetime``."""
        values = astuple(record)
        moment = datetime.fromtimestamp(record.time, UTC)
        return (moment, self._day(record.time), *values[:_TIME], *values[_TIME + 1 :])

    def _sqlite_row(self, record: SpendRecord) -> tuple[Any, ...]:
        """The record as a row of the SQLite insert (:func:`_insert_sqlite`): the time as
        SQLAlchemy keeps a :class:`~proxy.db.schema.UtcDateTime` in SQLite (naive UTC text,
        microseconds, rounded half to even as :meth:`datetime.fromtimestamp` rounds; the text of
        the second is kept from the record before, which is nearly always in the same one)."""
        values = astuple(record)
        timestamp = record.time
        second = int(timestamp)
        micros = round((timestamp - second) * 1e6)  # (exact: the whole seconds subtracted)
        if micros >= 1_000_000:
            second += 1
            micros -= 1_000_000
        kept_second, head = self._second
        if second != kept_second:
            head = f"{datetime.fromtimestamp(second, UTC):%Y-%m-%d %H:%M:%S}."
            self._second = (second, head)
        text = f"{head}{micros:06d}"
        return (text, self._day(timestamp), *values[:_TIME], *values[_TIME + 1 :])

    def _day(self, timestamp: float) -> str:
        day_number = int(timestamp // 86_400)
        day = self._days.get(day_number)
        if day is None:
            if len(self._days) > 64:
                self._days.clear()
            moment = datetime.fromtimestamp(day_number * 86_400, UTC)
            day = self._days[day_number] = moment.strftime("%Y-%m-%d")
        return day


async def _insert_sqlite(connection: AsyncConnection, rows: list[tuple[Any, ...]]) -> None:
    """Insert ``rows`` as statements of :data:`_SQLITE_GROUP` rows (one ``executemany``) and
    one of the rest (see the module docstring)."""
    grouped = len(rows) - len(rows) % _SQLITE_GROUP
    if grouped:
        groups = [
            tuple(chain.from_iterable(rows[start : start + _SQLITE_GROUP]))
            for start in range(0, grouped, _SQLITE_GROUP)
        ]
        await connection.exec_driver_sql(_SQLITE_INSERT_GROUP, groups)
    rest = rows[grouped:]
    if rest:
        await connection.exec_driver_sql(
            _sqlite_insert(len(rest)), tuple(chain.from_iterable(rest))
        )


async def _per_day(
    connection: AsyncConnection,
    scope: BudgetScope,
    column: sa.Column[Any],
    since: datetime,
    among: sa.Select[Any] | None,
) -> list[tuple[BudgetScope, str, str, int]]:
    query = (
        sa.select(column, spend.c.day, sa.func.coalesce(sa.func.sum(spend.c.cost_nanos), 0))
        .where(spend.c.time >= since, column.is_not(None))
        .group_by(column, spend.c.day)
    )
    if among is not None:
        query = query.where(column.in_(among.scalar_subquery()))
    rows = await connection.execute(query)
    return [(scope, ident, day, int(nanos)) for ident, day, nanos in rows]


async def _grouped(
    connection: AsyncConnection, where: SpendFilter, group_by: Sequence[Group]
) -> list[dict[str, Any]]:
    """Sums of the records ``where`` covers per ``group_by`` group, largest cost first."""
    keys = [GROUPS[name] for name in group_by]
    grouped = where.apply(
        sa.select(*(column.label(label) for label, column in keys), *_sums())
    ).group_by(*(column for _, column in keys))
    grouped = grouped.order_by(sa.desc("cost_nanos"), *(column for _, column in keys))
    return [_numbers(dict(row._mapping)) for row in await connection.execute(grouped)]


def _sums() -> list[sa.Label[Any]]:
    columns = [sa.func.count().label("requests")]
    columns += [sa.func.coalesce(sa.func.sum(spend.c[name]), 0).label(name) for name in _SUMMED]
    return columns


def _numbers(row: dict[str, Any]) -> dict[str, Any]:
    """Sums as Python numbers (:func:`~proxy.governance.ledger.rollup.summed`)."""
    for name in _SUM_NAMES:
        row[name] = summed(name, row[name])
    return row


def _aware(moment: datetime | str) -> datetime:
    """A ``max(time)``: SQLite gives it back as text, without the column's type."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _record(row: Any) -> SpendRecord:
    values = {field: row[_COLUMN.get(field, field)] for field in _RECORD_FIELDS}
    values["time"] = row["time"].timestamp()
    return SpendRecord(**values)


def encode_cursor(moment: datetime, record_id: str) -> str:
    """An opaque page cursor: the last record's time and id."""
    micros = round(moment.timestamp() * 1_000_000)
    return base64.urlsafe_b64encode(f"{micros}:{record_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The time and id in ``cursor``; raises :class:`ValueError` if it is not one."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        micros, record_id = text.split(":", 1)
        return datetime.fromtimestamp(int(micros) / 1_000_000, UTC), record_id
    except (binascii.Error, UnicodeDecodeError, ValueError, OverflowError):
        raise ValueError("not a cursor of this API") from None
