"""proxy/core/observed.py: stream end hooks, run once with the usage a stream carried."""

from __future__ import annotations

import pytest

from proxy.core.canonical import Usage
from proxy.core.observed import (
    HELD_ITEMS,
    SAMPLE_STRIDE,
    EndHooks,
    ObservedStream,
    item_characters,
    last_usage,
    observe,
)
from proxy.core.reply import Chunk, ChunkChoice, Delta, RawFrames
from proxy.core.token_estimate import estimate_tokens

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
    """An end hook that records its calls (a coroutine function, or a plain one)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Usage | None, int]] = []

    async def __call__(self, usage: Usage | None, generated: int) -> None:
        self.calls.append((usage, generated))

    def plain(self, usage: Usage | None, generated: int) -> None:
        self.calls.append((usage, generated))


async def drain(stream) -> list[Chunk | RawFrames]:
    items: list[Chunk | RawFrames] = []
    while batch := await stream.next_batch(True):
        items += batch
    return items


async def test_the_end_is_reported_once_with_the_last_usage():
    usage_chunk = Chunk(id="c", model="m", choices=[], usage=USAGE)
    frames = RawFrames(b"data: {}\n\n", lambda _: None, 1)
    inner = Batches([[word("a"), word("b")], [frames], [word("c"), usage_chunk]])
    ends = Ends()
    stream = observe(inner, ends)  # type: ignore[arg-type]
    items = await drain(stream)
    assert len(items) == 5, "every item passes"
    assert stream.ended  # type: ignore[attr-defined]
    await stream.aclose()  # type: ignore[attr-defined]
    assert ends.calls == [(USAGE, 0)]
    assert inner.closed


async def test_observing_an_observed_stream_adds_a_hook_not_a_layer():
    inner = Batches([[word("a")]])
    first, second = Ends(), Ends()
    stream = observe(inner, first)  # type: ignore[arg-type]
    assert isinstance(stream, ObservedStream)
    assert observe(stream, second.plain) is stream
    await drain(stream)
    assert first.calls == second.calls == [(None, 0)]


async def test_a_metering_hook_gets_the_output_estimate_when_no_usage_came():
    frames = RawFrames(b"data: {}\n\ndata: {}\n\n", lambda _: None, 2)
    ends, metered = Ends(), Ends()
    stream = observe(Batches([[word("abcdefgh")], [frames]]), ends)  # type: ignore[arg-type]
    observe(stream, metered, meters=True)
    await drain(stream)
    # 8 characters (2 tokens) and two verbatim frames (1 token each); the estimate is shared.
    assert ends.calls == metered.calls == [(None, 4)]


async def test_a_failure_or_an_early_close_ends_it_once():
    ends = Ends()
    stream = observe(Batches([[word("a")]], fail=True), ends)  # type: ignore[arg-type]
    with pytest.raises(ConnectionResetError):
        await drain(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    closed = Ends()
    early = observe(Batches([[word("a")], [word("b")]]), closed, meters=True)  # type: ignore[arg-type]
    await early.next_batch(True)  # type: ignore[attr-defined]
    await early.aclose()  # type: ignore[attr-defined]
    await early.aclose()  # type: ignore[attr-defined]
    assert (ends.calls, closed.calls) == ([(None, 0)], [(None, 1)])


async def test_every_hook_runs_even_when_one_raises_and_the_first_error_propagates():
    later = Ends()

    def broken(usage: Usage | None, generated: int) -> None:
        raise RuntimeError("hook failed")

    end = EndHooks(broken)
    end.add(later, False)
    pending = end.over([])
    assert pending is not None  # a hook raised: the rest run in what is awaited
    with pytest.raises(RuntimeError, match="hook failed"):
        await pending
    assert end.over([]) is None  # once only
    assert later.calls == [(None, 0)]


async def test_plain_hooks_run_at_once_and_an_awaitable_one_defers_the_rest():
    order: list[str] = []
    plain = EndHooks(lambda usage, generated: order.append("first"))
    assert plain.over([]) is None
    assert order == ["first"]

    async def awaited(usage: Usage | None, generated: int) -> None:
        order.append("awaited")

    mixed = EndHooks(awaited)
    mixed.add(lambda usage, generated: order.append("after"), False)
    pending = mixed.over([])
    assert pending is not None
    assert order == ["first"]
    await pending
    assert order == ["first", "awaited", "after"]


async def test_a_long_stream_is_read_as_it_goes_and_its_usage_kept():
    ends = Ends()
    end = EndHooks(ends, meters=True)
    end.passed_one(Chunk(id="c", model="m", choices=[], usage=USAGE))
    last = [word("abcd")]
    for _ in range(HELD_ITEMS):  # past the hold: the usage chunk is read and let go
        end.passed(last)
    pending = end.over(last)
    assert pending is not None
    await pending
    assert ends.calls == [(USAGE, 0)]


def test_a_window_let_go_is_counted_from_a_sample_and_the_last_one_whole():
    """Each full window counts the text of every SAMPLE_STRIDE-th item, scaled to the window;
    the items still held at the end are counted one by one."""
    ends = Ends()
    end = EndHooks(ends.plain, meters=True)
    for index in range(2 * HELD_ITEMS):  # only the sampled items say anything
        end.passed_one(word("abcdefgh" if index % SAMPLE_STRIDE == 0 else ""))
    tail = [word("abcd"), *(word("") for _ in range(4))]  # a sample of it would say 20
    end.passed(tail)
    assert end.over(tail) is None
    sampled = 2 * (HELD_ITEMS // SAMPLE_STRIDE) * 8 * SAMPLE_STRIDE  # two windows, scaled
    assert ends.calls == [(None, estimate_tokens(sampled + 4))]


def test_the_last_usage_of_a_window_let_go_is_kept_past_verbatim_frames():
    ends = Ends()
    end = EndHooks(ends.plain, meters=True)
    frames = RawFrames(b"data: {}\n\n", lambda _: None, 1)
    later = Usage()  # all zero: a usage is found however small
    end.passed([Chunk(id="c", model="m", choices=[], usage=USAGE), frames])
    end.passed([Chunk(id="c", model="m", choices=[], usage=later), frames])
    end.passed([frames] * HELD_ITEMS)  # the window is read and let go
    end.passed([frames])
    assert end.over([frames]) is None
    assert ends.calls == [(later, 0)]


def test_last_usage_asks_every_item_and_takes_the_last_that_carries_one():
    frames = RawFrames(b"data: {}\n\n", lambda _: None, 1)
    first, last = Usage(input=1), Usage(input=2)
    with_usage = [Chunk(id="c", model="m", choices=[], usage=u) for u in (first, last)]
    assert last_usage([]) is None
    assert last_usage([frames, word("a")]) is None
    assert last_usage([with_usage[0], frames, with_usage[1], word("a"), frames]) is last
    assert item_characters(frames) == 4
    assert item_characters(word("abc")) == 3
