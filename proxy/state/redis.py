"""``RedisStore``: the :class:`~proxy.state.store.Store` shared by every worker and instance.

Every operation is one round trip: a plain command (``GET``, ``SET … PX``, ``UNLINK``,
``PTTL``) or one Lua script (:mod:`proxy.state.scripts`) for the multi-step ones — counters
whose TTL applies on creation, GCRA takes and corrections across several buckets, in-flight
holds and releases — which run atomically with the server's clock. Commands are pipelined on
one connection (:mod:`proxy.state.resp`): what concurrent requests send in one turn of the
event loop leaves in one write. A limits settlement is not sent on its own when an admission
follows soon: it rides in this process's next admission script (:mod:`proxy.state.settlements`),
so that a limited request costs one round trip for limits, not two.

With ``cluster: true`` the commands go to the node serving each key's slot
(:mod:`proxy.state.cluster`), and the keys under :data:`SAME_SLOT` (the limits', which the
multi-key scripts take together) share one hash tag, as do those under :data:`SPEND_SLOT` (the
budgets' spend counters, which :meth:`RedisStore.incr_within` takes together); a multi-key
operation on keys of different slots raises :class:`ValueError` (Redis's ``CROSSSLOT``).

Keys are namespaced: a key that does not start with ``crossway:`` gets that prefix. Every key
has a TTL, so that nothing grows without bound: a write that gives none (a lifetime budget
counter) sets ``max_idle``, renewed by every later write, so such a key outlives its last write
by that much. :meth:`ttl` therefore reports that idle expiry where
:class:`~proxy.state.memory_store.MemoryStore` would say None.

Leases: an in-flight slot is a count key (its live leases, as text: what ``GET`` reads) and a
sorted set beside it (:func:`~proxy.state.scripts.lease_key`) of holders, each scored with when
its lease ends. An admission's holder is this store's instance id and an operation number; its
lease lasts :data:`LEASE_TTL` and is renewed every :data:`RENEW_EVERY` while its admission is
not settled (:class:`~proxy.state.settlements.HeldLeases`), taken again if a failover lost it.
The scripts that count a slot drop the leases that ended. So a lease outlives the request
that held it only by a missed release: a process that died, a release that could not be sent
(retried, :class:`~proxy.state.settlements.Retries`, until it lands or the lease has ended) —
at most :data:`LEASE_TTL` after the last renewal. An anonymous :meth:`hold` lasts
:data:`HOLD_IDLE`, unrenewed.

Operations given up on: an operation's answer that does not come within ``timeout_ms`` (or
whose caller is cancelled) may still be applied — a stalled server runs what it had received
when it resumes. Each :meth:`hold`, :meth:`admit` (of a plan with slots) and
:meth:`incr_within` therefore has two bits in an ops bitmap of this store instance
(:func:`~proxy.state.scripts.ops_key`; :data:`OPS_PER_KEY` operations a key, expiring
:data:`OPS_TTL` after its last write): set when the add was applied, set when the operation was
voided. One that raises :class:`~proxy.state.store.StoreUnavailable` or is cancelled is voided
(retried for :data:`KEEP_VOIDS`): its leases released, its add taken back if it was applied,
and if it runs later it does nothing. The bitmaps cost about six bits per limited and budgeted
request, kept an hour: some 3 MB at a thousand such requests a second.
(:class:`~proxy.state.settlements.Operations` keeps the numbers, the leases and the retries.)

Failures: every command is bounded by ``timeout_ms``. A refused or lost connection, a
timeout, a server that cannot serve (loading, read-only…) or a reply that means "not now" (a
Redis Cluster's redirect or ``TRYAGAIN`` left over once :mod:`proxy.state.cluster` has followed
and retried within its bounds, ``CLUSTERDOWN``) raises
:class:`~proxy.state.store.StoreUnavailable`, so that the use's failure policy applies; after
``breaker.failures`` failures of a server in a row its circuit breaker
(:mod:`proxy.state.breaker`) opens and the operations it serves raise at once, while a probe
(loading the scripts on it) every ``breaker.cooldown_ms`` reconnects and closes it once it
answers. A single Redis has one breaker; a Redis Cluster one per node, so that a dead node makes
only the keys of its slots unavailable. The store never fails to start: with Redis down it
starts with the breakers open. ``on_up(node, up)`` reports each change of each server
(``host:port``) serving the store: the ``crossway_state_up{node}`` gauge. A value of the wrong
kind (a counter that is not an integer) raises :class:`ValueError`, as the memory store does.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

from proxy.state.breaker import Call, Standalone
from proxy.state.cluster import ClusterConnection
from proxy.state.config import RedisAddress, RedisConfig
from proxy.state.resp import ReplyError, cannot_serve
from proxy.state.scripts import (
    ADMIT,
    ALL,
    HOLD,
    INCR,
    INCR_WITHIN,
    RATE_ADJUST,
    RATE_TAKE,
    SETTLE,
    Script,
)
from proxy.state.settlements import (
    Detached,
    Operations,
    PendingSettlements,
    Release,
    release_keys,
)
from proxy.state.store import (
    Admission,
    LimitPlan,
    RateBucket,
    RateState,
    StoreUnavailable,
    summarise,
)

PREFIX = "crossway:"
SAME_SLOT = "crossway:limits:"
"""On Redis Cluster, the keys under this prefix share one hash slot, as ``crossway:{limits}:…``:
the multi-key scripts take a key's, its team's and its deployment's buckets together."""
_TAGGED = "crossway:{limits}:"
SPEND_SLOT = "crossway:spend:"
"""On Redis Cluster, the budgets' spend counters share one hash slot, as ``crossway:{spend}:…``:
a request reserves on its key's, its team's and its end user's counters in one script."""
_SPEND_TAGGED = "crossway:{spend}:"
LEASE_TTL = 30.0
"""Seconds an admission's lease lasts unless renewed: how long a slot stays held after its
holder's process died or lost Redis for good — short, since requests in flight renew theirs."""
RENEW_EVERY = 10.0
"""Seconds between renewals: a third of :data:`LEASE_TTL`, so that a lease survives two missed
renewals (a failover takes a few seconds) and a renewal costs one script per limited principal
with requests in flight every ten seconds."""
HOLD_IDLE = 600.0  # seconds an anonymous hold (Store.hold) lasts
OPS_PER_KEY = 1 << 19  # operations an ops bitmap key holds (two bits each: 128 KiB)
OPS_TTL = 3600.0  # seconds an ops bitmap key outlives its last write
KEEP_VOIDS = 1800.0  # seconds a void is retried (well within OPS_TTL)


