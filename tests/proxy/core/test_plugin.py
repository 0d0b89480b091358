"""proxy/core/plugin.py: composing the plugin chain; the optional hooks' protocols and
:func:`authentication`. Loading plugins from config entries: tests/proxy/runtime/test_plugins.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from proxy.core.canonical import ANONYMOUS, Call, Message, Principal
from proxy.core.errors import UpstreamOverloaded
from proxy.core.plugin import (
    HOOKS,
    Authenticates,
    Closes,
    DescribesSpan,
    Finishes,
    Starts,
    anonymous,
    authentication,
    compose,
)
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response


def make_call(**fields) -> Call:
    return Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content="hi")],
        **fields,
    )


def text_reply(text: str = "ok") -> Reply:
    message = Message(role="assistant", content=text)
    response = Response(id="x", model="m", choices=[Choice(index=0, message=message)])
    return Reply(provider="p", model="m", response=response)


class Recorder:
    """A plugin that records entry and exit in a shared log."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def __call__(self, call: Call, next) -> Reply:
        self.log.append(f"{self.name}>")
        reply = await next(call)
        self.log.append(f"<{self.name}")
        return reply


# ---------------------------------------------------------------------------------------------
# compose
# ---------------------------------------------------------------------------------------------


async def test_compose_runs_plugins_outermost_first():
    log: list[str] = []

    async def upstream(call: Call) -> Reply:
        log.append("upstream")
        return text_reply(",".join(entry for entry in log if entry.endswith(">")))

    chain = compose([Recorder("a", log), Recorder("b", log), Recorder("c", log)], upstream)
    reply = await chain(make_call())
    assert log == ["a>", "b>", "c>", "upstream", "<c", "<b", "<a"]
    assert reply.response.choices[0].message.content == "a>,b>,c>"


def test_empty_chain_is_the_upstream_itself():
    async def upstream(call: Call) -> Reply:
        return text_reply()

    assert compose([], upstream) is upstream


async def test_a_chain_can_be_called_many_times():
    calls = 0

    async def upstream(call: Call) -> Reply:
        nonlocal calls
        calls += 1
        return text_reply()

    chain = compose([Recorder("a", [])], upstream)
    for _ in range(3):
        await chain(make_call())
    assert calls == 3


async def test_plugin_that_short_circuits():
    log: list[str] = []

    class Cache:
        async def __call__(self, call: Call, next) -> Reply:
            log.append("cache hit")
            return text_reply("cached")

    async def upstream(call: Call) -> Reply:
        raise AssertionError("the upstream must not be called")

    chain = compose([Recorder("outer", log), Cache(), Recorder("inner", log)], upstream)
    reply = await chain(make_call())
    assert reply.response.choices[0].message.content == "cached"
    assert log == ["outer>", "cache hit", "<outer"]


async def test_plugin_that_calls_next_twice():
    attempts: list[str] = []

    class NaiveRetry:
        async def __call__(self, call: Call, next) -> Reply:
            try:
                return await next(call)
            except UpstreamOverloaded:
                return await next(call)

    async def upstream(call: Call) -> Reply:
        attempts.append(call.model)
        if len(attempts) == 1:
            raise UpstreamOverloaded("busy", upstream_status=503)
        return text_reply("second time lucky")

    log: list[str] = []
    chain = compose([NaiveRetry(), Recorder("inner", log)], upstream)
    reply = await chain(make_call())
    assert reply.response.choices[0].message.content == "second time lucky"
    assert attempts == ["m", "m"]
    assert log == ["inner>", "inner>", "<inner"]  # the inner link ran once per attempt


async def test_errors_propagate_through_the_chain():
    async def upstream(call: Call) -> Reply:
        raise UpstreamOverloaded("busy", upstream_status=503)

    chain = compose([Recorder("a", [])], upstream)
    with pytest.raises(UpstreamOverloaded):
        await chain(make_call())


async def test_plugin_that_wraps_a_stream():
    async def chunks() -> AsyncIterator[Chunk]:
        for text in ["hello", " ", "world"]:
            yield Chunk(
                id="c", model="m", choices=[ChunkChoice(index=0, delta=Delta(content=text))]
            )
        yield Chunk(
            id="c",
            model="m",
            choices=[ChunkChoice(index=0, delta=Delta(), finish_reason="stop")],
        )

    class Shout:
        async def __call__(self, call: Call, next) -> Reply:
            reply = await next(call)
            assert reply.stream is not None
            inner = reply.stream

            async def wrapped() -> AsyncIterator[Chunk]:
                async for chunk in inner:
                    for choice in chunk.choices:
                        if isinstance(choice.delta.content, str):
                            choice.delta.content = choice.delta.content.upper()
                    yield chunk

            return msgspec.structs.replace(reply, stream=wrapped())

    async def upstream(call: Call) -> Reply:
        return Reply(provider="p", model="m", stream=chunks())

    reply = await compose([Shout()], upstream)(make_call(stream=True))
    texts = []
    finish = []
    async for chunk in reply.stream:
        texts += [c.delta.content for c in chunk.choices if isinstance(c.delta.content, str)]
        finish += [c.finish_reason for c in chunk.choices if c.finish_reason]
    assert "".join(texts) == "HELLO WORLD"
    assert finish == ["stop"]


# ---------------------------------------------------------------------------------------------
# The optional hooks
# ---------------------------------------------------------------------------------------------


class Plain:
    async def __call__(self, call: Call, next) -> Reply:
        return await next(call)


class EveryHook(Plain):
    def __init__(self, key_id: str = "k") -> None:
        self.principal = Principal(key_id=key_id)

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def finished(self, request) -> None:
        pass

    async def authenticate(self, headers) -> Principal:
        return self.principal

    def span_attributes(self, call) -> dict[str, str]:
        return {}


class Blocked(EveryHook):
    """Every hook set to None: none offered (as the protocols read it)."""

    start = close = finished = authenticate = span_attributes = None  # type: ignore[assignment]


def test_each_hook_is_a_protocol_a_plugin_satisfies_by_having_it():
    assert set(HOOKS) == {"start", "close", "finished", "authenticate", "span_attributes"}
    assert [hook.protocol for hook in HOOKS.values()] == [
        Starts,
        Closes,
        Finishes,
        Authenticates,
        DescribesSpan,
    ]
    for hook in HOOKS.values():
        assert isinstance(EveryHook(), hook.protocol)
        assert not isinstance(Plain(), hook.protocol)
        assert not isinstance(Blocked(), hook.protocol)


async def test_authentication_is_the_first_authenticate_hook_else_anonymous():
    first, second = EveryHook("first"), EveryHook("second")
    authenticate = authentication([Plain(), first, second])
    assert await authenticate({}) is first.principal
    assert authentication([Plain(), Blocked()]) is anonymous
    assert authentication([]) is anonymous
    assert await anonymous({}) is ANONYMOUS
