"""Background responses across ``crossway serve`` processes on one SQLite database, with the
openai SDK as the client:

- SIGTERM with background responses running: the one that can finish within
  ``server.shutdown_timeout`` completes, the one that cannot is stored ``failed`` (the gateway
  stopped), never left ``in_progress``, and the process exits within the drain's bound;
- two gateway instances: a response created on A is polled to ``completed`` through B; a cancel
  sent to B stops the job running on A within its lease's renewal (A's access line for it says
  499, and A does not overwrite the ``cancelled`` status)."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import openai

from proxy.stored.response_store import LEASE_SECONDS, STOPPED
from tests.e2e.processes import free_port, serve
from tests.schemas import validate_in
from tests.waiting import until

SPEC = "openai-responses.openapi.json"
CONFIG = """\
server: {{host: 127.0.0.1, port: {port}, access_log: true, shutdown_timeout: {timeout}}}
database: {{url: "sqlite:///{database}"}}
providers:
  mock: {{type: mock, faults: true, timeouts: {{first_byte: 60, idle: 60, total: 120}}}}
  slow: {{type: mock, tokens_per_second: 10}}
plugins:
  - plugin: tests.e2e.key_plugin:HeaderKey
"""
TIMEOUT = 3.0
EXIT_SLACK = 3.0
"""Seconds the process may take to exit after the deadline (see ``tests/e2e/test_shutdown.py``;
below TIMEOUT, so that a stop that waits the timeout twice fails)."""
WORDS = "one two three four five six seven eight"
LONGER = f"{WORDS} {WORDS}"
"""At 10 tokens a second: about 1.6 s, within the shutdown timeout."""


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="client", max_retries=0, default_headers={"x-test-key": "a"}
    )


def config(tmp_path: Path, name: str, port: int) -> Path:
    path = tmp_path / f"{name}.yaml"
    text = CONFIG.format(port=port, timeout=TIMEOUT, database=tmp_path / "crossway.db")
    path.write_text(text)
    return path


def stored(database: Path, response_id: str) -> dict[str, Any]:
    """The response as the database holds it (no lease logic on top)."""
    with sqlite3.connect(database) as db:
        (body,) = db.execute("SELECT body FROM responses WHERE id = ?", (response_id,)).fetchone()
    response: dict[str, Any] = json.loads(body)
    return response


async def until_status(client: openai.AsyncOpenAI, response_id: str, status: str) -> Any:
    """Poll until the response reads ``status`` (at most 60 s); every body validated."""
    for _ in range(600):
        response = await client.responses.retrieve(response_id)
        validate_in(SPEC, "Response", response.model_dump(mode="json"))
        if response.status == status:
            return response
        await asyncio.sleep(0.1)
    raise AssertionError(f"{response_id} still {response.status}, never {status}")


async def test_sigterm_stores_running_background_responses_failed_and_exits_in_bound(
    tmp_path: Path,
) -> None:
    port = free_port()
    with serve(config(tmp_path, "gateway", port), port, 1, tmp_path / "gateway.log") as served:
        async with sdk(served.url) as client:
            stuck = await client.responses.create(
                model="mock/stall-0", input="never ends", background=True
            )
            finishing = await client.responses.create(
                model="slow/echo", input=LONGER, background=True
            )
            await until_status(client, stuck.id, "in_progress")
            await until_status(client, finishing.id, "in_progress")
            stopped = time.monotonic()
            served.process.send_signal(signal.SIGTERM)
            await until(
                lambda: served.process.poll() is not None,
                seconds=TIMEOUT + 30,
                what="the gateway to exit",
            )
            exited = time.monotonic() - stopped
    assert served.process.returncode == 0
    assert exited <= TIMEOUT + EXIT_SLACK, f"exited {exited:.2f} s after SIGTERM"
    failed = stored(tmp_path / "crossway.db", stuck.id)
    validate_in(SPEC, "Response", failed)
    assert failed["status"] == "failed"
    assert failed["error"]["message"] == STOPPED
    completed = stored(tmp_path / "crossway.db", finishing.id)
    assert (completed["status"], completed["output"][0]["content"][0]["text"]) == (
        "completed",
        LONGER,
    )
    assert [line["background_stopped"] for line in served.log_lines("shutdown_deadline")] == [1]
    assert served.log_lines("unhandled_error") == []


async def test_two_instances_poll_and_cancel_each_others_background_responses(
    tmp_path: Path,
) -> None:
    port_a, port_b = free_port(), free_port()
    with (
        serve(config(tmp_path, "a", port_a), port_a, 1, tmp_path / "a.log") as a,
        serve(config(tmp_path, "b", port_b), port_b, 1, tmp_path / "b.log") as b,
    ):
        async with sdk(a.url) as on_a, sdk(b.url) as on_b:
            created = await on_a.responses.create(model="slow/echo", input=WORDS, background=True)
            done = await until_status(on_b, created.id, "completed")
            assert done.output_text == WORDS
            running = await on_a.responses.create(
                model="mock/stall-0",
                input="never ends",
                background=True,
                extra_headers={"x-request-id": "bg-cancelled-elsewhere"},
            )
            await until_status(on_b, running.id, "in_progress")
            cancelled = await on_b.responses.cancel(running.id)
            validate_in(SPEC, "Response", cancelled.model_dump(mode="json"))
            assert cancelled.status == "cancelled"

            def stopped_on_a() -> bool:
                lines = a.log_lines("request")
                return any(line["request_id"] == "bg-cancelled-elsewhere" for line in lines)

            # A sees the cancel at its next renewal (every third of the lease): bounded generously.
            await until(stopped_on_a, seconds=LEASE_SECONDS * 2 + 30, what="A to stop the job")
            (line,) = [
                line
                for line in a.log_lines("request")
                if line["request_id"] == "bg-cancelled-elsewhere"
            ]
            assert line["status"] == 499
            for client in (on_a, on_b):
                assert (await client.responses.retrieve(running.id)).status == "cancelled"
    assert stored(tmp_path / "crossway.db", running.id)["status"] == "cancelled"
