"""Batch retention and file expiry: when a file expires (``batch_files.expires_at``) and when a
batch ended (``batches.ended_at``), each indexed for the sweep that deletes what is old; how
long a batch's output files are to be kept (``batches.output_expires_after``)."""

from datetime import UTC, datetime

import msgspec
import sqlalchemy as sa
from alembic import op

from proxy.db.schema import UtcDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_ENDED = ("completed", "failed", "expired", "cancelled")
_STAMPS = ("completed_at", "expired_at", "cancelled_at", "failed_at")


def upgrade() -> None:
    """Add ``batch_files.expires_at`` and ``batches.ended_at`` with their indexes, and
    ``batches.output_expires_after``; the batches that already ended get their ``ended_at`` from
    their stored object."""
    op.add_column("batch_files", sa.Column("expires_at", UtcDateTime, nullable=True))
    op.create_index("ix_batch_files_expires", "batch_files", ["expires_at"])
    op.add_column("batches", sa.Column("ended_at", UtcDateTime, nullable=True))
    op.create_index("ix_batches_ended", "batches", ["ended_at"])
    op.add_column("batches", sa.Column("output_expires_after", sa.Integer, nullable=True))
    table = sa.table(
        "batches",
        sa.column("id", sa.String),
        sa.column("status", sa.String),
        sa.column("body", sa.LargeBinary),
        sa.column("ended_at", UtcDateTime),
    )
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(table.c.id, table.c.body).where(table.c.status.in_(_ENDED))
    ).all()
    for row in rows:
        body = msgspec.json.decode(bytes(row.body))
        stamp = next((body[key] for key in _STAMPS if body.get(key)), body.get("created_at"))
        if isinstance(stamp, int):
            ended = datetime.fromtimestamp(stamp, UTC)
            connection.execute(table.update().where(table.c.id == row.id).values(ended_at=ended))


def downgrade() -> None:
    """Drop ``batches.output_expires_after``, ``batches.ended_at``, ``batch_files.expires_at``
    and their indexes."""
    op.drop_column("batches", "output_expires_after")
    op.drop_index("ix_batches_ended", "batches")
    op.drop_column("batches", "ended_at")
    op.drop_index("ix_batch_files_expires", "batch_files")
    op.drop_column("batch_files", "expires_at")
