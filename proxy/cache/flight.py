"""One upstream call for a cache key, and every request that reads its answer.

A :class:`Flight` starts when a request misses the cache and calls the upstream (its *leader*).
Identical requests that arrive meanwhile *join* it instead of calling the upstream themselves.
The leader's call then ends one of three ways:

- it fails before any answer exists (an error, or the leader's client went away): the flight
  *fails*, and every joiner is told to call the upstream on its own — one request's failure is
  never handed to another (:meth:`Flight.join` returns None);
- it returns a whole answer (:meth:`Flight.finish_whole`): joiners receive its encoded entry;
- it returns a stream (:meth:`Flight.start_stream`): the stream is read once and fanned out.
  Each reader (the leader's, and one per joiner) is a :class:`~proxy.core.streams.BatchedStream`
  that hands over every item received so far, so a joiner that arrives mid-stream first catches
  up in one batch, then follows live.

Reading a stream. While the leader is its only reader, the leader's own task reads the upstream,
exactly as without a cache (no extra task, chunks pass at the same pace). Once a joiner reads
too, each read runs in a task of its own that the readers await shielded, so a reader whose
client disconnects never cancels the read others wait for; the upstream stream is closed when
the last reader leaves. A joiner that arrives during the leader's own read waits for that read
to finish before it becomes a reader, so the leader's disconnect cannot break a stream a joiner
has started sending: such a joiner calls on its own instead.

A failure after a stream has started reaching readers (an upstream error mid-stream) ends every
reader's stream with that error, in-band, as it would have ended had each called alone; joiners
that had not become readers yet call on their own.

Copies. Readers may change the chunks they are handed (a masking restore, say). Each item is
therefore kept as it arrived — a verbatim frame run as it is (bytes never change), a chunk as
msgpack bytes — and only the leader receives the original objects; joiners, and the answer folded
for the cache (:meth:`Flight.answer`), are decoded from the kept bytes. A stream whose kept bytes
pass ``buffer_limit`` is not kept further (unless joiners still need it): it takes no more
joiners and yields no answer.

Not thread-safe; one event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import msgspec

from proxy.cache.assemble import assemble
from proxy.core.canonical import Timings
from proxy.core.errors import GatewayError, UpstreamUnavailable
from proxy.core.reply import Chunk, RawFrames, Reply, Response
from proxy.core.streams import BatchedStream, ReplyStream, batched, is_closable

_PENDING, _WHOLE, _STREAM, _FAILED = "pending", "whole", "stream", "failed"
_CHUNK_ENCODER = msgspec.msgpack.Encoder()
_CHUNK_DECODER = msgspec.msgpack.Decoder(Chunk)
_CHUNKS_DECODER = msgspec.json.Decoder(list[Chunk])

Kept = bytes | RawFrames
EndHook = Callable[[bool], None]


class Joined(msgspec.Struct):
    """What a joiner receives: the leader's reply (``provider``, ``model``), and either the
    whole answer's encoded entry (``entry``) or a reader of the shared stream (``stream``)."""

    reply: Reply
    entry: bytes | None = None
    stream: FlightReader | None = None


