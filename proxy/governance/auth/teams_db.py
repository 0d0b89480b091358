"""The ``teams`` table: teams created over the admin API or the CLI."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import RowMapping

from proxy.db import Database
from proxy.db.schema import teams
from proxy.governance.auth.records import TeamRecord

TEAM_FIELDS = ("models", "rpm", "tpm", "max_parallel", "metadata", "budget", "request_logs", "mcp")


class TeamRepository:
    """Reads and writes team records; every method is one statement in one transaction.

    Raises :class:`sqlalchemy.exc.IntegrityError` when an id is taken, and what the driver
    raises when the database cannot answer (the caller bounds and maps it).
    """

    def __init__(self, database: Database) -> None:
        self._database = database

    async def insert(self, record: TeamRecord) -> None:
        """Store a new team."""
        values = {field: getattr(record, field) for field in TEAM_FIELDS}
        async with self._database.connect() as connection:
            await connection.execute(
                teams.insert().values(
                    id=record.id,
                    created_at=record.created_at,
                    updated_at=record.created_at,
                    **values,
                )
            )

    async def get(self, team_id: str) -> TeamRecord | None:
        """The team ``team_id``, or None."""
        async with self._database.connect() as connection:
            row = (await connection.execute(teams.select().where(teams.c.id == team_id))).first()
        return None if row is None else team_record(row._mapping)

    async def list(self) -> list[TeamRecord]:
        """Every team, by id."""
        async with self._database.connect() as connection:
            rows = await connection.execute(teams.select().order_by(teams.c.id))
        return [team_record(row._mapping) for row in rows]

    async def update(self, team_id: str, changes: Mapping[str, Any]) -> TeamRecord | None:
        """Apply ``changes`` (fields of :data:`TEAM_FIELDS`); the changed team, or None."""
        async with self._database.connect() as connection:
            await connection.execute(
                teams.update()
                .where(teams.c.id == team_id)
                .values(updated_at=datetime.now(UTC), **changes)
            )
            row = (await connection.execute(teams.select().where(teams.c.id == team_id))).first()
        return None if row is None else team_record(row._mapping)

    async def delete(self, team_id: str) -> bool:
        """Remove the team; whether it existed."""
        async with self._database.connect() as connection:
            result = await connection.execute(teams.delete().where(teams.c.id == team_id))
        return bool(result.rowcount)


def team_record(row: RowMapping | Mapping[str, Any]) -> TeamRecord:
    """A stored row as a record."""
    return TeamRecord(
        id=row["id"],
        models=row["models"],
        rpm=row["rpm"],
        tpm=row["tpm"],
        max_parallel=row["max_parallel"],
        metadata=row["metadata"],
        created_at=row["created_at"],
        budget=row["budget"],
        request_logs=row.get("request_logs"),
        mcp=row["mcp"],
    )
