""":class:`ChatState` around a chain: what it keeps (the completion as answered, the request's
messages before a plugin changed them), what it passes through untouched, and what a store that
cannot answer costs (a stored completion is still answered; a read is a 503)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog

from proxy.core.canonical import ANONYMOUS, Call, Message, Principal, Usage
from proxy.core.errors import GatewayError
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response
from proxy.dialects.openai_chat import OpenAIChatDialect
from proxy.stored.chat_state import ChatState
from proxy.stored.chat_store import MemoryChatStore, Query, StoredChat

ALICE = Principal(key_id="key_alice")


def chat_call(**fields: Any) -> Call:
    body = {"model": "mock/echo", "messages": [{"role": "user", "content": "hi"}], **fields}
    call = OpenAIChatDialect().decode(json.dumps(body).encode(), {}, "req-1", 0.0)
    call.principal = ALICE
    return call


async def answer(call: Call) -> Reply:
    """A chain that changes the call (as a masking plugin would) and answers."""
    call.messages[0] = Message(role="user", content="<masked>")
    message = Message(role="assistant", content="hello")
    response = Response(
        id="chatcmpl-1",
        model="echo",
        choices=[Choice(index=0, message=message, finish_reason="stop")],
        created=1,
        usage=Usage(input=1, output=1),
    )
    return Reply(provider="mock", model="echo", response=response)


def memory() -> MemoryChatStore:
    return MemoryChatStore(ttl=60, max_entries=10, max_bytes=1 << 20)


async def test_a_stored_completion_keeps_what_the_client_sent_and_received() -> None:
    store = memory()
    state = ChatState(store, structlog.get_logger)
    call = chat_call(store=True, metadata={"k": "v"})
    reply = await state.run(call, answer)
    assert reply.encoded is not None
    sent = json.loads(reply.encoded.body)
    record = await store.get("chatcmpl-1", "key_alice")
    assert record is not None
    assert json.loads(record.body) == {**sent, "metadata": {"k": "v"}}
    (message,) = json.loads(record.messages)
    assert (message["id"], message["content"]) == ("chatcmpl-1-0", "hi")  # not "<masked>"
    assert record.model == "mock/echo"


async def test_without_store_nothing_is_kept_and_the_reply_is_the_chains() -> None:
    store = memory()
    state = ChatState(store, structlog.get_logger)
    reply = await state.run(chat_call(), answer)
    assert reply.encoded is None
    assert await store.search(Query(owner="key_alice")) == ([], False)


class BrokenStore:
    async def put(self, record: StoredChat) -> bool:
        raise ConnectionError("database down")

    async def get(self, completion_id: str, owner: str | None) -> StoredChat | None:
        raise ConnectionError("database down")

    async def search(self, query: Query) -> tuple[list[StoredChat], bool]:
        raise ConnectionError("database down")

    async def update(
        self, completion_id: str, owner: str | None, metadata: dict[str, str], body: bytes
    ) -> bool:
        raise ConnectionError("database down")

    async def delete(self, completion_id: str, owner: str | None) -> bool:
        raise ConnectionError("database down")


async def test_a_store_that_cannot_answer() -> None:
    state = ChatState(BrokenStore(), structlog.get_logger)
    reply = await state.run(chat_call(store=True), answer)
    assert reply.response is not None  # answered all the same
    for read in (
        state.fetch("chatcmpl-1", ANONYMOUS),
        state.listing(ANONYMOUS, {}),
        state.delete("chatcmpl-1", ANONYMOUS),
        state.messages("chatcmpl-1", ANONYMOUS, {}),
        state.update("chatcmpl-1", ANONYMOUS, b'{"metadata": {}}'),
    ):
        with pytest.raises(GatewayError) as failed:
            await read
        assert (failed.value.status, failed.value.code) == (
            503,
            "chat_completion_store_unavailable",
        )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{}", "metadata"),
        (b'{"metadata": {}, "model": "x"}', "model"),
        (b'{"metadata": {"k": 1}}', "metadata[...]"),
        (b'{"metadata": {"' + b"k" * 65 + b'": "v"}}', "metadata"),
    ],
)
async def test_an_update_names_the_bad_field(body: bytes, param: str) -> None:
    state = ChatState(memory(), structlog.get_logger)
    with pytest.raises(GatewayError) as refused:
        await state.update("chatcmpl-1", ALICE, body)
    assert (refused.value.status, refused.value.param) == (400, param)


def streaming(fail: bool) -> Any:
    """A chain answering a stream of two chunks (text, then finish and usage); with ``fail``
    the stream breaks after the first."""

    async def chunks() -> AsyncIterator[Chunk]:
        delta = Delta(content="hello")
        yield Chunk(id="chatcmpl-2", model="echo", choices=[ChunkChoice(index=0, delta=delta)])
        if fail:
            raise ConnectionError("upstream went away")
        end = ChunkChoice(index=0, finish_reason="stop")
        yield Chunk(id="chatcmpl-2", model="echo", choices=[end], usage=Usage(input=1, output=1))

    async def chain(call: Call) -> Reply:
        return Reply(provider="mock", model="echo", stream=chunks())

    return chain


async def test_a_stream_is_stored_once_it_ends() -> None:
    store = memory()
    reply = await ChatState(store, structlog.get_logger).run(
        chat_call(store=True, stream=True), streaming(fail=False)
    )
    assert reply.stream is not None
    assert [chunk.id async for chunk in reply.stream] == ["chatcmpl-2", "chatcmpl-2"]
    record = await store.get("chatcmpl-2", "key_alice")
    assert record is not None
    assert json.loads(record.body)["choices"][0]["message"]["content"] == "hello"


async def test_a_broken_stream_is_not_stored() -> None:
    store = memory()
    reply = await ChatState(store, structlog.get_logger).run(
        chat_call(store=True, stream=True), streaming(fail=True)
    )
    assert reply.stream is not None
    with pytest.raises(ConnectionError):
        async for _ in reply.stream:
            pass
    assert await store.get("chatcmpl-2", "key_alice") is None
