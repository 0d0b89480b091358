"""``limits``: rpm, tpm and max_parallel per key and per team, from the principal.

Place it right after ``auth``. A call whose principal has no limits (no key limits, no team
limits; the master key; an open gateway) passes untouched. Otherwise, per scope (the key, and
its team, whose counters every key of the team shares):

- ``max_parallel``: requests in flight, counted in the state store, released when the reply
  is over (a stream when it ends, fails or is closed).
- ``rpm`` and ``tpm``: GCRA buckets in the state store (:mod:`proxy.store`'s docstring states
  the algorithm and its accuracy), taken all or nothing across scopes.
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

Each principal's counters become a :class:`~proxy.store.LimitPlan` once (cached per key), so a
call costs one :meth:`~proxy.store.Store.admit` (slots and buckets together, one round trip on
Redis) and, when it holds slots or reserves tokens, one :meth:`~proxy.store.Store.settle`
(which Redis carries in the next admission).
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, NoReturn

import msgspec
from msgspec import Meta

from proxy.canonical import Call, Principal, Reply, Usage
from proxy.chain import Next, PluginContext
from proxy.errors import RateLimited
from proxy.observed import observe
from proxy.state.policy import SharedState, StateUnavailable
from proxy.store import Admission, LimitPlan, Store, StoreUnavailable

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
    """What limiting one principal takes, built once per principal: its store plan (in-flight
    counters, request buckets, token buckets), each bucket's scope, and the
    ``x-ratelimit-limit-*`` texts."""

    __slots__ = ("labels", "limit_texts", "limits", "principal", "settles", "slot_labels", "tokens")

    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        slots: list[tuple[str, int]] = []
        requests: list[tuple[str, int]] = []
        tokens: list[tuple[str, int]] = []
        self.slot_labels: list[str] = []
        request_labels: list[str] = []
        token_labels: list[str] = []
        scopes = (
            ("key", principal.key_id, principal.limits),
            ("team", principal.team, principal.team_limits),
        )
        for scope, ident, limits in scopes:
            if ident is None or limits is None:
                continue
            if limits.max_parallel is not None:
                slots.append((f"{_PREFIX}parallel:{scope}:{ident}", limits.max_parallel))
                self.slot_labels.append(scope)
            if limits.rpm is not None:
                requests.append((f"{_PREFIX}rpm:{scope}:{ident}", limits.rpm))
                request_labels.append(scope)
            if limits.tpm is not None:
                tokens.append((f"{_PREFIX}tpm:{scope}:{ident}", limits.tpm))
                token_labels.append(scope)
        self.limits = LimitPlan(slots, requests, tokens) if slots or requests or tokens else None
        self.tokens = bool(tokens)
        self.settles = bool(slots or tokens)  # a call's end changes a counter
        self.labels = request_labels + token_labels  # each bucket's scope, in plan order
        self.limit_texts = [str(limit) for _, limit in (*requests, *tokens)]


class LimitsPlugin:
    """See the module docstring."""

    Options = LimitsOptions

    def __init__(self, options: LimitsOptions, context: PluginContext) -> None:
        self._reserve = options.output_reserve
        self._state: SharedState = context.state
        self._store: Store = context.state.store_for("limits")
        # The memory store admits synchronously; a shared store's view is awaited.
        self._admit_now = getattr(self._store, "admit_now", None)
        self._refuse = context.state.policy("limits") == "closed"
        self._metrics = context.metrics
        self._plans: dict[str | None, _Plan] = {}

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Admit ``call`` within its principal's limits, or raise :class:`LimitExceeded`.

        One store call admits (slots and buckets together) and, when the plan holds slots or
        reserves tokens, one settles when the reply is over."""
        principal = call.principal
        if principal.limits is None and principal.team_limits is None:
            return await next(call)
        plan = self._plans.get(principal.key_id)
        if plan is None or plan.principal is not principal:  # new, or the key changed
            plan = self._plan(principal)
        limits = plan.limits
        if limits is None:
            return await next(call)
        tokens = self._estimate(call) if plan.tokens else 0
        admit_now = self._admit_now
        try:
            if admit_now is not None:
                admission = admit_now(limits, tokens)
            else:
                admission = await self._store.admit(limits, tokens)
        except StoreUnavailable:
            self._unavailable()
            return await next(call)  # admitted uncounted: nothing to settle
        if admission.full is not None or admission.refused is not None:
            self._refused(plan, admission)
        try:
            reply = await next(call)
        except BaseException:
            if plan.settles:
                self._store.settle(admission, 0)  # a failed call: its tokens given back
            raise
        _add_headers(reply.headers, plan, admission)
        if not plan.settles:
            return reply
        if reply.stream is not None:
            reply.stream = observe(reply.stream, functools.partial(self._stream_ended, admission))
        else:
            usage = reply.whole_usage()
            self._store.settle(admission, tokens if usage is None else usage.total_tokens)
        return reply

    def _plan(self, principal: Principal) -> _Plan:
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        plan = self._plans[principal.key_id] = _Plan(principal)
        return plan

    def _refused(self, plan: _Plan, admission: Admission) -> NoReturn:
        """Raise :class:`LimitExceeded` for the slot or bucket that had no room, counted in
        ``crossway_rate_limited_total{scope,limit}``."""
        limits = plan.limits
        assert limits is not None
        if admission.full is not None:
            scope = plan.slot_labels[admission.full]
            self._metrics.rate_limited(scope, "max_parallel").inc()
            raise LimitExceeded(
                f"this {scope}'s {limits.slot_limits[admission.full]} requests in flight are taken",
                retry_after=_PARALLEL_RETRY_AFTER,
                headers={},
            )
        index = admission.refused
        assert index is not None
        scope = plan.labels[index]
        limit = "rpm" if index < limits.requests else "tpm"
        self._metrics.rate_limited(scope, limit).inc()
        raise LimitExceeded(
            f"this {scope}'s {limit} limit of {limits.limits[index]} is reached",
            retry_after=admission.retry_after,
            headers=_add_headers({}, plan, admission),
        )

    def _unavailable(self) -> None:
        """The store could not admit: refuse (policy ``closed``) or admit uncounted."""
        if self._refuse:
            self._state.degraded("limits", "closed")
            raise StateUnavailable("rate limits cannot be checked right now", retry_after=1)
        self._state.degraded("limits", "open")

    def _estimate(self, call: Call) -> int:
        """This call's token reservation: its text / 4 plus its output bound (an embeddings
        call: its inputs' tokens)."""
        if call.embedding is not None:
            return max(1, call.embedding.estimated_tokens())
        chars = 0
        for message in call.messages:
            content = message.content
            chars += len(content) if type(content) is str else len(message.text())
        params = call.params
        output = params.max_completion_tokens or params.max_tokens or self._reserve
        return max(1, chars // _CHARS_PER_TOKEN + output)

    def _stream_ended(self, admission: Admission, usage: Usage | None, generated: int) -> None:
        """A stream is over: a reservation without usage is kept."""
        used = admission.reserved if usage is None else usage.total_tokens
        self._store.settle(admission, used)


def _add_headers(headers: dict[str, str], plan: _Plan, admission: Admission) -> dict[str, str]:
    """Add OpenAI's ``x-ratelimit-*`` headers to ``headers`` (and return it): per kind
    (requests, tokens), from the bucket with the least left."""
    state = admission.requests
    if state is not None:
        headers["x-ratelimit-limit-requests"] = plan.limit_texts[admission.requests_bucket]
        headers["x-ratelimit-remaining-requests"] = str(state.remaining)
        headers["x-ratelimit-reset-requests"] = duration(state.reset_after)
    state = admission.tokens
    if state is not None:
        headers["x-ratelimit-limit-tokens"] = plan.limit_texts[admission.tokens_bucket]
        headers["x-ratelimit-remaining-tokens"] = str(state.remaining)
        headers["x-ratelimit-reset-tokens"] = duration(state.reset_after)
    return headers


_MILLISECONDS = [f"{ms}ms" for ms in range(1001)]


def duration(seconds: float) -> str:
    """OpenAI's reset format: ``250ms``, ``1s``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return _MILLISECONDS[math.ceil(seconds * 1000)]
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text
