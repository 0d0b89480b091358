"""Anthropic's Message Batches through the official ``anthropic`` SDK against a real gateway (the
``auth`` plugin, the ``cost`` plugin and its ledger, the mock provider): ``messages.batches``
``create``, ``retrieve``, ``list``, ``results``, ``cancel`` and ``delete``; each request runs
through the chain as the key that created the batch (one ledger record per request, tagged with
the batch); a bad request is an ``errored`` result; another key sees none of it; errors are in
Anthropic's shape."""

from __future__ import annotations

import asyncio
import io
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site

MASTER = "master-key-msgbatch-" + "0123456789" * 3
ALICE = "sk-cw-msgbatch-alice-" + "abcdefghij" * 4
BOB = "sk-cw-msgbatch-bobby-" + "abcdefghij" * 4


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: false}}
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            batches: {{concurrency: 4, poll_interval: 0.2}}
            auth:
              master_key: "{MASTER}"
              keys:
                - {{key: "{ALICE}", alias: alice}}
                - {{key: "{BOB}", alias: bob}}
            providers:
              mock: {{type: mock, faults: true}}
            plugins:
              - auth: {{}}
              - cost: {{}}
            """
        )
    )
    runner, served = await start_site(create_app(config, log_stream=io.StringIO()))
    try:
        yield served
    finally:
        await runner.cleanup()


def sdk(url: str, key: str = ALICE) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key=key, max_retries=0)


def requests(count: int, model: str = "mock/echo") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"req-{n}",
            "params": {
                "model": model,
                "max_tokens": 32,
                "messages": [{"role": "user", "content": f"hello {n}"}],
            },
        }
        for n in range(count)
    ]


async def ended(client: anthropic.AsyncAnthropic, batch_id: str) -> Any:
    async with asyncio.timeout(60):
        while True:
            batch = await client.messages.batches.retrieve(batch_id)
            if batch.processing_status == "ended":
                return batch
            await asyncio.sleep(0.05)


async def test_a_message_batch_runs_its_requests_and_streams_their_results(url: str) -> None:
    asked = requests(6)
    asked[2]["params"]["max_tokens"] = "many"  # not a request: an errored result
    async with sdk(url) as alice, sdk(url, BOB) as bob:
        created = await alice.messages.batches.create(requests=asked)  # type: ignore[arg-type]
        assert created.type == "message_batch"
        assert created.id.startswith("msgbatch_")
        assert created.processing_status == "in_progress"
        assert created.results_url is None
        with pytest.raises(anthropic.NotFoundError) as missing:
            await bob.messages.batches.retrieve(created.id)
        assert missing.value.body["type"] == "error"
        batch = await ended(alice, created.id)
        counts = batch.request_counts
        assert (counts.succeeded, counts.errored, counts.processing) == (5, 1, 0)
        assert batch.ended_at is not None
        assert batch.results_url == f"{url}/v1/messages/batches/{created.id}/results"
        results = [result async for result in await alice.messages.batches.results(created.id)]
        assert [r.custom_id for r in results] == [f"req-{n}" for n in range(6)]
        for n, result in enumerate(results):
            if n == 2:
                assert result.result.type == "errored"
                assert result.result.error.error.type == "invalid_request_error"
                continue
            assert result.result.type == "succeeded"
            assert result.result.message.content[0].text == f"hello {n}"  # type: ignore[union-attr]
        listed = await alice.messages.batches.list()
        assert [b.id for b in listed.data] == [created.id]
        assert (await bob.messages.batches.list()).data == []
        deleted = await alice.messages.batches.delete(created.id)
        assert (deleted.id, deleted.type) == (created.id, "message_batch_deleted")
        with pytest.raises(anthropic.NotFoundError):
            await alice.messages.batches.retrieve(created.id)
    assert await recorded(url, created.id, 6) == 6


async def recorded(url: str, batch_id: str, lines: int) -> int:
    """How many ledger records name the batch, once at least ``lines`` do (or 20 s passed)."""
    headers = {"authorization": f"Bearer {MASTER}"}
    count = 0
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            async with session.get(f"{url}/admin/spend?group_by=batch", headers=headers) as got:
                rows = [r for r in (await got.json())["data"] if r["batch_id"] == batch_id]
            count = rows[0]["requests"] if rows else 0
            if count >= lines:
                break
            await asyncio.sleep(0.1)
    return count


async def test_a_cancelled_message_batch_ends_with_its_unrun_requests_canceled(url: str) -> None:
    async with sdk(url) as alice:
        created = await alice.messages.batches.create(
            requests=requests(200, "mock/slow-50")  # type: ignore[arg-type]
        )
        with pytest.raises(anthropic.BadRequestError):
            await alice.messages.batches.delete(created.id)  # still processing
        canceling = await alice.messages.batches.cancel(created.id)
        assert canceling.processing_status == "canceling"
        assert canceling.cancel_initiated_at is not None
        batch = await ended(alice, created.id)
        counts = batch.request_counts
        assert counts.canceled > 0
        assert counts.succeeded + counts.canceled == 200
        results = [result async for result in await alice.messages.batches.results(created.id)]
        kinds = [r.result.type for r in results]
        assert len(kinds) == 200
        assert kinds.count("canceled") == counts.canceled


async def test_a_bad_message_batch_is_refused_in_anthropics_shape(url: str) -> None:
    async with sdk(url) as alice:
        twice = requests(2)
        twice[1]["custom_id"] = "req-0"
        with pytest.raises(anthropic.BadRequestError) as refused:
            await alice.messages.batches.create(requests=twice)  # type: ignore[arg-type]
        assert refused.value.body["error"]["type"] == "invalid_request_error"
        with pytest.raises(anthropic.BadRequestError):
            await alice.messages.batches.create(requests=[])
    async with sdk(url, "sk-cw-not-a-key-" + "x" * 40) as stranger:
        with pytest.raises(anthropic.AuthenticationError):
            await stranger.messages.batches.list()
