"""The spend ledger, and budgets on keys and teams."""

import sqlalchemy as sa
from alembic import op

from proxy.db.schema import BudgetJSON, UtcDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``spend``; add ``budget`` to ``keys`` and ``teams``."""
    with op.batch_alter_table("keys") as batch:
        batch.add_column(sa.Column("budget", BudgetJSON, nullable=True))
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("budget", BudgetJSON, nullable=True))
    op.create_table(
        "spend",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("time", UtcDateTime, nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=True),
        sa.Column("key_alias", sa.String(128), nullable=True),
        sa.Column("team", sa.String(64), nullable=True),
        sa.Column("end_user", sa.String(256), nullable=True),
        sa.Column("dialect", sa.String(32), nullable=False),
        sa.Column("model", sa.String(256), nullable=True),
        sa.Column("provider", sa.String(64), nullable=True),
        sa.Column("upstream_model", sa.String(256), nullable=True),
        sa.Column("input_tokens", sa.BigInteger, nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger, nullable=False),
        sa.Column("output_tokens", sa.BigInteger, nullable=False),
        sa.Column("reasoning_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_nanos", sa.BigInteger, nullable=True),
        sa.Column("cost_source", sa.String(16), nullable=True),
        sa.Column("saved_nanos", sa.BigInteger, nullable=True),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("ttft_ms", sa.Float, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("fallback", sa.String(256), nullable=True),
        sa.Column("cache", sa.String(8), nullable=True),
    )
    op.create_index("ix_spend_time", "spend", ["time"])
    op.create_index("ix_spend_key_time", "spend", ["key_id", "time"])
    op.create_index("ix_spend_team_time", "spend", ["team", "time"])


def downgrade() -> None:
    """Drop them."""
    op.drop_index("ix_spend_team_time", "spend")
    op.drop_index("ix_spend_key_time", "spend")
    op.drop_index("ix_spend_time", "spend")
    op.drop_table("spend")
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("budget")
    with op.batch_alter_table("keys") as batch:
        batch.drop_column("budget")
