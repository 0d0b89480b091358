"""The request logs' table, and the per-key and per-team ``request_logs`` mode."""

import sqlalchemy as sa
from alembic import op

from proxy.db.schema import UtcDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``request_logs``; add ``keys.request_logs`` and ``teams.request_logs`` (null: the
    config's mode)."""
    op.create_table(
        "request_logs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("request_id", sa.String(256), nullable=False),
        sa.Column("time", UtcDateTime, nullable=False),
        sa.Column("store", sa.String(16), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=True),
        sa.Column("key_alias", sa.String(128), nullable=True),
        sa.Column("team", sa.String(64), nullable=True),
        sa.Column("dialect", sa.String(32), nullable=False),
        sa.Column("model", sa.String(256), nullable=True),
        sa.Column("provider", sa.String(64), nullable=True),
        sa.Column("upstream_model", sa.String(256), nullable=True),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("upstream_ms", sa.Float, nullable=True),
        sa.Column("overhead_ms", sa.Float, nullable=False),
        sa.Column("ttft_ms", sa.Float, nullable=True),
        sa.Column("input_tokens", sa.BigInteger, nullable=True),
        sa.Column("output_tokens", sa.BigInteger, nullable=True),
        sa.Column("cost_nanos", sa.BigInteger, nullable=True),
        sa.Column("cache", sa.String(8), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=True),
        sa.Column("request", sa.Text, nullable=True),
        sa.Column("response", sa.Text, nullable=True),
        sa.Column("truncated", sa.Boolean, nullable=False),
    )
    op.create_index("ix_request_logs_time", "request_logs", ["time"])
    op.create_index("ix_request_logs_request_id", "request_logs", ["request_id"])
    op.create_index("ix_request_logs_key_time", "request_logs", ["key_id", "time"])
    op.create_index("ix_request_logs_team_time", "request_logs", ["team", "time"])
    op.add_column("keys", sa.Column("request_logs", sa.String(16), nullable=True))
    op.add_column("teams", sa.Column("request_logs", sa.String(16), nullable=True))


def downgrade() -> None:
    """Drop them."""
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("request_logs")
    with op.batch_alter_table("keys") as batch:
        batch.drop_column("request_logs")
    op.drop_table("request_logs")
