"""Background responses hold a lease while they run (what a restart's sweep reads)."""

import sqlalchemy as sa
from alembic import op

from proxy.db.schema import UtcDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add ``responses.lease_until`` (null: the record is not a running background response)."""
    op.add_column("responses", sa.Column("lease_until", UtcDateTime, nullable=True))
    op.create_index("ix_responses_lease", "responses", ["lease_until"])


def downgrade() -> None:
    """Drop ``responses.lease_until``."""
    op.drop_index("ix_responses_lease", "responses")
    op.drop_column("responses", "lease_until")
