"""The shared HTTP transport: one pooled aiohttp session per provider, and the I/O of a call.

This is the only module that talks to upstreams. It enforces the connect and pool-acquire clocks
(through aiohttp's connector timeouts); the first-byte, idle and total clocks are the upstream
layer's, which wraps these coroutines. Network failures become
:class:`~proxy.core.errors.UpstreamUnavailable`, connect expiry
:class:`~proxy.core.errors.UpstreamTimeout`; non-2xx answers become the provider's classified error
(from at most :data:`MAX_ERROR_BODY` bytes of their body). Bodies are decompressed here, in
bounded pieces (:mod:`proxy.upstream.bodies`): a whole answer past the provider's
``max_response_bytes``, or a stream event past its ``max_event_bytes``, is
:class:`~proxy.core.errors.UpstreamResponseTooLarge`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import NoReturn

import aiohttp

from proxy.aiohttp_ext.upstream_connection import UpstreamConnector
from proxy.core.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable, drop_tracebacks
from proxy.core.reply import Chunk, MediaStream, RawFrames
from proxy.core.sse import SSEDecoder
from proxy.providers.base import (
    Capabilities,
    HttpProvider,
    HttpRequest,
    MediaMeter,
    StreamDecoder,
    StreamEnd,
    StreamParser,
    capabilities_of,
)
from proxy.upstream.bodies import ACCEPT_ENCODING, body_reader, read_prefix, read_whole, too_large

USER_AGENT = "crossway"
MAX_ERROR_BODY = 64 * 1024


class HttpTransport:
    """Owns the aiohttp sessions of one runtime snapshot; :meth:`close` releases them all."""

    def __init__(
        self,
        providers: Mapping[str, HttpProvider],
        capabilities: Mapping[str, Capabilities] | None = None,
    ) -> None:
        """Create one session per HTTP provider. Must run inside the event loop.
        ``capabilities`` are the providers' (:func:`~proxy.providers.base.capabilities_of`),
        decided here when not given: how each frames and parses its streams."""
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._capabilities = {
            name: capabilities_of(provider) if capabilities is None else capabilities[name]
            for name, provider in providers.items()
        }
        for name, provider in providers.items():
            timeouts = provider.config.timeouts
            connector = UpstreamConnector(
                limit=provider.config.max_connections,
                limit_per_host=0,
                ttl_dns_cache=300,
                enable_cleanup_closed=True,
            )
            self._sessions[name] = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=timeouts.pool_acquire + timeouts.connect,
                    sock_connect=timeouts.connect,
                ),
                headers={"user-agent": USER_AGENT, "accept-encoding": ACCEPT_ENCODING},
                trust_env=False,
                raise_for_status=False,
                auto_decompress=False,  # proxy.upstream.bodies inflates, within the limits
            )

    async def request(
        self, provider: HttpProvider, request: HttpRequest
    ) -> tuple[int, Mapping[str, str], bytes]:
        """POST ``request`` and read the whole answer: ``(status, headers, body)``; an error
        answer's body is cut to :data:`MAX_ERROR_BODY` bytes."""
        name = provider.name
        try:
            async with self._sessions[name].post(
                request.url, data=_data(request.body), headers=request.headers
            ) as response:
                if response.status >= 300:
                    body = await read_prefix(response, name, MAX_ERROR_BODY)
                else:
                    body = await read_whole(response, name, provider.config.max_response_bytes)
                return response.status, response.headers, body
        except aiohttp.ClientError as exc:
            _raise_network_error(exc, name)

    async def open_stream(
        self, provider: HttpProvider, request: HttpRequest
    ) -> AsyncIterator[list[Chunk | RawFrames | None]]:
        """POST ``request`` and return its stream of canonical chunks, one list per network read.

        A non-2xx answer is read and raised as the provider's error. The returned iterator
        releases the connection when it ends or is closed (closing it early drops the
        connection, which cancels the generation upstream).
        """
        response = await self._open(provider, request)
        return _chunks(provider, self._capabilities[provider.name], response)

    async def _open(self, provider: HttpProvider, request: HttpRequest) -> aiohttp.ClientResponse:
        """POST ``request`` and return the 2xx answer, its body unread; a non-2xx answer is
        read and raised as the provider's error."""
        try:
            response = await self._sessions[provider.name].post(
                request.url, data=_data(request.body), headers=request.headers
            )
        except aiohttp.ClientError as exc:
            _raise_network_error(exc, provider.name)
        if response.status >= 300:
            try:
                body = await read_prefix(response, provider.name, MAX_ERROR_BODY)
            except aiohttp.ClientError as exc:
                _raise_network_error(exc, provider.name)
            finally:
                response.release()
            raise provider.parse_error(response.status, response.headers, body)
        return response

    async def open_media_stream(
        self,
        provider: HttpProvider,
        request: HttpRequest,
        meter: Callable[[Mapping[str, str]], MediaMeter],
    ) -> MediaStream:
        """POST ``request`` and return its answer as a :class:`~proxy.core.reply.MediaStream`:
        the body's pieces as they arrive, each read by ``meter(headers)``'s meter on the way
        (the last chunk carries its usage). Errors and closing as :meth:`open_stream`."""
        response = await self._open(provider, request)
        content_type = response.headers.get("content-type", "application/octet-stream")
        try:
            reading = meter(response.headers)
        except BaseException:
            response.release()
            raise
        return MediaStream(content_type, _media_pieces(provider, reading, response))

    async def close(self) -> None:
        """Close every session (in-flight calls on them fail)."""
        await asyncio.gather(*(session.close() for session in self._sessions.values()))


