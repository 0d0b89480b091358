"""Minimal passthrough proxy: the floor the gateway is compared against.

Contract: ``GET /health`` answers 200 locally; every ``POST`` is forwarded byte for byte
(same path and query, same ``Content-Type``) to the upstream through one pooled client
session, and the upstream's status, ``Content-Type`` and body bytes are sent back
unchanged. Event streams are relayed chunk by chunk as they arrive; nothing is parsed.
An unreachable upstream gives 502.

Run as ``python -m bench.passthrough --port N --upstream http://127.0.0.1:M``.
"""

import argparse
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from bench.aio import run
from bench.serving import serve_until_signalled

_UPSTREAM = web.AppKey("upstream", str)
_SESSION = web.AppKey("session", aiohttp.ClientSession)


async def _session_context(app: web.Application) -> AsyncIterator[None]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        app[_SESSION] = session
        yield


async def _forward(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    url = request.app[_UPSTREAM] + request.raw_path
    headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
    try:
        upstream = await request.app[_SESSION].post(url, data=body, headers=headers)
    except aiohttp.ClientConnectionError as exc:
        return web.Response(status=502, text=f"upstream unreachable: {exc}")
    async with upstream:
        content_type = upstream.headers.get("Content-Type", "application/octet-stream")
        if not content_type.startswith("text/event-stream"):
            return web.Response(
                body=await upstream.read(),
                status=upstream.status,
                headers={"Content-Type": content_type},
            )
        response = web.StreamResponse(
            status=upstream.status,
            headers={"Content-Type": content_type, "Cache-Control": "no-cache"},
        )
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def _health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


def create_app(upstream: str) -> web.Application:
    """Build the passthrough application forwarding to base URL ``upstream``."""
    app = web.Application()
    app[_UPSTREAM] = upstream.rstrip("/")
    app.cleanup_ctx.append(_session_context)
    app.router.add_get("/health", _health)
    app.router.add_post("/{tail:.*}", _forward)
    return app


def main() -> None:
    """Command-line entry point: serve the passthrough until SIGTERM."""
    parser = argparse.ArgumentParser(description="Minimal passthrough proxy (benchmark floor).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="upstream base URL, e.g. http://h:p")
    args = parser.parse_args()
    run(serve_until_signalled(create_app(args.upstream), args.host, args.port))


if __name__ == "__main__":
    main()
