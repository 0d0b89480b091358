"""proxy/upstream/stream.py: the clocks' single-timer guard, the stream's batching contract and
its end hooks."""

from __future__ import annotations

import asyncio

import pytest

from proxy.core.canonical import Timings, Usage
from proxy.core.errors import UpstreamError, UpstreamUnavailable
from proxy.core.observed import HELD_ITEMS
from proxy.core.reply import Chunk, ChunkChoice, Delta, RawFrames
from proxy.providers.base import Timeouts
from proxy.upstream.stream import UpstreamClocks, UpstreamStream

SHORT = Timeouts(first_byte=0.05, idle=0.05, total=5)


class _Timer:
    def __init__(self, when: float, callback) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualTime:
    """The two loop methods :class:`UpstreamClocks` uses (``time``, ``call_at``) on a clock that
    moves only when told: :meth:`advance` runs the timers that come due, in order, as the loop
    would."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[_Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback) -> _Timer:
        timer = _Timer(when, callback)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        target = self.now + seconds
        while due := sorted(
            (t for t in self.timers if not t.cancelled and t.when <= target), key=lambda t: t.when
        ):
            timer = due[0]
            self.timers.remove(timer)
            self.now = timer.when
            timer.callback()
        self.now = target


def virtual_clocks(timeouts: Timeouts) -> tuple[UpstreamClocks, VirtualTime]:
    """A :class:`UpstreamClocks` on virtual time."""
    virtual = VirtualTime()
    return UpstreamClocks(timeouts, virtual), virtual  # type: ignore[arg-type]


async def wait_past(clocks: UpstreamClocks, time: VirtualTime, seconds: float) -> None:
    """One guarded wait on an upstream that never answers, while ``seconds`` pass."""
    with clocks:
        time.advance(seconds)  # a timer that comes due cancels this task, as the loop would
        await asyncio.Event().wait()


async def test_a_wait_past_the_deadline_raises_timeout_error() -> None:
    clocks, time = virtual_clocks(SHORT)
    with pytest.raises(TimeoutError):
        await wait_past(clocks, time, 0.05)
    assert clocks.clock == "first_byte"
    clocks.close()
    assert all(timer.cancelled for timer in time.timers)


async def test_a_wait_just_inside_the_deadline_is_not_cut() -> None:
    clocks, time = virtual_clocks(SHORT)
    with clocks:
        time.advance(0.049)
        await asyncio.sleep(0)
    clocks.close()


async def test_waits_within_moving_deadlines_never_expire() -> None:
    clocks, time = virtual_clocks(SHORT)
    for _ in range(4):  # 4 x 0.03 s > one 0.05 s deadline, but each wait is within its own
        with clocks:
            time.advance(0.03)  # the timer fires before the moved deadline: it is re-armed
            await asyncio.sleep(0)
        clocks.next_is_idle()
    assert clocks.clock == "idle"
    assert clocks.deadline == pytest.approx(0.12 + 0.05)
    clocks.close()


async def test_the_idle_clock_cuts_a_wait_after_the_first_byte() -> None:
    clocks, time = virtual_clocks(SHORT)
    with clocks:
        time.advance(0.04)
        await asyncio.sleep(0)
    clocks.next_is_idle()
    with pytest.raises(TimeoutError):
        await wait_past(clocks, time, 0.05)
    assert clocks.clock == "idle"
    clocks.close()


async def test_the_total_clock_bounds_a_stream_whose_every_wait_is_quick() -> None:
    clocks, time = virtual_clocks(Timeouts(first_byte=1, idle=1, total=2))
    with clocks:
        time.advance(0.9)
        await asyncio.sleep(0)
    clocks.next_is_idle()
    with clocks:
        time.advance(0.9)
        await asyncio.sleep(0)
    clocks.next_is_idle()  # 1.8 s in: the idle deadline (2.8) is past the total one (2.0)
    assert clocks.clock == "total"
    with pytest.raises(TimeoutError):
        await wait_past(clocks, time, 0.2)
    clocks.close()


async def test_the_timer_firing_between_waits_cancels_nothing() -> None:
    clocks, time = virtual_clocks(SHORT)
    with clocks:
        await asyncio.sleep(0)
    time.advance(0.1)  # the deadline passes while the caller is busy elsewhere
    clocks.next_is_idle()
    with clocks:
        time.advance(0.01)  # a fresh deadline: no expiry
        await asyncio.sleep(0)
    clocks.close()


async def test_an_outside_cancellation_stays_a_cancellation() -> None:
    clocks = UpstreamClocks(Timeouts(first_byte=5, idle=5, total=5))
    waiting = asyncio.Event()

    async def wait() -> None:
        with clocks:
            waiting.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(wait())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    clocks.close()


def _chunk() -> Chunk:
    return Chunk(id="c", model="", choices=[])  # a wire format that does not name the model


async def _batches(*batches: list[Chunk | RawFrames | None]):
    for batch in batches:
        yield batch


def _stream(*batches: list[Chunk | RawFrames | None], errors: list[str]) -> UpstreamStream:
    return UpstreamStream(
        _batches(*batches),
        UpstreamClocks(SHORT),
        Timings(start=0),
        "p",
        lambda provider, error: errors.append(error.code),
        model="m",
    )


def _parse(payload: bytes) -> Chunk:
    if payload == b"bad":
        raise UpstreamError("malformed", upstream_status=200, provider="p")
    return Chunk(id=payload.decode(), model="up", choices=[], raw=payload)


def _frames(*payloads: bytes) -> RawFrames:
    return RawFrames(b"".join(b"data: " + p + b"\n\n" for p in payloads), _parse)


async def test_stream_hands_over_what_arrived_together_and_names_the_model() -> None:
    errors: list[str] = []
    stream = _stream([_chunk(), _chunk()], [_chunk(), None], errors=errors)
    await stream.prime()
    first = await stream.next_batch()
    assert (len(first), stream.ended) == (2, False)
    last = await stream.next_batch()
    assert (len(last), stream.ended) == (1, True)
    assert await stream.next_batch() == []
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    assert {chunk.model for chunk in first + last} == {"m"}
    await stream.aclose()
    assert errors == []


async def test_raw_frames_pass_verbatim_only_to_a_reader_that_asks_for_them() -> None:
    frames = _frames(b"a", b"b")
    raw = _stream([frames], [frames, None], errors=[])
    await raw.prime()
    assert await raw.next_batch(raw=True) == [frames]
    decoded = await raw.next_batch(raw=False)
    assert [chunk.id for chunk in decoded] == ["a", "b"]  # type: ignore[union-attr]
    assert decoded[0].model == "up"  # type: ignore[union-attr]  # named by the frame itself
    iterated = _stream([_frames(b"a", b"b"), _chunk()], [None], errors=[])
    await iterated.prime()
    assert [chunk.id async for chunk in iterated] == ["a", "b", "c"]


async def test_the_first_chunk_is_read_without_being_taken() -> None:
    chunks = _stream([_chunk(), _chunk()], [None], errors=[])
    await chunks.prime()
    first = chunks.first()
    assert first is not None
    assert (first.id, first.model) == ("c", "m")
    assert len(await chunks.next_batch()) == 2  # nothing was taken
    assert chunks.first() is None  # nothing held
    frames = _stream([_frames(b"a", b"b")], [None], errors=[])
    await frames.prime()
    decoded = frames.first()
    assert decoded is not None
    assert (decoded.id, decoded.model) == ("a", "up")
    batch = await frames.next_batch(raw=True)
    assert [type(item) for item in batch] == [RawFrames]  # still verbatim: nothing was taken
    bad = _stream([_frames(b"bad")], [None], errors=[])
    await bad.prime()
    assert bad.first() is None  # the reader meets the bad frame and reports it


async def test_a_frame_that_cannot_be_decoded_ends_the_stream_after_those_before_it() -> None:
    errors: list[str] = []
    stream = _stream([_frames(b"a", b"bad", b"c"), _chunk()], [None], errors=errors)
    await stream.prime()
    assert [chunk.id for chunk in await stream.next_batch()] == ["a"]  # type: ignore[union-attr]
    with pytest.raises(UpstreamError):
        await stream.next_batch()
    with pytest.raises(UpstreamError):
        await anext(stream)
    assert errors == ["upstream_error"]
    alone = _stream([_frames(b"bad"), _chunk()], [None], errors=errors)
    await alone.prime()
    with pytest.raises(UpstreamError):
        await anext(alone)
    with pytest.raises(UpstreamError):  # the chunk held behind the bad frame never comes
        await anext(alone)
    assert errors == ["upstream_error", "upstream_error"]


async def test_stream_reports_a_mid_stream_failure() -> None:
    async def failing():
        yield [_chunk()]
        raise UpstreamUnavailable("cut", provider="p")

    errors: list[str] = []
    stream = UpstreamStream(
        failing(), UpstreamClocks(SHORT), Timings(start=0), "p", lambda p, e: errors.append(e.code)
    )
    await stream.prime()
    await anext(stream)
    with pytest.raises(UpstreamUnavailable):
        await anext(stream)
    assert errors == ["upstream_unavailable"]
    await stream.aclose()


async def test_end_hooks_run_once_when_the_stream_ends_with_the_last_usage() -> None:
    usage = Usage(input=2, output=3)
    stream = _stream(
        [_chunk()], [Chunk(id="c", model="", choices=[], usage=usage), None], errors=[]
    )
    calls: list[tuple[str, Usage | None, int]] = []
    stream.when_over(lambda u, g: calls.append(("plain", u, g)))

    async def awaited(u: Usage | None, g: int) -> None:
        calls.append(("awaited", u, g))

    stream.when_over(awaited, meters=True)
    await stream.prime()
    assert len(await stream.next_batch()) == 1
    assert len(await stream.next_batch()) == 1
    assert calls == []  # the end marker came with the last batch: not over until it is read
    assert await stream.next_batch() == []
    assert calls == [("plain", usage, 0), ("awaited", usage, 0)]  # in order, before the end
    await stream.aclose()
    assert len(calls) == 2


async def test_end_hooks_run_on_a_failure_and_on_an_early_close() -> None:
    async def failing():
        yield [_chunk()]
        raise UpstreamUnavailable("cut", provider="p")

    failed: list[Usage | None] = []
    stream = UpstreamStream(
        failing(), UpstreamClocks(SHORT), Timings(start=0), "p", lambda p, e: None
    )
    stream.when_over(lambda u, g: failed.append(u))
    await stream.prime()
    await anext(stream)
    with pytest.raises(UpstreamUnavailable):
        await anext(stream)
    assert failed == [None]
    closed: list[int] = []
    early = _stream([_chunk()], [_chunk(), None], errors=[])
    early.when_over(lambda u, g: closed.append(g), meters=True)
    await early.prime()
    await early.next_batch()
    await early.aclose()
    await early.aclose()
    assert closed == [0]  # closed early: a chunk with no text generated nothing


def _word(text: str) -> Chunk:
    return Chunk(id="c", model="", choices=[ChunkChoice(index=0, delta=Delta(content=text))])


@pytest.mark.parametrize("usage", [None, Usage(input=1, output=2)])
@pytest.mark.parametrize("by_batch", [True, False])
async def test_a_metered_stream_past_the_hold_is_charged_for_all_it_passed(
    by_batch: bool, usage: Usage | None
) -> None:
    """The stream holds what it passes for a metering hook itself (EndHooks.held): past
    HELD_ITEMS the held items are read and let go, and the estimate still counts every one;
    a usage that scrolled out of the hold is still the one reported."""
    words = [[_word("abcd")] for _ in range(HELD_ITEMS * 2 + 3)]
    first = [Chunk(id="c", model="", choices=[], usage=usage)] if usage else [_word("abcd")]
    stream = _stream(first, *words, [None], errors=[])
    ended: list[tuple[Usage | None, int]] = []
    stream.when_over(lambda u, g: ended.append((u, g)), meters=True)
    await stream.prime()
    if by_batch:
        while await stream.next_batch():
            pass
    else:
        async for _ in stream:
            pass
    generated = 0 if usage else len(words) + 1  # four characters, one token, per word
    assert ended == [(usage, generated)]
