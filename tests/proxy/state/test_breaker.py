"""proxy/state/breaker.py: the breaker's transitions (each one told, for the crossway_state_up
gauge), a guarded server refused at once while its breaker is open, and the prober that runs
only while something is down."""

from __future__ import annotations

import asyncio

import pytest

from proxy.state.breaker import CircuitBreaker, Guarded, Prober
from proxy.state.config import RedisAddress
from proxy.state.resp import RespConnection
from proxy.state.store import StoreUnavailable
from tests.engines import RedisServer, free_port
from tests.faults import FakeClock
from tests.waiting import until


def test_every_transition_is_told_once() -> None:
    clock = FakeClock()
    told: list[bool] = []
    breaker = CircuitBreaker(3, 1.0, told.append, clock)
    breaker.failed()
    breaker.failed()
    breaker.succeeded()  # a success resets the count
    breaker.failed()
    breaker.failed()
    assert not breaker.open
    breaker.failed()
    assert breaker.open
    breaker.failed()
    breaker.trip()
    assert told == [False]
    breaker.succeeded()
    breaker.succeeded()
    assert told == [False, True]


def test_a_probe_is_due_every_cooldown_while_open() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(1, 2.0, None, clock)
    assert not breaker.probe_due()  # closed: nothing to probe
    breaker.trip()
    assert not breaker.probe_due()
    clock.advance(2.0)
    assert breaker.probe_due()
    assert not breaker.probe_due()  # the next one is a cooldown later
    clock.advance(2.0)
    assert breaker.probe_due()
    with pytest.raises(ValueError, match="failures"):
        CircuitBreaker(0, 1.0)


async def test_a_guarded_server_is_refused_at_once_while_its_breaker_is_open() -> None:
    told: list[bool] = []
    address = RedisAddress(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens
    server = Guarded("n", RespConnection(address, 1.0), CircuitBreaker(2, 60.0, told.append))
    try:
        for _ in range(2):
            with pytest.raises(StoreUnavailable, match="connect"):
                await server.call("PING")
        assert told == [False]
        with pytest.raises(StoreUnavailable, match="circuit open"):
            await server.call("PING")
    finally:
        await server.connection.close()


async def test_a_server_made_ready_closes_its_breaker(own_redis: RedisServer) -> None:
    told: list[bool] = []
    connection = RespConnection(RedisAddress(own_redis.url), 2.0)
    server = Guarded("n", connection, CircuitBreaker(1, 60.0, told.append))

    async def prepare(call) -> None:
        assert await call("PING") == b"PONG"

    try:
        server.breaker.trip()
        await server.ready(prepare)  # whatever the breaker says: the owner's probe
        assert told == [False, True]
        assert await server.call("PING") == b"PONG"
        own_redis.kill()
        with pytest.raises(StoreUnavailable):
            await server.ready(prepare)
        assert told == [False, True], "a failed probe leaves the breaker as it is"
    finally:
        await connection.close()


async def test_the_prober_runs_while_down_and_ends_by_itself() -> None:
    down = True
    probes = 0

    async def probe() -> None:
        nonlocal probes, down
        probes += 1
        if probes < 3:
            raise StoreUnavailable("still down")  # a failed try: the next comes later
        down = False

    prober = Prober(0.001, lambda: down, probe)
    prober.start()
    prober.start()  # one task at a time
    await until(lambda: not down, what="three probes")
    await until(lambda: prober._task is None, what="the prober to end")
    assert probes == 3
    await prober.close()
    down = True
    prober.start()  # closed: nothing starts
    assert prober._task is None
    await asyncio.sleep(0.01)
    assert probes == 3
