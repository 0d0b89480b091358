"""Readings of the gateway's counters: folded over labels, differenced, quantiles."""

from __future__ import annotations

import pytest

from proxy.admin.readings import Sampler, fold, quantile, rates, read
from proxy.core.canonical import Usage
from proxy.core.metrics import Metrics
from tests.waiting import until


def busy_metrics() -> Metrics:
    metrics = Metrics()
    ok = metrics.request_series("openai", "chat", "up")
    for seconds in (0.02, 0.02, 0.02, 0.2):
        ok.count(200)
        ok.duration.observe(seconds)
        ok.overhead.observe(0.0003)
    refused = metrics.request_series("anthropic", "chat", "none")
    for status in (429, 503):
        refused.count(status)
        refused.duration.observe(0.001)
    ok.record_tokens(Usage(input=10, output=5))
    metrics.cost_usd("up", "chat").inc(0.25)
    for result in ("hit", "hit", "miss", "bypass"):
        metrics.cache_requests(result).inc()
    metrics.rate_limited("key", "rpm").inc()
    metrics.budget_rejected("team").inc(2)
    metrics.auth_failures("invalid").inc(3)
    return metrics


def test_a_reading_sums_every_label_set():
    reading = read(busy_metrics(), now=100.0)
    assert reading.time == 100.0
    assert reading.requests == 6
    assert reading.errors == 2
    assert reading.server_errors == 1
    assert reading.tokens == 15
    assert reading.cost_usd == pytest.approx(0.25)
    assert (reading.cache_hits, reading.cache_lookups) == (2, 3)  # a bypass is no lookup
    assert (reading.rate_limited, reading.budget_rejected, reading.auth_failures) == (1, 2, 3)
    assert reading.duration[-1] == (float("inf"), 6)  # every request observed a duration


def test_rates_between_two_readings():
    before = fold([], 0.0)
    after = read(busy_metrics(), now=2.0)
    between = rates(before, after)
    assert between.requests_per_second == 3
    assert between.error_rate == pytest.approx(2 / 6)
    assert between.cache_hit_rate == pytest.approx(2 / 3)
    assert 10 <= between.latency_p50_ms <= 25  # inside the 10-25 ms bucket (4 of 6 there)
    assert 100 <= between.latency_p99_ms <= 250
    assert 0.25 <= between.overhead_p99_ms <= 0.5
    assert (between.rate_limited, between.budget_rejected) == (1, 2)


def test_nothing_counted_reads_as_null_not_zero():
    empty = rates(fold([], 0.0), fold([], 10.0))
    assert empty.requests_per_second == 0
    assert empty.error_rate is None
    assert empty.latency_p99_ms is None
    assert empty.cache_hit_rate is None


def test_a_counter_that_went_back_reads_as_nothing_happened():
    after = read(busy_metrics(), now=1.0)
    restarted = fold([], 2.0)
    assert rates(after, restarted).requests == 0


def test_quantile_interpolates_like_histogram_quantile():
    histogram = ((1.0, 0.0), (2.0, 10.0), (float("inf"), 10.0))
    assert quantile(0.5, histogram) == pytest.approx(1.5)
    assert quantile(0.99, ((1.0, 0.0), (float("inf"), 4.0))) == 1.0  # the +Inf bucket
    assert quantile(0.5, ()) is None


async def test_the_sampler_keeps_the_newest_readings_and_finds_a_baseline():
    clock = iter(range(100))
    sampler = Sampler(lambda: fold([], float(next(clock))), interval=3600, keep=3)
    sampler.start()
    for _ in range(4):
        sampler.sample()
    assert [r.time for r in sampler.readings] == [2.0, 3.0, 4.0]
    assert sampler.baseline(now=5.0, window=2.0).time == 3.0
    assert sampler.baseline(now=5.0, window=60.0).time == 2.0  # the oldest kept
    await sampler.close()
    await sampler.close()  # idempotent


async def test_the_sampler_samples_on_its_own_and_survives_a_failed_reading():
    calls = []

    def reading():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("a broken collector")
        return fold([], float(len(calls)))

    class Logger:
        failures = 0

        def exception(self, event):
            Logger.failures += 1

    sampler = Sampler(reading, interval=0.001, logger=Logger())
    sampler.start()
    await until(lambda: len(sampler.readings) >= 3, seconds=10, what="three readings")
    await sampler.close()
    assert len(sampler.readings) >= 3
    assert Logger.failures == 1
