"""The ``telemetry.request_logs`` section: which requests keep their payloads, for how long, and
where else their records go.

``store`` is the global default — ``none`` (no record), ``metadata`` (who, what model, status,
timing, tokens, cost; no payload) or ``payloads`` (the metadata and the request and answer, after
masking and with every secret redacted) — which a key's or a team's own ``request_logs`` setting
replaces (the key's wins over its team's). ``retention_days`` is how long a record is kept in the
database; ``max_payload_bytes`` bounds each stored payload (the request, the answer), a longer
one being cut and marked ``truncated``. ``max_queue`` bounds the records waiting for the database
(the writer's queue; the rest are dropped, counted and logged). ``journal_dir`` is where records
wait while the database is down (default: ``request-log-journal`` beside the spend ledger's
journal). ``jsonl`` and ``otlp`` export the same records to a JSON-lines file and to an OTLP/HTTP
logs endpoint (:mod:`proxy.request_logs.sinks`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

StoreMode = Literal["none", "metadata", "payloads"]
"""What is kept of a request: nothing, its metadata, or its metadata and payloads."""


class JsonlSinkConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A JSON-lines file that every record is appended to (one JSON object a line).
    ``max_buffer`` records wait at most for the file; more are dropped, counted."""

    path: Annotated[str, Meta(min_length=1)]
    max_buffer: Annotated[int, Meta(ge=1, le=1_000_000)] = 10_000


class OtlpSinkConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An OTLP/HTTP logs endpoint (``http://collector:4318/v1/logs``) that every record is sent
    to as a log record, with ``headers`` (an ingestion key) on each export. ``max_buffer``
    records wait at most for it; more are dropped, counted. ``timeout`` bounds one export."""

    endpoint: Annotated[str, Meta(pattern="^https?://")]
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    max_buffer: Annotated[int, Meta(ge=1, le=1_000_000)] = 10_000
    timeout: Annotated[float, Meta(gt=0, le=60)] = 5.0
    service_name: str = "crossway"


class RequestLogsConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring."""

    store: StoreMode = "none"
    retention_days: Annotated[int, Meta(ge=1, le=3650)] = 30
    max_payload_bytes: Annotated[int, Meta(ge=256, le=16 * 1024 * 1024)] = 64 * 1024
    max_queue: Annotated[int, Meta(ge=1, le=1_000_000)] = 10_000
    journal_dir: str | None = None
    jsonl: JsonlSinkConfig | None = None
    otlp: OtlpSinkConfig | None = None

    @property
    def exports(self) -> bool:
        """Whether records go anywhere besides the database."""
        return self.jsonl is not None or self.otlp is not None
