"""The load driver's HTTP/1.1 client connection: one request at a time, read only as far as
finding where each response ends.

A response ends after its ``Content-Length`` bytes, after its last chunk (``Transfer-Encoding:
chunked``, trailers included), or — with neither — when the server closes the connection.
What the driver checks is the status and the last bytes of the body (:data:`TAIL_BYTES`: a
stream's ``data: [DONE]``), so nothing else of the body is kept. A response whose head says
``Connection: close``, a server that closes, a malformed response or a request past its time
leave the connection unusable; :meth:`Connection.exchange` then raises (``ConnectionError``,
``TimeoutError``) and the driver opens another.
"""

import asyncio
import time

TAIL_BYTES = 64
"""How many of a body's last bytes an exchange returns."""

_HEAD = 0  # reading the status line and headers
_LENGTH = 1  # reading a body of known length
_CHUNK_SIZE = 2  # reading a chunk-size line
_CHUNK_DATA = 3  # reading a chunk and its CRLF
_TRAILER = 4  # reading the trailer section after the last chunk
_UNTIL_CLOSE = 5  # reading a body that the connection's close ends
_NO_BODY_STATUSES = frozenset({204, 304})


class MalformedResponse(ConnectionError):
    """The server's bytes are not an HTTP/1.1 response the driver can delimit."""


class Connection(asyncio.Protocol):
    """One keep-alive connection to a server (see the module docstring)."""

    def __init__(self, address: tuple[str, int], timeout: float) -> None:
        """``timeout``: how long an exchange may wait for its whole response, in seconds."""
        self.address = address
        self._timeout = timeout
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[tuple[int, bytes, float]] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._buffer = bytearray()
        self._state = _HEAD
        self._status = 0
        self._remaining = 0
        self._tail = b""
        self._first_byte = 0.0
        self._keep_alive = True

    @classmethod
    async def open(cls, host: str, port: int, answer_within: float) -> "Connection":
        """A connection to ``host:port`` whose exchanges wait at most ``answer_within``
        seconds (raises ``OSError`` when it cannot be made)."""
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(
            lambda: cls((host, port), answer_within), host, port
        )
        return protocol

    @property
    def usable(self) -> bool:
        """Whether another request may be sent on this connection."""
        return self._transport is not None and self._keep_alive and self._waiter is None

    def close(self) -> None:
        """Close the connection; a pending exchange fails with ``ConnectionError``."""
        if self._transport is not None:
            self._transport.close()

    async def exchange(self, request: bytes) -> tuple[int, bytes, float]:
        """Send ``request`` and wait for its whole response (``TimeoutError`` past the
        connection's timeout):
        ``(status, the body's last bytes, perf_counter time of the first body bytes)``."""
        transport = self._transport
        if transport is None or not self.usable:
            raise ConnectionResetError("the connection cannot carry another request")
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self._state, self._tail, self._first_byte = _HEAD, b"", 0.0
        self._timer = loop.call_later(self._timeout, self._expire)
        transport.write(request)
        try:
            return await waiter
        finally:
            self._timer.cancel()
            self._waiter = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._state == _UNTIL_CLOSE and exc is None:
            self._complete()
        else:
            self._fail(ConnectionResetError("the server closed the connection"))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes no request asked for
            self._fail(MalformedResponse("bytes arrived with no request pending"))
            return
        buffer = self._buffer
        buffer += data
        try:
            while buffer and self._waiter is not None and self._step(buffer):
                pass
        except (ValueError, MalformedResponse) as exc:
            self._fail(MalformedResponse(str(exc)))
            return
        if buffer and self._waiter is None:  # more than the response: nothing asked for it
            self._fail(MalformedResponse("bytes past the end of the response"))

    def _step(self, buffer: bytearray) -> bool:
        """Consume what ``buffer`` holds of the current state; whether to go on."""
        state = self._state
        if state == _HEAD:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return False
            self._head(bytes(buffer[:end]))
            del buffer[: end + 4]
            return True
        if self._first_byte == 0.0:
            self._first_byte = time.perf_counter()
        if state in (_LENGTH, _CHUNK_DATA):
            taken = min(len(buffer), self._remaining)
            self._keep_tail(buffer, taken)
            del buffer[:taken]
            self._remaining -= taken
            if self._remaining:
                return False
            if state == _LENGTH:
                self._complete()
            else:
                self._state = _CHUNK_SIZE
            return True
        if state == _CHUNK_SIZE:
            end = buffer.find(b"\r\n")
            if end < 0:
                return False
            size = int(bytes(buffer[:end]).split(b";", 1)[0], 16)
            del buffer[: end + 2]
            if size:
                self._state, self._remaining = _CHUNK_DATA, size + 2  # the chunk and its CRLF
            else:
                self._state = _TRAILER
            return True
        if state == _TRAILER:
            if buffer.startswith(b"\r\n"):
                del buffer[:2]
                self._complete()
                return True
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return False
            del buffer[: end + 4]
            self._complete()
            return True
        self._keep_tail(buffer, len(buffer))  # _UNTIL_CLOSE
        buffer.clear()
        return False

    def _head(self, head: bytes) -> None:
        """Read the status and how the body is delimited from the response head."""
        if not head.startswith(b"HTTP/1.") or len(head) < 12:
            raise MalformedResponse(f"not an HTTP/1.x status line: {head[:40]!r}")
        self._status = status = int(head[9:12])
        length = -1
        chunked = False
        for line in head.lower().split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value
            elif name == b"connection" and b"close" in value:
                self._keep_alive = False
        if status in _NO_BODY_STATUSES or length == 0:
            self._complete()
        elif chunked:
            self._state = _CHUNK_SIZE
        elif length > 0:
            self._state, self._remaining = _LENGTH, length
        else:
            self._state, self._keep_alive = _UNTIL_CLOSE, False

    def _keep_tail(self, buffer: bytearray, taken: int) -> None:
        """Keep the last :data:`TAIL_BYTES` of the body, with the first ``taken`` of
        ``buffer``."""
        if taken >= TAIL_BYTES:
            self._tail = bytes(buffer[taken - TAIL_BYTES : taken])
        elif taken:
            self._tail = (self._tail + bytes(buffer[:taken]))[-TAIL_BYTES:]

    def _complete(self) -> None:
        self._state = _HEAD
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, self._tail, self._first_byte))
        self._waiter = None
        if not self._keep_alive:
            self.close()

    def _fail(self, exc: Exception) -> None:
        """End the pending exchange with ``exc``; the connection is no longer used."""
        self._keep_alive = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self._waiter = None
        self.close()

    def _expire(self) -> None:
        self._fail(TimeoutError("no whole response within the request timeout"))
