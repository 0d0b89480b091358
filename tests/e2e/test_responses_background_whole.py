"""A background call answered whole (a plugin that holds a whole answer, here one that asks the
upstream for a whole reply) and one answered by a cache hit: its events are the full Responses
stream, in order, each valid against OpenAI's schema, a function call's arguments carried once;
the stored object is the completed response the last event carries. Real gateways, the openai
SDK as the client, the mock as the upstream."""

from __future__ import annotations

import asyncio
import json
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
  mock: {type: mock}
plugins:
  - plugin: tests.e2e.key_plugin:HeaderKey
PLUGINS
"""
WORDS = "one two three four five six"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


async def gateway(tmp_path: Path, plugins: str) -> AsyncIterator[str]:
    text = CONFIG.replace("DATABASE", str(tmp_path / "crossway.db")).replace("PLUGINS", plugins)
    async with serve(tmp_path, text) as url:
        yield url


@pytest.fixture
async def whole(tmp_path: Path) -> AsyncIterator[str]:
    """A gateway whose chain answers whole."""
    async for url in gateway(tmp_path, "  - plugin: tests.e2e.whole_plugin:AnswerWhole"):
        yield url


@pytest.fixture
async def cached(tmp_path: Path) -> AsyncIterator[str]:
    """A gateway with the cache on."""
    async for url in gateway(tmp_path, "  - cache: {}"):
        yield url


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="client", max_retries=0, default_headers={"x-test-key": "a"}
    )


async def settled(client: openai.AsyncOpenAI, response_id: str) -> dict[str, Any]:
    for _ in range(300):
        response = await client.responses.retrieve(response_id)
        body = response.model_dump(mode="json", exclude_unset=True)
        validate_in(SPEC, "Response", body)
        if response.status not in ("queued", "in_progress"):
            return body
        await asyncio.sleep(0.1)
    raise AssertionError(f"{response_id} still {response.status}")


async def replayed(client: openai.AsyncOpenAI, response_id: str) -> list[dict[str, Any]]:
    seen = []
    async for event in await client.responses.retrieve(response_id, stream=True):
        body = event.model_dump(mode="json", exclude_unset=True)
        validate_in(SPEC, "ResponseStreamEvent", body)
        seen.append(body)
    return seen


def check_text_events(events: list[dict[str, Any]], text: str) -> None:
    """The whole stream of one text answer, numbered from 0 without gaps."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    for kind in ("output_item.added", "content_part.added", "output_text.done", "output_item.done"):
        assert types.count(f"response.{kind}") == 1, types
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == text
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == text


async def test_a_whole_answer_to_a_background_call_streams_and_stores_right(whole: str) -> None:
    async with sdk(whole) as client:
        created = await client.responses.create(model="mock/echo", input=WORDS, background=True)
        stored = await settled(client, created.id)
        events = await replayed(client, created.id)
        live = [
            event.model_dump(mode="json", exclude_unset=True)
            async for event in await client.responses.create(
                model="mock/echo", input=WORDS, background=True, stream=True
            )
        ]
    assert stored["status"] == "completed"
    assert stored["background"] is True
    assert stored["usage"]["output_tokens"] == len(WORDS.split())
    check_text_events(events, WORDS)
    final = events[-1]["response"]
    assert (final["id"], final["output"], final["usage"]) == (
        stored["id"],
        stored["output"],
        stored["usage"],
    )
    check_text_events(live, WORDS)


async def test_a_whole_tool_call_carries_its_arguments_once(whole: str) -> None:
    async with sdk(whole) as client:
        created = await client.responses.create(
            model="mock/tools",
            input="Paris",
            tools=[WEATHER],  # type: ignore[list-item]
            background=True,
        )
        stored = await settled(client, created.id)
        events = await replayed(client, created.id)
    (call,) = stored["output"]
    assert call["type"] == "function_call"
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["arguments"] == ""
    deltas = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert json.loads(deltas) == json.loads(call["arguments"])
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == call["arguments"]


async def test_a_cache_hit_answers_a_background_call_right(cached: str) -> None:
    async with sdk(cached) as client:
        first = await client.responses.create(model="mock/echo", input=WORDS)
        created = await client.responses.create(model="mock/echo", input=WORDS, background=True)
        stored = await settled(client, created.id)
        events = await replayed(client, created.id)
    assert first.output_text == WORDS
    assert (stored["status"], stored["id"]) == ("completed", created.id)
    check_text_events(events, WORDS)
    assert events[-1]["response"]["output"] == stored["output"]
