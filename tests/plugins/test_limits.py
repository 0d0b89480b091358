"""plugins/limits.py: rpm, tpm and max_parallel per key and team, through the state store."""

from __future__ import annotations

import pytest
import structlog

from plugins.limits import LimitExceeded, LimitsOptions, LimitsPlugin, duration
from proxy.core.canonical import Call, Message, Params, Principal, RateLimits
from proxy.core.errors import UpstreamUnavailable
from proxy.core.metrics import Metrics
from proxy.core.plugin import compose
from proxy.runtime.plugins import PluginContext
from proxy.state.memory_store import MemoryStore
from proxy.state.store import StoreUnavailable
from tests.faults import FakeClock
from tests.plugins.scripted import USAGE, ScriptedUpstream, drain, fail, router, sample


class DownStore:
    """A shared store whose backend is unreachable: it has no synchronous ``admit_now``."""

    async def admit(self, plan, tokens):
        raise StoreUnavailable("down")


class Harness:
    def __init__(self, store=None) -> None:
        self.clock = FakeClock()
        self.metrics = Metrics()
        self.store = store if store is not None else MemoryStore(self.clock)
        self.resolver = router({"m": ["p/model"]})
        context = PluginContext(
            self.resolver.resolve, self.metrics, structlog.get_logger(), self.store
        )
        self.plugin = LimitsPlugin(LimitsOptions(output_reserve=100), context)
        self.upstream = ScriptedUpstream(self.clock)
        self.chain = compose([self.plugin], self.upstream)

    def call(self, principal: Principal, **fields) -> Call:
        return Call(
            request_id="r",
            dialect="openai",
            model="m",
            messages=[Message("user", "x" * 40)],  # 10 tokens of text, 4 of framing
            deployments=self.resolver.resolve("m"),
            principal=principal,
            **fields,
        )


def keyed(team: RateLimits | None = None, **limits) -> Principal:
    return Principal(
        key_id="k", team="t", limits=RateLimits(**limits) if limits else None, team_limits=team
    )


async def test_without_limits_nothing_is_counted():
    h = Harness()
    reply = await h.chain(h.call(Principal(key_id="k")))
    assert not any(name.startswith("x-ratelimit") for name in reply.headers)
    assert len(h.store) == 0


async def test_the_tightest_scope_fills_the_headers():
    h = Harness()
    principal = keyed(team=RateLimits(rpm=3, tpm=1000), rpm=10)
    reply = await h.chain(h.call(principal, params=Params(max_tokens=5)))
    assert reply.headers["x-ratelimit-limit-requests"] == "3"  # the team's: 2 left of 3
    assert reply.headers["x-ratelimit-remaining-requests"] == "2"
    assert reply.headers["x-ratelimit-reset-requests"] == "20s"
    assert reply.headers["x-ratelimit-limit-tokens"] == "1000"
    assert reply.headers["x-ratelimit-remaining-tokens"] == "981"  # 14 + 5 reserved


async def test_a_refusal_names_scope_and_limit_and_charges_nothing():
    h = Harness()
    principal = keyed(team=RateLimits(rpm=1), rpm=5)
    await h.chain(h.call(principal))
    with pytest.raises(LimitExceeded) as refused:
        await h.chain(h.call(principal))
    error = refused.value
    assert (error.status, error.code) == (429, "rate_limit_exceeded")
    headers = error.response_headers()
    assert headers["Retry-After"] == "60"
    assert headers["retry-after-ms"] == "60000"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert sample(h.metrics, "crossway_rate_limited_total", scope="team", limit="rpm") == 1
    h.clock.advance(60)
    reply = await h.chain(h.call(principal))
    assert reply.headers["x-ratelimit-remaining-requests"] == "0"  # the team's again
    assert len(h.upstream.calls) == 2