async def _chunks(
    provider: HttpProvider, capabilities: Capabilities, response: aiohttp.ClientResponse
) -> AsyncIterator[list[Chunk | RawFrames | None]]:
    """The chunks of a stream body, batched by network read (empty batches are skipped).

    The batch that carries the provider's end marker ends with ``None``, so the reader knows the
    stream is complete without waiting for another read. A provider that
    :class:`~proxy.providers.base.ParsesStreams` gets one parser per stream, which also judges a
    body that ends without an end marker. A provider whose streams are not SSE
    (:class:`~proxy.providers.base.DecodesStreams`): one decoder per stream frames its body
    instead of :class:`SSEDecoder`. A provider that
    :class:`~proxy.providers.base.VouchesFrames` (and neither of those) is offered each read that
    starts on an SSE frame boundary: the frames it vouches for travel as one :class:`RawFrames`
    item instead of being decoded here. An event that grows past ``max_event_bytes``
    (decompressed) ends the stream with :class:`~proxy.core.errors.UpstreamResponseTooLarge`.
    """
    make_decoder = capabilities.stream_decoder
    decoder: StreamDecoder = make_decoder() if make_decoder is not None else SSEDecoder()
    make_parser = capabilities.stream_parser
    parser: StreamParser | None = make_parser() if make_parser is not None else None
    parse = parser.parse_event if parser is not None else provider.parse_event
    relay = capabilities.relay_frames if parser is None else None
    sse = decoder if relay is not None and isinstance(decoder, SSEDecoder) else None
    max_event = provider.config.max_event_bytes
    try:
        read = body_reader(response, provider.name)
        while True:
            data = await read()
            batch: list[Chunk | RawFrames | None] = []
            if sse is not None and data and sse.idle:
                frames, rest = relay(data)  # type: ignore[misc]  # not None when sse is not
                if frames is not None:
                    batch.append(frames)
                    if not rest:
                        yield batch
                        continue
                    data = rest
            for name, payload in decoder.feed(data) if data else decoder.close():
                try:
                    chunk = parse(name, payload)
                except StreamEnd:
                    batch.append(None)
                    yield batch
                    return
                except UpstreamError:
                    if batch:  # what arrived before the in-band error still reaches the client
                        yield batch
                    raise
                if chunk is not None:
                    batch.append(chunk)
            if decoder.pending > max_event:
                if batch:  # what arrived before the oversized event still reaches the client
                    yield batch
                raise too_large(provider.name, "a stream event", max_event)
            if batch:
                yield batch
            if not data:
                if parser is None:
                    raise UpstreamUnavailable(
                        "upstream closed the stream before its end marker", provider=provider.name
                    )
                last = parser.end()
                yield [None] if last is None else [last, None]
                return
    except aiohttp.ClientError as exc:
        _raise_network_error(exc, provider.name)
    finally:
        response.release()


async def _media_pieces(
    provider: HttpProvider, meter: MediaMeter, response: aiohttp.ClientResponse
) -> AsyncIterator[list[Chunk | RawFrames | None]]:
    """A media answer's body, one chunk per network read (:attr:`Chunk.media`: the bytes as
    they came, read by ``meter`` first; the first with the meter's bound as a provisional
    usage); at its end a last chunk with the meter's usage and ``None``. Releases the
    connection when it ends or is closed (early: dropped)."""
    try:
        read = body_reader(response, provider.name)
        provisional = meter.bound()  # on the first piece: what a stream left early is charged
        while data := await read():
            meter.feed(data)
            yield [Chunk(id="", model="", choices=[], media=data, usage=provisional)]
            provisional = None
        yield [Chunk(id="", model="", choices=[], media=b"", usage=meter.usage()), None]
    except aiohttp.ClientError as exc:
        _raise_network_error(exc, provider.name)
    finally:
        response.release()


def _data(body: bytes | tuple[bytes, ...]) -> bytes | AsyncIterator[bytes]:
    """What aiohttp sends for ``body``: bytes as they are, pieces one after another (their
    length is in the request's ``content-length``, so they are not chunked)."""
    return body if isinstance(body, bytes) else _pieces(body)


async def _pieces(pieces: tuple[bytes, ...]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


def _raise_network_error(exc: aiohttp.ClientError, provider: str) -> NoReturn:
    """Raise the gateway's error for aiohttp's ``exc``, whose tracebacks are dropped first:
    aiohttp and asyncio keep a connection error in frames its traceback holds, a cycle that
    would keep this call's frames (the request's body among their locals) until the garbage
    collector found it (:func:`~proxy.core.errors.drop_tracebacks`)."""
    drop_tracebacks(exc)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        raise UpstreamTimeout(
            f"could not connect to provider {provider!r} in time",
            code="connect_timeout",
            provider=provider,
        ) from None
    raise UpstreamUnavailable(
        f"provider {provider!r} could not be reached ({type(exc).__name__})", provider=provider
    ) from None
