"""The spend ledger records the guardrails plugin's verdicts of each request."""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``spend.guardrails`` (JSON text: ``[{check, phase, verdict}]``; null: none ran)."""
    op.add_column("spend", sa.Column("guardrails", sa.Text, nullable=True))


def downgrade() -> None:
    """Drop ``spend.guardrails``."""
    op.drop_column("spend", "guardrails")
