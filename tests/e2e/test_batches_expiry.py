"""Batch expiry, retention and usage against a real gateway (the ``auth`` plugin, an
OpenAI-compatible upstream on 127.0.0.1 that holds lines on demand), through the official
``openai`` and ``anthropic`` SDKs, with the gateway's clock moved instead of waiting a day:

- a batch whose 24 h window passes midway starts no more lines: the lines in flight end, the
  rest are ``batch_expired`` lines of its error file, the batch ``expired`` with ``expired_at``,
  its ``usage`` the sum of the lines that ran; a message batch likewise ends with its unrun
  requests ``expired``;
- a batch a restarted gateway claims after its window passed ends expired at once, running none;
- an upload with ``expires_after`` (before the file, or after it as OpenAI's example sends it)
  says when it expires and is a 404 from then on; the sweep
  deletes, ``retention_days`` after they ended, batches (OpenAI's and Anthropic's) with their
  output files, and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import textwrap
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.schemas import validate_in
from tests.waiting import until

SPEC = "openai-batches.openapi.json"
MASTER = "master-key-batch-expiry-" + "0123456789" * 3
KEY = "sk-cw-batch-expiry-" + "abcdefghij" * 4
DAY = 24 * 3600
USAGE = {
    "prompt_tokens": 7,
    "completion_tokens": 3,
    "total_tokens": 10,
    "prompt_tokens_details": {"cached_tokens": 2},
    "completion_tokens_details": {"reasoning_tokens": 1},
}


class Clock:
    """The gateway's clock: the time, plus what the test moved it by."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead


class Upstream:
    """An OpenAI-compatible chat upstream counting each prompt it answers; past ``hold_after``
    requests it holds them until ``gate`` is set."""

    def __init__(self) -> None:
        self.url = ""
        self.seen: Counter[str] = Counter()
        self.hold_after = 1_000_000
        self.holding = 0
        self.gate = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        self.seen[prompt] += 1
        if sum(self.seen.values()) > self.hold_after and not self.gate.is_set():
            self.holding += 1
            try:
                await self.gate.wait()
            finally:
                self.holding -= 1
        message = {"role": "assistant", "content": f"done: {prompt}"}
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": USAGE,
            }
        )


