"""Metric values kept in this process, without locks, and exposed through prometheus-client at
scrape time: the single-process mode of :class:`proxy.core.metrics.Metrics`.

prometheus-client guards every update with a lock for threaded servers; the gateway updates
metrics from one event loop, so plain attributes are enough and several times cheaper.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString


def _go_float(value: float) -> str:
    """``value`` as the exposition format writes a bucket bound (Go's float formatting)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]  # prometheus-client leaves it unannotated
    return text


class LocalValue:
    """A counter or gauge child kept in a plain float (the event loop is single-threaded)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = value


class LocalHistogram:
    """A histogram child: per-bucket counts (non-cumulative until exposition) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class LocalFamily:
    """One metric family whose children live in this process only, without locks.

    prometheus-client guards every update with a lock for threaded servers; the gateway updates
    metrics from one event loop, so plain attributes are enough and several times cheaper.
    """

    def __init__(
        self,
        kind: str,
        name: str,
        doc: str,
        labels: list[str],
        buckets: tuple[float, ...] = (),
    ) -> None:
        self.kind = kind
        self.name = name
        self.doc = doc
        self.labelnames = labels
        self.buckets = buckets
        self.children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        child = self.children.get(values)
        if child is None:
            child = LocalHistogram(self.buckets) if self.kind == "histogram" else LocalValue()
            self.children[values] = child
        return child

    def sample(self) -> Metric:
        """This family in prometheus-client's exposition form."""
        if self.kind == "counter":
            counter = CounterMetricFamily(self.name, self.doc, labels=self.labelnames)
            for values, child in self.children.items():
                counter.add_metric(values, child.value)
            return counter
        if self.kind == "gauge":
            gauge = GaugeMetricFamily(self.name, self.doc, labels=self.labelnames)
            for values, child in self.children.items():
                gauge.add_metric(values, child.value)
            return gauge
        histogram = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, child in self.children.items():
            cumulative = list(itertools.accumulate(child.counts))
            bounds = [*(_go_float(bound) for bound in child.bounds), "+Inf"]
            histogram.add_metric(values, list(zip(bounds, cumulative, strict=True)), child.sum)
        return histogram


class LocalCollector:
    """Exposes the :class:`LocalFamily` metrics through a prometheus-client registry."""

    def __init__(self) -> None:
        self._families: list[LocalFamily] = []

    def family(self, family: LocalFamily) -> LocalFamily:
        self._families.append(family)
        return family

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            yield family.sample()
