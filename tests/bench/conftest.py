"""The ``serve`` fixture: raw HTTP servers on 127.0.0.1 (:mod:`tests.bench.raw_server`)."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.bench.raw_server import Answer, RawServer


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Answer], Awaitable[RawServer]]]:
    servers: list[asyncio.Server] = []

    async def start(answer: Answer) -> RawServer:
        raw = RawServer(answer)
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
        raw.port = server.sockets[0].getsockname()[1]
        servers.append(server)
        return raw

    yield start
    for server in servers:
        server.close()