async def test_tpm_reserves_the_output_limit_of_every_answer():
    h = Harness()
    reply = await h.chain(h.call(keyed(tpm=1000), params=Params(n=10, max_tokens=20)))
    assert reply.headers["x-ratelimit-remaining-tokens"] == str(1000 - 14 - 10 * 20)


async def test_a_call_whose_worst_case_is_more_than_the_tpm_is_refused_up_front():
    h = Harness()
    principal = keyed(team=RateLimits(tpm=5000), tpm=1000)
    with pytest.raises(LimitExceeded) as refused:
        await h.chain(h.call(principal, params=Params(n=128, max_tokens=20)))
    error = refused.value
    assert (error.status, error.code) == (429, "rate_limit_exceeded")
    assert "needs up to 2574 tokens" in error.message  # 14 + 128 * 20
    assert "this key's tpm limit of 1000" in error.message
    headers = error.response_headers()
    assert headers["x-should-retry"] == "false"  # it would never fit
    assert "Retry-After" not in headers
    assert "retry-after-ms" not in headers
    assert sample(h.metrics, "crossway_rate_limited_total", scope="key", limit="tpm") == 1
    assert h.upstream.calls == []
    assert len(h.store) == 0  # nothing taken
    reply = await h.chain(h.call(principal, params=Params(n=40, max_tokens=20)))
    assert reply.headers["x-ratelimit-remaining-tokens"] == str(1000 - 14 - 800)


async def test_tokens_are_corrected_with_the_real_usage_of_a_stream():
    h = Harness()
    principal = keyed(tpm=120)
    reply = await h.chain(h.call(principal, stream=True))  # reserves 14 + 100
    with pytest.raises(LimitExceeded) as refused:  # 14 + 5 more do not fit
        await h.chain(h.call(principal, params=Params(max_tokens=5)))
    assert refused.value.message.endswith("this request needs up to 19 tokens")
    await drain(reply.stream, [])  # the stream's usage: 15 tokens
    reply = await h.chain(h.call(principal, params=Params(max_tokens=5)))
    assert reply.headers["x-ratelimit-remaining-tokens"] == str(120 - USAGE.total_tokens - 19)


async def test_a_failed_call_gives_its_reservation_and_slot_back():
    h = Harness()
    h.upstream.script("p/model", fail(503))
    principal = keyed(tpm=100, max_parallel=1)
    with pytest.raises(UpstreamUnavailable.__mro__[1]):
        await h.chain(h.call(principal, params=Params(max_tokens=50)))
    reply = await h.chain(h.call(principal, params=Params(max_tokens=50)))
    assert reply.headers["x-ratelimit-remaining-tokens"] == "36"  # only this call's 64


async def test_max_parallel_counts_streams_until_they_end():
    h = Harness()
    principal = keyed(team=RateLimits(max_parallel=1))
    first = await h.chain(h.call(principal, stream=True))
    with pytest.raises(LimitExceeded) as refused:
        await h.chain(h.call(principal))
    assert refused.value.retry_after == 1
    assert sample(h.metrics, "crossway_rate_limited_total", scope="team", limit="max_parallel")
    await first.stream.aclose()
    await h.chain(h.call(principal))
    assert len(h.store) == 0  # the in-flight counter is gone at zero


async def test_an_unavailable_store_admits_and_counts_the_degradation():
    h = Harness(store=DownStore())
    await h.chain(h.call(keyed(rpm=1, tpm=1000, max_parallel=1)))
    await h.chain(h.call(keyed(rpm=1, tpm=1000, max_parallel=1)))
    assert len(h.upstream.calls) == 2
    assert sample(h.metrics, "crossway_state_degraded_total", use="limits", decision="open") >= 2


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0ms"),
        (0.25, "250ms"),
        (1, "1s"),
        (1.5, "1.5s"),
        (59.9999, "60s"),
        (360, "6m0s"),
        (61.25, "1m1.25s"),
    ],
)
def test_reset_durations_read_like_openai_s(seconds: float, text: str):
    assert duration(seconds) == text
