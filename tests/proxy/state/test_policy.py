"""proxy/state/policy.py: each use's view of the shared store and its failure policy, and the
limits plugin applying ``local``, ``open`` and ``closed`` when Redis is down."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import structlog

from plugins.limits import LimitExceeded, LimitsOptions, LimitsPlugin
from proxy.core.canonical import Call, Message, Principal, RateLimits
from proxy.core.metrics import Metrics
from proxy.core.plugin import compose
from proxy.runtime.plugins import PluginContext
from proxy.state.config import BreakerConfig, OnUnavailable, RedisConfig, StateConfig
from proxy.state.memory_store import MemoryStore
from proxy.state.policy import SharedState, StateUnavailable
from proxy.state.store import RateBucket, StoreUnavailable
from tests.engines import RedisServer
from tests.faults import FakeClock
from tests.plugins.scripted import ScriptedUpstream, router, sample
from tests.waiting import until

DOWN_URL = "redis://127.0.0.1:9/0"  # the discard port: nothing listens


def redis_state(url: str, metrics: Metrics, **policies: str) -> SharedState:
    return SharedState(
        StateConfig(
            backend="redis",
            redis=RedisConfig(url=url, breaker=BreakerConfig(failures=1, cooldown_ms=50)),
            on_unavailable=OnUnavailable(**policies),
        ),
        metrics,
    )


@pytest.fixture
async def down() -> AsyncIterator[tuple[SharedState, Metrics]]:
    metrics = Metrics()
    state = redis_state(DOWN_URL, metrics)
    await state.start()
    yield state, metrics
    await state.close()


async def test_the_memory_backend_is_one_store_for_every_use():
    metrics = Metrics()
    state = SharedState(StateConfig(), metrics)
    assert isinstance(state.store, MemoryStore)
    assert {id(state.store_for(use)) for use in ("limits", "budgets", "cache", "health")} == {
        id(state.store)
    }
    assert not state.shared
    assert sample(metrics, "crossway_state_up", node="memory") == 1


async def test_redis_down_at_start_the_gateway_state_still_starts(down):
    state, metrics = down
    assert sample(metrics, "crossway_state_up", node="127.0.0.1:9") == 0
    assert state.shared


async def test_local_uses_answer_from_this_process_and_count_it(down):
    state, metrics = down
    limits = state.store_for("limits")
    bucket = RateBucket("crossway:limits:rpm:key:k", 1, 2)
    taken = [(await limits.rate_take([bucket]))[0].allowed for _ in range(3)]
    assert taken == [True, True, False], "counted locally, the limit still holds"
    assert sample(metrics, "crossway_state_degraded_total", use="limits", decision="local") == 3
    health = state.store_for("health")
    await health.set("crossway:health:ejected:p/m", b"1", ttl=30)
    assert await health.ttl("crossway:health:ejected:p/m") is not None


async def test_open_and_closed_uses_raise_to_their_caller(down):
    state, _ = down
    for use in ("budgets", "cache"):
        with pytest.raises(StoreUnavailable):
            await state.store_for(use).get("crossway:x")  # type: ignore[arg-type]
    assert state.policy("budgets") == "closed"
    assert state.policy("cache") == "open"


async def test_a_use_goes_back_to_the_shared_store_when_redis_returns(own_redis: RedisServer):
    own_redis.kill()
    metrics = Metrics()
    state = redis_state(own_redis.url, metrics)
    await state.start()
    try:
        limits = state.store_for("limits")
        await limits.set("crossway:k", b"local")
        own_redis.start()
        await until(lambda: state.redis is not None and state.redis.up, seconds=10)
        assert sample(metrics, "crossway_state_up", node=f"127.0.0.1:{own_redis.port}") == 1
        assert await limits.get("crossway:k") is None  # the shared store's answer
        await limits.set("crossway:k", b"shared")
        assert await state.store.get("crossway:k") == b"shared"
    finally:
        await state.close()


def limited_call(resolver) -> Call:
    return Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message("user", "hi")],
        deployments=resolver.resolve("m"),
        principal=Principal(key_id="k", limits=RateLimits(rpm=1, max_parallel=1)),
    )


@pytest.mark.parametrize("policy", ["local", "open", "closed"])
async def test_the_limits_plugin_follows_its_policy(policy: str):
    metrics = Metrics()
    state = redis_state(DOWN_URL, metrics, limits=policy)
    await state.start()
    try:
        resolver = router({"m": ["p/model"]})
        context = PluginContext(
            resolver.resolve, metrics, structlog.get_logger(), state.store, state=state
        )
        plugin = LimitsPlugin(LimitsOptions(), context)
        chain = compose([plugin], ScriptedUpstream(FakeClock()))
        outcomes = []
        for _ in range(2):
            try:
                await chain(limited_call(resolver))
                outcomes.append("ok")
            except LimitExceeded:
                outcomes.append("429")
            except StateUnavailable as error:
                outcomes.append(f"{error.status} {error.code}")
        expected = {
            "local": ["ok", "429"],
            "open": ["ok", "ok"],
            "closed": ["503 state_unavailable"] * 2,
        }
        assert outcomes == expected[policy]
        decisions = {"local": "local", "open": "open", "closed": "closed"}
        counted = sample(
            metrics, "crossway_state_degraded_total", use="limits", decision=decisions[policy]
        )
        assert counted >= 2
    finally:
        await state.close()


async def test_slots_held_locally_meanwhile_are_released_locally():
    # A key with max_parallel 1 served one request at a time through an outage: each
    # admission answered by the local store is settled there, so none stays held.
    metrics = Metrics()
    state = redis_state(DOWN_URL, metrics, limits="local")
    await state.start()
    try:
        resolver = router({"m": ["p/model"]})
        context = PluginContext(
            resolver.resolve, metrics, structlog.get_logger(), state.store, state=state
        )
        chain = compose([LimitsPlugin(LimitsOptions(), context)], ScriptedUpstream(FakeClock()))
        principal = Principal(key_id="k", limits=RateLimits(max_parallel=1, tpm=10_000))
        for _ in range(5):
            call = limited_call(resolver)
            call.principal = principal
            await chain(call)  # a slot still held would refuse it
        assert state.redis is not None
        assert not state.redis._pending, "nothing was queued for Redis"
    finally:
        await state.close()


async def test_budgets_counted_locally_while_redis_is_down():
    metrics = Metrics()
    state = redis_state(DOWN_URL, metrics, budgets="local")
    await state.start()
    try:
        budgets = state.store_for("budgets")
        keys, ttls = ["crossway:spend:key:k:all", "crossway:spend:team:t:all"], [None, None]
        assert await budgets.incr_within(keys, 4, [5, 5], ttls) == (None, [4, 4])
        assert await budgets.incr_within(keys, 4, [5, 5], ttls) == (None, [8, 8])
        assert await budgets.incr_within(keys, 4, [5, 5], ttls) == (0, [8, 8])
        assert (
            sample(metrics, "crossway_state_degraded_total", use="budgets", decision="local") == 3
        )
        budgets.incr_later(keys, -3, ttls)  # a correction, not waited for: counted locally too

        def local() -> float:
            return sample(metrics, "crossway_state_degraded_total", use="budgets", decision="local")

        await until(lambda: local() == 4, what="the correction applied locally")
        assert await budgets.incr_within(keys, 0, None, ttls) == (None, [5, 5])
    finally:
        await state.close()
    closed = redis_state(DOWN_URL, Metrics())
    await closed.start()
    try:
        with pytest.raises(StoreUnavailable):
            await closed.store_for("budgets").incr_within(["crossway:spend:k"], 1, None, [None])
    finally:
        await closed.close()


def test_kept_objects_are_made_once_per_process_state() -> None:
    state = SharedState(StateConfig(), Metrics())
    made: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    first = state.keep("plugin:thing", make)
    assert state.keep("plugin:thing", make) is first
    assert state.keep("plugin:other", make) is not first
    assert len(made) == 2
    assert SharedState(StateConfig(), Metrics()).keep("plugin:thing", make) is not first


async def test_the_gauge_follows_a_redis_killed_under_concurrent_operations(
    own_redis: RedisServer,
):
    # What /metrics serves, read after Redis dies under 100 concurrent budget reservations (the
    # issue saw it stay 1 while budgets refused with 503): 0 for that node until it is back.
    metrics = Metrics()
    config = RedisConfig(url=own_redis.url, breaker=BreakerConfig(failures=3, cooldown_ms=100))
    state = SharedState(StateConfig(backend="redis", redis=config), metrics)
    await state.start()
    node = f'node="127.0.0.1:{own_redis.port}"'
    budgets = state.store_for("budgets")  # closed: raises while Redis is unavailable

    async def reserve(i: int) -> bool:
        try:
            await budgets.incr_within([f"crossway:spend:key:k{i}:all"], 1, [10], [None])
        except StoreUnavailable:
            return False
        return True

    try:
        assert f"crossway_state_up{{{node}}} 1.0" in metrics.render().decode()
        assert all(await asyncio.gather(*(reserve(i) for i in range(100))))
        own_redis.kill()
        assert not any(await asyncio.gather(*(reserve(i) for i in range(100))))
        assert f"crossway_state_up{{{node}}} 0.0" in metrics.render().decode()
        await asyncio.sleep(0.3)  # probes fail meanwhile: still 0
        assert f"crossway_state_up{{{node}}} 0.0" in metrics.render().decode()
        own_redis.start()
        await until(lambda: f"crossway_state_up{{{node}}} 1.0" in metrics.render().decode())
    finally:
        await state.close()
