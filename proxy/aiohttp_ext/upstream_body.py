"""An upstream answer's body as the gateway reads it: what is buffered, taken in one piece.

aiohttp's ``StreamReader`` keeps the position of every HTTP chunk's end (for ``readchunk`` and
``iter_chunks``) and ``readany`` takes the buffered chunks one call at a time, each paying that
bookkeeping again. An upstream streams one SSE event per HTTP chunk, so a 20-event answer read
in one go made about 60 such calls; the gateway never reads a body by chunk — its readers
(:mod:`proxy.upstream.bodies`) call ``readany`` only — so the boundaries are work for nothing.

:class:`UpstreamBody` is a ``StreamReader`` with the same slots: the upstream connections
(:class:`proxy.upstream.transport.UpstreamConnection`) give each answer's reader this class when the
parser hands it over. Its ``readany`` joins everything buffered in one call and its chunk ends
record no position; flow control is kept (reading pauses past the high mark or past
:attr:`~UpstreamBody.MAX_PIECES` buffered pieces, and resumes once a read leaves the buffer
below the low mark). What a resumed connection feeds while a read is taking the buffer is left
for the next read, as aiohttp's own reader does. aiohttp's readers that go by
chunk or by count (``readchunk``, ``read(n)``, ``readline``) are left as they are and still
work, without chunk boundaries (``readchunk`` answers the buffered pieces, as for a body that is
not chunked). ``tests/proxy/aiohttp_ext/test_upstream_body.py`` checks it against aiohttp's own
reader.
"""

from __future__ import annotations

from aiohttp.streams import StreamReader


class UpstreamBody(StreamReader):
    """A ``StreamReader`` read whole-buffer at a time (see the module docstring). Instances are
    made by aiohttp's parser as plain readers and given this class afterwards, which is why it
    adds no slots."""

    __slots__ = ()

    MAX_PIECES = 4096
    """Pieces buffered past which reading pauses however small they are (aiohttp's own bound
    for its default 64 KiB read buffer), so that a flood of tiny chunks cannot outgrow the
    buffer's byte bound many times over in per-piece overhead."""

    def end_http_chunk_receiving(self) -> None:
        """An HTTP chunk ended: no position to record (no reader here goes by chunk); reading
        pauses once more than :attr:`MAX_PIECES` pieces are buffered."""
        if len(self._buffer) > self.MAX_PIECES:
            self._protocol.pause_reading()

    async def readany(self) -> bytes:
        """Everything buffered, once something is (``b""`` at the end of the body); raises the
        exception the body ended with, as aiohttp's reader does."""
        if self._exception is not None:
            raise self._exception
        while not self._buffer and not self._eof:
            await self._wait("readany")
        buffer = self._buffer
        if not buffer:
            return b""
        self._timer.assert_timeout()
        if len(buffer) == 1:
            data = buffer.popleft()
        else:
            data = b"".join(buffer)
            buffer.clear()
        offset = self._buffer_offset
        if offset:  # a read by count took the start of the first piece
            data = data[offset:]
            self._buffer_offset = 0
        size = len(data)
        self._size -= size
        self._cursor += size
        if self._size < self._low_water:
            self._protocol.resume_reading()
        return data
