"""Deployment health for the ``balance`` plugin: eject what keeps failing, for a growing cooldown.

A deployment (``provider/model``) that fails ``failures`` times in a row with an error of one of
``on_kinds`` (by default upstream 5xx, overload, connection failures, timeouts and rejected
gateway credentials — not rate limits, which say "slow down", not "dead") is ejected: not routed
to for ``cooldown * k`` seconds, capped at ``max_cooldown``, where k counts its ejections within
``memory`` seconds of the previous one (30 s, 60 s, 90 s … 300 s by default, as Envoy's outlier
detection). Any answer from the deployment — a success or an error outside ``on_kinds``, such as
a 400 — resets its count. When the cooldown ends the deployment is routable again and needs
``failures`` new consecutive failures to be ejected again.

Ejection never takes the last routable deployment out of a call's candidates: a failure that
would eject a deployment while every other candidate is already ejected is counted but ejects
nothing. A single-deployment alias (or a direct ``provider/model``) has no other candidate and
*does* cool down — a dead provider should stop costing retries (LiteLLM's known failure is that
it never does): while it is ejected, calls fail fast with 503 ``no_ready_deployment``, which the
fallback plugin acts on. The balancer routes to ejected deployments only when every one of
several candidates is ejected (panic mode: better a failing deployment than none).

State lives in a :class:`~proxy.store.Store` under ``crossway:health:`` keys, so that a shared
backend shares it across workers. ``failures: 0`` disables ejection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from proxy.canonical import Deployment
from proxy.errors import ErrorKind
from proxy.metrics import Metrics
from proxy.store import Store

_PREFIX = "crossway:health:"
_MAX_CACHED_GAUGES = 1024  # targets may be addressed directly (provider/<anything>)


class HealthConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring. Durations are seconds."""

    failures: Annotated[int, Meta(ge=0)] = 5
    cooldown: Annotated[float, Meta(gt=0)] = 30.0
    max_cooldown: Annotated[float, Meta(gt=0)] = 300.0
    memory: Annotated[float, Meta(gt=0)] = 600.0
    on_kinds: tuple[ErrorKind, ...] = (
        "upstream_server",
        "overloaded",
        "connection",
        "timeout",
        "auth",
    )


class Health:
    """Consecutive-failure counting and ejection of deployments, kept in ``store``.

    Every method may raise :class:`~proxy.store.StoreUnavailable`; the caller decides what to do
    without the store (the balancer then treats every deployment as healthy).
    """

    def __init__(self, config: HealthConfig, store: Store, metrics: Metrics, logger: Any) -> None:
        self.config = config
        self.kinds = frozenset(config.on_kinds)
        self._store = store
        self._metrics = metrics
        self._logger = logger
        self._gauges: dict[str, Any] = {}  # target -> its deployment_healthy child

    @property
    def enabled(self) -> bool:
        """Whether ejection is on (``failures`` > 0)."""
        return self.config.failures > 0

    async def ejected_for(self, deployment: Deployment) -> float | None:
        """Seconds left of ``deployment``'s cooldown, or None when it is routable."""
        return await self._store.ttl(_PREFIX + "ejected:" + deployment.target)

    async def answered(self, deployment: Deployment) -> None:
        """``deployment`` answered (a success, or an error that is not its fault)."""
        await self._store.delete(_PREFIX + "fails:" + deployment.target)
        self._healthy_gauge(deployment).set(1)

    async def failed(self, deployment: Deployment, candidates: Sequence[Deployment]) -> None:
        """``deployment`` failed with one of ``on_kinds``; eject it at the threshold.

        ``candidates`` are the deployments the call could have used: the last routable one of
        several is never ejected.
        """
        config = self.config
        target = deployment.target
        store = self._store
        fails = await store.incr(_PREFIX + "fails:" + target, ttl=config.memory)
        if fails < config.failures:
            return
        others = [d for d in candidates if d.target != target]
        if others and not await self._any_routable(others):
            return
        ejections = int(await store.get(_PREFIX + "ejections:" + target) or 0) + 1
        await store.set(_PREFIX + "ejections:" + target, str(ejections).encode(), ttl=config.memory)
        cooldown = min(config.cooldown * ejections, config.max_cooldown)
        await store.set(_PREFIX + "ejected:" + target, b"1", ttl=cooldown)
        await store.delete(_PREFIX + "fails:" + target)
        self._metrics.deployment_ejections(*self._labels(deployment)).inc()
        self._healthy_gauge(deployment).set(0)
        self._logger.warning(
            "deployment_ejected",
            deployment=target,
            consecutive_failures=fails,
            cooldown_s=cooldown,
            ejections=ejections,
        )

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