class RedisStore:
    """See the module docstring. Use from one event loop; call :meth:`start` in it first."""

    def __init__(
        self,
        config: RedisConfig,
        *,
        on_up: Callable[[str, bool], None] | None = None,
        logger: Any = None,
    ) -> None:
        self.addresses = [RedisAddress(url) for url in config.urls]
        """Where Redis is: the URL's server, or each seed of a Redis Cluster."""
        self.address = self.addresses[0]
        timeout = config.timeout_ms / 1000
        self._connection: Standalone | ClusterConnection = (
            ClusterConnection(self.addresses, timeout, config.breaker, _prepare, self._changed)
            if config.cluster
            else Standalone(self.address, timeout, config.breaker, _prepare, self._changed)
        )
        self._name = _cluster_key if config.cluster else _key
        self._idle_ms = config.max_idle * 1000
        self._hold_idle_ms = int(HOLD_IDLE * 1000)
        self._on_up = on_up
        self.logger = logger
        """Where connection changes are logged (may be replaced; None: not logged)."""
        self._closed = False
        self._pending = PendingSettlements(self.flush)
        self._later = Detached()
        self._book = Operations(
            self._script,
            cluster=config.cluster,
            lease_ttl=LEASE_TTL,
            renew_every=RENEW_EVERY,
            ops_ttl=OPS_TTL,
            ops_per_key=OPS_PER_KEY,
            keep_voids=KEEP_VOIDS,
            keep_releases=LEASE_TTL + timeout,
            logger=lambda: self.logger,
        )

    @property
    def up(self) -> bool:
        """Whether every operation is sent to Redis now: no breaker is open (and, on a Redis
        Cluster, the slot map is known)."""
        return self._connection.up

    async def start(self) -> None:
        """Connect and load the scripts once (bounded by the timeout, per server); a server that
        does not answer starts with its breaker open, probed. Never raises."""
        await self._connection.start()

    async def close(self) -> None:
        """Send what settlements are pending, stop probing and close the connection
        (idempotent)."""
        if not self._closed and self.up:
            with contextlib.suppress(StoreUnavailable, ValueError):
                await self.flush()
        await self._pending.drain()
        await self._later.drain()
        await self._book.close()
        self._closed = True
        await self._connection.close()

    async def get(self, key: str) -> bytes | None:
        """See :meth:`proxy.state.store.Store.get`."""
        reply = await self._call("GET", self._name(key))
        if type(reply) is ReplyError:
            raise ValueError(f"key {key!r} does not hold a value")
        value: bytes | None = reply  # GET answers a bulk string or nil
        return value

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """See :meth:`proxy.state.store.Store.set`."""
        reply = await self._call("SET", self._name(key), value, "PX", self._ms(ttl))
        if type(reply) is ReplyError:
            raise ValueError(f"SET {key!r}: {str(reply)[:200]}")

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        """See :meth:`proxy.state.store.Store.incr`."""
        created_ttl = 0 if ttl is None else self._ms(ttl)
        return int(
            await self._script(INCR, (self._name(key),), (amount, created_ttl, self._idle_ms))
        )

    async def delete(self, key: str) -> None:
        """See :meth:`proxy.state.store.Store.delete`."""
        reply = await self._call("UNLINK", self._name(key))
        if type(reply) is ReplyError:
            raise ValueError(f"UNLINK {key!r}: {str(reply)[:200]}")

    async def ttl(self, key: str) -> float | None:
        """See :meth:`proxy.state.store.Store.ttl` (and the module docstring on idle expiry)."""
        reply = await self._call("PTTL", self._name(key))
        if type(reply) is ReplyError:
            raise ValueError(f"PTTL {key!r}: {str(reply)[:200]}")
        return None if reply < 0 else reply / 1000

    async def rate_take(self, buckets: Sequence[RateBucket]) -> list[RateState]:
        """See :meth:`proxy.state.store.Store.rate_take`."""
        await self.flush()  # pending settlements first: the same order as settled
        reply = await self._script(
            RATE_TAKE, [self._name(b.key) for b in buckets], _bucket_args(buckets)
        )
        return _states(reply, 0)

    async def rate_adjust(self, buckets: Sequence[RateBucket]) -> None:
        """See :meth:`proxy.state.store.Store.rate_adjust`."""
        await self.flush()  # pending settlements first: the same order as settled
        if buckets:
            await self._script(
                RATE_ADJUST, [self._name(b.key) for b in buckets], _bucket_args(buckets)
            )

    async def hold(self, keys: Sequence[str], limits: Sequence[int]) -> int | None:
        """See :meth:`proxy.state.store.Store.hold`: an anonymous lease of :data:`HOLD_IDLE`,
        voided if the call fails (module docstring)."""
        await self.flush()  # pending settlements first: the same order as settled
        if len(keys) != len(limits):
            raise ValueError("hold needs one limit per key")
        if not keys:
            return None
        book = self._book
        slots = book.slot_keys([self._name(k) for k in keys])
        holder, ops, bit = book.operation(slots[0])
        member = book.member(holder)
        try:
            reply = await self._script(
                HOLD, [*slots, ops], (*limits, self._hold_idle_ms, member, bit)
            )
        except (StoreUnavailable, asyncio.CancelledError):
            book.give_up(ops, bit, member, slots, 0)
            raise
        if reply == -2:
            raise StoreUnavailable("the hold was given up on")
        return None if reply < 0 else int(reply)

    async def release(self, keys: Sequence[str]) -> None:
        """See :meth:`proxy.state.store.Store.release`."""
        await self.flush()  # pending settlements first: the same order as settled
        if keys:
            slots = self._book.slot_keys([self._name(k) for k in keys])
            await self._script(SETTLE, slots, (len(keys), *[""] * len(keys)))

    async def admit(self, plan: LimitPlan, tokens: int) -> Admission:
        """See :meth:`proxy.state.store.Store.admit`. The settlements pending here
        (:mod:`proxy.state.settlements`) go in the same script, applied first. Its holder's
        leases are renewed until it is settled; if the call fails or is cancelled, they are
        voided and the riding releases retried (module docstring)."""
        buckets = plan.buckets(tokens)
        releases, adjusts = self._pending.take()
        name, book = self._name, self._book
        slots = book.slot_keys([name(k) for k in plan.slots])
        keys = [*release_keys(releases), *(name(b.key) for b in adjusts), *slots]
        holder = bit = 0
        member = ops = ""
        if slots:
            holder, ops, bit = book.operation(slots[0])
            member = book.member(holder)
            keys.append(ops)
        keys += (name(b.key) for b in buckets)
        args = (len(releases), len(adjusts), len(plan.slots), book.lease_ms, member, bit)
        try:
            reply = await self._script(
                ADMIT,
                keys,
                (
                    *args,
                    *(release.holder for release in releases),
                    *_bucket_args(adjusts),
                    *plan.slot_limits,
                    *_bucket_args(buckets),
                ),
            )
        except (StoreUnavailable, asyncio.CancelledError):
            book.retry_releases(releases)
            if holder:
                book.give_up(ops, bit, member, slots, 0)
            raise
        if reply[0] == -2:
            raise StoreUnavailable("the admission was given up on")
        if reply[0] >= 0:
            return Admission(full=int(reply[0]))
        admission = summarise(plan, tokens, _states(reply, 1), holder)
        if admission.holder:
            book.held.add(holder, tuple(slots))
        return admission

    def settle(self, admission: Admission, used: int) -> None:
        """See :meth:`proxy.state.store.Store.settle`: kept to ride on this process's next
        admission, or sent on its own a few loop turns later (:mod:`proxy.state.settlements`).
        A release that cannot be sent is retried until it lands or the lease has ended; a
        correction that cannot be sent is dropped."""
        plan = admission.plan
        if plan is None:
            raise ValueError("only an admission that held and took is settled")
        reserved = admission.reserved
        corrections = plan.corrections(reserved, used) if used != reserved else []
        releases: list[Release] = []
        if plan.slots:
            book = self._book
            book.held.discard(admission.holder)
            member = book.member(admission.holder) if admission.holder else ""
            slots = book.slot_keys([self._name(k) for k in plan.slots])
            releases = [Release(slots[i], slots[i + 1], member) for i in range(0, len(slots), 2)]
        if releases or corrections:
            self._pending.add(releases, corrections)

    async def flush(self) -> None:
        """Send the pending settlements now, in one script (nothing when none is pending); if
        that fails, their releases are retried."""
        releases, adjusts = self._pending.take()
        if releases or adjusts:
            try:
                await self._script(
                    SETTLE,
                    [*release_keys(releases), *(self._name(b.key) for b in adjusts)],
                    (
                        len(releases),
                        *(release.holder for release in releases),
                        *_bucket_args(adjusts),
                    ),
                )
            except (StoreUnavailable, asyncio.CancelledError):
                self._book.retry_releases(releases)
                raise

    async def publish(self, channel: str, message: bytes) -> None:
        """Send ``message`` to the subscribers of ``channel`` (namespaced like keys)."""
        await self._call("PUBLISH", self._name(channel), message)

    async def _call(self, *args: Any) -> Any:
        """One command's reply (a :class:`ReplyError` for the command's own error). Raises
        :class:`StoreUnavailable` as the module docstring says, for a reply that means "not
        now" too."""
        reply = await self._connection.call(*args)
        if type(reply) is ReplyError and cannot_serve(reply):
            raise StoreUnavailable(f"Redis cannot serve now: {str(reply)[:80]}")
        return reply

    async def _script(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        reply = await self._call("EVALSHA", script.sha, len(keys), *keys, *args)
        if type(reply) is ReplyError:
            if str(reply).startswith("NOSCRIPT"):
                reply = await self._call("EVAL", script.source, len(keys), *keys, *args)
            if type(reply) is ReplyError:
                raise ValueError(f"{script.name}: {str(reply)[:200]}")
        return reply

    def _ms(self, ttl: float | None) -> int:
        if ttl is None:
            return self._idle_ms
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        return max(1, math.ceil(ttl * 1000))

    def _changed(self, node: str, up: bool) -> None:
        """A server serving the store answers again (``up``), or no more: logged, told."""
        logger = self.logger
        if logger is not None:
            if up:
                logger.info("state_store_reconnected", node=node)
            else:
                logger.warning("state_store_unavailable", node=node)
        if self._on_up is not None:
            self._on_up(node, up)

    async def incr_within(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
    ) -> tuple[int | None, list[int]]:
        """See :meth:`proxy.state.store.Store.incr_within` (one script, one round trip); voided
        if the call fails or is cancelled (module docstring)."""
        if len(keys) != len(ttls) or (limits is not None and len(limits) != len(keys)):
            raise ValueError("incr_within needs one ttl (and limit) per key")
        if not keys:
            return None, []
        names = [self._name(k) for k in keys]
        book = self._book
        _, ops, bit = book.operation(names[0])
        args: list[Any] = [amount, 0 if limits is None else 1, self._idle_ms, bit, book.ops_ms]
        for index, ttl in enumerate(ttls):
            args += (0 if limits is None else limits[index], 0 if ttl is None else self._ms(ttl))
        try:
            reply = await self._script(INCR_WITHIN, [*names, ops], args)
        except (StoreUnavailable, asyncio.CancelledError):
            book.give_up(ops, bit, "", names, amount)
            raise
        if reply[0] == -2:
            raise StoreUnavailable("the add was given up on")
        return None if reply[0] < 0 else int(reply[0]), [int(value) for value in reply[1:]]

    def incr_later(self, keys: Sequence[str], amount: int, ttls: Sequence[float | None]) -> None:
        """See :meth:`proxy.state.store.Store.incr_later`: one :meth:`incr_within` without limits,
        started now and not waited for (the RESP connection sends it with the loop turn's other
        commands)."""
        self._later.start(self.incr_within(keys, amount, None, ttls))


async def _prepare(call: Call) -> None:
    """Load every script on the server ``call`` reaches (so that ``EVALSHA`` finds them): its
    start and its probe. Raises :class:`StoreUnavailable` when it cannot."""
    for reply in await asyncio.gather(*(call("SCRIPT", "LOAD", s.source) for s in ALL)):
        if type(reply) is ReplyError:
            raise StoreUnavailable(f"Redis refused a script: {str(reply)[:80]}")


def _key(key: str) -> str:
    return key if key.startswith(PREFIX) else PREFIX + key


def _states(reply: list[int], start: int) -> list[RateState]:
    return [
        RateState(bool(reply[i]), reply[i + 1], reply[i + 2] / 1e6, reply[i + 3] / 1e6)
        for i in range(start, len(reply), 4)
    ]


def _cluster_key(key: str) -> str:
    """:func:`_key`, and on Redis Cluster the keys of :data:`SAME_SLOT` in one hash slot,
    those of :data:`SPEND_SLOT` in another."""
    key = _key(key)
    if key.startswith(SAME_SLOT):
        return _TAGGED + key[len(SAME_SLOT) :]
    if key.startswith(SPEND_SLOT):
        return _SPEND_TAGGED + key[len(SPEND_SLOT) :]
    return key


def _bucket_args(buckets: Sequence[RateBucket]) -> list[Any]:
    args: list[Any] = []
    for bucket in buckets:
        args += (bucket.cost, bucket.limit, bucket.period * 1000)
    return args
