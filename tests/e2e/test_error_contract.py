"""The error contract as docs/errors.md and the dialects' schemas state it, through the HTTP
server."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Running
from tests.proxy.dialects.adapters import load_adapters, sse_events
from tests.proxy.dialects.adapters.gateway import post, serve

ADAPTERS = load_adapters()
HELLO = [{"role": "user", "content": "Hi"}]


@pytest.fixture
async def mock_gateway(tmp_path: Path) -> AsyncIterator[str]:
    async with serve(tmp_path) as url:
        yield url


@pytest.mark.parametrize(
    ("upstream_status", "status", "code"),
    [
        (400, 400, "upstream_code"),  # a 4xx keeps its status and the upstream's code
        (404, 404, "upstream_code"),
        (401, 502, "upstream_auth_failed"),  # the gateway's key, not the client's
        (403, 502, "upstream_auth_failed"),
        (429, 429, "rate_limit_exceeded"),
        (500, 502, "upstream_error"),
        (502, 502, "upstream_error"),
        (503, 503, "upstream_overloaded"),
        (529, 503, "upstream_overloaded"),
    ],
)
async def test_upstream_errors_answer_the_status_and_code_of_the_readme_table(
    gateway: Running, upstream_status: int, status: int, code: str
) -> None:
    body = {"model": f"up/fail-{upstream_status}", "messages": HELLO}
    answer = await post(gateway.url, "/v1/chat/completions", body)
    assert answer.status == status
    assert answer.json()["error"]["code"] == code


async def test_fabro_request_ids_are_uuids_matching_the_header(mock_gateway: str) -> None:
    answer = await post(mock_gateway, "/api/v1/completions", {"model": "mock/echo"})
    assert answer.status == 400
    request_id = answer.json()["request_id"]
    assert str(uuid.UUID(request_id)) == request_id
    assert answer.headers["x-request-id"] == request_id


async def test_anthropic_streamed_error_frames_carry_the_request_id(mock_gateway: str) -> None:
    body = {"model": "mock/cut-2", "max_tokens": 50, "messages": HELLO, "stream": True}
    answer = await post(mock_gateway, "/v1/messages", body)
    assert answer.status == 200
    name, data = sse_events(answer.body)[-1]
    assert name == "error"
    assert json.loads(data)["request_id"] == answer.headers["request-id"]


@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_an_absurd_max_tokens_is_a_400_naming_the_field(
    mock_gateway: str, dialect: str
) -> None:
    adapter = ADAPTERS[dialect]
    path, body = adapter.request("mock/echo", "Hi", stream=False)
    field = "max_output_tokens" if dialect == "responses" else "max_tokens"
    raw = json.dumps(body).encode()[:-1] + f', "{field}": 10000000000000000000000}}'.encode()
    answer = await post(mock_gateway, path, raw)
    assert answer.status == 400, answer.body[:300]
    assert field in adapter.read_error(400, answer.json())
