"""Prometheus metrics: names prefixed ``crossway_``, units in the name, bounded label sets.

A :class:`Metrics` object owns its registry (no global state) and caches label children so that
the hot path does a dict lookup, not a locked registry lookup. Label values come only from the
config (provider names, aliases), the dialect registry and fixed vocabularies — never from keys,
users or free text — and the ``model`` label is capped (:class:`BoundedLabel`) because a client
may address ``provider/<anything>``.

In one process, metric values are plain floats updated without locks (the event loop is
single-threaded) and rendered through prometheus-client at scrape time. With several worker
processes, prometheus-client's own metrics in multiprocess mode are used instead: the parent sets
``PROMETHEUS_MULTIPROC_DIR`` before the workers import this module, and :meth:`Metrics.render`
aggregates every worker's samples, so a scrape that lands on any worker sees the whole server.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prometheus_multiprocess
from prometheus_client.core import (
    Metric,
)

from proxy.core.canonical import Usage
from proxy.core.local_metrics import LocalCollector, LocalFamily

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

# How prometheus-client merges a gauge's per-worker values in multiprocess mode (its Gauge's
# ``multiprocess_mode``); ``live*`` drop the values of workers that exited.
GaugeMode = Literal[
    "all",
    "liveall",
    "min",
    "livemin",
    "max",
    "livemax",
    "sum",
    "livesum",
    "mostrecent",
    "livemostrecent",
]

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
            family = self._family
            # prometheus-client's own metric without labels is its only child
            unlabelled = not labels and not isinstance(family, LocalFamily)
            child = self._cache[labels] = family if unlabelled else family.labels(*labels)
        return child


_STATUS_CLASSES = tuple(f"{hundreds}xx" for hundreds in range(10))  # by status // 100


_TOKEN_KINDS = ("input", "cache_read", "cache_write", "output", "reasoning")


class RequestSeries:
    """The series one request records into, for one (dialect, model, provider) label set.

    Fetched once per request (:meth:`Metrics.request_series`) instead of one label lookup per
    metric. A request counter or token counter child is created on its first use, so that no
    series is exported before it has counted something.
    """

    __slots__ = (
        "_labels",
        "_metrics",
        "_requests",
        "_time_to_first_token",
        "_tokens",
        "_upstream",
        "duration",
        "overhead",
    )

    def __init__(self, metrics: Metrics, dialect: str, model: str, provider: str) -> None:
        self._metrics = metrics
        self._labels = (dialect, model, provider)
        self._requests: list[Any] = [None] * len(_STATUS_CLASSES)
        self._tokens: list[Any] = [None] * len(_TOKEN_KINDS)
        self.duration = metrics.request_duration(dialect, model, provider)  # always observed
        self.overhead = metrics.overhead(dialect)
        self._upstream: Any = None
        self._time_to_first_token: Any = None

    def upstream(self, seconds: float) -> None:
        """Observe the time spent waiting on the provider."""
        if self._upstream is None:
            self._upstream = self._metrics.upstream_duration(self._labels[2])
        self._upstream.observe(seconds)

    def time_to_first_token(self, seconds: float) -> None:
        """Observe the time to the first streamed byte."""
        if self._time_to_first_token is None:
            self._time_to_first_token = self._metrics.time_to_first_token(*self._labels)
        self._time_to_first_token.observe(seconds)

    def count(self, status: int) -> None:
        """Count one request answered with ``status`` (100 to 999)."""
        index = status // 100
        child = self._requests[index]
        if child is None:
            child = self._metrics.requests(*self._labels, _STATUS_CLASSES[index])
            self._requests[index] = child
        child.inc()

    def record_tokens(self, usage: Usage) -> None:
        """Count ``usage`` into the token counter, one kind per disjoint bucket."""
        counts = (usage.input, usage.cache_read, usage.cache_write, usage.output, usage.reasoning)
        for index, count in enumerate(counts):
            if count:
                child = self._tokens[index]
                if child is None:
                    _, model, provider = self._labels
                    child = self._metrics.tokens(model, provider, _TOKEN_KINDS[index])
                    self._tokens[index] = child
                child.inc(count)


class Metrics:
    """Every metric the gateway exports, with helpers shaped after what the app records."""

    def __init__(self, *, max_model_labels: int = 200) -> None:
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_label: Callable[[str], str] = BoundedLabel(max_model_labels)
        self._series: dict[tuple[str, str, str], RequestSeries] = {}
        self._local = LocalCollector()
        if not self.multiprocess:
            self.registry.register(self._local)
        self.requests = self._counter(
            "crossway_requests",
            "Client requests answered, by dialect, model, provider and status class.",
            ["dialect", "model", "provider", "status_class"],
        )
        self.request_duration = self._histogram(
            "crossway_request_duration_seconds",
            "Time from request received to the last byte of the answer.",
            ["dialect", "model", "provider"],
            _LATENCY_BUCKETS,
        )
        self.upstream_duration = self._histogram(
            "crossway_upstream_duration_seconds",
            "Time spent waiting on upstreams per request (all attempts, all stream chunks).",
            ["provider"],
            _LATENCY_BUCKETS,
        )
        self.time_to_first_token = self._histogram(
            "crossway_time_to_first_token_seconds",
            "Time from request received to the first streamed token sent to the client.",
            ["dialect", "model", "provider"],
            _LATENCY_BUCKETS,
        )
        self.overhead = self._histogram(
            "crossway_gateway_overhead_seconds",
            "The gateway's own time per request: total duration minus upstream wait.",
            ["dialect"],
            _OVERHEAD_BUCKETS,
        )
        self.tokens = self._counter(
            "crossway_tokens",
            "Tokens processed, by kind (input, cache_read, cache_write, output, reasoning).",
            ["model", "provider", "kind"],
        )
        self.in_flight = self._gauge(
            "crossway_requests_in_flight",
            "Client requests being processed.",
            ["dialect"],
            "livesum",
        )
        self.upstream_errors = self._counter(
            "crossway_upstream_errors",
            "Failed upstream calls, by provider and reason (the error kind).",
            ["provider", "reason"],
        )
        self.provider_ready = self._gauge(
            "crossway_provider_ready",
            "1 when a provider has what it needs to serve (credentials), else 0.",
            ["provider"],
            "max",
        )
        self.config_reloads = self._counter(
            "crossway_config_reloads", "Configuration reloads, by result (ok, error).", ["result"]
        )
        self.config_reload_refused = self._counter(
            "crossway_config_reload_refused",
            "Reloads refused (also counted as errors) because the new config is weaker than the"
            " serving one, by reason (auth_removed, master_key_removed, metrics_opened,"
            " no_providers, no_models).",
            ["reason"],
        )
        self.retries = self._counter(
            "crossway_retries",
            "Upstream calls retried, by the reason (error kind) of the failed attempt.",
            ["reason"],
        )
        self.retries_denied = self._counter(
            "crossway_retries_denied",
            "Retries not made although the failure was retriable, by cause (budget, wait).",
            ["cause"],
        )
        self.fallbacks = self._counter(
            "crossway_fallbacks",
            "Fallbacks from a failed model to the next one (labels through model_label).",
            ["from_model", "to_model"],
        )
        self.deployment_healthy = self._gauge(
            "crossway_deployment_healthy",
            "0 from a deployment's ejection after failures until it next answers, else 1.",
            ["provider", "model"],
            "livemin",
        )
        self.deployment_ejections = self._counter(
            "crossway_deployment_ejections",
            "Times a deployment was ejected for a cooldown after consecutive failures.",
            ["provider", "model"],
        )
        self.cost_usd = self._counter(
            "crossway_cost_usd",
            "What replies cost in USD (provider-billed or priced by the gateway), by provider and"
            " model alias.",
            ["provider", "model"],
        )
        self.cost_unknown = self._counter(
            "crossway_cost_unknown",
            "Replies whose cost is unknown (no price for the model that served), by provider.",
            ["provider"],
        )
        self.http_requests = self._counter(
            "crossway_http_requests",
            "Requests outside the dialect routes (models, metrics, health; unknown routes as "
            'route="unmatched"), by route and status class.',
            ["route", "status_class"],
        )
        self.pii_detections = self._counter(
            "crossway_pii_detections",
            "PII values found by the masking plugin, by entity and action (mask, redact, hash,"
            " block; redact_output for values the model wrote).",
            ["entity", "action"],
        )
        self.guardrail_checks = self._counter(
            "crossway_guardrail_checks",
            "Guardrail verdicts, by check (its configured name), phase (input, output) and"
            " verdict (allow, block, warn, modify, retry, error_allow, error_block).",
            ["check", "phase", "verdict"],
        )
        self.guardrail_duration = self._histogram(
            "crossway_guardrail_check_duration_seconds",
            "Time one guardrail check took on one phase of a request.",
            ["check", "phase"],
            (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.state_degraded = self._counter(
            "crossway_state_degraded",
            "Decisions taken without the shared state store because it was unavailable, by use"
            " (limits, budgets, cache, health) and decision (local, open, closed, miss).",
            ["use", "decision"],
        )
        self.state_up = self._gauge(
            "crossway_state_up",
            "1 while the Redis server (host:port; each node of a Redis Cluster's slot map) serving"
            " the shared state answers, 0 while its circuit breaker is open; 1 once a node left"
            ' the map; node="memory", always 1, for the memory backend. The lowest of the workers.',
            ["node"],
            "livemin",
        )
        self.cache_requests = self._counter(
            "crossway_cache_requests",
            "Requests seen by the response cache, by result (hit, miss, bypass, coalesced, "
            "semantic).",
            ["result"],
        )
        self.cache_saved_usd = self._counter(
            "crossway_cache_saved_usd",
            "What answers served by the response cache would have cost upstream, in USD.",
            [],
        )
        self.cache_bytes = self._gauge(
            "crossway_cache_bytes",
            "Bytes of entries held by the in-process response cache (memory backend).",
            [],
            "livesum",
        )
        self.cache_errors = self._counter(
            "crossway_cache_errors",
            "Cache reads and writes that failed and were served as misses, by reason "
            "(backend, corrupt, embedding).",
            ["reason"],
        )
        self.auth_failures = self._counter(
            "crossway_auth_failures",
            "Requests refused by the auth plugin, by reason (missing, malformed, invalid, "
            "blocked, expired, unavailable, model_not_allowed).",
            ["reason"],
        )
        self.rate_limited = self._counter(
            "crossway_rate_limited",
            "Requests refused by the limits plugin, by scope (key, team) and limit (rpm, tpm, "
            "max_parallel).",
            ["scope", "limit"],
        )
        self.http_rejected = self._counter(
            "crossway_http_rejected",
            "Requests refused below the routes (malformed HTTP; the error handler), by status.",
            ["status"],
        )
        self.budget_alerts = self._counter(
            "crossway_budget_alerts",
            "Budgets whose soft limit was crossed (once per period), by scope (key, team, user).",
            ["scope"],
        )
        self.budget_rejected = self._counter(
            "crossway_budget_rejected",
            "Requests refused because a budget was spent (429 budget_exceeded), by scope (key,"
            " team, user).",
            ["scope"],
        )
        self.ledger_pending = self._gauge(
            "crossway_ledger_pending",
            "Spend records not yet in the database: queued, or journaled and not replayed.",
            [],
            "livesum",
        )
        self.ledger_journaled = self._counter(
            "crossway_ledger_journaled",
            "Spend records written to the local journal because the database failed or was slow.",
            [],
        )
        self.ledger_dropped = self._counter(
            "crossway_ledger_dropped",
            "Spend records lost: arriving at a full queue (max_queue records waiting), unreadable"
            " journal lines, or at shutdown neither the database nor the journal taking them.",
            [],
        )
        self.request_logs_pending = self._gauge(
            "crossway_request_logs_pending",
            "Request log records not yet in the database: queued, or journaled and not replayed.",
            [],
            "livesum",
        )
        self.request_logs_journaled = self._counter(
            "crossway_request_logs_journaled",
            "Request log records written to the local journal because the database failed.",
            [],
        )
        self.request_logs_dropped = self._counter(
            "crossway_request_logs_dropped",
            "Request log records lost: a full queue, unreadable journal lines, or at shutdown"
            " neither the database nor the journal taking them.",
            [],
        )
        self.request_log_exported = self._counter(
            "crossway_request_log_exported",
            "Request log records an export sink took, by sink (jsonl, otlp).",
            ["sink"],
        )
        self.request_log_export_dropped = self._counter(
            "crossway_request_log_export_dropped",
            "Request log records an export sink lost (its buffer full, or closing), by sink.",
            ["sink"],
        )
        self.request_log_export_buffered = self._gauge(
            "crossway_request_log_export_buffered",
            "Request log records waiting for an export sink, by sink.",
            ["sink"],
            "livesum",
        )
        self.mcp_tool_calls = self._counter(
            "crossway_mcp_tool_calls",
            "MCP tools/call requests, by server and result (ok, tool_error, error, denied,"
            " limited, unavailable, cancelled).",
            ["server", "result"],
        )
        self.mcp_tool_call_duration = self._histogram(
            "crossway_mcp_tool_call_duration_seconds",
            "Time an MCP tools/call took, by server (admitted calls only).",
            ["server"],
            _LATENCY_BUCKETS,
        )
        self.mcp_server_up = self._gauge(
            "crossway_mcp_server_up",
            "1 while an MCP server is connected, else 0.",
            ["server"],
            "max",
        )
        # Series that alerts watch with increase() exist from the start, at 0.
        for result in ("ok", "error"):
            self.config_reloads(result)
        self.ledger_dropped()
        self.request_logs_dropped()

    def _counter(self, name: str, doc: str, labels: list[str]) -> _Children:
        if self.multiprocess:
            return _Children(Counter(name, doc, labels, registry=self.registry))
        return _Children(self._local.family(LocalFamily("counter", name, doc, labels)))

    def _gauge(self, name: str, doc: str, labels: list[str], mode: GaugeMode) -> _Children:
        if self.multiprocess:
            return _Children(
                Gauge(name, doc, labels, registry=self.registry, multiprocess_mode=mode)
            )
        return _Children(self._local.family(LocalFamily("gauge", name, doc, labels)))

    def _histogram(
        self, name: str, doc: str, labels: list[str], buckets: tuple[float, ...]
    ) -> _Children:
        if self.multiprocess:
            return _Children(Histogram(name, doc, labels, buckets=buckets, registry=self.registry))
        return _Children(self._local.family(LocalFamily("histogram", name, doc, labels, buckets)))

    def request_series(self, dialect: str, model: str, provider: str) -> RequestSeries:
        """The series a request with these labels records into (cached). ``model`` must
        already be bounded (:attr:`model_label`)."""
        key = (dialect, model, provider)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = RequestSeries(self, dialect, model, provider)
        return series

    def render(self) -> bytes:
        """The exposition text for ``/metrics`` (every worker's samples in multiprocess mode)."""
        return generate_latest(self._readable())

    def collect(self) -> Iterable[Metric]:
        """Every family with its samples, as structured values (every worker's in
        multiprocess mode): what in-process readers such as the admin overview use."""
        return self._readable().collect()

    def _readable(self) -> CollectorRegistry:
        if not self.multiprocess:
            return self.registry
        registry = CollectorRegistry()
        prometheus_multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # prometheus-client leaves its __init__ unannotated
        return registry
