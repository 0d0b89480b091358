"""proxy/observed.py: a stream wrapper that reports its end once, with the usage it carried."""

from __future__ import annotations

import pytest

from proxy.canonical import Chunk, ChunkChoice, Delta, RawFrames, Usage
from proxy.observed import ObservedStream

USAGE = Usage(input=3, output=5)


def word(text: str) -> Chunk:
    return Chunk(id="c", model="m", choices=[ChunkChoice(index=0, delta=Delta(content=text))])


class Batches:
    """A batched stream of canned reads; ``fail`` raises after them."""

    def __init__(self, reads: list[list[Chunk | RawFrames]], fail: bool = False) -> None:
        self._reads = list(reads)
        self._fail = fail
        self.ended = False
        self.closed = False

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        if self._reads:
            return self._reads.pop(0)
        if self._fail:
            raise ConnectionResetError("cut")
        self.ended = True
        return []

    def __aiter__(self):
        raise NotImplementedError

    async def aclose(self) -> None:
        self.closed = True


class Ends:
    def __init__(self) -> None:
        self.calls: list[Usage | None] = []

    async def __call__(self, usage: Usage | None) -> None:
        self.calls.append(usage)


async def drain(stream: ObservedStream) -> list[Chunk | RawFrames]:
    items: list[Chunk | RawFrames] = []
    while batch := await stream.next_batch(True):
        items += batch
    return items


async def test_the_end_is_reported_once_with_the_last_usage():
    usage_chunk = Chunk(id="c", model="m", choices=[], usage=USAGE)
    frames = RawFrames(b"data: {}\n\n", lambda _: None, 1)
    inner = Batches([[word("a"), word("b")], [frames], [word("c"), usage_chunk]])
    ends = Ends()
    stream = ObservedStream(inner, ends)  # type: ignore[arg-type]
    items = await drain(stream)
    assert len(items) == 5, "every item passes"
    assert stream.ended
    await stream.aclose()
    assert ends.calls == [USAGE]
    assert inner.closed


async def test_a_stream_without_usage_ends_with_none_and_counts_tokens_off_ignores_it():
    ends = Ends()
    await drain(ObservedStream(Batches([[word("a")]]), ends))  # type: ignore[arg-type]
    quiet = Ends()
    usage_chunk = Chunk(id="c", model="m", choices=[], usage=USAGE)
    await drain(ObservedStream(Batches([[usage_chunk]]), quiet, counts_tokens=False))  # type: ignore[arg-type]
    assert (ends.calls, quiet.calls) == ([None], [None])


async def test_a_failure_or_an_early_close_ends_it_once():
    ends = Ends()
    stream = ObservedStream(Batches([[word("a")]], fail=True), ends)  # type: ignore[arg-type]
    with pytest.raises(ConnectionResetError):
        await drain(stream)
    await stream.aclose()
    closed = Ends()
    early = ObservedStream(Batches([[word("a")], [word("b")]]), closed)  # type: ignore[arg-type]
    await early.next_batch(True)
    await early.aclose()
    await early.aclose()
    assert (ends.calls, closed.calls) == ([None], [None])
