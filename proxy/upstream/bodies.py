"""Reading upstream bodies within bounds: decompression the gateway controls, sizes it counts.

The transport's sessions do not decompress (``auto_decompress=False``): a small gzip body can
inflate a thousandfold, and aiohttp inflates each network read whole. Here a body is inflated
in pieces of at most :data:`PIECE` bytes, so that what the gateway holds is bounded by what it
has decided to accept: :func:`read_whole` fails as soon as the decompressed size passes its
limit, and :func:`body_reader` hands a stream out piece by piece. ``gzip`` and ``deflate`` (the
encodings the gateway asks for) are decoded; any other ``content-encoding`` is refused.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable

import aiohttp

from proxy.core.errors import UpstreamError, UpstreamResponseTooLarge

ACCEPT_ENCODING = "gzip, deflate"
PIECE = 64 * 1024
"""The most one inflation step produces (the rest of its input waits for the next read)."""

Reader = Callable[[], Awaitable[bytes]]
"""Returns the next piece of a body (decompressed); ``b""`` once it has ended."""


class _Inflating:
    """A body reader that inflates ``content`` (gzip or zlib-wrapped deflate) piece by piece."""

    __slots__ = ("_content", "_inflater", "_provider")

    def __init__(self, content: aiohttp.StreamReader, provider: str) -> None:
        self._content = content
        self._provider = provider
        self._inflater = zlib.decompressobj(wbits=32 + zlib.MAX_WBITS)  # gzip or zlib header

    async def __call__(self) -> bytes:
        inflater = self._inflater
        try:
            while True:
                tail = inflater.unconsumed_tail
                if tail:
                    piece = inflater.decompress(tail, PIECE)
                else:
                    data = await self._content.readany()
                    if not data:
                        if not inflater.eof:
                            raise UpstreamError(
                                "upstream sent a truncated compressed body",
                                upstream_status=200,
                                provider=self._provider,
                            )
                        return b""
                    piece = inflater.decompress(data, PIECE)
                if piece:
                    return piece
                if inflater.eof and not inflater.unconsumed_tail:
                    # Trailing bytes after the compressed stream end the body too.
                    return b""
        except zlib.error as exc:
            raise UpstreamError(
                f"upstream sent a body that does not decompress ({exc})",
                upstream_status=200,
                provider=self._provider,
            ) from None


def body_reader(response: aiohttp.ClientResponse, provider: str) -> Reader:
    """The reader of ``response``'s body, decompressed. Raises :class:`UpstreamError` for a
    content encoding the gateway did not ask for."""
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return response.content.readany
    if encoding in ("gzip", "x-gzip", "deflate"):
        return _Inflating(response.content, provider)
    raise UpstreamError(
        f"upstream answered with an unsupported content-encoding ({encoding[:40]!r})",
        upstream_status=response.status,
        provider=provider,
    )


async def read_whole(response: aiohttp.ClientResponse, provider: str, limit: int) -> bytes:
    """``response``'s whole body, decompressed; :class:`UpstreamResponseTooLarge` once it
    passes ``limit`` bytes (checked against ``content-length`` first, when not compressed)."""
    reader = body_reader(response, provider)
    length = response.content_length
    if reader == response.content.readany and length is not None and length > limit:
        raise too_large(provider, f"a {length}-byte answer", limit)
    parts: list[bytes] = []
    size = 0
    while piece := await reader():
        size += len(piece)
        if size > limit:
            raise too_large(provider, "an answer", limit)
        parts.append(piece)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def read_prefix(response: aiohttp.ClientResponse, provider: str, limit: int) -> bytes:
    """At most ``limit`` bytes of ``response``'s body, decompressed (an error body: its start
    is all that is shown)."""
    reader = body_reader(response, provider)
    parts: list[bytes] = []
    size = 0
    while size < limit and (piece := await reader()):
        parts.append(piece)
        size += len(piece)
    return b"".join(parts)[:limit]


def too_large(provider: str, what: str, limit: int) -> UpstreamResponseTooLarge:
    """The error for ``what`` (an answer, an event) exceeding ``limit`` bytes."""
    return UpstreamResponseTooLarge(
        f"provider {provider!r} sent {what} larger than the {limit}-byte limit",
        upstream_status=200,
        provider=provider,
    )
