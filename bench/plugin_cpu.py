"""``python -m bench.plugin_cpu``: the CPU one plugin adds per request, measured in-process.

The HTTP benchmark cannot resolve a few microseconds in a request that costs several hundred
on a shared machine, so this one runs the plugin chain alone: the same canned call through an
in-process upstream, once through ``[]`` (the empty chain) and once through ``[cost]``, in
interleaved rounds, timing process CPU (``time.process_time``) per request. A whole request is
a call and its whole reply; a stream request is a call and a 20-chunk stream read to its end
(as the app reads it) plus the per-request finalisation the app runs. The difference of the two
chains is what the plugin costs; it is printed per mode as the median over the rounds.

Everything is in one process and one event loop; nothing is sent over a network.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Sequence

import structlog

from plugins.cost import CostConfig, CostPlugin
from proxy.canonical import (
    Call,
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    Message,
    RawFrames,
    Reply,
    Response,
    Usage,
    batched,
)
from proxy.chain import Next, Plugin, PluginContext, compose
from proxy.metrics import Metrics
from proxy.pricing import SHIPPED_CATALOG, PriceBook, ProviderPricing, load_catalog
from proxy.router import Router

USAGE = Usage(input=40, cache_read=10, output=30)
_CHUNKS = 20


class _Reads:
    """A stream read by batches, as the upstream layer hands streams to the chain: one batch
    per network read."""

    def __init__(self, batches: list[list[Chunk | RawFrames]]) -> None:
        self._batches = batches
        self.ended = False

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        if not self._batches:
            self.ended = True
            return []
        return self._batches.pop(0)

    def __aiter__(self) -> AsyncIterator[Chunk]:
        raise NotImplementedError("read by batches")

    async def aclose(self) -> None:
        self.ended = True


_FRAMES = RawFrames(
    b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini",'
    b'"choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}\n\n' * 5,
    lambda _: None,
    5,  # as the OpenAI-compatible provider makes them: it knows the count
)


_WORD = Chunk(
    id="x", model="gpt-4o-mini", choices=[ChunkChoice(index=0, delta=Delta(content=" word"))]
)
_USAGE_CHUNK = Chunk(id="x", model="gpt-4o-mini", choices=[], usage=USAGE)


class _Upstream:
    """An in-process upstream: a canned whole response, or a canned 20-chunk stream: decoded,
    one chunk per read (``relay`` False), or verbatim frames, five per read (``relay``)."""

    def __init__(self, relay: bool = False) -> None:
        self._relay = relay

    async def __call__(self, call: Call) -> Reply:
        if call.stream:
            if self._relay:
                reads: list[list[Chunk | RawFrames]] = [[_FRAMES] for _ in range(_CHUNKS // 5)]
            else:
                reads = [[_WORD] for _ in range(_CHUNKS)]
            stream = _Reads([*reads, [_USAGE_CHUNK]])
            return Reply(provider="upstream", model="gpt-4o-mini", stream=stream)  # type: ignore[arg-type]
        message = Message(role="assistant", content="a canned answer of a few words")
        response = Response(
            id="x", model="gpt-4o-mini", choices=[Choice(index=0, message=message)], usage=USAGE
        )
        return Reply(provider="upstream", model="gpt-4o-mini", response=response)


def _call(stream: bool) -> Call:
    return Call(
        request_id="bench",
        dialect="openai",
        model="fast",
        messages=[Message(role="user", content="How much does this cost? " * 4)],
        stream=stream,
    )


async def _one(chain: Next, stream: bool) -> None:
    reply = await chain(_call(stream))
    if reply.stream is not None:
        source = batched(reply.stream)
        while await source.next_batch(True):
            pass
        await reply.stream.aclose()  # type: ignore[attr-defined]


async def _cpu_per_request(chain: Next, stream: bool, requests: int) -> float:
    """Microseconds of process CPU per request through ``chain``."""
    started = time.process_time()
    for _ in range(requests):
        await _one(chain, stream)
    return (time.process_time() - started) / requests * 1e6


def _context() -> PluginContext:
    prices = PriceBook(load_catalog(SHIPPED_CATALOG), {"upstream": ProviderPricing("openai")})
    router = Router({}, {"upstream": True})
    return PluginContext(router.resolve, Metrics(), structlog.get_logger(), prices=prices)


MODES = {"non-stream": (False, False), "stream": (True, False), "relay": (True, True)}


def chains(relay: bool = False) -> dict[str, Next]:
    """The chains compared: ``empty`` and ``cost``."""
    upstream = _Upstream(relay)
    cost: Sequence[Plugin] = [CostPlugin(CostConfig(), _context())]
    return {"empty": compose([], upstream), "cost": compose(cost, upstream)}


async def measure(requests: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per mode and chain, the CPU per request (µs) of each round."""
    results: dict[str, dict[str, list[float]]] = {}
    for mode, (stream, relay) in MODES.items():
        compared = chains(relay)
        results[mode] = {name: [] for name in compared}
        for chain in compared.values():  # warm-up: caches, metric children, memo
            await _cpu_per_request(chain, stream, requests // 10 or 1)
        for _ in range(rounds):
            for name, chain in compared.items():
                results[mode][name].append(await _cpu_per_request(chain, stream, requests))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurement and print one line per mode."""
    parser = argparse.ArgumentParser(prog="python -m bench.plugin_cpu", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000, help="per round and chain")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.requests, args.rounds))
    print(f"CPU per request, median of {args.rounds} interleaved rounds of {args.requests}:")
    for mode, by_chain in results.items():
        empty = statistics.median(by_chain["empty"])
        cost = statistics.median(by_chain["cost"])
        deltas = [c - e for c, e in zip(by_chain["cost"], by_chain["empty"], strict=True)]
        print(
            f"  {mode:<10}  empty chain {empty:6.2f} µs   with cost {cost:6.2f} µs   "
            f"cost plugin {statistics.median(deltas):5.2f} µs "
            f"(rounds {min(deltas):.2f}..{max(deltas):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
