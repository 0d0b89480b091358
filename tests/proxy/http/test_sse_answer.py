"""proxy/http/sse_answer.py through a real app (``create_app`` on a config with the mock provider
and a plugin that reshapes its streams): the SSE headers and the dialect's end marker, a stream held
whole written as one body, keep-alive pings while the upstream is silent, a failure after the
first byte in band with no end marker, a client that went away, and the upstream stream closed
in every case."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from proxy.core.canonical import Call
from proxy.core.plugin import FinishedRequest, Next
from proxy.core.reply import Chunk, Reply
from proxy.dialects.anthropic_replies import AnthropicStreamEncoder
from proxy.server.app import RUNTIME, create_app

MODULE = __name__
CONFIG = f"""\
server: {{access_log: true}}
providers:
  mock: {{type: mock, faults: true}}
models:
  default: [{{target: mock/echo}}]
  cut: [{{target: mock/cut-2}}]
  held: [{{target: mock/echo}}]
  quiet: [{{target: mock/echo}}]
plugins:
  - plugin: {MODULE}:Shaper
"""
OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"
HELLO = [{"role": "user", "content": "hello there, how are you today"}]
PAUSE = 0.05  # seconds the ``quiet`` stream waits before each chunk after the first
MakeClient = Callable[..., Awaitable[TestClient]]


class Watched:
    """The upstream's stream as it is, batches and all, noting whether it was closed."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.closed = False

    @property
    def ended(self) -> bool:
        return self._stream.ended

    async def next_batch(self, raw: bool):
        return await self._stream.next_batch(raw)

    def __aiter__(self):
        return self

    async def __anext__(self) -> Chunk:
        return await anext(self._stream)

    async def aclose(self) -> None:
        self.closed = True
        await self._stream.aclose()


class Held(Watched):
    """Every chunk already received when the answer starts (as a cache replay is)."""

    ended = True

    def __init__(self, chunks: list[Chunk]) -> None:
        self._chunks = chunks
        self.closed = False

    async def next_batch(self, raw: bool):
        chunks, self._chunks = self._chunks, []
        return chunks

    async def __anext__(self) -> Chunk:
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        self.closed = True


