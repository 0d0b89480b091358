"""What each use of shared state does when the shared store cannot answer.

:class:`SharedState` is the process's state: the shared :class:`~proxy.state.store.Store` (a
:class:`~proxy.state.redis.RedisStore` with ``state.backend: redis``, else one
:class:`~proxy.state.memory_store.MemoryStore`), built once and kept across config reloads, and one
view of it per use (:meth:`SharedState.store_for`). Each use declares its policy in
``state.on_unavailable`` (:mod:`proxy.state.config`):

- ``local``: the view answers from a :class:`~proxy.state.memory_store.MemoryStore` of this process
while
  the shared store is unavailable (rate limits count per process, health ejects per process);
  once the shared store answers again, the shared counters are used again (what was counted
  locally meanwhile is not carried over).
- ``open``: the view raises :class:`~proxy.state.store.StoreUnavailable` and the caller goes on
  without the state (admits the request uncounted; the cache misses).
- ``closed``: the view raises and the caller refuses the request: 503 ``state_unavailable``
  (:class:`StateUnavailable`).

Every degraded decision is counted in ``crossway_state_degraded_total{use,decision}`` —
``decision`` is ``local`` (answered from this process's memory; counted by the view, once per
operation), ``open`` (went on without the state), ``closed`` (refused) or ``miss`` (the
cache) — which the callers count through :meth:`SharedState.degraded`.
``crossway_state_up{node}`` is 1 while a Redis server serving the store (``host:port``; each
node of a Redis Cluster's slot map) answers, 0 while its circuit breaker is open; a node that
leaves the map reads 1 from then on (it serves nothing). The memory backend reports one
series, ``node="memory"``, always 1.

With the memory backend nothing is ever unavailable: every view is the memory store itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import msgspec

from proxy.core.errors import GatewayError
from proxy.core.metrics import Metrics
from proxy.state.config import USES, StateConfig, Use
from proxy.state.memory_store import MemoryStore
from proxy.state.redis import RedisStore
from proxy.state.settlements import Detached
from proxy.state.store import Admission, LimitPlan, RateBucket, RateState, Store, StoreUnavailable

Decision = Literal["local", "open", "closed", "miss"]
MEMORY_NODE = "memory"
"""The ``node`` label of ``crossway_state_up`` with the memory backend."""
T = TypeVar("T")


class StateUnavailable(GatewayError):
    """Shared state a request needs cannot be read, and its use's policy is ``closed`` (503)."""

    status = 503
    type = "api_error"
    default_code = "state_unavailable"
    kind = "internal"


class SharedState:
    """The process's shared state and its per-use views (module docstring)."""

    def __init__(
        self,
        config: StateConfig,
        metrics: Metrics,
        logger: Any = None,
        *,
        store: Store | None = None,
    ) -> None:
        """``store`` replaces the memory backend's store (tests inject one); it is used by
        every use as it is."""
        self.config = config
        self._metrics = metrics
        self.redis: RedisStore | None = None
        if config.backend == "redis":
            self.redis = RedisStore(config.redis, on_up=self._set_up, logger=logger)
            self.store: Store = self.redis
        else:
            self.store = MemoryStore() if store is None else store
            self._set_up(MEMORY_NODE, True)
        self._views: dict[str, Store] = {}
        for use in USES:
            policy = self.policy(use)
            if self.redis is None:
                self._views[use] = self.store
            else:
                local = MemoryStore() if policy == "local" else None
                self._views[use] = UseStore(self.redis, local, self._counter(use, "local"))
        self._kept: dict[str, Any] = {}

    @property
    def shared(self) -> bool:
        """Whether the state is shared beyond this process (the Redis backend)."""
        return self.redis is not None

    def store_for(self, use: Use) -> Store:
        """The view of the store that ``use`` reads and writes (module docstring)."""
        return self._views[use]

    def policy(self, use: Use) -> str:
        """``use``'s policy: ``local``, ``open`` or ``closed``."""
        policy: str = getattr(self.config.on_unavailable, use)  # one Literal field per use
        return policy

    def degraded(self, use: Use, decision: Decision) -> None:
        """Count one decision ``use`` took without the shared store."""
        self._metrics.state_degraded(use, decision).inc()

    async def start(self) -> None:
        """Connect the shared store (never raises: a store that is down starts degraded)."""
        if self.redis is not None:
            await self.redis.start()

    async def close(self) -> None:
        """Let the corrections the views sent without waiting go out, then close the shared
        store's connections."""
        for view in self._views.values():
            if isinstance(view, UseStore):
                await view.drain()
        if self.redis is not None:
            await self.redis.close()

    def _set_up(self, node: str, up: bool) -> None:
        self._metrics.state_up(node).set(1 if up else 0)

    def _counter(self, use: str, decision: str) -> Callable[[], None]:
        count: Callable[[], None] = self._metrics.state_degraded(use, decision).inc
        return count

    def keep(self, name: str, make: Callable[[], T]) -> T:
        """The process-level object called ``name``: made by ``make()`` the first time it is
        asked for, then the same object for every later config of this process (reloads keep it,
        as they keep the store). Names are their users' own: prefix them with the plugin's."""
        kept = self._kept.get(name)
        if kept is None:
            kept = self._kept[name] = make()
        return kept


