"""Stored responses keep their request's input apart (what ``input_items`` lists)."""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``responses.input`` (null for responses stored before: they list no input)."""
    op.add_column("responses", sa.Column("input", sa.LargeBinary, nullable=True))


def downgrade() -> None:
    """Drop ``responses.input``."""
    op.drop_column("responses", "input")
