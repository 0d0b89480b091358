"""proxy/core/metrics.py: the lock-free in-process families render exactly like
prometheus-client's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.core.canonical import Usage
from proxy.core.metrics import OTHER, BoundedLabel, Metrics

BUCKETS = (0.1, 0.5, 1.0)


def _lines(text: bytes) -> set[str]:
    return {line for line in text.decode().splitlines() if not line.startswith("#")}


def test_local_families_match_prometheus_client() -> None:
    metrics = Metrics()
    reference = CollectorRegistry()
    histogram = Histogram("crossway_x_seconds", "x", ["a"], buckets=BUCKETS, registry=reference)
    counter = Counter("crossway_y", "y", ["a"], registry=reference)
    gauge = Gauge("crossway_z", "z", ["a"], registry=reference)
    local_histogram = metrics._histogram("crossway_x_seconds", "x", ["a"], BUCKETS)
    local_counter = metrics._counter("crossway_y", "y", ["a"])
    local_gauge = metrics._gauge("crossway_z", "z", ["a"], "livesum")
    for value in (0.05, 0.1, 0.3, 1.0, 7.0):  # bounds are inclusive: 0.1 counts in le="0.1"
        histogram.labels("v").observe(value)
        local_histogram("v").observe(value)
    counter.labels("v").inc(3)
    local_counter("v").inc(3)
    gauge.labels("v").inc(2)
    gauge.labels("v").dec()
    local_gauge("v").inc(2)
    local_gauge("v").dec()
    expected = {line for line in _lines(generate_latest(reference)) if "_created" not in line}
    rendered = _lines(metrics.render())
    assert expected <= rendered


def test_tokens_are_counted_by_disjoint_kind() -> None:
    metrics = Metrics()
    metrics.request_series("d", "m", "p").record_tokens(
        Usage(input=7, cache_read=3, output=5, reasoning=2)
    )
    text = metrics.render().decode()
    for kind, count in (("input", 7), ("cache_read", 3), ("output", 5), ("reasoning", 2)):
        assert f'crossway_tokens_total{{kind="{kind}",model="m",provider="p"}} {count}.0' in text
    assert 'kind="cache_write"' not in text


def test_a_request_series_exports_only_what_it_recorded() -> None:
    metrics = Metrics()
    series = metrics.request_series("d", "m", "p")
    assert metrics.request_series("d", "m", "p") is series
    series.count(200)
    series.count(503)
    series.duration.observe(0.1)
    text = metrics.render().decode()
    labels = 'dialect="d",model="m",provider="p"'
    assert f'crossway_requests_total{{{labels},status_class="2xx"}} 1.0' in text
    assert f'crossway_requests_total{{{labels},status_class="5xx"}} 1.0' in text
    assert "4xx" not in text
    assert "crossway_time_to_first_token_seconds_count{" not in text
    assert "crossway_upstream_duration_seconds_count{" not in text
    series.time_to_first_token(0.05)
    series.upstream(0.02)
    text = metrics.render().decode()
    assert f"crossway_time_to_first_token_seconds_count{{{labels}}} 1.0" in text
    assert 'crossway_upstream_duration_seconds_count{provider="p"} 1.0' in text


def test_model_label_is_bounded() -> None:
    label = BoundedLabel(2)
    assert [label(m) for m in ("a", "b", "c", "a")] == ["a", "b", OTHER, "a"]


def test_reload_counters_exist_from_the_start() -> None:
    text = Metrics().render().decode()
    assert 'crossway_config_reloads_total{result="error"} 0.0' in text
