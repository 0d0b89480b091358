"""Failed requests keep no memory: after N of them, of every kind, a real ``crossway serve``
holds no more than :data:`RSS_BOUND` beyond what it held after N good ones.

The gateway runs the full chain (auth → limits → masking → cache → cost → fallback → retry →
balance, the spend ledger in SQLite) in front of a hostile upstream on 127.0.0.1
(:mod:`tests.e2e.hostile_upstream`), whose gzip bombs inflate past the provider's 32 MiB answer
limit and 8 MiB event limit. The failures are those that kept memory before: bodies over the
size limit (with a length, and chunked), gzip bodies inflating to 200 MiB, bodies that are not
the gzip they claim, an encoding the gateway does not decode, 9 MiB of invalid JSON, a request
without a key, the upstream's bombs, whole and streamed, and an upstream that refuses
connections. Each used to keep what it had read (up to 200 MiB inflated) in a reference cycle
with its error's traceback, freed only by a full garbage collection: 80 request bombs took the
process from 103 MiB to 4.7 GiB.

The process first serves :data:`WARMUP_ROUNDS` of everything (pools, caches, the allocator's
arenas reach their working size), then ``N`` good requests, then ``N`` failed ones, one at a
time, each bounded by :data:`REQUEST_SECONDS`; its RSS is read from ``/proc/<pid>/status``
once nothing is in flight. Standard error holds nothing but JSON lines, and no key appears in
anything the process wrote.

The cause is checked directly too, in process: a request of any of these kinds, or a good
one, whole or streamed, leaves no frame and no object of the gateway's code in cyclic garbage
(what only the garbage collector would free).
"""

from __future__ import annotations

import asyncio
import gc
import io
import itertools
import json
import re
import textwrap
import time
import types
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.hostile_upstream import HostileUpstream
from tests.e2e.processes import REPO, Served, free_port, proc_file, serve

CLIENT_KEY = "sk-cw-memory-bound-client-key-0123456789abcdef"
MIB = 1024 * 1024
MAX_BODY_BYTES = 10 * MIB  # the default server.max_body_bytes
RSS_BOUND = 48 * MIB
"""How much more the process may hold after N failed requests than after N good ones: room for
the allocator keeping the arenas of one request's peak (a 10 MiB body, 32 MiB inflated from an
upstream). Before the fix, 21 request bombs alone kept 960 MiB; with the errors' tracebacks
kept (by a stream's shared failure), 6 rounds of the failure kinds kept 59 MiB."""
WARMUP_ROUNDS = 3
ROUNDS = 16
"""Rounds of every failure kind (:func:`_failed_cases`): N is ROUNDS times the number of
kinds, for the good requests as for the failed ones."""
REQUEST_SECONDS = 60.0
SETTLE_SECONDS = 30.0
CHAT = "/v1/chat/completions"


def _config(port: int, upstream: str, data: Path) -> str:
    closed = free_port()  # nothing listens there: the "down" upstream refuses connections
    return textwrap.dedent(
        f"""
        server: {{port: {port}, access_log: false}}
        database: {{url: "sqlite:///{data}/crossway.db"}}
        auth:
          keys: [{{key: "{CLIENT_KEY}", alias: memory}}]
        providers:
          up:
            type: openai
            base_url: "{upstream}/v1"
            api_key: "{UPSTREAM_KEY}"
            timeouts: {{first_byte: 10, idle: 10, total: 30}}
          down:
            type: openai
            base_url: "http://127.0.0.1:{closed}/v1"
            api_key: "{UPSTREAM_KEY}"
        models:
          chat: [{{target: up/gpt-test, prices: {{input: 10, output: 20}}}}]
          bomb: [{{target: up/gzip-bomb, prices: {{input: 10, output: 20}}}}]
          stream-bomb: [{{target: up/gzip-huge-event, prices: {{input: 10, output: 20}}}}]
          down: [{{target: down/gpt-test, prices: {{input: 10, output: 20}}}}]
        plugins:
          - auth: {{}}
          - limits: {{}}
          - masking: {{}}
          - cache: {{}}
          - cost: {{}}
          - fallback: {{}}
          - retry: {{retries: 1}}
          - balance: {{health: {{failures: 0}}}}  # every bomb reaches the upstream
        """
    )


