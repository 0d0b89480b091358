"""``cost``: what each reply costs, budgets that stop spending, and the spend ledger.

Place it after ``auth`` / ``limits`` / ``cache`` (a cache hit costs nothing and never reaches
it) and before ``fallback`` / ``retry`` / ``balance``, so that a request is charged once, for
the deployment that finally served it.

**Cost.** A reply is priced from its usage with the config's
:class:`~proxy.governance.pricing.PriceBook` (exact integer nano-dollars): the provider's own billed
amount when it reports one (``authoritative``), else the price of the usage buckets
(``estimated``). It goes to the call's :class:`~proxy.core.canonical.Accounting`, to
``crossway_cost_usd_total{provider,model}`` (model = the alias asked for, bounded) and, on whole
responses, to ``x-crossway-cost-usd`` (``0.000245``). A model with no price has an unknown
cost (None, never 0), counted in ``crossway_cost_unknown_total{provider}``. Streams are charged
when they end, fail midway or are closed by a client that went away, for what was generated:
the usage the upstream reported, else an estimate (the prompt's text, and the streamed text at
one token per four characters, a verbatim OpenAI frame counting one token — never more output
than the call's output limit, ``n`` times ``max_tokens``, when it set one), ``estimated``, kept
in ``accounting.usage``. A whole response without usage is estimated the same way; a failed call
costs 0.

**Budgets** (:mod:`proxy.governance.budgets.counters`). A request's scopes are its key, its key's
team and, when ``auth.user_budget`` is set, the end user it names; each may have a budget on the
principal. Before the call, each budgeted scope reserves the request's worst case
(:func:`~proxy.core.token_estimate.expected_tokens`) — its estimated input (tool definitions and
images included) and its output limit for every answer it asks for (``n`` times
``max_completion_tokens`` / ``max_tokens``, the larger when both are set; else ``n`` times
``reserve_output_tokens``), priced at the dearest deployment of its model, each input token at
the dearest input rate (uncached, cache read, cache write) and each output token at the dearest
output rate (output, reasoning) — and a scope whose spend plus that worst case would pass its
budget refuses: 429 ``budget_exceeded`` with ``x-should-retry: false``, naming the scope, what
the request may cost and what is left (or that the budget is spent), and when it resets;
nothing is sent upstream. When the request ends the reservation becomes the real cost (the
correction rides in the next reservation of the same scopes, or leaves at the end of the loop
turn; one the shared store cannot take is sent again until it lands, so that the counters end
equal to the ledger). A scope's spend therefore never passes its budget but by what a request
costs beyond its own worst case: an upstream that answers more than the output limit asked (or,
when the call set none, more than ``reserve_output_tokens`` per answer, as reported or as its
text is estimated), a prompt that has more tokens than estimated, a provider-billed amount above the
price book's, or a fallback or load-balancer target dearer than every deployment of the model
asked for — and, beside the rule, by what ``on_unavailable`` lets through unchecked (below),
and per worker with the in-process store. Scopes without
a budget touch no counter; when one starts to have a budget, its counters are re-read from the
ledger in the background (:mod:`proxy.governance.budgets.sync`; meanwhile it is checked against what
they held). A request whose models have no price reserves nothing. When the shared state store
cannot be reached, ``state.on_unavailable.budgets`` decides (:mod:`proxy.state.policy`): a
budgeted request is refused with 503 ``state_unavailable`` (``closed``, the default), served
unchecked (``open``) or checked against this process's own counters meanwhile (``local``); each
such decision counts in ``crossway_state_degraded_total{use="budgets"}``. Crossing a budget's
``soft_usd`` logs a warning once per period, counts ``crossway_budget_alerts_total{scope}``
and, with ``alerts.webhook_url``, POSTs a JSON alert (retried, never holding up a request).

**Ledger** (``ledger: true``, the default). Every request that ran on this config — served,
failed, refused, cancelled, answered from the cache — becomes one record
(:mod:`proxy.governance.ledger.records`) queued for the database
(:mod:`proxy.governance.ledger.writer`). On start the budget counters are rebuilt from the ledger
(keys and teams; the 10,000 most recent end users).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from proxy.core.canonical import (
    ANONYMOUS,
    Budget,
    Call,
    CostSource,
    MediaUnits,
    Principal,
    Usage,
)
from proxy.core.errors import BudgetExceeded, BudgetUnavailable
from proxy.core.headers import COST_HEADER
from proxy.core.metered import message_tokens
from proxy.core.observed import observe
from proxy.core.plugin import FinishedRequest, Next
from proxy.core.reply import Reply
from proxy.core.token_estimate import estimate_prompt_tokens, expected_tokens, output_limit
from proxy.governance.budgets.alerts import AlertsConfig, SoftLimitAlerts, rfc3339
from proxy.governance.budgets.counters import SpendCounters
from proxy.governance.budgets.plans import Refusal, Reservation, Scope, max_nanos, resets_at
from proxy.governance.budgets.sync import CounterSync
from proxy.governance.ledger.records import RecordIds, end_user, spend_record
from proxy.governance.pricing import NANOS_PER_USD, ModelPrice, PriceBook, format_usd
from proxy.runtime.plugins import PluginContext
from proxy.state.store import StoreUnavailable

_NO_UNITS = MediaUnits()
_MAX_PRINCIPALS = 10_000
_MAX_COUNTERS = 4096


class CostConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring."""

    ledger: bool = True
    reserve_output_tokens: Annotated[int, Meta(ge=0)] = 4096
    alerts: AlertsConfig = AlertsConfig()


