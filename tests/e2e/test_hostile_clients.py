"""Hostile client input against every dialect route: a clear 400, never a 500 or a traceback."""

from __future__ import annotations

import gzip
import io
import json
import logging
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.server.app import create_app
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


GZIP = {"content-encoding": "gzip"}


@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_a_body_that_is_not_the_gzip_it_claims_is_a_400_in_the_dialects_shape(
    gateway: tuple[str, io.StringIO], dialect: str
) -> None:
    url, logs = gateway
    adapter = ADAPTERS[dialect]
    path, body = adapter.request("mock/echo", "Hi", stream=False)
    answer = await post(url, path, json.dumps(body).encode(), headers=GZIP)
    assert answer.status == 400, answer.body[:300]
    assert "not valid gzip data" in adapter.read_error(400, answer.json())
    if b'"code"' in answer.body:  # Anthropic's error shape has no code
        assert b'"invalid_content_encoding"' in answer.body
    assert "Traceback" not in logs.getvalue()
    assert "unhandled_error" not in logs.getvalue()


@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_a_gzip_body_is_inflated_by_the_gateway_and_answered(
    gateway: tuple[str, io.StringIO], dialect: str
) -> None:
    url, _ = gateway
    adapter = ADAPTERS[dialect]
    # "openai" (the mock under that name): Bifrost's schema names the providers it knows
    path, body = adapter.request("openai/echo", "Hi", stream=False)
    answer = await post(url, path, gzip.compress(json.dumps(body).encode()), headers=GZIP)
    assert answer.status == 200, answer.body[:300]
    assert "Hi" in adapter.read_response(answer.json()).text


@pytest.mark.parametrize(
    ("path", "shape"), [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")]
)
async def test_a_gzip_body_inflating_past_the_body_limit_is_a_413(
    gateway: tuple[str, io.StringIO], path: str, shape: str
) -> None:
    url, _ = gateway
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join(compressor.compress(b" " * 1024 * 1024) for _ in range(16))
    answer = await post(url, path, bomb + compressor.flush(), headers=GZIP)
    assert answer.status == 413, answer.body[:300]
    error = answer.json()["error"]
    assert "inflates past the 10485760-byte limit" in error["message"]
    assert error["type"] == "request_too_large" if shape == "anthropic" else "invalid_request_error"


@pytest.mark.parametrize("encoding", ["br", "zstd", "gzip, gzip", "compress"])
async def test_a_content_encoding_the_gateway_does_not_decode_is_a_415(
    gateway: tuple[str, io.StringIO], encoding: str
) -> None:
    url, _ = gateway
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": "Hi"}]}
    answer = await post(url, "/v1/chat/completions", body, headers={"content-encoding": encoding})
    assert answer.status == 415, answer.body[:300]
    assert answer.json()["error"]["code"] == "unsupported_content_encoding"


async def test_the_count_tokens_route_refuses_a_body_that_is_not_its_gzip(
    gateway: tuple[str, io.StringIO],
) -> None:
    url, _ = gateway
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": "Hi"}]}
    answer = await post(url, "/v1/messages/count_tokens", body, headers=GZIP)
    assert answer.status == 400, answer.body[:300]
    assert answer.json()["error"]["type"] == "invalid_request_error"


async def test_aiohttps_log_records_leave_redacted_through_the_gateways_log(
    gateway: tuple[str, io.StringIO],
) -> None:
    _, logs = gateway
    key = "sk-" + "a1b2c3d4" * 4  # a key shape the redactor knows
    try:
        raise ConnectionError(f"peer sent Authorization: Bearer {key}")
    except ConnectionError as error:
        logging.getLogger("aiohttp.server").error("Unhandled exception", exc_info=error)
    line = json.loads(logs.getvalue().splitlines()[-1])
    assert (line["logger"], line["event"], line["level"]) == (
        "aiohttp.server",
        "Unhandled exception",
        "error",
    )
    assert "ConnectionError: peer sent Authorization: [REDACTED]" in line["exception"]
    assert key not in logs.getvalue()
