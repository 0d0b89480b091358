"""The database schema as SQLAlchemy Core tables: what the repositories query.

The tables here describe the schema at the newest migration (``proxy/db/migrations``): a
change is a new migration plus the matching change here. Types are portable between SQLite and
PostgreSQL: JSON columns, strings with lengths, and :class:`UtcDateTime`, which stores
timezone-aware UTC instants on both.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from proxy.core.canonical import Budget

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

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """The stored instant, aware, in UTC (``impl``, a DateTime, has parsed SQLite's text)."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class BudgetJSON(sa.types.TypeDecorator[Budget]):
    """A :class:`~proxy.core.canonical.Budget` kept as a JSON object."""

    impl = sa.JSON
    cache_ok = True

    def process_bind_param(self, value: Budget | None, dialect: Dialect) -> Any:
        """The budget as a JSON-ready mapping."""
        return None if value is None else msgspec.to_builtins(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Budget | None:
        """The stored mapping as a budget."""
        return None if value is None else msgspec.convert(value, Budget)


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
    sa.Column("budget", BudgetJSON, nullable=True),
    sa.Column("request_logs", sa.String(16), nullable=True),  # none|metadata|payloads; null: config
    sa.Column("mcp", sa.JSON, nullable=True),  # MCP servers and tools allowed
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
    sa.Column("budget", BudgetJSON, nullable=True),
    sa.Column("request_logs", sa.String(16), nullable=True),  # none|metadata|payloads; null: config
    sa.Column("mcp", sa.JSON, nullable=True),  # MCP servers and tools allowed
)

# The spend ledger: one row per request (proxy/governance/ledger/spend_db.py). Money in integer
# nano-dollars; ``day`` (UTC, YYYY-MM-DD) is stored so that grouping by day is the same on every
# engine.
spend = sa.Table(
    "spend",
    METADATA,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("request_id", sa.String(128), nullable=False),
    sa.Column("time", UtcDateTime, nullable=False),
    sa.Column("day", sa.String(10), nullable=False),
    sa.Column("key_id", sa.String(40), nullable=True),
    sa.Column("key_alias", sa.String(128), nullable=True),
    sa.Column("team", sa.String(64), nullable=True),
    sa.Column("end_user", sa.String(256), nullable=True),
    sa.Column("dialect", sa.String(32), nullable=False),
    sa.Column("model", sa.String(256), nullable=True),
    sa.Column("provider", sa.String(64), nullable=True),
    sa.Column("upstream_model", sa.String(256), nullable=True),
    sa.Column("input_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_read_tokens", sa.BigInteger, nullable=False),
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False),
    sa.Column("output_tokens", sa.BigInteger, nullable=False),
    sa.Column("reasoning_tokens", sa.BigInteger, nullable=False),
    sa.Column("cost_nanos", sa.BigInteger, nullable=True),
    sa.Column("cost_source", sa.String(16), nullable=True),
    sa.Column("saved_nanos", sa.BigInteger, nullable=True),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("error_code", sa.String(64), nullable=True),
    sa.Column("duration_ms", sa.Float, nullable=False),
    sa.Column("ttft_ms", sa.Float, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("fallback", sa.String(256), nullable=True),
    sa.Column("cache", sa.String(8), nullable=True),
    sa.Column("batch_id", sa.String(64), nullable=True),  # the batch a line of ran in
    sa.Column("guardrails", sa.Text, nullable=True),
    # An MCP tool call: the server, the tool and the bytes of its result
    sa.Column("mcp_server", sa.String(128), nullable=True),
    sa.Column("mcp_tool", sa.String(256), nullable=True),
    sa.Column("mcp_bytes", sa.BigInteger, nullable=True),
    # A media call's billed units (proxy.core.canonical.MediaUnits); null: none of that unit
    sa.Column("audio_seconds", sa.Float, nullable=True),
    sa.Column("characters", sa.BigInteger, nullable=True),
    sa.Column("images", sa.Integer, nullable=True),
    sa.Column("image_size", sa.String(32), nullable=True),
    sa.Column("image_quality", sa.String(32), nullable=True),
    sa.Column("search_units", sa.BigInteger, nullable=True),
    sa.Index("ix_spend_time", "time"),
    sa.Index("ix_spend_key_time", "key_id", "time"),
    sa.Index("ix_spend_team_time", "team", "time"),
)


# Daily sums of ``spend`` (proxy/governance/ledger/rollup.py): per day, team, model and provider;
# per day, key and team; and the days rolled up. A NULL group value is kept as ''.
def _sum_columns() -> list[sa.Column[Any]]:
    names: tuple[str, ...] = ("requests", "input_tokens", "cache_read_tokens", "cache_write_tokens")
    names += ("output_tokens", "reasoning_tokens", "cost_nanos", "saved_nanos")
    columns = [sa.Column(name, sa.BigInteger, nullable=False) for name in names]
    # media units billed (spend.audio_seconds …), summed
    columns.append(sa.Column("audio_seconds", sa.Float, nullable=False, server_default="0"))
    for name in ("characters", "images", "search_units"):
        columns.append(sa.Column(name, sa.BigInteger, nullable=False, server_default="0"))
    return columns


spend_by_day = sa.Table(
    "spend_by_day",
    METADATA,
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("team", sa.String(64), primary_key=True),
    sa.Column("model", sa.String(256), primary_key=True),
    sa.Column("provider", sa.String(64), primary_key=True),
    *_sum_columns(),
)

spend_by_key_day = sa.Table(
    "spend_by_key_day",
    METADATA,
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("key_id", sa.String(40), primary_key=True),
    sa.Column("team", sa.String(64), primary_key=True),
    *_sum_columns(),
)

spend_rolled_days = sa.Table(
    "spend_rolled_days",
    METADATA,
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("rolled_at", UtcDateTime, nullable=False),
)

responses = sa.Table(
    "responses",
    METADATA,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(128), nullable=True),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("messages", sa.LargeBinary, nullable=False),
    sa.Column("input", sa.LargeBinary, nullable=True),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False, index=True),
    sa.Column("expires_at", UtcDateTime, nullable=False, index=True),
    sa.Column("lease_until", UtcDateTime, nullable=True),
    sa.Index("ix_responses_owner", "owner", "created_at"),
    sa.Index("ix_responses_lease", "lease_until"),
)

