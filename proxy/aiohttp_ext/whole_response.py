"""A whole answer of the dialect routes, written as one header block and body in one write.

aiohttp's ``web.Response`` spends about as much CPU preparing and writing a small JSON answer as
the cache spends finding it: the header dict is copied into a ``CIMultiDict`` after a round of
argument checks, then ``prepare`` walks cookies, compression, chunking, empty-body rules and the
``Date``/``Server``/``Connection`` defaults through a dozen calls, serialises the headers and
hands them and the body to the writer separately. The gateway's answers need none of the
choices: a ``bytes`` body, a status, headers the gateway names itself, never a cookie,
compression or chunking.

:class:`WholeResponse` is a ``web.Response`` (so the access log, ``on_response_prepare`` hooks
such as CORS and anything reading ``.headers`` see what they always did) whose ``prepare``, for
an HTTP/1.1 request, serialises the status line and headers itself and writes them with the body
in one call: the same bytes aiohttp would send — the headers in the order given, then
``Content-Length``, ``Date`` (aiohttp's cached per-second value) and ``Server`` if the answer has
none, and ``Connection: close`` when the connection will not be kept alive, then whatever the
``on_response_prepare`` signals add — serialised by aiohttp's own serialiser, so a control
character in a header name or value raises ``ValueError`` before a byte is written and aiohttp
drops the connection, as it always did. Anything else (HTTP/1.0, a HEAD
request, a cookie or compression someone enabled, a status that must have no body) takes
aiohttp's own path.

It leans on four aiohttp internals (the ``_real_headers`` argument, the request's
``_prepare_hook``, the header serialiser and the writer's ``_write``, which counts the bytes the
access log reports and refuses a closing transport as ``write_eof`` would);
``tests/proxy/aiohttp_ext/test_whole_response.py`` compares its bytes with ``web.Response``'s, so an
aiohttp upgrade that changes them fails there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11
from aiohttp.http_writer import StreamWriter
from aiohttp.http_writer import _serialize_headers as serialize_headers
from multidict import CIMultiDict

_NO_BODY_STATUSES = frozenset({204, 304})


class WholeResponse(web.Response):
    """A complete ``bytes`` answer (see the module docstring); ``prepare`` sends it all, and
    ``write_eof`` after it is a no-op, as for any response already finished."""

    def __init__(self, body: bytes, headers: Mapping[str, str], status: int = 200) -> None:
        """``headers`` must not contain ``Content-Length`` (it is the body's) — nor is it checked
        here: the gateway's routes never set it."""
        web.StreamResponse.__init__(self, status=status, _real_headers=CIMultiDict(headers))
        self._body = body
        self._zlib_executor_size = 0
        self._zlib_executor = None

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if (
            self._payload_writer is not None
            or self._eof_sent
            or request.version != HttpVersion11
            or self._cookies
            or self._compression
            or self._chunked
            or self._status in _NO_BODY_STATUSES
            or request.method == hdrs.METH_HEAD
        ):
            return await super().prepare(request)
        # aiohttp annotates the writer as the abstract one; its server gives every request an
        # http_writer.StreamWriter, whose _write this relies on (see the module docstring).
        writer = cast(StreamWriter, request.writer)
        self._req = request
        self._payload_writer = writer
        keep_alive = self._keep_alive
        if keep_alive is None:
            keep_alive = self._keep_alive = request.keep_alive
        body = self._body
        assert isinstance(body, bytes)
        headers = self._headers
        headers[hdrs.CONTENT_LENGTH] = str(len(body))
        if hdrs.DATE not in headers:
            headers[hdrs.DATE] = rfc822_formatted_time()
        if hdrs.SERVER not in headers:
            headers[hdrs.SERVER] = SERVER_SOFTWARE
        if not keep_alive and hdrs.CONNECTION not in headers:
            headers[hdrs.CONNECTION] = "close"
        await request._prepare_hook(self)  # on_response_prepare signals (CORS) may add headers
        head = serialize_headers(f"HTTP/1.1 {self._status} {self._reason}", headers)
        writer._write(head + body)  # what write_eof does with it, uncompressed and unchunked
        await writer.drain()  # waits only while the transport is paused for writing
        self._eof_sent = True  # the writer is this request's alone: its own end is not needed
        self._req = None
        self._body_length = writer.output_size
        self._payload_writer = None
        return writer
