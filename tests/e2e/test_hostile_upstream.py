"""A hostile upstream against every client dialect: what it says is sanitised and bounded.

The upstream (:mod:`tests.e2e.hostile_upstream`) echoes the gateway's provider key in every
field of its errors and sends a 200,000-character ``code``; it also answers with replies and
stream events far larger than any limit, plain and gzip-compressed.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.hostile_upstream import HostileUpstream
from tests.proxy.dialects.adapters import load_adapters
from tests.proxy.dialects.adapters.gateway import post

ADAPTERS = load_adapters()
MAX_ERROR_BODY = 4096  # a sanitised error: message ≤ 1000, other fields ≤ 256, plus framing
MAX_RESPONSE_BYTES = 1024 * 1024
MAX_EVENT_BYTES = 256 * 1024


class Gateway:
    def __init__(self, url: str, logs: io.StringIO, upstream: HostileUpstream) -> None:
        self.url = url
        self.logs = logs
        self.upstream = upstream


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    upstream = HostileUpstream()
    upstream_runner, upstream_url = await start_site(upstream.app())
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"""
server: {{access_log: true}}
providers:
  openai:
    type: openai
    base_url: "{upstream_url}/v1"
    api_key: "{UPSTREAM_KEY}"
    max_response_bytes: {MAX_RESPONSE_BYTES}
    max_event_bytes: {MAX_EVENT_BYTES}
    timeouts: {{first_byte: 10, idle: 10, total: 20}}
"""
    )
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    try:
        yield Gateway(url, logs, upstream)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()


def _assert_clean_logs(logs: io.StringIO) -> None:
    text = logs.getvalue()
    assert UPSTREAM_KEY not in text
    assert text, "the request was logged"
    for line in text.splitlines():
        assert len(line) < 2 * MAX_ERROR_BODY, line[:200]


@pytest.mark.parametrize(("model", "status"), [("leak-400", 400), ("leak-500", 502)])
@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_every_field_of_an_upstream_error_is_redacted_and_capped(
    gateway: Gateway, dialect: str, model: str, status: int
) -> None:
    adapter = ADAPTERS[dialect]
    path, body = adapter.request(f"openai/{model}", "Hi", stream=False)
    answer = await post(gateway.url, path, body)
    assert answer.status == status, answer.body[:300]
    assert UPSTREAM_KEY.encode() not in answer.body
    assert len(answer.body) < MAX_ERROR_BODY
    assert "[REDACTED]" in adapter.read_error(answer.status, answer.json())
    _assert_clean_logs(gateway.logs)


@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_every_field_of_a_streamed_upstream_error_is_redacted_and_capped(
    gateway: Gateway, dialect: str
) -> None:
    adapter = ADAPTERS[dialect]
    path, body = adapter.request("openai/leak-stream", "Hi", stream=True)
    answer = await post(gateway.url, path, body)
    assert answer.status == 200
    assert UPSTREAM_KEY.encode() not in answer.body
    outcome = adapter.read_stream(answer.body)
    assert outcome.text == "fine", "what came before the error still reached the client"
    assert outcome.error is not None
    assert "[REDACTED]" in outcome.error
    error_frame = answer.body.rsplit(b"\n\n", 2)[-2]
    assert len(error_frame) < MAX_ERROR_BODY
    _assert_clean_logs(gateway.logs)


@pytest.mark.parametrize("model", ["gzip-bomb", "huge"])
@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_a_reply_past_max_response_bytes_is_a_502_upstream_response_too_large(
    gateway: Gateway, dialect: str, model: str
) -> None:
    adapter = ADAPTERS[dialect]
    path, body = adapter.request(f"openai/{model}", "Hi", stream=False)
    answer = await post(gateway.url, path, body)
    assert answer.status == 502, answer.body[:300]
    message = adapter.read_error(502, answer.json())
    assert f"larger than the {MAX_RESPONSE_BYTES}-byte limit" in message
    assert _error_codes(gateway.logs) == ["upstream_response_too_large"]


@pytest.mark.parametrize("model", ["huge-event", "gzip-huge-event"])
@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_a_stream_event_past_max_event_bytes_ends_the_stream_in_band(
    gateway: Gateway, dialect: str, model: str
) -> None:
    adapter = ADAPTERS[dialect]
    path, body = adapter.request(f"openai/{model}", "Hi", stream=True)
    answer = await post(gateway.url, path, body)
    assert answer.status == 200
    assert len(answer.body) < 64 * 1024, "the oversized event never reached the client"
    outcome = adapter.read_stream(answer.body)
    assert outcome.text == "fine"
    assert outcome.error is not None
    assert f"larger than the {MAX_EVENT_BYTES}-byte limit" in outcome.error
    assert _error_codes(gateway.logs) == ["upstream_response_too_large"]


def _error_codes(logs: io.StringIO) -> list[str]:
    return [
        json.loads(line).get("error_code", "")
        for line in logs.getvalue().splitlines()
        if json.loads(line).get("event") == "request"
    ]
