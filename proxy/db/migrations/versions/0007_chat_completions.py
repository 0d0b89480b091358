"""Stored chat completions (``store: true`` on chat completions)."""

import sqlalchemy as sa
from alembic import op

from proxy.db.schema import UtcDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create ``chat_completions``."""
    op.create_table(
        "chat_completions",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(512), nullable=False, unique=True),
        sa.Column("id", sa.String(256), nullable=False),
        sa.Column("owner", sa.String(128), nullable=True),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column("response_model", sa.Text, nullable=False),
        sa.Column("metadata", sa.LargeBinary, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("messages", sa.LargeBinary, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_chat_completions_expires_at", "chat_completions", ["expires_at"])
    op.create_index("ix_chat_completions_owner", "chat_completions", ["owner", "seq"])


def downgrade() -> None:
    """Drop it."""
    op.drop_index("ix_chat_completions_owner", "chat_completions")
    op.drop_index("ix_chat_completions_expires_at", "chat_completions")
    op.drop_table("chat_completions")
