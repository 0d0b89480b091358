"""The database schema as SQLAlchemy Core tables: what the repositories query.

The tables here describe the schema at the newest migration (``proxy/db/migrations``): a
change is a new migration plus the matching change here. Types are portable between SQLite and
PostgreSQL: JSON columns, strings with lengths, and :class:`UtcDateTime`, which stores
timezone-aware UTC instants on both.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

METADATA = sa.MetaData()
VERSION_TABLE = "crossway_schema_version"  # Alembic's record of the migrations applied


class UtcDateTime(sa.types.TypeDecorator[datetime]):
    """An aware UTC ``datetime`` in and out, whatever the engine keeps (SQLite keeps text
    without a zone). Naive datetimes are refused: their zone would be a guess."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Store ``value`` as UTC (naive on SQLite, whose DateTime has no zone)."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("UtcDateTime needs a timezone-aware datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """The stored instant, aware, in UTC."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


teams = sa.Table(
    "teams",
    METADATA,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("models", sa.JSON, nullable=True),
    sa.Column("rpm", sa.Integer, nullable=True),
    sa.Column("tpm", sa.BigInteger, nullable=True),
    sa.Column("max_parallel", sa.Integer, nullable=True),
    sa.Column("metadata", sa.JSON, nullable=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

keys = sa.Table(
    "keys",
    METADATA,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("key_prefix", sa.String(16), nullable=False),
    sa.Column("alias", sa.String(128), nullable=True),
    sa.Column("team", sa.String(64), nullable=True, index=True),
    sa.Column("user_id", sa.String(256), nullable=True),
    sa.Column("models", sa.JSON, nullable=True),
    sa.Column("rpm", sa.Integer, nullable=True),
    sa.Column("tpm", sa.BigInteger, nullable=True),
    sa.Column("max_parallel", sa.Integer, nullable=True),
    sa.Column("blocked", sa.Boolean, nullable=False, default=False),
    sa.Column("expires_at", UtcDateTime, nullable=True),
    sa.Column("metadata", sa.JSON, nullable=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

responses = sa.Table(
    "responses",
    METADATA,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(128), nullable=True),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("messages", sa.LargeBinary, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False, index=True),
    sa.Column("expires_at", UtcDateTime, nullable=False, index=True),
)
