"""proxy/upstream/health.py: consecutive failures eject a deployment for a cooldown that grows."""

from __future__ import annotations

import asyncio

import pytest
import structlog.testing

from proxy.core.canonical import Deployment
from proxy.core.metrics import Metrics
from proxy.state.memory_store import MemoryStore
from proxy.upstream.health import Health, HealthConfig
from tests.faults import FakeClock
from tests.plugins.scripted import sample

A, B, C = Deployment("p", "a"), Deployment("p", "b"), Deployment("q", "c")


class Harness:
    def __init__(self, **options) -> None:
        self.clock = FakeClock()
        self.metrics = Metrics()
        self.health = Health(
            HealthConfig(**options),
            MemoryStore(self.clock),
            self.metrics,
            structlog.get_logger("health-test"),
            clock=self.clock,
        )

    async def fail(self, deployment: Deployment, times: int, candidates=(A, B, C)) -> None:
        for _ in range(times):
            await self.health.failed(deployment, candidates, started=self.clock())


async def test_n_consecutive_failures_eject_for_the_cooldown():
    h = Harness(failures=3, cooldown=30)
    await h.fail(A, 2)
    assert await h.health.ejected_for(A) is None
    with structlog.testing.capture_logs() as logs:
        await h.fail(A, 1)
    assert await h.health.ejected_for(A) == pytest.approx(30)
    assert logs[0]["event"] == "deployment_ejected"
    assert logs[0]["deployment"] == "p/a"
    assert sample(h.metrics, "crossway_deployment_ejections_total", provider="p", model="a") == 1
    assert sample(h.metrics, "crossway_deployment_healthy", provider="p", model="a") == 0
    h.clock.advance(29.9)
    assert await h.health.ejected_for(A) == pytest.approx(0.1)
    h.clock.advance(0.1)
    assert await h.health.ejected_for(A) is None


async def test_an_answer_resets_the_count_and_marks_healthy():
    h = Harness(failures=3)
    await h.fail(A, 2)
    await h.health.answered(A)
    await h.fail(A, 2)
    assert await h.health.ejected_for(A) is None
    assert sample(h.metrics, "crossway_deployment_healthy", provider="p", model="a") == 1


async def test_cooldown_grows_with_repeated_ejections_up_to_the_cap():
    h = Harness(failures=1, cooldown=30, max_cooldown=100, memory=600)
    cooldowns = []
    for _ in range(5):
        await h.fail(A, 1)
        left = await h.health.ejected_for(A)
        assert left is not None
        cooldowns.append(round(left))
        h.clock.advance(left)
    assert cooldowns == [30, 60, 90, 100, 100]


async def test_ejections_are_forgotten_after_the_memory_period():
    h = Harness(failures=1, cooldown=30, memory=100)
    await h.fail(A, 1)
    h.clock.advance(30)
    await h.fail(A, 1)
    assert await h.health.ejected_for(A) == pytest.approx(60)
    h.clock.advance(100)  # healthy long enough: the next ejection is a first one again
    await h.fail(A, 1)
    assert await h.health.ejected_for(A) == pytest.approx(30)


async def test_the_last_routable_candidate_of_several_is_never_ejected():
    h = Harness(failures=2)
    await h.fail(A, 2, candidates=(A, B))
    await h.fail(B, 10, candidates=(A, B))
    assert await h.health.ejected_for(A) is not None
    assert await h.health.ejected_for(B) is None


async def test_a_single_candidate_still_cools_down():
    h = Harness(failures=2)
    await h.fail(A, 2, candidates=(A,))
    assert await h.health.ejected_for(A) == pytest.approx(30)


async def test_the_failure_count_expires_with_memory():
    h = Harness(failures=3, memory=10)
    await h.fail(A, 2)
    h.clock.advance(10)
    await h.fail(A, 2)
    assert await h.health.ejected_for(A) is None


def test_zero_failures_disables_ejection():
    assert not Harness(failures=0).health.enabled
    assert Harness().health.enabled


# Envoy's outlier-detection semantics: a burst ejects once; escalation needs a fresh failure.


async def test_failures_of_requests_started_before_the_ejection_are_not_counted():
    h = Harness(failures=5, cooldown=30)
    burst_started = h.clock()
    h.clock.advance(0.001)  # the burst's failures arrive after it was sent
    for _ in range(256):
        await h.health.failed(A, (A,), started=burst_started)
    assert sample(h.metrics, "crossway_deployment_ejections_total", provider="p", model="a") == 1
    assert await h.health.ejected_for(A) == pytest.approx(30)


async def test_failures_while_ejected_are_no_new_evidence():
    h = Harness(failures=2, cooldown=30)
    await h.fail(A, 2, candidates=(A,))
    h.clock.advance(10)  # panic routing sends requests to the ejected deployment
    await h.fail(A, 10, candidates=(A,))
    assert sample(h.metrics, "crossway_deployment_ejections_total", provider="p", model="a") == 1
    assert await h.health.ejected_for(A) == pytest.approx(20)


