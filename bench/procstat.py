"""CPU time and memory of a process and its descendants, read from Linux ``/proc``.

Every function takes the root PID of a measured server and covers that process plus
all its live descendants (a server may fork workers). Processes that vanish while
being read are skipped.
"""

import os
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Memory:
    """Resident memory of a process tree, in MiB: summed current RSS and summed peaks."""

    rss_mib: float
    peak_rss_mib: float
    processes: int


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (index 0 is the state)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def process_tree(root: int) -> list[int]:
    """Return ``root`` followed by all its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    tree = [root]
    for pid in tree:
        tree.extend(children.get(pid, ()))
    return tree


def cpu_seconds(root: int) -> dict[int, float]:
    """Return user+system CPU seconds consumed so far by each process of the tree."""
    times: dict[int, float] = {}
    for pid in process_tree(root):
        fields = _stat_fields(pid)
        if fields is not None:
            times[pid] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return times


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two :func:`cpu_seconds` snapshots of the same tree."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def memory(root: int) -> Memory:
    """Return the tree's resident memory (``VmRSS``) and peak resident memory (``VmHWM``)."""
    rss_kib = peak_kib = 0
    processes = 0
    for pid in process_tree(root):
        try:
            lines = (_PROC / str(pid) / "status").read_text().splitlines()
        except OSError:
            continue
        processes += 1
        for line in lines:
            key, _, value = line.partition(":")
            if key == "VmRSS":
                rss_kib += int(value.split()[0])
            elif key == "VmHWM":
                peak_kib += int(value.split()[0])
    return Memory(rss_mib=rss_kib / 1024, peak_rss_mib=peak_kib / 1024, processes=processes)
