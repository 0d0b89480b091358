"""Stored responses by owner, oldest first: what the per-owner bound reads on every write."""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Index ``responses`` by owner and age."""
    op.create_index("ix_responses_owner", "responses", ["owner", "created_at"])


def downgrade() -> None:
    """Drop the index."""
    op.drop_index("ix_responses_owner", "responses")
