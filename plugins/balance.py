"""``balance``: choose the deployment that serves each attempt, and keep score of deployments.

Candidates are the call's deployments (the alias's ready ones, as resolved by the router) or,
when a client sent load-balancer targets (orq's ``load_balancer.models``) and
``request_targets`` allows it, the deployments of those models (at most
``max_request_targets``; none the caller's key may not use), each model's share following its
weight. Among the candidates that
are not ejected (see :mod:`proxy.upstream.health`) and not at their ``limits``, ``strategy`` picks:

- ``weighted`` (default): weighted random (``weight`` of each deployment).
- ``least-busy``: the fewest calls in flight from this process (ties: weighted random).
- ``latency``: power of two choices — two distinct candidates drawn at random, the cheaper
  one wins — over a peak-sensitive EWMA of time to first token (the whole answer when not
  streamed): cost = estimate * (in flight + 1) / weight. A sample above the estimate replaces
  it at once; lower samples blend in with weight ``1 - exp(-Δt / decay)``, and an estimate that
  receives no samples decays towards zero, so an idle deployment is tried again eventually.
  Failures (errors of the health kinds, and 429s) count as samples of at least
  ``failure_penalty`` seconds so that fast failures do not attract traffic. A deployment never
  measured costs ``default_rtt``.
- ``cost``: the cheapest candidate for the request's expected token mix — its estimated prompt
  and its ``max_tokens`` (``expected_output_tokens`` when it sets none) — at the config's prices
  (:mod:`proxy.governance.pricing`); equal prices go to the lower latency estimate (as ``latency``
  rates them), then by weight at random. A candidate without a price is chosen only when none has
  one.

``limits`` maps ``provider/model`` to ``rpm`` (requests) and ``tpm`` (tokens, counted from
replies' usage) per fixed minute window: a deployment at its limit is skipped until the window
ends; when every candidate is, the call fails with 429 (``Retry-After`` = the window's end),
which the fallback plugin acts on. The check precedes the count, so with a shared store
concurrent instances may overshoot a limit by their concurrency.

A call that already names a deployment (``call.deployment``, set by an earlier plugin) is sent
there. The chosen deployment is set on a copy of the call (the upstream honours it), so a retry
outside this plugin chooses again. Health and limit counters live in the store (shared by a
shared backend: ``state.backend: redis`` shares them between workers and instances); in-flight
counts and latency estimates are per process. When the shared store is unavailable, health
follows ``state.on_unavailable.health`` and deployment limits ``…limits``
(:mod:`proxy.state.policy`): ``local`` keeps them in this process meanwhile; otherwise the
balancer routes as if every deployment were healthy and under its limits. Either way
``crossway_state_degraded_total{use="health"}`` counts the decisions.
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from proxy.core.canonical import Call, Deployment, Usage
from proxy.core.errors import GatewayError, NoReadyDeployment, RateLimited, UpstreamError
from proxy.core.observed import observe
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.core.streams import is_closable
from proxy.core.token_estimate import expected_tokens
from proxy.governance.pricing import expected_nanos
from proxy.runtime.plugins import PluginContext
from proxy.state.store import Store, StoreUnavailable
from proxy.upstream.health import Health, HealthConfig

Clock = Callable[[], float]
Strategy = Literal["weighted", "least-busy", "latency", "cost"]

_WINDOW = 60.0
_LIMIT_PREFIX = "crossway:limits:"
_MAX_TRACKED = 4096


class LatencyConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The ``latency`` strategy's estimator (seconds); see the module docstring."""

    default_rtt: Annotated[float, Meta(ge=0)] = 0.1
    decay: Annotated[float, Meta(gt=0)] = 10.0
    failure_penalty: Annotated[float, Meta(ge=0)] = 5.0


