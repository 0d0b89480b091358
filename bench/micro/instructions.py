"""``bench.micro plugins --measure instructions``: what ``--measure cpu`` measures, counted in
executed instructions instead of seconds.

On a shared machine the in-process CPU figures move by half between two spells of one afternoon
for the same code; ``valgrind --tool=callgrind`` counts the instructions the process executes,
which the machine's load does not change. For each case and chain (``empty``, and the plugins
asked for), the chain runs under callgrind twice, with a small and a large number of requests
after the same warm-up; the difference of the two totals, divided by the difference of the
counts, is the instructions per request, start-up and warm-up cancelled out. The plugins' share
is the plugins chain's figure less the empty chain's. Each run's process sets its garbage
collector up as a worker does (:func:`proxy.server.supervisor.tune_gc`: what start-up made is frozen
out of collections), so that no full collection of the bench's own modules lands in one run and not
the other; windows of a few hundred requests are still lumpy (the store's sweeps, the loop's
turns), so keep the runs' difference at a thousand requests or more. Every run has the same
string hashes (``PYTHONHASHSEED=0``): with random ones, the dicts and sets of two runs of the
same code probe and grow differently, and their counts differed by up to 5k instructions per
request; with the seed fixed, the empty chain's agreed to the instruction and the plugins'
to 0.2k.

Needs valgrind (Debian's ``valgrind``); without it the command says so and exits with 2. The
runs go two at a time (the machine's two cores), each under valgrind about 50 times slower
than natively: the default counts take a few minutes. Each run is this module's child
(``python -m bench.micro.instructions --child …``: one chain, one case).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.micro.chains import CHUNKS, PLUGINS, PROMPTS, Case, cases, chains
from bench.micro.harness import MODES, cpu_per_request
from proxy.server.supervisor import tune_gc

CHAINS = ("empty", "plugins")
COUNTS = (500, 1500)
"""The small and the large run's requests, unless told otherwise."""
_WARM_UP = 200
HASH_SEED = "0"
"""The string hash seed of every run (see the module docstring)."""
_SUMMARY = re.compile(rb"^summary: (\d+)$", re.MULTILINE)


def run_chain(
    plugins: str,
    chain: str,
    mode: str,
    requests: int,
    *,
    chunks: int = CHUNKS,
    prompt: str | None = None,
    tune: bool = False,
) -> None:
    """Run ``requests`` requests of ``chain`` for ``plugins`` in ``mode`` (with ``prompt``, for
    ``masking``), after the warm-up (what a callgrind run executes). ``tune``: first set the
    garbage collector up as a worker does once it is built (:func:`proxy.server.supervisor.tune_gc`,
    which freezes what is alive: for a process of its own, as the callgrind child is)."""
    stream, relay = MODES[mode]

    async def run() -> None:
        measured = chains(plugins, relay, chunks, prompt)[chain]
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


def _counted(
    valgrind: str, scratch: Path, plugins: str, chunks: int, case: Case, chain: str, n: int
) -> int:
    out_file = scratch / f"{chain}.{case.mode}.{case.prompt}.{n}.out"
    command = [
        valgrind,
        "--tool=callgrind",
        f"--callgrind-out-file={out_file}",
        sys.executable,
        "-m",
        "bench.micro.instructions",
        "--child",
        chain,
        "--plugins",
        plugins,
        "--mode",
        case.mode,
        "--requests",
        str(n),
        "--chunks",
        str(chunks),
    ]
    if case.prompt is not None:
        command += ["--prompt", case.prompt]
    environment = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    subprocess.run(command, check=True, capture_output=True, env=environment)
    return instructions(out_file)


def measure(
    plugins: str,
    modes: Sequence[str],
    counts: tuple[int, int],
    valgrind: str,
    chunks: int = CHUNKS,
) -> dict[Case, dict[str, float]]:
    """Per case and chain, the instructions per request."""
    jobs = [(case, chain, n) for case in cases(plugins, modes) for chain in CHAINS for n in counts]
    with (
        tempfile.TemporaryDirectory(prefix="crossway-callgrind-") as scratch,
        ThreadPoolExecutor(max_workers=2) as pool,
    ):
        totals = list(
            pool.map(lambda job: _counted(valgrind, Path(scratch), plugins, chunks, *job), jobs)
        )
    found = dict(zip(jobs, totals, strict=True))
    small, large = counts
    return {
        case: {
            chain: per_request(
                (small, found[case, chain, small]), (large, found[case, chain, large])
            )
            for chain in CHAINS
        }
        for case in cases(plugins, modes)
    }


def _child(argv: Sequence[str] | None = None) -> int:
    """One callgrind run: one chain, one case."""
    parser = argparse.ArgumentParser(prog="python -m bench.micro.instructions")
    parser.add_argument("--child", choices=CHAINS, required=True)
    parser.add_argument("--plugins", choices=PLUGINS, required=True)
    parser.add_argument("--mode", choices=tuple(MODES), required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--prompt", choices=tuple(PROMPTS))
    args = parser.parse_args(argv)
    run_chain(
        args.plugins,
        args.child,
        args.mode,
        args.requests,
        chunks=args.chunks,
        prompt=args.prompt,
        tune=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(_child())
