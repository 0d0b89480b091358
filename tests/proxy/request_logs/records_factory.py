"""Request log records for the tests."""

from __future__ import annotations

from typing import Any

from proxy.request_logs.records import RequestLogRecord


def log_record(i: int = 0, **fields: Any) -> RequestLogRecord:
    """A plausible record, ``i`` in its ids; ``fields`` replace its values."""
    values: dict[str, Any] = dict(
        id=f"id-{i:04d}",
        request_id=f"req-{i}",
        time=1_800_000_000.0 + i,
        store="payloads",
        key_id="key_a",
        key_alias="alpha",
        team="eng",
        dialect="openai",
        model="chat",
        provider="up",
        upstream_model="echo",
        stream=False,
        status=200,
        error_code=None,
        duration_ms=12.5,
        upstream_ms=10.0,
        overhead_ms=2.5,
        ttft_ms=None,
        input_tokens=3,
        output_tokens=2,
        cost_nanos=7000,
        cache=None,
        attempts=1,
        trace_id=None,
        request='{"model":"chat"}',
        response='{"id":"x"}',
        truncated=False,
    )
    values.update(fields)
    return RequestLogRecord(**values)
