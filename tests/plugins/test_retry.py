"""plugins/retry.py: what is retried, how long it waits, the deadline, the budget, the options."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from plugins.retry import RetryBudget, RetryConfig, RetryPlugin
from proxy.core.canonical import Call, Deployment, GatewayOptions, Message, RetryOptions, Timings
from proxy.core.errors import (
    ContentPolicyViolation,
    ContextWindowExceeded,
    DeadlineExceeded,
    GatewayError,
    NoReadyDeployment,
    RateLimited,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.core.metrics import Metrics
from proxy.core.plugin import compose
from proxy.runtime.config import PluginSpec
from proxy.runtime.plugins import PluginLoadError, load_plugins
from tests.plugins.scripted import ScriptedUpstream, context, cut, drain, fail, sample

TARGET = "p/m"


def make_call(**fields) -> Call:
    fields.setdefault("deployments", [Deployment("p", "m")])
    return Call(
        request_id="r", dialect="openai", model="alias", messages=[Message("user", "hi")], **fields
    )


class Harness:
    """A retry plugin over a scripted upstream, with recorded sleeps."""

    def __init__(self, metrics: Metrics | None = None, **options) -> None:
        options.setdefault("backoff_base", 0.1)
        options.setdefault("backoff_cap", 1.0)
        self.metrics = metrics or Metrics()
        self.delays: list[float] = []
        self.upstream = ScriptedUpstream()
        self.plugin = RetryPlugin(
            RetryConfig(**options),
            context(metrics=self.metrics),
            sleep=self._sleep,
            rng=random.Random(3),
        )
        self.chain = compose([self.plugin], self.upstream)

    async def _sleep(self, seconds: float) -> None:
        self.delays.append(seconds)

    async def run(self, call: Call | None = None):
        return await self.chain(call or make_call())

    async def error(self, call: Call | None = None) -> GatewayError:
        with pytest.raises(GatewayError) as caught:
            await self.run(call)
        return caught.value


async def test_a_503_is_answered_by_the_retry():
    h = Harness()
    h.upstream.script(TARGET, fail(503))
    reply = await h.run()
    assert reply.response is not None
    assert reply.attempts == 2
    assert reply.headers["x-crossway-attempts"] == "2"
    assert len(h.upstream.calls) == 2
    assert len(h.delays) == 1
    assert 0 <= h.delays[0] <= 0.1
    assert sample(h.metrics, "crossway_retries_total", reason="overloaded") == 1


async def test_a_first_attempt_success_reports_one_attempt():
    h = Harness()
    reply = await h.run()
    assert reply.attempts == 1
    assert reply.headers["x-crossway-attempts"] == "1"
    assert h.delays == []


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_default_statuses_are_retried(status: int):
    h = Harness()
    h.upstream.script(TARGET, fail(status))
    assert (await h.run()).attempts == 2


async def test_retry_after_is_waited_exactly():
    h = Harness()
    h.upstream.script(TARGET, fail(429, retry_after=1.0))
    reply = await h.run()
    assert reply.attempts == 2
    assert h.delays == [1.0]


async def test_retry_after_equal_to_the_cap_is_still_waited():
    h = Harness(max_retry_after=10)
    h.upstream.script(TARGET, fail(429, retry_after=10.0))
    reply = await h.run()
    assert reply.attempts == 2
    assert h.delays == [10.0]


async def test_retry_after_beyond_the_cap_is_not_retried_so_fallback_can_act():
    h = Harness(max_retry_after=10)
    h.upstream.script(TARGET, fail(429, retry_after=30.0))
    error = await h.error()
    assert error.status == 429
    assert error.attempts == 1
    assert len(h.upstream.calls) == 1
    assert h.delays == []
    assert sample(h.metrics, "crossway_retries_denied_total", cause="wait") == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
async def test_client_errors_are_never_retried(status: int):
    h = Harness()
    h.upstream.script(TARGET, fail(status), then=fail(status))
    error = await h.error()
    assert len(h.upstream.calls) == 1
    assert error.attempts == 1


@pytest.mark.parametrize(
    "error",
    [
        lambda: ContextWindowExceeded("too long", upstream_status=400, provider="p"),
        lambda: ContentPolicyViolation("refused", upstream_status=400, provider="p"),
        lambda: NoReadyDeployment("cooling down"),
        lambda: RateLimited("gateway limit"),
    ],
)
async def test_refusals_and_gateway_errors_are_never_retried(error):
    h = Harness()
    h.upstream.script(TARGET, error)
    await h.error()
    assert len(h.upstream.calls) == 1


async def test_a_context_window_error_is_not_retried_even_if_its_status_is_listed():
    h = Harness(on_status=(503,))
    error = ContextWindowExceeded("too long", upstream_status=503, provider="p")
    h.upstream.script(TARGET, lambda: error)
    await h.error()
    assert len(h.upstream.calls) == 1


async def test_should_retry_false_is_honoured():
    def refuse():
        error = fail(503)()
        error.should_retry = False
        return error

    h = Harness()
    h.upstream.script(TARGET, refuse)
    await h.error()
    assert len(h.upstream.calls) == 1


async def test_connection_errors_and_timeouts_are_retried_unless_disabled():
    h = Harness()
    h.upstream.script(
        TARGET,
        lambda: UpstreamUnavailable("reset", provider="p"),
        lambda: UpstreamTimeout("slow", code="first_byte_timeout", provider="p"),
    )
    assert (await h.run()).attempts == 3

    h = Harness(on_connection_error=False, on_timeout=False)
    h.upstream.script(TARGET, lambda: UpstreamUnavailable("reset", provider="p"))
    await h.error()
    h.upstream.script(TARGET, lambda: UpstreamTimeout("slow", provider="p"))
    await h.error()
    assert len(h.upstream.calls) == 2


async def test_exhausted_retries_raise_the_last_error_with_every_attempt_counted():
    h = Harness(retries=2)
    h.upstream.script(TARGET, then=fail(502))
    error = await h.error()
    assert error.upstream_status == 502
    assert error.attempts == 3
    assert len(h.upstream.calls) == 3


async def test_backoff_is_exponential_with_full_jitter():
    h = Harness(retries=5, max_retries=5, backoff_base=0.1, backoff_cap=0.5, budget_min=5)
    h.upstream.script(TARGET, then=fail(503))
    await h.error()
    rng = random.Random(3)
    expected = [rng.uniform(0, min(0.5, 0.1 * 2**n)) for n in range(5)]
    assert h.delays == pytest.approx(expected)
    assert all(d <= bound for d, bound in zip(h.delays, [0.1, 0.2, 0.4, 0.5, 0.5], strict=True))


async def test_client_retry_count_is_capped_by_the_operator():
    h = Harness(retries=1, max_retries=3)
    h.upstream.script(TARGET, then=fail(503))
    options = GatewayOptions(retry=RetryOptions(count=5))
    error = await h.error(make_call(options=options))
    assert error.attempts == 4  # 1 + max_retries

    h = Harness(retries=1, max_retries=3)
    h.upstream.script(TARGET, then=fail(503))
    error = await h.error(make_call(options=GatewayOptions(retry=RetryOptions(count=0))))
    assert error.attempts == 1


async def test_client_codes_narrow_but_never_widen_the_operator_statuses():
    h = Harness()
    h.upstream.script(TARGET, fail(503))
    narrowed = GatewayOptions(retry=RetryOptions(count=2, on_codes=(429,)))
    await h.error(make_call(options=narrowed))
    assert len(h.upstream.calls) == 1

    h = Harness()
    h.upstream.script(TARGET, fail(400))
    widened = GatewayOptions(retry=RetryOptions(count=2, on_codes=(400, 503)))
    await h.error(make_call(options=widened))
    assert len(h.upstream.calls) == 1


async def test_a_retry_goes_to_another_provider_without_waiting_for_the_hint():
    h = Harness()
    h.upstream.script("a/m", fail(429, provider="a", retry_after=5.0))
    reply = await h.run(make_call(deployments=[Deployment("a", "m"), Deployment("b", "m")]))
    assert reply.provider == "b"
    seen = [[d.target for d in call.deployments] for call in h.upstream.calls]
    assert seen == [["a/m", "b/m"], ["b/m"]]
    assert h.delays[0] <= 0.1  # the backoff, not the 5 s hint of the provider left behind


async def test_retries_alternate_between_providers():
    h = Harness(retries=3)
    h.upstream.script("a/m", fail(503, provider="a"), fail(503, provider="a"))
    h.upstream.script("b/m", fail(503, provider="b"))
    reply = await h.run(make_call(deployments=[Deployment("a", "m"), Deployment("b", "m")]))
    assert reply.provider == "b"
    assert h.upstream.targets() == ["a/m", "b/m", "a/m", "b/m"]


async def test_a_pinned_deployment_is_retried_in_place():
    h = Harness()
    h.upstream.script("a/m", fail(503, provider="a"))
    deployments = [Deployment("a", "m"), Deployment("b", "m")]
    reply = await h.run(make_call(deployments=deployments, deployment=deployments[0]))
    assert reply.provider == "a"
    assert h.upstream.targets() == ["a/m", "a/m"]


async def test_a_failure_before_the_first_chunk_is_retried_but_never_one_mid_stream():
    h = Harness()
    h.upstream.script(TARGET, fail(503), cut(2))
    reply = await h.run(make_call(stream=True))
    assert reply.attempts == 2
    assert reply.stream is not None
    received: list[str] = []
    with pytest.raises(UpstreamUnavailable):
        await drain(reply.stream, received)
    assert received == ["one", "two"]
    assert len(h.upstream.calls) == 2


async def test_the_deadline_cuts_a_hanging_attempt():
    h = Harness(deadline=0.2)
    cancelled = asyncio.Event()

    async def hang(call: Call):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    chain = compose([h.plugin], hang)
    with pytest.raises(DeadlineExceeded) as caught:
        # The bound only keeps a broken deadline from hanging the suite (it raises TimeoutError,
        # not DeadlineExceeded); what is asserted is the outcome, not how long it took.
        await asyncio.wait_for(chain(make_call()), timeout=30)
    assert cancelled.is_set(), "the hanging attempt was left running"
    assert caught.value.status == 504
    assert caught.value.code == "deadline_exceeded"
    assert caught.value.attempts == 1


async def test_the_client_timeout_applies_when_shorter_than_the_deadline():
    h = Harness(deadline=60)

    async def hang(call: Call):
        await asyncio.Event().wait()

    chain = compose([h.plugin], hang)
    with pytest.raises(DeadlineExceeded):  # the bound: see the test above
        await asyncio.wait_for(chain(make_call(options=GatewayOptions(timeout=0.1))), timeout=30)


async def test_the_deadline_counts_from_the_request_arrival():
    h = Harness(deadline=5)
    old = make_call(timings=Timings(start=time.perf_counter() - 10))
    error = await h.error(old)
    assert isinstance(error, DeadlineExceeded)
    assert error.attempts == 0
    assert h.upstream.calls == []


async def test_a_wait_past_the_deadline_is_not_started():
    h = Harness(deadline=5, max_retry_after=30)
    h.upstream.script(TARGET, fail(429, retry_after=20.0))
    error = await h.error()
    assert error.status == 429
    assert h.delays == []
    assert sample(h.metrics, "crossway_retries_denied_total", cause="wait") == 1


def test_the_budget_allows_the_minimum_then_a_ratio_of_the_requests_in_flight():
    budget = RetryBudget(ratio=0.2, minimum=3)
    budget.requests = 5
    assert [budget.try_acquire() for _ in range(4)] == [True, True, True, False]
    budget.requests = 20  # 20 in flight: 4 retries at once
    assert budget.try_acquire()
    assert not budget.try_acquire()
    budget.release()
    assert budget.try_acquire()


async def test_a_sequential_client_always_gets_its_retries():
    # The old per-window budget denied retries after any three failures in ten seconds.
    h = Harness(retries=2, budget_ratio=0.2, budget_min=3)
    h.upstream.script(TARGET, then=fail(503))
    for _ in range(30):
        assert (await h.error()).attempts == 3
    asked = make_call(options=GatewayOptions(retry=RetryOptions(count=2)))  # orq's retry.count
    assert (await h.error(asked)).attempts == 3
    assert len(h.upstream.calls) == 31 * 3
    assert sample(h.metrics, "crossway_retries_denied_total", cause="budget") == 0


class GatedOutage:
    """An upstream that fails every call (503), each held until the test opens the gate of its
    wave; it records the calls in flight (``held``; ``waiting`` of them at the gate not yet
    opened), and how many of them were retries at most."""

    def __init__(self, budget: RetryBudget) -> None:
        self.budget = budget
        self.gate = asyncio.Event()
        self.calls = 0
        self.held = 0
        self.waiting = 0
        self.peak = 0
        self.peak_retries = 0

    def release(self) -> None:
        """Open the current wave's gate; later calls wait for the next."""
        gate, self.gate = self.gate, asyncio.Event()
        self.waiting = 0
        gate.set()

    def settled(self) -> bool:
        """Every call in flight waits at the unopened gate (the released ones are gone)."""
        return self.held == self.waiting

    async def __call__(self, call: Call):
        self.calls += 1
        self.held += 1
        self.waiting += 1
        self.peak = max(self.peak, self.held)
        self.peak_retries = max(self.peak_retries, self.budget.retries)
        try:
            await self.gate.wait()
        finally:
            self.held -= 1
        raise fail(503)()