class CostPlugin:
    """Prices replies, enforces budgets, records every request; see the module docstring."""

    Options = CostConfig

    def __init__(self, options: CostConfig, context: PluginContext) -> None:
        self._reserve_output = options.reserve_output_tokens
        self._prices: PriceBook = context.prices
        self._metrics = context.metrics
        self._logger = context.logger
        self._state = context.state
        self._counters = SpendCounters(
            context.state.store_for("budgets"), on_lost=self._corrections_lost
        )
        self._fail_closed = context.state.policy("budgets") == "closed"
        self._ledger = context.ledger if options.ledger else None
        self._ids = RecordIds().next
        self._in_flight: set[Reservation] = set()
        self._sync = CounterSync(
            self._counters,
            self._ledger,
            context.database,
            context.logger,
            self._reserved_on,
            lambda: self._state.degraded("budgets", "open"),
        )
        self._scopes: dict[int, tuple[Principal, tuple[tuple[Scope, str, Budget], ...]]] = {}
        self._priced: dict[tuple[str, str, str], _Priced] = {}
        self._alerts = SoftLimitAlerts(
            options.alerts, self._counters, context.state, context.metrics, context.logger
        )

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Check budgets, pass ``call`` on, and price what comes back (a stream when it is
        over). Raises :class:`BudgetExceeded` (429) or :class:`BudgetUnavailable` (503)
        before any upstream call."""
        reservation = None
        if call.principal is not ANONYMOUS:
            budgeted = self._budgeted(call)
            if budgeted:
                worst = self._worst_case(call)
                counters = self._counters
                try:  # without waiting when the store can (the memory store)
                    reserved = counters.reserve_now(budgeted, worst)
                    if reserved is None:
                        reserved = await counters.reserve(budgeted, worst)
                    reservation, refusal = reserved
                except StoreUnavailable:
                    self._unchecked()  # raises when the policy is closed
                    reservation, refusal = None, None
                if refusal is not None:
                    self._metrics.budget_rejected(refusal.scope).inc()
                    raise _exceeded(refusal)
                if reservation is not None:
                    self._in_flight.add(reservation)
        try:
            reply = await next(call)
        except BaseException:
            call.accounting.cost_nanos = 0  # nothing was served
            call.accounting.cost_source = "estimated"
            if reservation is not None:
                self._in_flight.discard(reservation)
                if not self._counters.correct(reservation, 0):
                    await self._settle(reservation, 0)
            raise
        if reply.stream is not None:
            on_end = self._stream_ended(call, reply, reservation)
            reply.stream = observe(reply.stream, on_end, meters=True)
            return reply
        response = reply.response
        usage = response.usage if response is not None else reply.whole_usage()
        if usage is None:
            usage = _estimated(
                call,
                0
                if response is None
                else sum(message_tokens(choice.message) for choice in response.choices),
            )
        nanos = self._charge(call, reply.provider, reply.model, usage)
        if nanos is not None:
            reply.headers[COST_HEADER] = format_usd(nanos)
        else:
            nanos = 0
        if reservation is not None:
            self._in_flight.discard(reservation)
            if not self._counters.correct(reservation, nanos):
                await self._settle(reservation, nanos)
        return reply

    def finished(self, request: FinishedRequest) -> None:
        """Queue the ledger's record of ``request`` (see the module docstring). The record is
        built here rather than in the writer's task: it holds no reference the garbage
        collector tracks, where a queued request (its call) would, and collections of those
        cost more than the building."""
        if self._ledger is not None:
            self._ledger.record(spend_record(request, self._ids()))

    async def start(self) -> None:
        """Rebuild the budget counters from the ledger, then start the ledger writer (which
        replays a journal left by an earlier run). A database that does not answer is logged:
        counters then start from what the store holds."""
        if self._ledger is None:
            return
        await self._sync.rebuild()
        self._ledger.start()

    async def close(self) -> None:
        """Send the budget corrections still owed (what the store cannot take is logged as
        lost); stop pending alert deliveries and counter re-reads."""
        await self._counters.close()
        self._sync.close()
        await self._alerts.close()

    # -- budgets --------------------------------------------------------------------------

    def _budgeted(self, call: Call) -> tuple[tuple[Scope, str, Budget], ...]:
        """The scopes of ``call`` that have a budget (``(scope, id, budget)``), re-reading in
        the background those that just started to have one (see the module docstring)."""
        principal = call.principal
        known = self._scopes.get(id(principal))
        if known is not None and known[0] is principal:
            budgeted = known[1]
        else:
            budgeted = self._principal_scopes(principal)
        if principal.user_budget is not None:
            user = end_user(call)
            if user is not None:
                budgeted = (*budgeted, ("user", user, principal.user_budget))
        if budgeted and self._sync.watching:
            self._sync.check(budgeted)
        return budgeted

    def _reserved_on(self, scope: Scope, ident: str) -> int:
        """What the requests in flight have reserved on ``scope`` / ``ident``."""
        return sum(r.nanos for r in self._in_flight if r.holds(scope, ident))

    def _corrections_lost(self, nanos: int) -> None:
        """Budget corrections the store never took were dropped (see
        :mod:`proxy.governance.budgets.counters`): the counters read ``nanos`` more than the
        ledger until they are re-read or the period passes."""
        self._logger.warning("budget_corrections_lost", usd=format_usd(nanos))

    def _unchecked(self) -> None:
        """The budgets cannot be checked: refuse (:class:`BudgetUnavailable`) when the policy
        is ``closed``, else go on without a reservation; counted either way."""
        if self._fail_closed:
            self._state.degraded("budgets", "closed")
            raise BudgetUnavailable("the budget cannot be checked right now", retry_after=1.0)
        self._state.degraded("budgets", "open")

    def _principal_scopes(self, principal: Principal) -> tuple[tuple[Scope, str, Budget], ...]:
        """The key and team scopes of ``principal`` that have a budget (kept per principal
        object: the auth plugin hands out one per key until it changes); the others are
        :meth:`_uncounted`."""
        budgeted: list[tuple[Scope, str, Budget]] = []
        if principal.key_id is not None:
            if principal.budget is not None:
                budgeted.append(("key", principal.key_id, principal.budget))
            else:
                self._sync.uncounted("key", principal.key_id)
        if principal.team is not None:
            if principal.team_budget is not None:
                budgeted.append(("team", principal.team, principal.team_budget))
            else:
                self._sync.uncounted("team", principal.team)
        scopes = tuple(budgeted)
        if len(self._scopes) >= _MAX_PRINCIPALS:
            self._scopes.clear()
        self._scopes[id(principal)] = (principal, scopes)
        return scopes

    def _worst_case(self, call: Call) -> int:
        """Nano-dollars the call may cost at most: its estimated input and output limit
        (:func:`~proxy.core.token_estimate.expected_tokens`) at the dearest price among its
        deployments (:meth:`~proxy.governance.pricing.ModelPrice.worst_nanos`; 0, and no estimate,
        when none has a price). A media call's worst case is its text and the units it names
        (:meth:`~proxy.governance.pricing.ModelPrice.worst_media_nanos`: the characters to speak,
        the images asked for, the search units; a transcription of audio other than WAV
        reserves only its prompt, its length being known only to the upstream)."""
        price_of = self._prices.price
        worst = 0
        prompt = -1  # not estimated yet
        output = 0
        media = call.media
        for deployment in call.deployments:
            price = price_of(deployment.provider, deployment.model)
            if price is not None:
                if media is not None:  # its units, when the request says (else its text)
                    units = media.worst or _NO_UNITS
                    worst = max(worst, price.worst_media_nanos(media.tokens, units))
                    continue
                if prompt < 0:
                    prompt, output = expected_tokens(call, self._reserve_output)
                nanos = price.worst_nanos(prompt, output)
                if nanos > worst:
                    worst = nanos
        return worst

    async def _settle(self, reservation: Reservation, nanos: int) -> None:
        """Settle ``reservation`` (one with a soft limit) at ``nanos``, alerting on the soft
        limits it crossed."""
        try:
            crossings = await self._counters.settle(reservation, nanos)
        except StoreUnavailable:
            self._state.degraded("budgets", "open")
            return
        for crossing in crossings:
            await self._alerts.crossed(crossing)

    # -- cost -----------------------------------------------------------------------------

    def _stream_ended(
        self, call: Call, reply: Reply, reservation: Reservation | None
    ) -> Callable[[Usage | None, int], Awaitable[None] | None]:
        """The stream's end hook: a plain function, so that a stream whose budgets settle at
        once (the common case) makes no coroutine for its end; it returns the settlement to
        await only for a reservation with a soft limit."""

        def ended(usage: Usage | None, generated: int) -> Awaitable[None] | None:
            estimated = usage is None
            if usage is None:
                usage = _estimated(call, generated)
            nanos = self._charge(call, reply.provider, reply.model, usage, estimated=estimated) or 0
            if reservation is not None:
                self._in_flight.discard(reservation)
                if not self._counters.correct(reservation, nanos):
                    return self._settle(reservation, nanos)
            return None

        return ended

    def _charge(
        self, call: Call, provider: str, model: str, usage: Usage, *, estimated: bool = False
    ) -> int | None:
        """Record what ``usage`` on ``provider``/``model`` cost; the nano-dollars, or None."""
        accounting = call.accounting
        priced = self._priced.get((provider, model, call.model))
        if priced is None:
            priced = self._priced_as(provider, model, call.model)
        price = priced.price
        if price is not None and usage.cost_usd is None:  # the common case: priced here
            nanos = price.cost_nanos(usage)
            source: CostSource = "estimated"
        else:  # the provider's own amount (authoritative), or no price: the price book's rule
            cost = self._prices.cost(provider, model, usage)
            if cost is None:
                accounting.cost_nanos = None
                accounting.cost_source = None
                self._metrics.cost_unknown(provider).inc()
                return None
            nanos, source = cost.nanos, cost.source
        accounting.cost_nanos = nanos
        accounting.cost_source = "estimated" if estimated else source
        if nanos:
            counter = priced.counter
            if counter is None:  # its first charge: no series is exported before it counts
                metrics = self._metrics
                label = metrics.model_label(call.model)
                counter = priced.counter = metrics.cost_usd(provider, label)
            counter.inc(nanos / NANOS_PER_USD)
        return nanos

    def _priced_as(self, provider: str, model: str, alias: str) -> _Priced:
        """How replies of ``model`` on ``provider`` to the alias ``alias`` are charged, kept
        per triple (bounded; prices change only with a reload, which makes a new plugin)."""
        kept = self._priced
        if len(kept) >= _MAX_COUNTERS:
            kept.clear()
        priced = kept[provider, model, alias] = _Priced(self._prices.price(provider, model))
        return priced


class _Priced:
    """The price of one (provider, upstream model) — None: it has none — and the
    ``crossway_cost_usd`` child of that provider and the alias asked for, made at its first
    charge."""

    __slots__ = ("counter", "price")

    def __init__(self, price: ModelPrice | None) -> None:
        self.price = price
        self.counter: Any = None


def _estimated(call: Call, generated: int) -> Usage:
    """The usage charged for a reply that reported none (kept in ``call.accounting``): the
    prompt's estimate and the ``generated`` output, never more output than the call's limit
    allows (:func:`~proxy.core.token_estimate.output_limit`)."""
    limit = output_limit(call)
    if limit is not None and generated > limit:
        generated = limit
    usage = call.accounting.usage = Usage(input=estimate_prompt_tokens(call), output=generated)
    return usage


def _exceeded(refusal: Refusal) -> BudgetExceeded:
    """The 429 of ``refusal``: the budget is spent, or what is left is less than the request's
    worst case (both named, and when the budget resets)."""
    budget = refusal.budget
    reset = resets_at(budget.period, datetime.now(UTC).timestamp())
    when = "it does not reset" if reset is None else f"it resets at {rfc3339(reset)}"
    limit = max_nanos(budget)
    of_limit = f"${format_usd(refusal.spent)} of ${format_usd(limit)} per {budget.period}"
    what = {"key": "key", "team": "team", "user": "end user"}[refusal.scope]
    if refusal.spent >= limit:
        message = f"the {what} budget is spent ({of_limit}); {when}"
    else:
        message = (
            f"this request may cost up to ${format_usd(refusal.needed)}, more than the "
            f"${format_usd(limit - refusal.spent)} left of the {what} budget ({of_limit} spent): "
            f"lower its output limit or its number of answers, or wait: {when}"
        )
    return BudgetExceeded(message, scope=refusal.scope)
