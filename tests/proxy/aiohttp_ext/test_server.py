"""proxy/aiohttp_ext/server.py's connection protocol: flow control and pipelining over a raw socket.

:class:`~proxy.aiohttp_ext.server.GatewayRequestHandler` resumes reading only when it was paused.
These tests make aiohttp pause and resume on purpose — a body far above the read buffer's high mark,
requests pipelined past the message queue's bound — and check that every request is still
answered, in order, on its connection. (Rejected requests are ``tests/e2e/test_malformed_http``'s.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.aiohttp_ext.server import GatewayRequestHandler
from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.proxy.dialects.adapters.gateway import MOCK_PROVIDERS
from tests.proxy.pauses import count_pauses

CHAT = "/v1/chat/completions"


def _request(content: str, model: str = "mock/echo") -> bytes:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": content}]})
    head = (
        f"POST {CHAT} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body.encode()


async def _answers(reader: asyncio.StreamReader, count: int) -> list[tuple[int, bytes]]:
    """``count`` responses read off one connection: each one's status and body."""
    answers = []
    for _ in range(count):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        status = int(head.split(" ", 2)[1])
        length = next(
            int(line.split(":", 1)[1])
            for line in head.split("\r\n")
            if line.lower().startswith("content-length:")
        )
        answers.append((status, await reader.readexactly(length)))
    return answers


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[int]:
    config = tmp_path / "gateway.yaml"
    config.write_text(MOCK_PROVIDERS)  # the default 10 MiB body limit
    runner, url = await start_site(create_app(config))
    yield int(url.rsplit(":", 1)[1])
    await runner.cleanup()


async def test_a_body_that_pauses_reading_is_read_to_its_end(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses = count_pauses(monkeypatch, GatewayRequestHandler)
    # Pipelined behind a slow request, the big body arrives while nothing reads it yet.
    slow = _request("first", model="mock/slow-300")
    big = _request("x" * 3_000_000)  # six times the read buffer's high mark
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(slow + big)
        await writer.drain()
        answers = await asyncio.wait_for(_answers(reader, 2), timeout=30)
    finally:
        writer.close()
    [(first, _), (status, body)] = answers
    assert pauses, "the body never filled the read buffer: this test proves nothing"
    assert (first, status) == (200, 200)
    assert json.loads(body)["choices"][0]["message"]["content"] == "x" * 3_000_000


async def test_requests_pipelined_past_the_message_queue_are_all_answered_in_order(
    port: int,
) -> None:
    count = 80  # aiohttp queues 32 parsed requests per connection, then holds the rest
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(_request(f"request {index}") for index in range(count)))
        await writer.drain()
        answers = await asyncio.wait_for(_answers(reader, count), timeout=30)
    finally:
        writer.close()
    assert [status for status, _ in answers] == [200] * count
    echoed = [json.loads(body)["choices"][0]["message"]["content"] for _, body in answers]
    assert all(f"request {index}" in text for index, text in enumerate(echoed)), echoed[:3]


UNFINISHED = b'{"a":1}'  # as raw deflate: a valid start that never ends
INVALID = b"null"  # as raw deflate: an error at once


async def _head_then_body(
    port: int, path: str, body: bytes = UNFINISHED
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A ``deflate`` request whose body is sent once the route asked for it (``100-continue``),
    so that a handler is reading it when it arrives, unfinished."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Encoding: deflate\r\nExpect: 100-continue\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    await writer.drain()
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    assert interim.startswith(b"HTTP/1.1 100"), interim
    writer.write(body)
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("body", [UNFINISHED, INVALID])
async def test_a_body_that_ends_malformed_fails_its_read_at_once(port: int, body: bytes) -> None:
    """The body is read as sent and inflated by the gateway (:mod:`proxy.http.request_body`): an
    unfinished or invalid deflate stream is a 400 at once, never a wait for the body timeout
    (with aiohttp inflating it, the read waited 30 s for bytes that never came: a 408)."""
    reader, writer = await _head_then_body(port, CHAT, body)
    try:
        [(status, answer)] = await asyncio.wait_for(_answers(reader, 1), timeout=60)
    finally:
        writer.close()
    assert status == 400, answer
    assert json.loads(answer)["error"]["code"] == "invalid_content_encoding"


@pytest.mark.parametrize("body", [UNFINISHED, INVALID])
async def test_a_malformed_body_nobody_read_logs_no_traceback(
    port: int, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    """A route that answers without reading the body (no route: 404): the gateway's
    connections never inflate a body themselves (``auto_decompress`` is off; the routes that
    read one inflate it, bounded, in :mod:`proxy.http.request_body`), so a malformed one left unread
    is plain bytes to discard: no 'Unhandled exception' with a traceback."""
    reader, writer = await _head_then_body(port, "/v1/nowhere", body)
    try:
        [(status, _)] = await asyncio.wait_for(_answers(reader, 1), timeout=60)
    finally:
        writer.close()
    assert status == 404
    assert not [r for r in caplog.records if r.exc_info], caplog.text
