"""Derived figures: overhead against the direct baseline, and the pass/fail targets.

Overhead of a target = its latency percentile at concurrency 1 minus the same
percentile measured directly against the upstream, for the same mode and latency.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from bench.matrix import BASELINE_CONCURRENCY, DIRECT, CellResult, mode_name
from bench.micro.cache_lookup import CONVERSATION_BYTES, CacheLookup
from bench.procstat import Memory

MIN_THROUGHPUT_RATIO = 0.75
MAX_CPU_RATIO = 1.5
MAX_P50_OVERHEAD_MS = 1.0
MAX_RSS_MIB = 100.0
MIN_CACHE_HIT_CPU_SAVING = 3.0
MAX_CACHE_LOOKUP_US = 15.0
MAX_CACHE_MISS_CPU_RATIO = 1.2
MAX_SHIPPED_CHAIN_CPU_RATIO = 1.25  # gateway-default over gateway, 50 ms upstream, 256 conns
MAX_AUTH_CPU_RATIO = 1.3  # gateway-auth over passthrough, c=64, 0 ms
MIN_AUTH_THROUGHPUT_RATIO = 0.8
MAX_GOVERNANCE_CPU_RATIO = 2.0  # gateway-gov-redis over passthrough, c=64, 0 ms
MAX_REDIS_COMMANDS_PER_REQUEST = 2.0
LOAD_CONCURRENCY = 64
STRESS_CONCURRENCY = 256
STRESS_LATENCY_MS = 50
_MODES = (False, True)

Status = Literal["PASS", "FAIL", "SKIP"]


@dataclass(frozen=True)
class Overhead:
    """Latency a target adds over the direct baseline at concurrency 1, in ms."""

    target: str
    mode: str
    latency_ms: int
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class Check:
    """One performance target and whether the run met it."""

    name: str
    status: Status
    detail: str


def _find(
    results: Sequence[CellResult], target: str, stream: bool, latency_ms: int, concurrency: int
) -> CellResult | None:
    for result in results:
        cell = result.cell
        if (cell.target, cell.stream, cell.latency_ms, cell.concurrency) == (
            target,
            stream,
            latency_ms,
            concurrency,
        ):
            return result
    return None


def _difference(minuend: float | None, subtrahend: float | None) -> float | None:
    if minuend is None or subtrahend is None:
        return None
    return minuend - subtrahend


def overheads(results: Sequence[CellResult]) -> list[Overhead]:
    """Return the overhead of every non-direct cell at concurrency 1 that has a baseline."""
    found: list[Overhead] = []
    for result in results:
        cell = result.cell
        if cell.target == DIRECT or cell.concurrency != BASELINE_CONCURRENCY:
            continue
        direct = _find(results, DIRECT, cell.stream, cell.latency_ms, BASELINE_CONCURRENCY)
        if direct is None:
            continue
        p50_ms = _difference(result.p50_ms, direct.p50_ms)
        p99_ms = _difference(result.p99_ms, direct.p99_ms)
        if p50_ms is not None and p99_ms is not None:
            found.append(Overhead(cell.target, cell.mode, cell.latency_ms, p50_ms, p99_ms))
    return found


def _throughput_check(results: Sequence[CellResult], stream: bool) -> Check:
    return _throughput_ratio_check(results, "gateway", MIN_THROUGHPUT_RATIO, stream, "")


def _cpu_check(results: Sequence[CellResult], stream: bool) -> Check:
    where = (stream, 0, LOAD_CONCURRENCY)
    return _cpu_ratio_check(results, "gateway", "passthrough", MAX_CPU_RATIO, where, "")


def _overhead_check(found: Sequence[Overhead], stream: bool) -> Check:
    name = f"p50 overhead <= {MAX_P50_OVERHEAD_MS} ms (c=1, 0 ms, {mode_name(stream)})"
    by_target = {o.target: o for o in found if o.latency_ms == 0 and o.mode == mode_name(stream)}
    gateway = by_target.get("gateway")
    passthrough = by_target.get("passthrough")
    floor = f"; passthrough {passthrough.p50_ms:.3f} ms" if passthrough else ""
    if gateway is None:
        return Check(name, "SKIP", "not measured" + floor)
    detail = f"gateway {gateway.p50_ms:.3f} ms{floor}"
    return Check(name, "PASS" if gateway.p50_ms <= MAX_P50_OVERHEAD_MS else "FAIL", detail)


def _error_check(results: Sequence[CellResult], stream: bool) -> Check:
    kind = "streams" if stream else "requests"
    name = f"zero errors, {STRESS_CONCURRENCY} concurrent {kind}, {STRESS_LATENCY_MS} ms upstream"
    gateway = _find(results, "gateway", stream, STRESS_LATENCY_MS, STRESS_CONCURRENCY)
    if gateway is None:
        return Check(name, "SKIP", "not measured")
    if gateway.requests == 0:
        return Check(name, "FAIL", "gateway completed no request")
    detail = f"{gateway.error_count} errors in {gateway.requests + gateway.error_count} requests"
    if gateway.errors:
        detail += f" {gateway.errors}"
    return Check(name, "PASS" if gateway.error_count == 0 else "FAIL", detail)


def _rss_check(memory: Mapping[str, Memory]) -> Check:
    name = f"gateway RSS <= {MAX_RSS_MIB:.0f} MiB after the run"
    gateway = memory.get("gateway")
    if gateway is None:
        return Check(name, "SKIP", "not measured")
    detail = f"{gateway.rss_mib:.1f} MiB (peak {gateway.peak_rss_mib:.1f} MiB)"
    return Check(name, "PASS" if gateway.rss_mib <= MAX_RSS_MIB else "FAIL", detail)


def _cache_hit_check(results: Sequence[CellResult], stream: bool) -> Check:
    name = f"cache hit CPU <= 1/{MIN_CACHE_HIT_CPU_SAVING:g} of a miss through the empty chain "
    name += f"(c={LOAD_CONCURRENCY}, 0 ms, {mode_name(stream)})"
    miss = _find(results, "gateway", stream, 0, LOAD_CONCURRENCY)
    hit = _find(results, "gateway-cache", stream, 0, LOAD_CONCURRENCY)
    if miss is None or hit is None or not miss.cpu_ms_per_request:
        return Check(name, "SKIP", "not measured")
    if not hit.cpu_ms_per_request:
        return Check(name, "FAIL", "gateway-cache completed no request")
    ratio = miss.cpu_ms_per_request / hit.cpu_ms_per_request
    detail = (
        f"hit {hit.cpu_ms_per_request:.3f} ms (p50 {_number(hit.p50_ms)} ms) vs miss "
        f"{miss.cpu_ms_per_request:.3f} ms (p50 {_number(miss.p50_ms)} ms) = {ratio:.2f}x cheaper"
    )
    return Check(name, "PASS" if ratio >= MIN_CACHE_HIT_CPU_SAVING else "FAIL", detail)


def _cache_miss_check(results: Sequence[CellResult], stream: bool) -> Check:
    name = f"cache miss CPU <= {MAX_CACHE_MISS_CPU_RATIO}x the empty chain's "
    name += f"(c={LOAD_CONCURRENCY}, 0 ms, {mode_name(stream)})"
    plain = _find(results, "gateway", stream, 0, LOAD_CONCURRENCY)
    miss = _find(results, "gateway-cache-miss", stream, 0, LOAD_CONCURRENCY)
    if plain is None or miss is None or not plain.cpu_ms_per_request:
        return Check(name, "SKIP", "not measured")
    if not miss.cpu_ms_per_request:
        return Check(name, "FAIL", "gateway-cache-miss completed no request")
    ratio = miss.cpu_ms_per_request / plain.cpu_ms_per_request
    detail = (
        f"miss through the cache {miss.cpu_ms_per_request:.3f} ms (p50 {_number(miss.p50_ms)} "
        f"ms) vs without {plain.cpu_ms_per_request:.3f} ms (p50 {_number(plain.p50_ms)} ms) "
        f"= {ratio:.2f}x"
    )
    return Check(name, "PASS" if ratio <= MAX_CACHE_MISS_CPU_RATIO else "FAIL", detail)


def _cache_lookup_check(lookup: CacheLookup | None) -> Check:
    name = f"cache miss lookup <= {MAX_CACHE_LOOKUP_US:g} us ({CONVERSATION_BYTES} B conversation)"
    if lookup is None:
        return Check(name, "SKIP", "not measured")
    detail = (
        f"{lookup.lookup_us:.1f} us CPU for a {lookup.request_bytes} B request; "
        f"then {lookup.store_us:.1f} us to store its answer, after the reply"
    )
    return Check(name, "PASS" if lookup.lookup_us <= MAX_CACHE_LOOKUP_US else "FAIL", detail)


def _cpu_ratio_check(
    results: Sequence[CellResult],
    target: str,
    baseline: str,
    limit: float,
    where: tuple[bool, int, int],
    label: str | None = None,
) -> Check:
    """``target``'s CPU per request at most ``limit`` times ``baseline``'s in the cell
    ``where`` (stream, latency, concurrency); the check is named after ``label`` (default: the
    target's name)."""
    stream, latency_ms, concurrency = where
    name = f"{target if label is None else label} CPU/request <= {limit:g}x {baseline} ".lstrip()
    name += f"(c={concurrency}, {latency_ms} ms, {mode_name(stream)})"
    measured = _find(results, target, stream, latency_ms, concurrency)
    base = _find(results, baseline, stream, latency_ms, concurrency)
    if measured is None or base is None or not base.cpu_ms_per_request:
        return Check(name, "SKIP", "not measured")
    if measured.cpu_ms_per_request is None:
        return Check(name, "FAIL", f"{target} completed no request")
    ratio = measured.cpu_ms_per_request / base.cpu_ms_per_request
    detail = (
        f"{target} {measured.cpu_ms_per_request:.3f} ms vs {baseline} "
        f"{base.cpu_ms_per_request:.3f} ms = {ratio:.2f}x"
    )
    return Check(name, "PASS" if ratio <= limit else "FAIL", detail)


def _throughput_ratio_check(
    results: Sequence[CellResult],
    target: str,
    minimum: float,
    stream: bool,
    label: str | None = None,
) -> Check:
    """``target``'s req/s at least ``minimum`` of the passthrough's (c=64, 0 ms); named after
    ``label`` as :func:`_cpu_ratio_check` is."""
    name = f"{target if label is None else label} throughput >= {minimum:.0%} of passthrough "
    name = name.lstrip() + f"(c={LOAD_CONCURRENCY}, 0 ms, {mode_name(stream)})"
    measured = _find(results, target, stream, 0, LOAD_CONCURRENCY)
    base = _find(results, "passthrough", stream, 0, LOAD_CONCURRENCY)
    if measured is None or base is None or base.requests_per_s == 0:
        return Check(name, "SKIP", "not measured")
    ratio = measured.requests_per_s / base.requests_per_s
    detail = (
        f"{target} {measured.requests_per_s:.0f} req/s vs passthrough "
        f"{base.requests_per_s:.0f} req/s = {ratio:.0%}"
    )
    return Check(name, "PASS" if ratio >= minimum else "FAIL", detail)


def _redis_commands_check(results: Sequence[CellResult], stream: bool) -> Check:
    name = f"gateway-gov-redis Redis commands/request <= {MAX_REDIS_COMMANDS_PER_REQUEST:g} "
    name += f"(c={LOAD_CONCURRENCY}, 0 ms, {mode_name(stream)})"
    measured = _find(results, "gateway-gov-redis", stream, 0, LOAD_CONCURRENCY)
    per_request = None if measured is None else measured.redis_commands_per_request
    if measured is None or per_request is None:
        return Check(name, "SKIP", "not measured")
    writes = measured.redis_writes_per_request
    detail = f"{per_request:.2f} commands per request, in {writes or 0:.2f} writes"
    ok = per_request <= MAX_REDIS_COMMANDS_PER_REQUEST
    return Check(name, "PASS" if ok else "FAIL", detail)


def _variant_checks(results: Sequence[CellResult]) -> list[Check]:
    """The variants' own targets, for the variants that ran: the shipped chain against the
    empty one, auth and limits and the governance chain against the passthrough."""
    targets = {result.cell.target for result in results}
    found: list[Check] = []
    stress = (STRESS_LATENCY_MS, STRESS_CONCURRENCY)
    load = (0, LOAD_CONCURRENCY)
    for stream in _MODES:
        if "gateway-default" in targets:
            found.append(
                _cpu_ratio_check(
                    results,
                    "gateway-default",
                    "gateway",
                    MAX_SHIPPED_CHAIN_CPU_RATIO,
                    (stream, *stress),
                )
            )
        if "gateway-auth" in targets:
            found.append(
                _cpu_ratio_check(
                    results, "gateway-auth", "passthrough", MAX_AUTH_CPU_RATIO, (stream, *load)
                )
            )
            found.append(
                _throughput_ratio_check(results, "gateway-auth", MIN_AUTH_THROUGHPUT_RATIO, stream)
            )
        if "gateway-gov-redis" in targets:
            found.append(
                _cpu_ratio_check(
                    results,
                    "gateway-gov-redis",
                    "passthrough",
                    MAX_GOVERNANCE_CPU_RATIO,
                    (stream, *load),
                )
            )
            found.append(_redis_commands_check(results, stream))
    return found


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def checks(
    results: Sequence[CellResult],
    found: Sequence[Overhead],
    memory: Mapping[str, Memory],
    cache_lookup: CacheLookup | None = None,
) -> list[Check]:
    """Evaluate every target; a check whose cells were not run is ``SKIP``. The cache checks
    appear only when a cache target ran (``cache_lookup`` is the in-process figure measured
    with ``gateway-cache``)."""
    found_checks = [
        *(_throughput_check(results, stream) for stream in _MODES),
        *(_cpu_check(results, stream) for stream in _MODES),
        *(_overhead_check(found, stream) for stream in _MODES),
        *(_error_check(results, stream) for stream in _MODES),
        _rss_check(memory),
    ]
    targets = {result.cell.target for result in results}
    if "gateway-cache" in targets:
        found_checks += [_cache_hit_check(results, stream) for stream in _MODES]
        found_checks.append(_cache_lookup_check(cache_lookup))
    if "gateway-cache-miss" in targets:
        found_checks += [_cache_miss_check(results, stream) for stream in _MODES]
    return found_checks + _variant_checks(results)
