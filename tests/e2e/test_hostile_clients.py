"""Hostile client input against every dialect route: a clear 400, never a 500 or a traceback."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.app import create_app
from tests.e2e.conftest import start_site
from tests.proxy.dialects.adapters import load_adapters
from tests.proxy.dialects.adapters.gateway import MOCK_PROVIDERS, post

ADAPTERS = load_adapters()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[str, io.StringIO]]:
    path = tmp_path / "gateway.yaml"
    path.write_text(MOCK_PROVIDERS)
    logs = io.StringIO()
    runner, url = await start_site(create_app(path, log_stream=logs))
    try:
        yield url, logs
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("depth", [200, 1_000, 100_000])
@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_deeply_nested_json_is_a_400_invalid_json(
    gateway: tuple[str, io.StringIO], dialect: str, depth: int
) -> None:
    url, logs = gateway
    adapter = ADAPTERS[dialect]
    path, body = adapter.request("mock/echo", "Hi", stream=False)
    raw = body_with(body, b'"deep": ' + b"[" * depth + b"]" * depth)
    answer = await post(url, path, raw)
    assert answer.status == 400, answer.body[:300]
    assert "nest deeper than 128 levels" in adapter.read_error(400, answer.json())
    if b'"code"' in answer.body:  # Anthropic's error shape has no code
        assert b'"invalid_json"' in answer.body
    assert "Traceback" not in logs.getvalue()
    assert "unhandled_error" not in logs.getvalue()


def body_with(body: dict, member: bytes) -> bytes:
    """``body`` encoded as JSON with one more raw ``member`` (``"name": value``) first."""
    import json

    return b"{" + member + b"," + json.dumps(body).encode()[1:]


async def test_deeply_nested_json_is_a_400_on_the_count_tokens_route(
    gateway: tuple[str, io.StringIO],
) -> None:
    url, logs = gateway
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": "Hi"}]}
    raw = body_with(body, b'"deep": ' + b"[" * 5_000 + b"]" * 5_000)
    answer = await post(url, "/v1/messages/count_tokens", raw)
    assert answer.status == 400, answer.body[:300]
    assert "nest deeper than 128 levels" in answer.json()["error"]["message"]
    assert "Traceback" not in logs.getvalue()
