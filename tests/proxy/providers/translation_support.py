"""Helpers for the table-driven provider translation tests (JSON fixtures, SSE in any split).

Fixtures live in ``tests/fixtures/<provider>/*.json``; each has a ``kind``:

- ``request``: ``call`` (a canonical call) and ``upstream_model`` in; ``expected_url`` and
  ``expected_body`` (the upstream JSON) out.
- ``response``: an upstream ``body`` and ``requested_model`` in; the canonical Response
  (``msgspec.to_builtins``) out as ``expected``.
- ``stream``: the recorded SSE bytes in the file named by ``sse``; the canonical chunks out as
  ``expected_chunks``, then ``expected_error`` (or null when the stream completes).
- ``error``: an upstream ``status``, ``headers`` and ``body`` (JSON, or text) in; ``expected``
  names the error class, client status, kind, retry hint and message.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from multidict import CIMultiDict

from proxy.core.canonical import Call, Message, Params
from proxy.core.errors import GatewayError
from proxy.core.sse import SSEDecoder, SSEEvent
from proxy.providers.base import StreamEnd, StreamParser

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SPLITS = [None, 1, 2, 7, 64]
"""Byte splits a stream is fed in: whole, then pieces of these sizes."""


def load_fixtures(provider: str, kind: str) -> list[Any]:
    """``pytest.param`` per fixture of ``kind`` under ``tests/fixtures/<provider>/``."""
    cases = []
    for path in sorted((FIXTURES / provider).glob("*.json")):
        fixture = json.loads(path.read_text(encoding="utf-8"))
        if fixture["kind"] == kind:
            fixture["_dir"] = str(path.parent)
            cases.append(pytest.param(fixture, id=path.stem))
    assert cases, f"no {kind} fixtures for {provider}"
    return cases


def call_from(spec: dict[str, Any]) -> Call:
    """A canonical call from a fixture's ``call`` object (``extra`` values become raw JSON)."""
    return Call(
        request_id="req-1",
        dialect="openai",
        model=spec["model"],
        messages=msgspec.convert(spec["messages"], list[Message]),
        stream=spec.get("stream", False),
        params=msgspec.convert(spec.get("params", {}), Params),
        extra={k: msgspec.Raw(json.dumps(v).encode()) for k, v in spec.get("extra", {}).items()},
    )


def strict_json(body: bytes) -> Any:
    """Parse ``body``, failing on duplicate keys (which parsers resolve inconsistently)."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        duplicated = sorted({key for key in keys if keys.count(key) > 1})
        assert not duplicated, f"duplicate JSON keys {duplicated} in {body!r}"
        return dict(pairs)

    return json.loads(body, object_pairs_hook=no_duplicates)


def sse_bytes(fixture: dict[str, Any]) -> bytes:
    return (Path(fixture["_dir"]) / fixture["sse"]).read_bytes()


def sse_events(data: bytes, split: int | None) -> list[SSEEvent]:
    """The events of ``data`` fed to :class:`SSEDecoder` in pieces of ``split`` bytes."""
    decoder = SSEDecoder()
    size = split or len(data)
    events: list[SSEEvent] = []
    for start in range(0, len(data), size):
        events += decoder.feed(data[start : start + size])
    return events + decoder.close()


def sse_events_at(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    """The events of ``data`` fed to :class:`SSEDecoder` in pieces cut at ``cuts`` (any ints)."""
    bounds = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for start, stop in itertools.pairwise(bounds):
        events += decoder.feed(data[start:stop])
    return events + decoder.close()


def run_stream(parser: StreamParser, events: list[SSEEvent]) -> tuple[list[Any], Exception | None]:
    """Chunks (as builtins) a parser makes of ``events`` and the end of body, and its error."""
    chunks: list[Any] = []
    try:
        for event in events:
            try:
                chunk = parser.parse_event(event.event, event.data)
            except StreamEnd:
                return chunks, None
            if chunk is not None:
                chunks.append(msgspec.to_builtins(chunk))
        last = parser.end()
        if last is not None:
            chunks.append(msgspec.to_builtins(last))
    except GatewayError as error:
        return chunks, error
    return chunks, None


def error_input(fixture: dict[str, Any]) -> tuple[int, CIMultiDict[str], bytes]:
    """``(status, headers, body)`` of an ``error`` fixture."""
    body = fixture["body"]
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    return fixture["status"], CIMultiDict(fixture["headers"]), raw


def assert_error(error: Exception | None, expected: dict[str, Any]) -> None:
    """``error`` is the class, status, kind, retry hint and message ``expected`` names."""
    assert isinstance(error, GatewayError), error
    assert type(error).__name__ == expected["class"]
    assert error.status == expected["status"]
    assert error.kind == expected["kind"]
    if "retry_after" in expected:
        assert error.retry_after == expected["retry_after"]
    if "message" in expected:
        assert error.message == expected["message"]
