"""What a :class:`~proxy.state.redis.RedisStore` owes Redis after an operation: settlements
waiting to ride on the next admission, leases it keeps renewed, and steps it retries until they
land.

A call admitted by the limits plugin is settled when its reply is over — its in-flight leases
released, its token reservation corrected. Sent on its own, that is a third Redis round trip
per request after the admission and the cache lookup. :class:`PendingSettlements` keeps
settlements instead, so that :class:`~proxy.state.redis.RedisStore` sends them inside the next
admission's script (applied first, atomically, in the same round trip). What no admission has
carried within :data:`WAIT_TURNS` more turns of the event loop is flushed on its own, in one
script for all of them — so a settlement leaves for Redis a few loop turns after the reply
that made it was written (microseconds when the process is idle, when no admission would
come), before the client can have sent another instance its next request. Past
``max_pending`` keys the flush is started at once, which bounds an admission's script.

Measured at concurrency 64 on the governance chain: 99.5 % of settlements ride on an
admission, 2.01 Redis commands per limited request (the admission and the cache lookup, plus
the rare flush and the health plugin's once-a-second reads) instead of 3.

:class:`HeldLeases` keeps the leases of admissions not settled yet renewed (a lease ends on its
own unless its holder renews it). :class:`Retries` runs the steps that must land and may be
repeated — the release of leases whose settlement could not be sent, the void of an operation
the store gave up on — until they land or their time is up.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any, NamedTuple

from proxy.state.scripts import RENEW, SETTLE, VOID, Script, lease_key, ops_key
from proxy.state.store import RateBucket, StoreUnavailable

WAIT_TURNS = 4  # loop turns a settlement waits for an admission before it leaves on its own
MAX_PENDING = 256  # keys; past it the pending settlements are flushed at once
MAX_RETRIED = 20_000  # steps a Retries keeps; past it new ones are dropped
RETRY_BATCH = 1024  # steps one attempt sends (their commands leave in one write)
FIRST_DELAY = 0.05  # seconds before the next attempt after one that failed, doubled while
MAX_DELAY = 2.0  # attempts keep failing, up to this
RENEWED_AT_ONCE = 512  # holders one renewal script takes
Step = Callable[[], Awaitable[object]]
RunScript = Callable[[Script, Sequence[str], Sequence[Any]], Awaitable[Any]]


class Release(NamedTuple):
    """One lease to end: its slot's count key and lease set (as sent), and its holder (``""``:
    the lease that ends first — a release without a holder)."""

    key: str
    leases: str
    holder: str


def release_keys(releases: Sequence[Release]) -> list[str]:
    """The keys of ``releases`` as the scripts take them: each count and its lease set."""
    keys: list[str] = []
    for release in releases:
        keys += (release.key, release.leases)
    return keys


class PendingSettlements:
    """Leases to release and bucket corrections to charge, in the order they were settled.
    ``flush`` is the coroutine that sends them (it calls :meth:`take`). Use from one loop."""

    def __init__(
        self, flush: Callable[[], Coroutine[Any, Any, None]], *, max_pending: int = MAX_PENDING
    ) -> None:
        self._flush = flush
        self._max = max_pending
        self._releases: list[Release] = []
        self._adjusts: list[RateBucket] = []
        self._due_handle: asyncio.Handle | None = None
        self._turns = 0
        self._flushing: set[asyncio.Task[None]] = set()

    def __bool__(self) -> bool:
        return bool(self._releases or self._adjusts)

    def add(self, releases: Iterable[Release], adjusts: Iterable[RateBucket]) -> None:
        """Keep one settlement (its releases, corrections with plain keys) and make sure
        a flush is due :data:`WAIT_TURNS` loop turns after the next."""
        self._releases.extend(releases)
        self._adjusts.extend(adjusts)
        if len(self._releases) + len(self._adjusts) >= self._max:
            self._cancel()
            self._start_flush()
        elif self._due_handle is None:
            self._turns = 0
            self._due_handle = asyncio.get_running_loop().call_soon(self._due)

    def take(self) -> tuple[list[Release], list[RateBucket]]:
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
        if self._turns < WAIT_TURNS:  # give the admissions of the next turns their chance
            self._turns += 1
            self._due_handle = asyncio.get_running_loop().call_soon(self._due)
            return
        self._due_handle = None
        self._start_flush()

    def _start_flush(self) -> None:
        task = asyncio.get_running_loop().create_task(self._flush())
        self._flushing.add(task)
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        """A background flush ended; its failure was the store's to count (the breaker) and
        to answer (its releases retried, its corrections lost)."""
        self._flushing.discard(task)
        if not task.cancelled():
            task.exception()

    def _cancel(self) -> None:
        if self._due_handle is not None:
            self._due_handle.cancel()
            self._due_handle = None


class Detached:
    """Corrections sent without waiting for them (:meth:`~proxy.state.store.Store.incr_later`): each
    task is kept until it is done, and its failure is retrieved and dropped (the store's breaker
    counted it; the correction is lost, and never applied: a failed add is voided). Use from
    one loop."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run ``coroutine`` in the background."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def drain(self) -> None:
        """Wait for the tasks still running (the store's close)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()


class HeldLeases:
    """The leases of admissions not settled yet (holder → its slots, as sent), renewed every
    ``every`` seconds while any is held: one ``renew(slots, holders)`` per set of slots, which
    makes each holder's lease end a lease's time from then. So the lease of a request in flight
    never ends, however long it runs, and one whose process is gone ends a lease's time after
    its last renewal. A failed renewal is the next one's to make up. Use from one loop."""

    def __init__(
        self, renew: Callable[[tuple[str, ...], list[int]], Awaitable[object]], every: float
    ) -> None:
        self._renew = renew
        self._every = every
        self._held: dict[int, tuple[str, ...]] = {}
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._held)

    def add(self, holder: int, slots: tuple[str, ...]) -> None:
        """Keep ``holder``'s leases in ``slots`` renewed until it is :meth:`discard`-ed."""
        self._held[holder] = slots
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._renewing())

    def discard(self, holder: int) -> None:
        """Stop renewing ``holder``'s leases (its settlement releases them)."""
        self._held.pop(holder, None)

    async def close(self) -> None:
        """Stop renewing (the store's close: the leases then end on their own)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _renewing(self) -> None:
        try:
            while self._held:
                await asyncio.sleep(self._every)
                groups: dict[tuple[str, ...], list[int]] = {}
                for holder, slots in self._held.items():
                    groups.setdefault(slots, []).append(holder)
                await asyncio.gather(
                    *(self._renew(slots, holders) for slots, holders in groups.items()),
                    return_exceptions=True,
                )
        finally:
            if self._task is asyncio.current_task():
                self._task = None


class Retries:
    """Steps that must land and may be repeated (each an idempotent ``step()`` that raises
    :class:`~proxy.state.store.StoreUnavailable` when it did not land), run until they do.

    :meth:`add` runs a step at the next loop turn. One that raises ``StoreUnavailable`` is run
    again — :data:`FIRST_DELAY` after an attempt that failed, the delay doubling while attempts
    keep failing, up to :data:`MAX_DELAY` — until it lands or its ``keep_for`` seconds are up;
    one that raises anything else is dropped (it cannot land: a key of another kind). At most
    ``cap`` steps are kept: past it new steps are dropped — the first kept are those of the
    first failures of an outage, which may have reached the server; later ones were mostly
    refused at once by the store's breaker, never sent. ``on_dropped(count)`` is told of the
    steps given up (expired, over the cap, or still kept at :meth:`close`), at most once an
    attempt. An attempt runs up to :data:`RETRY_BATCH` steps together, so that their commands
    leave in one write. Use from one loop."""

    def __init__(
        self, *, cap: int = MAX_RETRIED, on_dropped: Callable[[int], None] | None = None
    ) -> None:
        self._cap = cap
        self._on_dropped = on_dropped
        self._steps: collections.deque[tuple[float, Step]] = collections.deque()
        self._over = 0  # steps dropped over the cap, not reported yet
        self._delay = 0.0
        self._handle: asyncio.Handle | None = None
        self._running: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, step: Step, keep_for: float) -> None:
        """Run ``step`` until it lands, for at most ``keep_for`` seconds."""
        if len(self._steps) < self._cap:
            self._steps.append((asyncio.get_running_loop().time() + keep_for, step))
        else:
            self._over += 1
        self._schedule()

    async def close(self) -> None:
        """Wait for the attempt under way, try what is kept once more, and drop the rest."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._running is not None:
            await asyncio.gather(self._running, return_exceptions=True)
        if self._steps:
            await self._attempt()
        self._dropped(len(self._steps) + self._over)
        self._steps.clear()
        self._over = 0

    def _schedule(self) -> None:
        if self._handle is not None or self._running is not None or not self._steps:
            return
        loop = asyncio.get_running_loop()
        if self._delay:
            self._handle = loop.call_later(self._delay, self._start)
        else:
            self._handle = loop.call_soon(self._start)

    def _start(self) -> None:
        self._handle = None
        self._running = asyncio.get_running_loop().create_task(self._attempt())
        self._running.add_done_callback(self._attempted)

    def _attempted(self, task: asyncio.Task[None]) -> None:
        self._running = None
        if not task.cancelled():
            task.exception()  # retrieved: an attempt handles its steps' failures itself
        self._schedule()

    async def _attempt(self) -> None:
        """Run the kept steps still in time (up to a batch); keep those that did not land."""
        now = asyncio.get_running_loop().time()
        steps: list[tuple[float, Step]] = []
        expired = 0
        while self._steps and len(steps) < RETRY_BATCH:
            deadline, step = self._steps.popleft()
            if deadline > now:
                steps.append((deadline, step))
            else:
                expired += 1
        self._dropped(expired + self._over)
        self._over = 0
        results = await asyncio.gather(*(step() for _, step in steps), return_exceptions=True)
        failed = [
            kept
            for kept, result in zip(steps, results, strict=True)
            if isinstance(result, (StoreUnavailable, asyncio.CancelledError))
        ]
        self._steps.extendleft(reversed(failed))
        self._delay = min(max(2 * self._delay, FIRST_DELAY), MAX_DELAY) if failed else 0.0

    def _dropped(self, count: int) -> None:
        if count > 0 and self._on_dropped is not None:
            self._on_dropped(count)


