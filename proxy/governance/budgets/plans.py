"""What a budget reservation is made of: the plan of a set of budgeted scopes for one UTC day,
the reservation a request holds, a refusal, a soft-limit crossing, and the arithmetic of budget
periods (:mod:`proxy.governance.budgets.counters` keeps the counters; this module does no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple

import msgspec

from proxy.core.canonical import Budget, BudgetPeriod
from proxy.governance.pricing import NANOS_PER_USD

Scope = Literal["key", "team", "user"]

DAY = 86_400
_UNROLLED = ("1d", "lifetime")  # periods that read no past day


def max_nanos(budget: Budget) -> int:
    """``budget.max_usd`` in nano-dollars."""
    return round(budget.max_usd * NANOS_PER_USD)


def soft_nanos(budget: Budget) -> int | None:
    """``budget.soft_usd`` in nano-dollars, or None."""
    return None if budget.soft_usd is None else round(budget.soft_usd * NANOS_PER_USD)


def day_of(now: float) -> int:
    """The UTC day number of the UNIX time ``now``."""
    return int(now // DAY)


def resets_at(period: BudgetPeriod, now: float) -> datetime | None:
    """When ``period``'s window next moves (calendar periods: resets), None for ``lifetime``."""
    if period == "lifetime":
        return None
    today = datetime.fromtimestamp(day_of(now) * DAY, UTC)
    if period == "1mo":
        year, month = (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)
        return today.replace(year=year, month=month, day=1)
    return today + timedelta(days=1)


class Reservation(msgspec.Struct, eq=False, gc=False):
    """What one request reserved: ``nanos`` on the counters of its ``plan`` (its budgeted
    scopes, the counters their periods read on the plan's UTC day). ``soft``: whether a scope
    has a soft limit (settling must then read the counters:
    :meth:`~proxy.governance.budgets.counters.SpendCounters.settle`; else
    :meth:`~proxy.governance.budgets.counters.SpendCounters.correct`). Compared by identity (the
    cost plugin keeps those in flight in a set)."""

    plan: Plan
    nanos: int
    soft: bool

    def holds(self, scope: Scope, ident: str) -> bool:
        """Whether this reservation is on ``scope`` / ``ident``."""
        return any(s == scope and i == ident for s, i, _ in self.plan.scopes)


class Refusal(NamedTuple):
    """A scope that refused a reservation: which, its budget, what its period had spent
    (charged plus reserved) and what the request ``needed`` (its worst case), in nano-dollars.
    The budget is spent when ``spent`` reached it; else what is left is less than ``needed``."""

    scope: Scope
    ident: str
    budget: Budget
    spent: int
    needed: int


class Crossing(NamedTuple):
    """A scope whose spend just crossed its soft limit."""

    scope: Scope
    ident: str
    budget: Budget
    spent: int


class Plan:
    """What a reservation on ``scopes`` on UTC ``day`` takes: the counters their periods read
    (``keys``) and those counters' ``ttls``, the budgets in nano-dollars (``limits``), the
    indices of the scopes whose past days count (a rolling window or the month), whether one
    has a soft limit, ``net``, and the corrections ``owed`` to its counters."""

    __slots__ = (
        "day",
        "keys",
        "limits",
        "net",
        "owed",
        "owing",
        "rolling",
        "scopes",
        "soft",
        "ttls",
    )

    def __init__(
        self,
        scopes: tuple[tuple[Scope, str, Budget], ...],
        day: int,
        keys: list[str],
        ttls: list[float | None],
    ) -> None:
        self.scopes = scopes
        self.day = day
        self.keys = keys
        self.ttls = ttls
        self.limits = [max_nanos(budget) for _, _, budget in scopes]
        self.rolling = [i for i, (_, _, b) in enumerate(scopes) if b.period not in _UNROLLED]
        self.soft = any(budget.soft_usd is not None for _, _, budget in scopes)
        self.net: list[Any] = [0.0, -1, []]
        """With rolling scopes: ``[when, generation, limits]``, the limits less what the past
        days spent as computed at monotonic time ``when`` (reused for as long as those sums
        are)."""
        self.owed = 0
        """Nano-dollars the requests that ended owe every counter (their real cost less their
        reservation), not yet sent to the store
        (:meth:`~proxy.governance.budgets.counters.SpendCounters.correct`)."""
        self.owing = False
        """Whether the plan is among those
        :meth:`~proxy.governance.budgets.counters.SpendCounters.send_corrections` sends."""
