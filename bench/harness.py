"""One benchmark run: start the servers, measure the matrix, stop everything.

All child processes and the scratch directory (gateway config, server logs) belong to
one :class:`contextlib.ExitStack`, so they are cleaned up however the run ends.
"""

import os
import platform
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bench import aio, procstat, redis_stats
from bench.analysis import checks, overheads
from bench.litellm import start_litellm
from bench.matrix import DIRECT, TARGETS, Cell, CellResult, Settings, plan, run_matrix
from bench.micro import cache_lookup
from bench.report import BenchReport, table_header, table_row
from bench.targets import (
    GATEWAY_VARIANTS,
    Server,
    start_gateway,
    start_passthrough,
    start_upstream,
)


@dataclass(frozen=True)
class Options:
    """What to measure: the matrix axes, the per-cell settings and the gateway command."""

    targets: tuple[str, ...]
    modes: tuple[bool, ...]
    latencies_ms: tuple[int, ...]
    concurrencies: tuple[int, ...]
    settings: Settings
    gateway_command: str
    extras: tuple[tuple[str, int, int], ...] = ()
    """(target, latency, concurrency) cells added to the matrix (see ``matrix.plan``)."""


def run_benchmark(options: Options, progress: Callable[[str], None]) -> BenchReport:
    """Run the benchmark described by ``options``; ``progress`` receives one line per step.

    Raises ``processes.HarnessError`` when a server does not come up.
    """
    with ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="crossway-bench-")))
        return aio.run(_measure(stack, scratch, options, progress))


async def _start_servers(
    stack: ExitStack,
    scratch: Path,
    targets: set[str],
    command: str,
    progress: Callable[[str], None],
    relays: list[redis_stats.CommandCounter],
) -> dict[str, Server]:
    """Start what ``targets`` need; a relay to a private Redis joins ``relays``."""
    progress("starting the mock upstream")
    upstream = await start_upstream(stack, scratch)
    servers = {DIRECT: upstream}
    if "passthrough" in targets:
        progress("starting the passthrough")
        servers["passthrough"] = await start_passthrough(stack, scratch, upstream)
    if "gateway" in targets:
        progress("starting the gateway")
        servers["gateway"] = await start_gateway(stack, scratch, upstream, command)
    for name, adds in GATEWAY_VARIANTS.items():
        if name in targets:
            redis = None
            if name == "gateway-gov-redis":
                progress("starting a private redis-server, and a relay counting commands")
                redis = redis_stats.CommandCounter(redis_stats.start_redis(stack))
                await redis.start()
                relays.append(redis)
            progress(f"starting {name}: the gateway with {adds}")
            servers[name] = await start_gateway(
                stack, scratch, upstream, command, name=name, variant=name, redis=redis
            )
    if "litellm" in targets:
        progress("starting LiteLLM's proxy (.venv-litellm)")
        servers["litellm"] = await start_litellm(stack, scratch, upstream)
    return servers


async def _measure(
    stack: ExitStack, scratch: Path, options: Options, progress: Callable[[str], None]
) -> BenchReport:
    cells = plan(
        options.targets,
        options.modes,
        options.latencies_ms,
        options.concurrencies,
        options.extras,
    )
    targets = {cell.target for cell in cells}
    relays: list[redis_stats.CommandCounter] = []
    try:
        return await _measure_cells(stack, scratch, options, cells, targets, relays, progress)
    finally:
        for relay in relays:
            await relay.close()


async def _measure_cells(
    stack: ExitStack,
    scratch: Path,
    options: Options,
    cells: list[Cell],
    targets: set[str],
    relays: list[redis_stats.CommandCounter],
    progress: Callable[[str], None],
) -> BenchReport:
    command = options.gateway_command
    servers = await _start_servers(stack, scratch, targets, command, progress, relays)
    progress(f"measuring {len(cells)} cells")
    progress(table_header())
    done: list[CellResult] = []

    def report_cell(result: CellResult) -> None:
        done.append(result)
        progress(f"{table_row(result)}  [{len(done)}/{len(cells)}]")

    results = await run_matrix(cells, servers, servers[DIRECT], options.settings, report_cell)
    memory = {name: procstat.memory(servers[name].pid) for name in TARGETS if name in servers}
    found = overheads(results)
    lookup = None
    if "gateway-cache" in options.targets:
        progress("measuring the cache's work on a miss, in process")
        lookup = await cache_lookup.measure()
    return BenchReport(
        environment=_environment(),
        settings=options.settings,
        cells=results,
        overheads=found,
        memory=memory,
        checks=checks(results, found, memory, lookup),
        cache_lookup=lookup,
    )


def _environment() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "aiohttp": metadata.version("aiohttp"),
        "loop": "uvloop" if aio.using_uvloop() else "asyncio",
        "cpus": str(os.cpu_count()),
        "platform": sys.platform,
    }