class UseStore:
    """One use's view of the shared store: every operation goes to ``shared``; when that
    raises :class:`StoreUnavailable`, it is answered by ``local`` (counted by ``on_local``),
    or, without a local store, raised to the caller."""

    __slots__ = ("_later", "_local", "_on_local", "_shared")

    def __init__(
        self, shared: Store, local: MemoryStore | None, on_local: Callable[[], None]
    ) -> None:
        self._shared = shared
        self._local = local
        self._on_local = on_local
        self._later = Detached()

    def _fallback(self, error: StoreUnavailable) -> MemoryStore:
        if self._local is None:
            raise error
        self._on_local()
        return self._local

    async def get(self, key: str) -> bytes | None:
        """See :meth:`proxy.state.store.Store.get`."""
        try:
            return await self._shared.get(key)
        except StoreUnavailable as error:
            return await self._fallback(error).get(key)

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """See :meth:`proxy.state.store.Store.set`."""
        try:
            await self._shared.set(key, value, ttl=ttl)
        except StoreUnavailable as error:
            await self._fallback(error).set(key, value, ttl=ttl)

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        """See :meth:`proxy.state.store.Store.incr`."""
        try:
            return await self._shared.incr(key, amount, ttl=ttl)
        except StoreUnavailable as error:
            return await self._fallback(error).incr(key, amount, ttl=ttl)

    async def delete(self, key: str) -> None:
        """See :meth:`proxy.state.store.Store.delete`."""
        try:
            await self._shared.delete(key)
        except StoreUnavailable as error:
            await self._fallback(error).delete(key)

    async def ttl(self, key: str) -> float | None:
        """See :meth:`proxy.state.store.Store.ttl`."""
        try:
            return await self._shared.ttl(key)
        except StoreUnavailable as error:
            return await self._fallback(error).ttl(key)

    async def rate_take(self, buckets: Sequence[RateBucket]) -> list[RateState]:
        """See :meth:`proxy.state.store.Store.rate_take`."""
        try:
            return await self._shared.rate_take(buckets)
        except StoreUnavailable as error:
            return await self._fallback(error).rate_take(buckets)

    async def rate_adjust(self, buckets: Sequence[RateBucket]) -> None:
        """See :meth:`proxy.state.store.Store.rate_adjust`."""
        try:
            await self._shared.rate_adjust(buckets)
        except StoreUnavailable as error:
            await self._fallback(error).rate_adjust(buckets)

    async def hold(self, keys: Sequence[str], limits: Sequence[int]) -> int | None:
        """See :meth:`proxy.state.store.Store.hold`."""
        try:
            return await self._shared.hold(keys, limits)
        except StoreUnavailable as error:
            return await self._fallback(error).hold(keys, limits)

    async def release(self, keys: Sequence[str]) -> None:
        """See :meth:`proxy.state.store.Store.release`."""
        try:
            await self._shared.release(keys)
        except StoreUnavailable as error:
            await self._fallback(error).release(keys)

    async def admit(self, plan: LimitPlan, tokens: int) -> Admission:
        """See :meth:`proxy.state.store.Store.admit`. An admission answered by the local store is
        marked ``local``, so that it is settled there."""
        try:
            return await self._shared.admit(plan, tokens)
        except StoreUnavailable as error:
            admission = await self._fallback(error).admit(plan, tokens)
            return msgspec.structs.replace(admission, local=True)

    def settle(self, admission: Admission, used: int) -> None:
        """See :meth:`proxy.state.store.Store.settle`: where the admission was answered."""
        if admission.local and self._local is not None:
            self._local.settle(admission, used)
        else:
            self._shared.settle(admission, used)

    async def incr_within(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
    ) -> tuple[int | None, list[int]]:
        """See :meth:`proxy.state.store.Store.incr_within`."""
        try:
            return await self._shared.incr_within(keys, amount, limits, ttls)
        except StoreUnavailable as error:
            return await self._fallback(error).incr_within(keys, amount, limits, ttls)

    def incr_later(self, keys: Sequence[str], amount: int, ttls: Sequence[float | None]) -> None:
        """See :meth:`proxy.state.store.Store.incr_later`: :meth:`incr_within` (which falls back as
        the other operations do), started now and not waited for."""
        self._later.start(self.incr_within(keys, amount, None, ttls))

    async def drain(self) -> None:
        """Wait for the corrections :meth:`incr_later` started (the state's close)."""
        await self._later.drain()