chat_completions = sa.Table(
    "chat_completions",
    METADATA,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),  # creation order
    sa.Column("key", sa.String(512), nullable=False, unique=True),  # owner and id together
    sa.Column("id", sa.String(256), nullable=False),
    sa.Column("owner", sa.String(128), nullable=True),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("response_model", sa.Text, nullable=False),
    sa.Column("metadata", sa.LargeBinary, nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("messages", sa.LargeBinary, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("expires_at", UtcDateTime, nullable=False, index=True),
    sa.Index("ix_chat_completions_owner", "owner", "seq"),
)

# Files and batches (proxy/batches): a file's record, its contents in parts when kept in the
# database; a batch, and each of its input lines with its result once it ran.
batch_files = sa.Table(
    "batch_files",
    METADATA,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),  # creation order
    sa.Column("id", sa.String(64), nullable=False, unique=True),
    sa.Column("owner", sa.String(128), nullable=True),
    sa.Column("team", sa.String(64), nullable=True),
    sa.Column("filename", sa.String(256), nullable=False),
    sa.Column("purpose", sa.String(32), nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("complete", sa.Boolean, nullable=False),  # False while its upload runs
    sa.Column("expires_at", UtcDateTime, nullable=True),  # None: kept until deleted
    sa.Index("ix_batch_files_owner", "owner", "seq"),
    sa.Index("ix_batch_files_expires", "expires_at"),
)

batch_file_parts = sa.Table(
    "batch_file_parts",
    METADATA,
    sa.Column("file_id", sa.String(64), primary_key=True),
    sa.Column("part", sa.Integer, primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
)

batches = sa.Table(
    "batches",
    METADATA,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),  # creation order
    sa.Column("id", sa.String(64), nullable=False, unique=True),
    sa.Column("owner", sa.String(128), nullable=True),
    sa.Column("team", sa.String(64), nullable=True),
    sa.Column("endpoint", sa.String(64), nullable=False),  # /v1/messages: a message batch
    sa.Column("principal", sa.LargeBinary, nullable=False),  # who its lines run as (no key)
    sa.Column("body", sa.LargeBinary, nullable=False),  # the batch object as last written
    sa.Column("native", sa.LargeBinary, nullable=True),  # a provider's batch runs it (no key)
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("lease_until", UtcDateTime, nullable=True),  # held by the process running it
    sa.Column("ended_at", UtcDateTime, nullable=True),  # None: still to be taken to its end
    sa.Column("output_expires_after", sa.Integer, nullable=True),  # seconds its files are kept
    sa.Index("ix_batches_owner", "owner", "seq"),
    sa.Index("ix_batches_status", "status"),
    sa.Index("ix_batches_ended", "ended_at"),
)

batch_lines = sa.Table(
    "batch_lines",
    METADATA,
    sa.Column("batch_id", sa.String(64), primary_key=True),
    sa.Column("line", sa.Integer, primary_key=True),
    sa.Column("custom_id", sa.String(512), nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("result", sa.LargeBinary, nullable=True),  # None: not run yet
    sa.Column("failed", sa.Boolean, nullable=True),
    sa.Index("ix_batch_lines_pending", "batch_id", "failed", "line"),
)

# The request logs (proxy/request_logs/): one row per request kept, with its payloads under
# ``store: payloads`` (JSON text, bounded, after masking and secret redaction); pruned by age.
request_logs = sa.Table(
    "request_logs",
    METADATA,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("request_id", sa.String(256), nullable=False),
    sa.Column("time", UtcDateTime, nullable=False),
    sa.Column("store", sa.String(16), nullable=False),
    sa.Column("key_id", sa.String(40), nullable=True),
    sa.Column("key_alias", sa.String(128), nullable=True),
    sa.Column("team", sa.String(64), nullable=True),
    sa.Column("dialect", sa.String(32), nullable=False),
    sa.Column("model", sa.String(256), nullable=True),
    sa.Column("provider", sa.String(64), nullable=True),
    sa.Column("upstream_model", sa.String(256), nullable=True),
    sa.Column("stream", sa.Boolean, nullable=False),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("error_code", sa.String(64), nullable=True),
    sa.Column("duration_ms", sa.Float, nullable=False),
    sa.Column("upstream_ms", sa.Float, nullable=True),
    sa.Column("overhead_ms", sa.Float, nullable=False),
    sa.Column("ttft_ms", sa.Float, nullable=True),
    sa.Column("input_tokens", sa.BigInteger, nullable=True),
    sa.Column("output_tokens", sa.BigInteger, nullable=True),
    sa.Column("cost_nanos", sa.BigInteger, nullable=True),
    sa.Column("cache", sa.String(8), nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("trace_id", sa.String(32), nullable=True),
    sa.Column("request", sa.Text, nullable=True),
    sa.Column("response", sa.Text, nullable=True),
    sa.Column("truncated", sa.Boolean, nullable=False),
    sa.Index("ix_request_logs_time", "time"),
    sa.Index("ix_request_logs_request_id", "request_id"),
    sa.Index("ix_request_logs_key_time", "key_id", "time"),
    sa.Index("ix_request_logs_team_time", "team", "time"),
)
