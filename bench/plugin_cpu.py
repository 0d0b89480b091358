"""``python -m bench.plugin_cpu``: the CPU plugins add per request, measured in-process.

The HTTP benchmark cannot resolve a few microseconds in a request that costs several hundred
on a shared machine, so this one runs the plugin chain alone: the same canned call through an
in-process upstream, once through ``[]`` (the empty chain) and once through the plugins
measured — ``--plugins cost`` (the default: pricing alone, an anonymous call),
``--plugins cost-budget`` (the whole hot path of the ``cost`` plugin: a call whose key and team
both have budgets, so every request reserves and settles both scopes' counters in the state
store, and whose finished request is queued for the ledger, the writer batching it into a sink
that discards it: the database's own work is ``bench.ledger_rate``'s) or ``--plugins auth``
(``auth`` then ``limits``, the call carrying a declared key whose key and team both have rpm,
tpm and max_parallel limits: the cache-hit path, every limit counted) — in interleaved rounds,
timing process CPU
(``time.process_time``) per request. A whole request is
a call and its whole reply; a stream request is a call and a 20-chunk stream (``--chunks N``:
N chunks, a multiple of 5) read to its end (as the app reads it) plus the per-request
finalisation the app runs. The difference of the two
chains is what the plugin costs; it is printed per mode as the median over the rounds.

Back to back, each request finds what the one before it left in the CPU's caches: the plugin's
bytecode, its objects and the store's tables. ``--evict-mib N`` writes over N MiB between
requests (untimed, :class:`CacheEvictor`), so that each starts cold: the upper end of what a
served request, whose own work evicts part of that, pays; back to back is the lower end.

Everything is in one process and one event loop; nothing is sent over a network.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from plugins.auth import AuthPlugin
from plugins.cost import CostConfig, CostPlugin
from plugins.limits import LimitsOptions, LimitsPlugin
from proxy.auth.authenticator import Authenticator
from proxy.auth.config import AuthConfig, DeclaredKey, TeamConfig
from proxy.canonical import (
    Budget,
    Call,
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    Deployment,
    Message,
    Principal,
    RawFrames,
    Reply,
    Response,
    Timings,
    Usage,
    batched,
)
from proxy.chain import FinishedRequest, Next, Plugin, PluginContext, compose
from proxy.errors import GatewayError
from proxy.ledger.journal import Journal
from proxy.ledger.writer import LedgerWriter
from proxy.metrics import Metrics
from proxy.price_catalog import SHIPPED_CATALOG, load_catalog
from proxy.pricing import PriceBook, ProviderPricing
from proxy.providers.base import Timeouts
from proxy.router import Router
from proxy.upstream_stream import UpstreamClocks, UpstreamStream

USAGE = Usage(input=40, cache_read=10, output=30)
CHUNKS = 20
"""The chunks of a stream request, unless told otherwise (``--chunks``)."""


async def _wire(reads: list[list[Chunk | RawFrames | None]]) -> AsyncIterator[list[Any]]:
    """A provider's reads, as the HTTP transport yields them (the last ends with None)."""
    for read in reads:
        yield read


def _stream(reads: list[list[Chunk | RawFrames]]) -> UpstreamStream:
    """The upstream layer's own stream over ``reads`` (clocks, batches, end hooks): what the
    chain gets from a real provider."""
    wire: list[list[Chunk | RawFrames | None]] = [*reads[:-1], [*reads[-1], None]]
    return UpstreamStream(
        _wire(wire), UpstreamClocks(Timeouts()), Timings(start=0.0), "upstream", _ignore_error
    )


