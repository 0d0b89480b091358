"""proxy/aiohttp_ext/upstream_body.py: an upstream body read whole-buffer at a time, against
aiohttp's reader.

Each case feeds the same HTTP chunks to aiohttp's ``StreamReader`` and to an
:class:`~proxy.aiohttp_ext.upstream_body.UpstreamBody` (made as aiohttp's parser makes readers, then
given the class) and reads both with ``readany`` until the end: the bytes must be the same, and the
flow control the same (reading paused past the high mark, resumed once a read leaves the buffer
below the low mark, or at the body's end).
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.streams import StreamReader

from proxy.aiohttp_ext.upstream_body import UpstreamBody

LIMIT = 2**16  # the low mark (the high mark is twice that), as for aiohttp's default buffer


class _Protocol(BaseProtocol):
    """Counts pauses and resumes instead of pausing a transport (it has one that does nothing:
    a reader waits only on a connected protocol)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.transport = asyncio.Transport()
        self.pauses = 0
        self.resumes = 0

    def pause_reading(self) -> None:
        self.pauses += 1
        self._reading_paused = True

    def resume_reading(self, resume_parser: bool = True) -> None:
        self.resumes += 1
        self._reading_paused = False


def _readers() -> tuple[tuple[StreamReader, _Protocol], tuple[StreamReader, _Protocol]]:
    loop = asyncio.get_running_loop()
    made = []
    for upstream in (False, True):
        protocol = _Protocol(loop)
        reader = StreamReader(protocol, LIMIT, loop=loop)
        if upstream:
            reader.__class__ = UpstreamBody  # as proxy.upstream.transport.UpstreamConnection does
        made.append((reader, protocol))
    return made[0], made[1]


def _feed_chunked(reader: StreamReader, pieces: list[bytes]) -> None:
    reader.begin_http_chunk_receiving()
    for piece in pieces:
        reader.begin_http_chunk_receiving()
        reader.feed_data(piece)
        reader.end_http_chunk_receiving()


async def _read_all(reader: StreamReader) -> list[bytes]:
    reads = []
    while read := await reader.readany():
        reads.append(read)
    return reads


@pytest.mark.parametrize(
    "pieces",
    [
        [b"data: one\n\n"],
        [b"data: %d\n\n" % i for i in range(20)],
        [b"x" * 200_000, b"y", b"z" * 5],  # past the high mark in one piece
        [],
    ],
    ids=["one chunk", "twenty events", "past the high mark", "empty"],
)
async def test_a_body_read_at_once_gives_aiohttps_bytes_and_flow_control(
    pieces: list[bytes],
) -> None:
    (plain, plain_protocol), (upstream, upstream_protocol) = _readers()
    for reader in (plain, upstream):
        _feed_chunked(reader, pieces)
        reader.feed_eof()
    plain_reads = await _read_all(plain)
    upstream_reads = await _read_all(upstream)
    assert b"".join(upstream_reads) == b"".join(plain_reads) == b"".join(pieces)
    assert len(upstream_reads) == (1 if pieces else 0)  # everything buffered, in one read
    assert upstream_protocol.pauses == plain_protocol.pauses
    assert upstream_protocol.resumes <= plain_protocol.resumes  # one per read, not per chunk
    assert upstream.at_eof()


async def test_a_waiting_read_wakes_for_the_next_chunk_and_the_end() -> None:
    _, (upstream, _) = _readers()
    upstream.begin_http_chunk_receiving()
    waiting = asyncio.ensure_future(upstream.readany())
    await asyncio.sleep(0)
    assert not waiting.done()
    _feed_chunked(upstream, [b"data: a\n\n", b"data: b\n\n"])
    assert await waiting == b"data: a\n\ndata: b\n\n"
    ending = asyncio.ensure_future(upstream.readany())
    await asyncio.sleep(0)
    upstream.feed_eof()
    assert await ending == b""


async def test_a_read_by_count_first_leaves_the_rest_for_readany() -> None:
    (plain, _), (upstream, _) = _readers()
    for reader in (plain, upstream):
        _feed_chunked(reader, [b"0123456789", b"abcdef"])
        reader.feed_eof()
        assert await reader.read(4) == b"0123"
    assert await upstream.readany() == b"456789abcdef"
    assert b"".join(await _read_all(plain)) == b"456789abcdef"


async def test_a_failed_body_raises_its_error_on_the_next_read() -> None:
    _, (upstream, _) = _readers()
    _feed_chunked(upstream, [b"data: a\n\n"])
    upstream.set_exception(ConnectionResetError("upstream went away"))
    with pytest.raises(ConnectionResetError):
        await upstream.readany()


async def test_a_flood_of_tiny_chunks_pauses_reading_however_few_bytes_they_hold() -> None:
    _, (upstream, protocol) = _readers()
    _feed_chunked(upstream, [b"x"] * UpstreamBody.MAX_PIECES)
    assert protocol.pauses == 0
    _feed_chunked(upstream, [b"x"])
    assert protocol.pauses == 1
    assert await upstream.readany() == b"x" * (UpstreamBody.MAX_PIECES + 1)
    assert protocol.resumes == 1  # the buffer is below the low mark again
