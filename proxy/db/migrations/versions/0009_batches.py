"""Files and batches (``/v1/files``, ``/v1/batches``), and the batch a ledger record ran in."""

import sqlalchemy as sa
from alembic import op

from proxy.db.schema import UtcDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``batch_files``, ``batch_file_parts``, ``batches`` and ``batch_lines``; add
    ``spend.batch_id``."""
    op.create_table(
        "batch_files",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("team", sa.String(64), nullable=True),
        sa.Column("filename", sa.String(256), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("complete", sa.Boolean, nullable=False),
    )
    op.create_index("ix_batch_files_owner", "batch_files", ["owner", "seq"])
    op.create_table(
        "batch_file_parts",
        sa.Column("file_id", sa.String(64), primary_key=True),
        sa.Column("part", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "batches",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("team", sa.String(64), nullable=True),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("principal", sa.LargeBinary, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("native", sa.LargeBinary, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("lease_until", UtcDateTime, nullable=True),
    )
    op.create_index("ix_batches_owner", "batches", ["owner", "seq"])
    op.create_index("ix_batches_status", "batches", ["status"])
    op.create_table(
        "batch_lines",
        sa.Column("batch_id", sa.String(64), primary_key=True),
        sa.Column("line", sa.Integer, primary_key=True),
        sa.Column("custom_id", sa.String(512), nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("result", sa.LargeBinary, nullable=True),
        sa.Column("failed", sa.Boolean, nullable=True),
    )
    op.create_index("ix_batch_lines_pending", "batch_lines", ["batch_id", "failed", "line"])
    op.add_column("spend", sa.Column("batch_id", sa.String(64), nullable=True))


def downgrade() -> None:
    """Drop them."""
    op.drop_column("spend", "batch_id")
    op.drop_index("ix_batch_lines_pending", "batch_lines")
    op.drop_table("batch_lines")
    op.drop_index("ix_batches_status", "batches")
    op.drop_index("ix_batches_owner", "batches")
    op.drop_table("batches")
    op.drop_table("batch_file_parts")
    op.drop_index("ix_batch_files_owner", "batch_files")
    op.drop_table("batch_files")