def _ignore_error(provider: str, error: GatewayError) -> None:
    return None


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
    """An in-process upstream: a canned whole response, or a canned stream of ``chunks``
    chunks: decoded, one chunk per read (``relay`` False), or verbatim frames, five per read
    (``relay``)."""

    def __init__(self, relay: bool = False, chunks: int = CHUNKS) -> None:
        self._relay = relay
        self._chunks = chunks

    async def __call__(self, call: Call) -> Reply:
        if call.stream:
            if self._relay:
                reads: list[list[Chunk | RawFrames]] = [[_FRAMES] for _ in range(self._chunks // 5)]
            else:
                reads = [[_WORD] for _ in range(self._chunks)]
            stream = _stream([*reads, [_USAGE_CHUNK]])
            return Reply(provider="upstream", model="gpt-4o-mini", stream=stream)  # type: ignore[arg-type]
        message = Message(role="assistant", content="a canned answer of a few words")
        response = Response(
            id="x", model="gpt-4o-mini", choices=[Choice(index=0, message=message)], usage=USAGE
        )
        return Reply(provider="upstream", model="gpt-4o-mini", response=response)


_KEY = "sk-cw-bench-" + "0123456789abcdef" * 3
_HEADERS = {"content-type": "application/json", "authorization": f"Bearer {_KEY}"}
_LIMITS = {"rpm": 10**9, "tpm": 10**12, "max_parallel": 10**6}


_DEPLOYMENT = Deployment(provider="upstream", model="gpt-4o-mini")


def _call(stream: bool) -> Call:
    return Call(
        request_id="bench",
        dialect="openai",
        model="fast",
        messages=[Message(role="user", content="How much does this cost? " * 4)],
        stream=stream,
        client_headers=_HEADERS,
        deployments=[_DEPLOYMENT],  # as the router resolves it: the worst case is priced
    )


_BUDGET = Budget(max_usd=1_000_000.0, period="1mo")
_BUDGETED = Principal(
    key_id="key_bench", key_alias="bench", team="bench", budget=_BUDGET, team_budget=_BUDGET
)


class Chain:
    """A chain to measure, and what the app does for it once a request is over."""

    def __init__(
        self,
        run: Next,
        principal: Principal | None = None,
        finishers: Sequence[Callable[[FinishedRequest], None]] = (),
    ) -> None:
        self.run = run
        self.principal = principal
        self.finishers = finishers
        self.ledger: LedgerWriter | None = None

    async def settle(self) -> None:
        """Let the ledger writer write what is queued (its CPU belongs to the requests)."""
        if self.ledger is not None:
            await self.ledger.flush()

    async def close(self) -> None:
        """Stop the ledger writer's task, once the chain is measured."""
        if self.ledger is not None:
            await self.ledger.close()

    async def one(self, stream: bool) -> None:
        call = _call(stream)
        if self.principal is not None:
            call.principal = self.principal
        reply = await self.run(call)
        if reply.stream is not None:
            source = batched(reply.stream)
            while await source.next_batch(True):
                pass
            await reply.stream.aclose()  # type: ignore[attr-defined]
        if self.finishers:  # as the app does when a plugin has a finished hook
            finished = FinishedRequest(
                request_id=call.request_id,
                dialect=call.dialect,
                call=call,
                principal=call.principal,
                status=200,
                provider=reply.provider,
                upstream_model=reply.model,
                usage=USAGE,
                error_code=None,
                duration=0.001,
                ended_at=time.time(),
                attempts=reply.attempts,
            )
            for hook in self.finishers:
                hook(finished)


class _Discard:
    """A ledger sink that keeps nothing."""

    async def write(self, records: Sequence[Any]) -> None:
        return None


class CacheEvictor:
    """Writes one byte in every 64-byte line of a buffer of ``size`` bytes when called, so that
    what a request left in the CPU's caches is gone before the next one starts: a served
    request's own work (parsing, the network, the other requests of the loop turn) leaves the
    caches in about that state, where back-to-back in-process requests find everything warm.
    Costs about 25 µs per MiB; :func:`cpu_per_request` does not time it."""

    __slots__ = ("_buffer", "_ones")

    LINE = 64

    def __init__(self, size: int) -> None:
        """``size``: bytes to write over (at least one cache line)."""
        if size < self.LINE:
            raise ValueError(f"an eviction buffer needs at least {self.LINE} bytes")
        self._buffer = bytearray(size)
        self._ones = b"\x01" * len(range(0, size, self.LINE))

    def __call__(self) -> None:
        self._buffer[:: self.LINE] = self._ones


async def cpu_per_request(
    chain: Chain, stream: bool, requests: int, evict: Callable[[], None] | None = None
) -> float:
    """Microseconds of process CPU per request through ``chain``, background tasks included:
    the in-process upstream never suspends, so the loop is yielded to every
    :data:`_YIELD_EVERY` requests, as a serving loop is between network reads (else the
    ledger writer would never run and its queue would overflow). ``evict`` (a
    :class:`CacheEvictor`) runs after each request, untimed: each request is then timed
    alone."""
    if chain.ledger is not None:
        chain.ledger.start()
    clock = time.process_time
    spent = 0.0  # CPU of the requests before the last eviction
    started = clock()
    for done in range(requests):
        await chain.one(stream)
        if done % _YIELD_EVERY == 0:
            await asyncio.sleep(0)
        if evict is not None:
            spent += clock() - started
            evict()
            started = clock()
    await chain.settle()
    return (spent + clock() - started) / requests * 1e6


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


def _plugins(name: str, upstream: Next) -> Chain:
    context = _context()
    if name == "auth":
        plugins: Sequence[Plugin] = [
            AuthPlugin(context=context),
            LimitsPlugin(LimitsOptions(), context),
        ]
        return Chain(compose(plugins, upstream))
    if name == "cost-budget":
        journal = Journal(Path(tempfile.gettempdir()) / "crossway-bench-journal")
        context.ledger = LedgerWriter(_Discard(), journal, context.metrics, context.logger)
        cost = CostPlugin(CostConfig(), context)
        chain = Chain(compose([cost], upstream), _BUDGETED, [cost.finished])
        chain.ledger = context.ledger
        return chain
    return Chain(compose([CostPlugin(CostConfig(), context)], upstream))


_YIELD_EVERY = 64
MODES = {"non-stream": (False, False), "stream": (True, False), "relay": (True, True)}
PLUGINS = ("cost", "cost-budget", "auth")


def chains(relay: bool = False, plugins: str = "cost", chunks: int = CHUNKS) -> dict[str, Chain]:
    """The chains compared: ``empty`` and ``plugins`` (one of :data:`PLUGINS`), over an upstream
    whose streams have ``chunks`` chunks."""
    upstream = _Upstream(relay, chunks)
    return {"empty": Chain(compose([], upstream)), "plugins": _plugins(plugins, upstream)}


async def measure(
    requests: int,
    rounds: int,
    plugins: str = "cost",
    evict_bytes: int = 0,
    chunks: int = CHUNKS,
) -> dict[str, dict[str, list[float]]]:
    """Per mode and chain, the CPU per request (µs) of each round; ``evict_bytes``: evict the
    caches over that many bytes between requests (:class:`CacheEvictor`; 0: do not);
    ``chunks``: the chunks of a stream request."""
    evict = CacheEvictor(evict_bytes) if evict_bytes else None
    results: dict[str, dict[str, list[float]]] = {}
    for mode, (stream, relay) in MODES.items():
        compared = chains(relay, plugins, chunks)
        results[mode] = {name: [] for name in compared}
        for chain in compared.values():  # warm-up: caches, metric children, memo
            await cpu_per_request(chain, stream, requests // 10 or 1, evict)
        for _ in range(rounds):
            for name, chain in compared.items():
                results[mode][name].append(await cpu_per_request(chain, stream, requests, evict))
        for chain in compared.values():
            await chain.close()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurement and print one line per mode."""
    parser = argparse.ArgumentParser(prog="python -m bench.plugin_cpu", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000, help="per round and chain")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--plugins", choices=PLUGINS, default="cost")
    parser.add_argument(
        "--evict-mib",
        type=float,
        default=0.0,
        help="write over this many MiB between requests, untimed, so that each request starts "
        "with cold caches as a served one does (0, the default: back to back, warm)",
    )
    parser.add_argument(
        "--chunks",
        type=int,
        default=CHUNKS,
        help=f"chunks per stream request, a multiple of 5 (default {CHUNKS})",
    )
    args = parser.parse_args(argv)
    if args.evict_mib < 0:
        parser.error("--evict-mib must not be negative")
    if args.chunks < 5 or args.chunks % 5:
        parser.error("--chunks must be a positive multiple of 5")
    evict_bytes = int(args.evict_mib * 2**20)
    results = asyncio.run(
        measure(args.requests, args.rounds, args.plugins, evict_bytes, args.chunks)
    )
    label = "auth+limits" if args.plugins == "auth" else args.plugins
    caches = f"caches evicted ({args.evict_mib:g} MiB)" if evict_bytes else "warm caches"
    print(
        f"CPU per request, median of {args.rounds} interleaved rounds of {args.requests}, "
        f"{caches}, {args.chunks}-chunk streams:"
    )
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
