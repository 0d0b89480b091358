"""proxy/state/resp.py: the pipelined connection's time limit, against servers of our own."""

from __future__ import annotations

import asyncio

import pytest

from proxy.state.config import RedisAddress
from proxy.state.resp import RespConnection
from proxy.state.store import StoreUnavailable


async def _server(answer: bool) -> tuple[asyncio.Server, int, list[bytes]]:
    """A server on 127.0.0.1 that reads commands and, with ``answer``, replies ``+OK`` to
    each write it receives (one reply per command it counts in it), else never replies."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 16):
            received.append(data)
            if answer:
                writer.write(b"+OK\r\n" * data.count(b"*1\r\n"))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], received


async def test_a_server_that_never_answers_fails_every_waiting_command_in_time():
    server, port, received = await _server(answer=False)
    connection = RespConnection(RedisAddress(f"redis://127.0.0.1:{port}/0"), timeout=0.2)
    try:
        results = await asyncio.gather(
            *(connection.call("PING") for _ in range(5)), return_exceptions=True
        )
        assert all(isinstance(r, StoreUnavailable) for r in results), results
        assert "did not answer in time" in str(results[0])
        assert not connection.connected, "the connection is dropped"
    finally:
        await connection.close()
        server.close()
    assert received, "the commands were sent"


async def test_answered_commands_never_time_out_and_the_connection_stays():
    server, port, _ = await _server(answer=True)
    connection = RespConnection(RedisAddress(f"redis://127.0.0.1:{port}/0"), timeout=5)
    try:
        for _ in range(3):  # one batch after another: each finds the connection up
            replies = await asyncio.gather(*(connection.call("PING") for _ in range(50)))
            assert replies == [b"OK"] * 50
            assert connection.connected
    finally:
        await connection.close()
        server.close()


async def test_after_a_timeout_the_next_command_reconnects():
    server, port, received = await _server(answer=False)
    connection = RespConnection(RedisAddress(f"redis://127.0.0.1:{port}/0"), timeout=0.2)
    try:
        with pytest.raises(StoreUnavailable):
            await connection.call("PING")
        with pytest.raises(StoreUnavailable):
            await connection.call("PING")  # a new connection, timed out again
    finally:
        await connection.close()
        server.close()
    assert len(received) >= 2


async def test_commands_sent_in_one_loop_turn_leave_in_one_write():
    server, port, _ = await _server(answer=True)
    connection = RespConnection(RedisAddress(f"redis://127.0.0.1:{port}/0"), timeout=5)
    try:
        assert await connection.call("PING") == b"OK"  # connected
        protocol = connection._protocol
        assert protocol is not None
        assert protocol.transport is not None
        writes: list[bytes] = []
        write = protocol.transport.write

        def counting(data: bytes) -> None:
            writes.append(data)
            write(data)

        protocol.transport.write = counting  # type: ignore[method-assign]
        replies = await asyncio.gather(*(connection.call("PING") for _ in range(20)))
        assert replies == [b"OK"] * 20
        assert len(writes) == 1, "twenty commands, one write"
        assert writes[0] == b"*1\r\n$4\r\nPING\r\n" * 20
    finally:
        await connection.close()
        server.close()
