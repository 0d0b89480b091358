"""The gateway's HTTP behaviour with a raw client: framing, faults, limits, metrics and logs."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, Running, start_site
from tests.e2e.fake_openai import RICH_ANNOTATIONS, burst_frames

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]


async def _post(gateway: Running, body: Any, path: str = CHAT, **kwargs: Any):
    async with aiohttp.ClientSession() as session:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with session.post(gateway.url + path, data=data, **kwargs) as response:
            return response.status, response.headers.copy(), await response.read()


def _frames(raw: bytes) -> list[bytes]:
    return [f.removeprefix(b"data: ") for f in raw.split(b"\n\n") if f]


async def test_stream_cut_mid_way_ends_with_an_error_frame_and_no_done(gateway: Running) -> None:
    status, headers, raw = await _post(
        gateway, {"model": "up/cut-stream", "messages": HELLO, "stream": True}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    frames = _frames(raw)
    assert b"[DONE]" not in frames
    last = json.loads(frames[-1])
    assert last["error"]["code"] == "upstream_unavailable"
    assert len(frames) == 3  # two content chunks, then the error frame


async def test_mock_stream_cut_and_stall(gateway: Running) -> None:
    _, _, raw = await _post(gateway, {"model": "mock/cut-3", "messages": HELLO, "stream": True})
    frames = _frames(raw)
    assert len(frames) == 4
    assert json.loads(frames[-1])["error"]["code"] == "upstream_unavailable"


async def test_ordinary_chunks_reach_an_openai_client_byte_for_byte(gateway: Running) -> None:
    # The upstream sends its whole stream in one write: its content frames are relayed as they
    # came (here with json.dumps' spacing), while its usage frame is still read and counted, and
    # reaches the client only when asked for.
    upstream = burst_frames("burst-stream", include_usage=True)
    content, usage_frame, done = upstream.rsplit(b"data: ", 2)
    body = {"model": "up/burst-stream", "messages": HELLO, "stream": True}
    status, _, raw = await _post(gateway, body)
    assert status == 200
    assert raw == content + b"data: [DONE]\n\n"
    with_usage = {**body, "stream_options": {"include_usage": True}}
    _, _, raw = await _post(gateway, with_usage)
    assert raw.startswith(content)
    assert json.loads(_frames(raw)[-2])["usage"]["prompt_tokens"] == 10
    line = json.loads(gateway.logs.getvalue().splitlines()[-1])
    assert (line["input_tokens"], line["output_tokens"]) == (10, 5)
    assert (usage_frame, done) == (_frames(upstream)[-2] + b"\n\n", b"[DONE]\n\n")


async def test_failure_before_first_byte_is_a_plain_error_response(gateway: Running) -> None:
    status, headers, raw = await _post(
        gateway, {"model": "up/fail-500", "messages": HELLO, "stream": True}
    )
    assert status == 502
    assert headers["Content-Type"].startswith("application/json")
    assert json.loads(raw)["error"]["type"] == "api_error"
    assert UPSTREAM_KEY not in raw.decode()


async def test_upstream_first_byte_timeout_is_504(gateway: Running) -> None:
    status, _, raw = await _post(gateway, {"model": "up/hang", "messages": HELLO, "stream": True})
    assert status == 504
    assert json.loads(raw)["error"]["code"] == "first_byte_timeout"


async def test_client_disconnect_cancels_the_upstream_stream(gateway: Running) -> None:
    fake = gateway.upstream
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            gateway.url + CHAT,
            json={"model": "up/slow-stream", "messages": HELLO, "stream": True},
        )
        assert response.status == 200
        request_id = response.headers["x-request-id"]
        await response.content.readline()
        response.close()  # the client goes away mid-stream
    await _eventually(lambda: fake.closed_streams > 0)
    assert fake.closed_streams == 1, "the upstream stream must be cancelled, not left running"
    # Recorded as nginx's 499 "client closed request", not as a success or a gateway error.
    await _eventually(lambda: _access_line(gateway, request_id) is not None)
    line = _access_line(gateway, request_id)
    assert line["status"] == 499
    assert line["provider"] == "up"
    metrics = await _get(gateway, "/metrics")
    labels = 'dialect="openai",model="up/slow-stream",provider="up",status_class="4xx"'
    assert f"crossway_requests_total{{{labels}}} 1.0" in metrics


async def _eventually(condition, within: float = 10.0) -> None:
    """Wait until ``condition()`` holds, polling, for at most ``within`` seconds."""
    loop = asyncio.get_running_loop()
    stop = loop.time() + within
    while not condition():
        assert loop.time() < stop, "condition not met in time"
        await asyncio.sleep(0.02)


def _access_line(gateway: Running, request_id: str) -> dict | None:
    for text in gateway.logs.getvalue().splitlines():
        line = json.loads(text)
        if line.get("event") == "request" and line.get("request_id") == request_id:
            return line
    return None


async def _get(gateway: Running, path: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(gateway.url + path) as r:
        return await r.text()


async def test_malformed_json_is_400(gateway: Running) -> None:
    status, _, raw = await _post(gateway, b'{"model": "chat", "messages": [')
    assert status == 400
    assert json.loads(raw)["error"]["code"] == "invalid_json"


async def test_wrong_type_names_the_field(gateway: Running) -> None:
    body = {"model": "chat", "messages": [{"role": "robot", "content": "x"}]}
    status, _, raw = await _post(gateway, body)
    assert status == 400
    assert json.loads(raw)["error"]["param"] == "messages[0].role"
    status, _, raw = await _post(gateway, {"model": "chat", "messages": HELLO, "n": "two"})
    assert json.loads(raw)["error"]["param"] == "n"


async def test_missing_field_names_the_field(gateway: Running) -> None:
    status, _, raw = await _post(gateway, {"messages": HELLO})
    assert status == 400
    assert json.loads(raw)["error"]["param"] == "model"


async def test_body_over_the_limit_is_413(gateway: Running) -> None:
    big = {"model": "chat", "messages": [{"role": "user", "content": "x" * (11 * 1024 * 1024)}]}
    status, _, raw = await _post(gateway, big)
    assert status == 413
    assert json.loads(raw)["error"]["code"] == "request_too_large"


async def test_a_chunked_body_over_the_limit_is_413_even_when_it_arrived_whole(
    tmp_path: Path,
) -> None:
    # A chunked body announces no length; sent in one write, it is already whole when the
    # handler starts, and is measured then.
    config = tmp_path / "small.yaml"
    config.write_text("server: {max_body_bytes: 1024}\nproviders: {mock: {type: mock}}\n")
    runner, url = await start_site(create_app(config, log_stream=io.StringIO()))
    try:
        body = json.dumps(
            {"model": "mock/x", "messages": [{"role": "user", "content": "x" * 4000}]}
        )
        data = body.encode()
        head = (
            f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(head.encode() + b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n")
        await writer.drain()
        answer = await reader.read()
        writer.close()
    finally:
        await runner.cleanup()
    assert answer.startswith(b"HTTP/1.1 413")
    assert b"request_too_large" in answer


async def test_request_id_is_echoed_or_generated(gateway: Running) -> None:
    body = {"model": "mock/x", "messages": HELLO}
    _, headers, _ = await _post(gateway, body, headers={"x-request-id": "abc-123"})
    assert headers["x-request-id"] == "abc-123"
    _, headers, _ = await _post(gateway, body)
    generated = headers["x-request-id"]
    assert str(uuid.UUID(generated)) == generated
    line = [json.loads(x) for x in gateway.logs.getvalue().splitlines()][-2]
    assert line["request_id"] == "abc-123"


async def test_unknown_route_and_wrong_method(gateway: Running) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(gateway.url + "/v1/nothing") as response:
            assert response.status == 404
            assert (await response.json())["error"]["code"] == "not_found"
        async with session.get(gateway.url + "/v1/embeddings") as response:
            assert response.status == 405


async def test_routes_without_v1_prefix(gateway: Running) -> None:
    status, _, _ = await _post(gateway, {"model": "mock/x", "messages": HELLO}, "/chat/completions")
    assert status == 200
    status, _, _ = await _post(gateway, {"model": "mock/x", "prompt": "hi"}, "/completions")
    assert status == 200


async def test_health(gateway: Running) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(gateway.url + "/health/live") as response:
            assert response.status == 200
        async with session.get(gateway.url + "/health/ready") as response:
            assert response.status == 200
            body = await response.json()
    assert body["providers"] == {"up": True, "mock": True, "mockfast": True, "keyless": False}


async def test_metrics_after_traffic(gateway: Running) -> None:
    await _post(gateway, {"model": "chat", "messages": HELLO})
    await _post(gateway, {"model": "chat", "messages": HELLO, "stream": True})
    await _post(gateway, {"model": "up/fail-500", "messages": HELLO})
    async with aiohttp.ClientSession() as session, session.get(gateway.url + "/metrics") as r:
        text = await r.text()
    labels = 'dialect="openai",model="chat",provider="up",status_class="2xx"'
    assert f"crossway_requests_total{{{labels}}} 2.0" in text
    assert 'crossway_tokens_total{kind="cache_read",model="chat",provider="up"} 8.0' in text
    assert 'crossway_upstream_errors_total{provider="up",reason="upstream_server"} 1.0' in text
    for name in (
        "crossway_request_duration_seconds_bucket",
        "crossway_upstream_duration_seconds_bucket",
        "crossway_time_to_first_token_seconds_bucket",
        "crossway_gateway_overhead_seconds_bucket",
        "crossway_requests_in_flight",
        'crossway_provider_ready{provider="keyless"} 0.0',
    ):
        assert name in text
    assert UPSTREAM_KEY not in text
    assert "client-key" not in text


async def test_access_log_line(gateway: Running) -> None:
    await _post(gateway, {"model": "chat", "messages": HELLO, "stream": True})
    line = json.loads(gateway.logs.getvalue().splitlines()[-1])
    assert line["event"] == "request"
    assert line["status"] == 200
    assert line["provider"] == "up"
    assert line["model"] == "chat"
    assert line["stream"] is True
    assert line["input_tokens"] == 10
    assert line["output_tokens"] == 5
    for key in ("duration_ms", "upstream_ms", "overhead_ms", "ttft_ms", "timestamp", "level"):
        assert key in line


async def test_mock_fault_models_through_the_gateway(gateway: Running) -> None:
    status, _, raw = await _post(gateway, {"model": "mockfast/hang", "messages": HELLO})
    assert (status, json.loads(raw)["error"]["code"]) == (504, "first_byte_timeout")
    body = {"model": "mockfast/stall-2", "messages": HELLO, "stream": True}
    status, _, raw = await _post(gateway, body)
    frames = _frames(raw)
    assert status == 200
    assert json.loads(frames[-1])["error"]["code"] == "idle_timeout"
    assert len(frames) == 3, "two chunks, then the idle clock's in-band error"
    status, headers, raw = await _post(gateway, {"model": "mock/error-429", "messages": HELLO})
    assert (status, headers["Retry-After"]) == (429, "1")
    status, _, raw = await _post(gateway, {"model": "mockfast/slow-100", "messages": HELLO})
    assert status == 200
    status, _, raw = await _post(gateway, {"model": "mock/cut-1", "messages": HELLO})
    assert (status, json.loads(raw)["error"]["code"]) == (502, "upstream_unavailable")


async def test_mock_tools_and_truncation(gateway: Running) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    body = {"model": "mock/tools", "messages": HELLO, "tools": [tool]}
    _, _, raw = await _post(gateway, body)
    message = json.loads(raw)["choices"][0]["message"]
    assert message["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q":"hello"}'}
    assert message["tool_calls"][0]["type"] == "function"
    body = {"model": "mock/x", "messages": HELLO, "max_tokens": 3}
    _, _, raw = await _post(gateway, body)
    choice = json.loads(raw)["choices"][0]
    assert (choice["finish_reason"], len(choice["message"]["content"].split())) == ("length", 3)


async def test_bifrost_messages_carry_the_upstreams_url_citations(gateway: Running) -> None:
    status, _, raw = await _post(
        gateway, {"model": "up/gpt-rich", "text": "Capital of France?"}, path="/v1/text/completions"
    )
    assert status == 200, raw
    message = json.loads(raw)["choices"][0]["message"]
    assert message["annotations"] == RICH_ANNOTATIONS
    assert "audio" not in message  # Bifrost's message has no audio: that is lost
