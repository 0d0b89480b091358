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
When the shared store is unavailable, ``state.on_unavailable.limits`` decides
(:mod:`proxy.state.policy`): ``local`` (the default) counts in this process meanwhile,
``open`` admits the call uncounted, ``closed`` refuses it (503 ``state_unavailable``); each
such decision counts in ``crossway_state_degraded_total{use="limits"}``.
Deployment limits (per upstream) stay in ``balance``.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated

import msgspec
from msgspec import Meta

from proxy.canonical import Call, Principal, Reply, Usage
from proxy.chain import Next, PluginContext
from proxy.errors import RateLimited
from proxy.observed import ObservedStream
from proxy.state.policy import SharedState, StateUnavailable
from proxy.store import RateBucket, RateState, Store, StoreUnavailable

_PREFIX = "crossway:limits:"
_CHARS_PER_TOKEN = 4
_PARALLEL_RETRY_AFTER = 1.0
_MAX_PLANS = 10_000  # principals whose plan is kept; past it the plans are rebuilt


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


class _Plan:
    """What limiting one principal takes, built once per principal: its in-flight counters,
    its request buckets (the same every call) and its token buckets' keys and limits."""

    __slots__ = (
        "limit_texts",
        "principal",
        "rpm",
        "rpm_labels",
        "slot_labels",
        "slot_limits",
        "slots",
        "tpm",
    )

    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.slots: list[str] = []
        self.slot_limits: list[int] = []
        self.slot_labels: list[str] = []
        self.rpm: list[RateBucket] = []
        self.rpm_labels: list[str] = []
        self.tpm: list[tuple[str, int, str]] = []
        scopes = (
            ("key", principal.key_id, principal.limits),
            ("team", principal.team, principal.team_limits),
        )
        for scope, ident, limits in scopes:
            if ident is None or limits is None:
                continue
            if limits.max_parallel is not None:
                self.slots.append(f"{_PREFIX}parallel:{scope}:{ident}")
                self.slot_limits.append(limits.max_parallel)
                self.slot_labels.append(scope)
            if limits.rpm is not None:
                self.rpm.append(RateBucket(f"{_PREFIX}rpm:{scope}:{ident}", 1, limits.rpm))
                self.rpm_labels.append(scope)
            if limits.tpm is not None:
                self.tpm.append((f"{_PREFIX}tpm:{scope}:{ident}", limits.tpm, scope))
        # The x-ratelimit-limit-* texts, one per bucket in take order (requests, then tokens).
        self.limit_texts = [str(b.limit) for b in self.rpm] + [str(t[1]) for t in self.tpm]

    @property
    def empty(self) -> bool:
        """Nothing to limit."""
        return not (self.slots or self.rpm or self.tpm)


