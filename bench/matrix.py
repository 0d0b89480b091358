"""The benchmark matrix: which cells run, and how one cell is measured.

A cell is one (target, mode, upstream latency, concurrency) combination. Measuring a
cell means: open a fresh client session, warm up (unmeasured), snapshot the target's CPU
time, run the measured load, snapshot again. The target ``direct`` is the mock upstream
itself, measured at concurrency 1 only, as the baseline for overhead.
"""

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bench import procstat
from bench.driver import LoadSpec, open_session, run_load
from bench.targets import Server, set_upstream_latency

DIRECT = "direct"
TARGETS = ("passthrough", "gateway")
BASELINE_CONCURRENCY = 1


def mode_name(stream: bool) -> str:
    """``stream`` or ``non-stream``."""
    return "stream" if stream else "non-stream"


@dataclass(frozen=True)
class Cell:
    """One combination of the matrix."""

    target: str
    stream: bool
    latency_ms: int
    concurrency: int

    @property
    def mode(self) -> str:
        """``stream`` or ``non-stream``."""
        return mode_name(self.stream)


@dataclass(frozen=True)
class Settings:
    """How long and how hard each cell is driven."""

    duration_s: float
    warmup_s: float
    max_requests: int
    request_timeout_s: float


@dataclass(frozen=True)
class CellResult:
    """Figures of one measured cell; latencies in ms over successful requests only.

    ``cpu_ms_per_request`` is the target's user+system CPU time over the measured window
    divided by successful requests; ``server_cpu_percent`` and ``driver_cpu_percent`` are
    CPU time over wall time (100 = one core busy) for the target and the load driver.
    ``ttfb_p50_ms`` (time to first body byte) is set for streams only.
    """

    cell: Cell
    requests: int
    errors: dict[str, int]
    wall_s: float
    requests_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    ttfb_p50_ms: float | None
    cpu_ms_per_request: float | None
    server_cpu_percent: float
    driver_cpu_percent: float

    @property
    def error_count(self) -> int:
        """All failed requests, whatever the kind."""
        return sum(self.errors.values())


def plan(
    targets: Sequence[str],
    modes: Sequence[bool],
    latencies_ms: Sequence[int],
    concurrencies: Sequence[int],
) -> list[Cell]:
    """Return the cells to run, grouped by latency, then mode, then target.

    The ``direct`` baseline is included for each latency and mode when concurrency 1 is.
    """
    cells: list[Cell] = []
    for latency_ms in latencies_ms:
        for stream in modes:
            if BASELINE_CONCURRENCY in concurrencies:
                cells.append(Cell(DIRECT, stream, latency_ms, BASELINE_CONCURRENCY))
            for target in targets:
                cells.extend(Cell(target, stream, latency_ms, c) for c in concurrencies)
    return cells


async def run_matrix(
    cells: Sequence[Cell],
    servers: Mapping[str, Server],
    upstream: Server,
    settings: Settings,
    on_result: Callable[[CellResult], None],
) -> list[CellResult]:
    """Measure ``cells`` in order against ``servers`` (keyed by target name).

    The upstream's latency is switched whenever a cell needs a different one;
    ``on_result`` is called after each cell.
    """
    results: list[CellResult] = []
    current_latency: int | None = None
    async with open_session(settings.request_timeout_s) as control:
        for cell in cells:
            if cell.latency_ms != current_latency:
                await set_upstream_latency(control, upstream, cell.latency_ms)
                current_latency = cell.latency_ms
            result = await run_cell(cell, servers[cell.target], settings)
            on_result(result)
            results.append(result)
    return results


async def run_cell(cell: Cell, server: Server, settings: Settings) -> CellResult:
    """Warm up, then measure one cell against ``server``."""

    def spec(duration_s: float) -> LoadSpec:
        return LoadSpec(
            url=server.chat_url,
            stream=cell.stream,
            concurrency=cell.concurrency,
            duration_s=duration_s,
            max_requests=settings.max_requests,
        )

    async with open_session(settings.request_timeout_s) as session:
        await run_load(session, spec(settings.warmup_s))
        cpu_before = procstat.cpu_seconds(server.pid)
        driver_before = time.process_time()
        load = await run_load(session, spec(settings.duration_s))
        driver_cpu_s = time.process_time() - driver_before
        server_cpu_s = procstat.cpu_delta(cpu_before, procstat.cpu_seconds(server.pid))

    latencies = sorted(load.latencies_s)
    wall_s = max(load.wall_s, 1e-9)
    return CellResult(
        cell=cell,
        requests=load.succeeded,
        errors=dict(load.errors),
        wall_s=load.wall_s,
        requests_per_s=load.succeeded / wall_s,
        p50_ms=_percentile_ms(latencies, 0.50),
        p99_ms=_percentile_ms(latencies, 0.99),
        ttfb_p50_ms=_percentile_ms(sorted(load.ttfb_s), 0.50),
        cpu_ms_per_request=server_cpu_s * 1000 / load.succeeded if load.succeeded else None,
        server_cpu_percent=100 * server_cpu_s / wall_s,
        driver_cpu_percent=100 * driver_cpu_s / wall_s,
    )


def _percentile_ms(ordered_s: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of ascending seconds, in ms; ``None`` when empty."""
    if not ordered_s:
        return None
    index = min(len(ordered_s) - 1, max(0, math.ceil(fraction * len(ordered_s)) - 1))
    return ordered_s[index] * 1000
