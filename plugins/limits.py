"""``limits``: rpm, tpm and max_parallel per key and per team, from the principal.

Place it right after ``auth``. A call whose principal has no limits (no key limits, no team
limits; the master key; an open gateway) passes untouched. Otherwise, per scope (the key, and
its team, whose counters every key of the team shares):

- ``max_parallel``: requests in flight, counted in the state store (``incr``), released when
  the reply is over (a stream when it ends, fails or is closed).
- ``rpm`` and ``tpm``: GCRA buckets in the state store (:meth:`proxy.store.Store.rate_take`,
  whose docstring states the algorithm and its accuracy), taken all or nothing across scopes.
  ``tpm`` counts input + output tokens: a call reserves an estimate when it starts — its
  messages' characters / 4, plus ``max_tokens`` (or ``max_completion_tokens``) or else
  ``output_reserve``, capped at the limit — and the reservation is corrected with the real
  usage when the reply ends (given back in full when the call failed; kept when a stream ends
  without usage).

Over a limit: 429 ``rate_limit_exceeded`` with ``Retry-After`` (and ``retry-after-ms``), and
``crossway_rate_limited_total{scope,limit}``. Every response of a limited principal carries
OpenAI's ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
``x-ratelimit-reset-requests`` and the ``-tokens`` three, from the scope with the least left.
When the store is unavailable the call is admitted (limits fail open, as a Redis outage must
not stop traffic) and ``crossway_store_degraded_total{use="limits"}`` counts it.
Deployment limits (per upstream) stay in ``balance``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Annotated

import msgspec
from msgspec import Meta

from proxy.canonical import Call, Principal, RateLimits, Reply, Usage
from proxy.chain import Next, PluginContext
from proxy.errors import RateLimited
from proxy.observed import ObservedStream
from proxy.store import RateBucket, RateState, Store, StoreUnavailable

_PREFIX = "crossway:limits:"
_CHARS_PER_TOKEN = 4
_PARALLEL_RETRY_AFTER = 1.0


class LimitsOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``output_reserve``: tokens reserved for the answer of a call without ``max_tokens``."""

    output_reserve: Annotated[int, Meta(ge=0)] = 1024


class LimitExceeded(RateLimited):
    """A key or team limit refused the call (429), with the rate-limit headers."""

    def __init__(self, message: str, *, retry_after: float, headers: dict[str, str]) -> None:
        super().__init__(message, retry_after=retry_after)
        self.headers = headers

    def response_headers(self) -> dict[str, str]:
        """``Retry-After``, ``retry-after-ms`` and the ``x-ratelimit-*`` headers."""
        headers = super().response_headers()
        headers["retry-after-ms"] = str(max(0, math.ceil((self.retry_after or 0) * 1000)))
        headers.update(self.headers)
        return headers


class _Scope:
    """One limited scope of a call: ``key`` or ``team``, its id and its limits."""

    __slots__ = ("ident", "limits", "name")

    def __init__(self, name: str, ident: str, limits: RateLimits) -> None:
        self.name = name
        self.ident = ident
        self.limits = limits


