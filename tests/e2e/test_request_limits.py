"""The app's request-body limits over a raw socket: 413 for a body over ``max_body_bytes`` and 408
for one slower than ``body_read_timeout``, whether the body announces its length or is chunked.

The client here writes HTTP by hand, so that it can announce more than it sends, send part of a
body and stop, or never end a chunked body — what a real SDK never does, and a slow or hostile
client does.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site

CHAT = "/v1/chat/completions"
LIMIT = 1024
BODY = json.dumps({"model": "mock/x", "messages": [{"role": "user", "content": "x" * 4000}]})


class Answer:
    """One HTTP response read off the socket."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def error(self) -> dict:
        return json.loads(self.body)["error"]


class Gateway:
    def __init__(self, port: int, logs: io.StringIO) -> None:
        self.port = port
        self.logs = logs

    async def send(self, head: str, *pieces: bytes) -> Answer:
        """Write ``head`` (the blank line is added) and ``pieces``, then read one response
        without ever finishing whatever body the head announced."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(head.replace("\n", "\r\n").encode() + b"\r\n")
            for piece in pieces:
                writer.write(piece)
            await writer.drain()
            return await asyncio.wait_for(_read_answer(reader), timeout=30)
        finally:
            writer.close()

    def access_lines(self) -> list[dict]:
        lines = [json.loads(line) for line in self.logs.getvalue().splitlines() if line]
        return [line for line in lines if line["event"] == "request"]


async def _read_answer(reader: asyncio.StreamReader) -> Answer:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status_line, *header_lines = head.strip().split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers["content-length"]))
    return Answer(int(status_line.split()[1]), headers, body)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    config = tmp_path / "limits.yaml"
    config.write_text(
        f"server: {{max_body_bytes: {LIMIT}, body_read_timeout: 0.5}}\n"
        "providers: {mock: {type: mock}}\n"
    )
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    yield Gateway(int(url.rsplit(":", 1)[1]), logs)
    await runner.cleanup()


def _head(**headers: str) -> str:
    lines = [f"POST {CHAT} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return "\n".join(lines) + "\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def test_an_announced_length_over_the_limit_is_413_before_any_body_is_read(
    gateway: Gateway,
) -> None:
    # Not one byte of the body is sent: were the length not checked first, the read would wait
    # for the body and the answer would be the 408 of body_read_timeout.
    answer = await gateway.send(_head(Content_Length=str(LIMIT + 1)))
    assert answer.status == 413
    assert answer.error()["code"] == "request_too_large"
    assert [line["status"] for line in gateway.access_lines()] == [413]


async def test_a_chunked_body_growing_past_the_limit_is_413(gateway: Gateway) -> None:
    # The body never ends (no last chunk), so it is read as it arrives, not taken whole.
    data = BODY.encode()
    pieces = [_chunk(data[i : i + 256]) for i in range(0, len(data), 256)]
    answer = await gateway.send(_head(Transfer_Encoding="chunked"), *pieces)
    assert answer.status == 413
    assert answer.error()["code"] == "request_too_large"


async def test_a_body_over_the_limit_received_whole_is_413(gateway: Gateway) -> None:
    # The whole body is already in before the route reads it: it is measured, not waited for.
    data = BODY.encode()
    answer = await gateway.send(_head(Content_Length=str(len(data))), data)
    assert answer.status == 413
    assert answer.error()["code"] == "request_too_large"
    chunked = await gateway.send(_head(Transfer_Encoding="chunked"), _chunk(data), b"0\r\n\r\n")
    assert chunked.status == 413
    assert chunked.error()["code"] == "request_too_large"


async def test_a_body_within_the_limit_is_served(gateway: Gateway) -> None:
    data = json.dumps({"model": "mock/x", "messages": [{"role": "user", "content": "hi"}]})
    answer = await gateway.send(_head(Content_Length=str(len(data))), data.encode())
    assert answer.status == 200
    chunked = await gateway.send(
        _head(Transfer_Encoding="chunked"), _chunk(data.encode()), b"0\r\n\r\n"
    )
    assert chunked.status == 200


async def test_a_body_shorter_than_its_length_is_408_after_the_read_timeout(
    gateway: Gateway,
) -> None:
    data = BODY.encode()[:200]
    answer = await gateway.send(_head(Content_Length="600"), data)
    assert answer.status == 408
    assert answer.error()["code"] == "request_timeout"
    assert [line["status"] for line in gateway.access_lines()] == [408]


async def test_a_chunked_body_that_never_ends_is_408(gateway: Gateway) -> None:
    answer = await gateway.send(_head(Transfer_Encoding="chunked"), _chunk(b'{"model": "mock/x"'))
    assert answer.status == 408
    assert answer.error()["code"] == "request_timeout"
