"""A stop is bounded by ``server.shutdown_timeout``: requests in flight get that long, then
those still running end in their client's dialect — a 503 ``server_shutting_down`` error before
the first byte, the dialect's in-band error event in a stream — with their ledger records
written, and the process exits within the timeout and a second.

In-process, every dialect is stopped with a stream and a whole request in flight; one test sends
SIGTERM to a real ``crossway serve`` running the full chain over a SQLite ledger, with an
OpenAI chat stream, an Anthropic Messages stream and a whole request that never end upstream."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import sqlite3
import time
from pathlib import Path

import aiohttp
import pytest

from proxy.server.app import DRAIN, create_app
from tests.e2e.conftest import start_site
from tests.e2e.fake_openai import FakeOpenAI
from tests.e2e.full_chain import CLIENT_KEY, full_chain_config
from tests.e2e.processes import free_port, serve
from tests.proxy.dialects.adapters import load_adapters
from tests.waiting import until

ADAPTERS = load_adapters()
SHUTTING_DOWN = "the gateway is shutting down"

STALLING_MOCK = """\
server: {access_log: false, shutdown_timeout: 0.5}
providers:
  openai: {type: mock, faults: true, timeouts: {first_byte: 60, idle: 60, total: 120}}
  anthropic: {type: mock, faults: true, timeouts: {first_byte: 60, idle: 60, total: 120}}
  mock: {type: mock, faults: true, timeouts: {first_byte: 60, idle: 60, total: 120}}
