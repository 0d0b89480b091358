"""Export sinks: the same records the database keeps, sent on to a JSON-lines file and to an
OTLP/HTTP logs endpoint — without ever holding up a request.

An :class:`Exporter` gives one :class:`ExportSink` a bounded buffer (``max_buffer`` records) and a
task of its own: :meth:`Exporter.offer` (the request path) appends and returns at once; the
task sends what waits, up to :data:`BATCH` records at a time. A batch the sink refuses (it is
down, slow past its timeout, its disk full) stays at the front of the buffer and is tried again
after a pause that doubles from 0.5 s up to 30 s, the failure logged once per outage. A record
that finds the buffer full is dropped: counted in ``crossway_request_log_export_dropped_total
{sink}`` and logged (once per outage) — never silently. ``crossway_request_log_exported_total
{sink}`` counts what the sink took, ``crossway_request_log_export_buffered{sink}`` what waits.
:meth:`Exporter.close` tries once more to send what waits (within the sink's timeout), then
counts the rest as dropped.

Sinks: :class:`JsonlSink` appends one JSON object a line to a file (opened for each batch, so
that a rotated file is followed; blocking writes run in a thread), and :class:`OtlpSink` sends
OTLP log records with the OpenTelemetry SDK's ``OTLPLogExporter`` (HTTP/protobuf; blocking, run
in a thread): the metadata as attributes (``crossway.*``, and ``gen_ai.request.model`` /
``gen_ai.provider.name``), the payloads in the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from proxy.core.metrics import Metrics
from proxy.request_logs.config import JsonlSinkConfig, OtlpSinkConfig
from proxy.request_logs.records import RequestLogRecord

BATCH = 512
_FIRST_PAUSE = 0.5
_LONGEST_PAUSE = 30.0
_ENCODER = msgspec.json.Encoder()


class ExportSink(Protocol):
    """Where an :class:`Exporter` sends records. ``export`` sends a batch or raises (it may
    take up to ``timeout`` seconds; it is cancelled past that)."""

    name: str
    timeout: float

    async def export(self, records: Sequence[RequestLogRecord]) -> None:
        """Send ``records``; raise when they were not taken."""
        ...


class Exporter:
    """One sink's bounded buffer and task (see the module docstring). Use from one loop."""

    def __init__(self, sink: ExportSink, max_buffer: int, metrics: Metrics, logger: Any) -> None:
        self.sink = sink
        self.logger = logger
        self._max = max_buffer
        self._buffer: deque[RequestLogRecord] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._failing = False
        self._dropping = False
        self._exported = metrics.request_log_exported(sink.name)
        self._dropped = metrics.request_log_export_dropped(sink.name)
        self._buffered = metrics.request_log_export_buffered(sink.name)

    def offer(self, record: RequestLogRecord) -> None:
        """Queue ``record`` for the sink (never blocks, never raises); dropped, counted and
        logged when ``max_buffer`` records wait already."""
        if len(self._buffer) >= self._max or self._closing:
            self._drop(1, "the export buffer is full" if not self._closing else "closed")
            return
        self._buffer.append(record)
        self._buffered.inc()
        if self._dropping and len(self._buffer) < self._max // 2:
            self._dropping = False
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    @property
    def waiting(self) -> int:
        """Records waiting for the sink."""
        return len(self._buffer)

    async def close(self) -> None:
        """Stop the task; send what waits once more (within the sink's timeout), count the
        rest as dropped."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while self._buffer:
            if not await self._send():
                self._drop(len(self._buffer), "closing, and the sink does not take records")
                self._buffered.dec(len(self._buffer))
                self._buffer.clear()

    async def _run(self) -> None:
        pause = _FIRST_PAUSE
        while True:
            if not self._buffer:
                self._wake.clear()
                await self._wake.wait()
            if await self._send():
                pause = _FIRST_PAUSE
                continue
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LONGEST_PAUSE)

    async def _send(self) -> bool:
        """Send a batch from the buffer's front; whether the sink took it (then it leaves
        the buffer)."""
        buffer = self._buffer
        batch = [buffer[i] for i in range(min(BATCH, len(buffer)))]
        try:
            async with asyncio.timeout(self.sink.timeout):
                await self.sink.export(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # down, slow, full: the batch stays, tried again later
            if not self._failing:
                self._failing = True
                self.logger.warning(
                    "request_log_export_failed",
                    sink=self.sink.name,
                    reason=f"{type(exc).__name__}: {exc}"[:500],
                    waiting=len(buffer),
                )
            return False
        for _ in batch:
            buffer.popleft()
        self._buffered.dec(len(batch))
        self._exported.inc(len(batch))
        if self._failing:
            self._failing = False
            self.logger.info("request_log_export_recovered", sink=self.sink.name)
        return True

    def _drop(self, count: int, reason: str) -> None:
        self._dropped.inc(count)
        if not self._dropping:  # one line per outage, not per record
            self._dropping = True
            self.logger.error(
                "request_log_export_dropped", sink=self.sink.name, records=count, reason=reason
            )


class JsonlSink:
    """Appends each record as one JSON line to ``path`` (created 0600 with its directory)."""

    name = "jsonl"

    def __init__(self, config: JsonlSinkConfig) -> None:
        self.path = Path(config.path)
        self.timeout = 5.0

    async def export(self, records: Sequence[RequestLogRecord]) -> None:
        """Append ``records`` (in a thread); raises :class:`OSError` when the file cannot be
        written."""
        data = b"".join(_ENCODER.encode(record) + b"\n" for record in records)
        await asyncio.to_thread(self._append, data)

    def _append(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


class OtlpSink:
    """Sends records to an OTLP/HTTP logs endpoint with the SDK's ``OTLPLogExporter``."""

    name = "otlp"

    def __init__(self, config: OtlpSinkConfig) -> None:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.timeout = config.timeout
        self._exporter = OTLPLogExporter(
            endpoint=config.endpoint, headers=dict(config.headers), timeout=config.timeout
        )
        self._resource = Resource.create({"service.name": config.service_name})
        self._scope = InstrumentationScope("crossway.request_logs")

    async def export(self, records: Sequence[RequestLogRecord]) -> None:
        """Send ``records`` (in a thread); raises :class:`ConnectionError` when the endpoint
        did not take them."""
        from opentelemetry.sdk._logs.export import LogRecordExportResult

        batch = [self._log_record(record) for record in records]
        result = await asyncio.to_thread(self._exporter.export, batch)
        if result is not LogRecordExportResult.SUCCESS:
            raise ConnectionError("the OTLP logs endpoint did not take the batch")

    def _log_record(self, record: RequestLogRecord) -> Any:
        from opentelemetry._logs import LogRecord, SeverityNumber
        from opentelemetry.sdk._logs import ReadableLogRecord

        body: dict[str, Any] = {}
        if record.request is not None:
            body["request"] = record.request
        if record.response is not None:
            body["response"] = record.response
        return ReadableLogRecord(
            log_record=LogRecord(
                timestamp=int(record.time * 1_000_000_000),
                severity_number=SeverityNumber.ERROR
                if record.status >= 500
                else SeverityNumber.INFO,
                severity_text="ERROR" if record.status >= 500 else "INFO",
                event_name="crossway.request",
                body=body or None,
                attributes=otlp_attributes(record),
            ),
            resource=self._resource,
            instrumentation_scope=self._scope,
        )


def otlp_attributes(record: RequestLogRecord) -> dict[str, Any]:
    """The record's metadata as OTLP attributes (``crossway.*``, plus the GenAI conventions'
    model and provider names); fields that are None are left out."""
    attributes: dict[str, Any] = {}
    for name in RequestLogRecord.__struct_fields__:
        if name in ("request", "response"):
            continue
        value = getattr(record, name)
        if value is not None:
            attributes[f"crossway.{name}"] = value
    if record.model is not None:
        attributes["gen_ai.request.model"] = record.model
    if record.provider is not None:
        attributes["gen_ai.provider.name"] = record.provider
    return attributes
