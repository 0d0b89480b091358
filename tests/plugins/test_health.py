"""plugins/health.py: consecutive failures eject a deployment for a cooldown that grows."""

from __future__ import annotations

import pytest
import structlog.testing

from plugins.health import Health, HealthConfig
from proxy.canonical import Deployment
from proxy.metrics import Metrics
from proxy.store import MemoryStore
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
        )

    async def fail(self, deployment: Deployment, times: int, candidates=(A, B, C)) -> None:
        for _ in range(times):
            await self.health.failed(deployment, candidates)


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
