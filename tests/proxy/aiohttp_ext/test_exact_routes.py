"""proxy/aiohttp_ext/exact_routes.py: fixed-path POST routes answered without the router's walk,
everything else through the application's own handler, and no request answered differently.

A small aiohttp app is served through :class:`proxy.aiohttp_ext.server.GatewayRunner` (as ``crossway
serve`` serves the gateway) with its ``_handle`` counted, so each test sees which path a request
took as well as its answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from proxy.aiohttp_ext.exact_routes import ExactRoutes
from proxy.aiohttp_ext.server import GatewayRunner


class Served:
    def __init__(self, url: str, app: web.Application, routed: list[str]) -> None:
        self.url, self.app, self.routed = url, app, routed

    async def send(self, method: str, path: str, **headers: str) -> tuple[int, dict, str]:
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.url + path, data=b"{}", headers=headers) as response,
        ):
            return response.status, dict(response.headers), await response.text()

    async def send_raw(self, target: str) -> tuple[int, str]:
        """POST to ``target`` exactly as written (a client library would normalise it)."""
        host, port = self.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST {target} HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n"
            "Connection: close\r\n\r\n{}".encode()
        )
        answer = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        head, _, body = answer.partition(b"\r\n\r\n")
        return int(head.split()[1]), body.decode()


def _app() -> web.Application:
    app = web.Application()

    async def post(request: web.Request) -> web.Response:
        info = request.match_info
        assert request.app is app
        assert info.apps == (app,)
        return web.Response(text=f"post {info.route.method} {info.route.resource.canonical}")

    async def get(request: web.Request) -> web.Response:
        return web.Response(text="get")

    async def item(request: web.Request) -> web.Response:
        return web.Response(text=f"item {request.match_info['id']}")

    async def prepared(request: web.BaseRequest, response: web.StreamResponse) -> None:
        response.headers["x-prepared"] = "yes"  # as the CORS hook adds its headers

    app.router.add_post("/a", post)
    app.router.add_get("/a", get)
    app.router.add_post("/items/{id}", item)
    app.on_response_prepare.append(prepared)
    return app


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    app = _app()
    routed: list[str] = []
    handle = app._handle

    async def counted(request: web.Request) -> web.StreamResponse:
        routed.append(request.path)
        return await handle(request)

    app._handle = counted  # type: ignore[method-assign]
    runner = GatewayRunner(app, on_rejected=lambda status, exc: None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield Served(f"http://127.0.0.1:{runner.addresses[0][1]}", app, routed)
    finally:
        await runner.cleanup()


async def test_a_fixed_path_post_skips_the_router_and_sees_what_it_would_have(
    served: Served,
) -> None:
    status, headers, text = await served.send("POST", "/a")
    assert (status, text) == (200, "post POST /a")
    assert headers["x-prepared"] == "yes"  # on_response_prepare signals still run
    assert served.routed == []


@pytest.mark.parametrize(
    ("method", "path", "status", "text"),
    [
        ("GET", "/a", 200, "get"),  # another method on the same path
        ("POST", "/a?x=1", 200, "post POST /a"),  # a query string
        ("POST", "/items/7", 200, "item 7"),  # a variable route
        ("DELETE", "/a", 405, None),  # no such method
        ("POST", "/nowhere", 404, None),  # no such route
    ],
)
async def test_anything_else_takes_the_application_s_own_path(
    served: Served, method: str, path: str, status: int, text: str | None
) -> None:
    answer = await served.send(method, path)
    assert answer[0] == status
    if text is not None:
        assert answer[2] == text
    assert len(served.routed) == 1


@pytest.mark.parametrize(
    ("target", "answer"),
    [
        ("/%61", (200, "post POST /a")),  # percent-encoded: the router decodes it
        ("/a#x", (200, "post POST /a")),  # a fragment
        ("/b/../a", (404, "404: Not Found")),  # dot segments: aiohttp does not resolve them
    ],
)
async def test_a_target_other_than_the_path_as_written_is_left_to_the_router(
    served: Served, target: str, answer: tuple[int, str]
) -> None:
    assert await served.send_raw(target) == answer
    assert len(served.routed) == 1


async def test_a_request_that_expects_100_continue_takes_the_application_s_path(
    served: Served,
) -> None:
    status, _, text = await served.send("POST", "/a", Expect="100-continue")
    assert (status, text) == (200, "post POST /a")
    assert len(served.routed) == 1


def test_only_fixed_path_post_routes_are_taken() -> None:
    async def unused(request: web.Request) -> web.StreamResponse:
        raise AssertionError

    app = _app()
    app.router.add_route("*", "/{tail:.*}", unused)
    app.freeze()
    assert ExactRoutes(app, unused).paths == {"/a"}
