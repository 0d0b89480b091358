"""``limits``: rpm, tpm and max_parallel per key and per team, from the principal.

Place it right after ``auth``. A call whose principal has no limits (no key limits, no team
limits; the master key; an open gateway) passes untouched. Otherwise, per scope (the key, and
its team, whose counters every key of the team shares):

- ``max_parallel``: requests in flight, each holding a lease in the state store's slot
  (:mod:`proxy.state.store`: kept while the request runs, released when the reply is over — a
  stream when it ends, fails or is closed — and, on Redis, ended on its own if its gateway
  dies; an admission the store gave up on holds none).
- ``rpm`` and ``tpm``: GCRA buckets in the state store (:mod:`proxy.state.store`'s docstring states
  the algorithm and its accuracy), taken all or nothing across scopes.
  ``tpm`` counts input + output tokens: a call reserves its worst case when it starts
  (:func:`~proxy.core.token_estimate.expected_tokens`: its estimated input, plus its output limit
  for every answer it asks for — ``n`` times ``max_completion_tokens`` / ``max_tokens`` — or
  else ``n`` times ``output_reserve``), and the reservation is corrected with the real usage
  when the reply ends (given back in full when the call failed; kept when a stream ends
  without usage). A call whose worst case alone is more than a scope's ``tpm`` could never
  fit: it is refused at once, with ``x-should-retry: false`` and no ``Retry-After``.

Over a limit: 429 ``rate_limit_exceeded`` with ``Retry-After`` (and ``retry-after-ms``), and
``crossway_rate_limited_total{scope,limit}``; a ``tpm`` refusal says how many tokens the call
needs. Every response of a limited principal carries
OpenAI's ``x-ratelimit-limit-requests``, ``x-ratelimit-remaining-requests``,
``x-ratelimit-reset-requests`` and the ``-tokens`` three, from the scope with the least left.
When the shared store is unavailable, ``state.on_unavailable.limits`` decides
(:mod:`proxy.state.policy`): ``local`` (the default) counts in this process meanwhile,
``open`` admits the call uncounted, ``closed`` refuses it (503 ``state_unavailable``); each
such decision counts in ``crossway_state_degraded_total{use="limits"}``.
Deployment limits (per upstream) stay in ``balance``.

Each principal's counters become a :class:`~proxy.state.store.LimitPlan` once (cached per key), so a
call costs one :meth:`~proxy.state.store.Store.admit` (slots and buckets together, one round trip on
Redis) and, when it holds slots or reserves tokens, one :meth:`~proxy.state.store.Store.settle`
(which Redis carries in the next admission).
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, NoReturn

import msgspec
from msgspec import Meta

from proxy.core.canonical import Call, Principal, Usage
from proxy.core.errors import RateLimited
from proxy.core.observed import observe
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.core.token_estimate import expected_tokens
from proxy.runtime.plugins import PluginContext
from proxy.state.policy import SharedState, StateUnavailable
from proxy.state.store import Admission, AnswersNow, LimitPlan, Store, StoreUnavailable

_PREFIX = "crossway:limits:"
_PARALLEL_RETRY_AFTER = 1.0
_MAX_PLANS = 10_000  # principals whose plan is kept; past it the plans are rebuilt


class LimitsOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``output_reserve``: tokens reserved for the answer of a call without ``max_tokens``."""

    output_reserve: Annotated[int, Meta(ge=0)] = 1024


class LimitExceeded(RateLimited):
    """A key or team limit refused the call (429), with the rate-limit headers. Without
    ``retry_after`` the call can never fit (``x-should-retry: false``)."""

    def __init__(self, message: str, *, retry_after: float | None, headers: dict[str, str]) -> None:
        super().__init__(
            message, retry_after=retry_after, should_retry=False if retry_after is None else None
        )
        self.headers = headers

    def response_headers(self) -> dict[str, str]:
        """``Retry-After`` and ``retry-after-ms`` (when waiting helps) and the
        ``x-ratelimit-*`` headers."""
        headers = super().response_headers()
        if self.retry_after is not None:
            headers["retry-after-ms"] = str(max(0, math.ceil(self.retry_after * 1000)))
        headers.update(self.headers)
        return headers


class _Plan:
    """What limiting one principal takes, built once per principal: its store plan (in-flight
    counters, request buckets, token buckets), each bucket's scope, the ``x-ratelimit-limit-*``
    texts, and the most tokens one call may reserve (``most_tokens``: the smallest ``tpm``;
    ``narrowest``: that bucket's index)."""

    __slots__ = (
        "labels",
        "limit_texts",
        "limits",
        "most_tokens",
        "narrowest",
        "principal",
        "settles",
        "slot_labels",
        "tokens",
    )

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
        tpms = [limit for _, limit in tokens]
        self.most_tokens = min(tpms, default=0)
        self.narrowest = len(requests) + tpms.index(self.most_tokens) if tpms else 0


class LimitsPlugin:
    """See the module docstring."""

    Options = LimitsOptions

    def __init__(self, options: LimitsOptions, context: PluginContext) -> None:
        self._reserve = options.output_reserve
        self._state: SharedState = context.state
        self._store: Store = context.state.store_for("limits")
        # The memory store admits synchronously (AnswersNow, decided here once); a shared
        # store's view is awaited.
        self._admit_now = self._store.admit_now if isinstance(self._store, AnswersNow) else None
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
        tokens = 0
        if plan.tokens:
            tokens = self._estimate(call)
            if tokens > plan.most_tokens:
                self._never_fits(plan, tokens)
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
            self._refused(plan, admission, tokens)
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

    def _refused(self, plan: _Plan, admission: Admission, tokens: int) -> NoReturn:
        """Raise :class:`LimitExceeded` for the slot or bucket that had no room for a call of
        ``tokens``, counted in ``crossway_rate_limited_total{scope,limit}``."""
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
        message = f"this {scope}'s {limit} limit of {limits.limits[index]} is reached"
        if limit == "tpm":
            message += f": this request needs up to {tokens} tokens"
        raise LimitExceeded(
            message, retry_after=admission.retry_after, headers=_add_headers({}, plan, admission)
        )

    def _never_fits(self, plan: _Plan, tokens: int) -> NoReturn:
        """Raise :class:`LimitExceeded` for a call whose worst case of ``tokens`` is more than
        a scope's whole ``tpm`` (its narrowest), counted in
        ``crossway_rate_limited_total{scope,limit="tpm"}``; nothing is taken."""
        limits = plan.limits
        assert limits is not None
        index = plan.narrowest
        scope = plan.labels[index]
        self._metrics.rate_limited(scope, "tpm").inc()
        raise LimitExceeded(
            f"this request needs up to {tokens} tokens (its input and its output limit for "
            f"every answer), more than this {scope}'s tpm limit of {limits.limits[index]}: "
            "lower its output limit or its number of answers",
            retry_after=None,
            headers={},
        )

    def _unavailable(self) -> None:
        """The store could not admit: refuse (policy ``closed``) or admit uncounted."""
        if self._refuse:
            self._state.degraded("limits", "closed")
            raise StateUnavailable("rate limits cannot be checked right now", retry_after=1)
        self._state.degraded("limits", "open")

    def _estimate(self, call: Call) -> int:
        """This call's token reservation: its worst case, input and output
        (:func:`~proxy.core.token_estimate.expected_tokens`; an embeddings call: its inputs'
        tokens), at least 1."""
        prompt, output = expected_tokens(call, self._reserve)
        return max(1, prompt + output)

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
