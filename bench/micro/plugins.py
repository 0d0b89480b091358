"""``python -m bench.micro plugins``: what plugins add per request, measured in-process.

The HTTP benchmark cannot resolve a few microseconds in a request that costs several hundred on
a shared machine, so this runs the plugin chain alone: the same canned call through an
in-process upstream, once through ``[]`` (the empty chain) and once through the plugins measured
(``--plugins``, :mod:`bench.micro.chains`), in three modes — ``non-stream`` (a whole reply),
``stream`` (decoded chunks, one per read: the worst case), ``relay`` (verbatim OpenAI frames,
five per read). The difference of the two chains is what the plugins cost, measured three ways
(``--measure``):

- ``cpu`` (the default): process CPU (``time.process_time``) per request, in interleaved
  rounds; the median difference per mode and its range over the rounds. ``--evict-mib N``
  writes over N MiB between requests (untimed), so that each starts with cold caches, as a
  served request does: the upper end of what one pays; back to back is the lower end.
- ``instructions``: machine instructions per request under ``valgrind --tool=callgrind``
  (:mod:`bench.micro.instructions`), which the machine's load does not change.
- ``opcodes``: Python opcodes per request under ``sys.settrace`` (:mod:`bench.micro.opcodes`),
  and with ``--show N`` the N functions whose counts grew most.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
from collections.abc import Sequence
from functools import partial

from bench.micro import instructions, opcodes
from bench.micro.chains import CHUNKS, PLUGINS, Case, cases, chains, label
from bench.micro.harness import MODES, CacheEvictor, cpu_per_request, interleaved

MEASURES = ("cpu", "instructions", "opcodes")
REQUESTS = {"cpu": 20_000, "opcodes": 10}
"""Requests per round and chain (``cpu``) or counted per chain and mode (``opcodes``), unless
told otherwise; ``instructions`` runs :data:`bench.micro.instructions.COUNTS`."""
MASKING_REQUESTS = 5_000
"""``--measure cpu --plugins masking``'s requests per round and chain."""
ROUNDS = 5


async def measure_cpu(
    plugins: str,
    requests: int,
    rounds: int,
    modes: Sequence[str] = tuple(MODES),
    evict_bytes: int = 0,
    chunks: int = CHUNKS,
) -> dict[Case, dict[str, list[float]]]:
    """Per case and chain, the CPU per request (µs) of each round; ``evict_bytes``: evict the
    caches over that many bytes between requests (:class:`CacheEvictor`; 0: do not);
    ``chunks``: the chunks of a stream request."""
    evict = CacheEvictor(evict_bytes) if evict_bytes else None
    results: dict[Case, dict[str, list[float]]] = {}
    for case in cases(plugins, modes):
        stream, relay = MODES[case.mode]
        compared = chains(plugins, relay, chunks, case.prompt)
        timers = {
            name: partial(cpu_per_request, chain, stream, evict=evict)
            for name, chain in compared.items()
        }
        results[case] = await interleaved(timers, requests, rounds)
        for chain in compared.values():
            await chain.close()
    return results


def _width(found: Sequence[Case]) -> int:
    return max(10, *(len(case.name) for case in found))


def _cpu(args: argparse.Namespace, modes: list[str]) -> int:
    default = MASKING_REQUESTS if args.plugins == "masking" else REQUESTS["cpu"]
    requests = int(args.requests or default)
    rounds = args.rounds or ROUNDS
    evict_bytes = int(args.evict_mib * 2**20)
    results = asyncio.run(
        measure_cpu(args.plugins, requests, rounds, modes, evict_bytes, args.chunks)
    )
    name = label(args.plugins)
    caches = f"caches evicted ({args.evict_mib:g} MiB)" if evict_bytes else "warm caches"
    print(
        f"CPU per request, median of {rounds} interleaved rounds of {requests}, "
        f"{caches}, {args.chunks}-chunk streams:"
    )
    width = _width(list(results))
    for case, by_chain in results.items():
        empty = statistics.median(by_chain["empty"])
        plugged = statistics.median(by_chain["plugins"])
        deltas = [c - e for c, e in zip(by_chain["plugins"], by_chain["empty"], strict=True)]
        print(
            f"  {case.name:<{width}}  empty chain {empty:6.2f} µs   with {name} {plugged:6.2f} µs"
            f"   {name} {statistics.median(deltas):5.2f} µs "
            f"(rounds {min(deltas):.2f}..{max(deltas):.2f}; {plugged / empty:.2f}x)"
        )
    return 0