"""


@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_requests_still_running_at_the_deadline_end_in_their_dialect(
    tmp_path: Path, dialect: str
) -> None:
    # `stall-3` streams three chunks and then nothing; `hang` never answers; the upstream clocks
    # are far longer than the 0.5 s the stop gives them.
    adapter = ADAPTERS[dialect]
    path = tmp_path / "gateway.yaml"
    path.write_text(STALLING_MOCK)
    app = create_app(path, log_stream=io.StringIO())
    runner, url = await start_site(app)
    stream_path, stream_body = adapter.request("openai/stall-3", "hi", stream=True)
    whole_path, whole_body = adapter.request("openai/hang", "hi", stream=False)
    async with aiohttp.ClientSession() as session:
        whole = asyncio.ensure_future(session.post(url + whole_path, json=whole_body))
        async with session.post(url + stream_path, json=stream_body) as stream:
            assert stream.status == 200
            first = await stream.content.readany()
            await until(lambda: app[DRAIN].running == 2, what="both requests in flight")
            stopping = asyncio.ensure_future(runner.cleanup())
            raw = first + await stream.content.read()
        answer = await whole
        async with answer:
            status, body = answer.status, await answer.json()
        await stopping
    outcome = adapter.read_stream(raw)  # validates every event, and the error as the last one
    assert outcome.error is not None
    assert SHUTTING_DOWN in outcome.error
    assert status == 503
    assert SHUTTING_DOWN in adapter.read_error(status, body)


TIMEOUT = 4.0
EXIT_SLACK = 3.0
"""Seconds the process may take to exit after the streams ended: on an idle machine it exits
0.1-0.6 s after the deadline; under coverage (each process writes its data at exit) on a loaded
2-core machine it took 2 s. Below TIMEOUT, so that a stop that waits the timeout twice fails."""
HI = "hi"


async def _open_stream(
    session: aiohttp.ClientSession, url: str, path: str, body: dict, headers: dict[str, str]
) -> tuple[aiohttp.ClientResponse, bytes]:
    """Start a stream and read its first bytes: it is then running."""
    response = await session.post(url + path, json=body, headers=headers)
    assert response.status == 200, await response.text()
    return response, await response.content.readany()


@pytest.mark.parametrize("workers", [1, 2])
async def test_sigterm_ends_the_streams_in_flight_within_the_timeout(
    tmp_path: Path, upstream: tuple[FakeOpenAI, str], workers: int
) -> None:
    # With two workers the supervisor forwards the signal; each worker drains its own requests.
    fake, upstream_url = upstream
    port = free_port()
    config = tmp_path / "gateway.yaml"
    server = f"port: {port}, workers: {workers}, shutdown_timeout: {TIMEOUT}"
    config.write_text(full_chain_config(tmp_path, upstream_url, server))
    bearer = {"Authorization": f"Bearer {CLIENT_KEY}"}
    # Different texts: the cache would otherwise join identical requests into one upstream call.
    chat = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": "one"}]}
    messages = {
        "model": "slow",
        "max_tokens": 100,
        "stream": True,
        "messages": [{"role": "user", "content": "two"}],
    }
    whole = {"model": "hang", "messages": [{"role": "user", "content": "three"}]}
    with serve(config, port, workers, tmp_path / "gateway.log") as served:
        async with aiohttp.ClientSession() as session:
            openai_stream, openai_first = await _open_stream(
                session, served.url, "/v1/chat/completions", chat, bearer
            )
            anthropic_stream, anthropic_first = await _open_stream(
                session,
                served.url,
                "/v1/messages",
                messages,
                {"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01"},
            )
            pending = asyncio.ensure_future(
                session.post(served.url + "/v1/chat/completions", json=whole, headers=bearer)
            )
            await until(lambda: len(fake.requests) == 3, seconds=30, what="three upstream calls")
            readers = [
                asyncio.ensure_future(openai_stream.content.read()),
                asyncio.ensure_future(anthropic_stream.content.read()),
            ]
            ended_at: list[float] = []
            for reader in readers:
                reader.add_done_callback(lambda _: ended_at.append(time.monotonic()))
            stopped = time.monotonic()
            served.process.send_signal(signal.SIGTERM)
            await until(
                lambda: served.process.poll() is not None,
                seconds=TIMEOUT + 30,
                what="the gateway to exit",
            )
            exited = time.monotonic() - stopped
            openai_after, anthropic_after = [await reader for reader in readers]
            openai_raw, anthropic_raw = (
                openai_first + openai_after,
                anthropic_first + anthropic_after,
            )
            answer = await pending
            async with answer:
                whole_status, whole_body = answer.status, await answer.json()
            ids = [r.headers["x-request-id"] for r in (openai_stream, anthropic_stream, answer)]
            openai_stream.release()
            anthropic_stream.release()
    assert served.process.returncode == 0
    # The requests' promise: the streams end at the deadline (within its 0.5 s grace and a
    # loaded machine's scheduling); the process's: it exits soon after.
    streams_ended = max(ended_at) - stopped
    assert TIMEOUT <= streams_ended <= TIMEOUT + 1, f"streams ended {streams_ended:.2f} s after"
    assert TIMEOUT <= exited <= TIMEOUT + EXIT_SLACK, f"exited {exited:.2f} s after SIGTERM"
    # The streams kept running after SIGTERM (the upstream sends a chunk every 0.2 s: about twenty
    # until the deadline), then ended with their dialect's in-band error as the last event: no
    # [DONE], no message_stop.
    assert openai_after.count(b'"content"') >= 3
    openai = ADAPTERS["openai"].read_stream(openai_raw)
    assert openai.error is not None
    assert SHUTTING_DOWN in openai.error
    assert b"[DONE]" not in openai_raw
    assert anthropic_after.count(b"content_block_delta") >= 3
    anthropic = ADAPTERS["anthropic"].read_stream(anthropic_raw)
    assert anthropic.error is not None
    assert SHUTTING_DOWN in anthropic.error
    assert b"message_stop" not in anthropic_raw
    assert whole_status == 503
    assert whole_body["error"]["code"] == "server_shutting_down"
    # Every one of them is in the ledger, as failed by the stop.
    with sqlite3.connect(tmp_path / "crossway.db") as db:
        rows = db.execute("SELECT request_id, status, error_code, dialect FROM spend").fetchall()
    assert sorted(rows) == sorted(
        [
            (ids[0], 503, "server_shutting_down", "openai"),
            (ids[1], 503, "server_shutting_down", "anthropic"),
            (ids[2], 503, "server_shutting_down", "openai"),
        ]
    )
    ended = served.log_lines("shutdown_deadline")
    assert sum(line["ended"] for line in ended) == 3
    assert {line["timeout"] for line in ended} == {TIMEOUT}
    assert json.dumps(served.log_lines("unhandled_error")) == "[]"
