"""Migration 0013: the batches that had already ended get their ``ended_at`` from their stored
object (so that retention finds them); those still running get none; the downgrade undoes it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

import proxy.db
from proxy.db.schema import batches

MIGRATIONS = Path(proxy.db.__file__).parent / "migrations"


def migrate(connection: sa.Connection, revision: str, *, down: bool = False) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    (command.downgrade if down else command.upgrade)(config, revision)


def insert_batch(connection: sa.Connection, batch_id: str, status: str, **stamps: int) -> None:
    body = {"id": batch_id, "status": status, "created_at": 100, **stamps}
    connection.execute(
        sa.text(
            "INSERT INTO batches (id, owner, team, endpoint, principal, body, status)"
            " VALUES (:id, 'k', NULL, '/v1/chat/completions', :principal, :body, :status)"
        ),
        {"id": batch_id, "principal": b"{}", "body": json.dumps(body).encode(), "status": status},
    )


def test_ended_batches_get_their_ended_at(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/migrate.db")
    with engine.begin() as connection:
        migrate(connection, "0012")
        insert_batch(connection, "batch_done", "completed", completed_at=2_000)
        insert_batch(connection, "batch_expired", "expired", expired_at=3_000)
        insert_batch(connection, "batch_failed", "failed", failed_at=150)
        insert_batch(connection, "batch_running", "in_progress")
        migrate(connection, "0013")
        rows = connection.execute(sa.select(batches.c.id, batches.c.ended_at)).all()
        ended = {row.id: row.ended_at for row in rows}
        migrate(connection, "0012", down=True)
        columns = [c["name"] for c in sa.inspect(connection).get_columns("batches")]
    engine.dispose()

    def at(seconds: int) -> datetime:
        return datetime.fromtimestamp(seconds, UTC)

    assert ended == {
        "batch_done": at(2_000),
        "batch_expired": at(3_000),
        "batch_failed": at(150),
        "batch_running": None,
    }
    assert not {"ended_at", "output_expires_after"} & set(columns)
