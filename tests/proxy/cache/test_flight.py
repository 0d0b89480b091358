"""Flights: one upstream stream read once, fanned out, failures never handed to a joiner."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import msgspec
import pytest

from proxy.cache.entry import Entry, encode_entry
from proxy.cache.flight import Flight
from proxy.core.canonical import Timings, Usage
from proxy.core.errors import UpstreamError
from proxy.core.reply import Chunk, ChunkChoice, Delta, RawFrames, Reply, Response
from tests.waiting import until

USAGE = Usage(input=2, output=3)


def chunk(text: str | None = None, finish: str | None = None, usage: Usage | None = None) -> Chunk:
    choices = []
    if usage is None:
        choices = [ChunkChoice(index=0, delta=Delta(content=text), finish_reason=finish)]  # type: ignore[arg-type]
    return Chunk(id="s", model="m", created=1, choices=choices, usage=usage)


def frames(*texts: str) -> RawFrames:
    data = b"".join(b"data: " + msgspec.json.encode(chunk(t)) + b"\n\n" for t in texts)
    return RawFrames(data, lambda payload: msgspec.json.decode(payload, type=Chunk))


class FakeStream:
    """A batched upstream stream fed by the test; a cancelled read kills it, as for a real one."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.reads = 0
        self.closed = False
        self.dead = False
        self._ended = False

    @property
    def ended(self) -> bool:
        return self._ended

    def push(self, *items: Chunk | RawFrames) -> None:
        self.queue.put_nowait(list(items))

    def end(self) -> None:
        self.queue.put_nowait(None)

    def fail(self, error: Exception) -> None:
        self.queue.put_nowait(error)

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        assert not self.dead, "read after a cancelled read"
        self.reads += 1
        try:
            item = await self.queue.get()
        except asyncio.CancelledError:
            self.dead = True
            raise
        if isinstance(item, Exception):
            raise item
        if item is None:
            self._ended = True
            return []
        return item

    async def aclose(self) -> None:
        self.closed = True


class Ends:
    def __init__(self) -> None:
        self.calls: list[bool] = []

    def __call__(self, complete: bool) -> None:
        self.calls.append(complete)


def flight(joinable: bool = True, limit: int = 1 << 20) -> Flight:
    return Flight(joinable=joinable, buffer_limit=limit)


def streaming(f: Flight) -> tuple[Any, FakeStream, Ends]:
    upstream = FakeStream()
    ends = Ends()
    reader = f.start_stream(Reply(provider="p", model="m", stream=upstream), ends)  # type: ignore[arg-type]
    return reader, upstream, ends


async def drain(reader: Any, raw: bool = False) -> list[Chunk | RawFrames]:
    items: list[Chunk | RawFrames] = []
    try:
        while batch := await reader.next_batch(raw):
            items.extend(batch)
    finally:
        await reader.aclose()
    return items


def texts(items: list[Any]) -> str:
    out = []
    for item in items:
        if type(item) is RawFrames:
            out.extend(
                msgspec.json.decode(p, type=Chunk).choices[0].delta.content for p in item.payloads()
            )
        else:
            out.extend(c.delta.content or "" for c in item.choices)
    return "".join(out)


async def test_an_only_reader_gets_the_original_items_and_the_answer_is_folded() -> None:
    f = flight()
    reader, upstream, ends = streaming(f)
    first, last = chunk("Hel"), chunk(finish="stop")
    upstream.push(first, frames("lo"))
    upstream.push(last, chunk(usage=USAGE))
    upstream.end()
    items = await drain(reader, raw=True)
    assert items[0] is first, "the leader reads the objects themselves"
    assert items[2] is last
    assert texts(items) == "Hello"
    assert ends.calls == [True]
    answer = f.answer()
    assert answer is not None
    assert answer.choices[0].message.content == "Hello"
    assert answer.usage == USAGE
    assert upstream.closed


async def test_the_leader_asking_for_chunks_gets_frames_decoded() -> None:
    f = flight()
    reader, upstream, _ = streaming(f)
    upstream.push(frames("a", "b"))
    upstream.end()
    items = await drain(reader, raw=False)
    assert all(type(item) is Chunk for item in items)
    assert texts(items) == "ab"


async def test_joiners_of_a_pending_flight_call_on_their_own_when_the_leader_fails() -> None:
    f = flight()
    timings = Timings(start=0.0)
    joiners = [asyncio.ensure_future(f.join(timings)) for _ in range(3)]
    await asyncio.sleep(0)
    f.fail()
    assert await asyncio.gather(*joiners) == [None, None, None]
    assert await f.join(timings) is None
    assert not f.joinable


async def test_joiners_of_a_whole_answer_receive_its_entry() -> None:
    f = flight()
    timings = Timings(start=0.0)
    joiner = asyncio.ensure_future(f.join(timings))
    await asyncio.sleep(0)
    reply = Reply(provider="p", model="m", response=Response(id="r", model="m", choices=[]))
    entry = encode_entry(
        Entry(created=1, expires=2, provider="p", model="m", response=reply.response)
    )  # type: ignore[arg-type]
    f.finish_whole(reply, entry)
    joined = await joiner
    assert joined is not None
    assert joined.entry == entry
    assert joined.reply is reply
    assert timings.upstream_wait >= 0