class LimitsPlugin:
    """See the module docstring."""

    Options = LimitsOptions

    def __init__(self, options: LimitsOptions, context: PluginContext) -> None:
        self._reserve = options.output_reserve
        self._state: SharedState = context.state
        self._store: Store = context.state.store_for("limits")
        self._refuse = context.state.policy("limits") == "closed"
        self._metrics = context.metrics
        self._plans: dict[str | None, _Plan] = {}

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Admit ``call`` within its principal's limits, or raise :class:`LimitExceeded`."""
        principal = call.principal
        if principal.limits is None and principal.team_limits is None:
            return await next(call)
        plan = self._plan(principal)
        if plan.empty:
            return await next(call)
        # One store call admits (slots and buckets together), one settles when the reply is
        # over; none for what the plan does not limit.
        tokens = self._token_buckets(call, plan) if plan.tpm else []
        buckets = plan.rpm + tokens if tokens else plan.rpm
        held, states = await self._admit(plan, buckets)
        try:
            reply = await next(call)
        except BaseException:
            given_back = [_costing(b, -b.cost) for b in tokens] if states else []
            await self._settle(held, given_back)
            raise
        if states:
            reply.headers.update(_headers(plan, states))
        if not (held or tokens):
            return reply
        if reply.stream is not None:
            reply.stream = ObservedStream(
                reply.stream, functools.partial(self._ended, held, tokens)
            )
        else:
            await self._ended(held, tokens, reply.whole_usage())
        return reply

    def _plan(self, principal: Principal) -> _Plan:
        plan = self._plans.get(principal.key_id)
        if plan is None or plan.principal is not principal:  # new, or the key changed
            if len(self._plans) >= _MAX_PLANS:
                self._plans.clear()
            plan = self._plans[principal.key_id] = _Plan(principal)
        return plan

    async def _admit(
        self, plan: _Plan, buckets: list[RateBucket]
    ) -> tuple[list[str], list[RateState]]:
        """Hold a slot in every scope with ``max_parallel`` and take from every bucket, all or
        nothing, in one store call; raise :class:`LimitExceeded` when a slot or bucket has no
        room. Returns the slots held and the buckets' states (both empty when the store is
        unavailable and the policy admits)."""
        slots = plan.slots
        try:
            if slots and buckets:
                full, states = await self._store.admit(slots, plan.slot_limits, buckets)
            elif slots:
                full, states = await self._store.hold(slots, plan.slot_limits), []
            else:
                full, states = None, await self._store.rate_take(buckets)
        except StoreUnavailable:
            self._unavailable()
            return [], []
        if full is not None:
            self._full(plan, full)
        self._check(plan, buckets, states)
        return slots, states

    def _full(self, plan: _Plan, full: int) -> None:
        """Raise for the slot ``full``, which has no room."""
        scope = plan.slot_labels[full]
        self._metrics.rate_limited(scope, "max_parallel").inc()
        raise LimitExceeded(
            f"this {scope}'s {plan.slot_limits[full]} requests in flight are taken",
            retry_after=_PARALLEL_RETRY_AFTER,
            headers={},
        )

    def _unavailable(self) -> None:
        """The store could not admit: refuse (policy ``closed``) or admit uncounted."""
        if self._refuse:
            self._state.degraded("limits", "closed")
            raise StateUnavailable("rate limits cannot be checked right now", retry_after=1)
        self._state.degraded("limits", "open")

    def _token_buckets(self, call: Call, plan: _Plan) -> list[RateBucket]:
        """This call's token reservations: its text / 4 plus its output bound, per scope (an
        embeddings call: its inputs' tokens)."""
        if call.embedding is not None:
            estimate = max(1, call.embedding.estimated_tokens())
            return [RateBucket(key, min(estimate, limit), limit) for key, limit, _ in plan.tpm]
        chars = 0
        for message in call.messages:
            chars += len(message.text())
        params = call.params
        output = params.max_completion_tokens or params.max_tokens or self._reserve
        estimate = max(1, chars // _CHARS_PER_TOKEN + output)
        return [RateBucket(key, min(estimate, limit), limit) for key, limit, _ in plan.tpm]

    def _check(self, plan: _Plan, buckets: list[RateBucket], states: list[RateState]) -> None:
        """Raise :class:`LimitExceeded` when a bucket refused the take."""
        for index, state in enumerate(states):
            if not state.allowed:
                rpm = len(plan.rpm)
                scope = plan.rpm_labels[index] if index < rpm else plan.tpm[index - rpm][2]
                limit = "rpm" if index < rpm else "tpm"
                self._metrics.rate_limited(scope, limit).inc()
                raise LimitExceeded(
                    f"this {scope}'s {limit} limit of {buckets[index].limit} is reached",
                    retry_after=max(s.retry_after for s in states if not s.allowed),
                    headers=_headers(plan, states),
                )

    async def _ended(
        self, held: list[str], reserved: list[RateBucket], usage: Usage | None
    ) -> None:
        """The reply is over: free the slots, correct the token reservations with ``usage``."""
        corrections: list[RateBucket] = []
        if usage is not None and reserved:
            used = usage.total_tokens
            for b in reserved:
                if used != b.cost:
                    corrections.append(RateBucket(b.key, used - b.cost, b.limit, b.period))
        await self._settle(held, corrections)

    async def _settle(self, held: list[str], corrections: list[RateBucket]) -> None:
        """Release ``held`` and charge ``corrections``, in one store call."""
        try:
            if held and corrections:
                await self._store.settle(held, corrections)
            elif held:
                await self._store.release(held)
            elif corrections:
                await self._store.rate_adjust(corrections)
        except StoreUnavailable:
            self._state.degraded("limits", "open")


def _costing(bucket: RateBucket, cost: int) -> RateBucket:
    return RateBucket(bucket.key, cost, bucket.limit, bucket.period)


_REQUEST_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
)
_TOKEN_HEADERS = (
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
)


def _headers(plan: _Plan, states: list[RateState]) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers: per kind (the plan's request buckets first, then its
    token buckets), from the bucket with the least left."""
    headers: dict[str, str] = {}
    rpm = len(plan.rpm)
    for names, first, last in ((_REQUEST_HEADERS, 0, rpm), (_TOKEN_HEADERS, rpm, len(states))):
        if first == last:
            continue
        tightest = first
        least = states[first].remaining
        for index in range(first + 1, last):
            remaining = states[index].remaining
            if remaining < least:
                tightest, least = index, remaining
        limit, left, reset = names
        headers[limit] = plan.limit_texts[tightest]
        headers[left] = str(least)
        headers[reset] = duration(states[tightest].reset_after)
    return headers


def duration(seconds: float) -> str:
    """OpenAI's reset format: ``250ms``, ``1s``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text
