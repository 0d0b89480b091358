"""What every in-process measurement of ``bench.micro`` shares: a chain to measure and what the
app does around it (:class:`Chain`), the CPU per request of a run of requests
(:func:`cpu_per_request`), the cache evictor (:class:`CacheEvictor`) and interleaved rounds
(:func:`interleaved`).

Everything is in one process and one event loop; nothing is sent over a network.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from proxy.core.canonical import Call, Principal, Usage
from proxy.core.plugin import FinishedRequest, Next
from proxy.core.reply import batched
from proxy.governance.ledger.writer import LedgerWriter

MODES = {"non-stream": (False, False), "stream": (True, False), "relay": (True, True)}
"""A request's modes, as ``(stream, relay)``: a whole reply; a stream of decoded chunks, one per
read; the same answer as verbatim OpenAI frames, five per read."""
USAGE = Usage(input=40, cache_read=10, output=30)
"""The usage of every canned reply, and of every finished request."""
Request = Callable[[bool], Awaitable[None]]
"""One request run to its end (``True``: streamed)."""
_YIELD_EVERY = 64


class Chain:
    """A chain to measure, the call it is given (``call(stream)``: a fresh one per request) and
    what the app does for it once a request is over."""

    def __init__(
        self,
        run: Next,
        call: Callable[[bool], Call],
        principal: Principal | None = None,
        finishers: Sequence[Callable[[FinishedRequest], None]] = (),
    ) -> None:
        self.run = run
        self.call = call
        self.principal = principal
        self.finishers = finishers
        self.ledger: LedgerWriter | None = None

    def start(self) -> None:
        """Start the ledger writer's task, if the chain has one."""
        if self.ledger is not None:
            self.ledger.start()

    async def settle(self) -> None:
        """Let the ledger writer write what is queued (its CPU belongs to the requests)."""
        if self.ledger is not None:
            await self.ledger.flush()

    async def close(self) -> None:
        """Stop the ledger writer's task, once the chain is measured."""
        if self.ledger is not None:
            await self.ledger.close()

    async def one(self, stream: bool) -> None:
        """One request: the call through the chain, a stream read by batches to its end (as
        the app reads it), then the finished hooks."""
        call = self.call(stream)
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
    chain: Chain | Request,
    stream: bool,
    requests: int,
    evict: Callable[[], None] | None = None,
) -> float:
    """Microseconds of process CPU (``time.process_time``) per request through ``chain`` (a
    :class:`Chain`, or a bare request), background tasks included: the in-process upstream
    never suspends, so the loop is yielded to every :data:`_YIELD_EVERY` requests, as a serving
    loop is between network reads (else a ledger writer would never run and its queue would
    overflow). ``evict`` (a :class:`CacheEvictor`) runs after each request, untimed: each
    request is then timed alone."""
    measured = chain if isinstance(chain, Chain) else None
    one = chain.one if isinstance(chain, Chain) else chain
    if measured is not None:
        measured.start()
    clock = time.process_time
    spent = 0.0  # CPU of the requests before the last eviction
    started = clock()
    for done in range(requests):
        await one(stream)
        if done % _YIELD_EVERY == 0:
            await asyncio.sleep(0)
        if evict is not None:
            spent += clock() - started
            evict()
            started = clock()
    if measured is not None:
        await measured.settle()
    return (spent + clock() - started) / requests * 1e6


Timer = Callable[[int], Awaitable[float]]
"""Runs that many requests of one subject and returns a figure per request."""


async def interleaved(
    subjects: Mapping[str, Timer], requests: int, rounds: int
) -> dict[str, list[float]]:
    """Every subject's figure per request in each of ``rounds`` rounds of ``requests``, the
    subjects taking turns within a round (so that a machine whose load drifts spreads the drift
    over all of them), after a warm-up of a tenth of a round each (caches, metric children,
    memos)."""
    for timer in subjects.values():
        await timer(requests // 10 or 1)
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    for _ in range(rounds):
        for name, timer in subjects.items():
            samples[name].append(await timer(requests))
    return samples
