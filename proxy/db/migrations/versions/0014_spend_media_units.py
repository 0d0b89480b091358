"""The spend ledger records the units a media call was billed (seconds, characters, images,
search units), not only their cost."""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0012"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("audio_seconds", sa.Float),
    ("characters", sa.BigInteger),
    ("images", sa.Integer),
    ("image_size", sa.String(32)),
    ("image_quality", sa.String(32)),
    ("search_units", sa.BigInteger),
)


def upgrade() -> None:
    """Add the spend record's ``audio_seconds``, ``characters``, ``images``, ``image_size``,
    ``image_quality`` and ``search_units`` (null on a request that billed none of the unit)."""
    for name, kind in _COLUMNS:
        op.add_column("spend", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    """Drop the columns :func:`upgrade` added."""
    for name, _ in reversed(_COLUMNS):
        op.drop_column("spend", name)