async def test_a_stream_fans_out_and_joiners_get_copies() -> None:
    f = flight()
    timings = Timings(start=0.0)
    early = asyncio.ensure_future(f.join(timings))
    await asyncio.sleep(0)
    leader, upstream, ends = streaming(f)
    joined = await early
    assert joined is not None
    assert joined.stream is not None
    first = chunk("one ")
    upstream.push(first)
    leader_first = await leader.next_batch(True)
    assert leader_first == [first]
    first.choices[0].delta.content = "CHANGED "  # as an outer plugin may do to its own copy
    upstream.push(chunk("two"), chunk(finish="stop"))
    upstream.push(chunk(usage=USAGE))
    upstream.end()
    late = await f.join(timings)  # mid-stream: catches up
    assert late is not None
    assert late.stream is not None
    early_items, late_items, rest = await asyncio.gather(
        drain(joined.stream, raw=True), drain(late.stream, raw=True), drain(leader, raw=True)
    )
    assert texts(early_items) == texts(late_items) == "one two"
    assert texts(leader_first + rest) == "CHANGED two"
    assert all(a is not b for a, b in zip(early_items, late_items, strict=True))
    assert early_items[0] is not first
    assert upstream.reads == 4, "the upstream stream is read once for every reader"
    answer = f.answer()
    assert answer is not None
    assert answer.choices[0].message.content == "one two"
    assert ends.calls == [True]


async def test_the_leader_leaving_does_not_stop_a_joiner() -> None:
    f = flight()
    leader, upstream, ends = streaming(f)
    joined = await f.join(Timings(start=0.0))
    assert joined is not None
    assert joined.stream is not None
    upstream.push(chunk("a"))
    assert texts(await leader.next_batch(True)) == "a"
    pending = asyncio.ensure_future(leader.next_batch(True))
    await until(lambda: upstream.reads == 2)
    pending.cancel()  # the leader's client went away while the shared read waits
    with pytest.raises(asyncio.CancelledError):
        await pending
    await leader.aclose()
    assert not upstream.closed
    assert not upstream.dead
    upstream.push(chunk("b"), chunk(finish="stop"), chunk(usage=USAGE))
    upstream.end()
    assert texts(await drain(joined.stream)) == "ab"
    assert upstream.closed
    assert ends.calls == [True]


async def test_a_joiner_arriving_during_the_leaders_own_read_waits_for_it() -> None:
    f = flight()
    leader, upstream, _ = streaming(f)
    reading = asyncio.ensure_future(leader.next_batch(True))
    await until(lambda: upstream.reads == 1)
    joining = asyncio.ensure_future(f.join(Timings(start=0.0)))
    await asyncio.sleep(0)
    assert not joining.done()
    reading.cancel()  # the leader's client goes away: its own read dies with it
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert await joining is None, "the joiner calls on its own; it never sent a byte"
    await leader.aclose()
    assert upstream.closed


async def test_a_failure_mid_stream_ends_every_reader_with_it() -> None:
    f = flight()
    leader, upstream, ends = streaming(f)
    joined = await f.join(Timings(start=0.0))
    assert joined is not None
    upstream.push(chunk("a"))
    upstream.fail(UpstreamError("broke", upstream_status=502))
    for reader in (leader, joined.stream):
        with pytest.raises(UpstreamError, match="broke"):
            await drain(reader)
    assert ends.calls == [False]
    assert f.answer() is None
    assert await f.join(Timings(start=0.0)) is None
    assert upstream.closed


async def test_the_last_reader_leaving_early_closes_the_upstream() -> None:
    f = flight()
    leader, upstream, ends = streaming(f)
    upstream.push(chunk("a"))
    await leader.next_batch(True)
    await leader.aclose()
    assert upstream.closed
    assert ends.calls == [False]
    assert not f.joinable


async def test_a_stream_past_the_buffer_limit_takes_no_joiners_and_gives_no_answer() -> None:
    f = flight(limit=10)
    leader, upstream, ends = streaming(f)
    upstream.push(chunk("a" * 50))
    await leader.next_batch(True)
    assert not f.joinable
    upstream.push(chunk(finish="stop"), chunk(usage=USAGE))
    upstream.end()
    await drain(leader)
    assert ends.calls == [False]
    assert f.answer() is None


async def test_an_unshared_flight_never_takes_joiners() -> None:
    f = flight(joinable=False)
    assert await f.join(Timings(start=0.0)) is None


async def test_frames_the_array_decoder_cannot_read_are_parsed_by_their_provider() -> None:
    def lenient(payload: bytes) -> Chunk:  # as a provider that fills in a missing model
        return msgspec.json.decode(payload.replace(b'{"id"', b'{"model":"m","id"'), type=Chunk)

    no_model = b'data: {"id":"s","choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    f = flight()
    reader, upstream, _ = streaming(f)
    upstream.push(frames("a"), RawFrames(no_model, lenient))
    upstream.push(chunk(finish="stop"), chunk(usage=USAGE))
    upstream.end()
    await drain(reader)
    answer = f.answer()
    assert answer is not None
    assert answer.choices[0].message.content == "ax"


async def test_a_streamed_flight_is_freed_without_the_garbage_collector() -> None:
    # The cache plugin hands the leader's reader on as the reply's stream: the flight keeping
    # that reply would be a cycle holding every item of the stream.
    gc.collect()
    gc.disable()
    try:
        f = flight()
        upstream = FakeStream()
        reply = Reply(provider="p", model="m", stream=upstream)  # type: ignore[arg-type]
        reply.stream = f.start_stream(reply, Ends())
        upstream.push(chunk("a"), chunk(finish="stop"))
        upstream.end()
        assert texts(await drain(reply.stream)) == "a"
        del f, reply
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kept = [type(thing).__name__ for thing in gc.garbage if type(thing) in (Flight, Reply)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert kept == []
