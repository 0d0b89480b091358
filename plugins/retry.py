"""``retry``: call the next link again when an attempt fails in a way another attempt may fix.

What is retried: an upstream answer whose HTTP status is in ``on_status`` (default 429, 500, 502,
503, 504), a connection failure (``on_connection_error``) and an expired upstream clock
(``on_timeout``). Never a 400, 401, 403 or 404 (refused in ``on_status`` at load), never a
context-window or content-policy refusal, never the gateway's own errors (its rate limits, a
deployment that is not ready), never an upstream that said ``x-should-retry: false``, and never
after the first byte reached the client: a stream comes back primed, so a failure while it is
being read is a mid-stream failure that the app turns into an in-band error event.

When: exponential backoff with full jitter (a uniform draw in ``[0, min(backoff_cap,
backoff_base * 2**n)]`` before the n-th retry, n from 0). A ``Retry-After`` hint is waited
exactly, up to ``max_retry_after`` seconds; beyond it, the target is not retried and the error
is raised so that the fallback plugin can try another model. When the failed attempt's
deployments span several providers, the retry goes to another provider instead (without
waiting for the hint, which is the failing provider's).

How long: ``deadline`` (seconds from the request's arrival, all attempts and waits included)
and a client's ``timeout`` option, whichever is shorter. When it passes mid-attempt the attempt
is cancelled and the client gets a 504 ``deadline_exceeded`` at once; a wait that would end
after it is not started (the attempt's own error is raised instead). A stream's deadline ends
when its first chunk arrives; the provider's idle and total clocks bound the rest. The deadline
is absolute, so a retry plugin inside a fallback shares one deadline across every model tried.

How many: ``retries`` per request by default; a client's ``retry`` option may ask for up to
``max_retries`` and narrow (never widen) ``on_status``. A retry budget bounds the extra load a
provider outage can cause, as Envoy's ``retry_budget`` does: the retries in flight may not
exceed ``budget_ratio`` of the requests in flight, with ``budget_min`` concurrent retries always
allowed. A retry is in flight from the decision to make it (its wait included) until its
attempt returns. So N requests failing together cause at most ``max(budget_min, budget_ratio
* N)`` upstream calls beyond their own at any moment, while a client that sends its requests
one at a time always gets its retries. When the budget is spent the attempt's error is raised
and ``crossway_retries_denied_total{cause="budget"}`` counts it. The budget is in-process, per
plugin instance.

The reply's ``attempts`` counts every upstream call made, and header ``x-crossway-attempts``
shows it. Recommended chain order: ``fallback`` → ``retry`` → ``balance`` (outermost first), so
that a retry may pick another deployment and a fallback acts only once retries are spent.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Annotated

import msgspec
from msgspec import Meta

from proxy.core.canonical import Call, RetryOptions
from proxy.core.errors import DeadlineExceeded, GatewayError, UpstreamError
from proxy.core.headers import ATTEMPTS_HEADER
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.runtime.plugins import PluginContext

Sleep = Callable[[float], Awaitable[None]]

_NEVER_RETRIED = frozenset({400, 401, 403, 404})
_NEVER_RETRIED_KINDS = frozenset(
    {"bad_request", "auth", "permission", "not_found", "context_window", "content_policy"}
)


class RetryConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring. Durations are seconds."""

    retries: Annotated[int, Meta(ge=0, le=10)] = 2
    max_retries: Annotated[int, Meta(ge=0, le=10)] = 5
    on_status: tuple[int, ...] = (429, 500, 502, 503, 504)
    on_connection_error: bool = True
    on_timeout: bool = True
    backoff_base: Annotated[float, Meta(ge=0)] = 0.5
    backoff_cap: Annotated[float, Meta(ge=0)] = 8.0
    max_retry_after: Annotated[float, Meta(ge=0)] = 10.0
    deadline: Annotated[float, Meta(gt=0)] | None = None
    budget_ratio: Annotated[float, Meta(ge=0, le=10)] = 0.2
    budget_min: Annotated[int, Meta(ge=0)] = 3


class RetryBudget:
    """Envoy's retry budget: retries in flight at most ``max(minimum, ratio * requests in
    flight)``. The plugin counts its requests in :attr:`requests`; a retry holds a slot from
    :meth:`try_acquire` to :meth:`release`."""

    __slots__ = ("_minimum", "_ratio", "requests", "retries")

    def __init__(self, ratio: float, minimum: int) -> None:
        self._ratio = ratio
        self._minimum = minimum
        self.requests = 0  # in flight through the plugin
        self.retries = 0  # in flight: decided and not yet answered

    def try_acquire(self) -> bool:
        """Take a slot for one retry; False (and nothing taken) when the budget is spent."""
        if self.retries >= max(self._minimum, self._ratio * self.requests):
            return False
        self.retries += 1
        return True

    def release(self) -> None:
        """Give back the slot of a retry whose attempt has returned (or was abandoned)."""
        self.retries -= 1


