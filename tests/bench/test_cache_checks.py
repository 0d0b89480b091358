"""The cache targets' checks, on made-up cells (no server, no timing)."""

from __future__ import annotations

from bench.analysis import checks
from bench.matrix import Cell, CellResult
from bench.micro.cache_lookup import CacheLookup


def cell(target: str, stream: bool, cpu_ms: float) -> CellResult:
    return CellResult(
        cell=Cell(target, stream, 0, 64),
        requests=100,
        errors={},
        wall_s=1.0,
        requests_per_s=100.0,
        p50_ms=1.0,
        p99_ms=2.0,
        ttfb_p50_ms=None,
        cpu_ms_per_request=cpu_ms,
        server_cpu_percent=50.0,
        driver_cpu_percent=20.0,
    )


def statuses(results: list[CellResult], lookup: CacheLookup | None = None) -> dict[str, str]:
    return {c.name: c.status for c in checks(results, [], {}, lookup) if "cache" in c.name}


def test_cache_checks_appear_only_with_cache_targets() -> None:
    assert statuses([cell("gateway", False, 0.2)]) == {}


def test_a_hit_must_cost_a_third_of_a_miss_and_a_miss_at_most_1_2_times() -> None:
    results = [
        cell("gateway", False, 0.30),
        cell("gateway-cache", False, 0.09),
        cell("gateway-cache-miss", False, 0.35),
        cell("gateway", True, 0.30),
        cell("gateway-cache", True, 0.11),
        cell("gateway-cache-miss", True, 0.37),
    ]
    found = statuses(results, CacheLookup(lookup_us=15.0, store_us=3.0, request_bytes=2048))
    by_kind = sorted((name.split(" (")[0].split(" <=")[0], s) for name, s in found.items())
    assert by_kind == [
        ("cache hit CPU", "FAIL"),  # stream: 0.30 / 0.11 < 3
        ("cache hit CPU", "PASS"),
        ("cache miss CPU", "FAIL"),  # stream: 0.37 / 0.30 > 1.2
        ("cache miss CPU", "PASS"),
        ("cache miss lookup", "PASS"),
    ]


def test_an_unmeasured_lookup_is_skipped_and_a_slow_one_fails() -> None:
    results = [cell("gateway-cache", False, 0.1)]
    assert "SKIP" in statuses(results).values()
    slow = CacheLookup(lookup_us=15.1, store_us=1.0, request_bytes=2048)
    assert [s for n, s in statuses(results, slow).items() if "lookup" in n] == ["FAIL"]