async def until(condition, what: str) -> None:
    """Let the tasks run until ``condition()`` holds (a bounded number of loop turns)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never reached: {what}")


async def test_a_full_outage_cannot_add_more_calls_in_flight_than_the_budget():
    metrics = Metrics()
    plugin = RetryPlugin(
        RetryConfig(retries=3, budget_ratio=0.2, budget_min=3, backoff_base=0),
        context(metrics=metrics),
        rng=random.Random(3),
    )
    upstream = GatedOutage(plugin.budget)
    chain = compose([plugin], upstream)
    requests = [asyncio.ensure_future(chain(make_call())) for _ in range(50)]
    await until(lambda: upstream.held == 50, "50 first attempts in flight")
    upstream.release()
    # 20% of 50 in flight: 10 retries may be in flight; the other 40 requests fail at once.
    await until(lambda: upstream.settled() and upstream.held == 10, "the first retries")
    assert sum(r.done() for r in requests) == 40
    assert (upstream.peak, upstream.peak_retries) == (50, 10)
    while upstream.held:
        upstream.release()
        await until(upstream.settled, "the next wave")
    await until(lambda: all(r.done() for r in requests), "every request answered")
    assert all(isinstance(r.exception(), GatewayError) for r in requests)
    # Unbudgeted: 50 x 4 = 200 calls. Budgeted: 50, then 10 retries; as those fail, 7 of the
    # 10 are denied (their peers still hold slots) and 3 retry twice more, 3 at a time.
    assert upstream.calls == 50 + 10 + 3 + 3
    assert upstream.peak_retries == 10
    assert plugin.budget.retries == plugin.budget.requests == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on_status": [400, 503]}, "never retried: [400]"),
        ({"on_status": [404]}, "never retried: [404]"),
        ({"on_status": [200]}, "not error statuses: [200]"),
        ({"retries": 4, "max_retries": 3}, "must not exceed"),
        ({"deadline": 0}, "Expected `float` > 0"),
        ({"retrys": 2}, "unknown field"),
    ],
)
def test_bad_options_are_load_errors(options: dict, message: str):
    spec = PluginSpec(ref="retry", options=options, path="$.plugins[0].retry")
    with pytest.raises(PluginLoadError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_plugins([spec], {"retry": "plugins.retry:RetryPlugin"})
