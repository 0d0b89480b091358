"""Settlements waiting to ride on the next admission: the limits' end-of-call step, deferred.

A call admitted by the limits plugin is settled when its reply is over — its in-flight slots
released, its token reservation corrected. Sent on its own, that is a third Redis round trip
per request after the admission and the cache lookup. :class:`PendingSettlements` keeps
settlements instead, so that :class:`~proxy.state.redis.RedisStore` sends them inside the next
admission's script (applied first, atomically, in the same round trip); when no admission
comes within ``delay`` seconds, ``flush`` is called to send them on their own, so a settlement
reaches Redis at most about ``delay`` after it was made. Past ``max_pending`` keys the flush is
due at once, which bounds an admission's script.

What this changes for other instances: a slot freed here looks taken there for at most
``delay`` longer (this process's own next admission always sees it freed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from proxy.store import RateBucket

SETTLE_DELAY = 0.002  # seconds a settlement may wait for an admission to carry it
MAX_PENDING = 256  # keys; past it the pending settlements are flushed at once


class PendingSettlements:
    """Slots to release and bucket corrections to charge, in the order they were settled.
    ``flush`` is the coroutine that sends them (it calls :meth:`take`). Use from one loop."""

    def __init__(
        self,
        flush: Callable[[], Awaitable[None]],
        *,
        delay: float = SETTLE_DELAY,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self._flush = flush
        self._delay = delay
        self._max = max_pending
        self._releases: list[str] = []
        self._adjusts: list[RateBucket] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Task[None]] = set()

    def __bool__(self) -> bool:
        return bool(self._releases or self._adjusts)

    def add(self, releases: Iterable[str], adjusts: Iterable[RateBucket]) -> None:
        """Keep one settlement (slot names as sent, corrections with plain keys) and make sure
        a flush is due within ``delay``."""
        self._releases.extend(releases)
        self._adjusts.extend(adjusts)
        if len(self._releases) + len(self._adjusts) >= self._max:
            self._cancel()
            self._start_flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._delay, self._due)

    def take(self) -> tuple[list[str], list[RateBucket]]:
        """Everything pending, which is then no longer pending (and no flush is due)."""
        releases, adjusts = self._releases, self._adjusts
        if releases or adjusts:
            self._releases, self._adjusts = [], []
        self._cancel()
        return releases, adjusts

    async def drain(self) -> None:
        """Wait for the flushes already started (the store's close)."""
        if self._flushing:
            await asyncio.gather(*self._flushing, return_exceptions=True)

    def _due(self) -> None:
        self._timer = None
        self._start_flush()

    def _start_flush(self) -> None:
        task = asyncio.get_running_loop().create_task(self._flush())
        self._flushing.add(task)
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        """A background flush ended; its failure was the store's to count (the breaker), and
        its settlements are lost as a failed settle's would be (slots then expire idle)."""
        self._flushing.discard(task)
        if not task.cancelled():
            task.exception()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
