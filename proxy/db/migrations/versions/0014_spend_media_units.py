"""The spend ledger records the units a media call was billed (seconds, characters, images,
search units), not only their cost, and its daily rollups sum them."""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
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


_SUMMED = (
    ("audio_seconds", sa.Float),
    ("characters", sa.BigInteger),
    ("images", sa.BigInteger),
    ("search_units", sa.BigInteger),
)
_ROLLUPS = ("spend_by_day", "spend_by_key_day")


def upgrade() -> None:
    """Add the spend record's ``audio_seconds``, ``characters``, ``images``, ``image_size``,
    ``image_quality`` and ``search_units`` (null on a request that billed none of the unit),
    and their sums to the daily rollups; the days rolled up so far are forgotten, to be rolled
    up again (with the sums) the next time a total needs them."""
    for name, kind in _COLUMNS:
        op.add_column("spend", sa.Column(name, kind, nullable=True))
    for table in _ROLLUPS:
        for name, kind in _SUMMED:
            op.add_column(table, sa.Column(name, kind, nullable=False, server_default="0"))
    for table in (*_ROLLUPS, "spend_rolled_days"):
        op.execute(sa.text(f"DELETE FROM {table}"))


def downgrade() -> None:
    """Drop the columns :func:`upgrade` added."""
    for table in _ROLLUPS:
        for name, _ in reversed(_SUMMED):
            op.drop_column(table, name)
    for name, _ in reversed(_COLUMNS):
        op.drop_column("spend", name)