class Flight:
    """See the module docstring."""

    __slots__ = (
        "_buffer_limit",
        "_ended",
        "_entry",
        "_error",
        "_items",
        "_joinable",
        "_joining",
        "_kept",
        "_kept_bytes",
        "_on_end",
        "_pull",
        "_readers",
        "_reading",
        "_reply",
        "_source",
        "_started",
        "_state",
        "_stream",
    )

    def __init__(self, *, joinable: bool, buffer_limit: int) -> None:
        self._joinable = joinable
        self._buffer_limit = buffer_limit
        self._on_end: EndHook | None = None
        self._state = _PENDING
        self._started: asyncio.Future[None] | None = None
        self._reply: Reply | None = None
        self._entry: bytes | None = None
        self._source: ReplyStream | None = None  # the leader's stream, which _leave closes
        self._stream: BatchedStream | None = None  # the same, read by batches
        self._items: list[Chunk | RawFrames] = []
        self._kept: list[Kept] | None = []
        self._kept_bytes = 0
        self._ended = False
        self._error: BaseException | None = None
        self._readers = 0
        self._joining = 0
        self._reading: asyncio.Future[None] | None = None
        self._pull: asyncio.Task[None] | None = None

    # -- the leader's side ---------------------------------------------------------------------

    def fail(self) -> None:
        """The leader's call failed before it had an answer: joiners call on their own."""
        self._state = _FAILED
        self._wake_joiners()

    def finish_whole(self, reply: Reply, entry: bytes) -> None:
        """The leader's call returned a whole answer, encoded as ``entry``."""
        self._state = _WHOLE
        self._reply = reply
        self._entry = entry
        self._wake_joiners()

    def start_stream(self, reply: Reply, on_end: EndHook) -> FlightReader:
        """The leader's call returned ``reply.stream``: the leader's reader of it.

        ``on_end(complete)`` is called once when the stream is over: True when it ended
        normally (:meth:`answer` may then give the whole answer), False when it failed or every
        reader left before its end. It runs inside a read, so it must only schedule work.
        """
        assert reply.stream is not None
        self._on_end = on_end
        self._state = _STREAM
        # What joiners are told (the leader's provider and model), without the stream: the
        # leader's reply is handed on with this flight's reader as its stream, and keeping it
        # would be a cycle holding every item of the stream until the garbage collector ran.
        self._reply = msgspec.structs.replace(reply, stream=None)
        self._source = reply.stream
        self._stream = batched(reply.stream)
        self._readers = 1
        self._wake_joiners()
        return FlightReader(self, leader=True, timings=None)

    def answer(self) -> Response | None:
        """The whole answer of a stream that ended normally, as fresh objects; None when the
        stream is not complete (see :func:`~proxy.cache.assemble.assemble`) or not kept."""
        if not self._ended or self._kept is None:
            return None
        try:
            return assemble(_folded(self._kept))
        except GatewayError:  # a verbatim frame the provider cannot read
            return None

    # -- the joiners' side ---------------------------------------------------------------------

    @property
    def joinable(self) -> bool:
        """Whether a request arriving now may join (the answer can still be shared)."""
        return self._joinable and self._state != _FAILED and self._error is None

    @property
    def waiting(self) -> int:
        """Joiners waiting for the answer to begin."""
        return self._joining

    async def join(self, timings: Timings) -> Joined | None:
        """Wait for the leader's answer to begin; None when the caller must call on its own.

        Time spent waiting is added to ``timings.upstream_wait``. A joiner given a stream reader
        must ``aclose()`` it (as any reply stream).
        """
        if not self.joinable:
            return None
        started = time.perf_counter()
        self._joining += 1
        try:
            if self._state == _PENDING:
                if self._started is None:
                    self._started = asyncio.get_running_loop().create_future()
                await asyncio.shield(self._started)
            if self._state == _STREAM and self._reading is not None:
                await asyncio.shield(self._reading)  # the leader's own read: let it finish
        finally:
            self._joining -= 1
            timings.upstream_wait += time.perf_counter() - started
        if not self.joinable or self._reply is None:
            return None
        if self._state == _WHOLE:
            return Joined(reply=self._reply, entry=self._entry)
        self._readers += 1
        return Joined(reply=self._reply, stream=FlightReader(self, leader=False, timings=timings))

    def _wake_joiners(self) -> None:
        started = self._started
        if started is not None and not started.done():
            started.set_result(None)

    # -- reading the stream --------------------------------------------------------------------

    async def _advance(self) -> None:
        """Wait until more items, the end or a failure are known."""
        pull = self._pull
        if pull is None:
            if self._readers == 1 and self._joining == 0:
                await self._read_alone()
                return
            pull = self._pull = asyncio.ensure_future(self._read_shared())
        await asyncio.shield(pull)

    async def _read_alone(self) -> None:
        """One read in the only reader's own task (a cancellation there ends the stream)."""
        stream = self._stream
        assert stream is not None
        if self._joinable:
            self._reading = asyncio.get_running_loop().create_future()
        try:
            batch = await stream.next_batch(True)
        except BaseException as exc:
            self._broken(exc)
            raise
        finally:
            reading, self._reading = self._reading, None
            if reading is not None:
                reading.set_result(None)
        self._absorb(batch)

    async def _read_shared(self) -> None:
        """One read in a task of its own, awaited shielded by every reader that needs it."""
        stream = self._stream
        assert stream is not None
        try:
            batch = await stream.next_batch(True)
        except BaseException as exc:  # recorded for the readers, who raise it
            self._broken(exc)
            return
        finally:
            self._pull = None
        self._absorb(batch)

    def _absorb(self, batch: list[Chunk | RawFrames]) -> None:
        if not batch:
            self._ended = True
            self._ending(self._kept is not None)
            return
        self._items.extend(batch)
        kept = self._kept
        if kept is None:
            return
        size = self._kept_bytes
        for item in batch:
            if type(item) is RawFrames:
                kept.append(item)
                size += len(item.data)
            else:
                data = _CHUNK_ENCODER.encode(item)
                kept.append(data)
                size += len(data)
        self._kept_bytes = size
        if size > self._buffer_limit:
            self._joinable = False
            if self._readers == 1:
                self._kept = None

    def _broken(self, exc: BaseException) -> None:
        if self._error is not None:
            return
        if isinstance(exc, GatewayError):
            self._error = exc
        else:  # the reading task was cancelled, or the stream raised something unexpected
            self._error = UpstreamUnavailable("the upstream stream was interrupted")
        self._ending(False)

    def _ending(self, complete: bool) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(complete)

    async def _leave(self) -> None:
        """A reader is done; the last one out closes the upstream stream."""
        self._readers -= 1
        if self._readers > 0:
            return
        if not self._ended and self._error is None:
            self._broken(asyncio.CancelledError())
        pull, self._pull = self._pull, None
        if pull is not None and not pull.done():
            pull.cancel()
            await asyncio.wait((pull,))
        source = self._source
        if is_closable(source):  # a plugin's plain iterator has nothing to close
            await source.aclose()