class Operations:
    """What a :class:`~proxy.state.redis.RedisStore` keeps about its operations (see that
    module's docstring: leases, operations given up on): their numbers and ops bits, the
    leases of admissions not settled yet (:attr:`held`, renewed), and the voids and releases
    it retries (:attr:`retries`). ``script`` runs one script (the store's); ``logger()`` is
    where retries given up are logged (None: nowhere). Use from one loop."""

    def __init__(
        self,
        script: RunScript,
        *,
        cluster: bool,
        lease_ttl: float,
        renew_every: float,
        ops_ttl: float,
        ops_per_key: int,
        keep_voids: float,
        keep_releases: float,
        logger: Callable[[], Any],
    ) -> None:
        self._script = script
        self._cluster = cluster
        self._instance = secrets.token_hex(8)
        self._numbers = itertools.count(1)
        self._per_key = ops_per_key
        self._keep_voids = keep_voids
        self._keep_releases = keep_releases
        self._logger = logger
        self.lease_ms = int(lease_ttl * 1000)
        self.ops_ms = int(ops_ttl * 1000)
        self.held = HeldLeases(self._renew, renew_every)
        self.retries = Retries(on_dropped=self._dropped)

    def slot_keys(self, names: Sequence[str]) -> list[str]:
        """The keys of in-flight slots (``names`` as sent) as the scripts take them: each
        count and its lease set."""
        keys: list[str] = []
        for name in names:
            keys += (name, lease_key(name, self._cluster))
        return keys

    def operation(self, first: str) -> tuple[int, str, int]:
        """A new operation on keys of ``first``'s hash slot: its number (an admission's
        holder), its ops bitmap and its first bit there."""
        number = next(self._numbers)
        block, index = divmod(number, self._per_key)
        return number, ops_key(first, self._instance, block, self._cluster), 2 * index

    def member(self, holder: int) -> str:
        """``holder`` as its leases name it (unique across instances)."""
        return f"{self._instance}:{holder}"

    def give_up(self, ops: str, bit: int, member: str, keys: list[str], amount: int) -> None:
        """Void an operation that failed or was cancelled (``member``: a hold's holder, its
        ``keys`` slot pairs; else an add of ``amount`` to counters): retried until it lands."""
        void = functools.partial(self._void, ops, bit, member, keys, amount)
        self.retries.add(void, self._keep_voids)

    def retry_releases(self, releases: list[Release]) -> None:
        """Retry ``releases`` that could not be sent, until they land or their leases ended."""
        if releases:
            self.retries.add(functools.partial(self._release, releases), self._keep_releases)

    async def close(self) -> None:
        """Stop renewing; try what is kept once more (the store's close)."""
        await self.held.close()
        await self.retries.close()

    async def _void(self, ops: str, bit: int, member: str, keys: list[str], amount: int) -> None:
        await self._script(VOID, [ops, *keys], (bit, member, amount, self.ops_ms))

    async def _release(self, releases: list[Release]) -> None:
        holders = (release.holder for release in releases)
        await self._script(SETTLE, release_keys(releases), (len(releases), *holders))

    async def _renew(self, slots: tuple[str, ...], holders: list[int]) -> None:
        """Make ``holders``' leases in ``slots`` end a lease's time from now."""
        for start in range(0, len(holders), RENEWED_AT_ONCE):
            members = map(self.member, holders[start : start + RENEWED_AT_ONCE])
            await self._script(RENEW, slots, (self.lease_ms, *members))

    def _dropped(self, count: int) -> None:
        logger = self._logger()
        if logger is not None:
            logger.warning("state_store_retries_dropped", steps=count)
