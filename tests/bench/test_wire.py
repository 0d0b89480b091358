"""The raw driver's HTTP/1.1 connection (``bench/wire.py``) against a server on 127.0.0.1 that
answers with crafted bytes (``conftest.py``)."""

import pytest

from bench.wire import TAIL_BYTES, Connection, MalformedResponse
from tests.bench.raw_server import GET, STREAM, STREAM_HEAD


async def test_a_whole_answer_returns_its_status_and_tail_and_keeps_the_connection(serve) -> None:
    body = b'{"id":"x","choices":[]}' * 10
    raw = await serve(
        lambda _: [b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n" % len(body) + body]
    )
    connection = await Connection.open("127.0.0.1", raw.port, 5)
    for _ in range(3):
        status, tail, _ = await connection.exchange(GET)
        assert (status, tail) == (201, body[-TAIL_BYTES:])
        assert connection.usable
    assert raw.connections == 1
    connection.close()


async def test_a_chunked_stream_split_byte_by_byte_is_read_to_its_last_chunk(serve) -> None:
    whole = STREAM_HEAD + STREAM
    raw = await serve(lambda _: [whole[i : i + 1] for i in range(len(whole))])
    connection = await Connection.open("127.0.0.1", raw.port, 5)
    status, tail, first_byte = await connection.exchange(GET)
    assert status == 200
    assert tail.rstrip().endswith(b"data: [DONE]")
    assert first_byte > 0
    status, tail, _ = await connection.exchange(GET)  # the next one too
    assert status == 200
    connection.close()


async def test_chunk_extensions_and_trailers_are_passed_over(serve) -> None:
    body = b"5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw = await serve(lambda _: [head + body])
    connection = await Connection.open("127.0.0.1", raw.port, 5)
    status, tail, _ = await connection.exchange(GET)
    assert status == 200
    assert tail.replace(b"\r\n", b"") == b"hello world"
    assert connection.usable
    connection.close()


async def test_connection_close_answers_then_retires_the_connection(serve) -> None:
    raw = await serve(
        lambda _: [b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"]
    )
    connection = await Connection.open("127.0.0.1", raw.port, 5)
    assert (await connection.exchange(GET))[:2] == (200, b"ok")
    assert not connection.usable
    with pytest.raises(ConnectionError):
        await connection.exchange(GET)


async def test_a_body_without_length_ends_when_the_server_closes(serve) -> None:
    raw = await serve(lambda _: [b"HTTP/1.1 200 OK\r\n\r\n", b"all of ", b"it", None])
    connection = await Connection.open("127.0.0.1", raw.port, 5)
    assert (await connection.exchange(GET))[:2] == (200, b"all of it")
    assert not connection.usable


@pytest.mark.parametrize(
    "pieces",
    [
        [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", None],  # cut short
        [STREAM_HEAD + STREAM[:20], None],  # a stream cut midway
    ],
)
async def test_a_server_that_closes_midway_fails_the_exchange(serve, pieces) -> None:
    raw = await serve(lambda _: pieces)
    connection = await Connection.open("127.0.0.1", raw.port, 5)
    with pytest.raises(ConnectionResetError):
        await connection.exchange(GET)
    assert not connection.usable


@pytest.mark.parametrize(
    "answer",
    [
        b"SPDY/3 200 OK\r\n\r\n",
        b"HTTP/1.1 2xx OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
    ],
)
async def test_a_malformed_response_fails_the_exchange_and_the_connection(serve, answer) -> None:
    raw = await serve(lambda _: [answer])
    connection = await Connection.open("127.0.0.1", raw.port, 5)
    with pytest.raises(MalformedResponse):
        await connection.exchange(GET)
    assert not connection.usable


async def test_bytes_past_the_response_retire_the_connection(serve) -> None:
    raw = await serve(lambda _: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"])
    connection = await Connection.open("127.0.0.1", raw.port, 5)
    assert (await connection.exchange(GET))[:2] == (200, b"ok")
    assert not connection.usable


async def test_an_answer_later_than_the_timeout_fails_with_timeout_error(serve) -> None:
    raw = await serve(lambda _: [])  # never answers
    connection = await Connection.open("127.0.0.1", raw.port, 0.05)
    with pytest.raises(TimeoutError):
        await connection.exchange(GET)
    assert not connection.usable
