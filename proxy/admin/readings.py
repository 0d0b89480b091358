"""Readings of the gateway's own counters, and the last hour of them, for the admin overview.

A :class:`Reading` is what the process's :class:`~proxy.core.metrics.Metrics` hold at one moment,
folded over their labels: requests and errors, the latency and overhead histograms' bucket
counts, tokens, cost, cache hits and lookups, rate-limit, budget and auth refusals, requests in
flight. It is read from the metric families as structured samples (:meth:`Metrics.collect`:
every worker's, in multiprocess mode), never by parsing ``/metrics`` text.

A :class:`Sampler` takes one reading every ``interval`` seconds (10 s) and keeps the last
``keep`` of them (an hour); :func:`rates` turns two readings into what happened between them
(requests per second, error rate, p50/p99 latency and overhead, cache hit rate). Counters only
grow, except when a process restarts (a worker of several): a difference below zero reads as 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from prometheus_client.core import Metric

from proxy.core.metrics import Metrics

Histogram = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), +Inf last

_ERROR_CLASSES = frozenset(("4xx", "5xx"))
_LOOKUP_RESULTS = frozenset(("hit", "miss", "coalesced"))  # a bypass is no lookup
INTERVAL = 10.0
KEEP = 361  # an hour of 10 s intervals, both ends included


class Reading(NamedTuple):
    """The counters at ``time`` (UNIX seconds), summed over their labels."""

    time: float
    requests: float
    errors: float
    server_errors: float
    duration: Histogram
    overhead: Histogram
    tokens: float
    cost_usd: float
    cache_hits: float
    cache_lookups: float
    rate_limited: float
    budget_rejected: float
    auth_failures: float
    in_flight: float


def read(metrics: Metrics, now: float | None = None) -> Reading:
    """What ``metrics`` hold now (see the module docstring)."""
    return fold(metrics.collect(), time.time() if now is None else now)


def fold(families: Iterable[Metric], now: float) -> Reading:
    """A :class:`Reading` at ``now`` of ``families`` (prometheus-client metric families)."""
    sums: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {"duration": {}, "overhead": {}}
    for family in families:
        for sample in family.samples:
            _add(sums, buckets, sample.name, sample.labels, sample.value)
    return Reading(
        time=now,
        requests=sums.get("requests", 0.0),
        errors=sums.get("errors", 0.0),
        server_errors=sums.get("server_errors", 0.0),
        duration=_histogram(buckets["duration"]),
        overhead=_histogram(buckets["overhead"]),
        tokens=sums.get("tokens", 0.0),
        cost_usd=sums.get("cost_usd", 0.0),
        cache_hits=sums.get("cache_hits", 0.0),
        cache_lookups=sums.get("cache_lookups", 0.0),
        rate_limited=sums.get("rate_limited", 0.0),
        budget_rejected=sums.get("budget_rejected", 0.0),
        auth_failures=sums.get("auth_failures", 0.0),
        in_flight=sums.get("in_flight", 0.0),
    )


def _add(
    sums: dict[str, float],
    buckets: dict[str, dict[float, float]],
    name: str,
    labels: dict[str, str],
    value: float,
) -> None:
    def plus(field: str) -> None:
        sums[field] = sums.get(field, 0.0) + value

    if name == "crossway_requests_total":
        plus("requests")
        status = labels.get("status_class")
        if status in _ERROR_CLASSES:
            plus("errors")
        if status == "5xx":
            plus("server_errors")
    elif name == "crossway_request_duration_seconds_bucket":
        _add_bucket(buckets["duration"], labels["le"], value)
    elif name == "crossway_gateway_overhead_seconds_bucket":
        _add_bucket(buckets["overhead"], labels["le"], value)
    elif name == "crossway_tokens_total":
        plus("tokens")
    elif name == "crossway_cost_usd_total":
        plus("cost_usd")
    elif name == "crossway_cache_requests_total":
        result = labels.get("result")
        if result == "hit":
            plus("cache_hits")
        if result in _LOOKUP_RESULTS:
            plus("cache_lookups")
    elif name == "crossway_rate_limited_total":
        plus("rate_limited")
    elif name == "crossway_budget_rejected_total":
        plus("budget_rejected")
    elif name == "crossway_auth_failures_total":
        plus("auth_failures")
    elif name == "crossway_requests_in_flight":
        plus("in_flight")


def _add_bucket(bucket: dict[float, float], bound: str, value: float) -> None:
    upper = float(bound)  # "+Inf" parses as inf
    bucket[upper] = bucket.get(upper, 0.0) + value


def _histogram(bucket: dict[float, float]) -> Histogram:
    return tuple(sorted(bucket.items()))


class Rates(NamedTuple):
    """What happened between two readings. Ratios and quantiles are None without requests."""

    seconds: float
    requests: float
    requests_per_second: float
    error_rate: float | None
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    overhead_p50_ms: float | None
    overhead_p99_ms: float | None
    tokens_per_second: float
    cost_usd: float
    cache_hit_rate: float | None
    rate_limited: float
    budget_rejected: float


def rates(before: Reading, after: Reading) -> Rates:
    """The activity from ``before`` to ``after`` (module docstring)."""
    seconds = max(after.time - before.time, 1e-9)
    requests = _grown(before.requests, after.requests)
    lookups = _grown(before.cache_lookups, after.cache_lookups)
    duration = _between(before.duration, after.duration)
    overhead = _between(before.overhead, after.overhead)
    return Rates(
        seconds=seconds,
        requests=requests,
        requests_per_second=requests / seconds,
        error_rate=_ratio(_grown(before.errors, after.errors), requests),
        latency_p50_ms=_ms(quantile(0.5, duration)),
        latency_p99_ms=_ms(quantile(0.99, duration)),
        overhead_p50_ms=_ms(quantile(0.5, overhead)),
        overhead_p99_ms=_ms(quantile(0.99, overhead)),
        tokens_per_second=_grown(before.tokens, after.tokens) / seconds,
        cost_usd=_grown(before.cost_usd, after.cost_usd),
        cache_hit_rate=_ratio(_grown(before.cache_hits, after.cache_hits), lookups),
        rate_limited=_grown(before.rate_limited, after.rate_limited),
        budget_rejected=_grown(before.budget_rejected, after.budget_rejected),
    )


def quantile(q: float, histogram: Histogram) -> float | None:
    """The ``q`` quantile of a cumulative histogram, interpolated linearly inside its bucket
    as Prometheus's ``histogram_quantile`` does (the largest finite bound when it falls in the
    ``+Inf`` bucket); None when the histogram counted nothing."""
    if not histogram or histogram[-1][1] <= 0:
        return None
    rank = q * histogram[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in histogram:
        if count >= rank:
            if math.isinf(upper):
                return lower
            inside = count - below
            share = 1.0 if inside <= 0 else (rank - below) / inside
            return lower + (upper - lower) * share
        lower, below = upper, count
    return lower


def _between(before: Histogram, after: Histogram) -> Histogram:
    old = dict(before)
    return tuple((bound, _grown(old.get(bound, 0.0), count)) for bound, count in after)


def _grown(before: float, after: float) -> float:
    return max(after - before, 0.0)


def _ratio(part: float, whole: float) -> float | None:
    return None if whole <= 0 else part / whole


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class Sampler:
    """One reading every ``interval`` seconds, the last ``keep`` kept (module docstring).

    ``start()`` takes the first reading and starts the task; ``close()`` stops it. A reading
    that fails is logged by the caller's logger (when given) and skipped.
    """

    def __init__(
        self,
        read_now: Callable[[], Reading],
        *,
        interval: float = INTERVAL,
        keep: int = KEEP,
        logger: Any = None,
    ) -> None:
        self.interval = interval
        self._read = read_now
        self._readings: deque[Reading] = deque(maxlen=keep)
        self._task: asyncio.Task[None] | None = None
        self._logger = logger

    @property
    def readings(self) -> Sequence[Reading]:
        """The kept readings, oldest first."""
        return tuple(self._readings)

    def sample(self) -> Reading:
        """Take and keep one reading now."""
        reading = self._read()
        self._readings.append(reading)
        return reading

    def start(self) -> None:
        """Take the first reading and sample every ``interval`` from now on."""
        self.sample()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        """Stop sampling (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.sample()
            except Exception:
                if self._logger is not None:
                    self._logger.exception("overview_sample_failed")

    def baseline(self, now: float, window: float) -> Reading | None:
        """The newest kept reading at least ``window`` seconds before ``now`` (the oldest when
        none is that old), or None before the first."""
        found = None
        for reading in self._readings:
            if found is None or now - reading.time >= window:
                found = reading
            else:
                break
        return found
