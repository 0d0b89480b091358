"""proxy/upstream/transport.py: the pooled HTTP transport, with upstreams mocked by aioresponses."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import json
import socket
import types
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

import aiohttp
import pytest
from aioresponses import aioresponses

from proxy.core.canonical import Call, MediaRequest, MediaUnits, Message, Usage
from proxy.core.errors import (
    ContextWindowExceeded,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.core.reply import Chunk, RawFrames
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider
from proxy.upstream.transport import HttpTransport

BASE = "http://upstream.test/v1"
URL = f"{BASE}/chat/completions"
KEY = "sk-transport-test-0123456789abcdef"


def make_call(stream: bool = False) -> Call:
    return Call(
        request_id="r",
        dialect="openai",
        model="up/gpt",
        messages=[Message(role="user", content="hi")],
        stream=stream,
    )


@pytest.fixture
def provider() -> OpenAIProvider:
    return OpenAIProvider("up", OpenAIConfig(base_url=BASE, api_key=KEY))


@pytest.fixture
async def transport(provider: OpenAIProvider) -> AsyncIterator[HttpTransport]:
    transport = HttpTransport({"up": provider})
    yield transport
    await transport.close()


class _CompatResponse(aiohttp.ClientResponse):
    """aioresponses (<= 0.7.9) builds ClientResponse without the ``stream_writer`` argument
    that aiohttp 3.14 requires (pnuckowski/aioresponses#289); supply an inert one."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("stream_writer", SimpleNamespace(output_size=0))
        super().__init__(*args, **kwargs)


_NEEDS_STREAM_WRITER = "stream_writer" in inspect.signature(aiohttp.ClientResponse).parameters


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[aioresponses]:
    if _NEEDS_STREAM_WRITER:
        monkeypatch.setattr("aioresponses.core.ClientResponse", _CompatResponse)
    with aioresponses() as mocked:
        yield mocked


async def drain(stream: AsyncIterator, received: list[Chunk]) -> None:
    """Append every chunk of ``stream`` to ``received``.

    The transport yields one list per network read; a ``None`` in it marks the end marker.
    """
    async for item in stream:
        for entry in item if isinstance(item, list) else [item]:
            if isinstance(entry, RawFrames):
                received.extend(entry.parse(payload) for payload in entry.payloads())
            elif entry is not None:
                received.append(entry)


async def collect(stream: AsyncIterator) -> list[Chunk]:
    received: list[Chunk] = []
    await drain(stream, received)
    return received


def sse(*events: dict | str) -> bytes:
    frames = []
    for event in events:
        if isinstance(event, str) and event.startswith(":"):
            frames.append(f"{event}\n\n")  # a comment
            continue
        data = event if isinstance(event, str) else json.dumps(event)
        frames.append(f"data: {data}\n\n")
    return "".join(frames).encode()


def chunk(text: str | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    choices = (
        []
        if text is None and finish is None
        else [{"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}]
    )
    event: dict = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt"}
    event["choices"] = choices
    if usage is not None:
        event["usage"] = usage
    return event


# ---------------------------------------------------------------------------------------------
# Whole responses
# ---------------------------------------------------------------------------------------------


async def test_request_returns_status_headers_and_body(transport, provider, upstream):
    body = {"id": "x", "choices": []}
    upstream.post(URL, status=200, payload=body, headers={"x-request-id": "up-1"})
    request = provider.build_request(make_call(), "gpt")
    status, headers, raw = await transport.request(provider, request)
    assert status == 200
    assert headers["x-request-id"] == "up-1"
    assert json.loads(raw) == body


async def test_request_sends_the_built_body_and_headers(transport, provider, upstream):
    upstream.post(URL, status=200, payload={"id": "x", "choices": []})
    request = provider.build_request(make_call(), "gpt")
    await transport.request(provider, request)
    ((method, url), calls) = next(iter(upstream.requests.items()))
    assert method == "POST"
    assert str(url) == URL
    sent = calls[0].kwargs
    assert sent["data"] == request.body
    assert sent["headers"]["authorization"] == f"Bearer {KEY}"


async def test_request_non_2xx_is_returned_for_the_provider_to_classify(
    transport, provider, upstream
):
    error = {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}
    upstream.post(URL, status=429, payload=error, headers={"retry-after": "3"})
    status, headers, raw = await transport.request(
        provider, provider.build_request(make_call(), "g")
    )
    assert status == 429
    classified = provider.parse_error(status, headers, raw)
    assert isinstance(classified, UpstreamRateLimited)
    assert classified.retry_after == 3.0


@pytest.mark.parametrize(
    "exception",
    [
        aiohttp.ClientConnectionError("refused"),
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientOSError(111, "Connection refused"),
        aiohttp.ClientPayloadError("truncated"),
    ],
)
async def test_request_connection_error_is_upstream_unavailable(
    transport, provider, upstream, exception
):
    upstream.post(URL, exception=exception)
    with pytest.raises(UpstreamUnavailable) as info:
        await transport.request(provider, provider.build_request(make_call(), "gpt"))
    assert info.value.provider == "up"
    assert info.value.status == 502
    assert KEY not in info.value.message


async def test_connect_timeout_is_upstream_timeout(transport, provider, upstream):
    upstream.post(URL, exception=aiohttp.ConnectionTimeoutError("connect"))
    with pytest.raises(UpstreamTimeout) as info:
        await transport.request(provider, provider.build_request(make_call(), "gpt"))
    assert info.value.code == "connect_timeout"


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


async def test_stream_is_parsed_into_chunks(transport, provider, upstream):
    body = sse(
        ": keep-alive comment",
        chunk("Hel"),
        chunk("lo"),
        chunk(finish="stop"),
        chunk(usage={"prompt_tokens": 5, "completion_tokens": 2}),
        "[DONE]",
    )
    upstream.post(URL, status=200, body=body, content_type="text/event-stream")
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    chunks = await collect(stream)
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == ["Hel", "lo"]
    assert chunks[2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None
    assert (chunks[-1].usage.input, chunks[-1].usage.output) == (5, 2)


async def test_stream_stops_at_done_even_if_more_follows(transport, provider, upstream):
    body = sse(chunk("a"), "[DONE]", chunk("never"))
    upstream.post(URL, status=200, body=body)
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    chunks = await collect(stream)
    assert [c.choices[0].delta.content for c in chunks] == ["a"]


async def test_a_read_of_ordinary_frames_travels_verbatim(transport, provider, upstream):
    # aioresponses delivers each body in one read.
    ordinary = sse(chunk("a"), chunk("b"))
    upstream.post(URL, status=200, body=ordinary)
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    frames = (await anext(stream))[0]
    assert isinstance(frames, RawFrames)
    assert frames.data == ordinary
    decoded = [frames.parse(payload) for payload in frames.payloads()]
    assert [c.choices[0].delta.content for c in decoded] == ["a", "b"]  # type: ignore[union-attr]
    assert decoded[0].raw == json.dumps(chunk("a")).encode()  # type: ignore[union-attr]
    with pytest.raises(UpstreamUnavailable):
        await anext(stream)


@pytest.mark.parametrize(
    ("extra", "relayed"),
    [
        (sse(chunk(usage={"prompt_tokens": 1, "completion_tokens": 1}), "[DONE]"), True),
        (sse({"error": {"message": "boom"}}), True),
        (sse(": a comment"), False),
        (sse({**chunk("c"), "id": ""}), False),
        (b"data: {not json}\n\n", False),
    ],
    ids=["usage-and-done", "error", "comment", "no-id", "malformed"],
)
async def test_a_read_with_other_frames_is_decoded_from_the_first_of_them(
    transport, provider, upstream, extra, relayed
):
    upstream.post(URL, status=200, body=sse(chunk("a")) + extra)
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    items: list = []
    with contextlib.suppress(UpstreamError, UpstreamUnavailable):
        async for batch in stream:
            items.extend(batch)
    assert isinstance(items[0], RawFrames) is relayed
    assert not any(isinstance(item, RawFrames) for item in items[1:])
    received: list[Chunk] = []
    await drain(_one(items), received)
    assert received[0].choices[0].delta.content == "a"


async def _one(batch: list) -> AsyncIterator[list]:
    yield batch


async def test_stream_ending_without_done_is_upstream_unavailable(transport, provider, upstream):
    upstream.post(URL, status=200, body=sse(chunk("a"), chunk("b")))
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    received: list[Chunk] = []
    with pytest.raises(UpstreamUnavailable) as info:
        await drain(stream, received)
    assert [c.choices[0].delta.content for c in received] == ["a", "b"]
    assert info.value.provider == "up"


async def test_stream_with_an_unterminated_last_event_then_eof(transport, provider, upstream):
    # The last event lacks its blank line; it is still delivered before the missing [DONE].
    upstream.post(URL, status=200, body=b'data: {"id":"c","choices":[]}\n')
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    received: list[Chunk] = []
    with pytest.raises(UpstreamUnavailable):
        await drain(stream, received)
    assert [c.id for c in received] == ["c"]


async def test_empty_stream_is_upstream_unavailable(transport, provider, upstream):
    upstream.post(URL, status=200, body=b"")
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    received: list[Chunk] = []
    with pytest.raises(UpstreamUnavailable):
        await drain(stream, received)
    assert received == []


async def test_in_band_stream_error(transport, provider, upstream):
    body = sse(chunk("a"), {"error": {"message": "server fell over", "code": "server_error"}})
    upstream.post(URL, status=200, body=body)
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    received: list[Chunk] = []
    with pytest.raises(UpstreamError) as info:
        await drain(stream, received)
    assert "server fell over" in info.value.message
    # What arrived before the error still reaches the client (a partial answer).
    assert [c.choices[0].delta.content for c in received] == ["a"]


async def test_stream_non_2xx_raises_the_providers_error(transport, provider, upstream):
    error = {"error": {"message": "too long", "code": "context_length_exceeded"}}
    upstream.post(URL, status=400, payload=error)
    with pytest.raises(ContextWindowExceeded) as info:
        await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    assert info.value.status == 400


async def test_stream_429_carries_retry_after(transport, provider, upstream):
    upstream.post(URL, status=429, body=b"busy", headers={"Retry-After": "4"})
    with pytest.raises(UpstreamRateLimited) as info:
        await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    assert info.value.retry_after == 4.0
    assert info.value.message == "busy"


async def test_stream_connection_error_is_upstream_unavailable(transport, provider, upstream):
    upstream.post(URL, exception=aiohttp.ClientConnectionError("refused"))
    with pytest.raises(UpstreamUnavailable):
        await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))


async def test_a_stream_closed_early_yields_nothing_more(transport, provider, upstream):
    upstream.post(URL, status=200, body=sse(chunk("a"), chunk("b"), "[DONE]"))
    stream = await transport.open_stream(provider, provider.build_request(make_call(True), "gpt"))
    first = await anext(stream)
    assert first  # a chunk, or a non-empty batch
    await stream.aclose()
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_close_closes_every_session_and_a_second_close_is_harmless(provider):
    other = OpenAIProvider("other", OpenAIConfig(base_url=BASE, api_key=KEY))
    transport = HttpTransport({"up": provider, "other": other})
    sessions = list(transport._sessions.values())
    assert len(sessions) == 2
    assert not any(session.closed for session in sessions)
    await transport.close()
    assert all(session.closed for session in sessions)
    await transport.close()
    assert all(session.closed for session in sessions)


async def test_transport_without_http_providers():
    transport = HttpTransport({})
    await transport.close()


@contextlib.asynccontextmanager
async def real_upstream(handler) -> AsyncIterator[tuple[OpenAIProvider, HttpTransport]]:
    """A 127.0.0.1 upstream serving ``handler`` on the chat route, and a transport to it."""
    from aiohttp import web

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    provider = OpenAIProvider(
        "up", OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
    )
    transport = HttpTransport({"up": provider})
    try:
        yield provider, transport
    finally:
        await transport.close()
        await runner.cleanup()


async def test_stream_over_a_real_socket_in_odd_pieces():
    """A real 127.0.0.1 upstream that writes its SSE body in pieces split mid-line and between
    CR and LF: the chunks are the same as for the whole body."""
    from aiohttp import web

    body = sse(chunk("Hel"), chunk("lo"), chunk(finish="stop"), "[DONE]").replace(b"\n", b"\r\n")
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    async with real_upstream(handler) as (provider, transport):
        stream = await transport.open_stream(
            provider, provider.build_request(make_call(True), "gpt")
        )
        chunks = await collect(stream)
    assert [c.choices[0].delta.content for c in chunks[:2]] == ["Hel", "lo"]
    assert chunks[2].choices[0].finish_reason == "stop"
    assert len(chunks) == 3


async def test_a_stream_closed_early_drops_its_connection_so_the_upstream_stops():
    """Closing a stream mid-answer drops its connection rather than waiting for the rest: the
    upstream sees the disconnect, which is what cancels the generation there."""
    from aiohttp import web

    disconnected = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(sse(chunk("a")))
        try:
            await asyncio.Event().wait()  # a generation that never ends on its own
        except asyncio.CancelledError:
            disconnected.set()  # aiohttp cancels the handler when its client goes away
            raise
        return response

    async with real_upstream(handler) as (provider, transport):
        stream = await transport.open_stream(
            provider, provider.build_request(make_call(True), "gpt")
        )
        assert await anext(stream)  # the first frame (relayed verbatim, as RawFrames)
        assert not disconnected.is_set()
        await stream.aclose()
        await asyncio.wait_for(disconnected.wait(), timeout=10)


async def test_a_refused_connection_leaves_none_of_the_calls_frames_in_cyclic_garbage():
    """aiohttp and asyncio keep a connection error in frames its own traceback holds; the
    transport drops those tracebacks, so the call's frames (with the request's body among
    their locals) are freed as soon as the error is, not by a later garbage collection."""
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        provider = OpenAIProvider(
            "up", OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
        )
        transport = HttpTransport({"up": provider})
        request = provider.build_request(make_call(), "gpt")
        gc.collect()
        gc.disable()
        try:
            with pytest.raises(UpstreamUnavailable):
                await transport.request(provider, request)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            frames = [
                thing.f_code.co_qualname
                for thing in gc.garbage
                if isinstance(thing, types.FrameType)
                and thing.f_code.co_filename.endswith("proxy/upstream/transport.py")
            ]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
            await transport.close()
    assert frames == []


# -- media streams ---------------------------------------------------------------------------

SPEECH_URL = f"{BASE}/audio/speech"


def speech_call() -> Call:
    media = MediaRequest("speech", {"input": "hello", "voice": "a"}, worst=MediaUnits(characters=5))
    return Call(request_id="r", dialect="openai_speech", model="t", messages=[], media=media)


async def test_a_media_stream_relays_its_bytes_with_the_usage_around_them(
    transport, provider, upstream
):
    events = b'data: {"type":"speech.audio.delta","audio":"QUJD"}\n\n' + (
        b'data: {"type":"speech.audio.done","usage":{"input_tokens":2,"output_tokens":9}}\n\n'
    )
    upstream.post(SPEECH_URL, status=200, body=events, content_type="text/event-stream")
    call = speech_call()
    request = provider.build_media(call, "tts-1")
    opened = await transport.open_media_stream(
        provider, request, lambda headers: provider.media_meter(headers, call, "tts-1")
    )
    assert opened.content_type == "text/event-stream"
    batches = [batch async for batch in opened.pieces]
    chunks = [item for batch in batches for item in batch if item is not None]
    assert batches[-1][-1] is None  # complete
    assert b"".join(chunk.media or b"" for chunk in chunks) == events
    # the first carries the request's bound, the last what the answer billed
    assert chunks[0].usage == Usage(media=MediaUnits(characters=5))
    assert chunks[-1].usage == Usage(input=2, output=9, media=MediaUnits(characters=5))


async def test_a_media_stream_refused_upstream_is_the_providers_error(
    transport, provider, upstream
):
    upstream.post(SPEECH_URL, status=400, payload={"error": {"message": "no such voice"}})
    call = speech_call()
    with pytest.raises(UpstreamError) as refused:
        await transport.open_media_stream(
            provider,
            provider.build_media(call, "tts-1"),
            lambda headers: provider.media_meter(headers, call, "tts-1"),
        )
    assert refused.value.status == 400
    assert "no such voice" in refused.value.message
