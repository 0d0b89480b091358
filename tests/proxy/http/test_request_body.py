"""Inflating a request body: bounded by the limit before anything past it is made, and a clear
400 for data that is not what its content-encoding says."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from typing import Any

import pytest
from aiohttp import web

from proxy.core.errors import BadRequest, PayloadTooLarge
from proxy.http.request_body import inflate, read_request_body

LIMIT = 64 * 1024
TEXT = b'{"model": "mock/echo", "messages": []}'


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", gzip.compress(TEXT)),
        ("x-gzip", gzip.compress(TEXT)),
        ("deflate", zlib.compress(TEXT)),  # deflate as RFC 9110 means it: zlib-wrapped
        ("deflate", _raw_deflate(TEXT)),  # and as some clients send it
    ],
    ids=["gzip", "x-gzip", "deflate-zlib", "deflate-raw"],  # stable across xdist workers
)
def test_a_compressed_body_is_inflated(coding: str, data: bytes) -> None:
    assert inflate(data, coding, LIMIT) == TEXT


def test_gzip_members_one_after_another_are_one_body() -> None:
    assert inflate(gzip.compress(TEXT) + gzip.compress(TEXT), "gzip", LIMIT) == TEXT + TEXT


def test_a_body_inflating_to_the_limit_exactly_is_taken() -> None:
    assert len(inflate(gzip.compress(b" " * LIMIT), "gzip", LIMIT)) == LIMIT


def test_one_byte_past_the_limit_is_a_413() -> None:
    with pytest.raises(PayloadTooLarge, match="inflates past the 65536-byte limit"):
        inflate(gzip.compress(b" " * (LIMIT + 1)), "gzip", LIMIT)


def test_a_bomb_is_refused_having_inflated_no_more_than_the_limit() -> None:
    bomb = gzip.compress(b" " * (64 * 1024 * 1024), 9)
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLarge) as refused:
            inflate(bomb, "gzip", LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.status == 413
    assert peak < 4 * LIMIT, f"{peak} bytes allocated to refuse a 64 MiB bomb"


def test_members_together_past_the_limit_are_a_413() -> None:
    half = gzip.compress(b" " * (LIMIT // 2 + 1))
    with pytest.raises(PayloadTooLarge):
        inflate(half + half, "gzip", LIMIT)


@pytest.mark.parametrize(
    ("coding", "data"),
    [
        ("gzip", TEXT),  # not compressed at all
        ("gzip", gzip.compress(TEXT)[:-12]),  # cut short
        ("gzip", gzip.compress(TEXT) + b"trailing junk"),
        ("deflate", b"\x78\x9c not zlib"),
    ],
    ids=["not-compressed", "cut-short", "trailing-junk", "deflate-not-zlib"],
)
def test_data_that_does_not_inflate_is_a_400(coding: str, data: bytes) -> None:
    with pytest.raises(BadRequest) as refused:
        inflate(data, coding, LIMIT)
    assert (refused.value.status, refused.value.code) == (400, "invalid_content_encoding")
    assert f"not valid {coding} data" in refused.value.message


async def test_a_body_aiohttp_already_inflated_is_taken_as_it_is(aiohttp_client: Any) -> None:
    # Served by aiohttp's own runner (not the gateway's), aiohttp inflates before the route.
    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await read_request_body(request, LIMIT, 5.0))

    app = web.Application()
    app.router.add_post("/", echo)
    client = await aiohttp_client(app)
    answer = await client.post("/", data=gzip.compress(TEXT), headers={"content-encoding": "gzip"})
    assert answer.status == 200
    assert await answer.read() == TEXT
