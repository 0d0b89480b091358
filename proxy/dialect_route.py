"""The dialect routes' request pipeline: one handler per dialect, the same steps for each.

Every dialect route runs the same pipeline: authenticate the request through the current
snapshot's gate before the body is read (a client without a key costs no decoding), read the
body bounded in size and time (``server.max_body_bytes``, ``server.body_read_timeout``) and
checked for nesting, decode it with the dialect, resolve the model, run the plugin chain on the
snapshot (a Responses call inside its conversation state), and answer in the dialect — as one
JSON body, or as an SSE stream whose chunks are flushed as they arrive. Each request is counted
in the metrics, logged as one access line (when ``server.access_log`` is on, and always for a
5xx), and handed to the plugins' ``finished`` hooks.

A failure before the first byte is an error response in the dialect's shape; after it, an
in-band error frame and no end marker. A client that went away counts as
:data:`CLIENT_CLOSED`. :func:`dialect_handler` is the entry (:mod:`proxy.app` routes each
dialect's paths to one); :func:`read_body` also reads the side routes' bodies, and
:func:`with_response_state` is the Responses dialect's ``around``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from proxy.app_keys import METRICS, RUNTIME, SERVER
from proxy.canonical import (
    ANONYMOUS,
    BatchedStream,
    Call,
    Chunk,
    Principal,
    RawFrames,
    Reply,
    Timings,
    Usage,
    batched,
)
from proxy.chain import FinishedRequest
from proxy.compat_headers import add_litellm_headers
from proxy.config import ServerConfig
from proxy.dialects.base import Dialect, StreamEncoder, check_json_depth
from proxy.errors import (
    GatewayError,
    InternalError,
    NoReadyDeployment,
    PayloadTooLarge,
    RequestTimeout,
)
from proxy.logs import AccessLog
from proxy.metrics import Metrics
from proxy.middleware import REQUEST_ID, SERVER_HEADER, RequestIds
from proxy.pricing import nanos_to_usd
from proxy.protocol import SERVER_NAME
from proxy.response_state import ResponseState
from proxy.runtime import Snapshot
from proxy.whole_response import WholeResponse

CLIENT_CLOSED = 499  # nginx's convention for "the client went away"
_MAX_LOGGED_MODEL = 256
_SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}
_JSON = "application/json"


async def read_body(request: web.Request, server: ServerConfig) -> bytes:
    """The request's JSON body, read within the server's size and time limits and checked for
    nesting (:func:`~proxy.dialects.base.check_json_depth`) before any decoder sees it."""
    body = await _read_bounded(request, server)
    check_json_depth(body)
    return body


async def _read_bounded(request: web.Request, server: ServerConfig) -> bytes:
    limit = server.max_body_bytes
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(f"request body exceeds the {limit}-byte limit")
    try:
        content = request.content
        if content.is_eof():  # already fully received: take it without waiting
            body = content.read_nowait()
            if len(body) > limit:  # a chunked body has no content-length to check first
                raise PayloadTooLarge(f"request body exceeds the {limit}-byte limit")
            return body
        async with asyncio.timeout(server.body_read_timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"request body exceeds the {limit}-byte limit") from None
    except TimeoutError:
        raise RequestTimeout("the request body was not received in time") from None


class _Outcome:
    """What one request did, for its metrics, access line and finished hooks."""

    __slots__ = (
        "attempts",
        "error",
        "model",
        "principal",
        "provider",
        "status",
        "upstream_model",
        "usage",
    )

    def __init__(self) -> None:
        self.principal: Principal = ANONYMOUS  # known before the body is decoded
        self.status = 500
        self.model = "none"
        self.provider = "none"
        self.upstream_model: str | None = None
        self.attempts = 0
        self.usage: Usage | None = None
        self.error: GatewayError | None = None


Around = Callable[[Call, Snapshot], Awaitable[Reply]]


def with_response_state(state: ResponseState) -> Around:
    """Responses calls run their chain inside the conversation state (continue, store)."""

    async def around(call: Call, snapshot: Snapshot) -> Reply:
        return await state.run(call, snapshot.chain, snapshot.authenticate)

    return around


def dialect_handler(
    dialect: Dialect, app: web.Application, request_ids: RequestIds, around: Around | None = None
) -> Any:
    """The request pipeline for one dialect (see the module docstring); ``around``, when given,
    runs the chain in its place (it calls the snapshot's chain itself)."""
    metrics = app[METRICS]
    server = app[SERVER]  # limits apply as the process started (aiohttp enforces them too)
    in_flight = metrics.in_flight(dialect.name)
    name = dialect.name

    async def handle(request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        request_id = request_ids(request)
        snapshot = app[RUNTIME].snapshot
        snapshot.enter()
        in_flight.inc()
        outcome = _Outcome()
        call: Call | None = None
        gate = snapshot.gate
        try:
            try:
                # Authenticated before the body is read: a client without a key costs no decoding
                principal = ANONYMOUS if gate is None else await gate(request.headers)
                outcome.principal = principal
                body = await read_body(request, server)
                call = dialect.decode(body, request.headers, request_id, start)
                if not call.model:  # a dialect that lets the client omit it (Fabro)
                    call.model = snapshot.router.default_model(call.options.provider)
                if gate is not None:
                    call.principal = principal
                try:
                    call.deployments = snapshot.router.resolve(call.model, call.options.provider)
                except NoReadyDeployment:  # the upstream refuses, unless a plugin reroutes
                    call.deployments = []
                outcome.model = metrics.model_label(call.model)
                if around is None:
                    reply = await snapshot.chain(call)
                else:
                    reply = await around(call, snapshot)
                if snapshot.litellm_headers:
                    add_litellm_headers(reply)
                outcome.provider = reply.provider
                outcome.upstream_model = reply.model
                outcome.attempts = reply.attempts
                if reply.stream is None:
                    return _whole(dialect, call, reply, request_id, outcome)
            except GatewayError as error:
                return _error_response(dialect, error, request_id, outcome)
            except Exception:
                snapshot.logger.exception("unhandled_error", request_id=request_id, dialect=name)
                return _error_response(
                    dialect, InternalError("internal gateway error"), request_id, outcome
                )
            return await _stream(request, dialect, call, reply, request_id, outcome)
        except asyncio.CancelledError:
            outcome.status = CLIENT_CLOSED
            raise
        finally:
            in_flight.dec()
            _observe(metrics, name, call, outcome, start)
            if snapshot.config.server.access_log or outcome.status >= 500:
                _access_log(snapshot.access_log, name, call, outcome, start, request_id)
            if snapshot.finishers:
                _finished(snapshot, name, call, outcome, start, request_id)
            snapshot.leave()

    return handle


def _reply_headers(dialect: Dialect, call: Call, reply: Reply, request_id: str) -> dict[str, str]:
    headers = {
        SERVER_HEADER: SERVER_NAME,  # instead of aiohttp's banner (see proxy.protocol)
        REQUEST_ID: request_id,
        "x-crossway-provider": reply.provider,
        "x-crossway-model": f"{reply.provider}/{reply.model}",
        **dialect.response_headers(call, reply),
    }
    if reply.headers:
        headers.update(reply.headers)
    return headers


def _whole(
    dialect: Dialect, call: Call, reply: Reply, request_id: str, outcome: _Outcome
) -> web.Response:
    outcome.usage = reply.whole_usage()
    encoded = reply.encoded
    if (
        encoded is not None
        and encoded.response is reply.response
        and encoded.dialect == dialect.name
    ):
        body = encoded.body  # made ahead for this dialect, and the answer is still the same
    else:
        body = dialect.encode_response(call, reply)
    outcome.status = 200
    headers = _reply_headers(dialect, call, reply, request_id)
    headers["content-type"] = _JSON
    return WholeResponse(body, headers)


async def _stream(
    request: web.Request,
    dialect: Dialect,
    call: Call,
    reply: Reply,
    request_id: str,
    outcome: _Outcome,
) -> web.StreamResponse:
    stream = reply.stream
    assert stream is not None
    encoder = dialect.stream_encoder(call, reply)
    headers = {**_SSE_HEADERS, **_reply_headers(dialect, call, reply, request_id)}
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
    relay = getattr(encoder, "relay", None)
    pending: list[bytes] = []
    try:
        await response.prepare(request)
        while batch := await next_batch(relay is not None):
            for item in batch:
                if type(item) is RawFrames:
                    pending.append(relay(item))  # type: ignore[misc]
                    continue
                if item.usage is not None:  # type: ignore[union-attr]
                    outcome.usage = item.usage  # type: ignore[union-attr]
                data = encoder.chunk(item)  # type: ignore[arg-type]
                if data:
                    pending.append(data)
            if pending and not source.ended:
                if timings.first_token is None:
                    timings.first_token = time.perf_counter() - timings.start
                await response.write(b"".join(pending) if len(pending) > 1 else pending[0])
                pending.clear()
        pending.append(encoder.end())
    except GatewayError as error:
        outcome.error = error
        outcome.status = error.status
        pending.append(encoder.error(error))
    except ConnectionResetError:
        outcome.status = CLIENT_CLOSED
        return response
    finally:
        if pinger is not None:
            await pinger.close()
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    try:
        if timings.first_token is None:
            timings.first_token = time.perf_counter() - timings.start
        await response.write(b"".join(pending))
        await response.write_eof()
    except ConnectionResetError:
        outcome.status = CLIENT_CLOSED
    return response


async def _stream_at_once(
    source: BatchedStream,
    stream: AsyncIterator[Chunk],
    encoder: StreamEncoder,
    headers: dict[str, str],
    timings: Timings,
    outcome: _Outcome,
) -> web.Response:
    """A stream whose every item is already held, sent as one SSE body with a length: the
    same frames and end (or in-band error) as :func:`_stream` would write, in one write
    instead of headers, chunks and the chunked encoding's end. Nothing waits, so no pings."""
    relay = getattr(encoder, "relay", None)
    pending: list[bytes] = []
    try:
        while batch := await source.next_batch(relay is not None):
            for item in batch:
                if type(item) is RawFrames:
                    pending.append(relay(item))  # type: ignore[misc]
                    continue
                if item.usage is not None:  # type: ignore[union-attr]
                    outcome.usage = item.usage  # type: ignore[union-attr]
                pending.append(encoder.chunk(item))  # type: ignore[arg-type]
        pending.append(encoder.end())
    except GatewayError as error:
        outcome.error = error
        outcome.status = error.status
        pending.append(encoder.error(error))
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    if timings.first_token is None:
        timings.first_token = time.perf_counter() - timings.start
    return WholeResponse(b"".join(pending), headers)


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


def _error_response(
    dialect: Dialect, error: GatewayError, request_id: str, outcome: _Outcome
) -> web.Response:
    status = dialect.error_status(error)
    outcome.status = status
    outcome.error = error
    if error.provider is not None:
        outcome.provider = error.provider
        outcome.attempts = error.attempts
    headers = error.response_headers()
    headers.update(dialect.error_headers(error, request_id))
    headers[REQUEST_ID] = request_id
    headers[SERVER_HEADER] = SERVER_NAME
    headers["content-type"] = _JSON
    return WholeResponse(dialect.encode_error(error, request_id), headers, status)


def _observe(
    metrics: Metrics, dialect: str, call: Call | None, outcome: _Outcome, start: float
) -> None:
    total = time.perf_counter() - start
    provider = outcome.provider
    series = metrics.request_series(dialect, outcome.model, provider)
    series.count(outcome.status)
    series.duration.observe(total)
    if call is None:
        series.overhead.observe(total)
        return
    timings = call.timings
    series.overhead.observe(max(total - timings.upstream_wait, 0.0))
    served_by_upstream = call.accounting.cache != "hit"  # a cache hit made no upstream call
    if provider != "none" and served_by_upstream:
        series.upstream(timings.upstream_wait)
    if timings.first_token is not None:
        series.time_to_first_token(timings.first_token)
    if outcome.usage is not None and served_by_upstream:
        series.record_tokens(outcome.usage)


def _finished(
    snapshot: Snapshot,
    dialect: str,
    call: Call | None,
    outcome: _Outcome,
    start: float,
    request_id: str,
) -> None:
    """Tell the plugins that record every request (``finished`` hooks) what this one did."""
    error = outcome.error
    provider = outcome.provider
    finished = FinishedRequest(
        request_id=request_id,
        dialect=dialect,
        call=call,
        principal=outcome.principal if call is None else call.principal,
        status=outcome.status,
        provider=None if provider == "none" else provider,
        upstream_model=outcome.upstream_model,
        usage=outcome.usage,
        error_code=None if error is None else error.code,
        duration=time.perf_counter() - start,
        ended_at=time.time(),
        attempts=outcome.attempts,
    )
    for hook in snapshot.finishers:
        try:
            hook(finished)
        except Exception:
            snapshot.logger.exception("finished_hook_failed", request_id=request_id)


def _access_log(
    access_log: AccessLog,
    dialect: str,
    call: Call | None,
    outcome: _Outcome,
    start: float,
    request_id: str,
) -> None:
    total = time.perf_counter() - start
    fields: dict[str, Any] = {
        "request_id": request_id,
        "dialect": dialect,
        "model": call.model[:_MAX_LOGGED_MODEL] if call is not None else None,
        "provider": outcome.provider,
        "status": outcome.status,
        "duration_ms": round(total * 1000, 3),
    }
    if call is not None:
        timings = call.timings
        fields["upstream_ms"] = round(timings.upstream_wait * 1000, 3)
        fields["overhead_ms"] = round((total - timings.upstream_wait) * 1000, 3)
        fields["stream"] = call.stream
        if timings.first_token is not None:
            fields["ttft_ms"] = round(timings.first_token * 1000, 3)
        principal = call.principal
        if principal is not ANONYMOUS:
            fields["key_id"] = principal.key_id
            fields["key_alias"] = principal.key_alias
            fields["team"] = principal.team
            fields["user"] = principal.user
    usage = outcome.usage
    if usage is not None:
        fields["input_tokens"] = usage.prompt_tokens
        fields["output_tokens"] = usage.completion_tokens
    if call is not None and call.accounting.cost_nanos is not None:
        fields["cost_usd"] = nanos_to_usd(call.accounting.cost_nanos)
        fields["cost_source"] = call.accounting.cost_source
    if call is not None and call.accounting.cache is not None:
        fields["cache"] = call.accounting.cache
    error = outcome.error
    if error is not None:
        fields["error_code"] = error.code
        fields["error"] = error.message
    access_log.write(fields)