async def test_escalation_needs_fresh_failures_after_the_cooldown():
    h = Harness(failures=2, cooldown=30)
    await h.fail(A, 2, candidates=(A,))
    h.clock.advance(30)
    assert await h.health.ejected_for(A) is None
    await h.fail(A, 1, candidates=(A,))
    assert await h.health.ejected_for(A) is None, "the count started afresh at the ejection"
    await h.fail(A, 1, candidates=(A,))
    assert await h.health.ejected_for(A) == pytest.approx(60)


async def test_a_failure_ratio_over_the_window_ejects_a_flapping_deployment():
    h = Harness(failures=5, failure_ratio=0.5, ratio_window=30, ratio_min_requests=10)
    for _ in range(4):
        await h.health.answered(A)
        await h.fail(A, 1)
    assert await h.health.ejected_for(A) is None, "9 outcomes: below the minimum"
    await h.health.answered(A)
    await h.fail(A, 1)  # 5 of 10 failed, never 2 in a row
    assert await h.health.ejected_for(A) == pytest.approx(30)


async def test_a_good_failure_ratio_ejects_nothing():
    h = Harness(failures=5, failure_ratio=0.5, ratio_window=30, ratio_min_requests=10)
    for _ in range(30):
        await h.health.answered(A)
        await h.health.answered(A)
        await h.fail(A, 1)
    assert await h.health.ejected_for(A) is None


class YieldingStore(MemoryStore):
    """A store whose every operation lets other tasks run first, as a networked one does."""

    async def get(self, key):
        await asyncio.sleep(0)
        return await super().get(key)

    async def incr(self, key, amount=1, *, ttl=None):
        await asyncio.sleep(0)
        return await super().incr(key, amount, ttl=ttl)

    async def ttl(self, key):
        await asyncio.sleep(0)
        return await super().ttl(key)


async def test_concurrent_failures_through_a_shared_store_eject_once():
    clock = FakeClock()
    metrics = Metrics()
    health = Health(
        HealthConfig(failures=5, cooldown=30),
        YieldingStore(clock),
        metrics,
        structlog.get_logger("health-test"),
        clock=clock,
    )
    started = clock()
    await asyncio.gather(*(health.failed(A, (A,), started=started) for _ in range(64)))
    assert sample(metrics, "crossway_deployment_ejections_total", provider="p", model="a") == 1
    assert await health.ejected_for(A) == pytest.approx(30)


class CountingStore(MemoryStore):
    """A store that counts the operations it is asked for, as round trips to a shared one."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.calls = 0

    async def ttl(self, key):
        self.calls += 1
        return await super().ttl(key)

    async def delete(self, key):
        self.calls += 1
        return await super().delete(key)


def _health(store: MemoryStore, clock: FakeClock, **options) -> Health:
    return Health(
        HealthConfig(**options), store, Metrics(), structlog.get_logger("health-test"), clock=clock
    )


async def test_a_healthy_deployment_costs_a_store_read_once_a_refresh():
    clock = FakeClock()
    store = CountingStore(clock)
    health = _health(store, clock, refresh=1.0)
    for _ in range(100):
        assert await health.ejected_for(A) is None
        await health.answered(A)
    assert store.calls == 2, "one cooldown read and one failure-count reset"
    clock.advance(1.0)
    await health.ejected_for(A)
    await health.answered(A)
    assert store.calls == 4


async def test_an_ejection_by_another_process_is_seen_within_refresh():
    clock = FakeClock()
    store = MemoryStore(clock)
    ejecting, other = _health(store, clock, failures=1), _health(store, clock, failures=1)
    assert await other.ejected_for(A) is None
    await ejecting.failed(A, (A,), started=clock())
    assert await ejecting.ejected_for(A) == pytest.approx(30), "its own ejection: at once"
    clock.advance(1.0)
    assert await other.ejected_for(A) == pytest.approx(29)


async def test_a_failure_makes_the_next_answer_reset_the_count():
    clock = FakeClock()
    health = _health(MemoryStore(clock), clock, failures=3)
    await health.answered(A)  # the count was reset just now
    await health.failed(A, (A, B), started=clock())
    await health.failed(A, (A, B), started=clock())
    await health.answered(A)  # within refresh, yet resets: this process counted a failure
    await health.failed(A, (A, B), started=clock())
    assert await health.ejected_for(A) is None


async def test_refresh_zero_reads_the_store_every_time():
    clock = FakeClock()
    store = CountingStore(clock)
    health = _health(store, clock, refresh=0)
    for _ in range(3):
        await health.ejected_for(A)
        await health.answered(A)
    assert store.calls == 6


async def test_requests_in_flight_share_one_store_read_a_refresh():
    clock = FakeClock()
    store = YieldingCountingStore(clock)
    health = _health(store, clock, refresh=1.0)

    async def request() -> None:
        await health.ejected_for(A)
        await health.answered(A)

    await asyncio.gather(*(request() for _ in range(64)))
    assert store.calls == 2, "one cooldown read and one reset, not one per request"


class YieldingCountingStore(CountingStore):
    """Counts operations, each of which lets other tasks run first (a networked store)."""

    async def ttl(self, key):
        await asyncio.sleep(0)
        return await super().ttl(key)

    async def delete(self, key):
        await asyncio.sleep(0)
        return await super().delete(key)
