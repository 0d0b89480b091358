"""``--driver raw``: the closed loop of :mod:`bench.driver` over the bench's own HTTP/1.1
connections (:mod:`bench.wire`) instead of aiohttp's client.

aiohttp's client spends about 85 µs of CPU per request here, so it is the bottleneck of any
target faster than about 12,000 requests a second on this machine (a cache hit), and at
concurrency 64 it takes half a core from the servers it measures. This driver makes each
request's bytes once per run — those aiohttp's client sends, the same headers in the same
order, so the server does the same work — and reads a response only as far as finding its
end: a quarter to a third of the CPU per request (21 to 29 µs against 84 to 94 µs here). The same
closed loop and success rules apply: a status of 200, the whole body, and for streams a body
that ends with ``data: [DONE]``.

What it changes, besides the driver's own share of the machine, is how often the driver
sleeps: it waits on the server instead of the other way round, and on loopback the kernel
charges waking a sleeping peer to the process that writes to it (see ``bench/README.md``).
"""

import asyncio
import sys
import time
from urllib.parse import urlsplit

import aiohttp

from bench.driver import LoadResult, LoadSpec, RequestBudget, request_body
from bench.wire import Connection

_DONE = b"data: [DONE]"
_USER_AGENT = (
    f"Python/{sys.version_info.major}.{sys.version_info.minor} aiohttp/{aiohttp.__version__}"
)


def request_bytes(url: str, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """The whole ``POST`` of ``body`` to ``url``, as aiohttp's client writes it: ``Host``,
    ``Content-Type``, the extra ``headers``, ``Accept``, ``Accept-Encoding``, ``User-Agent``,
    ``Content-Length``."""
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {parts.netloc}",
        "Content-Type: application/json",
        *(f"{name}: {value}" for name, value in headers),
        "Accept: */*",
        "Accept-Encoding: gzip, deflate",
        f"User-Agent: {_USER_AGENT}",
        f"Content-Length: {len(body)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class LoadSession:
    """Keep-alive connections kept between runs (a warm-up's are reused by the measured run
    after it), each answer awaited at most ``request_timeout_s``. Use it as an async context
    manager: leaving it closes every connection."""

    def __init__(self, request_timeout_s: float) -> None:
        self.request_timeout_s = request_timeout_s
        self._idle: dict[tuple[str, int], list[Connection]] = {}

    async def __aenter__(self) -> "LoadSession":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    async def connect(self, host: str, port: int) -> Connection:
        """An idle open connection to ``host:port``, else a new one."""
        idle = self._idle.get((host, port))
        while idle:
            connection = idle.pop()
            if connection.usable:
                return connection
        return await Connection.open(host, port, self.request_timeout_s)

    def release(self, connection: Connection) -> None:
        """Keep ``connection`` for the next run, if it can carry another request."""
        if connection.usable:
            self._idle.setdefault(connection.address, []).append(connection)


async def run_load(session: LoadSession, spec: LoadSpec) -> LoadResult:
    """Drive ``spec`` through ``session`` and return what was measured."""
    payload = request_bytes(
        spec.url, request_body(spec.stream, spec.conversation_bytes), spec.headers
    )
    result = LoadResult()
    budget = RequestBudget(spec.max_requests)
    started = time.perf_counter()
    deadline = started + spec.duration_s
    await asyncio.gather(
        *(
            _worker(session, spec, payload, deadline, budget, result)
            for _ in range(spec.concurrency)
        )
    )
    result.wall_s = time.perf_counter() - started
    return result


async def _worker(
    session: LoadSession,
    spec: LoadSpec,
    payload: bytes,
    deadline: float,
    budget: RequestBudget,
    result: LoadResult,
) -> None:
    parts = urlsplit(spec.url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    latencies, ttfbs, errors = result.latencies_s, result.ttfb_s, result.errors
    clock = time.perf_counter
    connection: Connection | None = None
    try:
        while clock() < deadline and budget.take():
            started = clock()
            try:
                if connection is None or not connection.usable:
                    connection = await session.connect(host, port)
                status, tail, first_byte = await connection.exchange(payload)
            except (OSError, TimeoutError) as exc:
                errors[type(exc).__name__] += 1
                connection = None
                continue
            finished = clock()
            if status != 200:
                errors[f"HTTP {status}"] += 1
                continue
            if spec.stream and not tail.rstrip().endswith(_DONE):
                errors["missing data: [DONE]"] += 1
                continue
            latencies.append(finished - started)
            if spec.stream:
                ttfbs.append(first_byte - started)
    finally:
        if connection is not None:
            session.release(connection)