def _opcodes(args: argparse.Namespace, modes: list[str]) -> int:
    requests = int(args.requests or REQUESTS["opcodes"])
    results = asyncio.run(opcodes.measure(args.plugins, requests, args.chunks, modes))
    name = label(args.plugins)
    print(f"Python opcodes per request, {args.chunks}-chunk streams:")
    width = _width(list(results))
    for case, (empty, plugged) in results.items():
        base, total = empty.total / requests, plugged.total / requests
        print(
            f"  {case.name:<{width}}  empty chain {base:9.0f}   with {name} {total:9.0f}   "
            f"{name} {total - base:7.0f}"
        )
        grown = plugged.by_function.copy()
        grown.subtract(empty.by_function)
        for function, count in grown.most_common(args.show or 0):
            print(f"      {count / requests:8.0f}  {function}")
    return 0


def _instructions(args: argparse.Namespace, modes: list[str]) -> int:
    small, large = args.requests or instructions.COUNTS
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    results = instructions.measure(args.plugins, modes, (small, large), valgrind, args.chunks)
    name = label(args.plugins)
    print(
        f"Instructions per request (callgrind; runs of {small} and {large}), "
        f"{args.chunks}-chunk streams:"
    )
    width = _width(list(results))
    for case, by_chain in results.items():
        empty, plugged = by_chain["empty"], by_chain["plugins"]
        print(
            f"  {case.name:<{width}}  empty chain {empty / 1000:7.1f}k   "
            f"with {name} {plugged / 1000:7.1f}k   {name} {(plugged - empty) / 1000:6.1f}k"
        )
    return 0


def _counts(text: str) -> tuple[int, ...]:
    """``--requests``: one count, or (instructions) the small and the large run's."""
    try:
        return tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count or two: {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print one line per mode (and prompt, for ``masking``)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.micro plugins",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--measure", choices=MEASURES, default="cpu")
    parser.add_argument("--plugins", choices=PLUGINS, default="cost")
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES)
    )
    parser.add_argument(
        "--requests",
        type=_counts,
        help="cpu: per round and chain (default 20000; masking 5000); opcodes: counted per "
        "chain and mode (default 10); instructions: the small and the large run's, "
        "comma-separated (default 500,1500)",
    )
    parser.add_argument(
        "--chunks",
        type=int,
        default=CHUNKS,
        help=f"chunks per stream request, a multiple of 5 (default {CHUNKS})",
    )
    parser.add_argument("--rounds", type=int, help=f"cpu: interleaved rounds (default {ROUNDS})")
    parser.add_argument(
        "--evict-mib",
        type=float,
        default=0.0,
        help="cpu: write over this many MiB between requests, untimed, so that each request "
        "starts with cold caches as a served one does (0, the default: back to back, warm)",
    )
    parser.add_argument("--show", type=int, help="opcodes: functions to list per mode")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown mode {unknown[0]!r}")
    if args.chunks < 5 or args.chunks % 5:
        parser.error("--chunks must be a positive multiple of 5")
    only = {"--rounds": args.rounds, "--evict-mib": args.evict_mib or None, "--show": args.show}
    owner = {"--rounds": "cpu", "--evict-mib": "cpu", "--show": "opcodes"}
    for option, value in only.items():
        if value is not None and args.measure != owner[option]:
            parser.error(f"{option} goes with --measure {owner[option]}")
    if args.evict_mib < 0:
        parser.error("--evict-mib must not be negative")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.requests is not None:
        if args.measure == "instructions":
            if len(args.requests) != 2 or args.requests[0] >= args.requests[1]:
                parser.error("--requests takes two counts, the small one first")
        elif len(args.requests) != 1 or args.requests[0] < 1:
            parser.error("--requests must be one count, at least 1")
        else:
            args.requests = args.requests[0]
    run = {"cpu": _cpu, "instructions": _instructions, "opcodes": _opcodes}[args.measure]
    return run(args, modes)
