"""``/v1/responses`` over HTTP in front of the fake OpenAI upstream: what a continued
conversation sends upstream, ``GET`` / ``DELETE /v1/responses/{id}``, ``store: false``, and
stored responses scoped to the key that created them (a stand-in auth plugin,
:mod:`tests.e2e.key_plugin`, says who is calling)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.fake_openai import ANSWER, FakeOpenAI
from tests.proxy.dialects.adapters.gateway import Answer, post, serve
from tests.proxy.dialects.adapters.responses import ADAPTER, stream_payloads
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"


def config(upstream_url: str, database: Path) -> str:
    return f"""\
server: {{access_log: false}}
database: {{url: "sqlite:///{database}"}}
responses: {{store: memory, ttl: 3600, max_entries: 100, max_bytes: 1048576}}
providers:
  up:
    type: openai
    base_url: "{upstream_url}/v1"
    api_key: "{UPSTREAM_KEY}"
    timeouts: {{first_byte: 2, idle: 1, total: 8}}
  mock: {{type: mock}}
plugins:
  - plugin: tests.e2e.key_plugin:HeaderKey
"""


class Gateway:
    def __init__(self, url: str, upstream: FakeOpenAI) -> None:
        self.url = url
        self.upstream = upstream

    async def create(self, key: str | None = None, **body: Any) -> Answer:
        body.setdefault("model", "up/gpt-test")
        return await request(self.url, "POST", "/v1/responses", body, key)

    async def stored(self, method: str, response_id: str, key: str | None = None) -> Answer:
        return await request(self.url, method, f"/v1/responses/{response_id}", None, key)


async def request(
    url: str, method: str, path: str, body: dict[str, Any] | None, key: str | None
) -> Answer:
    headers = {"x-test-key": key} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url + path, json=body, headers=headers) as response,
    ):
        return Answer(response.status, response.headers.copy(), await response.read())


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Gateway]:
    fake, upstream_url = upstream
    async with serve(tmp_path, config(upstream_url, tmp_path / "crossway.db")) as url:
        yield Gateway(url, fake)


async def test_a_chained_request_sends_the_whole_conversation_upstream(gateway: Gateway) -> None:
    first = await gateway.create(input="Weather in Paris?", instructions="Be brief.")
    assert first.status == 200, first.body
    assert ADAPTER.read_response(first.json()).text == ANSWER
    second = await gateway.create(
        input=[{"role": "user", "content": [{"type": "input_text", "text": "And Rome?"}]}],
        previous_response_id=first.json()["id"],
        stream=True,
    )
    assert second.status == 200, second.body
    assert ADAPTER.read_stream(second.body).text == ANSWER
    assert gateway.upstream.requests[-1]["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": [{"type": "text", "text": "And Rome?"}]},
    ]
    completed = stream_payloads(second.body)[-1]["response"]
    assert completed["previous_response_id"] == first.json()["id"]

    third = await gateway.create(input="Thanks", previous_response_id=completed["id"])
    assert third.status == 200, third.body
    assert [m.get("content") for m in gateway.upstream.requests[-1]["messages"]][3:] == [
        ANSWER,
        "Thanks",
    ]


async def test_a_function_call_round_trip_through_a_stored_response(gateway: Gateway) -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    first = await gateway.create(input="Weather?", tools=tools)
    (call,) = [item for item in first.json()["output"] if item["type"] == "function_call"]
    assert (call["name"], json.loads(call["arguments"])) == (
        "get_weather",
        {"city": "Paris", "days": 3},
    )
    second = await gateway.create(
        input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "18C"}],
        previous_response_id=first.json()["id"],
    )
    assert second.status == 200, second.body
    sent = gateway.upstream.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == call["call_id"]
    assert sent[2] == {"role": "tool", "content": "18C", "tool_call_id": call["call_id"]}


async def test_get_and_delete_a_stored_response(gateway: Gateway) -> None:
    created = await gateway.create(input="Hi", metadata={"ticket": "T-1"})
    response_id = created.json()["id"]
    fetched = await gateway.stored("GET", response_id)
    assert fetched.status == 200
    assert fetched.headers["content-type"].startswith("application/json")
    assert fetched.json() == created.json()
    validate_in(SPEC, "Response", fetched.json())
    short = await request(gateway.url, "GET", f"/responses/{response_id}", None, None)
    assert short.json() == created.json()

    deleted = await gateway.stored("DELETE", response_id)
    assert deleted.status == 200
    validate_in(SPEC, "DeleteResponse", deleted.json())
    assert deleted.json() == {"id": response_id, "object": "response", "deleted": True}
    for method in ("GET", "DELETE"):
        gone = await gateway.stored(method, response_id)
        assert gone.status == 404
        assert (
            ADAPTER.read_error(404, gone.json()) == f"Response with id {response_id!r} not found."
        )


async def test_store_false_keeps_nothing(gateway: Gateway) -> None:
    created = await gateway.create(input="Hi", store=False)
    assert created.json()["store"] is False
    assert (await gateway.stored("GET", created.json()["id"])).status == 404
    chained = await gateway.create(input="Again", previous_response_id=created.json()["id"])
    assert chained.status == 400
    assert chained.json()["error"]["code"] == "previous_response_not_found"


async def test_a_streamed_response_is_stored_when_complete(gateway: Gateway) -> None:
    streamed = await gateway.create(input="Hi", stream=True)
    completed = stream_payloads(streamed.body)[-1]["response"]
    fetched = await gateway.stored("GET", completed["id"])
    assert fetched.json() == completed


async def test_stored_responses_belong_to_the_key_that_created_them(gateway: Gateway) -> None:
    created = await gateway.create(key="key-a", input="Secret plans")
    response_id = created.json()["id"]
    assert (await gateway.stored("GET", response_id, key="key-a")).status == 200
    for other in ("key-b", None):
        assert (await gateway.stored("GET", response_id, key=other)).status == 404
        assert (await gateway.stored("DELETE", response_id, key=other)).status == 404
        chained = await gateway.create(key=other, input="?", previous_response_id=response_id)
        assert chained.status == 400
        assert chained.json()["error"]["code"] == "previous_response_not_found"
    assert len(gateway.upstream.requests) == 1, "nothing of key-a's reached the upstream again"
    assert (await gateway.stored("DELETE", response_id, key="key-a")).status == 200


async def test_the_route_without_v1_and_errors_in_openais_shape(gateway: Gateway) -> None:
    answer = await post(gateway.url, "/responses", {"model": "mock/echo", "input": "Hi"})
    assert answer.status == 200
    assert ADAPTER.read_response(answer.json()).text == "Hi"
    missing = await gateway.create(model="nowhere/x", input="Hi")
    assert missing.status == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert ADAPTER.read_error(404, missing.json())
    limited = await gateway.create(model="up/fail-429", input="Hi")
    assert limited.status == 429
    assert limited.headers["retry-after"] == "2"
    assert UPSTREAM_KEY not in limited.body.decode()
    tool = await gateway.create(input="Hi", tools=[{"type": "web_search_preview"}])
    assert tool.status == 400
    assert tool.json()["error"]["param"] == "tools[0].type"
    assert "web_search_preview" in tool.json()["error"]["message"]


def database_config(upstream_url: str, database: Path, store: str | None) -> str:
    setting = f"responses: {{store: {store}}}\n" if store else ""
    return f"""\
