"""The variants' checks and the standard matrix's extra cells, on made-up cells (no timing)."""

from __future__ import annotations

from bench.analysis import checks
from bench.matrix import STANDARD_EXTRAS, Cell, CellResult, plan


def cell(
    target: str,
    cpu_ms: float,
    *,
    latency_ms: int = 0,
    concurrency: int = 64,
    rps: float = 100.0,
    redis: tuple[int, int] | None = None,
) -> CellResult:
    return CellResult(
        cell=Cell(target, False, latency_ms, concurrency),
        requests=100,
        errors={},
        wall_s=1.0,
        requests_per_s=rps,
        p50_ms=1.0,
        p99_ms=2.0,
        ttfb_p50_ms=None,
        cpu_ms_per_request=cpu_ms,
        server_cpu_percent=50.0,
        driver_cpu_percent=20.0,
        redis_commands=None if redis is None else redis[0],
        redis_writes=None if redis is None else redis[1],
    )


def statuses(results: list[CellResult], word: str) -> dict[str, str]:
    return {
        c.name.split(" (")[0]: c.status
        for c in checks(results, [], {})
        if word in c.name and "non-stream" in c.name
    }


def test_the_shipped_chain_may_cost_a_quarter_more_than_the_empty_one_at_50_ms_256():
    stress = {"latency_ms": 50, "concurrency": 256}
    within = [cell("gateway", 0.40, **stress), cell("gateway-default", 0.50, **stress)]
    beyond = [cell("gateway", 0.40, **stress), cell("gateway-default", 0.51, **stress)]
    assert statuses(within, "gateway-default") == {
        "gateway-default CPU/request <= 1.25x gateway": "PASS"
    }
    assert set(statuses(beyond, "gateway-default").values()) == {"FAIL"}


def test_auth_and_limits_are_held_to_1_3x_the_passthrough_and_80_percent_throughput():
    results = [cell("passthrough", 0.50), cell("gateway-auth", 0.64, rps=81.0)]
    assert set(statuses(results, "gateway-auth").values()) == {"PASS"}
    results = [cell("passthrough", 0.50), cell("gateway-auth", 0.66, rps=79.0)]
    assert statuses(results, "gateway-auth") == {
        "gateway-auth CPU/request <= 1.3x passthrough": "FAIL",
        "gateway-auth throughput >= 80% of passthrough": "FAIL",
    }


def test_the_governance_chain_on_redis_is_held_to_2x_and_two_commands_per_request():
    results = [cell("passthrough", 0.50), cell("gateway-gov-redis", 1.0, redis=(200, 40))]
    assert set(statuses(results, "gateway-gov-redis").values()) == {"PASS"}
    results = [cell("passthrough", 0.50), cell("gateway-gov-redis", 1.01, redis=(201, 40))]
    assert set(statuses(results, "gateway-gov-redis").values()) == {"FAIL"}


def test_variant_checks_appear_only_with_their_variants():
    assert statuses([cell("passthrough", 0.5), cell("gateway", 0.6)], "gateway-") == {}


def test_the_standard_matrix_adds_the_shipped_chain_at_50_ms_and_256_connections():
    cells = plan(("passthrough", "gateway"), (False, True), (0, 50), (1, 64, 256), STANDARD_EXTRAS)
    extra = [c for c in cells if c.target == "gateway-default"]
    assert [(c.stream, c.latency_ms, c.concurrency) for c in extra] == [
        (False, 50, 256),
        (True, 50, 256),
    ]
    quick = plan(("passthrough", "gateway"), (False,), (0,), (1, 64), STANDARD_EXTRAS)
    assert all(c.target != "gateway-default" for c in quick)
