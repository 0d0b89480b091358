"""One pipelined connection to a Redis server, speaking RESP2 with hiredis's parser.

Why not redis-py's client on the hot path: measured on this project's machine at concurrency
64, one ``GET`` or ``EVALSHA`` through ``redis.asyncio`` costs 85 to 180 µs of the gateway's CPU
(connection pool, retry and observability layers per command), the same command through this
module 8 to 10 µs. A gateway makes one or two such calls per request, so the difference is the
whole governance budget. A Redis Cluster is one such connection per node
(:mod:`proxy.state.cluster`).

:class:`RespConnection` keeps one TCP (or TLS, or unix-socket) connection and pipelines every
command on it: commands sent in one turn of the event loop leave in one write at its end,
and replies are matched to callers in order. :meth:`RespConnection.call` connects on first
use (and again after a failure), bounded by ``timeout``; every command is bounded by
``timeout`` too. Any failure of the server — refused or lost connection, timeout, a server
that is loading, busy, read-only, out of memory or without its primary
(:data:`_UNAVAILABLE_REPLIES`) — raises :class:`~proxy.state.store.StoreUnavailable` (a lost
connection or a timeout also drops the connection, failing every command still waiting on it,
so that no reply can ever be matched to the wrong caller). Any other Redis error reply (a
script error, ``WRONGTYPE``, and a Redis Cluster's ``MOVED``, ``ASK``, ``TRYAGAIN`` and
``CLUSTERDOWN``, which :mod:`proxy.state.cluster` acts on) is returned to the caller as a
:class:`ReplyError`, which the caller interprets; :func:`cannot_serve` tells the replies that
mean "not now" from the command's own errors. Use it from one event loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from typing import Any

import hiredis

from proxy.state.config import RedisAddress
from proxy.state.store import StoreUnavailable

ReplyError = hiredis.ReplyError
_UNAVAILABLE_REPLIES = (
    b"LOADING",
    b"BUSY",
    b"READONLY",
    b"MASTERDOWN",
    b"OOM",  # over maxmemory with no eviction: writes refused until memory is freed
)
"""Error replies that mean the server cannot serve anything now: raised as unavailability."""
_NOT_NOW_REPLIES = (*_UNAVAILABLE_REPLIES, b"MOVED", b"ASK", b"TRYAGAIN", b"CLUSTERDOWN")
"""Error replies that mean this command cannot be served now, here (see :func:`cannot_serve`)."""


def encode(args: tuple[Any, ...]) -> bytes:
    """One command as a RESP array of bulk strings (str, bytes, int or float arguments)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if type(arg) is bytes:
            data = arg
        elif type(arg) is str:
            data = arg.encode()
        else:
            data = repr(arg).encode() if type(arg) is float else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


_ASKING = encode(("ASKING",))


