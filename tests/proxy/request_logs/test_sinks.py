"""The export sinks' buffer: never blocks, drops (counted, logged) only when full, keeps a batch
the sink refused and sends it once the sink is back; the JSON-lines sink's file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import structlog
import structlog.testing

from proxy.core.metrics import Metrics
from proxy.request_logs.config import JsonlSinkConfig
from proxy.request_logs.records import RequestLogRecord
from proxy.request_logs.sinks import Exporter, JsonlSink, otlp_attributes
from tests.proxy.request_logs.records_factory import log_record
from tests.waiting import until


class FlakySink:
    """A sink that refuses while ``down`` is set, or waits on ``gate`` when given one."""

    name = "flaky"
    timeout = 5.0

    def __init__(self) -> None:
        self.down = False
        self.gate: asyncio.Event | None = None
        self.taken: list[str] = []

    async def export(self, records: Sequence[RequestLogRecord]) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise ConnectionError("refused")
        self.taken.extend(record.id for record in records)


def sample(metrics: Metrics, name: str) -> float:
    return metrics.registry.get_sample_value(name, {"sink": "flaky"}) or 0.0


async def test_a_full_buffer_drops_counts_and_logs_and_never_blocks() -> None:
    metrics, sink = Metrics(), FlakySink()
    sink.gate = asyncio.Event()  # the sink hangs: nothing leaves the buffer
    logger = structlog.get_logger()
    exporter = Exporter(sink, 3, metrics, logger)
    with structlog.testing.capture_logs() as logs:
        for i in range(5):
            exporter.offer(log_record(i))  # returns at once, even with the sink stuck
    assert exporter.waiting == 3
    assert sample(metrics, "crossway_request_log_export_dropped_total") == 2
    assert sample(metrics, "crossway_request_log_export_buffered") == 3
    assert [entry["event"] for entry in logs] == ["request_log_export_dropped"]  # once
    sink.gate.set()
    await until(lambda: len(sink.taken) == 3, what="the buffered records sent")
    assert sample(metrics, "crossway_request_log_exported_total") == 3
    await exporter.close()


async def test_a_refused_batch_is_kept_and_sent_once_the_sink_is_back() -> None:
    metrics, sink = Metrics(), FlakySink()
    sink.down = True
    exporter = Exporter(sink, 10, metrics, structlog.get_logger())
    with structlog.testing.capture_logs() as logs:
        exporter.offer(log_record(1))
        await until(
            lambda: any(e["event"] == "request_log_export_failed" for e in logs),
            what="the failure logged",
        )
        sink.down = False
        exporter.offer(log_record(2))
        await until(lambda: len(sink.taken) == 2, seconds=10, what="both sent")
    assert sink.taken == ["id-0001", "id-0002"]
    assert "request_log_export_recovered" in [entry["event"] for entry in logs]
    assert sample(metrics, "crossway_request_log_export_dropped_total") == 0
    await exporter.close()


async def test_closing_counts_what_the_sink_never_took() -> None:
    metrics, sink = Metrics(), FlakySink()
    sink.down = True
    exporter = Exporter(sink, 10, metrics, structlog.get_logger())
    exporter.offer(log_record(1))
    exporter.offer(log_record(2))
    await exporter.close()
    assert sample(metrics, "crossway_request_log_export_dropped_total") == 2
    assert sample(metrics, "crossway_request_log_export_buffered") == 0
    exporter.offer(log_record(3))  # after close: dropped, counted
    assert sample(metrics, "crossway_request_log_export_dropped_total") == 3


async def test_the_jsonl_sink_appends_one_record_a_line(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "requests.jsonl"
    sink = JsonlSink(JsonlSinkConfig(path=str(path)))
    await sink.export([log_record(1), log_record(2)])
    await sink.export([log_record(3)])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["id"] for line in lines] == ["id-0001", "id-0002", "id-0003"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_otlp_attributes_leave_payloads_and_nones_out() -> None:
    attributes = otlp_attributes(log_record(1, error_code=None))
    assert attributes["crossway.request_id"] == "req-1"
    assert attributes["gen_ai.request.model"] == "chat"
    assert attributes["gen_ai.provider.name"] == "up"
    assert "crossway.request" not in attributes
    assert "crossway.error_code" not in attributes
