"""Deployment health for the ``balance`` plugin: eject what keeps failing, for a growing cooldown.

A deployment (``provider/model``) is ejected — not routed to for ``cooldown * k`` seconds, capped
at ``max_cooldown``, where k counts its ejections within ``memory`` seconds of the previous one
(30 s, 60 s, 90 s … 300 s by default) — when it fails with an error of one of ``on_kinds`` (by
default upstream 5xx, overload, connection failures, timeouts and rejected gateway credentials —
not rate limits, which say "slow down", not "dead") and either trigger fires:

- ``failures`` consecutive failures (Envoy's ``consecutive_5xx``). Any answer from the
  deployment — a success or an error outside ``on_kinds``, such as a 400 — resets the count.
- with ``failure_ratio`` > 0, that share of failures among at least ``ratio_min_requests``
  outcomes in the current ``ratio_window``-second window (Envoy's failure-percentage detection,
  Helicone's 5xx rate): a deployment that fails every other request never fails five times in
  a row, yet serves nobody well. Off by default, so that a healthy deployment's success path
  costs no store write.

The outlier-detection rules of Envoy decide which failures count. A failure of a request that
*started* before the deployment's latest ejection says nothing new — the burst of requests that
were in flight when it was ejected fails together — and a failure while the deployment is
ejected (panic routing) is no new evidence either: neither counts, so one burst ejects once and
escalation (a longer cooldown) happens only when the deployment fails again after its cooldown.
Exactly one failure ejects, even when concurrent failures race through a shared store: the
first to claim the ejection that follows the latest one it saw.

Ejection never takes the last routable deployment out of a call's candidates: a failure that
would eject a deployment while every other candidate is already ejected is counted but ejects
nothing. A single-deployment alias (or a direct ``provider/model``) has no other candidate and
*does* cool down — a dead provider should stop costing retries (LiteLLM's known failure is that
it never does): while it is ejected, calls fail fast with 503 ``no_ready_deployment``, which the
fallback plugin acts on. The balancer routes to ejected deployments only when every one of
several candidates is ejected (panic mode: better a failing deployment than none).

State lives in a :class:`~proxy.state.store.Store` under ``crossway:health:`` keys, so that a shared
backend shares it across workers and instances; times are the injected clock's (wall time by
default, so that workers agree). ``failures: 0`` disables ejection.

So that a healthy deployment costs no store round trip per request, each process remembers what
it read for ``refresh`` seconds (1 s by default): whether a deployment is ejected is read from
the store at most once a ``refresh`` per deployment (an ejection made by this process is known
at once, one made by another process within ``refresh``), and an answer resets the shared
failure count only when this process counted a failure since its last reset, or once a
``refresh`` otherwise (so a failure streak spread over processes is reset within ``refresh`` of
another process's success).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from proxy.core.canonical import Deployment
from proxy.core.errors import ErrorKind
from proxy.core.metrics import Metrics
from proxy.state.store import Store

_PREFIX = "crossway:health:"
_MAX_CACHED_GAUGES = 1024  # targets may be addressed directly (provider/<anything>)


async def cooldown_left(store: Store, deployment: Deployment) -> float | None:
    """Seconds left of ``deployment``'s cooldown in ``store`` (the health view of the shared
    state), or None when it is not ejected; raises :class:`~proxy.state.store.StoreUnavailable`."""
    return await store.ttl(_PREFIX + "ejected:" + deployment.target)


class HealthConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring. Durations are seconds."""

    failures: Annotated[int, Meta(ge=0)] = 5
    refresh: Annotated[float, Meta(ge=0)] = 1.0
    cooldown: Annotated[float, Meta(gt=0)] = 30.0
    max_cooldown: Annotated[float, Meta(gt=0)] = 300.0
    memory: Annotated[float, Meta(gt=0)] = 600.0
    failure_ratio: Annotated[float, Meta(ge=0, le=1)] = 0.0
    ratio_window: Annotated[float, Meta(gt=0)] = 30.0
    ratio_min_requests: Annotated[int, Meta(ge=1)] = 20
    on_kinds: tuple[ErrorKind, ...] = (
        "upstream_server",
        "overloaded",
        "connection",
        "timeout",
        "auth",
    )


