"""In-flight slots as leases (proxy/state/redis.py, proxy/state/memory_store.py): per holder, ended
once by their settlement, renewed while their request runs, ended on their own when their
process is gone; and operations the Redis store gave up on (a timeout, a cancellation), which
hold nothing and add nothing even when a stalled server runs them later.

The semantic tests run against both stores. The Redis-only ones stall a server of their own
with SIGSTOP (it keeps what the gateway sent in its socket and runs it on SIGCONT, as a real
stall does) or refuse its writes (``maxmemory``), and read the keys from Redis directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from proxy.state.config import BreakerConfig, RedisConfig
from proxy.state.memory_store import MemoryStore
from proxy.state.redis import RedisStore
from proxy.state.settlements import Retries
from proxy.state.store import Admission, LimitPlan, Store, StoreUnavailable
from tests.engines import RedisServer, free_port, redis_command


async def eventually(condition: Callable[[], bool], *, seconds: float, what: str) -> None:
    """Poll ``condition`` every 20 ms (the store's tasks run meanwhile) for up to ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.02)


def integer(reply: bytes) -> int:
    """A RESP integer or bulk-string reply as an int (a nil bulk string: 0)."""
    if reply.startswith(b"$-1"):
        return 0
    if reply.startswith(b"$"):
        return int(reply.split(b"\r\n")[1])
    return int(reply[1:].split(b"\r\n")[0])


def leases(port: int, slot: str) -> int:
    """How many leases the slot's set holds (ended ones not yet dropped included)."""
    return integer(redis_command(port, "ZCARD", f"crossway:leases:{slot}"))


def count(port: int, slot: str) -> int:
    """The slot's count as readers see it (``GET``; missing: 0)."""
    return integer(redis_command(port, "GET", f"crossway:{slot}"))


async def settled(store: Store) -> None:
    """Let a Redis store's pending settlements reach Redis (the memory store applies them at
    once)."""
    if isinstance(store, RedisStore):
        await store.flush()


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    url = request.getfixturevalue("redis_url")
    redis = RedisStore(RedisConfig(url=url, timeout_ms=2000))
    await redis.start()
    yield redis
    await redis.close()


# -- the same semantics on both stores -------------------------------------------------------


async def test_a_lease_is_its_holder_s_and_is_ended_once(store: Store) -> None:
    plan = LimitPlan(slots=[("s:key", 2), ("s:team", 3)])
    first, second = await store.admit(plan, 0), await store.admit(plan, 0)
    assert first.holder
    assert second.holder not in (0, first.holder)
    assert await store.admit(plan, 0) == Admission(full=0)
    assert await store.get("s:key") == b"2"
    store.settle(first, 0)
    store.settle(first, 0)  # again: it ends no other holder's lease
    await settled(store)
    assert (await store.get("s:key"), await store.get("s:team")) == (b"1", b"1")
    third = await store.admit(plan, 0)
    assert third.full is None
    for admission in (second, third):
        store.settle(admission, 0)
    await settled(store)
    assert (await store.get("s:key"), await store.get("s:team")) == (None, None)


async def test_a_refused_or_full_admission_holds_no_lease(store: Store) -> None:
    plan = LimitPlan(slots=[("s:key", 5)], requests=[("rpm", 1)])
    admitted = await store.admit(plan, 0)
    refused = await store.admit(plan, 0)  # the one request a minute is taken
    assert (admitted.refused, refused.refused) == (None, 0)
    assert (bool(admitted.holder), refused.holder) == (True, 0)
    assert await store.get("s:key") == b"1"
    assert (await store.admit(LimitPlan(slots=[("s:key", 1)]), 0)).full == 0
    assert (await store.admit(LimitPlan(requests=[("other", 5)]), 0)).holder == 0, "no slots"


async def test_holders_and_counts_agree_between_the_stores(redis_url: str) -> None:
    # Random admissions and settlements (some settled twice) on both stores: the same answers
    # and the same counts after every step.
    redis = RedisStore(RedisConfig(url=redis_url, timeout_ms=2000))
    await redis.start()
    memory = MemoryStore()
    rng = random.Random(43)
    plans = [LimitPlan(slots=[(f"s:{k}", rng.randrange(1, 4)), ("s:team", 4)]) for k in "ab"]
    held: list[tuple[Admission, Admission]] = []
    try:
        for step in range(150):
            if held and rng.random() < 0.45:
                pair = held[rng.randrange(len(held))]
                if rng.random() < 0.7:
                    held.remove(pair)  # else settled again later: nothing more is released
                redis.settle(pair[0], 0)
                memory.settle(pair[1], 0)
                await redis.flush()
            else:
                plan = rng.choice(plans)
                got, want = await redis.admit(plan, 0), await memory.admit(plan, 0)
                assert got.full == want.full, step
                if got.full is None:
                    held.append((got, want))
            for key in ("s:a", "s:b", "s:team"):
                assert await redis.get(key) == await memory.get(key), (step, key)
    finally:
        await redis.close()


# -- Redis: renewal and expiry ---------------------------------------------------------------


@pytest.fixture
def short_leases(monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """Leases of 2 s renewed every 0.4 s (for the stores made after it): a renewal has 1.6 s
    to land, room for a loaded machine."""
    monkeypatch.setattr("proxy.state.redis.LEASE_TTL", 2.0)
    monkeypatch.setattr("proxy.state.redis.RENEW_EVERY", 0.4)
    return 2.0, 0.4


async def test_a_running_request_s_lease_outlives_its_ttl_and_ends_when_its_process_is_gone(
    redis_url: str, short_leases: tuple[float, float]
) -> None:
    ttl, _ = short_leases
    plan = LimitPlan(slots=[("s:key", 1)])
    holding = RedisStore(RedisConfig(url=redis_url, timeout_ms=2000))
    other = RedisStore(RedisConfig(url=redis_url, timeout_ms=2000))
    await holding.start()
    await other.start()
    try:
        assert (await holding.admit(plan, 0)).full is None
        await asyncio.sleep(2.5 * ttl)  # renewed meanwhile: still held
        assert (await other.admit(plan, 0)).full == 0
        await holding.close()  # the process is gone: nobody renews or releases its lease
        loop = asyncio.get_running_loop()
        gone = loop.time()
        while (admission := await other.admit(plan, 0)).full is not None:
            assert loop.time() - gone < ttl + 3.0, "the lease never ended"
            await asyncio.sleep(0.05)
        other.settle(admission, 0)
    finally:
        await holding.close()
        await other.close()


async def test_a_lease_a_failover_lost_is_taken_again_by_its_renewal(
    redis_server: RedisServer, redis_url: str, short_leases: tuple[float, float]
) -> None:
    store = RedisStore(RedisConfig(url=redis_url, timeout_ms=2000))
    await store.start()
    try:
        admission = await store.admit(LimitPlan(slots=[("s:key", 3)]), 0)
        assert count(redis_server.port, "s:key") == 1
        # What a replica promoted before the write reached it would hold: nothing.
        redis_command(redis_server.port, "DEL", "crossway:s:key", "crossway:leases:s:key")
        await eventually(
            lambda: count(redis_server.port, "s:key") == 1, seconds=5, what="the lease back"
        )
        store.settle(admission, 0)
        await store.flush()
        assert leases(redis_server.port, "s:key") == 0
    finally:
        await store.close()


# -- Redis: operations given up on -----------------------------------------------------------


@contextlib.contextmanager
def stalled(server: RedisServer) -> Iterator[None]:
    """The server stopped (SIGSTOP) for the block: it still receives, and runs what it
    received when it resumes."""
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


@pytest.fixture
async def impatient(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RedisStore]:
    """A store that gives up after 300 ms, probes every 100 ms, and whose leases last a minute
    (so that a slot freed within the test was released, not expired)."""
    monkeypatch.setattr("proxy.state.redis.LEASE_TTL", 60.0)
    config = RedisConfig(
        url=own_redis.url, timeout_ms=300, breaker=BreakerConfig(failures=1, cooldown_ms=100)
    )
    store = RedisStore(config)
    await store.start()
    yield store
    await store.close()


async def test_an_admission_that_timed_out_holds_no_slot(
    own_redis: RedisServer, impatient: RedisStore
) -> None:
    plan = LimitPlan(slots=[("s:key", 1)])
    impatient.settle(await impatient.admit(plan, 0), 0)  # connected, scripts loaded
    await impatient.flush()
    with stalled(own_redis), pytest.raises(StoreUnavailable):
        await impatient.admit(plan, 0)
    # The stalled server ran the admission when it resumed (or the void first): either way the
    # void leaves the slot free, long before the lease's minute.
    await eventually(
        lambda: leases(own_redis.port, "s:key") == 0 and len(impatient._book.retries) == 0,
        seconds=10,
        what="the admission voided",
    )
    assert count(own_redis.port, "s:key") == 0
    assert (await impatient.admit(plan, 0)).full is None, "the slot is free"


async def test_a_cancelled_admission_holds_no_slot(
    own_redis: RedisServer, impatient: RedisStore
) -> None:
    plan = LimitPlan(slots=[("s:key", 1)])
    await impatient.hold(["warm"], [1])  # connected, scripts loaded
    with stalled(own_redis):
        admitting = asyncio.ensure_future(impatient.admit(plan, 0))
        await asyncio.sleep(0.05)  # sent, not answered
        admitting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await admitting
    await eventually(
        lambda: leases(own_redis.port, "s:key") == 0 and len(impatient._book.retries) == 0,
        seconds=10,
        what="the admission voided",
    )
    assert (await impatient.admit(plan, 0)).full is None, "the slot is free"


async def test_a_release_that_failed_is_retried_until_it_lands(
    own_redis: RedisServer, impatient: RedisStore
) -> None:
    plan = LimitPlan(slots=[("s:key", 1)])
    admission = await impatient.admit(plan, 0)
    # A replica of a server that is not there: it keeps its data and refuses every write
    # (READONLY), so the release is refused, not run.
    nowhere = ("REPLICAOF", "127.0.0.1", str(free_port()))
    assert redis_command(own_redis.port, *nowhere).startswith(b"+OK")
    try:
        impatient.settle(admission, 0)
        with pytest.raises(StoreUnavailable, match="READONLY"):
            await impatient.flush()  # refused: kept to retry
        await asyncio.sleep(0.3)  # retries refused meanwhile
        assert leases(own_redis.port, "s:key") == 1
    finally:
        assert redis_command(own_redis.port, "REPLICAOF", "NO", "ONE").startswith(b"+OK")
    await eventually(
        lambda: leases(own_redis.port, "s:key") == 0, seconds=10, what="the release retried"
    )
    assert count(own_redis.port, "s:key") == 0


async def test_an_add_that_timed_out_is_voided_so_that_it_can_be_repeated(
    own_redis: RedisServer, impatient: RedisStore
) -> None:
    keys, ttls = ["spend:k"], [None]
    assert await impatient.incr_within(keys, 5, None, ttls) == (None, [5])
    with stalled(own_redis), pytest.raises(StoreUnavailable):
        await impatient.incr_within(keys, -2, [100], ttls)
    await eventually(lambda: len(impatient._book.retries) == 0, seconds=10, what="the add voided")
    await asyncio.sleep(0.2)  # whatever the stalled server still had, it has run
    assert integer(redis_command(own_redis.port, "GET", "crossway:spend:k")) == 5
    # Repeated by its caller (as the budgets repeat a correction): applied once.
    assert await impatient.incr_within(keys, -2, [100], ttls) == (None, [3])


# -- the retry queue -------------------------------------------------------------------------


async def test_retries_keep_the_first_steps_and_report_what_they_drop() -> None:
    down = True
    landed: list[str] = []
    dropped: list[int] = []

    def step(name: str) -> Callable[[], Awaitable[None]]:
        async def send() -> None:
            if down:
                raise StoreUnavailable("down")
            landed.append(name)

        return send

    retries = Retries(cap=2, on_dropped=dropped.append)
    for name in ("first", "second", "third"):  # the third is over the cap
        retries.add(step(name), keep_for=60)
    retries.add(step("brief"), keep_for=0.01)  # over the cap too
    await eventually(lambda: sum(dropped) == 2, seconds=5, what="the drops reported")
    assert len(dropped) == 1, "once an attempt"
    down = False
    await eventually(lambda: len(landed) == 2, seconds=5, what="the kept steps landing")
    assert landed == ["first", "second"]
    assert len(retries) == 0
    await retries.close()
    # A step whose time is up is dropped (a release once its lease has ended).
    down = True
    retries = Retries(on_dropped=dropped.append)
    retries.add(step("late"), keep_for=0.2)
    await eventually(lambda: sum(dropped) == 3, seconds=5, what="the expired step dropped")
    assert len(retries) == 0
    await retries.close()
