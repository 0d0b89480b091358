"""Stored chat completions through the official ``openai`` SDK against a real gateway (mock
upstream, the ``auth`` plugin with two keys), with the memory store and with the database one:
``chat.completions.create(store=True)`` whole and streamed, ``list`` (``model``, ``metadata``,
``after``, ``limit``, ``order``), ``retrieve``, ``update``, ``delete`` and ``messages.list``; every
body validated against OpenAI's schema; another key sees none of it."""

from __future__ import annotations

import contextlib
import io
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.schemas import validate_in

SPEC = "openai-stored-chat.openapi.json"
ALICE = "sk-cw-stored-alice-" + "abcdefghij" * 4
BOB = "sk-cw-stored-bob-00-" + "abcdefghij" * 4
MODEL = "mock/echo"


@dataclass
class Gateway:
    url: str

    def client(self, key: str = ALICE) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def get(self, path: str, key: str = ALICE) -> tuple[int, Any]:
        """GET ``path`` with ``key``: the status and the JSON body."""
        return await self.send("GET", path, key)

    async def send(
        self, method: str, path: str, key: str = ALICE, body: bytes | None = None
    ) -> tuple[int, Any]:
        """``method`` ``path`` with ``key`` (and ``body``): the status and the JSON body."""
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.url + path, headers=headers, data=body) as answer,
        ):
            return answer.status, await answer.json()


