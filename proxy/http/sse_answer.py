"""A reply stream written to the client as SSE, in the client's dialect.

:func:`stream_answer` writes the headers first (``text/event-stream``, no caching, no proxy
buffering, and the headers of every answer), then the stream's items as they come: what arrived
together (one :class:`~proxy.core.streams.BatchedStream` batch) is encoded by the dialect's
:class:`~proxy.dialects.base.StreamEncoder` and flushed in one write; verbatim upstream frames
(:class:`~proxy.core.reply.RawFrames`) are relayed as they came when the encoder can relay them
(:class:`~proxy.core.streams.RelaysFrames`: an OpenAI client of an OpenAI-compatible upstream);
a stream that offers no batches is written a chunk at a time
(:func:`~proxy.core.streams.batched`). The last batch leaves together with the dialect's end
marker and the chunked encoding's end, in one write. A stream already complete
when it starts (a cache replay) is written in one go: one body with a content length, the same
frames and end. While the upstream is silent for the encoder's ``keepalive`` interval, a ping
frame is written (dialects without one send none); the read that is waiting is not cancelled
by a ping.

Failures: the headers have gone out before the first item, so a failure while the stream is
read (a :class:`~proxy.core.errors.GatewayError`) is an in-band error frame in the dialect's shape,
and no end marker follows; the outcome gets the error and its status. An encoder whose wire
format has no in-band error (a streamed audio body: its ``error`` is empty) gets its answer cut
instead: the connection is dropped before the chunked encoding's end, so that the client does
not take what it got for the whole answer. A client that went away
(a write reset) counts as :data:`~proxy.http.answer.CLIENT_CLOSED` and nothing more is written. A
stream still running when a stop's deadline passes (:mod:`proxy.http.drain`) ends with the in-band
error frame of :func:`~proxy.http.drain.shutting_down` (503 ``server_shutting_down``). In every case
the upstream stream is closed (``aclose``) before the answer returns, which frees its
connection, and a read still pending for the pinger is cancelled.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from proxy.aiohttp_ext.whole_response import WholeResponse
from proxy.core.canonical import Call, Timings
from proxy.core.errors import GatewayError
from proxy.core.reply import Chunk, RawFrames, Reply
from proxy.core.streams import BatchedStream, ReplyStream, batched, is_closable, relays_frames
from proxy.dialects.base import Dialect, StreamEncoder
from proxy.http.answer import CLIENT_CLOSED, Outcome, reply_headers
from proxy.http.drain import Drain, shutting_down

_SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}


async def stream_answer(
    request: web.Request,
    dialect: Dialect,
    call: Call,
    reply: Reply,
    request_id: str,
    outcome: Outcome,
    drain: Drain,
) -> web.StreamResponse:
    """Write ``reply``'s stream to the client as SSE (see the module docstring), keeping its
    status, usage and any error in ``outcome``; ``drain`` says whether a cancellation is a
    stop's deadline (else it propagates: the client went away)."""
    stream = reply.stream
    assert stream is not None
    encoder = dialect.stream_encoder(call, reply)
    headers = {**_SSE_HEADERS, **reply_headers(dialect, call, reply, request_id)}
    timings = call.timings
    outcome.status = 200
    # What arrived together leaves in one write; verbatim frames go out as they came when the
    # encoder can relay them (an OpenAI client of an OpenAI-compatible upstream).
    source = batched(stream)
    if source.ended:  # all of it is here (a cache replay): one body, one write
        return await _stream_at_once(source, stream, encoder, headers, timings, outcome)
    response = web.StreamResponse(headers=headers)
    pinger = None if encoder.keepalive is None else _Pinger(source, encoder, response)
    next_batch = source.next_batch if pinger is None else pinger.next_batch
    relay = encoder.relay if relays_frames(encoder) else None
    pending: list[bytes] = []
    cut = False
    try:
        await response.prepare(request)
        while batch := await next_batch(relay is not None):
            for item in batch:
                if type(item) is RawFrames:
                    pending.append(relay(item))  # type: ignore[misc]
                    continue
                if item.usage is not None:
                    outcome.usage = item.usage
                data = encoder.chunk(item)  # type: ignore[arg-type]
                if data:
                    pending.append(data)
            if pending and not source.ended:
                if timings.first_token is None:
                    timings.first_token = time.perf_counter() - timings.start
                data = b"".join(pending) if len(pending) > 1 else pending[0]
                pending.clear()  # before the write: what an interrupted one took is not resent
                await response.write(data)
        pending.append(encoder.end())
    except GatewayError as error:
        _failed(error, encoder, pending, outcome)
        cut = not pending[-1]  # the wire format has no in-band error (audio)
    except asyncio.CancelledError:
        if not drain.claim():  # the client went away
            raise
        _failed(shutting_down(), encoder, pending, outcome)
        cut = not pending[-1]
    except ConnectionResetError:
        outcome.status = CLIENT_CLOSED
        return response
    finally:
        if pinger is not None:
            await pinger.close()
        if is_closable(stream):  # a plugin's plain iterator has nothing to close
            await stream.aclose()
    if cut:
        return await _cut(request, response, pending)
    try:
        if timings.first_token is None:
            timings.first_token = time.perf_counter() - timings.start
        await response.write_eof(b"".join(pending))  # the last chunk and the end: one write
    except ConnectionResetError:
        outcome.status = CLIENT_CLOSED
    return response


