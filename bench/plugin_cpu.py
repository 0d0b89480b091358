"""``python -m bench.plugin_cpu``: the CPU plugins add per request, measured in-process.

The HTTP benchmark cannot resolve a few microseconds in a request that costs several hundred
on a shared machine, so this one runs the plugin chain alone: the same canned call through an
in-process upstream, once through ``[]`` (the empty chain) and once through the plugins
measured — ``--plugins cost`` (the default) or ``--plugins auth`` (``auth`` then ``limits``,
the call carrying a declared key whose key and team both have rpm, tpm and max_parallel
limits: the cache-hit path, every limit counted) — in interleaved rounds, timing process CPU
(``time.process_time``) per request. A whole request is
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

from plugins.auth import AuthPlugin
from plugins.cost import CostConfig, CostPlugin
from plugins.limits import LimitsOptions, LimitsPlugin
from proxy.auth.authenticator import Authenticator
from proxy.auth.config import AuthConfig, DeclaredKey, TeamConfig
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


_KEY = "sk-cw-bench-" + "0123456789abcdef" * 3
_HEADERS = {"content-type": "application/json", "authorization": f"Bearer {_KEY}"}
_LIMITS = {"rpm": 10**9, "tpm": 10**12, "max_parallel": 10**6}


def _call(stream: bool) -> Call:
    return Call(
        request_id="bench",
        dialect="openai",
        model="fast",
        messages=[Message(role="user", content="How much does this cost? " * 4)],
        stream=stream,
        client_headers=_HEADERS,
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
    metrics = Metrics()
    auth = AuthConfig(
        teams={"bench": TeamConfig(**_LIMITS)},
        keys=(DeclaredKey(key=_KEY, alias="bench", team="bench", models=("fast",), **_LIMITS),),
    )
    logger = structlog.get_logger()
    authenticator = Authenticator(auth, None, metrics, logger)
    return PluginContext(
        router.resolve, metrics, logger, prices=prices, authenticator=authenticator
    )


def _plugins(name: str) -> Sequence[Plugin]:
    context = _context()
    if name == "auth":
        return [AuthPlugin(context=context), LimitsPlugin(LimitsOptions(), context)]
    return [CostPlugin(CostConfig(), context)]


MODES = {"non-stream": (False, False), "stream": (True, False), "relay": (True, True)}


def chains(relay: bool = False, plugins: str = "cost") -> dict[str, Next]:
    """The chains compared: ``empty`` and ``plugins`` (``cost`` or ``auth``)."""
    upstream = _Upstream(relay)
    return {"empty": compose([], upstream), "plugins": compose(_plugins(plugins), upstream)}


async def measure(
    requests: int, rounds: int, plugins: str = "cost"
) -> dict[str, dict[str, list[float]]]:
    """Per mode and chain, the CPU per request (µs) of each round."""
    results: dict[str, dict[str, list[float]]] = {}
    for mode, (stream, relay) in MODES.items():
        compared = chains(relay, plugins)
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
    parser.add_argument("--plugins", choices=("cost", "auth"), default="cost")
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.requests, args.rounds, args.plugins))
    label = "auth+limits" if args.plugins == "auth" else "cost"
    print(f"CPU per request, median of {args.rounds} interleaved rounds of {args.requests}:")
    for mode, by_chain in results.items():
        empty = statistics.median(by_chain["empty"])
        plugged = statistics.median(by_chain["plugins"])
        deltas = [c - e for c, e in zip(by_chain["plugins"], by_chain["empty"], strict=True)]
        print(
            f"  {mode:<10}  empty chain {empty:6.2f} µs   with {label} {plugged:6.2f} µs   "
            f"{label} {statistics.median(deltas):5.2f} µs "
            f"(rounds {min(deltas):.2f}..{max(deltas):.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
