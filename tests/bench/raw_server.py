"""A raw HTTP server on 127.0.0.1 that answers with crafted bytes, and the responses the raw
driver's tests craft."""

import asyncio
from collections.abc import Callable, Sequence

Answer = Callable[[bytes], Sequence[bytes | None]]
"""What the raw server writes for one request (the request's bytes): pieces, written apart."""


class RawServer:
    """Answers every request on a connection with ``answer``'s pieces, each written and
    drained on its own; ``None`` as a piece closes the connection there."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.connections = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.lower().split(b"\r\n"):
                    if line.startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                for piece in self.answer(request):
                    if piece is None:
                        writer.close()
                        return
                    writer.write(piece)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def chunked(*pieces: bytes) -> bytes:
    """``pieces`` as a chunked body, its last chunk included."""
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


GET = b"GET / HTTP/1.1\r\n\r\n"
STREAM = chunked(b'data: {"a":1}\n\n' * 3, b"data: [DONE]\n\n")
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
