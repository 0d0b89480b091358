"""proxy/http/drain.py: requests in flight may finish until the deadline; then those still running
are cancelled, and each may claim that cancellation once to answer — any other one it may not."""

from __future__ import annotations

import asyncio

import pytest

from proxy.http.drain import Drain, shutting_down
from tests.waiting import until


async def _request(drain: Drain, work: asyncio.Future[None]) -> str:
    """A request as a route runs it: tracked, answering ``shutting down`` if the drain ended it."""
    drain.enter()
    try:
        await work
        return "finished"
    except asyncio.CancelledError:
        if not drain.claim():
            raise
        return "ended"


async def test_requests_that_finish_in_time_are_not_ended() -> None:
    drain = Drain()
    work = asyncio.get_running_loop().create_future()
    request = asyncio.ensure_future(_request(drain, work))
    await until(lambda: drain.running == 1, what="the request to start")
    stopping = asyncio.ensure_future(drain.stop(600))
    await asyncio.sleep(0)  # one loop turn: the drain waits
    assert not stopping.done()
    work.set_result(None)
    assert await stopping == 0
    assert await request == "finished"
    assert drain.running == 0


async def test_at_the_deadline_the_running_requests_are_ended_and_answer() -> None:
    drain = Drain()
    never = asyncio.get_running_loop().create_future()
    requests = [asyncio.ensure_future(_request(drain, never)) for _ in range(3)]
    await until(lambda: drain.running == 3, what="the requests to start")
    assert await drain.stop(0) == 3
    assert [await request for request in requests] == ["ended"] * 3
    assert drain.running == 0


async def test_a_request_that_starts_while_the_drain_waits_is_waited_for() -> None:
    drain = Drain()
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    requests = [asyncio.ensure_future(_request(drain, first))]
    await until(lambda: drain.running == 1, what="the first request")
    stopping = asyncio.ensure_future(drain.stop(600))
    requests.append(asyncio.ensure_future(_request(drain, second)))
    await until(lambda: drain.running == 2, what="the second request")
    first.set_result(None)
    await until(lambda: drain.running == 1, what="the first to finish")
    assert not stopping.done()
    second.set_result(None)
    assert await stopping == 0
    assert [await request for request in requests] == ["finished", "finished"]


async def test_another_cancellation_is_not_claimed() -> None:
    # A client that went away cancels the request too: that one must propagate.
    drain = Drain()
    request = asyncio.ensure_future(_request(drain, asyncio.get_running_loop().create_future()))
    await until(lambda: drain.running == 1, what="the request to start")
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert drain.running == 0


async def test_the_drains_cancellation_is_claimed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("proxy.http.drain.ENDING_GRACE", 0)
    drain = Drain()
    claims: list[bool] = []

    async def answering_slowly() -> None:
        drain.enter()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            claims.append(drain.claim())
            try:  # writing the last answer, when the server gives up on it too
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                claims.append(drain.claim())
                raise

    request = asyncio.ensure_future(answering_slowly())
    await until(lambda: drain.running == 1, what="the request to start")
    assert await drain.stop(0) == 1  # the grace passes: the request is still writing
    assert not request.done()
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert claims == [True, False]


def test_the_error_of_an_ended_request() -> None:
    error = shutting_down()
    assert (error.status, error.code, error.should_retry) == (503, "server_shutting_down", True)
    assert error.response_headers() == {"x-should-retry": "true"}
