"""Reading a request's body within bounds: its size, its time, and what it inflates to.

The gateway's server hands request bodies to the routes as the client sent them
(:class:`proxy.aiohttp_ext.server.GatewayRequestHandler` turns aiohttp's decompression off): aiohttp
would inflate a ``gzip`` body as fast as it arrives, so that a 200 KiB upload became 200 MiB
before any limit was checked, and a body that was not gzip at all failed inside aiohttp's
parser (a 500, and a traceback on stderr). Here, with ``limit`` the server's
``max_body_bytes``:

- the body as sent is read within ``limit`` bytes (refused on its ``Content-Length`` before it
  is waited for) and the body-read timeout: 413 ``request_too_large``, 408 ``request_timeout``;
- a ``gzip`` / ``x-gzip`` / ``deflate`` body is then inflated with zlib told to produce at most
  ``limit + 1`` bytes, whatever the compression ratio: one byte more than the limit is 413
  before anything past it is inflated, and a body that does not inflate (not that coding,
  truncated, a bad checksum) is 400 ``invalid_content_encoding``;
- any other coding (``br``, ``zstd``, stacked codings) is 415 ``unsupported_content_encoding``;
  ``identity``, or no header, is taken as it is.

So one request costs at most its compressed body and ``limit + 1`` inflated bytes, both let go
when the request ends. Served by aiohttp's own runner instead (an embedding, unit tests),
aiohttp has inflated the body already; the reader sees that and does not inflate it twice.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web

from proxy.core.errors import BadRequest, PayloadTooLarge, RequestTimeout

_INFLATED_CODINGS = frozenset({"gzip", "x-gzip", "deflate"})
_GZIP_OR_ZLIB = 32 + zlib.MAX_WBITS  # zlib reads either header
_RAW_DEFLATE = -zlib.MAX_WBITS  # "deflate" sent without its zlib header (as some clients do)


async def read_request_body(request: web.Request, limit: int, seconds: float) -> bytes:
    """``request``'s body, inflated when it has a content coding, within ``limit`` bytes (as
    sent and as inflated) and ``seconds``; the errors are in the module docstring."""
    coding = _content_coding(request)
    body = await _read_as_sent(request, limit, seconds)
    if coding is None or not body:
        return body
    return inflate(body, coding, limit)


def _content_coding(request: web.Request) -> str | None:
    """The coding the gateway must undo (``gzip``, ``x-gzip``, ``deflate``), or None; raises
    415 for one it does not decode."""
    coding = request.headers.get("content-encoding", "").strip().lower()
    if coding in ("", "identity"):
        return None
    if request.content.total_compressed_bytes is not None:
        return None  # aiohttp's own runner inflated it already
    if coding in _INFLATED_CODINGS:
        return coding
    raise BadRequest(
        f"content-encoding {coding[:40]!r} is not supported (use gzip or deflate)",
        code="unsupported_content_encoding",
        status=415,
    )


async def _read_as_sent(request: web.Request, limit: int, seconds: float) -> bytes:
    """The body as sent: one already received whole (the common small request) is taken at
    once and measured; any other is refused on its ``Content-Length`` before it is waited for,
    then read within ``seconds``."""
    content = request.content
    if content.is_eof():  # already fully received: take it without waiting
        body = content.read_nowait()
    else:
        length = request.content_length
        if length is not None and length > limit:
            raise _too_large(limit)
        try:
            async with asyncio.timeout(seconds):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise _too_large(limit) from None
        except TimeoutError:
            raise RequestTimeout("the request body was not received in time") from None
    if len(body) > limit:  # a chunked body has no content-length to check first
        raise _too_large(limit)
    return body


def inflate(data: bytes, coding: str, limit: int) -> bytes:
    """``data`` inflated (``gzip``/``x-gzip``: one member or several; ``deflate``: zlib, or
    raw deflate), never producing more than ``limit + 1`` bytes: 413 past ``limit``, 400
    ``invalid_content_encoding`` for data that does not inflate or ends early."""
    parts: list[bytes] = []
    size = 0
    rest = data
    while rest:
        inflater = zlib.decompressobj(_window_bits(coding, rest))
        try:
            piece = inflater.decompress(rest, limit - size + 1)
        except zlib.error:
            raise _undecodable(coding) from None
        size += len(piece)
        if size > limit:
            raise PayloadTooLarge(f"request body inflates past the {limit}-byte limit")
        if not inflater.eof:  # not cut by the output bound (that is past the limit): truncated
            raise _undecodable(coding)
        parts.append(piece)
        rest = inflater.unused_data  # a further gzip member, or bytes that must be one
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _window_bits(coding: str, data: bytes) -> int:
    """zlib's ``wbits`` for ``data``: a gzip or zlib header, or raw deflate for a ``deflate``
    body whose first byte is not a zlib header's (compression method 8)."""
    if coding == "deflate" and data[0] & 0x0F != 8:
        return _RAW_DEFLATE
    return _GZIP_OR_ZLIB


def _undecodable(coding: str) -> BadRequest:
    return BadRequest(
        f"the request body is not valid {coding} data (content-encoding: {coding})",
        code="invalid_content_encoding",
    )


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body exceeds the {limit}-byte limit")
