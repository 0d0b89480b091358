"""Stored Responses-API responses."""

import sqlalchemy as sa
from alembic import op

from proxy.db.schema import UtcDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``responses``."""
    op.create_table(
        "responses",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("messages", sa.LargeBinary, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_responses_created_at", "responses", ["created_at"])
    op.create_index("ix_responses_expires_at", "responses", ["expires_at"])


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_responses_expires_at", "responses")
    op.drop_index("ix_responses_created_at", "responses")
    op.drop_table("responses")
