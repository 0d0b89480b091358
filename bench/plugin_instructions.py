"""``python -m bench.plugin_instructions``: what ``bench.plugin_cpu`` measures, counted in
executed instructions instead of seconds.

On a shared machine the in-process CPU figures move by half between two spells of one afternoon
for the same code; ``valgrind --tool=callgrind`` counts the instructions the process executes,
which the machine's load does not change. For each mode and chain (``empty``, and the plugins
asked for), the chain runs under callgrind twice, with a small and a large number of requests
after the same warm-up; the difference of the two totals, divided by the difference of the
counts, is the instructions per request, start-up and warm-up cancelled out. The plugins' share
is the plugins chain's figure less the empty chain's. Each run's process sets its garbage
collector up as a worker does (:func:`proxy.server.tune_gc`: what start-up made is frozen out of
collections), so that no full collection of the bench's own modules lands in one run and not
the other; windows of a few hundred requests are still lumpy (the store's sweeps, the loop's
turns), so keep the runs' difference at a thousand requests or more. Every run has the same
string hashes (``PYTHONHASHSEED=0``): with random ones, the dicts and sets of two runs of the
same code probe and grow differently, and their counts differed by up to 5k instructions per
request; with the seed fixed, the empty chain's agreed to the instruction and the plugins'
to 0.2k.

Needs valgrind (Debian's ``valgrind``); without it the command says so and exits with 2. The
runs go two at a time (the machine's two cores), each under valgrind about 50 times slower
than natively: the default counts take a few minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.plugin_cpu import MODES, PLUGINS, chains, cpu_per_request
from proxy.server import tune_gc

CHAINS = ("empty", "plugins")
_WARM_UP = 200
HASH_SEED = "0"
"""The string hash seed of every run (see the module docstring)."""
_SUMMARY = re.compile(rb"^summary: (\d+)$", re.MULTILINE)


def run_chain(plugins: str, chain: str, mode: str, requests: int, *, tune: bool = False) -> None:
    """Run ``requests`` requests of ``chain`` for ``plugins`` in ``mode``, after the warm-up
    (what a callgrind run executes). ``tune``: first set the garbage collector up as a worker
    does once it is built (:func:`proxy.server.tune_gc`, which freezes what is alive: for a
    process of its own, as the callgrind child is)."""
    stream, relay = MODES[mode]

    async def run() -> None:
        measured = chains(relay, plugins)[chain]
        if tune:
            tune_gc()
        await cpu_per_request(measured, stream, _WARM_UP)
        await cpu_per_request(measured, stream, requests)
        await measured.close()

    asyncio.run(run())


def instructions(out_file: Path) -> int:
    """The total instructions a callgrind output file reports (its ``summary:`` line);
    ValueError if it has none."""
    found = _SUMMARY.search(out_file.read_bytes())
    if found is None:
        raise ValueError(f"{out_file} has no callgrind summary")
    return int(found.group(1))


def per_request(small: tuple[int, int], large: tuple[int, int]) -> float:
    """Instructions per request from two runs' ``(requests, instructions)``."""
    (few, fewer_total), (many, more_total) = small, large
    if many <= few:
        raise ValueError("the large run must have more requests than the small one")
    return (more_total - fewer_total) / (many - few)


def _counted(valgrind: str, scratch: Path, plugins: str, chain: str, mode: str, n: int) -> int:
    out_file = scratch / f"{chain}.{mode}.{n}.out"
    command = [
        valgrind,
        "--tool=callgrind",
        f"--callgrind-out-file={out_file}",
        sys.executable,
        "-m",
        "bench.plugin_instructions",
        "--child",
        chain,
        "--plugins",
        plugins,
        "--modes",
        mode,
        "--requests",
        str(n),
    ]
    environment = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    subprocess.run(command, check=True, capture_output=True, env=environment)
    return instructions(out_file)


def measure(
    plugins: str, modes: Sequence[str], counts: tuple[int, int], valgrind: str
) -> dict[str, dict[str, float]]:
    """Per mode and chain, the instructions per request."""
    jobs = [(chain, mode, n) for mode in modes for chain in CHAINS for n in counts]
    with (
        tempfile.TemporaryDirectory(prefix="crossway-callgrind-") as scratch,
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        totals = list(pool.map(lambda job: _counted(valgrind, Path(scratch), plugins, *job), jobs))
    found = dict(zip(jobs, totals, strict=True))
    small, large = counts
    return {
        mode: {
            chain: per_request(
                (small, found[chain, mode, small]), (large, found[chain, mode, large])
            )
            for chain in CHAINS
        }
        for mode in modes
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Count and print one line per mode (or, with ``--child``, run one chain)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.plugin_instructions", description=__doc__
    )
    parser.add_argument("--plugins", choices=PLUGINS, default="cost")
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES)
    )
    parser.add_argument(
        "--requests", default="500,1500", help="the small and the large run's requests"
    )
    parser.add_argument("--child", choices=CHAINS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown mode {unknown[0]!r}")
    if args.child is not None:
        run_chain(args.plugins, args.child, modes[0], int(args.requests), tune=True)
        return 0
    counts = tuple(int(n) for n in args.requests.split(","))
    if len(counts) != 2 or counts[0] >= counts[1]:
        parser.error("--requests takes two counts, the small one first")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    results = measure(args.plugins, modes, (counts[0], counts[1]), valgrind)
    label = "auth+limits" if args.plugins == "auth" else args.plugins
    print(f"Instructions per request (callgrind; runs of {counts[0]} and {counts[1]}):")
    for mode, by_chain in results.items():
        empty, plugged = by_chain["empty"], by_chain["plugins"]
        print(
            f"  {mode:<10}  empty chain {empty / 1000:7.1f}k   with {label} {plugged / 1000:7.1f}k"
            f"   {label} {(plugged - empty) / 1000:6.1f}k"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