server: {{access_log: false}}
database: {{url: "sqlite:///{database}"}}
{setting}providers:
  up:
    type: openai
    base_url: "{upstream_url}/v1"
    api_key: "{UPSTREAM_KEY}"
plugins:
  - plugin: tests.e2e.key_plugin:HeaderKey
"""


async def test_in_the_database_two_workers_share_stored_responses(
    tmp_path: Path, upstream: tuple[FakeOpenAI, str]
) -> None:
    fake, upstream_url = upstream
    database = tmp_path / "data" / "crossway.db"
    config = database_config(upstream_url, database, "database")
    for worker in ("a", "b"):
        (tmp_path / worker).mkdir()
    async with (
        serve(tmp_path / "a", config) as first_url,
        serve(tmp_path / "b", config) as second_url,
    ):
        first, second = Gateway(first_url, fake), Gateway(second_url, fake)
        created = await first.create(key="key-a", input="Weather in Paris?")
        response_id = created.json()["id"]
        assert (await second.stored("GET", response_id, key="key-a")).json() == created.json()
        assert (await second.stored("GET", response_id, key="key-b")).status == 404
        chained = await second.create(
            key="key-a", input="And Rome?", previous_response_id=response_id
        )
        assert chained.status == 200, chained.body
        assert [m["content"] for m in fake.requests[-1]["messages"]] == [
            "Weather in Paris?",
            ANSWER,
            "And Rome?",
        ]
        assert (await first.stored("DELETE", response_id, key="key-a")).status == 200
        assert (await second.stored("GET", response_id, key="key-a")).status == 404
    stored = database.read_bytes() + b"".join(
        path.read_bytes() for path in database.parent.glob("crossway.db-*")
    )
    assert UPSTREAM_KEY.encode() not in stored


async def test_auto_stores_in_the_database_when_the_gateway_demands_keys(
    tmp_path: Path, upstream: tuple[FakeOpenAI, str]
) -> None:
    fake, upstream_url = upstream
    database = tmp_path / "crossway.db"
    async with serve(tmp_path, database_config(upstream_url, database, None)) as url:
        created = await Gateway(url, fake).create(key="key-a", input="Hi")
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT id, owner FROM responses").fetchall()
    assert rows == [(created.json()["id"], "key-a")]


def bounded_config(upstream_url: str, database: Path, store: str) -> str:
    return f"""\