class _Protocol(asyncio.Protocol):
    """The transport's side: feeds bytes to hiredis and resolves waiting futures in order."""

    def __init__(self, lost: asyncio.Future[None], timeout: float) -> None:
        self.reader = hiredis.Reader()
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.deadlines: collections.deque[float] = collections.deque()  # one per waiting
        self.transport: asyncio.Transport | None = None
        self.lost = lost
        self.pushes: asyncio.Queue[Any] | None = None  # subscriber mode: every reply goes here
        self._timeout = timeout
        self._watchdog: asyncio.TimerHandle | None = None
        self._outgoing: list[bytes] = []  # commands sent in this loop turn, not written yet

    def send(self, data: bytes) -> asyncio.Future[Any]:
        """Queue one encoded command; the future of its reply, failed with
        :class:`StoreUnavailable` (and the connection dropped) when no reply comes within
        the timeout. What is sent in one turn of the loop is written at its end, in one write
        (one system call for every command of the turn, not one each).

        One timer per connection, not one per command: replies come in order, so only the
        oldest command waiting can be the first to time out (the watchdog re-arms itself for
        the next one)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.append(future)
        self.deadlines.append(loop.time() + self._timeout)
        if self._watchdog is None:
            self._watchdog = loop.call_at(self.deadlines[0], self._watch)
        outgoing = self._outgoing
        outgoing.append(data)
        if len(outgoing) == 1:
            loop.call_soon(self._write)
        return future

    def _write(self) -> None:
        """Write what this turn queued (nothing when the connection failed meanwhile: its
        commands were failed with it)."""
        outgoing, self._outgoing = self._outgoing, []
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(outgoing[0] if len(outgoing) == 1 else b"".join(outgoing))

    def _watch(self) -> None:
        self._watchdog = None
        deadlines = self.deadlines
        if not deadlines:
            return
        loop = asyncio.get_running_loop()
        if deadlines[0] <= loop.time():
            self._fail(StoreUnavailable("Redis did not answer in time"))
        else:
            self._watchdog = loop.call_at(deadlines[0], self._watch)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream connection's is a Transport

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        reader.feed(data)
        waiting = self.waiting
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:
                self._fail(StoreUnavailable(f"Redis protocol error: {exc}"))
                return
            if reply is False:
                return
            if self.pushes is not None and not waiting:
                self.pushes.put_nowait(reply)
                continue
            if not waiting:
                self._fail(StoreUnavailable("Redis sent a reply nobody asked for"))
                return
            future = waiting.popleft()
            self.deadlines.popleft()
            if not future.done():
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(StoreUnavailable("the connection to Redis was lost"))

    def _fail(self, error: Exception) -> None:
        transport = self.transport
        if transport is not None:
            transport.abort()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self.deadlines.clear()
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)
        if self.pushes is not None:
            self.pushes.put_nowait(error)
        if not self.lost.done():
            self.lost.set_result(None)


class RespConnection:
    """See the module docstring. ``timeout`` is seconds per command (and per connect)."""

    def __init__(self, address: RedisAddress, timeout: float) -> None:
        self._address = address
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Future[_Protocol] | None = None

    @property
    def connected(self) -> bool:
        """Whether a connection is open now."""
        return self._protocol is not None and not self._protocol.lost.done()

    async def call(self, *args: Any) -> Any:
        """Send one command and return its reply (a :class:`ReplyError` for an error reply).

        Raises :class:`StoreUnavailable` as the module docstring says."""
        protocol = self._protocol
        if protocol is None or protocol.lost.done():
            protocol = await self._connect()
        reply = await protocol.send(encode(args))
        if type(reply) is ReplyError and reply.args and _unavailable(reply):
            raise StoreUnavailable(f"Redis cannot serve now: {str(reply)[:80]}")
        return reply

    async def call_asking(self, *args: Any) -> Any:
        """``ASKING``, then the command, as a Redis Cluster's ``ASK`` redirect requires: the two
        are queued at once, so nothing of another caller comes between them on this connection
        (``ASKING`` applies to the next command of a connection). The command's reply, as
        :meth:`call` returns and raises it."""
        protocol = self._protocol
        if protocol is None or protocol.lost.done():
            protocol = await self._connect()
        asking = protocol.send(_ASKING)
        future = protocol.send(encode(args))
        try:
            reply = await future
        finally:
            if asking.done() and not asking.cancelled():
                asking.exception()  # retrieved: what the command got is what counts
        if type(reply) is ReplyError and reply.args and _unavailable(reply):
            raise StoreUnavailable(f"Redis cannot serve now: {str(reply)[:80]}")
        return reply

    async def subscribe(self, channel: str) -> asyncio.Queue[Any]:
        """Turn this connection into a subscriber of ``channel``: every message pushed to it
        arrives in the returned queue as ``[b"message", channel, data]``; a lost connection
        arrives as a :class:`StoreUnavailable` instance. Raises :class:`StoreUnavailable`."""
        protocol = await self._connect()
        protocol.pushes = asyncio.Queue()
        assert protocol.transport is not None
        protocol.transport.write(encode(("SUBSCRIBE", channel)))
        return protocol.pushes

    async def close(self) -> None:
        """Close the connection (idempotent); waiting commands fail."""
        protocol, self._protocol = self._protocol, None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await protocol.lost

    async def _connect(self) -> _Protocol:
        pending = self._connecting
        if pending is None:
            pending = self._connecting = asyncio.ensure_future(self._open())
            pending.add_done_callback(self._connected)
        return await asyncio.shield(pending)

    def _connected(self, future: asyncio.Future[_Protocol]) -> None:
        self._connecting = None
        if not future.cancelled() and future.exception() is None:
            self._protocol = future.result()

    async def _open(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        address = self._address
        lost: asyncio.Future[None] = loop.create_future()
        try:
            async with asyncio.timeout(self._timeout):
                if address.path is not None:
                    _, protocol = await loop.create_unix_connection(
                        lambda: _Protocol(lost, self._timeout), address.path
                    )
                else:
                    context = ssl.create_default_context() if address.tls else None
                    _, protocol = await loop.create_connection(
                        lambda: _Protocol(lost, self._timeout),
                        address.host,
                        address.port,
                        ssl=context,
                    )
                for command in address.handshake():
                    reply = await protocol.send(encode(command))
                    if type(reply) is ReplyError:
                        assert protocol.transport is not None  # set by connection_made
                        protocol.transport.abort()
                        raise StoreUnavailable(f"Redis refused {command[0]}")
        except (OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"cannot connect to Redis: {type(exc).__name__}") from None
        return protocol


def _unavailable(reply: ReplyError) -> bool:
    return str(reply).encode()[:12].startswith(_UNAVAILABLE_REPLIES)


def cannot_serve(reply: ReplyError) -> bool:
    """Whether an error reply means that the command cannot be served now (a server loading,
    read-only…, or a Redis Cluster's redirect, ``TRYAGAIN`` or ``CLUSTERDOWN`` left over), not
    that the command itself is wrong (``WRONGTYPE``, a script's error)."""
    return str(reply).encode()[:12].startswith(_NOT_NOW_REPLIES)
