"""Budget corrections are not lost (proxy/governance/budgets/counters.py): one the store does not
take is owed again and sent again — riding in the next reservation or on its own, backing off
while the store is down — until it lands; past the cap, and at close, what is dropped is
reported. Against a store that refuses on demand, and against a real Redis stalled mid-run,
whose counter ends equal to what the requests cost."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from proxy.core.canonical import Budget
from proxy.governance.budgets.counters import SpendCounters
from proxy.governance.budgets.plans import day_of
from proxy.state.config import BreakerConfig, RedisConfig
from proxy.state.memory_store import MemoryStore
from proxy.state.redis import RedisStore
from proxy.state.store import StoreUnavailable
from tests.engines import RedisServer, redis_command

DAY_BUDGET = Budget(max_usd=1000.0, period="1d")
SOFT_BUDGET = Budget(max_usd=1000.0, soft_usd=900.0, period="1d")


class Refusing(MemoryStore):
    """A store that must be awaited, as a remote one; while ``down`` its adds raise
    :class:`StoreUnavailable` and change nothing (what a remote store guarantees by voiding
    them). ``sends`` counts the adds asked for."""

    incr_within_now = None  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.sends = 0

    async def incr_within(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
    ) -> tuple[int | None, list[int]]:
        self.sends += 1
        if self.down:
            raise StoreUnavailable("down")
        return MemoryStore.incr_within_now(self, keys, amount, limits, ttls)

    def value(self, scope: str, ident: str) -> int:
        entry = self._data.get(f"crossway:spend:{scope}:{ident}:d{day_of(time.time())}")
        return 0 if entry is None else int(entry[0])


async def eventually(condition: Callable[[], bool], *, seconds: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.01)


def scopes(ident: str, budget: Budget = DAY_BUDGET) -> Any:
    return (("key", ident, budget),)


async def test_a_correction_the_store_did_not_take_is_sent_again_until_it_lands() -> None:
    store = Refusing()
    counters = SpendCounters(store)
    reservation, _ = await counters.reserve(scopes("k"), 100)
    assert reservation is not None
    store.down = True
    assert counters.correct(reservation, 30)
    await eventually(lambda: store.sends >= 4, seconds=10, what="sends that fail")
    assert store.value("key", "k") == 100, "nothing taken while down"
    store.down = False
    await eventually(lambda: store.value("key", "k") == 30, seconds=10, what="the correction")
    sends = store.sends
    await asyncio.sleep(0.1)
    assert store.sends == sends, "nothing is owed any more"
    await counters.close()


async def test_sends_back_off_while_the_store_is_down() -> None:
    store = Refusing()
    counters = SpendCounters(store)
    reservation, _ = await counters.reserve(scopes("k"), 100)
    assert reservation is not None
    store.down = True
    started = store.sends
    counters.correct(reservation, 30)
    await asyncio.sleep(1.0)
    # At once, then after 0.05, 0.1, 0.2, 0.4 s ...: at most six sends in a second (fewer on
    # a slow machine), not one a loop turn.
    assert 2 <= store.sends - started <= 6
    store.down = False
    await counters.close()


async def test_a_reservation_that_failed_owes_again_what_it_carried() -> None:
    store = Refusing()
    counters = SpendCounters(store)
    first, _ = await counters.reserve(scopes("k"), 100)
    assert first is not None
    counters.correct(first, 30)  # owed: -70, carried by the next reservation
    store.down = True
    with pytest.raises(StoreUnavailable):
        await counters.reserve(scopes("k"), 100)
    store.down = False
    await eventually(lambda: store.value("key", "k") == 30, seconds=10, what="the correction")
    await counters.close()


async def test_a_soft_limit_settlement_that_failed_is_owed() -> None:
    store = Refusing()
    counters = SpendCounters(store)
    reservation, _ = await counters.reserve(scopes("k", SOFT_BUDGET), 100)
    assert reservation is not None
    store.down = True
    with pytest.raises(StoreUnavailable):
        await counters.settle(reservation, 40)
    store.down = False
    await eventually(lambda: store.value("key", "k") == 40, seconds=10, what="the correction")
    await counters.close()


async def test_past_the_cap_and_at_close_what_is_dropped_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("proxy.governance.budgets.counters.MAX_OWING", 2)
    store = Refusing()
    lost: list[int] = []
    counters = SpendCounters(store, on_lost=lost.append)
    reservations = []
    for ident in ("a", "b", "c"):
        reservation, _ = await counters.reserve(scopes(ident), 100)
        reservations.append(reservation)
    store.down = True
    for reservation, used in zip(reservations, (10, 20, 30), strict=True):
        assert reservation is not None
        counters.correct(reservation, used)
    assert lost == [-90], "the oldest owed is dropped past two"
    await counters.close()  # still down: what is owed is dropped
    assert sorted(lost) == [-90, -80, -70]
    assert [store.value("key", ident) for ident in "abc"] == [100, 100, 100]


# -- against Redis ---------------------------------------------------------------------------


@contextlib.contextmanager
def stalled(server: RedisServer) -> Iterator[None]:
    """The server stopped (SIGSTOP) for the block: it still receives, and runs what it received
    when it resumes."""
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


async def test_the_counter_ends_equal_to_the_cost_after_redis_stalled_mid_run(
    own_redis: RedisServer,
) -> None:
    # Ten requests reserve; Redis stalls; they end (their corrections time out, as does a
    # reservation sent meanwhile, whose answer never comes); Redis resumes and runs what it
    # had received. Every timed-out add is voided and every correction sent again: the counter
    # is what the requests cost, to the nano-dollar.
    config = RedisConfig(
        url=own_redis.url, timeout_ms=300, breaker=BreakerConfig(failures=1, cooldown_ms=100)
    )
    store = RedisStore(config)
    await store.start()
    lost: list[int] = []
    counters = SpendCounters(store, on_lost=lost.append)
    key = f"crossway:spend:key:k:d{day_of(time.time())}"
    try:
        reservations = [(await counters.reserve(scopes("k"), 1_000))[0] for _ in range(10)]
        with stalled(own_redis):
            for index, reservation in enumerate(reservations):
                assert reservation is not None
                counters.correct(reservation, 100 + index)
            await asyncio.sleep(0.1)  # the corrections are sent, not answered
            with pytest.raises(StoreUnavailable):
                await counters.reserve(scopes("k"), 1_000)
        expected = sum(100 + index for index in range(10))

        def counted() -> int:
            reply = redis_command(own_redis.port, "GET", key)
            return (
                int(reply.split(b"\r\n")[1])
                if reply.startswith(b"$") and reply[1:3] != b"-1"
                else 0
            )

        await eventually(lambda: counted() == expected, seconds=15, what="the corrections")
        await asyncio.sleep(0.3)  # nothing the stalled server ran late changes it
        assert counted() == expected
        assert lost == []
    finally:
        await counters.close()
        await store.close()