def _chat(model: str, text: str, stream: bool = False) -> bytes:
    body = {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream}
    return json.dumps(body).encode()


class Case:
    """One request: its body, extra headers, and the status (and body text) it must get."""

    def __init__(
        self, body: bytes, status: int, expect: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.body, self.status, self.expect = body, status, expect
        self.headers = {"authorization": f"Bearer {CLIENT_KEY}", **(headers or {})}


def _failed_cases() -> dict[str, Case]:
    """Every failure kind, by name (the bodies are made once: a few MiB each)."""
    oversized = b'{"model": "chat", "pad": "' + b"x" * (MAX_BODY_BYTES + MIB) + b'"}'
    request_bomb = _gzip_of_spaces(200 * MIB)  # about 200 KiB
    invalid = b"{" + b"x" * (9 * MIB)
    gzip_header = {"content-encoding": "gzip"}
    return {
        "oversized": Case(oversized, 413, b"request_too_large"),
        "oversized-chunked": Case(oversized, 413, b"request_too_large"),  # sent chunked
        "request-bomb": Case(request_bomb, 413, b"request_too_large", gzip_header),
        "not-gzip": Case(_chat("chat", "hi"), 400, b"invalid_content_encoding", gzip_header),
        "brotli": Case(b"\x1b", 415, b"unsupported_content_encoding", {"content-encoding": "br"}),
        "invalid-json": Case(invalid, 400, b"invalid_json"),
        "no-key": Case(invalid, 401, b"invalid_api_key", {"authorization": "Bearer wrong"}),
        "upstream-bomb": Case(_chat("bomb", "hi"), 502, b"upstream_response_too_large"),
        "upstream-stream-bomb": Case(
            _chat("stream-bomb", "hi", stream=True), 200, b"upstream_response_too_large"
        ),
        "upstream-down": Case(_chat("down", "hi"), 502, b"upstream_unavailable"),
    }


def _gzip_of_spaces(size: int) -> bytes:
    """``size`` spaces (a whole number of MiB), gzip-compressed a MiB at a time."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = b" " * MIB
    return b"".join(compressor.compress(piece) for _ in range(size // MIB)) + compressor.flush()


def _good_cases() -> Iterator[Case]:
    """Good requests, whole and streamed by turns, each a different text (a cache miss)."""
    for n in itertools.count():
        yield Case(_chat("chat", f"hello {n}", stream=n % 2 == 1), 200, b"fine")


def _one_good_of_each_sort() -> list[tuple[str, Case]]:
    """A good whole answer and a good stream (the cache's shared stream among its parts)."""
    good = _good_cases()
    return [("good", next(good)), ("good-stream", next(good))]


async def _chunks(data: bytes) -> AsyncIterator[bytes]:
    """``data`` as a chunked upload, in 1 MiB pieces."""
    for start in range(0, len(data), MIB):
        yield data[start : start + MIB]


async def _send(session: aiohttp.ClientSession, url: str, name: str, case: Case) -> None:
    data: Any = _chunks(case.body) if name.endswith("chunked") else case.body
    async with session.post(url + CHAT, data=data, headers=case.headers) as response:
        body = await response.read()
    assert response.status == case.status, (name, response.status, body[:300])
    assert case.expect in body, (name, body[:300])


def _rss(pid: int) -> int:
    status = proc_file(f"/proc/{pid}/status")
    return int(re.search(r"VmRSS:\s+(\d+) kB", status)[1]) * 1024  # type: ignore[index]


async def _settled_rss(session: aiohttp.ClientSession, gateway: Served) -> int:
    """The gateway's RSS once its in-flight gauge is back at 0 (polled, bounded)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        async with session.get(gateway.url + "/metrics") as response:
            text = await response.text()
        in_flight = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("crossway_requests_in_flight{")
        )
        if in_flight <= 0:
            return _rss(gateway.pid)
        assert time.monotonic() < deadline, f"{in_flight} requests still in flight"
        await asyncio.sleep(0.05)  # polling the gauge, bounded by the deadline


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    runner, url = await start_site(HostileUpstream().app())
    yield url
    await runner.cleanup()


@pytest.fixture
def gateway(tmp_path: Path, upstream: str) -> Iterator[Served]:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(_config(port, upstream, tmp_path))
    with serve(config, port, 1, tmp_path / "stdout.log", stderr=tmp_path / "stderr.log") as served:
        yield served


async def test_rss_after_failed_requests_of_every_kind_stays_within_a_bound_of_good_ones(
    gateway: Served, tmp_path: Path
) -> None:
    failed = _failed_cases()
    good = _good_cases()
    timeout = aiohttp.ClientTimeout(total=REQUEST_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def run(rounds: int, cases: Callable[[], list[tuple[str, Case]]]) -> int:
            for _ in range(rounds):
                for name, case in cases():
                    await _send(session, gateway.url, name, case)
            return await _settled_rss(session, gateway)

        def every_kind() -> list[tuple[str, Case]]:
            return [("good", next(good)), *failed.items()]

        def good_ones() -> list[tuple[str, Case]]:
            return [("good", next(good)) for _ in failed]

        await run(WARMUP_ROUNDS, every_kind)
        after_good = await run(ROUNDS, good_ones)
        after_failed = await run(ROUNDS, lambda: list(failed.items()))
    grown = (after_failed - after_good) / MIB
    print(
        f"RSS after {ROUNDS * len(failed)} good: {after_good / MIB:.0f} MiB; failed: +{grown:.1f}"
    )
    assert after_failed <= after_good + RSS_BOUND, f"{grown:.0f} MiB more after failed requests"
    _assert_clean_output(tmp_path / "stdout.log", tmp_path / "stderr.log")


def _assert_clean_output(stdout: Path, stderr: Path) -> None:
    """Standard error holds only JSON lines; neither stream holds a key."""
    errors = stderr.read_text(errors="replace")
    for line in errors.splitlines():
        assert isinstance(json.loads(line), dict), line[:300]
    for text in (errors, stdout.read_text(errors="replace")):
        assert UPSTREAM_KEY not in text
        assert CLIENT_KEY not in text
        assert "Traceback" not in text


GATEWAY_CODE = tuple(str(REPO / part) + "/" for part in ("proxy", "plugins"))
"""Where the gateway's source files are (the client's and aiohttp's frames are not its)."""
GATEWAY_MODULES = ("proxy.", "plugins.")


def _gateway_objects_in_cyclic_garbage() -> list[str]:
    """The gateway's frames and objects that only the cycle collector can free now (it runs,
    keeping what it finds in ``gc.garbage`` to be looked at, then lets it go)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = []
        for thing in gc.garbage:
            if isinstance(thing, types.FrameType):
                code = thing.f_code
                if code.co_filename.startswith(GATEWAY_CODE):
                    found.append(f"frame of {code.co_qualname} ({Path(code.co_filename).name})")
            elif type(thing).__module__.startswith(GATEWAY_MODULES):
                found.append(f"{type(thing).__module__}.{type(thing).__qualname__}")
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def test_no_request_leaves_gateway_frames_or_objects_in_cyclic_garbage(
    tmp_path: Path, upstream: str
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(_config(0, upstream, tmp_path))
    runner, url = await start_site(create_app(config, log_stream=io.StringIO()))
    left: dict[str, list[str]] = {}
    timeout = aiohttp.ClientTimeout(total=REQUEST_SECONDS)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for name, case in [*_failed_cases().items(), *_one_good_of_each_sort()]:
                gc.collect()
                gc.disable()
                try:
                    for _ in range(2):
                        await _send(session, url, name, case)
                    found = _gateway_objects_in_cyclic_garbage()
                finally:
                    gc.enable()
                if found:
                    left[name] = found
    finally:
        await runner.cleanup()
    assert not left, left