server: {{access_log: false}}
database: {{url: "sqlite:///{database}"}}
responses: {{store: {store}, ttl: 3600, max_entries: 4, max_entries_per_owner: 3}}
providers:
  up:
    type: openai
    base_url: "{upstream_url}/v1"
    api_key: "{UPSTREAM_KEY}"
plugins:
  - plugin: tests.e2e.key_plugin:HeaderKey
"""


@pytest.mark.parametrize("store", ["memory", "database"])
async def test_one_key_filling_the_store_does_not_evict_another_keys_conversation(
    store: str, tmp_path: Path, upstream: tuple[FakeOpenAI, str]
) -> None:
    # Issue 36, item 11: the store's bounds were global only, so one key's writes pushed
    # another's conversations out. key-b writes six responses (its bound is 3), key-c one more
    # into the full store (4): key-b's oldest go, never key-a's.
    fake, upstream_url = upstream
    config = bounded_config(upstream_url, tmp_path / "crossway.db", store)
    async with serve(tmp_path, config) as url:
        gateway = Gateway(url, fake)
        first = await gateway.create(key="key-a", input="Weather in Paris?")
        assert first.status == 200, first.body
        flood = [await gateway.create(key="key-b", input=f"Noise {i}") for i in range(6)]
        assert [answer.status for answer in flood] == [200] * 6
        assert (await gateway.create(key="key-c", input="Hello")).status == 200
        chained = await gateway.create(
            key="key-a", input="And Rome?", previous_response_id=first.json()["id"]
        )
        assert chained.status == 200, chained.body
        assert [m["content"] for m in fake.requests[-1]["messages"]] == [
            "Weather in Paris?",
            ANSWER,
            "And Rome?",
        ]
        kept = [
            (await gateway.stored("GET", answer.json()["id"], key="key-b")).status
            for answer in flood
        ]
        assert kept == [404] * 4 + [200] * 2  # its bound of 3, less one for key-c
