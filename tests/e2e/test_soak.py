"""A bounded soak: streams, client disconnects and upstream faults together, against a real
``crossway serve`` process; afterwards its RSS, open file descriptors and in-flight gauge are
back at their level before the load (a leak of tasks, connections or buffers shows here).

The load runs for :data:`LOAD_SECONDS` (after :data:`WARMUP_SECONDS` that let pools, caches and
the allocator settle) at :data:`CONCURRENCY` clients; every request is bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.conftest import start_site
from tests.e2e.fake_openai import FakeOpenAI

REPO = Path(__file__).resolve().parents[2]
WARMUP_SECONDS = 5.0
LOAD_SECONDS = 12.0
CONCURRENCY = 32
MAX_RSS_GROWTH = 24 * 1024 * 1024
MAX_FD_GROWTH = 8
HELLO = [{"role": "user", "content": "one two three four five six seven eight"}]
CONFIG = """
server: {{port: {port}, access_log: false}}
providers:
  mock:
    type: mock
    faults: true
    tokens_per_second: 400
    timeouts: {{first_byte: 2, idle: 0.5, total: 5}}
  up:
    type: openai
    base_url: "{upstream}/v1"
    api_key: sk-soak-0123456789abcdef
    timeouts: {{first_byte: 2, idle: 1, total: 5}}
"""
# (model, stream, read the whole answer?) — a mix of every way a request can end.
MIX = [
    ("mock/echo", True, True),  # a normal stream
    ("mock/echo", False, True),  # a normal answer
    ("mock/echo", True, False),  # the client goes away mid-stream
    ("mock/cut-3", True, True),  # the upstream drops mid-stream: an in-band error
    ("mock/stall-2", True, True),  # the upstream goes silent: the idle clock ends it
    ("mock/error-500", False, True),  # an upstream error
    ("up/gpt-test", True, True),  # a real upstream's stream
    ("up/slow-stream", True, False),  # a long upstream stream the client abandons
    ("up/cut-stream", True, True),  # a real connection dropped mid-stream
    ("up/fail-503", False, True),  # an upstream error with a body
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Process:
    def __init__(self, pid: int, url: str) -> None:
        self.pid, self.url = pid, url

    def rss(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status)[1]) * 1024  # type: ignore[index]

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    async def in_flight(self, session: aiohttp.ClientSession) -> float:
        async with session.get(f"{self.url}/metrics") as response:
            text = await response.text()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("crossway_requests_in_flight{")
        )


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Process]:
    fake = FakeOpenAI()
    upstream_runner, upstream_url = await start_site(fake.app())
    port = _free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(port=port, upstream=upstream_url))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "serve",
        "--config",
        str(config),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 30
            while True:
                try:
                    async with session.get(f"{url}/health/live") as response:
                        if response.status == 200:
                            break
                except aiohttp.ClientError:
                    if process.returncode is not None or time.monotonic() > deadline:
                        pytest.fail("the gateway did not start")
                    await asyncio.sleep(0.05)  # polling for readiness, bounded by the deadline
        yield Process(process.pid, url)
    finally:
        process.terminate()
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
        await upstream_runner.cleanup()
    assert b"Traceback" not in stderr, stderr[-2000:]


async def _one(session: aiohttp.ClientSession, url: str, model: str, stream: bool, whole: bool):
    body = {"model": model, "messages": HELLO, "stream": stream}
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        if whole:
            await response.read()
        else:
            await response.content.readany()  # one read, then the connection is dropped
            response.close()
        return response.status


async def _drive(process: Process, seconds: float) -> Counter[str]:
    """Run the mix at CONCURRENCY until ``seconds`` have passed; outcomes by status."""
    outcomes: Counter[str] = Counter()
    stop = time.monotonic() + seconds
    mix = itertools.cycle(MIX)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def client() -> None:
            while time.monotonic() < stop:
                model, stream, whole = next(mix)
                try:
                    outcomes[str(await _one(session, process.url, model, stream, whole))] += 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    outcomes[type(exc).__name__] += 1

        await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    return outcomes


async def _settled(process: Process) -> float:
    """The in-flight gauge once it has reached 0 (polled, bounded), else its last value."""
    async with aiohttp.ClientSession() as session:
        deadline = time.monotonic() + 15
        while True:
            value = await process.in_flight(session)
            if value <= 0 or time.monotonic() > deadline:
                return value
            await asyncio.sleep(0.1)  # polling the gauge, bounded by the deadline


async def test_rss_fds_and_in_flight_return_to_their_level_after_a_mixed_soak(
    gateway: Process,
) -> None:
    await _drive(gateway, WARMUP_SECONDS)
    assert await _settled(gateway) == 0
    rss, fds = gateway.rss(), gateway.fds()
    outcomes = await _drive(gateway, LOAD_SECONDS)
    assert sum(outcomes.values()) > 100, outcomes
    assert {"200", "502", "503"} <= set(outcomes), outcomes
    assert not set(outcomes) - {"200", "502", "503", "504"}, outcomes
    assert await _settled(gateway) == 0
    assert gateway.fds() <= fds + MAX_FD_GROWTH, (fds, gateway.fds())
    assert gateway.rss() <= rss + MAX_RSS_GROWTH, (rss, gateway.rss(), outcomes)
    print(f"soak: {dict(outcomes)}; RSS {rss >> 20} -> {gateway.rss() >> 20} MiB; fds {fds}")
