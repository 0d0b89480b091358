"""proxy/upstream.py: the clocks' single-timer guard and the stream's batching contract."""

from __future__ import annotations

import asyncio

import pytest

from proxy.canonical import Chunk, Timings
from proxy.errors import UpstreamUnavailable
from proxy.providers.base import Timeouts
from proxy.upstream import UpstreamStream, _Clocks

SHORT = Timeouts(first_byte=0.05, idle=0.05, total=5)


async def test_a_wait_past_the_deadline_raises_timeout_error() -> None:
    clocks = _Clocks(SHORT)
    with pytest.raises(TimeoutError), clocks:
        await asyncio.sleep(1)
    assert clocks.clock == "first_byte"
    clocks.close()


async def test_waits_within_moving_deadlines_never_expire() -> None:
    clocks = _Clocks(SHORT)
    for _ in range(4):  # 4 x 0.03 s > one 0.05 s deadline, but each wait is within its own
        with clocks:
            await asyncio.sleep(0.03)
        clocks.next_is_idle()
    assert clocks.clock == "idle"
    clocks.close()


async def test_the_timer_firing_between_waits_cancels_nothing() -> None:
    clocks = _Clocks(SHORT)
    with clocks:
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)  # the deadline passes while the caller is busy elsewhere
    clocks.next_is_idle()
    with clocks:
        await asyncio.sleep(0.01)  # a fresh deadline: no expiry
    clocks.close()


async def test_an_outside_cancellation_stays_a_cancellation() -> None:
    clocks = _Clocks(Timeouts(first_byte=5, idle=5, total=5))

    async def wait() -> None:
        with clocks:
            await asyncio.sleep(1)

    task = asyncio.ensure_future(wait())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    clocks.close()


def _chunk() -> Chunk:
    return Chunk(id="c", model="", choices=[])  # a wire format that does not name the model


async def _batches(*batches: list[Chunk | None]):
    for batch in batches:
        yield batch


async def test_stream_hands_over_what_arrived_together_and_names_the_model() -> None:
    errors: list[str] = []
    stream = UpstreamStream(
        _batches([_chunk(), _chunk()], [_chunk(), None]),
        _Clocks(SHORT),
        Timings(start=0),
        "p",
        lambda provider, error: errors.append(error.code),
        model="m",
    )
    await stream.prime()
    first = await anext(stream)
    rest = stream.take_ready()
    assert (len(rest), stream.ended) == (1, False)
    last = await anext(stream)
    assert stream.ended
    assert stream.take_ready() == []
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    assert {first.model, rest[0].model, last.model} == {"m"}
    await stream.aclose()
    assert errors == []


async def test_stream_reports_a_mid_stream_failure() -> None:
    async def failing():
        yield [_chunk()]
        raise UpstreamUnavailable("cut", provider="p")

    errors: list[str] = []
    stream = UpstreamStream(
        failing(), _Clocks(SHORT), Timings(start=0), "p", lambda p, e: errors.append(e.code)
    )
    await stream.prime()
    await anext(stream)
    with pytest.raises(UpstreamUnavailable):
        await anext(stream)
    assert errors == ["upstream_unavailable"]
    await stream.aclose()