class FlightReader(ReplyStream, BatchedStream):
    """One request's view of a flight's stream (see :class:`Flight`).

    A :class:`~proxy.core.streams.BatchedStream` that can also be iterated; the leader's reader
    hands over the original items, a joiner's reader fresh copies (and adds the time it waits
    to its request's ``upstream_wait``; the leader's waits are counted by the upstream stream).
    Of the fast paths of :mod:`proxy.core.streams` it keeps the batches and the verbatim frames
    (every reader reads the upstream's stream raw) and gives up end hooks: a plugin outside the
    cache that observes the stream wraps it once more.
    """

    __slots__ = ("_closed", "_cursor", "_flight", "_leader", "_pending", "_timings")

    def __init__(self, flight: Flight, *, leader: bool, timings: Timings | None) -> None:
        self._flight = flight
        self._leader = leader
        self._timings = timings
        self._cursor = 0
        self._closed = False
        self._pending: list[Chunk] = []

    @property
    def ended(self) -> bool:
        """Nothing will come beyond what this reader was handed."""
        flight = self._flight
        stream = flight._stream
        done = flight._ended or (stream is not None and stream.ended)
        return done and self._cursor >= len(flight._items)

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        flight = self._flight
        while self._cursor >= len(flight._items):
            if flight._error is not None:
                raise flight._error
            if flight._ended:
                return []
            if self._timings is None:
                await flight._advance()
            else:
                started = time.perf_counter()
                try:
                    await flight._advance()
                finally:
                    self._timings.upstream_wait += time.perf_counter() - started
        start, self._cursor = self._cursor, len(flight._items)
        if self._leader:
            batch = flight._items[start:]
            if raw or all(type(item) is Chunk for item in batch):
                return batch
            return decoded_chunks(batch)  # type: ignore[return-value]
        kept = flight._kept
        assert kept is not None  # kept while a joiner reads
        copies = kept[start : self._cursor]
        if raw:
            return [c if type(c) is RawFrames else _CHUNK_DECODER.decode(c) for c in copies]  # type: ignore[arg-type]
        return decoded_chunks(copies)  # type: ignore[return-value]

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self

    async def __anext__(self) -> Chunk:
        if not self._pending:
            batch = await self.next_batch(False)
            if not batch:
                raise StopAsyncIteration
            self._pending = batch  # type: ignore[assignment]
        return self._pending.pop(0)

    async def aclose(self) -> None:
        """Stop reading (idempotent); the last reader of a flight closes the upstream stream."""
        if not self._closed:
            self._closed = True
            await self._flight._leave()


def _folded(kept: list[Kept]) -> list[Chunk]:
    """Chunks for kept items, to fold into an answer (not for a client: no ``raw``).

    Each run of verbatim frames is decoded in one pass, as one JSON array of OpenAI chunks
    (which the frames are, see :class:`~proxy.core.reply.RawFrames`), instead of frame by frame:
    about half the cost for a typical stream. A run that does not decode so is parsed frame by
    frame by its provider.
    """
    chunks: list[Chunk] = []
    run: list[RawFrames] = []
    for item in kept:
        if type(item) is RawFrames:
            run.append(item)
            continue
        if run:
            chunks.extend(_frames_at_once(run))
            run = []
        chunks.append(_CHUNK_DECODER.decode(item))  # type: ignore[arg-type]
    if run:
        chunks.extend(_frames_at_once(run))
    return chunks


def _frames_at_once(run: list[RawFrames]) -> list[Chunk]:
    data = b"".join(frames.data for frames in run)
    # Every frame is ``data: {...}\n\n``, and JSON text holds no raw newline.
    array = b"[" + data[6:-2].replace(b"\n\ndata: ", b",") + b"]"
    try:
        return _CHUNKS_DECODER.decode(array)
    except msgspec.DecodeError:
        return decoded_chunks(run)  # type: ignore[arg-type]


def decoded_chunks(items: list[Kept] | list[Chunk | RawFrames]) -> list[Chunk]:
    """Chunks for kept or received items: frames parsed, msgpack decoded, chunks as they are.

    Raises :class:`~proxy.core.errors.GatewayError` for a frame the provider cannot read.
    """
    chunks: list[Chunk] = []
    for item in items:
        if type(item) is RawFrames:
            parse = item.parse
            for payload in item.payloads():
                chunk = parse(payload)
                if chunk is not None:
                    chunks.append(chunk)
        elif type(item) is bytes:
            chunks.append(_CHUNK_DECODER.decode(item))
        else:
            chunks.append(item)  # type: ignore[arg-type]
    return chunks
