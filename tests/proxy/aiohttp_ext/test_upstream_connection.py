"""proxy/upstream/transport.py's upstream connections, against a real aiohttp upstream on 127.0.0.1.

:class:`~proxy.upstream.transport.UpstreamConnection` resumes reading only when it was paused, and
reads its answers' bodies as :class:`~proxy.aiohttp_ext.upstream_body.UpstreamBody`. A stream
written one event per HTTP chunk, far faster than it is read, makes aiohttp pause and resume the
connection; every event must still arrive, in order. A body-less answer keeps aiohttp's shared empty
reader.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.http_parser import RawResponseMessage
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader

from proxy.aiohttp_ext.upstream_body import UpstreamBody
from proxy.aiohttp_ext.upstream_connection import UpstreamConnection
from proxy.core.canonical import Call, Message
from proxy.core.reply import Chunk, RawFrames
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider
from proxy.upstream.transport import HttpTransport
from tests.proxy.pauses import count_pauses

EVENTS = 300
TEXT = "x" * 10_000  # 300 events of about 10 kB: 3 MB, 23 times the read buffer's high mark


def _event(index: int) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt",
        "choices": [{"index": 0, "delta": {"content": f"{index}:{TEXT}"}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def _chat(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for index in range(EVENTS):
        await response.write(_event(index))  # one HTTP chunk per event
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


async def test_a_stream_read_slower_than_it_is_written_arrives_whole_and_in_order(
    base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses = count_pauses(monkeypatch, UpstreamConnection)
    body_reads: list[UpstreamBody] = []
    readany = UpstreamBody.readany

    async def counted(self: UpstreamBody) -> bytes:
        body_reads.append(self)
        return await readany(self)

    monkeypatch.setattr(UpstreamBody, "readany", counted)
    provider = OpenAIProvider("up", OpenAIConfig(base_url=base_url, api_key="sk-test"))
    transport = HttpTransport({"up": provider})
    call = Call(
        request_id="r",
        dialect="openai",
        model="up/gpt",
        messages=[Message(role="user", content="hi")],
        stream=True,
    )
    texts: list[str] = []
    try:
        async with asyncio.timeout(30):  # a connection never resumed would hang here
            stream = await transport.open_stream(provider, provider.build_request(call, "gpt"))
            async for read in stream:
                await asyncio.sleep(0.002)  # a slow reader: the upstream's chunks pile up
                for item in read:
                    chunks = (
                        [item.parse(payload) for payload in item.payloads()]
                        if isinstance(item, RawFrames)
                        else [item]
                    )
                    texts += [c.choices[0].delta.content for c in chunks if isinstance(c, Chunk)]
    finally:
        await transport.close()
    assert pauses, "the stream never filled the read buffer: this test proves nothing"
    assert body_reads, "the answer was not read as an UpstreamBody"
    assert [text.split(":", 1)[0] for text in texts] == [str(index) for index in range(EVENTS)]
    assert all(text.endswith(TEXT) for text in texts)


async def test_an_answers_body_reader_becomes_an_upstream_body_and_the_empty_one_stays() -> None:
    loop = asyncio.get_running_loop()
    connection = UpstreamConnection(loop)
    head = RawResponseMessage(
        version=(1, 1),
        code=200,
        reason="OK",
        headers={},  # type: ignore[arg-type]
        raw_headers=(),
        should_close=False,
        compression=None,
        upgrade=False,
        chunked=True,
    )
    body = StreamReader(connection, 2**16, loop=loop)
    connection.feed_data((head, body))
    connection.feed_data((head, EMPTY_PAYLOAD))
    assert (await connection.read())[1] is body
    assert type(body) is UpstreamBody
    assert (await connection.read())[1] is EMPTY_PAYLOAD