class Limits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Per-minute limits of one deployment; None is unlimited."""

    rpm: Annotated[int, Meta(ge=1)] | None = None
    tpm: Annotated[int, Meta(ge=1)] | None = None


class BalanceConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring."""

    strategy: Strategy = "weighted"
    health: HealthConfig = HealthConfig()
    latency: LatencyConfig = LatencyConfig()
    limits: dict[str, Limits] = msgspec.field(default_factory=dict)
    request_targets: bool = True
    max_request_targets: Annotated[int, Meta(ge=1, le=50)] = 10
    expected_output_tokens: Annotated[int, Meta(ge=0)] = 256


class _Stats:
    """One deployment's in-process load and latency estimate."""

    __slots__ = ("estimate", "in_flight", "stamp")

    def __init__(self) -> None:
        self.in_flight = 0
        self.estimate = 0.0
        self.stamp: float | None = None


class BalancePlugin:
    """Picks a deployment per attempt and tracks its health; see the module docstring.

    ``store`` (default: the process's shared state, :attr:`PluginContext.state`), ``clock``
    (seconds; wall time by default so that limit windows agree between instances) and ``rng``
    are injectable.
    """

    Options = BalanceConfig

    def __init__(
        self,
        options: BalanceConfig,
        context: PluginContext,
        *,
        store: Store | None = None,
        clock: Clock = time.time,
        rng: random.Random | None = None,
    ) -> None:
        for target in options.limits:
            if "/" not in target.strip("/"):
                raise ValueError(f"limits: {target!r} is not 'provider/model'")
        self._options = options
        self._strategy = options.strategy
        self._latency = options.latency
        self._limits = options.limits
        self._resolve = context.resolve
        self._prices = context.prices
        self._metrics = context.metrics
        self._clock = clock
        self._rng = rng or random.Random()
        self._state = context.state
        self._store: Store = store if store is not None else context.state.store_for("limits")
        self._health = Health(
            options.health,
            store if store is not None else context.state.store_for("health"),
            context.metrics,
            context.logger,
            clock=clock,
        )
        self._penalised = self._health.kinds | {"rate_limited"}
        self._track = options.strategy != "weighted"
        self._measures = options.strategy in ("latency", "cost")  # latency estimates
        self._stats: dict[str, _Stats] = {}

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Send ``call`` to the chosen deployment.

        Raises :class:`NoReadyDeployment` (503) when the only candidate is ejected and
        :class:`RateLimited` (429) when every candidate is at its limits; neither made an
        upstream call (``attempts`` is 0). Otherwise raises what the next link raises.
        """
        if call.deployment is not None:
            return await self._send(call, call.deployment, (call.deployment,), next)
        candidates = self._candidates(call)
        if not candidates:
            return await next(call)
        chosen = await self._choose(call, candidates)
        sent = msgspec.structs.replace(call, deployment=chosen)
        return await self._send(sent, chosen, candidates, next)

    def _candidates(self, call: Call) -> Sequence[Deployment]:
        targets = call.options.load_balancer
        if not targets or not self._options.request_targets:
            return call.deployments
        merged: dict[str, Deployment] = {}
        allows = call.principal.allows
        for target in targets[: self._options.max_request_targets]:
            if not allows(target.model):
                continue
            try:
                deployments = self._resolve(target.model)
            except GatewayError:
                continue
            total = sum(d.weight for d in deployments)
            for d in deployments:
                weight = target.weight * d.weight / total
                known = merged.get(d.target)
                if known is not None:
                    weight += known.weight
                merged[d.target] = Deployment(provider=d.provider, model=d.model, weight=weight)
        return list(merged.values()) or call.deployments

    async def _choose(self, call: Call, candidates: Sequence[Deployment]) -> Deployment:
        model = call.model
        available: list[Deployment] = []
        ejected: list[tuple[float, Deployment]] = []
        limited: list[float] = []
        now = self._clock()
        health = self._health if self._health.enabled else None
        limits = self._limits
        try:
            for deployment in candidates:
                # Awaited only when configured: the common call checks health and nothing else.
                if health is not None:
                    cooldown = await health.ejected_for(deployment)
                    if cooldown is not None:
                        ejected.append((cooldown, deployment))
                        continue
                if deployment.target in limits:
                    wait = await self._limit_wait(deployment, now)
                    if wait is not None:
                        limited.append(wait)
                        continue
                available.append(deployment)
        except StoreUnavailable:
            self._state.degraded("health", "open")
            return self._pick(call, candidates, now)
        if not available:
            if limited:
                error: GatewayError = RateLimited(
                    f"every deployment of {model!r} is at its rate limit",
                    retry_after=max(min(limited), 1.0),
                )
            elif len(ejected) > 1:
                available = [d for _, d in ejected]  # panic mode: never route nowhere
            else:
                cooldown, deployment = ejected[0]
                error = NoReadyDeployment(
                    f"the deployment {deployment.target!r} is cooling down after failures",
                    retry_after=max(cooldown, 1.0),
                )
            if not available:
                error.attempts = 0
                raise error
        chosen = self._pick(call, available, now)
        if self._limits.get(chosen.target) is not None:
            await self._count(chosen.target, "rpm", 1, now)
        return chosen

    async def _limit_wait(self, deployment: Deployment, now: float) -> float | None:
        """Seconds until ``deployment`` is under its limits again; None when it is now."""
        limits = self._limits.get(deployment.target)
        if limits is None:
            return None
        window = int(now // _WINDOW)
        for kind, limit in (("rpm", limits.rpm), ("tpm", limits.tpm)):
            if limit is None:
                continue
            used = await self._store.get(f"{_LIMIT_PREFIX}{kind}:{deployment.target}:{window}")
            if used is not None and int(used) >= limit:
                return (window + 1) * _WINDOW - now
        return None

    async def _count(self, target: str, kind: str, amount: int, now: float) -> None:
        window = int(now // _WINDOW)
        key = f"{_LIMIT_PREFIX}{kind}:{target}:{window}"
        try:
            await self._store.incr(key, amount, ttl=(window + 1) * _WINDOW - now + 1.0)
        except StoreUnavailable:
            self._state.degraded("health", "open")

    def _pick(self, call: Call, candidates: Sequence[Deployment], now: float) -> Deployment:
        if len(candidates) == 1:
            return candidates[0]
        if self._strategy == "cost":
            return self._cheapest(call, candidates, now)
        if self._strategy == "latency":
            first, second = self._rng.sample(candidates, 2)
            cost_first, cost_second = self._cost(first, now), self._cost(second, now)
            if cost_first == cost_second:
                return self._rng.choice((first, second))
            return first if cost_first < cost_second else second
        if self._strategy == "least-busy":
            loads = [self._load(d) for d in candidates]
            least = min(loads)
            candidates = [d for d, load in zip(candidates, loads, strict=True) if load == least]
            if len(candidates) == 1:
                return candidates[0]
        return self._rng.choices(candidates, weights=[d.weight for d in candidates])[0]

    def _cheapest(self, call: Call, candidates: Sequence[Deployment], now: float) -> Deployment:
        """The cheapest candidate for ``call``'s expected tokens (see the module docstring)."""
        mix = expected_tokens(call, self._options.expected_output_tokens)
        ranked = []
        for deployment in candidates:
            price = expected_nanos(self._prices, deployment, mix)
            unpriced = price is None
            ranked.append(((unpriced, price or 0, self._cost(deployment, now)), deployment))
        best = min(rank for rank, _ in ranked)
        cheapest = [d for rank, d in ranked if rank == best]
        if len(cheapest) == 1:
            return cheapest[0]
        return self._rng.choices(cheapest, weights=[d.weight for d in cheapest])[0]

    def _load(self, deployment: Deployment) -> int:
        stats = self._stats.get(deployment.target)
        return 0 if stats is None else stats.in_flight

    def _cost(self, deployment: Deployment, now: float) -> float:
        stats = self._stats.get(deployment.target)
        if stats is None or stats.stamp is None:
            estimate = self._latency.default_rtt
            in_flight = 0 if stats is None else stats.in_flight
        else:
            estimate = stats.estimate * math.exp(-max(now - stats.stamp, 0.0) / self._latency.decay)
            in_flight = stats.in_flight
        return estimate * (in_flight + 1) / deployment.weight

    def _observe(self, stats: _Stats, sample: float, now: float) -> None:
        """Fold one latency sample into ``stats`` (peak-sensitive EWMA)."""
        if stats.stamp is None or sample > stats.estimate:
            stats.estimate = sample
        else:
            keep = math.exp(-max(now - stats.stamp, 0.0) / self._latency.decay)
            stats.estimate = stats.estimate * keep + sample * (1.0 - keep)
        stats.stamp = now

    def _stats_of(self, target: str) -> _Stats:
        stats = self._stats.get(target)
        if stats is None:
            if len(self._stats) >= _MAX_TRACKED:
                idle = next((t for t, s in self._stats.items() if not s.in_flight), None)
                if idle is not None:
                    del self._stats[idle]
            stats = self._stats[target] = _Stats()
        return stats

    async def _send(
        self, call: Call, deployment: Deployment, candidates: Sequence[Deployment], next: Next
    ) -> Reply:
        stats = self._stats_of(deployment.target) if self._track else None
        if stats is not None:
            stats.in_flight += 1
        started = self._clock()
        try:
            reply = await next(call)
        except GatewayError as error:
            if stats is not None:
                stats.in_flight -= 1
                if self._measures and error.kind in self._penalised:
                    now = self._clock()
                    self._observe(stats, max(now - started, self._latency.failure_penalty), now)
            await self._record_failure(deployment, candidates, error, started)
            raise
        except BaseException:
            if stats is not None:
                stats.in_flight -= 1
            raise
        now = self._clock()
        if stats is not None and self._measures:
            self._observe(stats, now - started, now)
        limits = self._limits.get(deployment.target)
        counts_tokens = limits is not None and limits.tpm is not None
        if reply.stream is not None and (stats is not None or counts_tokens):
            on_end = functools.partial(self._stream_ended, deployment.target, stats, counts_tokens)
            reply.stream = observe(reply.stream, on_end)
        elif stats is not None:
            stats.in_flight -= 1
        try:
            if self._health.enabled:
                await self._record_answer(deployment)
            usage = reply.whole_usage() if counts_tokens else None
            if usage is not None:
                await self._count(deployment.target, "tpm", usage.total_tokens, now)
        except BaseException:
            # Cancelled while the store was busy: nobody will read the stream, so free it (and
            # its in-flight count) here.
            if is_closable(reply.stream):
                await reply.stream.aclose()
            raise
        return reply

    async def _record_failure(
        self,
        deployment: Deployment,
        candidates: Sequence[Deployment],
        error: GatewayError,
        started: float,
    ) -> None:
        health = self._health
        if not health.enabled:
            return
        try:
            if error.kind in health.kinds:
                await health.failed(deployment, candidates, started=started)
            elif isinstance(error, UpstreamError):
                await health.answered(deployment)
        except StoreUnavailable:
            self._state.degraded("health", "open")

    async def _record_answer(self, deployment: Deployment) -> None:
        try:
            await self._health.answered(deployment)
        except StoreUnavailable:
            self._state.degraded("health", "open")

    def _stream_ended(
        self,
        target: str,
        stats: _Stats | None,
        counts_tokens: bool,
        usage: Usage | None,
        generated: int,
    ) -> Awaitable[None] | None:
        """Called once when a tracked stream ends, fails or is closed (an end hook: what it
        returns is awaited; nothing, when there are no tokens to count)."""
        if stats is not None:
            stats.in_flight -= 1
        if counts_tokens and usage is not None:
            return self._count(target, "tpm", usage.total_tokens, self._clock())
        return None
