"""Virtual keys and teams."""

import sqlalchemy as sa
from alembic import op

from proxy.db.schema import UtcDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``teams`` and ``keys``."""
    op.create_table(
        "teams",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("models", sa.JSON, nullable=True),
        sa.Column("rpm", sa.Integer, nullable=True),
        sa.Column("tpm", sa.BigInteger, nullable=True),
        sa.Column("max_parallel", sa.Integer, nullable=True),
        sa.Column("metadata", sa.JSON, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("key_prefix", sa.String(16), nullable=False),
        sa.Column("alias", sa.String(128), nullable=True),
        sa.Column("team", sa.String(64), nullable=True),
        sa.Column("user_id", sa.String(256), nullable=True),
        sa.Column("models", sa.JSON, nullable=True),
        sa.Column("rpm", sa.Integer, nullable=True),
        sa.Column("tpm", sa.BigInteger, nullable=True),
        sa.Column("max_parallel", sa.Integer, nullable=True),
        sa.Column("blocked", sa.Boolean, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=True),
        sa.Column("metadata", sa.JSON, nullable=True),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_keys_team", "keys", ["team"])


def downgrade() -> None:
    """Drop them."""
    op.drop_index("ix_keys_team", "keys")
    op.drop_table("keys")
    op.drop_table("teams")
