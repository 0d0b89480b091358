"""The ``keys`` table: virtual keys created over the admin API or the CLI, stored by hash."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping

from proxy.db import Database
from proxy.db.schema import keys, teams
from proxy.governance.auth.records import KeyRecord, TeamRecord
from proxy.governance.auth.teams_db import team_record
from proxy.governance.ledger.spend_db import decode_cursor, encode_cursor

KEY_FIELDS: tuple[str, ...] = (
    "alias",
    "team",
    "user",
    "models",
    "rpm",
    "tpm",
    "max_parallel",
    "blocked",
)
KEY_FIELDS += ("expires_at", "metadata", "budget", "request_logs", "mcp")
_COLUMN = {"user": "user_id"}  # record field -> column, where they differ
_TEAM_COLUMNS = [column.label(f"team_{column.name}") for column in teams.c]


class KeyFilter:
    """Which keys a page lists: of ``team``; whose alias, id, prefix or user contains
    ``text`` (case-insensitive); in ``status`` ``active``, ``blocked`` or ``expired`` (as of
    ``now``). Applies to database rows (:meth:`apply`) and to config records (:meth:`admits`)."""

    __slots__ = ("now", "status", "team", "text")

    def __init__(
        self,
        team: str | None = None,
        text: str | None = None,
        status: str | None = None,
        now: datetime | None = None,
    ) -> None:
        self.team = team
        self.text = text.lower() if text else None
        self.status = status
        self.now = now or datetime.now(UTC)

    def apply(self, query: sa.Select[Any]) -> sa.Select[Any]:
        """``query`` restricted to these keys."""
        if self.team is not None:
            query = query.where(keys.c.team == self.team)
        if self.text is not None:
            pattern = (
                "%" + self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            )
            query = query.where(
                sa.or_(
                    *(
                        sa.func.lower(column).like(pattern, escape="\\")
                        for column in (keys.c.alias, keys.c.id, keys.c.key_prefix, keys.c.user_id)
                    )
                )
            )
        expired = sa.and_(keys.c.expires_at.is_not(None), keys.c.expires_at <= self.now)
        if self.status == "blocked":
            query = query.where(keys.c.blocked.is_(True))
        elif self.status == "expired":
            query = query.where(expired)
        elif self.status == "active":
            query = query.where(keys.c.blocked.is_(False), sa.not_(expired))
        return query

    def admits(self, record: KeyRecord) -> bool:
        """Whether ``record`` is one of these keys."""
        if self.team is not None and record.team != self.team:
            return False
        if self.text is not None:
            fields = (record.alias, record.id, record.key_prefix, record.user)
            if not any(self.text in field.lower() for field in fields if field):
                return False
        expired = record.expires_at is not None and record.expires_at <= self.now
        if self.status == "blocked":
            return record.blocked
        if self.status == "expired":
            return expired
        if self.status == "active":
            return not record.blocked and not expired
        return True


class KeyRepository:
    """Reads and writes key records; every method is one transaction.

    Raises :class:`sqlalchemy.exc.IntegrityError` when an id or hash is taken, and what the
    driver raises when the database cannot answer (the caller bounds and maps it).
    """

    def __init__(self, database: Database) -> None:
        self._database = database

    async def insert(self, record: KeyRecord, key_hash: str) -> None:
        """Store a new key under its hash."""
        values = {_COLUMN.get(f, f): getattr(record, f) for f in KEY_FIELDS}
        async with self._database.connect() as connection:
            await connection.execute(
                keys.insert().values(
                    id=record.id,
                    key_hash=key_hash,
                    key_prefix=record.key_prefix,
                    created_at=record.created_at,
                    updated_at=record.created_at,
                    **values,
                )
            )

    async def get(self, key_id: str) -> KeyRecord | None:
        """The key ``key_id``, or None."""
        async with self._database.connect() as connection:
            row = (await connection.execute(keys.select().where(keys.c.id == key_id))).first()
        return None if row is None else key_record(row._mapping)

    async def by_hash(self, key_hash: str) -> tuple[KeyRecord, TeamRecord | None] | None:
        """The key stored under ``key_hash`` and its team (None when it has none, or its team
        is not in the database), or None: one query."""
        query = (
            sa.select(keys, *_TEAM_COLUMNS)
            .select_from(keys.outerjoin(teams, keys.c.team == teams.c.id))
            .where(keys.c.key_hash == key_hash)
        )
        async with self._database.connect() as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            return None
        mapping = row._mapping
        team = None
        if mapping["team_id"] is not None:
            team = team_record({c.name: mapping[f"team_{c.name}"] for c in teams.c})
        return key_record(mapping), team

    async def list(self, team: str | None = None) -> list[KeyRecord]:
        """Every key (of ``team`` when given), oldest first."""
        query = keys.select().order_by(keys.c.created_at, keys.c.id)
        if team is not None:
            query = query.where(keys.c.team == team)
        async with self._database.connect() as connection:
            rows = await connection.execute(query)
        return [key_record(row._mapping) for row in rows]

    async def page(
        self, where: KeyFilter, limit: int, cursor: str | None = None
    ) -> tuple[builtins.list[KeyRecord], str | None, int]:  # ``list`` is the method above
        """Keys ``where`` selects, newest first, at most ``limit`` after ``cursor``; the cursor
        of the next page (None at the end) and how many keys ``where`` selects in all. Raises
        :class:`ValueError` for a cursor this never made."""
        query = where.apply(keys.select())
        if cursor is not None:
            moment, key_id = decode_cursor(cursor)
            query = query.where(
                sa.or_(
                    keys.c.created_at < moment,
                    sa.and_(keys.c.created_at == moment, keys.c.id < key_id),
                )
            )
        query = query.order_by(keys.c.created_at.desc(), keys.c.id.desc()).limit(limit + 1)
        count = where.apply(sa.select(sa.func.count()).select_from(keys))
        async with self._database.connect() as connection:
            rows = list(await connection.execute(query))
            total = int((await connection.execute(count)).scalar_one())
        records = [key_record(row._mapping) for row in rows[:limit]]
        if len(rows) <= limit:
            return records, None, total
        last = records[-1]
        return records, encode_cursor(last.created_at, last.id), total

    async def count_in_team(self, team: str) -> int:
        """How many keys belong to ``team``."""
        query = sa.select(sa.func.count()).select_from(keys).where(keys.c.team == team)
        async with self._database.connect() as connection:
            return int((await connection.execute(query)).scalar_one())

    async def update(self, key_id: str, changes: Mapping[str, Any]) -> tuple[KeyRecord, str] | None:
        """Apply ``changes`` (fields of :data:`KEY_FIELDS`); the changed key and its hash (for
        cache invalidation), or None when there is no such key."""
        values = {_COLUMN.get(f, f): value for f, value in changes.items()}
        async with self._database.connect() as connection:
            await connection.execute(
                keys.update()
                .where(keys.c.id == key_id)
                .values(updated_at=datetime.now(UTC), **values)
            )
            row = (await connection.execute(keys.select().where(keys.c.id == key_id))).first()
        return None if row is None else (key_record(row._mapping), row._mapping["key_hash"])

    async def delete(self, key_id: str) -> str | None:
        """Remove the key; its hash (for cache invalidation), or None when there was none."""
        async with self._database.connect() as connection:
            row = (
                await connection.execute(
                    keys.delete().where(keys.c.id == key_id).returning(keys.c.key_hash)
                )
            ).first()
        return None if row is None else row[0]


def key_record(row: RowMapping | Mapping[str, Any]) -> KeyRecord:
    """A stored row as a record (the hash stays behind)."""
    return KeyRecord(
        id=row["id"],
        alias=row["alias"],
        key_prefix=row["key_prefix"],
        team=row["team"],
        user=row["user_id"],
        models=row["models"],
        rpm=row["rpm"],
        tpm=row["tpm"],
        max_parallel=row["max_parallel"],
        blocked=bool(row["blocked"]),
        expires_at=row["expires_at"],
        metadata=row["metadata"],
        created_at=row["created_at"],
        budget=row["budget"],
        request_logs=row.get("request_logs"),
        mcp=row["mcp"],
    )
