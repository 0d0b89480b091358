"""The benchmark report: plain-text rendering for stdout and JSON for ``--json``."""

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.analysis import Check, Overhead
from bench.matrix import CellResult, Settings
from bench.micro.cache_lookup import CacheLookup
from bench.procstat import Memory

_COLUMNS = (
    ("target", 17),
    ("mode", 10),
    ("up_ms", 5),
    ("conc", 4),
    ("ok_reqs", 7),
    ("req/s", 7),
    ("p50_ms", 7),
    ("p99_ms", 7),
    ("ttfb50", 7),
    ("errors", 6),
    ("cpu_ms/req", 10),
    ("srv_cpu%", 8),
    ("drv_cpu%", 8),
)


@dataclass(frozen=True)
class BenchReport:
    """Everything one run measured and concluded."""

    environment: dict[str, str]
    settings: Settings
    cells: list[CellResult]
    overheads: list[Overhead]
    memory: dict[str, Memory]
    checks: list[Check]
    cache_lookup: CacheLookup | None = None

    @property
    def failed(self) -> bool:
        """Whether any check failed."""
        return any(check.status == "FAIL" for check in self.checks)


def _number(value: float | None, decimals: int) -> str:
    return "-" if value is None else f"{value:.{decimals}f}"


def _line(values: Sequence[str]) -> str:
    parts = [
        value.ljust(width) if index < 2 else value.rjust(width)
        for index, (value, (_, width)) in enumerate(zip(values, _COLUMNS, strict=True))
    ]
    return "  ".join(parts).rstrip()


def table_header() -> str:
    """Column titles of :func:`table_row`."""
    return _line([title for title, _ in _COLUMNS])


def table_row(result: CellResult) -> str:
    """One cell as a table line."""
    cell = result.cell
    return _line(
        [
            cell.target,
            cell.mode,
            str(cell.latency_ms),
            str(cell.concurrency),
            str(result.requests),
            _number(result.requests_per_s, 0),
            _number(result.p50_ms, 2),
            _number(result.p99_ms, 2),
            _number(result.ttfb_p50_ms, 2),
            str(result.error_count),
            _number(result.cpu_ms_per_request, 3),
            _number(result.server_cpu_percent, 0),
            _number(result.driver_cpu_percent, 0),
        ]
    )


def _per_request(result: CellResult) -> str:
    """Each command's count per request, most sent first."""
    by_name = result.redis_by_name or {}
    ordered = sorted(by_name.items(), key=lambda item: -item[1])
    return ", ".join(f"{name} {calls / max(result.requests, 1):.2f}" for name, calls in ordered)


def format_text(report: BenchReport) -> str:
    """Render the whole report as plain text."""
    settings = report.settings
    lines = [
        "Crossway benchmark — " + ", ".join(f"{k} {v}" for k, v in report.environment.items()),
        f"{settings.duration_s:g} s per cell in {settings.rounds} rounds interleaved across "
        f"targets, each after {settings.warmup_s:g} s warm-up; "
        f"at most {settings.max_requests} requests per cell; {settings.driver} load driver",
        "",
        table_header(),
        *(table_row(result) for result in report.cells),
    ]
    failed_cells = [result for result in report.cells if result.errors]
    if failed_cells:
        lines += ["", "Errors by kind:"]
        lines += [
            f"  {r.cell.target} {r.cell.mode} {r.cell.latency_ms} ms c={r.cell.concurrency}: "
            f"{r.errors}"
            for r in failed_cells
        ]
    lines += ["", "Overhead at concurrency 1 (target percentile minus direct percentile):"]
    lines += [
        f"  {o.target:<15}  {o.mode:<10}  {o.latency_ms:>2} ms upstream  "
        f"p50 {o.p50_ms:+8.3f} ms  p99 {o.p99_ms:+8.3f} ms"
        for o in report.overheads
    ] or ["  (no concurrency-1 cells)"]
    counted = [r for r in report.cells if r.redis_commands_per_request is not None]
    if counted:
        lines += ["", "Redis per request (sent through the counting relay, measured window):"]
        lines += [
            f"  {r.cell.target} {r.cell.mode} {r.cell.latency_ms} ms c={r.cell.concurrency}: "
            f"{r.redis_commands_per_request:.2f} commands in "
            f"{_number(r.redis_writes_per_request, 2)} writes; {_per_request(r)}"
            for r in counted
        ]
    lines += ["", "Memory after the run (process tree, summed):"]
    lines += [
        f"  {name:<15}  RSS {m.rss_mib:6.1f} MiB  peak {m.peak_rss_mib:6.1f} MiB  "
        f"({m.processes} process{'es' if m.processes != 1 else ''})"
        for name, m in report.memory.items()
    ]
    lines += [
        "",
        "Targets (single worker; the empty chain's, then those of the variants that ran):",
    ]
    lines += [f"  {c.status:<4}  {c.name}: {c.detail}" for c in report.checks]
    return "\n".join(lines)


def write_json(report: BenchReport, path: Path) -> None:
    """Write the report to ``path`` as indented JSON."""
    path.write_text(json.dumps(dataclasses.asdict(report), indent=2) + "\n")