class Quiet:
    """The upstream's chunks as a plain iterator (no ``next_batch``: one chunk per batch), silent
    for ``PAUSE`` seconds before each one after the first; notes whether it was closed."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._started = False
        self.closed = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> Chunk:
        if self._started:
            await asyncio.sleep(PAUSE)
        self._started = True
        return await anext(self._stream)

    async def aclose(self) -> None:
        self.closed = True
        await self._stream.aclose()


class Shaper:
    """A plugin that reshapes each stream by the model the client named (``held``, ``quiet``,
    or as it came) and keeps every stream it handed on and every finished request."""

    def __init__(self) -> None:
        self.streams: list[Watched | Quiet] = []
        self.finished_requests: list[FinishedRequest] = []

    async def __call__(self, call: Call, next: Next) -> Reply:
        model = call.model
        reply = await next(call)
        if reply.stream is None:
            return reply
        if model == "held":
            chunks = [chunk async for chunk in reply.stream]
            stream: Watched | Quiet = Held(chunks)
        elif model == "quiet":
            stream = Quiet(reply.stream)
        else:
            stream = Watched(reply.stream)
        self.streams.append(stream)
        reply.stream = stream
        return reply

    def finished(self, request: FinishedRequest) -> None:
        self.finished_requests.append(request)


class Gateway:
    def __init__(self, client: TestClient, logs: io.StringIO) -> None:
        self.client = client
        self.logs = logs

    @property
    def shaper(self) -> Shaper:
        (hook,) = self.client.app[RUNTIME].snapshot.finishers
        return hook.__self__

    def access_line(self, request_id: str) -> dict:
        lines = [json.loads(text) for text in self.logs.getvalue().splitlines()]
        found = [x for x in lines if x.get("event") == "request" and x["request_id"] == request_id]
        assert len(found) == 1, found
        return found[0]


@pytest.fixture
async def gateway(tmp_path: Path, aiohttp_client: MakeClient) -> Gateway:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG)
    logs = io.StringIO()
    client = await aiohttp_client(create_app(path, log_stream=logs))
    return Gateway(client, logs)


def _body(path: str, model: str = "default") -> dict:
    body: dict = {"model": model, "messages": HELLO, "stream": True}
    if path == ANTHROPIC:
        body["max_tokens"] = 32
    return body


def _frames(raw: bytes) -> list[bytes]:
    return [frame for frame in raw.split(b"\n\n") if frame]


END = {OPENAI: b"data: [DONE]", ANTHROPIC: b"event: message_stop\n"}


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
async def test_sse_answer_ends_with_the_dialects_end_marker(gateway: Gateway, path: str) -> None:
    response = await gateway.client.post(path, json=_body(path))
    assert response.status == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["x-request-id"]
    assert response.headers["x-crossway-model"] == "mock/echo"
    frames = _frames(await response.read())
    assert len(frames) > 1
    end = END[path]
    assert frames[-1].startswith(end)
    assert not any(frame.startswith(end) for frame in frames[:-1])
    (stream,) = gateway.shaper.streams
    assert stream.closed


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
async def test_a_stream_held_whole_is_one_body_with_a_length_and_the_same_frames(
    gateway: Gateway, path: str
) -> None:
    held = await gateway.client.post(path, json=_body(path, "held"))
    assert held.status == 200
    assert held.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert "transfer-encoding" not in held.headers
    body = await held.read()
    assert held.headers["content-length"] == str(len(body))
    streamed = await gateway.client.post(path, json=_body(path, "quiet"))
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in streamed.headers
    held_frames, streamed_frames = _frames(body), _frames(await streamed.read())
    assert held_frames[-1].startswith(END[path])
    assert len(held_frames) == len(streamed_frames)
    assert all(stream.closed for stream in gateway.shaper.streams)


async def test_pings_are_written_while_the_upstream_is_silent(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(AnthropicStreamEncoder, "keepalive", PAUSE / 5)
    response = await gateway.client.post(ANTHROPIC, json=_body(ANTHROPIC, "quiet"))
    frames = _frames(await response.read())
    pings = [i for i, frame in enumerate(frames) if frame.startswith(b"event: ping\n")]
    assert pings
    assert pings[0] > 0  # between the answer's frames
    assert pings[-1] < len(frames) - 1
    assert frames[-1].startswith(END[ANTHROPIC])
    without = [frame for frame in frames if not frame.startswith(b"event: ping\n")]
    held = await gateway.client.post(ANTHROPIC, json=_body(ANTHROPIC, "held"))
    assert len(without) == len(_frames(await held.read()))  # the pings are all that was added


async def test_no_pings_for_a_dialect_without_keepalive(gateway: Gateway) -> None:
    response = await gateway.client.post(OPENAI, json=_body(OPENAI, "quiet"))
    held = await gateway.client.post(OPENAI, json=_body(OPENAI, "held"))
    frames, held_frames = _frames(await response.read()), _frames(await held.read())
    assert len(frames) == len(held_frames)  # ids differ; nothing was added
    assert all(frame.startswith(b"data: {") for frame in frames[:-1])
    assert frames[-1] == b"data: [DONE]"


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
async def test_failure_after_the_first_byte_is_an_in_band_error_and_no_end_marker(
    gateway: Gateway, path: str
) -> None:
    response = await gateway.client.post(path, json=_body(path, "cut"))
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = _frames(await response.read())
    assert not any(frame.startswith(END[path]) for frame in frames)
    if path == ANTHROPIC:
        event, data = frames[-1].split(b"\n", 1)
        assert event == b"event: error"
        error = json.loads(data.removeprefix(b"data: "))
        assert (error["type"], error["error"]["type"]) == ("error", "api_error")
    else:
        assert len(frames) == 3  # two chunks, then the error frame
        error = json.loads(frames[-1].removeprefix(b"data: "))
        assert error["error"]["code"] == "upstream_unavailable"
    line = gateway.access_line(response.headers["x-request-id"])
    assert line["status"] == 502
    assert line["error_code"] == "upstream_unavailable"
    (stream,) = gateway.shaper.streams
    assert stream.closed


async def test_a_client_that_went_away_is_counted_and_the_upstream_stream_closed(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(AnthropicStreamEncoder, "keepalive", PAUSE / 5)
    response = await gateway.client.post(ANTHROPIC, json=_body(ANTHROPIC, "quiet"))
    assert response.status == 200
    await response.content.readuntil(b"\n\n")  # the first frame, then the client goes
    response.close()
    shaper = gateway.shaper
    for _ in range(200):
        if shaper.finished_requests:
            break
        await asyncio.sleep(0.025)
    (finished,) = shaper.finished_requests
    assert finished.status == 499
    (stream,) = shaper.streams
    assert stream.closed


async def test_the_last_batch_and_the_chunked_end_leave_in_one_write(
    tmp_path: Path, aiohttp_client: MakeClient
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG)
    app = create_app(path, log_stream=io.StringIO())
    writes: list[bytes] = []

    async def record_writes(request, response) -> None:
        transport = request.transport
        write = transport.write

        def recorded(data) -> None:
            writes.append(bytes(data))
            write(data)

        transport.write = recorded

    app.on_response_prepare.append(record_writes)
    client = await aiohttp_client(app)
    response = await client.post(OPENAI, json=_body(OPENAI))
    assert response.status == 200
    frames = _frames(await response.read())
    assert frames[-1] == b"data: [DONE]"
    assert len(writes) >= 2  # the head, then the body
    assert writes[-1].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")  # the end marker and the
    # chunked encoding's end, with the last batch: one system call, not two
