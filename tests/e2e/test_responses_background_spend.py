"""A background response is accounted exactly once, when it ends: one ledger record (the ``cost``
plugin's, through the ``finished`` hooks) per ``background: true`` request, with the usage it
ran up, whether it completes, fails or is cancelled. A real gateway with the ``auth`` and
``cost`` plugins over a SQLite ledger; the openai SDK as the client, with a key the config
declares; the ledger read from the database file."""

from __future__ import annotations

import asyncio
import io
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.waiting import until

MASTER_KEY = "master-key-" + "0123456789abcdef" * 2
CLIENT_KEY = "sk-cw-client-" + "0123456789abcdef" * 2
WORDS = "one two three four five six"
CONFIG = f"""\
server: {{access_log: false}}
database: {{url: "sqlite:///DATA/crossway.db"}}
providers:
  mock: {{type: mock, faults: true, timeouts: {{first_byte: 60, idle: 60, total: 120}}}}
auth:
  master_key: "{MASTER_KEY}"
  cache_ttl: 0
  keys:
    - {{key: "{CLIENT_KEY}", alias: client}}
plugins:
  - auth: {{}}
  - cost: {{}}
"""


class Ledger:
    """A gateway's base URL and its ledger's rows."""

    def __init__(self, url: str, path: Path) -> None:
        self.url = url
        self.path = path

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=CLIENT_KEY, max_retries=0)

    def rows(self, request_id: str) -> list[dict[str, Any]]:
        """The ledger's records of ``request_id`` (none while the table does not exist)."""
        with sqlite3.connect(self.path) as db:
            db.row_factory = sqlite3.Row
            try:
                found = db.execute("SELECT * FROM spend WHERE request_id = ?", (request_id,))
                return [dict(row) for row in found.fetchall()]
            except sqlite3.OperationalError:
                return []

    async def record(self, request_id: str) -> dict[str, Any]:
        """The one record of ``request_id``, once written; then it stays the only one."""
        await until(lambda: bool(self.rows(request_id)), seconds=30, what=request_id)
        await asyncio.sleep(0.5)  # a second record, if one were coming, would be queued by now
        rows = self.rows(request_id)
        assert len(rows) == 1, rows
        return rows[0]


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[Ledger]:
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.replace("DATA", str(tmp_path)))
    runner, url = await start_site(create_app(config, log_stream=io.StringIO()))
    try:
        yield Ledger(url, tmp_path / "crossway.db")
    finally:
        await runner.cleanup()


async def settled(client: openai.AsyncOpenAI, response_id: str) -> Any:
    """Poll until the response is neither queued nor in progress (at most 30 s)."""
    for _ in range(300):
        response = await client.responses.retrieve(response_id)
        if response.status not in ("queued", "in_progress"):
            return response
        await asyncio.sleep(0.1)
    raise AssertionError(f"{response_id} still {response.status}")


async def test_a_completed_one_is_recorded_once_with_its_usage(ledger: Ledger) -> None:
    async with ledger.client() as client:
        created = await client.responses.create(
            model="mock/echo",
            input=WORDS,
            background=True,
            extra_headers={"x-request-id": "bg-completed"},
        )
        done = await settled(client, created.id)
    assert done.status == "completed"
    assert done.usage is not None
    record = await ledger.record("bg-completed")
    assert (record["status"], record["dialect"], record["error_code"]) == (200, "responses", None)
    assert (record["key_alias"], record["provider"]) == ("client", "mock")
    assert record["input_tokens"] == done.usage.input_tokens
    assert record["output_tokens"] == done.usage.output_tokens == len(WORDS.split())


async def test_a_streamed_create_is_recorded_once_not_per_reader(ledger: Ledger) -> None:
    async with ledger.client() as client:
        stream = await client.responses.create(
            model="mock/echo",
            input=WORDS,
            background=True,
            stream=True,
            extra_headers={"x-request-id": "bg-streamed"},
        )
        response_id = ""
        async for event in stream:
            if event.type == "response.created":
                response_id = event.response.id
        replay = await client.responses.retrieve(response_id, stream=True)
        async for _ in replay:
            pass
    record = await ledger.record("bg-streamed")
    assert (record["status"], record["output_tokens"]) == (200, len(WORDS.split()))


async def test_a_failed_one_is_recorded_once_with_its_error(ledger: Ledger) -> None:
    async with ledger.client() as client:
        created = await client.responses.create(
            model="mock/error-500",
            input=WORDS,
            background=True,
            extra_headers={"x-request-id": "bg-failed"},
        )
        done = await settled(client, created.id)
    assert done.status == "failed"
    record = await ledger.record("bg-failed")
    assert record["status"] >= 500
    assert record["error_code"] is not None
    assert record["output_tokens"] == 0


async def test_a_cancelled_one_is_recorded_once_with_what_it_generated(ledger: Ledger) -> None:
    async with ledger.client() as client:
        created = await client.responses.create(
            model="mock/stall-3",
            input=WORDS,
            background=True,
            extra_headers={"x-request-id": "bg-cancelled"},
        )
        seen: list[str] = []
        stream = await client.responses.retrieve(created.id, stream=True)
        async for event in stream:
            seen.append(event.type)
            if "response.output_text.delta" in seen:
                break
        await stream.close()
        cancelled = await client.responses.cancel(created.id)
        assert cancelled.status == "cancelled"
        assert (await client.responses.cancel(created.id)).status == "cancelled"
    record = await ledger.record("bg-cancelled")
    assert (record["status"], record["error_code"]) == (499, None)
    # No usage came: what streamed before the cancel is estimated and charged.
    assert 1 <= record["output_tokens"] < len(WORDS.split())
    assert (record["cost_source"], record["cost_nanos"] > 0) == ("estimated", True)
