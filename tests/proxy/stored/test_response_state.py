"""proxy/stored/response_state.py: continuing stored responses, storing whole and streamed ones, and
scoping both to the key that created them — with a recording chain in place of the plugins."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from proxy.core.canonical import ANONYMOUS, Call, Message, Principal, Usage
from proxy.core.errors import BadRequest, GatewayError, NotFound, UpstreamUnavailable
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response, batched
from proxy.dialects.responses import ResponsesDialect
from proxy.stored.response_state import ResponseState
from proxy.stored.response_store import MemoryResponseStore, StoredResponse

DIALECT = ResponsesDialect()
KEY_A = Principal(key_id="key-a")
KEY_B = Principal(key_id="key-b")


def responses_call(**fields: Any) -> Call:
    fields.setdefault("model", "mock/echo")
    return DIALECT.decode(json.dumps(fields).encode(), {}, "req", time.perf_counter())


class Chain:
    """Answers every call with ``answer``; records what it was sent; sets the principal as an
    auth plugin would."""

    def __init__(self, answer: str = "Sure.", principal: Principal = ANONYMOUS) -> None:
        self.answer = answer
        self.principal = principal
        self.calls: list[list[Message]] = []
        self.fail_after: int | None = None

    async def __call__(self, call: Call) -> Reply:
        call.principal = self.principal
        self.calls.append(list(call.messages))
        if call.stream:
            return Reply("mock", "echo", stream=self._stream())
        message = Message(role="assistant", content=self.answer)
        response = Response(
            id="up", model="echo", choices=[Choice(0, message, "stop")], usage=Usage(input=1)
        )
        return Reply("mock", "echo", response=response)

    async def _stream(self) -> AsyncIterator[Chunk]:
        for position, word in enumerate(self.answer.split(" ")):
            if self.fail_after is not None and position >= self.fail_after:
                raise UpstreamUnavailable("cut")
            piece = word if position == 0 else " " + word
            yield Chunk(id="up", model="echo", choices=[ChunkChoice(0, Delta(content=piece))])
        yield Chunk(id="up", model="echo", choices=[ChunkChoice(0, Delta(), "stop")])


def authenticate_as(principal: Principal):  # type: ignore[no-untyped-def]
    async def authenticate(headers: Mapping[str, str]) -> Principal:
        return principal

    return authenticate


def state(store: MemoryResponseStore | None = None) -> ResponseState:
    if store is None:
        store = MemoryResponseStore(ttl=60, max_entries=100, max_bytes=1_000_000)
    return ResponseState(store, structlog.get_logger)


async def drain(reply: Reply) -> list[Chunk]:
    source = batched(reply.stream)  # type: ignore[arg-type]
    chunks: list[Chunk] = []
    while batch := await source.next_batch(False):
        chunks.extend(batch)  # type: ignore[arg-type]
    return chunks


async def test_a_continued_response_sends_the_stored_conversation_first() -> None:
    responses, chain = state(), Chain("Paris is sunny.")
    first = responses_call(input="Weather in Paris?", instructions="Old rules.")
    await responses.run(first, chain, authenticate_as(ANONYMOUS))
    chain.answer = "Also sunny tomorrow."
    second = responses_call(
        input="And tomorrow?",
        instructions="New rules.",
        previous_response_id=first.dialect_state["envelope"].id,
    )
    await responses.run(second, chain, authenticate_as(ANONYMOUS))
    assert chain.calls[1] == [
        Message(role="system", content="New rules."),  # the old instructions do not carry over
        Message(role="user", content="Weather in Paris?"),
        Message(role="assistant", content="Paris is sunny."),
        Message(role="user", content="And tomorrow?"),
    ]
    third = responses_call(input="Thanks", previous_response_id=second.dialect_state["envelope"].id)
    await responses.run(third, chain, authenticate_as(ANONYMOUS))
    assert [m.text() for m in chain.calls[2]] == [
        "Weather in Paris?",
        "Paris is sunny.",
        "And tomorrow?",
        "Also sunny tomorrow.",
        "Thanks",
    ]


async def test_an_unknown_previous_response_is_openais_400() -> None:
    with pytest.raises(BadRequest) as info:
        await state().run(
            responses_call(input="x", previous_response_id="resp_gone"),
            Chain(),
            authenticate_as(ANONYMOUS),
        )
    error = info.value
    assert (error.status, error.code, error.param) == (
        400,
        "previous_response_not_found",
        "previous_response_id",
    )
    assert error.message == "Previous response with id 'resp_gone' not found."


async def test_a_whole_response_is_stored_as_its_client_got_it() -> None:
    responses, chain = state(), Chain()
    call = responses_call(input="Hi")
    reply = await responses.run(call, chain, authenticate_as(ANONYMOUS))
    stored = await responses.fetch(call.dialect_state["envelope"].id, ANONYMOUS)
    assert stored == DIALECT.encode_response(call, reply)


async def test_store_false_stores_nothing() -> None:
    responses = state()
    call = responses_call(input="Hi", store=False)
    await responses.run(call, Chain(), authenticate_as(ANONYMOUS))
    with pytest.raises(NotFound):
        await responses.fetch(call.dialect_state["envelope"].id, ANONYMOUS)


async def test_a_stream_is_stored_when_its_last_chunk_arrived_as_the_client_saw_it() -> None:
    responses, chain = state(), Chain("one two three")
    call = responses_call(input="Count", stream=True)
    response_id = call.dialect_state["envelope"].id
    reply = await responses.run(call, chain, authenticate_as(ANONYMOUS))
    encoder = DIALECT.stream_encoder(call, reply)
    source = batched(reply.stream)  # type: ignore[arg-type]
    raw = b""
    for item in await source.next_batch(False):
        raw += encoder.chunk(item)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        await responses.fetch(response_id, ANONYMOUS)  # not complete yet
    while batch := await source.next_batch(False):
        raw += b"".join(encoder.chunk(item) for item in batch)  # type: ignore[arg-type]
    stored = json.loads(await responses.fetch(response_id, ANONYMOUS))
    raw += encoder.end()
    completed = json.loads(raw.split(b"event: response.completed\ndata: ")[1])
    assert stored == completed["response"]
    assert stored["output_text"] == "one two three"


async def test_a_failed_or_abandoned_stream_is_not_stored() -> None:
    responses, chain = state(), Chain("one two three")
    chain.fail_after = 2
    failed = responses_call(input="x", stream=True)
    reply = await responses.run(failed, chain, authenticate_as(ANONYMOUS))
    with pytest.raises(UpstreamUnavailable):
        await drain(reply)
    chain.fail_after = None
    abandoned = responses_call(input="x", stream=True)
    reply = await responses.run(abandoned, chain, authenticate_as(ANONYMOUS))
    await anext(reply.stream)  # type: ignore[arg-type]
    await reply.stream.aclose()  # type: ignore[union-attr]
    for call in (failed, abandoned):
        with pytest.raises(NotFound):
            await responses.fetch(call.dialect_state["envelope"].id, ANONYMOUS)


async def test_a_streamed_turn_can_be_continued_like_a_whole_one() -> None:
    responses, chain = state(), Chain("streamed answer")
    call = responses_call(input="First", stream=True)
    await drain(await responses.run(call, chain, authenticate_as(ANONYMOUS)))
    follow = responses_call(input="Next", previous_response_id=call.dialect_state["envelope"].id)
    await responses.run(follow, chain, authenticate_as(ANONYMOUS))
    assert [m.text() for m in chain.calls[1]] == ["First", "streamed answer", "Next"]


async def test_responses_belong_to_the_key_that_created_them() -> None:
    responses, chain = state(), Chain(principal=KEY_A)
    call = responses_call(input="Secret plans")
    await responses.run(call, chain, authenticate_as(KEY_A))
    response_id = call.dialect_state["envelope"].id
    assert await responses.fetch(response_id, KEY_A)
    for other in (KEY_B, ANONYMOUS):
        with pytest.raises(NotFound):
            await responses.fetch(response_id, other)
        with pytest.raises(NotFound):
            await responses.delete(response_id, other)
        with pytest.raises(BadRequest, match="not found"):
            await responses.run(
                responses_call(input="x", previous_response_id=response_id),
                Chain(principal=other),
                authenticate_as(other),
            )
    assert json.loads(await responses.delete(response_id, KEY_A)) == {
        "id": response_id,
        "object": "response",
        "deleted": True,
    }
    with pytest.raises(NotFound):
        await responses.fetch(response_id, KEY_A)


class BrokenStore(MemoryResponseStore):
    async def put(self, response_id: str, record: StoredResponse) -> bool:
        raise ConnectionError("database is down")

    async def get(self, response_id: str, owner: str | None) -> StoredResponse | None:
        raise ConnectionError("database is down")

    async def delete(self, response_id: str, owner: str | None) -> bool:
        raise ConnectionError("database is down")


async def test_a_store_that_cannot_be_read_is_a_503_for_what_needs_it() -> None:
    broken = state(BrokenStore(ttl=60, max_entries=10, max_bytes=10_000))
    attempts = [
        broken.run(
            responses_call(input="x", previous_response_id="resp_1"),
            Chain(),
            authenticate_as(ANONYMOUS),
        ),
        broken.fetch("resp_1", ANONYMOUS),
        broken.delete("resp_1", ANONYMOUS),
    ]
    for attempt in attempts:
        with capture_logs() as logs, pytest.raises(GatewayError) as info:
            await attempt
        assert (info.value.status, info.value.code) == (503, "response_store_unavailable")
        assert [entry["event"] for entry in logs] == ["response_store_failed"]


async def test_a_store_that_fails_or_is_full_still_answers() -> None:
    broken = state(BrokenStore(ttl=60, max_entries=10, max_bytes=10_000))
    with capture_logs() as logs:
        reply = await broken.run(responses_call(input="x"), Chain(), authenticate_as(ANONYMOUS))
    assert reply.response is not None
    assert [entry["event"] for entry in logs] == ["response_store_failed"]

    tiny = state(MemoryResponseStore(ttl=60, max_entries=10, max_bytes=1024))
    with capture_logs() as logs:
        reply = await tiny.run(
            responses_call(input="x"), Chain("word " * 500), authenticate_as(ANONYMOUS)
        )
    assert reply.response is not None
    assert [(entry["event"], entry["why"]) for entry in logs] == [
        ("response_not_stored", "too large")
    ]