@dataclass
class Gateway:
    url: str
    clock: Clock

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=KEY, max_retries=0)

    def anthropic(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=self.url, api_key=KEY, max_retries=0)


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    fake = Upstream()
    runner, url = await start_site(fake.app())
    fake.url = url
    try:
        yield fake
    finally:
        fake.gate.set()
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, upstream: Upstream, clock: Clock) -> AsyncIterator[Gateway]:
    """A gateway on ``tmp_path``'s database (the same each time), reading ``clock``."""
    config = tmp_path / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: false, shutdown_timeout: 0.5}}
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            batches: {{concurrency: 2, poll_interval: 0.1}}
            auth:
              master_key: "{MASTER}"
              keys: [{{key: "{KEY}", alias: expiring}}]
            providers:
              up: {{type: openai, base_url: "{upstream.url}/v1", api_key: "upstream-key"}}
            models:
              chat: [{{target: up/gpt-test}}]
            plugins:
              - auth: {{}}
            """
        )
    )
    app = create_app(config, log_stream=io.StringIO(), clock=clock)
    runner, url = await start_site(app)
    try:
        yield Gateway(url, clock)
    finally:
        await runner.cleanup()


def chat_lines(count: int) -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": f"line-{n}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "chat", "messages": [{"role": "user", "content": f"n{n}"}]},
            }
        ).encode()
        + b"\n"
        for n in range(count)
    )


async def start_batch(client: openai.AsyncOpenAI, lines: int, **more: Any) -> str:
    uploaded = await client.files.create(file=("in.jsonl", chat_lines(lines)), purpose="batch")
    created = await client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        **more,
    )
    return created.id


async def ended(client: openai.AsyncOpenAI, batch_id: str) -> Any:
    """Poll the batch until it ended (validated each time); the batch."""
    async with asyncio.timeout(30):
        while True:
            batch = await client.batches.retrieve(batch_id)
            validate_in(SPEC, "Batch", batch.model_dump(mode="json", exclude_none=True))
            if batch.status in ("completed", "failed", "cancelled", "expired"):
                return batch
            await asyncio.sleep(0.05)


async def message_ended(client: anthropic.AsyncAnthropic, batch_id: str) -> Any:
    """Poll the message batch until it ended; the batch."""
    async with asyncio.timeout(30):
        while True:
            batch = await client.messages.batches.retrieve(batch_id)
            if batch.processing_status == "ended":
                return batch
            await asyncio.sleep(0.05)


async def swept(client: openai.AsyncOpenAI, batch_id: str) -> None:
    """Poll the batch until it is a 404 (the retention sweep deleted it)."""
    async with asyncio.timeout(20):
        while True:
            try:
                await client.batches.retrieve(batch_id)
            except openai.NotFoundError:
                return
            await asyncio.sleep(0.05)


async def lines_of(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    parsed = [
        json.loads(line) for line in (await client.files.content(file_id)).content.splitlines()
    ]
    for line in parsed:
        validate_in(SPEC, "BatchRequestOutput", line)
    return parsed


def assert_expired(lines: list[dict[str, Any]], custom_ids: list[str]) -> None:
    assert [line["custom_id"] for line in lines] == custom_ids
    for line in lines:
        assert line["response"] is None
        assert line["error"]["code"] == "batch_expired"


async def test_a_batch_whose_window_passes_midway_ends_expired_with_its_usage(
    tmp_path: Path, upstream: Upstream
) -> None:
    upstream.hold_after = 4  # lines 0-3 answer, 4 and 5 are held in flight
    async with serving(tmp_path, upstream, Clock()) as gateway, gateway.openai() as client:
        batch_id = await start_batch(client, 12)
        await until(lambda: upstream.holding == 2, seconds=20, what="two lines held")
        gateway.clock.ahead = DAY + 60
        upstream.gate.set()
        batch = await ended(client, batch_id)
        assert batch.status == "expired"
        assert batch.expired_at is not None
        assert batch.expired_at >= batch.expires_at
        assert (batch.completed_at, batch.cancelled_at) == (None, None)
        counts = batch.request_counts
        assert (counts.total, counts.completed, counts.failed) == (12, 6, 6)
        assert sum(upstream.seen.values()) == 6  # no line started once the window passed
        output = await lines_of(client, batch.output_file_id)
        assert [line["custom_id"] for line in output] == [f"line-{n}" for n in range(6)]
        assert_expired(
            await lines_of(client, batch.error_file_id), [f"line-{n}" for n in range(6, 12)]
        )
        usage = batch.usage
        assert usage is not None
        assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (42, 18, 60)
        assert usage.input_tokens_details.cached_tokens == 12
        assert usage.output_tokens_details.reasoning_tokens == 6


async def test_a_completed_batch_sums_its_usage(tmp_path: Path, upstream: Upstream) -> None:
    async with serving(tmp_path, upstream, Clock()) as gateway, gateway.openai() as client:
        batch = await ended(client, await start_batch(client, 3))
        assert batch.status == "completed"
        assert batch.usage is not None
        assert batch.usage.model_dump() == {
            "input_tokens": 21,
            "input_tokens_details": {"cached_tokens": 6},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 3},
            "total_tokens": 30,
        }


async def test_a_message_batch_whose_window_passes_midway_ends_with_requests_expired(
    tmp_path: Path, upstream: Upstream
) -> None:
    upstream.hold_after = 3
    requests = [
        {
            "custom_id": f"req-{n}",
            "params": {
                "model": "chat",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": f"m{n}"}],
            },
        }
        for n in range(9)
    ]
    async with serving(tmp_path, upstream, Clock()) as gateway, gateway.anthropic() as client:
        created = await client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
        await until(lambda: upstream.holding == 2, seconds=20, what="two requests held")
        gateway.clock.ahead = DAY + 60
        upstream.gate.set()
        batch = await message_ended(client, created.id)
        counts = batch.request_counts
        assert (counts.succeeded, counts.expired, counts.errored, counts.processing) == (5, 4, 0, 0)
        assert batch.ended_at is not None
        results = [r async for r in await client.messages.batches.results(created.id)]
        assert [r.custom_id for r in results] == [f"req-{n}" for n in range(9)]
        assert [r.result.type for r in results] == ["succeeded"] * 5 + ["expired"] * 4
    assert sum(upstream.seen.values()) == 5


async def test_a_batch_claimed_after_its_window_passed_ends_expired_at_once(
    tmp_path: Path, upstream: Upstream
) -> None:
    upstream.hold_after = 3
    clock = Clock()
    async with serving(tmp_path, upstream, clock) as gateway, gateway.openai() as client:
        batch_id = await start_batch(client, 10)
        await until(lambda: upstream.holding == 2, seconds=20, what="two lines held")
    # the gateway stopped: the two held lines were cancelled (they have no result)
    asked = sum(upstream.seen.values())
    clock.ahead = DAY + 3600  # back a day later
    async with serving(tmp_path, upstream, clock) as gateway, gateway.openai() as client:
        batch = await ended(client, batch_id)
        assert batch.status == "expired"
        counts = batch.request_counts
        assert (counts.total, counts.completed, counts.failed) == (10, 3, 7)
        output = await lines_of(client, batch.output_file_id)
        assert [line["custom_id"] for line in output] == ["line-0", "line-1", "line-2"]
        assert_expired(
            await lines_of(client, batch.error_file_id), [f"line-{n}" for n in range(3, 10)]
        )
    assert sum(upstream.seen.values()) == asked  # the restarted gateway ran none


async def test_expired_files_and_old_batches_are_deleted_and_nothing_else(
    tmp_path: Path, upstream: Upstream
) -> None:
    clock = Clock()
    async with serving(tmp_path, upstream, clock) as gateway, gateway.openai() as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.files.create(
                file=("in.jsonl", chat_lines(1)),
                purpose="batch",
                expires_after={"anchor": "created_at", "seconds": 60},
            )
        assert refused.value.body["param"] == "expires_after"
        brief = await client.files.create(
            file=("in.jsonl", chat_lines(1)),
            purpose="batch",
            expires_after={"anchor": "created_at", "seconds": 3600},
        )
        validate_in(SPEC, "OpenAIFile", brief.model_dump(mode="json", exclude_none=True))
        assert brief.expires_at == brief.created_at + 3600
        assert (await client.files.retrieve(brief.id)).expires_at == brief.expires_at
        old = await ended(client, await start_batch(client, 2))
        assert old.output_file_id is not None
        output = await client.files.retrieve(old.output_file_id)
        assert output.expires_at is not None
        assert output.expires_at - output.created_at == 30 * DAY  # batches.retention_days
        with pytest.raises(openai.BadRequestError) as refused:
            await start_batch(
                client, 1, output_expires_after={"anchor": "created_at", "seconds": 5}
            )
        assert refused.value.body["param"] == "output_expires_after"
        asked = {"anchor": "created_at", "seconds": 7200}
        kept_briefly = await ended(client, await start_batch(client, 1, output_expires_after=asked))
        assert kept_briefly.output_file_id is not None
        brief_output = await client.files.retrieve(kept_briefly.output_file_id)
        assert brief_output.expires_at == brief_output.created_at + 7200
        async with gateway.anthropic() as anthropic_client:
            message_batch = await anthropic_client.messages.batches.create(
                requests=[  # type: ignore[list-item]
                    {
                        "custom_id": "a",
                        "params": {
                            "model": "chat",
                            "max_tokens": 8,
                            "messages": [{"role": "user", "content": "hi"}],
                        },
                    }
                ]
            )
            await message_ended(anthropic_client, message_batch.id)

            clock.ahead = 3601  # the brief upload expired
            for gone in (client.files.retrieve(brief.id), client.files.content(brief.id)):
                with pytest.raises(openai.NotFoundError):
                    await gone
            listed = [f.id for f in (await client.files.list()).data]
            assert brief.id not in listed
            assert old.input_file_id in listed  # no expires_after: kept until deleted
            assert kept_briefly.output_file_id in listed  # two hours, not yet

            clock.ahead = 7201
            with pytest.raises(openai.NotFoundError):
                await client.files.content(kept_briefly.output_file_id)
            recent = await ended(client, await start_batch(client, 1))  # ended two hours later
            assert recent.status == "completed"
            clock.ahead = 30 * DAY + 1800  # the first batches are past retention, not this one
            await swept(client, old.id)
            with pytest.raises(openai.NotFoundError):
                await client.files.retrieve(old.output_file_id)
            with pytest.raises(anthropic.NotFoundError):
                await anthropic_client.messages.batches.retrieve(message_batch.id)
            assert (await client.batches.retrieve(recent.id)).status == "completed"
            assert recent.output_file_id is not None
            assert len(await lines_of(client, recent.output_file_id)) == 1
            assert (await client.files.content(old.input_file_id)).content == chat_lines(2)


async def upload_with_fields_after_the_file(url: str, fields: dict[str, str]) -> tuple[int, Any]:
    """``POST /v1/files`` as OpenAI's curl example orders it: purpose, file, then ``fields``."""
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", chat_lines(1), filename="late.jsonl", content_type="application/jsonl")
    for name, value in fields.items():
        form.add_field(name, value)
    headers = {"authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/files", data=form, headers=headers) as answer,
    ):
        return answer.status, await answer.json()


async def test_expires_after_sent_after_the_file_applies_or_keeps_nothing(
    tmp_path: Path, upstream: Upstream
) -> None:
    async with serving(tmp_path, upstream, Clock()) as gateway, gateway.openai() as client:
        late = {"expires_after[anchor]": "created_at", "expires_after[seconds]": "7200"}
        status, body = await upload_with_fields_after_the_file(gateway.url, late)
        assert status == 200, body
        validate_in(SPEC, "OpenAIFile", {k: v for k, v in body.items() if v is not None})
        assert body["expires_at"] == body["created_at"] + 7200
        assert (await client.files.retrieve(body["id"])).expires_at == body["expires_at"]
        bad = {"expires_after[anchor]": "created_at", "expires_after[seconds]": "10"}
        status, body = await upload_with_fields_after_the_file(gateway.url, bad)
        assert (status, body["error"]["param"]) == (400, "expires_after")
        assert [f.filename for f in (await client.files.list()).data] == ["late.jsonl"]
        gateway.clock.ahead = 7200
        assert (await client.files.list()).data == []
