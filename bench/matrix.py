"""The benchmark matrix: which cells run, and how one cell is measured.

A cell is one (target, mode, upstream latency, concurrency) combination. Measuring a
cell means: open a fresh client session, warm up (unmeasured), snapshot the target's CPU
time, run the measured load, snapshot again. The target ``direct`` is the mock upstream
itself, measured at concurrency 1 only, as the baseline for overhead.

The cells that differ only by target are compared with each other, so they are measured in
interleaved rounds: the duration is split into ``rounds`` slices and each round measures one
slice of every target in turn. A change in the machine's load during the run then weighs on
every target alike instead of on whichever ran at that moment. A cell's figures sum its
slices (requests, CPU, wall time) and pool their latencies.
"""

import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench import procstat, raw_driver
from bench.driver import LoadResult, LoadSpec, open_session, run_load
from bench.targets import GATEWAY_VARIANTS, Server, set_upstream_latency

DIRECT = "direct"
# every target, in report order; ``litellm`` is LiteLLM's proxy (bench/litellm.py), opt-in
TARGETS = ("passthrough", "gateway", *GATEWAY_VARIANTS, "litellm")
DEFAULT_TARGETS = ("passthrough", "gateway")  # the gateway variants are opt-in
# Variant cells the standard matrix (no --targets) adds: the shipped chain where its cost per
# request in flight shows, a 50 ms upstream at 256 connections.
STANDARD_EXTRAS = (("gateway-default", 50, 256),)
BASELINE_CONCURRENCY = 1
DRIVERS = ("aiohttp", "raw")
"""The load drivers: ``aiohttp`` (:mod:`bench.driver`, aiohttp's client) and ``raw``
(:mod:`bench.raw_driver`, the bench's own HTTP/1.1 connections)."""


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
    """How long and how hard each cell is driven: ``duration_s`` of measured load in
    ``rounds`` interleaved slices, each after ``warmup_s`` of unmeasured load; at most
    ``max_requests`` per cell."""

    duration_s: float
    warmup_s: float
    max_requests: int
    request_timeout_s: float
    rounds: int = 1
    driver: str = "aiohttp"  # or "raw": bench.raw_driver (see DRIVERS)
    conversation_bytes: int = 0  # 0: the standard prompt (bench.driver.request_body)