class Health:
    """Failure counting and ejection of deployments, kept in ``store``, timed by ``clock``.

    Every method may raise :class:`~proxy.state.store.StoreUnavailable`; the caller decides what to
    do without the store (the balancer then treats every deployment as healthy).
    """

    def __init__(
        self,
        config: HealthConfig,
        store: Store,
        metrics: Metrics,
        logger: Any,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.kinds = frozenset(config.on_kinds)
        self.clock = clock
        """The time a request to a deployment starts, for :meth:`failed`."""
        self._store = store
        self._metrics = metrics
        self._logger = logger
        self._ratio = config.failure_ratio > 0
        self._gauges: dict[str, Any] = {}  # target -> its deployment_healthy child
        self._refresh = config.refresh
        self._ejected: dict[str, tuple[float, float | None]] = {}  # target -> (read at, until)
        self._reset: dict[str, float | None] = {}  # target -> last reset; None: a failure since

    @property
    def enabled(self) -> bool:
        """Whether ejection is on (``failures`` > 0)."""
        return self.config.failures > 0

    async def ejected_for(self, deployment: Deployment) -> float | None:
        """Seconds left of ``deployment``'s cooldown, or None when it is routable (read from the
        store at most once a ``refresh``; see the module docstring)."""
        target = deployment.target
        now = self.clock()
        ejected = self._ejected
        known = ejected.get(target)
        if known is None or now - known[0] >= self._refresh:
            if len(ejected) >= _MAX_CACHED_GAUGES:
                ejected.clear()
            # Marked read before the read: calls meanwhile use what was known (one read, not
            # one per request in flight).
            ejected[target] = (now, None if known is None else known[1])
            left = await cooldown_left(self._store, deployment)
            known = ejected[target] = (now, None if left is None else now + left)
        until = known[1]
        return None if until is None or until <= now else until - now

    async def answered(self, deployment: Deployment) -> None:
        """``deployment`` answered (a success, or an error that is not its fault)."""
        target = deployment.target
        now = self.clock()
        reset = self._reset.get(target, 0.0)
        if reset is None or now - reset >= self._refresh:
            if len(self._reset) >= _MAX_CACHED_GAUGES:
                self._reset.clear()
            self._reset[target] = now  # before the write: one reset, not one per request
            await self._store.delete(_PREFIX + "fails:" + target)
        if self._ratio:
            await self._count_outcome(target, failed=False)
        self._healthy_gauge(deployment).set(1)

    async def failed(
        self, deployment: Deployment, candidates: Sequence[Deployment], *, started: float
    ) -> None:
        """``deployment`` failed with one of ``on_kinds`` for a request sent at ``started``
        (:attr:`clock` time); eject it when a trigger fires (see the module docstring).

        ``candidates`` are the deployments the call could have used: the last routable one of
        several is never ejected.
        """
        config = self.config
        target = deployment.target
        store = self._store
        if await self.ejected_for(deployment) is not None:
            return  # no new evidence while ejected
        last_ejection = await store.get(_PREFIX + "ejected_at:" + target)
        if last_ejection is not None and started <= float(last_ejection):
            return  # in flight when it was ejected: part of the burst that ejected it
        self._reset[target] = None  # the next answer resets the count
        fails = await store.incr(_PREFIX + "fails:" + target, ttl=config.memory)
        tripped = fails >= config.failures
        if self._ratio:
            tripped = await self._count_outcome(target, failed=True) or tripped
        if not tripped:
            return
        others = [d for d in candidates if d.target != target]
        if others and not await self._any_routable(others):
            return
        # One failure per ejection ejects, however many race here: the first to claim the
        # ejection that follows the one this request saw.
        claim = _PREFIX + "claim:" + target + ":" + (last_ejection or b"0").decode()
        if await store.incr(claim, ttl=config.memory) == 1:
            await self._eject(deployment, fails)

    async def _eject(self, deployment: Deployment, fails: int) -> None:
        config = self.config
        target = deployment.target
        store = self._store
        ejections = await store.incr(_PREFIX + "ejections:" + target, ttl=config.memory)
        cooldown = min(config.cooldown * ejections, config.max_cooldown)
        await store.set(_PREFIX + "ejected:" + target, b"1", ttl=cooldown)
        now = self.clock()
        self._ejected[target] = (now, now + cooldown)
        await store.set(
            _PREFIX + "ejected_at:" + target, repr(self.clock()).encode(), ttl=config.memory
        )
        await store.delete(_PREFIX + "fails:" + target)
        if self._ratio:  # the evidence that ejected it is spent
            key = self._window_key(target)
            await store.delete(key + "all")
            await store.delete(key + "failed")
        self._metrics.deployment_ejections(*self._labels(deployment)).inc()
        self._healthy_gauge(deployment).set(0)
        self._logger.warning(
            "deployment_ejected",
            deployment=target,
            consecutive_failures=fails,
            cooldown_s=cooldown,
            ejections=ejections,
        )

    async def _count_outcome(self, target: str, *, failed: bool) -> bool:
        """Count one outcome in the current ratio window; whether its failure share has
        reached ``failure_ratio`` over at least ``ratio_min_requests`` outcomes."""
        config = self.config
        key = self._window_key(target)
        ttl = 2 * config.ratio_window
        total = await self._store.incr(key + "all", ttl=ttl)
        if not failed:
            return False
        bad = await self._store.incr(key + "failed", ttl=ttl)
        return total >= config.ratio_min_requests and bad >= config.failure_ratio * total

    def _window_key(self, target: str) -> str:
        window = int(self.clock() // self.config.ratio_window)
        return f"{_PREFIX}window:{target}:{window}:"

    async def _any_routable(self, deployments: Sequence[Deployment]) -> bool:
        for deployment in deployments:
            if await self.ejected_for(deployment) is None:
                return True
        return False

    def _healthy_gauge(self, deployment: Deployment) -> Any:
        """``deployment``'s child of ``deployment_healthy`` (cached: set on every answer)."""
        gauge = self._gauges.get(deployment.target)
        if gauge is None:
            gauge = self._metrics.deployment_healthy(*self._labels(deployment))
            if len(self._gauges) < _MAX_CACHED_GAUGES:
                self._gauges[deployment.target] = gauge
        return gauge

    def _labels(self, deployment: Deployment) -> tuple[str, str]:
        return deployment.provider, self._metrics.model_label(deployment.model)
