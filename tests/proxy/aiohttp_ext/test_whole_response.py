"""proxy/aiohttp_ext/whole_response.py: the bytes on the wire are aiohttp's, through a real
server."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from proxy.aiohttp_ext.whole_response import WholeResponse

BODY = b'{"id":"chatcmpl-1","object":"chat.completion"}'
HEADERS = {
    "server": "crossway",
    "x-request-id": "req-1",
    "x-crossway-cache": "hit",
    "content-type": "application/json",
}
_DATE = re.compile(rb"\r\nDate: [^\r]*\r\n")

Send = Callable[[bytes], Awaitable[bytes]]


def _routes(status: int, headers: dict[str, str]) -> web.Application:
    async def lean(request: web.Request) -> web.StreamResponse:
        return WholeResponse(BODY, headers, status)

    async def plain(request: web.Request) -> web.StreamResponse:
        return web.Response(body=BODY, headers=headers, status=status)

    app = web.Application()
    app.router.add_route("*", "/lean", lean)
    app.router.add_route("*", "/plain", plain)
    return app


async def _serve(app: web.Application) -> AsyncIterator[Send]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def send(request: bytes) -> bytes:
        """One request on a fresh connection: the answer up to its body's end (or EOF), the
        ``Date`` value masked; what came before EOF if the server closed mid-header."""
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as dropped:  # closed before a whole header block
            return dropped.partial
        length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head, re.IGNORECASE)
        if request.startswith(b"HEAD"):
            body = b""
        elif length is not None:
            body = await reader.readexactly(int(length.group(1)))
        else:
            body = await reader.read()
        writer.close()
        await writer.wait_closed()
        return _DATE.sub(b"\r\nDate: -\r\n", head) + body

    try:
        yield send
    finally:
        await runner.cleanup()


@pytest.fixture
async def ok() -> AsyncIterator[Send]:
    async for send in _serve(_routes(200, HEADERS)):
        yield send


def _request(method: str, path: str, version: str = "1.1", extra: str = "") -> bytes:
    return f"{method} {path} HTTP/{version}\r\nHost: x\r\nContent-Length: 0\r\n{extra}\r\n".encode()


@pytest.mark.parametrize(
    ("method", "version", "extra"),
    [
        ("POST", "1.1", ""),  # kept alive: no Connection header
        ("POST", "1.1", "Connection: close\r\n"),  # Connection: close
        ("POST", "1.0", ""),  # aiohttp's own path
        ("HEAD", "1.1", ""),  # aiohttp's own path: the length, no body
    ],
)
async def test_the_answer_is_byte_for_byte_aiohttps(
    ok: Send, method: str, version: str, extra: str
) -> None:
    lean = await ok(_request(method, "/lean", version, extra))
    assert lean == await ok(_request(method, "/plain", version, extra))
    assert b"\r\nDate: -\r\n" in lean


async def test_one_keep_alive_answer_has_the_length_date_and_body() -> None:
    async for send in _serve(_routes(200, HEADERS)):
        answer = await send(_request("POST", "/lean"))
        head, body = answer.split(b"\r\n\r\n", 1)
        assert head.split(b"\r\n")[0] == b"HTTP/1.1 200 OK"
        assert f"\r\nContent-Length: {len(BODY)}".encode() in head
        assert b"Connection" not in head
        assert body == BODY


async def test_an_error_status_and_its_reason_match_aiohttps() -> None:
    headers = {**HEADERS, "retry-after": "3"}
    async for send in _serve(_routes(429, headers)):
        lean = await send(_request("POST", "/lean"))
        assert lean.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
        assert lean == await send(_request("POST", "/plain"))


async def test_a_response_prepare_hook_still_sees_and_changes_the_headers() -> None:
    app = _routes(200, HEADERS)
    seen: list[str | None] = []

    async def stamp(request: web.Request, response: web.StreamResponse) -> None:
        seen.append(response.headers.get("X-Crossway-Cache"))
        response.headers["access-control-allow-origin"] = "https://app.example"

    app.on_response_prepare.append(stamp)
    async for send in _serve(app):
        lean = await send(_request("POST", "/lean"))
        assert lean == await send(_request("POST", "/plain"))
    assert b"\r\naccess-control-allow-origin: https://app.example\r\n" in lean
    assert seen == ["hit", "hit"]


async def test_a_header_with_a_line_break_drops_the_connection_before_a_byte_as_aiohttp_does() -> (
    None
):
    injected = {**HEADERS, "x-crossway-model": "a\r\nSet-Cookie: stolen=1"}
    async for send in _serve(_routes(200, injected)):
        assert await send(_request("POST", "/lean")) == b""
        assert await send(_request("POST", "/plain")) == b""


async def test_the_access_log_counts_the_bytes_aiohttp_counts() -> None:
    counted: dict[str, int] = {}

    class Counting(AbstractAccessLogger):
        def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
            counted[request.path] = response.body_length

    runner = web.AppRunner(_routes(200, HEADERS), access_log_class=Counting)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:
            for path in ("/lean", "/plain"):
                async with session.post(f"http://127.0.0.1:{port}{path}") as answer:
                    assert await answer.read() == BODY
    finally:
        await runner.cleanup()
    assert counted["/lean"] == counted["/plain"] > len(BODY)
