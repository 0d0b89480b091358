"""``python -m bench.plugin_opcodes``: the Python opcodes plugins execute per request.

The chains, modes and requests of :mod:`bench.plugin_cpu`, counted instead of timed: every
opcode the interpreter executes while a request runs through the empty chain and through the
plugins measured (``sys.settrace`` with ``f_trace_opcodes``), after a warm-up, so the figures
are the same on every machine and in every run, whatever else the machine does — all but the
event loop's timer heap: asyncio's ``TimerHandle`` comparisons depend on how many timers are
pending, which earlier requests leave behind (a few opcodes a request). The difference per
request is what the plugins' Python code does; what C code does in one opcode (a dict lookup, a
msgspec decode) counts as one, so it is a count of interpreted work, not of time:
``bench.plugin_instructions`` counts machine instructions, ``bench.plugin_cpu`` times.
``--show N`` also prints the N functions whose counts grew most.

Tracing slows the requests down a hundredfold; the counts do not change with it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Sequence
from types import FrameType
from typing import Any

from bench.plugin_cpu import CHUNKS, MODES, PLUGINS, Chain, chains

_WARM_UP = 30


class OpcodeCount:
    """Counts the opcodes executed under it (``with``), in total and per function."""

    def __init__(self) -> None:
        self.total = 0
        self.by_function: Counter[str] = Counter()

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.total += 1
            self.by_function[frame.f_code.co_qualname] += 1
        return self._local

    def _global(self, frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return self._local

    def __enter__(self) -> OpcodeCount:
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


async def count_chain(chain: Chain, stream: bool, requests: int) -> OpcodeCount:
    """The opcodes of ``requests`` requests through ``chain`` after a warm-up (the ledger's
    background writes left out: they run between requests, outside the count)."""
    if chain.ledger is not None:
        chain.ledger.start()
    for _ in range(_WARM_UP):
        await chain.one(stream)
    await chain.settle()
    with OpcodeCount() as count:
        for _ in range(requests):
            await chain.one(stream)
    await chain.settle()
    return count


async def measure(
    plugins: str, requests: int, chunks: int = CHUNKS
) -> dict[str, tuple[OpcodeCount, OpcodeCount]]:
    """Per mode, the counts of the empty chain and of ``plugins``'."""
    results: dict[str, tuple[OpcodeCount, OpcodeCount]] = {}
    for mode, (stream, relay) in MODES.items():
        compared = chains(relay, plugins, chunks)
        empty = await count_chain(compared["empty"], stream, requests)
        plugged = await count_chain(compared["plugins"], stream, requests)
        results[mode] = (empty, plugged)
        for chain in compared.values():
            await chain.close()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Count and print one line per mode (and, with ``--show``, the functions that grew)."""
    parser = argparse.ArgumentParser(prog="python -m bench.plugin_opcodes", description=__doc__)
    parser.add_argument("--plugins", choices=PLUGINS, default="cost")
    parser.add_argument("--requests", type=int, default=10, help="counted per chain and mode")
    parser.add_argument("--chunks", type=int, default=CHUNKS, help="chunks per stream request")
    parser.add_argument("--show", type=int, default=0, help="functions to list per mode")
    args = parser.parse_args(argv)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    if args.chunks < 5 or args.chunks % 5:
        parser.error("--chunks must be a positive multiple of 5")
    results = asyncio.run(measure(args.plugins, args.requests, args.chunks))
    label = "auth+limits" if args.plugins == "auth" else args.plugins
    print(f"Python opcodes per request, {args.chunks}-chunk streams:")
    for mode, (empty, plugged) in results.items():
        base, total = empty.total / args.requests, plugged.total / args.requests
        print(
            f"  {mode:<10}  empty chain {base:9.0f}   with {label} {total:9.0f}   "
            f"{label} {total - base:7.0f}"
        )
        grown = plugged.by_function.copy()
        grown.subtract(empty.by_function)
        for function, opcodes in grown.most_common(args.show):
            print(f"      {opcodes / args.requests:8.0f}  {function}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
