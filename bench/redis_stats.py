"""Redis for the benchmark: a private redis-server, and a relay that counts what is sent to it.

The server is the test engines' (:class:`tests.engines.RedisServer`: a free port, no
persistence, stopped by its PID). Redis's own ``INFO commandstats`` counts the commands Lua
scripts run inside Redis too, so it cannot tell what a client sent; the gateway therefore talks
to Redis through :class:`CommandCounter`, a TCP relay on 127.0.0.1 that forwards bytes both
ways unchanged and counts the commands it forwards (RESP arrays) and the writes that carried
them (what arrived together: commands pipelined in one write share it). The relay runs in the
harness process, so its CPU is never counted against the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from contextlib import ExitStack

from bench.processes import HarnessError

_HOST = "127.0.0.1"
_READ_BYTES = 1 << 16


def start_redis(stack: ExitStack) -> int:
    """Start a private redis-server, stopped when ``stack`` closes; its port.

    Raises :class:`~bench.processes.HarnessError` when redis-server is missing or does not
    start (``make engines`` installs it).
    """
    from tests.engines import RedisServer  # the repository's tests package: run from its root

    try:
        server = RedisServer()
        stack.callback(server.stop)
        server.start()
    except AssertionError as exc:  # EngineMissing, or it did not start
        raise HarnessError(f"redis-server: {exc}") from None
    return server.port


class CommandCounter:
    """A relay to the Redis on ``redis_port`` that counts :attr:`commands` and :attr:`writes`
    sent through it. :meth:`start` it in the harness's loop; clients connect to :attr:`port`."""

    def __init__(self, redis_port: int) -> None:
        self._redis_port = redis_port
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        self.port = 0
        self.commands = 0
        self.writes = 0
        self.by_name: Counter[str] = Counter()
        """Commands sent, by name (``EVALSHA`` counts once, whatever its script runs)."""

    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        self._server = await asyncio.start_server(self._relay, _HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and cut every relayed connection."""
        if self._server is not None:
            self._server.close()
        for pump in list(self._pumps):
            pump.cancel()
        for pump in list(self._pumps):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await pump

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            redis_reader, redis_writer = await asyncio.open_connection(_HOST, self._redis_port)
        except OSError:
            writer.close()
            return
        parser = _Commands()
        for pump in (
            self._pump(reader, redis_writer, parser),
            self._pump(redis_reader, writer, None),
        ):
            task = asyncio.get_running_loop().create_task(pump)
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        parser: _Commands | None,
    ) -> None:
        try:
            while data := await source.read(_READ_BYTES):
                if parser is not None:
                    self.writes += 1
                    names = parser.feed(data)
                    self.commands += len(names)
                    self.by_name.update(names)
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()


class _Commands:
    """Counts complete RESP commands (arrays of bulk strings, as clients send them) in a byte
    stream fed in arbitrary pieces."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> list[str]:
        """The names of the commands ``data`` completes."""
        buffer = self._pending + data
        position = 0
        names: list[str] = []
        while (found := _command(buffer, position)) is not None:
            name, position = found
            names.append(name)
        self._pending = buffer[position:]
        return names


def _command(buffer: bytes, position: int) -> tuple[str, int] | None:
    """The name of the command starting at ``position`` and where it ends; None when it is
    not whole yet."""
    line_end = buffer.find(b"\r\n", position)
    if line_end < 0:
        return None
    if buffer[position : position + 1] != b"*":
        raise HarnessError(f"not a RESP command: {buffer[position : position + 20]!r}")
    items = int(buffer[position + 1 : line_end])
    position = line_end + 2
    name = ""
    for item in range(items):
        line_end = buffer.find(b"\r\n", position)
        if line_end < 0:
            return None
        start = line_end + 2
        position = start + int(buffer[position + 1 : line_end]) + 2
        if position > len(buffer):
            return None
        if item == 0:
            name = buffer[start : position - 2].decode(errors="replace").upper()
    return name, position