class RetryPlugin:
    """Retries failed attempts of the next link; see the module docstring.

    ``sleep`` and ``rng`` are injectable for tests; :attr:`budget` holds the counts of
    requests and retries in flight.
    """

    Options = RetryConfig

    def __init__(
        self,
        options: RetryConfig,
        context: PluginContext,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        refused = sorted(set(options.on_status) & _NEVER_RETRIED)
        if refused:
            raise ValueError(f"on_status: these statuses are never retried: {refused}")
        outside = sorted(s for s in options.on_status if not 400 <= s <= 599)
        if outside:
            raise ValueError(f"on_status: not error statuses: {outside}")
        if options.retries > options.max_retries:
            raise ValueError("retries must not exceed max_retries")
        self._options = options
        self._statuses = frozenset(options.on_status)
        self._metrics = context.metrics
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.budget = RetryBudget(options.budget_ratio, options.budget_min)

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Call ``next`` until it answers, the error is final, or retries/deadline run out.

        Raises the last attempt's error (its ``attempts`` set to the calls made), or
        :class:`DeadlineExceeded` when the deadline passes during an attempt.
        """
        retries, statuses = self._policy(call.options.retry)
        limit = self._deadline(call)
        run = _Run(retries, statuses)
        if limit is None:
            return await self._attempts(call, next, run, None)
        remaining = limit - (time.perf_counter() - call.timings.start)
        if remaining <= 0:
            raise _deadline_error(0)
        scope = asyncio.timeout(remaining)
        try:
            async with scope:
                return await self._attempts(call, next, run, time.perf_counter() + remaining)
        except TimeoutError:
            if not scope.expired():
                raise
            raise _deadline_error(run.attempts + run.pending) from None

    def _policy(self, requested: RetryOptions | None) -> tuple[int, frozenset[int]]:
        if requested is None:
            return self._options.retries, self._statuses
        count = min(max(requested.count, 0), self._options.max_retries)
        return count, self._statuses.intersection(requested.on_codes)

    def _deadline(self, call: Call) -> float | None:
        configured, requested = self._options.deadline, call.options.timeout
        if configured is None or requested is None:
            return requested if configured is None else configured
        return min(configured, requested)

    async def _attempts(self, call: Call, next: Next, run: _Run, ends: float | None) -> Reply:
        budget = self.budget
        budget.requests += 1
        current = call
        holding = False  # a budget slot, for the retry being waited for or made
        try:
            while True:
                run.pending = 1
                try:
                    reply = await next(current)
                except GatewayError as error:
                    run.pending = 0
                    if holding:
                        budget.release()
                        holding = False
                    run.attempts += error.attempts
                    error.attempts = run.attempts
                    if run.retried >= run.retries or not self._retriable(error, run.statuses):
                        raise
                    elsewhere = _other_providers(call, error)  # from all candidates: alternate
                    delay = self._delay(error, run.retried, switching=elsewhere is not current)
                    if delay is None or (ends is not None and time.perf_counter() + delay >= ends):
                        self._metrics.retries_denied("wait").inc()
                        raise
                    if not budget.try_acquire():
                        self._metrics.retries_denied("budget").inc()
                        raise
                    holding = True
                    self._metrics.retries(error.kind).inc()
                    run.retried += 1
                    if delay:
                        await self._sleep(delay)
                    current = elsewhere
                    continue
                reply.attempts += run.attempts
                reply.headers[ATTEMPTS_HEADER] = str(reply.attempts)
                return reply
        finally:
            budget.requests -= 1
            if holding:
                budget.release()

    def _retriable(self, error: GatewayError, statuses: frozenset[int]) -> bool:
        if error.kind in _NEVER_RETRIED_KINDS or error.should_retry is False:
            return False
        if isinstance(error, UpstreamError):
            return error.upstream_status in statuses
        if error.kind == "connection":
            return self._options.on_connection_error
        if error.kind == "timeout":
            return self._options.on_timeout
        return False

    def _delay(self, error: GatewayError, retried: int, *, switching: bool) -> float | None:
        """Seconds to wait before the next attempt; None when the hint is beyond the cap."""
        hint = error.retry_after
        if hint is not None and not switching:
            return hint if hint <= self._options.max_retry_after else None
        options = self._options
        return self._rng.uniform(0, min(options.backoff_cap, options.backoff_base * 2**retried))


class _Run:
    """The counters of one request's attempts (``pending`` is 1 while an attempt is running)."""

    __slots__ = ("attempts", "pending", "retried", "retries", "statuses")

    def __init__(self, retries: int, statuses: frozenset[int]) -> None:
        self.retries = retries
        self.statuses = statuses
        self.attempts = 0
        self.pending = 0
        self.retried = 0


def _other_providers(call: Call, error: GatewayError) -> Call:
    """``call`` narrowed to deployments on providers other than the one that just failed, if any
    (narrowed from all of the call's candidates, so that retries alternate between providers)."""
    failed = error.provider
    if failed is None or call.deployment is not None or len(call.deployments) < 2:
        return call
    others = [d for d in call.deployments if d.provider != failed]
    if not others or len(others) == len(call.deployments):
        return call
    return msgspec.structs.replace(call, deployments=others)


def _deadline_error(attempts: int) -> DeadlineExceeded:
    error = DeadlineExceeded("the request's deadline passed before an upstream answered")
    error.attempts = attempts
    return error