class LimitsPlugin:
    """See the module docstring."""

    Options = LimitsOptions

    def __init__(self, options: LimitsOptions, context: PluginContext) -> None:
        self._reserve = options.output_reserve
        self._store: Store = context.store
        self._metrics = context.metrics

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Admit ``call`` within its principal's limits, or raise :class:`LimitExceeded`."""
        scopes = _scopes(call.principal)
        if not scopes:
            return await next(call)
        held = await self._hold_slots(scopes)
        buckets, kinds = self._buckets(call, scopes)
        taken = False
        try:
            states = await self._take(buckets, kinds)
            taken = True
            reply = await next(call)
        except BaseException:
            await self._release(held)
            if taken:
                await self._refund(buckets, kinds)
            raise
        reply.headers.update(_headers(buckets, kinds, states))
        reserved = [b for b, kind in zip(buckets, kinds, strict=True) if kind[1] == "tpm"]
        if reply.stream is not None:
            on_end = functools.partial(self._ended, held, reserved)
            reply.stream = ObservedStream(reply.stream, on_end)
        else:
            await self._ended(held, reserved, reply.response.usage if reply.response else None)
        return reply

    async def _hold_slots(self, scopes: Sequence[_Scope]) -> list[str]:
        """Take a parallel slot in every scope with ``max_parallel``; all or none."""
        held: list[str] = []
        for scope in scopes:
            limit = scope.limits.max_parallel
            if limit is None:
                continue
            key = f"{_PREFIX}parallel:{scope.name}:{scope.ident}"
            try:
                count = await self._store.incr(key)
            except StoreUnavailable:
                self._metrics.store_degraded("limits").inc()
                continue
            held.append(key)
            if count > limit:
                await self._release(held)
                self._metrics.rate_limited(scope.name, "max_parallel").inc()
                raise LimitExceeded(
                    f"this {scope.name}'s {limit} requests in flight are taken",
                    retry_after=_PARALLEL_RETRY_AFTER,
                    headers={},
                )
        return held

    async def _release(self, held: Sequence[str]) -> None:
        for key in held:
            try:
                await self._store.incr(key, -1)
            except StoreUnavailable:
                self._metrics.store_degraded("limits").inc()

    def _buckets(
        self, call: Call, scopes: Sequence[_Scope]
    ) -> tuple[list[RateBucket], list[tuple[str, str]]]:
        buckets: list[RateBucket] = []
        kinds: list[tuple[str, str]] = []
        estimate: int | None = None
        for scope in scopes:
            limits = scope.limits
            if limits.rpm is not None:
                buckets.append(
                    RateBucket(f"{_PREFIX}rpm:{scope.name}:{scope.ident}", 1, limits.rpm)
                )
                kinds.append((scope.name, "rpm"))
            if limits.tpm is not None:
                if estimate is None:
                    estimate = self._estimate(call)
                cost = min(estimate, limits.tpm)
                buckets.append(
                    RateBucket(f"{_PREFIX}tpm:{scope.name}:{scope.ident}", cost, limits.tpm)
                )
                kinds.append((scope.name, "tpm"))
        return buckets, kinds

    def _estimate(self, call: Call) -> int:
        """Tokens to reserve for ``call``: its text / 4 plus its output bound."""
        chars = sum(len(message.text()) for message in call.messages)
        params = call.params
        output = params.max_completion_tokens or params.max_tokens or self._reserve
        return max(1, chars // _CHARS_PER_TOKEN + output)

    async def _take(
        self, buckets: list[RateBucket], kinds: list[tuple[str, str]]
    ) -> list[RateState] | None:
        """Take from every bucket; raise :class:`LimitExceeded` when one refuses. None when
        the store is unavailable (admitted, counted as degraded)."""
        if not buckets:
            return []
        try:
            states = await self._store.rate_take(buckets)
        except StoreUnavailable:
            self._metrics.store_degraded("limits").inc()
            return None
        refused = [i for i, state in enumerate(states) if not state.allowed]
        if refused:
            first = refused[0]
            scope, limit = kinds[first]
            self._metrics.rate_limited(scope, limit).inc()
            raise LimitExceeded(
                f"this {scope}'s {limit} limit of {buckets[first].limit} is reached",
                retry_after=max(states[i].retry_after for i in refused),
                headers=_headers(buckets, kinds, states),
            )
        return states

    async def _refund(self, buckets: Sequence[RateBucket], kinds: list[tuple[str, str]]) -> None:
        """Give back the token reservations of a call that failed."""
        for bucket, (_, limit) in zip(buckets, kinds, strict=True):
            if limit == "tpm":
                await self._adjust(msgspec.structs.replace(bucket, cost=-bucket.cost))

    async def _ended(
        self, held: Sequence[str], reserved: Sequence[RateBucket], usage: Usage | None
    ) -> None:
        """The reply is over: free the slots, correct the token reservations with ``usage``."""
        await self._release(held)
        if usage is None:
            return
        used = usage.total_tokens
        for bucket in reserved:
            if used != bucket.cost:
                await self._adjust(msgspec.structs.replace(bucket, cost=used - bucket.cost))

    async def _adjust(self, bucket: RateBucket) -> None:
        try:
            await self._store.rate_adjust(bucket)
        except StoreUnavailable:
            self._metrics.store_degraded("limits").inc()


def _scopes(principal: Principal) -> list[_Scope]:
    scopes: list[_Scope] = []
    if principal.limits is not None and principal.key_id is not None:
        scopes.append(_Scope("key", principal.key_id, principal.limits))
    if principal.team_limits is not None and principal.team is not None:
        scopes.append(_Scope("team", principal.team, principal.team_limits))
    return scopes


def _headers(
    buckets: Sequence[RateBucket],
    kinds: Sequence[tuple[str, str]],
    states: Sequence[RateState] | None,
) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers, for each kind from the bucket with least left."""
    headers: dict[str, str] = {}
    if not states:
        return headers
    for limit, suffix in (("rpm", "requests"), ("tpm", "tokens")):
        tightest: tuple[RateBucket, RateState] | None = None
        for bucket, (_, kind), state in zip(buckets, kinds, states, strict=True):
            if kind == limit and (tightest is None or state.remaining < tightest[1].remaining):
                tightest = (bucket, state)
        if tightest is not None:
            bucket, state = tightest
            headers[f"x-ratelimit-limit-{suffix}"] = str(bucket.limit)
            headers[f"x-ratelimit-remaining-{suffix}"] = str(state.remaining)
            headers[f"x-ratelimit-reset-{suffix}"] = duration(state.reset_after)
    return headers


def duration(seconds: float) -> str:
    """OpenAI's reset format: ``250ms``, ``1s``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text
