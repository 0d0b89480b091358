"""Daily sums of the spend ledger (proxy/governance/ledger/rollup.py), filled as days end."""

import sqlalchemy as sa
from alembic import op

from proxy.db.schema import UtcDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_SUMS: tuple[str, ...] = ("requests", "input_tokens", "cache_read_tokens", "cache_write_tokens")
_SUMS += ("output_tokens", "reasoning_tokens", "cost_nanos", "saved_nanos")


def _sums() -> list[sa.Column[int]]:
    return [sa.Column(name, sa.BigInteger, nullable=False) for name in _SUMS]


def upgrade() -> None:
    """Create ``spend_by_day``, ``spend_by_key_day`` and ``spend_rolled_days`` (empty: days are
    rolled up from the records when first needed)."""
    op.create_table(
        "spend_by_day",
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("team", sa.String(64), primary_key=True),
        sa.Column("model", sa.String(256), primary_key=True),
        sa.Column("provider", sa.String(64), primary_key=True),
        *_sums(),
    )
    op.create_table(
        "spend_by_key_day",
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("key_id", sa.String(40), primary_key=True),
        sa.Column("team", sa.String(64), primary_key=True),
        *_sums(),
    )
    op.create_table(
        "spend_rolled_days",
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("rolled_at", UtcDateTime, nullable=False),
    )


def downgrade() -> None:
    """Drop the rollups (the records keep everything)."""
    for table in ("spend_rolled_days", "spend_by_key_day", "spend_by_day"):
        op.drop_table(table)
