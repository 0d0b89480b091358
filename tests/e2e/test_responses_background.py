"""``background: true`` through a real gateway with the official openai SDK: created ``queued``
and polled to ``completed``; its events streamed again from ``starting_after``; created streaming
and read live; cancelled (idempotently; a synchronous one refused; another key's not found); run
on after its streaming client went away. Every body and event validated against OpenAI's schema,
every response scoped to the key that made it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.proxy.dialects.adapters.gateway import serve
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"
CONFIG = """\
server: {access_log: false}
database: {url: "sqlite:///DATABASE"}
providers:
  mock: {type: mock, faults: true}
  slow: {type: mock, tokens_per_second: 20}
plugins:
  - plugin: tests.e2e.key_plugin:HeaderKey
"""
WORDS = "one two three four five six"


@pytest.fixture
async def url(tmp_path: Path) -> AsyncIterator[str]:
    """A gateway whose callers are told apart by ``x-test-key``, responses in its database."""
    async with serve(tmp_path, CONFIG.replace("DATABASE", str(tmp_path / "crossway.db"))) as url:
        yield url


def sdk(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="client", max_retries=0, default_headers={"x-test-key": key}
    )


def valid(response: Any) -> dict[str, Any]:
    body = response.model_dump(mode="json", exclude_unset=True)
    validate_in(SPEC, "Response", body)
    return body


async def settled(client: openai.AsyncOpenAI, response_id: str) -> Any:
    """Poll until the response is neither queued nor in progress (at most 30 s)."""
    for _ in range(300):
        response = await client.responses.retrieve(response_id)
        valid(response)
        if response.status not in ("queued", "in_progress"):
            return response
        await asyncio.sleep(0.1)
    raise AssertionError(f"{response_id} still {response.status}")


async def events(stream: Any) -> list[dict[str, Any]]:
    seen = []
    async for event in stream:
        body = event.model_dump(mode="json", exclude_unset=True)
        validate_in(SPEC, "ResponseStreamEvent", body)
        seen.append(body)
    return seen


async def test_a_background_response_is_queued_then_polled_to_completed(url: str) -> None:
    async with sdk(url, "alice") as alice, sdk(url, "bob") as bob:
        created = await alice.responses.create(model="mock/echo", input=WORDS, background=True)
        assert (created.status, created.background, created.model) == ("queued", True, "mock/echo")
        assert valid(created)["completed_at"] is None
        done = await settled(alice, created.id)
        assert (done.status, done.output_text, done.background) == ("completed", WORDS, True)
        assert done.completed_at is not None
        assert done.usage is not None
        with pytest.raises(openai.NotFoundError):  # another key's response does not exist
            await bob.responses.retrieve(created.id)


async def test_its_events_stream_again_from_starting_after_in_order(url: str) -> None:
    async with sdk(url, "alice") as alice:
        created = await alice.responses.create(model="mock/echo", input=WORDS, background=True)
        await settled(alice, created.id)
        every = await events(await alice.responses.retrieve(created.id, stream=True))
        assert [e["sequence_number"] for e in every] == list(range(len(every)))
        assert every[0]["type"] == "response.created"
        assert every[-1]["type"] == "response.completed"
        assert every[-1]["response"]["output_text"] == WORDS
        rest = await events(
            await alice.responses.retrieve(created.id, stream=True, starting_after=3)
        )
        assert rest == every[4:]


async def test_a_streamed_background_create_reads_live_and_resumes(url: str) -> None:
    async with sdk(url, "alice") as alice:
        stream = await alice.responses.create(
            model="slow/echo", input=WORDS, background=True, stream=True
        )
        live = await events(stream)
        assert live[-1]["type"] == "response.completed"
        assert live[0]["response"]["background"] is True
        response_id = live[0]["response"]["id"]
        again = await events(
            await alice.responses.retrieve(response_id, stream=True, starting_after=1)
        )
        assert again == live[2:]


async def test_cancel_stops_a_running_one_and_is_idempotent(url: str) -> None:
    async with sdk(url, "alice") as alice, sdk(url, "bob") as bob:
        created = await alice.responses.create(model="mock/stall-0", input=WORDS, background=True)
        with pytest.raises(openai.NotFoundError):
            await bob.responses.cancel(created.id)
        cancelled = await alice.responses.cancel(created.id)
        assert (valid(cancelled)["status"], cancelled.id) == ("cancelled", created.id)
        assert (await alice.responses.cancel(created.id)).status == "cancelled"
        assert (await alice.responses.retrieve(created.id)).status == "cancelled"
        foreground = await alice.responses.create(model="mock/echo", input="hi")
        with pytest.raises(openai.BadRequestError, match="synchronous"):
            await alice.responses.cancel(foreground.id)
        done = await alice.responses.create(model="mock/echo", input="hi", background=True)
        await settled(alice, done.id)
        with pytest.raises(openai.BadRequestError, match="completed"):
            await alice.responses.cancel(done.id)


async def test_it_runs_on_after_its_streaming_client_goes_away(url: str) -> None:
    async with sdk(url, "alice") as alice:
        stream = await alice.responses.create(
            model="slow/echo", input=WORDS, background=True, stream=True
        )
        async for event in stream:
            response_id = event.response.id  # type: ignore[union-attr]
            break
        await stream.close()  # the client goes away mid-stream
        done = await settled(alice, response_id)
        assert (done.status, done.output_text) == ("completed", WORDS)


async def test_streaming_a_foreground_response_or_too_early_is_a_400(url: str) -> None:
    async with sdk(url, "alice") as alice:
        foreground = await alice.responses.create(model="mock/echo", input="hi")
        with pytest.raises(openai.BadRequestError) as refused:
            await alice.responses.retrieve(foreground.id, stream=True)
        assert refused.value.body["param"] == "stream"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as bad:
            await alice.responses.create(
                model="mock/echo", input="hi", background=True, store=False
            )
        assert bad.value.body["param"] == "store"  # type: ignore[index]
