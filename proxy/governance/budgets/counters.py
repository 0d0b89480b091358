"""Budgets: live spend per key, team and end user, and the admission rule that enforces them.

Spend lives in the state store (:mod:`proxy.state.store`), so that a shared backend shares it:

- ``crossway:spend:<scope>:<id>:d<day>`` — nano-dollars charged on one UTC day (``day`` counts
  days since 1970-01-01), kept 40 days;
- ``crossway:spend:<scope>:<id>:all`` — nano-dollars charged ever.

``scope`` is ``key``, ``team`` or ``user``. The counters include the reservations of requests
still in flight. They are rebuilt from the spend ledger when the gateway starts
(:meth:`SpendCounters.rebuild`, which sets only counters the store does not hold yet), and
kept up by the requests of scopes that have a budget — the day counters for a period budget,
the lifetime counter for a ``lifetime`` one: one store operation
(:meth:`~proxy.state.store.Store.incr_within`, one round trip on Redis) reserves on every scope of a
request at once, and one corrects them to the real cost when it ends — without waiting
(:meth:`SpendCounters.correct`) unless a scope has a soft limit, whose crossing needs the
counters read back.

A correction a shared store does not take (:class:`~proxy.state.store.StoreUnavailable`) added
nothing and never will (the store voids it), so it is owed and sent again — in the next
reservation of its scopes, or alone after :data:`FIRST_RETRY` s, doubling while sends fail up to
:data:`MAX_RETRY` — until it lands. What is owed is one sum per set of scopes, at most
:data:`MAX_OWING` sets (past that the oldest is dropped, as is what is owed at close; both
reported to ``on_lost``): a dropped correction leaves its counters above the ledger by it
until they are re-read or the period passes.
A scope that starts to have a budget is re-read from the ledger (:meth:`SpendCounters.
overwrite`; the ``cost`` plugin does it in the background the first time it sees the budget).

A budget's period decides which counters it reads, in UTC:

- ``1d``: the current calendar day (resets at midnight UTC);
- ``7d``, ``30d``: rolling windows of whole days — today and the 6 (29) days before it; the
  oldest day leaves the window at each midnight UTC;
- ``1mo``: the current calendar month (resets on the first, at midnight UTC);
- ``lifetime``: never resets.

Admission: a request reserves its worst-case cost on every scope at once (atomically, on
every scope or none) only if each scope's spend in the period (charged plus reserved) plus
that worst case stays within ``max_usd``; otherwise nothing is reserved and the request is
refused — a scope whose budget is spent refuses every request, one with less left than a
request's worst case refuses that request. The reservation is corrected to the real cost when
the request ends. Concurrent requests therefore see each other's reservations: with room for
five worst cases, twenty concurrent requests are admitted about five at a time.

The bound: charged plus reserved never passes ``max_usd`` at an admission, and a correction
lowers it unless a request cost more than its reservation — so a period's spend never exceeds
``max_usd`` except by what requests cost beyond their own worst case (a reply whose usage is
larger than the estimate the reservation was made of: see the ``cost`` plugin).

Sums of whole past days (for ``7d``, ``30d``, ``1mo``) are read from the store at most once a
minute per scope and kept in process; today's counter is always read live.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

from proxy.core.canonical import Budget, BudgetPeriod
from proxy.governance.budgets.plans import (
    DAY,
    Crossing,
    Plan,
    Refusal,
    Reservation,
    Scope,
    day_of,
    soft_nanos,
)
from proxy.state.store import AnswersNow, Store, StoreUnavailable

Clock = Callable[[], float]
AddNow = Callable[
    [Sequence[str], int, Sequence[int] | None, Sequence[float | None], int],
    tuple[int | None, list[int]],
]
""":meth:`~proxy.state.store.AnswersNow.incr_within_now`, as :class:`SpendCounters` keeps it."""
_PREFIX = "crossway:spend:"
_KEEP_DAYS = 40
_DAY_TTL = _KEEP_DAYS * DAY
_CLOSED_TTL = 60.0
_WINDOW_DAYS = {"1d": 1, "7d": 7, "30d": 30}
_MAX_CACHED = 10_000
FIRST_RETRY = 0.05  # seconds before correcting again after a send that failed (doubled while
MAX_RETRY = 2.0  # sends keep failing, up to this)
MAX_OWING = 100_000  # sets of scopes with corrections owed; past it the oldest is dropped


class SpendCounters:
    """The live spend counters in ``store`` (see the module docstring).

    Every method may raise :class:`~proxy.state.store.StoreUnavailable`; the caller applies its
    failure policy. ``clock`` is wall time (UNIX seconds) so that days agree between instances.
    Whether the store answers at once (:class:`~proxy.state.store.AnswersNow`, which
    :meth:`reserve_now` needs) is decided here, once. ``on_lost(nanos)`` is told of
    corrections dropped (module docstring).
    """

    def __init__(
        self,
        store: Store,
        clock: Clock = time.time,
        on_lost: Callable[[int], None] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._on_lost = on_lost
        self._retry = 0.0  # seconds before the next send while sends fail; 0: at once
        self._sends: set[asyncio.Task[None]] = set()
        self._closed: dict[tuple[str, str, int, str], tuple[float, int]] = {}
        self._generation = 0  # moves whenever past days' sums may have changed
        self._names: dict[tuple[str, str, int], tuple[str, str]] = {}
        self._plans: dict[tuple[tuple[Scope, str, Budget], ...], Plan] = {}
        self._same: dict[int, Plan] = {}  # by id of the tuple it was made from: no hashing
        self._owing: list[Plan] = []
        self._sending: asyncio.Handle | None = None
        self._add_now: AddNow | None = (
            store.incr_within_now if isinstance(store, AnswersNow) else None
        )

    def reserve_now(
        self, scopes: tuple[tuple[Scope, str, Budget], ...], nanos: int
    ) -> tuple[Reservation | None, Refusal | None] | None:
        """:meth:`reserve` in one synchronous step, when it needs no wait: the store adds
        without waiting (:meth:`~proxy.state.store.AnswersNow.incr_within_now`) and the sums of
        the past days the scopes' periods read are kept. Returns None otherwise, having done
        nothing (then await :meth:`reserve`). May raise what the store's step raises (nothing
        reserved)."""
        add_now = self._add_now
        if add_now is None:
            return None
        plan = self._today(scopes)
        limits = plan.limits
        if plan.rolling:
            stamp, generation, limits = plan.net
            if generation != self._generation or time.monotonic() - stamp >= _CLOSED_TTL:
                return None  # past days to read: reserve() reads them
        # From here as reserve(), with the store's synchronous step, which checks the limits
        # as if the owed corrections it carries were already added (no lowered limits to build).
        owed = plan.owed
        plan.owed = 0
        try:
            refused, values = add_now(plan.keys, nanos, _room_for(limits, nanos), plan.ttls, owed)
        except BaseException:
            self._owe(plan, owed)  # still owed: nothing was added
            raise
        if refused is None:
            return Reservation(plan, nanos, plan.soft), None
        lowered = [limit - owed for limit in limits]
        return None, self._refused(plan, owed, lowered, refused, values, nanos)

    async def reserve(
        self, scopes: tuple[tuple[Scope, str, Budget], ...], nanos: int
    ) -> tuple[Reservation | None, Refusal | None]:
        """Reserve ``nanos`` on every scope (``(scope, id, budget)``) in the counter its budget's
        period reads (today's, or the lifetime one), unless a scope's period spend plus ``nanos``
        would pass its budget (or has reached it): then nothing is reserved. One store operation
        for every scope (:meth:`~proxy.state.store.Store.incr_within`).

        Returns the reservation (to :meth:`correct` or :meth:`settle` later), or the refusal.
        """
        plan = self._today(scopes)
        limits = plan.limits
        if plan.rolling:
            limits = await self._net_limits(plan)
        owed = plan.owed
        if owed:  # as in reserve_now()
            plan.owed = 0
            limits = list(map(owed.__rsub__, limits))
        try:
            refused, values = await self._store.incr_within(
                plan.keys, nanos + owed, _room_for(limits, nanos), plan.ttls
            )
        except BaseException:
            self._owe(plan, owed)
            raise
        if refused is None:
            return Reservation(plan, nanos, plan.soft), None
        return None, self._refused(plan, owed, limits, refused, values, nanos)

    def _today(self, scopes: tuple[tuple[Scope, str, Budget], ...]) -> Plan:
        """The plan of ``scopes`` for today (found by the tuple's identity before hashing it:
        hashing the budgets costs more)."""
        clock = self._clock  # (an attribute, then a call: a method load would not specialise)
        day = clock() // DAY  # a float: int() is dearer than comparing it to the plan's day
        plan = self._same.get(id(scopes))
        if plan is None or plan.scopes is not scopes or plan.day != day:
            plan = self._plans.get(scopes)
            if plan is None or plan.day != day:
                plan = self._plan(int(day), scopes)
        return plan

    async def _net_limits(self, plan: Plan) -> list[int]:
        """``plan``'s limits less what the past days its rolling scopes read spent (kept in
        ``plan.net`` for as long as those sums are)."""
        now = time.monotonic()
        stamp, generation, net = plan.net
        if generation == self._generation and now - stamp < _CLOSED_TTL:
            return net  # type: ignore[no-any-return]
        limits = list(plan.limits)
        for index in plan.rolling:
            scope, ident, budget = plan.scopes[index]
            limits[index] -= await self._closed_days(scope, ident, budget.period, plan.day)
            stamp = self._closed.get((scope, ident, plan.day, budget.period), (now, 0))[0]
            now = min(now, stamp)  # as old as the oldest sum it used
        plan.net[:] = (now, self._generation, limits)
        return limits

    def _refused(
        self,
        plan: Plan,
        owed: int,
        limits: list[int],
        refused: int,
        values: list[int],
        needed: int,
    ) -> Refusal:
        """The refusal of the scope at index ``refused``, whose counters hold ``values``, of a
        reservation of ``needed``; ``limits`` are the plan's less what its past days spent and
        what the reservation carried (``owed``), which is owed again."""
        self._owe(plan, owed)
        scope, ident, budget = plan.scopes[refused]
        spent = values[refused] + plan.limits[refused] - limits[refused]
        return Refusal(scope, ident, budget, spent, needed)

    def correct(self, reservation: Reservation, nanos: int) -> bool:
        """Correct ``reservation`` to the real cost ``nanos`` without waiting and without
        raising, unless one of its scopes has a soft limit: then nothing is done and False
        returned (:meth:`settle` it instead).

        The difference is owed to the counters until the next reservation on the same scopes
        carries it (in its store operation), or :meth:`send_corrections` sends it, at the
        latest at the end of this loop turn — or, while the store cannot take it, until a send
        lands (module docstring). Reservations meanwhile are checked as if it had been
        applied."""
        if reservation.soft:
            return False
        nanos -= reservation.nanos
        plan = reservation.plan
        if plan.owing:  # _owe(), without its call: the plan is already among those owing
            plan.owed += nanos
        else:
            self._owe(plan, nanos)
        return True

    def _owe(self, plan: Plan, nanos: int) -> None:
        """Owe ``nanos`` to ``plan``'s counters, sent at the end of this loop turn at the
        latest (while sends fail, after the retry's wait)."""
        if not nanos:
            return
        plan.owed += nanos
        if not plan.owing:
            plan.owing = True
            self._owing.append(plan)
            if len(self._owing) > MAX_OWING:
                self._drop(self._owing.pop(0))
            if self._sending is None:
                loop = asyncio.get_running_loop()
                self._sending = (
                    loop.call_later(self._retry, self.send_corrections)
                    if self._retry
                    else loop.call_soon(self.send_corrections)
                )

    def send_corrections(self) -> None:
        """Send every correction still owed now (:meth:`correct`): to the memory store at once
        (:meth:`~proxy.state.store.Store.incr_later`, which cannot fail), to another in one
        background send that owes again what the store did not take."""
        if self._sending is not None:
            self._sending.cancel()
            self._sending = None
        owing, self._owing = self._owing, []
        sends: list[tuple[Plan, int]] = []
        for plan in owing:
            plan.owing = False
            owed, plan.owed = plan.owed, 0
            if not owed:
                continue
            if self._add_now is not None:
                self._store.incr_later(plan.keys, owed, plan.ttls)
            else:
                sends.append((plan, owed))
        if sends:
            task = asyncio.get_running_loop().create_task(self._send(sends))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send(self, sends: list[tuple[Plan, int]]) -> None:
        """Add each owed amount to its counters (their commands leave together); owe again
        what the store did not take, and drop what it never can (a key that is no counter)."""
        store = self._store
        results = await asyncio.gather(
            *(store.incr_within(plan.keys, owed, None, plan.ttls) for plan, owed in sends),
            return_exceptions=True,
        )
        retried = (StoreUnavailable, asyncio.CancelledError)
        down = any(isinstance(result, retried) for result in results)
        self._retry = min(max(2 * self._retry, FIRST_RETRY), MAX_RETRY) if down else 0.0
        for (plan, owed), result in zip(sends, results, strict=True):
            if isinstance(result, retried):
                self._owe(plan, owed)
            elif isinstance(result, BaseException) and self._on_lost is not None:
                self._on_lost(owed)

    def _drop(self, plan: Plan) -> None:
        """Give up what ``plan`` is owed (past :data:`MAX_OWING`, or at close)."""
        plan.owing = False
        owed, plan.owed = plan.owed, 0
        if owed and self._on_lost is not None:
            self._on_lost(owed)

    async def _sent(self) -> None:
        """Send what is owed and wait for the sends under way (what the store did not take
        is owed again)."""
        self.send_corrections()
        while self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)

    async def close(self) -> None:
        """:meth:`_sent`; then what the store still did not take is dropped (reported to
        ``on_lost``)."""
        await self._sent()
        if self._sending is not None:
            self._sending.cancel()
            self._sending = None
        owing, self._owing = self._owing, []
        for plan in owing:
            self._drop(plan)

    async def settle(self, reservation: Reservation, nanos: int) -> list[Crossing]:
        """Correct ``reservation`` to the real cost ``nanos`` (one store operation) and return
        the scopes whose soft limit this charge crossed. When the store cannot take it, the
        correction is owed (and sent as :meth:`correct`'s are, crossing no soft limit) and the
        error raised."""
        plan = reservation.plan
        delta = nanos - reservation.nanos
        try:
            _, totals = await self._store.incr_within(plan.keys, delta, None, plan.ttls)
        except (StoreUnavailable, asyncio.CancelledError):
            self._owe(plan, delta)  # the add was voided: sent again
            raise
        crossings: list[Crossing] = []
        for index, (scope, ident, budget) in enumerate(plan.scopes):
            soft = soft_nanos(budget)
            if soft is None:
                continue
            after = totals[index]
            if budget.period != "lifetime":
                after += await self._closed_days(scope, ident, budget.period, plan.day)
            if after - nanos < soft <= after:
                crossings.append(Crossing(scope, ident, budget, after))
        return crossings

    async def overwrite(
        self, scope: Scope, ident: str, days: Iterable[tuple[int, int]], total: int
    ) -> None:
        """Set one scope's counters to what the ledger holds: ``days`` as ``(day, nanos)`` (the
        kept days without an entry become 0) and ``total`` ever (a scope that starts to have a
        budget, whose counters were not kept up meanwhile)."""
        await self._sent()
        now_day = day_of(self._clock())
        spent = dict(days)
        for day in range(now_day - _KEEP_DAYS + 1, now_day + 1):
            key = self._keys(scope, ident, day)[0]
            remaining = (day + _KEEP_DAYS) * DAY - self._clock()
            await self._store.set(key, str(spent.get(day, 0)).encode(), ttl=remaining)
        await self._store.set(self._keys(scope, ident, now_day)[1], str(total).encode())
        self._closed = {k: v for k, v in self._closed.items() if k[:2] != (scope, ident)}
        self._generation += 1

    def clock(self) -> float:
        """The wall time these counters use (UNIX seconds)."""
        return self._clock()

    async def first_alert(self, crossing: Crossing, now: float) -> bool:
        """Whether ``crossing`` is the first of its scope in this period (alerts once a period;
        a rolling period once a day)."""
        budget = crossing.budget
        if budget.period == "lifetime":
            bucket = "all"
        elif budget.period == "1mo":
            bucket = datetime.fromtimestamp(now, UTC).strftime("m%Y%m")
        else:
            bucket = f"d{day_of(now)}"
        key = f"crossway:budget-alert:{crossing.scope}:{crossing.ident}:{budget.period}:{bucket}"
        return await self._store.incr(key, 1, ttl=_DAY_TTL) == 1

    async def spent(self, scope: Scope, ident: str, period: BudgetPeriod) -> int:
        """What ``scope`` / ``ident`` spent in ``period`` so far (reservations included; the
        corrections owed sent first)."""
        await self._sent()
        day = day_of(self._clock())
        day_key, all_key = self._keys(scope, ident, day)
        if period == "lifetime":
            return int(await self._store.get(all_key) or 0)
        today = int(await self._store.get(day_key) or 0)
        return today + await self._closed_days(scope, ident, period, day)

    async def rebuild(
        self,
        days: Iterable[tuple[Scope, str, int, int]],
        totals: Iterable[tuple[Scope, str, int]],
    ) -> int:
        """Seed the counters from the ledger: ``days`` as ``(scope, id, day, nanos)`` and
        ``totals`` as ``(scope, id, nanos)``. Only counters the store does not hold are set (a
        shared store that other instances already keep wins). Returns how many were set."""
        now_day = day_of(self._clock())
        written = 0
        for scope, ident, day, nanos in days:
            if day <= now_day - _KEEP_DAYS:
                continue
            key = self._keys(scope, ident, day)[0]
            remaining = (day + _KEEP_DAYS) * DAY - self._clock()
            written += await self._seed(key, nanos, remaining)
        for scope, ident, nanos in totals:
            written += await self._seed(self._keys(scope, ident, now_day)[1], nanos, None)
        self.forget_past_days()
        return written

    async def _seed(self, key: str, nanos: int, ttl: float | None) -> int:
        if await self._store.get(key) is not None:
            return 0
        await self._store.set(key, str(nanos).encode(), ttl=ttl)
        return 1

    async def _closed_days(self, scope: Scope, ident: str, period: BudgetPeriod, day: int) -> int:
        """The spend of the whole days before ``day`` that ``period`` covers (cached a
        minute)."""
        if period == "1d" or period == "lifetime":
            return 0
        cached = self._cached_closed(scope, ident, day, period)
        if cached is not None:
            return cached
        if period == "1mo":
            first = day_of(datetime.fromtimestamp(day * DAY, UTC).replace(day=1).timestamp())
            count = day - first
        else:
            count = _WINDOW_DAYS[period] - 1
        total = 0
        for past in range(day - count, day):
            total += int(await self._store.get(self._keys(scope, ident, past)[0]) or 0)
        if len(self._closed) >= _MAX_CACHED:
            self.forget_past_days()
        self._closed[(scope, ident, day, period)] = (time.monotonic(), total)
        return total

    def forget_past_days(self) -> None:
        """Drop the sums of past days kept in process: the next reservations read them anew."""
        self._closed.clear()
        self._generation += 1

    def _cached_closed(self, scope: Scope, ident: str, day: int, period: str) -> int | None:
        cached = self._closed.get((scope, ident, day, period))
        if cached is not None and time.monotonic() - cached[0] < _CLOSED_TTL:
            return cached[1]
        return None

    def _plan(self, day: int, scopes: tuple[tuple[Scope, str, Budget], ...]) -> Plan:
        """What reserving on ``scopes`` on ``day`` takes (kept per scopes, for one day)."""
        keys: list[str] = []
        ttls: list[float | None] = []
        for scope, ident, budget in scopes:
            day_key, all_key = self._keys(scope, ident, day)
            lifetime = budget.period == "lifetime"
            keys.append(all_key if lifetime else day_key)
            ttls.append(None if lifetime else _DAY_TTL)
        plan = Plan(scopes, day, keys, ttls)
        if len(self._same) >= _MAX_CACHED:  # (it holds every plan _plans does)
            self._plans.clear()
            self._same.clear()
        self._plans[scopes] = plan
        self._same[id(scopes)] = plan  # plan.scopes keeps the id from being reused
        return plan

    def _keys(self, scope: Scope, ident: str, day: int) -> tuple[str, str]:
        """The day and lifetime counter names (kept: formatting them costs more than a
        lookup)."""
        cached = (scope, ident, day)
        names = self._names.get(cached)
        if names is None:
            base = f"{_PREFIX}{scope}:{ident}:"
            if len(self._names) >= _MAX_CACHED:
                self._names.clear()
            names = self._names[cached] = (f"{base}d{day}", f"{base}all")
        return names


def _room_for(limits: list[int], nanos: int) -> list[int]:
    """What each counter must stay below for a reservation of ``nanos`` to fit its limit in
    ``limits``: :meth:`~proxy.state.store.Store.incr_within` refuses a counter that holds at least
    its limit, and ``value + nanos`` must not pass the budget (a reservation of nothing fits
    while the budget is not reached)."""
    if nanos <= 1:
        return limits
    return [limit - nanos + 1 for limit in limits]