@dataclass(frozen=True)
class CellResult:
    """Figures of one measured cell; latencies in ms over successful requests only.

    ``cpu_ms_per_request`` is the target's user+system CPU time over the measured window
    divided by successful requests; ``server_cpu_percent`` and ``driver_cpu_percent`` are
    CPU time over wall time (100 = one core busy) for the target and the load driver.
    ``ttfb_p50_ms`` (time to first body byte) is set for streams only. ``redis_commands`` and
    ``redis_writes`` (targets keeping their state in Redis) count the commands the target sent
    to Redis during the measured window, and the writes that carried them (pipelined commands
    share one).
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
    redis_commands: int | None = None
    redis_writes: int | None = None
    redis_by_name: dict[str, int] | None = None

    @property
    def error_count(self) -> int:
        """All failed requests, whatever the kind."""
        return sum(self.errors.values())

    @property
    def redis_commands_per_request(self) -> float | None:
        """Redis commands per successful request; None without Redis or requests."""
        if self.redis_commands is None or not self.requests:
            return None
        return self.redis_commands / self.requests

    @property
    def redis_writes_per_request(self) -> float | None:
        """Writes to Redis (round trips, pipelined commands sharing one) per request."""
        if self.redis_writes is None or not self.requests:
            return None
        return self.redis_writes / self.requests


def plan(
    targets: Sequence[str],
    modes: Sequence[bool],
    latencies_ms: Sequence[int],
    concurrencies: Sequence[int],
    extras: Sequence[tuple[str, int, int]] = (),
) -> list[Cell]:
    """Return the cells to run, grouped by latency, then mode, then target.

    The ``direct`` baseline is included for each latency and mode when concurrency 1 is.
    ``extras`` are (target, latency, concurrency) cells added in every mode when that latency
    and concurrency are in the matrix (the standard matrix's :data:`STANDARD_EXTRAS`).
    """
    cells: list[Cell] = []
    for latency_ms in latencies_ms:
        for stream in modes:
            if BASELINE_CONCURRENCY in concurrencies:
                cells.append(Cell(DIRECT, stream, latency_ms, BASELINE_CONCURRENCY))
            for target in targets:
                cells.extend(Cell(target, stream, latency_ms, c) for c in concurrencies)
            for target, latency, concurrency in extras:
                extra = Cell(target, stream, latency, concurrency)
                if latency == latency_ms and concurrency in concurrencies and extra not in cells:
                    cells.append(extra)
    return cells


async def run_matrix(
    cells: Sequence[Cell],
    servers: Mapping[str, Server],
    upstream: Server,
    settings: Settings,
    on_result: Callable[[CellResult], None],
) -> list[CellResult]:
    """Measure ``cells`` against ``servers`` (keyed by target name), in their order.

    Cells that differ only by target are measured together in interleaved rounds (see the
    module docstring). The upstream's latency is switched whenever a group needs a different
    one; ``on_result`` is called after each cell, in the order of ``cells``.
    """
    results: list[CellResult] = []
    current_latency: int | None = None
    async with open_session(settings.request_timeout_s) as control:
        for group in _comparable_groups(cells):
            latency_ms = group[0].latency_ms
            if latency_ms != current_latency:
                await set_upstream_latency(control, upstream, latency_ms)
                current_latency = latency_ms
            slices: dict[Cell, list[_Slice]] = {cell: [] for cell in group}
            for _ in range(settings.rounds):
                for cell in group:
                    slices[cell].append(await _measure_slice(cell, servers[cell.target], settings))
            for cell in group:
                result = _combine(cell, slices[cell])
                on_result(result)
                results.append(result)
    return results


def _comparable_groups(cells: Sequence[Cell]) -> list[list[Cell]]:
    """``cells`` grouped by (latency, mode, concurrency), groups in order of first cell."""
    groups: dict[tuple[int, bool, int], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.latency_ms, cell.stream, cell.concurrency), []).append(cell)
    return list(groups.values())


@dataclass(frozen=True)
class _Slice:
    """One measured slice of a cell: the load's outcome and the CPU spent meanwhile."""

    load: LoadResult
    server_cpu_s: float
    driver_cpu_s: float
    redis_commands: tuple[int, int, Counter[str]] | None = None  # commands, writes, by name


async def _measure_slice(cell: Cell, server: Server, settings: Settings) -> _Slice:
    """Warm up, then measure one slice (``duration_s / rounds``) of ``cell``."""

    def spec(duration_s: float, max_requests: int) -> LoadSpec:
        return LoadSpec(
            url=server.chat_url,
            stream=cell.stream,
            concurrency=cell.concurrency,
            duration_s=duration_s,
            max_requests=max_requests,
            headers=server.headers,
            conversation_bytes=settings.conversation_bytes,
        )

    rounds = settings.rounds
    if settings.driver == "raw":
        session: Any = raw_driver.LoadSession(settings.request_timeout_s)
        run: Callable[[Any, LoadSpec], Awaitable[LoadResult]] = raw_driver.run_load
    else:
        session, run = open_session(settings.request_timeout_s), run_load
    async with session:
        await run(session, spec(settings.warmup_s, settings.max_requests))
        relay = server.redis
        sent_before = None if relay is None else (relay.commands, relay.writes, +relay.by_name)
        cpu_before = procstat.cpu_seconds(server.pid)
        driver_before = time.process_time()
        load = await run(
            session, spec(settings.duration_s / rounds, max(1, settings.max_requests // rounds))
        )
        driver_cpu_s = time.process_time() - driver_before
        server_cpu_s = procstat.cpu_delta(cpu_before, procstat.cpu_seconds(server.pid))
        sent = None
        if relay is not None and sent_before is not None:
            sent = (
                relay.commands - sent_before[0],
                relay.writes - sent_before[1],
                relay.by_name - sent_before[2],
            )
    return _Slice(load, server_cpu_s, driver_cpu_s, sent)


def _combine(cell: Cell, slices: Sequence[_Slice]) -> CellResult:
    """One cell's figures from its slices."""
    requests = sum(piece.load.succeeded for piece in slices)
    errors: Counter[str] = Counter()
    for piece in slices:
        errors.update(piece.load.errors)
    wall_s = sum(piece.load.wall_s for piece in slices)
    server_cpu_s = sum(piece.server_cpu_s for piece in slices)
    driver_cpu_s = sum(piece.driver_cpu_s for piece in slices)
    latencies = sorted(value for piece in slices for value in piece.load.latencies_s)
    ttfb = sorted(value for piece in slices for value in piece.load.ttfb_s)
    divisor = max(wall_s, 1e-9)
    sent = [piece.redis_commands for piece in slices if piece.redis_commands is not None]
    return CellResult(
        cell=cell,
        requests=requests,
        errors=dict(errors),
        wall_s=wall_s,
        requests_per_s=requests / divisor,
        p50_ms=_percentile_ms(latencies, 0.50),
        p99_ms=_percentile_ms(latencies, 0.99),
        ttfb_p50_ms=_percentile_ms(ttfb, 0.50),
        cpu_ms_per_request=server_cpu_s * 1000 / requests if requests else None,
        server_cpu_percent=100 * server_cpu_s / divisor,
        driver_cpu_percent=100 * driver_cpu_s / divisor,
        redis_commands=sum(c for c, _, _ in sent) if sent else None,
        redis_writes=sum(w for _, w, _ in sent) if sent else None,
        redis_by_name=dict(sum((n for _, _, n in sent), Counter())) if sent else None,
    )


def _percentile_ms(ordered_s: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of ascending seconds, in ms; ``None`` when empty."""
    if not ordered_s:
        return None
    index = min(len(ordered_s) - 1, max(0, math.ceil(fraction * len(ordered_s)) - 1))
    return ordered_s[index] * 1000