async def _stream_at_once(
    source: BatchedStream,
    stream: ReplyStream,
    encoder: StreamEncoder,
    headers: dict[str, str],
    timings: Timings,
    outcome: Outcome,
) -> web.Response:
    """A stream whose every item is already held, sent as one SSE body with a length: the
    same frames and end (or in-band error) as :func:`stream_answer` would write, in one write
    instead of headers, chunks and the chunked encoding's end. Nothing waits, so no pings."""
    relay = encoder.relay if relays_frames(encoder) else None
    pending: list[bytes] = []
    try:
        while batch := await source.next_batch(relay is not None):
            for item in batch:
                if type(item) is RawFrames:
                    pending.append(relay(item))  # type: ignore[misc]
                    continue
                if item.usage is not None:
                    outcome.usage = item.usage
                pending.append(encoder.chunk(item))  # type: ignore[arg-type]
        pending.append(encoder.end())
    except GatewayError as error:
        _failed(error, encoder, pending, outcome)
    finally:
        if is_closable(stream):
            await stream.aclose()
    if timings.first_token is None:
        timings.first_token = time.perf_counter() - timings.start
    return WholeResponse(b"".join(pending), headers)


async def _cut(
    request: web.Request, response: web.StreamResponse, pending: list[bytes]
) -> web.StreamResponse:
    """End a failed answer whose wire format cannot say so (audio): what is pending is written,
    then the connection is dropped before the chunked encoding's end, so that the client sees
    a body cut short rather than a complete one."""
    try:
        data = b"".join(pending)
        if data:
            await response.write(data)
    except ConnectionResetError:
        return response
    transport = request.transport
    if transport is not None:
        transport.abort()
    return response


def _failed(
    error: GatewayError, encoder: StreamEncoder, pending: list[bytes], outcome: Outcome
) -> None:
    """The stream failed with ``error``: its in-band error frame is the last thing to write."""
    outcome.failed(error, error.status)
    pending.append(encoder.error(error))


class _Pinger:
    """Batches of ``source``, writing ``encoder.ping()`` whenever none came for a keep-alive
    period. The pending read is never cancelled by a ping: it is awaited again after the ping.
    """

    __slots__ = ("_encoder", "_pending", "_response", "_source")

    def __init__(
        self, source: BatchedStream, encoder: StreamEncoder, response: web.StreamResponse
    ) -> None:
        self._source = source
        self._encoder = encoder
        self._response = response
        self._pending: asyncio.Future[list[Chunk | RawFrames]] | None = None

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """As ``source.next_batch``, with pings written while it waits."""
        pending = self._pending
        if pending is None:
            pending = self._pending = asyncio.ensure_future(self._source.next_batch(raw))
        while not (await asyncio.wait((pending,), timeout=self._encoder.keepalive))[0]:
            await self._response.write(self._encoder.ping())
        self._pending = None
        return pending.result()

    async def close(self) -> None:
        """Cancel a read still pending, and wait until it has stopped."""
        pending, self._pending = self._pending, None
        if pending is not None and not pending.done():
            pending.cancel()
            await asyncio.wait((pending,))