def write_config(tmp_path: Path, store: str) -> Path:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: false}}
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            responses: {{store: {store}}}
            auth:
              teams: {{team-a: {{}}}}
              keys:
                - {{key: "{ALICE}", alias: alice, team: team-a}}
                - {{key: "{BOB}", alias: bob, team: team-a}}
            providers:
              mock: {{type: mock}}
            plugins:
              - auth: {{}}
            """
        )
    )
    return config


@contextlib.asynccontextmanager
async def serving(config: Path) -> AsyncIterator[Gateway]:
    runner, url = await start_site(create_app(config, log_stream=io.StringIO()))
    try:
        yield Gateway(url)
    finally:
        await runner.cleanup()


@pytest.fixture(params=["memory", "database"])
async def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with serving(write_config(tmp_path, request.param)) as running:
        yield running


async def _create(client: openai.AsyncOpenAI, text: str, **kwargs: Any) -> str:
    completion = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], store=True, **kwargs
    )
    assert completion.choices[0].message.content == text
    return completion.id


async def test_a_stored_completion_is_retrieved_as_it_was_answered(gateway: Gateway) -> None:
    async with gateway.client() as client:
        created = await client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Paris"}]},
            ],
            store=True,
            metadata={"ticket": "T-1"},
        )
        found = await client.chat.completions.retrieve(created.id)
        assert found.id == created.id
        assert found.choices[0].message.content == created.choices[0].message.content
        assert found.metadata == {"ticket": "T-1"}
        messages = await client.chat.completions.messages.list(created.id)
        assert [(m.role, m.content) for m in messages.data] == [
            ("system", "Be brief."),
            ("user", "Paris"),
        ]
        assert [m.id for m in messages.data] == [f"{created.id}-0", f"{created.id}-1"]
    status, body = await gateway.get(f"/v1/chat/completions/{created.id}")
    assert status == 200
    validate_in(SPEC, "CreateChatCompletionResponse", body)
    status, body = await gateway.get(f"/v1/chat/completions/{created.id}/messages")
    assert status == 200
    validate_in(SPEC, "ChatCompletionStoredMessageList", body)
    assert body["data"][1]["content_parts"] == [{"type": "text", "text": "Paris"}]


async def test_only_store_true_is_stored(gateway: Gateway) -> None:
    async with gateway.client() as client:
        await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "not kept"}]
        )
        page = await client.chat.completions.list()
    assert page.data == []
    status, body = await gateway.get("/v1/chat/completions")
    assert status == 200
    validate_in(SPEC, "ChatCompletionList", body)


async def test_list_filters_and_pages(gateway: Gateway) -> None:
    async with gateway.client() as client:
        first = await _create(client, "one", metadata={"topic": "a"})
        second = await _create(client, "two", metadata={"topic": "b"})
        third = await _create(client, "three", metadata={"topic": "a", "lang": "en"})
        everything = [c.id async for c in client.chat.completions.list(limit=1)]  # pages by after
        assert everything == [first, second, third]
        newest = await client.chat.completions.list(order="desc", limit=2)
        assert [c.id for c in newest.data] == [third, second]
        assert newest.has_more
        after = await client.chat.completions.list(after=first)
        assert [c.id for c in after.data] == [second, third]
        topic_a = await client.chat.completions.list(metadata={"topic": "a"})
        assert [c.id for c in topic_a.data] == [first, third]
        both = await client.chat.completions.list(metadata={"topic": "a", "lang": "en"})
        assert [c.id for c in both.data] == [third]
        assert len((await client.chat.completions.list(model=MODEL)).data) == 3
        assert (await client.chat.completions.list(model="mock/other")).data == []
    status, body = await gateway.get("/v1/chat/completions?limit=2&order=desc")
    assert status == 200
    validate_in(SPEC, "ChatCompletionList", body)
    assert (body["first_id"], body["last_id"], body["has_more"]) == (third, second, True)


async def test_update_replaces_the_metadata_only(gateway: Gateway) -> None:
    async with gateway.client() as client:
        completion_id = await _create(client, "hello", metadata={"state": "new"})
        updated = await client.chat.completions.update(completion_id, metadata={"state": "done"})
        assert updated.id == completion_id
        assert updated.metadata == {"state": "done"}
        done = await client.chat.completions.list(metadata={"state": "done"})
        assert [c.id for c in done.data] == [completion_id]
        assert (await client.chat.completions.list(metadata={"state": "new"})).data == []
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.update(completion_id, metadata={"k": "v" * 513})
    path = f"/v1/chat/completions/{completion_id}"
    status, body = await gateway.send("POST", path, body=b'{"metadata": null}')
    assert (status, body["metadata"]) == (200, {})
    validate_in(SPEC, "CreateChatCompletionResponse", body)
    assert refused.value.body["param"].startswith("metadata")  # type: ignore[index]


async def test_delete(gateway: Gateway) -> None:
    async with gateway.client() as client:
        completion_id = await _create(client, "bye")
        deleted = await client.chat.completions.delete(completion_id)
        assert (deleted.id, deleted.deleted, deleted.object) == (
            completion_id,
            True,
            "chat.completion.deleted",
        )
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.retrieve(completion_id)
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.delete(completion_id)
        other = await _create(client, "again")
    status, body = await gateway.send("DELETE", f"/v1/chat/completions/{other}")
    assert status == 200
    validate_in(SPEC, "ChatCompletionDeleted", body)
    status, body = await gateway.send("DELETE", f"/v1/chat/completions/{other}")
    assert status == 404
    validate_in(SPEC, "ErrorResponse", body)


async def test_a_streamed_completion_is_stored_when_the_stream_ends(gateway: Gateway) -> None:
    async with gateway.client() as client:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "streamed words here"}],
            store=True,
            stream=True,
            metadata={"via": "stream"},
        )
        ids, text = set(), []
        async for chunk in stream:
            ids.add(chunk.id)
            text += [c.delta.content or "" for c in chunk.choices]
        (completion_id,) = ids
        found = await client.chat.completions.retrieve(completion_id)
        assert found.choices[0].message.content == "".join(text) == "streamed words here"
        assert found.usage is not None
        assert found.usage.completion_tokens > 0
        listed = await client.chat.completions.list(metadata={"via": "stream"})
        assert [c.id for c in listed.data] == [completion_id]
    _status, body = await gateway.get(f"/v1/chat/completions/{completion_id}")
    validate_in(SPEC, "CreateChatCompletionResponse", body)


async def test_another_key_sees_nothing(gateway: Gateway) -> None:
    async with gateway.client() as alice:
        completion_id = await _create(alice, "private")
    async with gateway.client(BOB) as bob:
        assert (await bob.chat.completions.list()).data == []
        with pytest.raises(openai.NotFoundError):
            await bob.chat.completions.retrieve(completion_id)
        with pytest.raises(openai.NotFoundError):
            await bob.chat.completions.messages.list(completion_id)
        with pytest.raises(openai.NotFoundError):
            await bob.chat.completions.update(completion_id, metadata={"taken": "yes"})
        with pytest.raises(openai.NotFoundError):
            await bob.chat.completions.delete(completion_id)
    async with gateway.client() as alice:
        still = await alice.chat.completions.retrieve(completion_id)
        assert still.metadata == {}
    status, body = await gateway.get("/v1/chat/completions", key="sk-cw-wrong-" + "x" * 40)
    assert status == 401
    validate_in(SPEC, "ErrorResponse", body)


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=many", "limit"), ("order=sideways", "order")],
)
async def test_bad_list_parameters_name_the_field(gateway: Gateway, query: str, param: str) -> None:
    status, body = await gateway.get(f"/v1/chat/completions?{query}")
    assert status == 400
    validate_in(SPEC, "ErrorResponse", body)
    assert body["error"]["param"] == param


async def test_an_update_names_the_bad_field_and_needs_a_key(gateway: Gateway) -> None:
    async with gateway.client() as client:
        completion_id = await _create(client, "hello")
    path = f"/v1/chat/completions/{completion_id}"
    status, body = await gateway.send("POST", path, body=b'{"metadata": {}, "model": "x"}')
    assert (status, body["error"]["param"]) == (400, "model")
    validate_in(SPEC, "ErrorResponse", body)
    status, body = await gateway.send("POST", path, body=b"{}")
    assert (status, body["error"]["param"]) == (400, "metadata")
    status, body = await gateway.send("POST", path, key="sk-cw-wrong-" + "x" * 40, body=b"{")
    assert status == 401


async def test_the_database_store_keeps_completions_across_a_restart(tmp_path: Path) -> None:
    config = write_config(tmp_path, "database")
    async with serving(config) as first, first.client() as client:
        completion_id = await _create(client, "durable", metadata={"k": "v"})
    async with serving(config) as second, second.client() as client:
        found = await client.chat.completions.retrieve(completion_id)
        assert found.metadata == {"k": "v"}
        assert [c.id for c in (await client.chat.completions.list()).data] == [completion_id]
