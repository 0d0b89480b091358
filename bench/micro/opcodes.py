"""``bench.micro plugins --measure opcodes``: the Python opcodes plugins execute per request.

The chains, modes and requests of ``--measure cpu``, counted instead of timed: every opcode the
interpreter executes while a request runs through the empty chain and through the plugins
measured (``sys.settrace`` with ``f_trace_opcodes``), after a warm-up, so the figures are the
same on every machine and in every run, whatever else the machine does — all but the event
loop's timer heap: asyncio's ``TimerHandle`` comparisons depend on how many timers are pending,
which earlier requests leave behind (a few opcodes a request). The difference per request is
what the plugins' Python code does; what C code does in one opcode (a dict lookup, a msgspec
decode) counts as one, so it is a count of interpreted work, not of time: ``--measure
instructions`` counts machine instructions, ``--measure cpu`` times. ``--show N`` also prints
the N functions whose counts grew most.

Tracing slows the requests down a hundredfold; the counts do not change with it.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from types import FrameType
from typing import Any

from bench.micro.chains import CHUNKS, Case, cases, chains
from bench.micro.harness import MODES, Chain

_WARM_UP = 30


class OpcodeCount:
    """Counts the opcodes executed under it (``with``), in total and per function."""

    def __init__(self) -> None:
        self.total = 0
        self.by_function: Counter[str] = Counter()
        self._previous: Any = None

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
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc: object) -> None:
        # The trace function it replaced comes back: a coverage measurement in the same
        # process (the suite's) would otherwise stop for good, here.
        sys.settrace(self._previous)


async def count_chain(chain: Chain, stream: bool, requests: int) -> OpcodeCount:
    """The opcodes of ``requests`` requests through ``chain`` after a warm-up (the ledger's
    background writes left out: they run between requests, outside the count)."""
    chain.start()
    for _ in range(_WARM_UP):
        await chain.one(stream)
    await chain.settle()
    with OpcodeCount() as count:
        for _ in range(requests):
            await chain.one(stream)
    await chain.settle()
    return count


async def measure(
    plugins: str, requests: int, chunks: int = CHUNKS, modes: Sequence[str] = tuple(MODES)
) -> dict[Case, tuple[OpcodeCount, OpcodeCount]]:
    """Per case, the counts of the empty chain and of ``plugins``'."""
    results: dict[Case, tuple[OpcodeCount, OpcodeCount]] = {}
    for case in cases(plugins, modes):
        stream, relay = MODES[case.mode]
        compared = chains(plugins, relay, chunks, case.prompt)
        empty = await count_chain(compared["empty"], stream, requests)
        plugged = await count_chain(compared["plugins"], stream, requests)
        results[case] = (empty, plugged)
        for chain in compared.values():
            await chain.close()
    return results
