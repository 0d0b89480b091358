"""Prometheus metrics: names prefixed ``crossway_``, units in the name, bounded label sets.

A :class:`Metrics` object owns its registry (no global state) and caches label children so that
the hot path does a dict lookup, not a locked registry lookup. Label values come only from the
config (provider names, aliases), the dialect registry and fixed vocabularies — never from keys,
users or free text — and the ``model`` label is capped (:class:`BoundedLabel`) because a client
may address ``provider/<anything>``.

With several worker processes, prometheus-client's multiprocess mode is used: the parent sets
``PROMETHEUS_MULTIPROC_DIR`` before the workers import this module, and :meth:`Metrics.render`
aggregates every worker's samples, so a scrape that lands on any worker sees the whole server.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prometheus_multiprocess

from proxy.canonical import Usage

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_OVERHEAD_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
)
OTHER = "other"


class BoundedLabel:
    """Admits up to ``limit`` distinct values; later new values map to ``other``."""

    __slots__ = ("_limit", "_seen")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        """``value`` if admitted, else ``"other"``."""
        if value in self._seen:
            return value
        if len(self._seen) < self._limit:
            self._seen.add(value)
            return value
        return OTHER


class _Children:
    """A cache of one metric family's label children, keyed by the label tuple."""

    __slots__ = ("_cache", "_family")

    def __init__(self, family: Any) -> None:
        self._family = family
        self._cache: dict[tuple[str, ...], Any] = {}

    def __call__(self, *labels: str) -> Any:
        child = self._cache.get(labels)
        if child is None:
            child = self._cache[labels] = self._family.labels(*labels)
        return child


def status_class(status: int) -> str:
    """``2xx``, ``4xx``, ``5xx`` …: the bounded label for an HTTP status."""
    return f"{status // 100}xx"


class Metrics:
    """Every metric the gateway exports, with helpers shaped after what the app records."""

    def __init__(self, *, max_model_labels: int = 200) -> None:
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_label: Callable[[str], str] = BoundedLabel(max_model_labels)
        r = self.registry
        self.requests = _Children(
            Counter(
                "crossway_requests",
                "Client requests answered, by dialect, model, provider and status class.",
                ["dialect", "model", "provider", "status_class"],
                registry=r,
            )
        )
        self.request_duration = _Children(
            Histogram(
                "crossway_request_duration_seconds",
                "Time from request received to the last byte of the answer.",
                ["dialect", "model", "provider"],
                buckets=_LATENCY_BUCKETS,
                registry=r,
            )
        )
        self.upstream_duration = _Children(
            Histogram(
                "crossway_upstream_duration_seconds",
                "Time spent waiting on upstreams per request (all attempts, all stream chunks).",
                ["provider"],
                buckets=_LATENCY_BUCKETS,
                registry=r,
            )
        )
        self.time_to_first_token = _Children(
            Histogram(
                "crossway_time_to_first_token_seconds",
                "Time from request received to the first streamed token sent to the client.",
                ["dialect", "model", "provider"],
                buckets=_LATENCY_BUCKETS,
                registry=r,
            )
        )
        self.overhead = _Children(
            Histogram(
                "crossway_gateway_overhead_seconds",
                "The gateway's own time per request: total duration minus upstream wait.",
                ["dialect"],
                buckets=_OVERHEAD_BUCKETS,
                registry=r,
            )
        )
        self.tokens = _Children(
            Counter(
                "crossway_tokens",
                "Tokens processed, by kind (input, cache_read, cache_write, output, reasoning).",
                ["model", "provider", "kind"],
                registry=r,
            )
        )
        self.in_flight = _Children(
            Gauge(
                "crossway_requests_in_flight",
                "Client requests being processed.",
                ["dialect"],
                registry=r,
                multiprocess_mode="livesum",
            )
        )
        self.upstream_errors = _Children(
            Counter(
                "crossway_upstream_errors",
                "Failed upstream calls, by provider and reason (the error kind).",
                ["provider", "reason"],
                registry=r,
            )
        )
        self.provider_ready = _Children(
            Gauge(
                "crossway_provider_ready",
                "1 when a provider has what it needs to serve (credentials), else 0.",
                ["provider"],
                registry=r,
                multiprocess_mode="max",
            )
        )
        self.config_reloads = _Children(
            Counter(
                "crossway_config_reloads",
                "Configuration reloads, by result (ok, error).",
                ["result"],
                registry=r,
            )
        )
        self.retries = _Children(
            Counter(
                "crossway_retries",
                "Upstream calls retried, by the reason (error kind) of the failed attempt.",
                ["reason"],
                registry=r,
            )
        )
        self.retries_denied = _Children(
            Counter(
                "crossway_retries_denied",
                "Retries not made although the failure was retriable, by cause (budget, wait).",
                ["cause"],
                registry=r,
            )
        )
        self.fallbacks = _Children(
            Counter(
                "crossway_fallbacks",
                "Fallbacks from a failed model to the next one (labels through model_label).",
                ["from_model", "to_model"],
                registry=r,
            )
        )
        self.deployment_healthy = _Children(
            Gauge(
                "crossway_deployment_healthy",
                "1 while a deployment is routable, 0 while it is ejected after failures.",
                ["provider", "model"],
                registry=r,
                multiprocess_mode="livemin",
            )
        )
        self.deployment_ejections = _Children(
            Counter(
                "crossway_deployment_ejections",
                "Times a deployment was ejected for a cooldown after consecutive failures.",
                ["provider", "model"],
                registry=r,
            )
        )
        self.store_degraded = _Children(
            Counter(
                "crossway_store_degraded",
                "Decisions taken without the state store because it was unavailable, by use.",
                ["use"],
                registry=r,
            )
        )

        # Series that alerts watch with increase() exist from the start, at 0.
        for result in ("ok", "error"):
            self.config_reloads(result)

    def record_tokens(self, model: str, provider: str, usage: Usage) -> None:
        """Count ``usage`` into the token counter, one kind per disjoint bucket."""
        for kind, count in (
            ("input", usage.input),
            ("cache_read", usage.cache_read),
            ("cache_write", usage.cache_write),
            ("output", usage.output),
            ("reasoning", usage.reasoning),
        ):
            if count:
                self.tokens(model, provider, kind).inc(count)

    def render(self) -> bytes:
        """The exposition text for ``/metrics`` (every worker's samples in multiprocess mode)."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        prometheus_multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
