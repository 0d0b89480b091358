"""proxy/core/streams.py: the reply stream contract. Every stream class of the gateway implements
the protocols it declares (and only those: what it gives up is what the module's table says), and
the checks judge a stream's class once."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.cache.flight import FlightReader
from proxy.cache.replay import ReplayStream
from proxy.core.observed import ObservedStream
from proxy.core.reply import Chunk, ChunkChoice, Delta
from proxy.core.streams import (
    BatchedStream,
    Closable,
    EndObservable,
    RelaysFrames,
    ReplyStream,
    _OneByOne,
    batched,
    is_batched,
    is_closable,
    is_end_observable,
    relays_frames,
)
from proxy.dialects.anthropic_replies import AnthropicStreamEncoder
from proxy.dialects.openai_chat import ChatStreamEncoder
from proxy.pii.stream import RewritingStream
from proxy.request_logs.capture import RecordingStream
from proxy.stored.response_state import _RecordingStream
from proxy.upstream.stream import UpstreamStream

PROTOCOLS = (ReplyStream, BatchedStream, EndObservable)

WRAPPERS: dict[type, tuple[type, ...]] = {
    UpstreamStream: (ReplyStream, BatchedStream, EndObservable),
    ObservedStream: (ReplyStream, BatchedStream, EndObservable),
    RewritingStream: (ReplyStream, BatchedStream),
    _RecordingStream: (ReplyStream, BatchedStream),
    RecordingStream: (ReplyStream, BatchedStream),
    FlightReader: (ReplyStream, BatchedStream),
    ReplayStream: (ReplyStream, BatchedStream),
    _OneByOne: (BatchedStream,),
}
"""Each stream class of the gateway and the protocols it declares (proxy/core/streams.py's
table)."""


def _members(protocol: type) -> dict[str, Any]:
    """The members a protocol declares (its own and its protocol bases'), by name: its public
    attributes, and the iteration methods."""
    members: dict[str, Any] = {}
    for base in reversed(protocol.__mro__):
        if getattr(base, "_is_protocol", False) and base.__module__ != "typing":
            for name, value in vars(base).items():
                if not name.startswith("_") or name in ("__aiter__", "__anext__"):
                    members[name] = value
    return members


def _kind(value: Any) -> str:
    if isinstance(value, property):
        return "attribute"
    if inspect.iscoroutinefunction(value):
        return "async"
    if callable(value):
        return "method"
    return "attribute"


@pytest.mark.parametrize("cls", list(WRAPPERS), ids=lambda cls: cls.__qualname__)
def test_each_stream_class_implements_what_it_declares_and_nothing_it_gives_up(cls: type) -> None:
    declared = WRAPPERS[cls]
    for protocol in PROTOCOLS:
        assert (protocol in cls.__mro__) == (protocol in declared), protocol.__name__
    for protocol in declared:
        for name, stub in _members(protocol).items():
            implemented = inspect.getattr_static(cls, name)
            # Its own, not the protocol's empty body inherited.
            assert implemented is not stub, f"{cls.__qualname__}.{name} is not implemented"
            kind = _kind(stub)
            if kind == "attribute":  # a property, or a plain attribute (``ended = False``)
                continue
            assert _kind(implemented) == kind, f"{cls.__qualname__}.{name} is not {kind}"
            wanted = list(inspect.signature(stub).parameters)
            got = list(inspect.signature(implemented).parameters)
            assert got[: len(wanted)] == wanted, f"{cls.__qualname__}.{name}{tuple(got)}"
    for protocol in set(PROTOCOLS) - set(declared):
        for name in _members(protocol):
            assert not hasattr(cls, name), f"{cls.__qualname__} has {name} but does not declare it"


def test_the_checks_agree_with_isinstance() -> None:
    async def plain() -> AsyncIterator[Chunk]:
        yield _chunk("a")

    generator = plain()
    assert is_closable(generator)
    assert isinstance(generator, Closable)
    assert isinstance(generator, ReplyStream)
    assert not is_batched(generator)
    assert not is_end_observable(generator)
    replay = ReplayStream.__new__(ReplayStream)
    assert is_batched(replay)
    assert is_closable(replay)
    assert not is_end_observable(replay)
    assert relays_frames(ChatStreamEncoder(include_usage=False))
    assert isinstance(ChatStreamEncoder(include_usage=False), RelaysFrames)


def test_an_encoder_without_relay_does_not_relay() -> None:
    encoder = AnthropicStreamEncoder.__new__(AnthropicStreamEncoder)
    assert not relays_frames(encoder)


class _Chunks:
    """A plugin's plain stream: iteration only."""

    def __init__(self, texts: list[str]) -> None:
        self._texts = list(texts)

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> Chunk:
        if not self._texts:
            raise StopAsyncIteration
        return _chunk(self._texts.pop(0))


class _SometimesBatched(_Chunks):
    """A wrapper that offers batches only when its inner stream does: per instance."""

    def __init__(self, texts: list[str], batches: bool) -> None:
        super().__init__(texts)
        if batches:
            self.ended = False
            self.next_batch = self._next_batch

    async def _next_batch(self, raw: bool) -> list[Chunk]:
        return [await self.__anext__()] if self._texts else []


def _chunk(text: str) -> Chunk:
    return Chunk(id="c", model="m", choices=[ChunkChoice(index=0, delta=Delta(content=text))])


async def test_batched_reads_a_plain_stream_one_chunk_per_batch() -> None:
    source = batched(_Chunks(["a", "b"]))  # type: ignore[arg-type]
    assert isinstance(source, _OneByOne)
    assert not is_closable(source), "the adapter is a view: whoever holds it closes the stream"
    assert [len(await source.next_batch(True)) for _ in range(3)] == [1, 1, 0]


async def test_what_an_instance_offers_is_judged_per_instance_unless_its_class_decides() -> None:
    with_batches = _SometimesBatched(["a"], batches=True)
    without = _SometimesBatched(["a"], batches=False)
    for _ in range(2):  # asked again: the verdict is not kept for the class
        assert batched(with_batches) is with_batches  # type: ignore[arg-type]
        assert isinstance(batched(without), _OneByOne)  # type: ignore[arg-type]
        assert batched(with_batches) is with_batches  # type: ignore[arg-type]
