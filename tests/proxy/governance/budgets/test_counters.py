"""proxy/governance/budgets/counters.py: live spend counters, the admission rule, periods, soft
limits, rebuild."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from proxy.core.canonical import Budget
from proxy.governance.budgets.counters import SpendCounters
from proxy.governance.budgets.plans import Refusal, Reservation, day_of, resets_at
from proxy.state.memory_store import MemoryStore
from tests.faults import FakeClock

DAY = 86_400.0
USD = 1_000_000_000
# 2026-12-15 12:00 UTC: mid-month, mid-day.
NOON = datetime(2026, 12, 15, 12, tzinfo=UTC).timestamp()


class Harness:
    def __init__(self, now: float = NOON) -> None:
        self.clock = FakeClock(now)
        self.store = MemoryStore(self.clock)
        self.counters = SpendCounters(self.store, clock=self.clock)

    async def spend(self, nanos: int, budget: Budget, ident: str = "k", scope: str = "key") -> bool:
        """One whole request costing ``nanos`` with worst case ``nanos``; whether admitted."""
        reservation, refusal = await self.counters.reserve(((scope, ident, budget),), nanos)
        if reservation is None:
            assert refusal is not None
            return False
        await self.counters.settle(reservation, nanos)
        return True


async def test_a_scope_is_refused_once_its_spend_reaches_the_budget() -> None:
    h = Harness()
    budget = Budget(max_usd=1.0, period="1d")
    assert [await h.spend(USD // 4, budget) for _ in range(5)] == [True] * 4 + [False]
    assert await h.counters.spent("key", "k", "1d") == USD


async def reserve(
    counters: SpendCounters, scopes: Any, nanos: int, at_once: bool
) -> tuple[Reservation | None, Refusal | None]:
    """Reserve as the cost plugin does: at once when the counters can, else awaited."""
    made = counters.reserve_now(scopes, nanos) if at_once else None
    return made if made is not None else await counters.reserve(scopes, nanos)


@pytest.mark.parametrize("at_once", [True, False], ids=["at-once", "awaited"])
@pytest.mark.parametrize("period", ["1d", "7d", "lifetime"])
async def test_a_reservation_that_would_pass_the_budget_is_refused(
    at_once: bool, period: str
) -> None:
    h = Harness()
    counters = h.counters if at_once else SpendCounters(AwaitedOnly(h.clock), clock=h.clock)
    budget = Budget(max_usd=1.0, period=period)  # type: ignore[arg-type]
    scopes = (("key", "k", budget),)
    made, _ = await reserve(counters, scopes, 3 * USD // 4, at_once)
    assert made is not None
    counters.correct(made, USD // 2)  # owed to the counters, not sent yet
    # Half the budget is spent: a worst case of more than the half left is refused, naming
    # what was spent and what it needed; nothing is reserved.
    made, refusal = await reserve(counters, scopes, USD // 2 + 1, at_once)
    assert made is None
    assert refusal == ("key", "k", budget, USD // 2, USD // 2 + 1)
    assert await counters.spent("key", "k", period) == USD // 2
    made, refusal = await reserve(counters, scopes, USD // 2, at_once)  # what is left fits
    assert refusal is None
    assert made is not None
    assert await counters.spent("key", "k", period) == USD
    made, refusal = await reserve(counters, scopes, 0, at_once)  # reached: nothing fits
    assert made is None
    assert refusal == ("key", "k", budget, USD, 0)


async def test_concurrent_reservations_see_each_other() -> None:
    h = Harness()
    budget = Budget(max_usd=5.0, period="1d")
    # 20 requests reserve 1 USD each before any of them ends: five fit.
    results = await asyncio.gather(
        *(h.counters.reserve((("key", "k", budget),), USD) for _ in range(20))
    )
    admitted = [made for made, _ in results if made is not None]
    assert len(admitted) == 5
    refusals = [refusal for _, refusal in results if refusal is not None]
    assert {refusal.scope for refusal in refusals} == {"key"}
    # They cost less than reserved: the corrections free the rest of the budget.
    for made in admitted:
        await h.counters.settle(made, USD // 2)
    assert await h.counters.spent("key", "k", "1d") == 5 * USD // 2
    assert await h.spend(USD, budget)


async def test_a_refused_request_keeps_nothing_reserved_on_any_scope() -> None:
    h = Harness()
    tight, loose = Budget(max_usd=1.0, period="1d"), Budget(max_usd=100.0, period="1d")
    await h.spend(USD, tight, ident="t", scope="team")  # the team is spent
    scopes = (("key", "k", loose), ("team", "t", tight))
    made, refusal = await h.counters.reserve(scopes, USD)  # type: ignore[arg-type]
    assert made is None
    assert refusal is not None
    assert refusal.scope == "team"
    assert await h.counters.spent("key", "k", "1d") == 0  # the key's reservation was released


class AwaitedOnly(MemoryStore):
    """A store that answers only when awaited, as a remote one does."""

    incr_within_now = None  # type: ignore[assignment]

    async def incr_within(self, *args: Any) -> tuple[int | None, list[int]]:
        return MemoryStore.incr_within_now(self, *args)


async def test_a_reservation_on_the_memory_store_needs_no_wait() -> None:
    h = Harness()
    day, month = Budget(max_usd=1.0, period="1d"), Budget(max_usd=1.0, period="1mo")
    made = h.counters.reserve_now((("key", "k", day),), USD // 4)
    assert made is not None
    reservation, refusal = made
    assert reservation is not None
    assert refusal is None
    assert await h.counters.spent("key", "k", "1d") == USD // 4
    # A month reads its past days first (kept a minute): then without a wait too.
    scopes = (("team", "t", month),)
    assert h.counters.reserve_now(scopes, USD) is None  # nothing reserved
    assert await h.counters.spent("team", "t", "1mo") == 0
    await h.counters.reserve(scopes, USD // 2)
    made = h.counters.reserve_now(scopes, USD // 2)
    assert made is not None
    assert made[0] is not None
    made = h.counters.reserve_now(scopes, USD)  # the budget is spent: refused at once
    assert made is not None
    assert made[0] is None
    assert made[1] is not None
    assert (made[1].scope, made[1].spent) == ("team", USD)


async def test_a_store_that_must_be_awaited_is_never_asked_without_a_wait() -> None:
    counters = SpendCounters(AwaitedOnly(), clock=FakeClock(NOON))
    budget = Budget(max_usd=1.0, period="1d")
    assert counters.reserve_now((("key", "k", budget),), USD) is None
    reservation, _ = await counters.reserve((("key", "k", budget),), USD)
    assert reservation is not None
    assert await counters.spent("key", "k", "1d") == USD


async def test_a_day_budget_resets_at_midnight_utc() -> None:
    h = Harness()
    budget = Budget(max_usd=1.0, period="1d")
    assert await h.spend(USD, budget)
    assert not await h.spend(1, budget)
    h.clock.advance(12 * 3600)  # midnight
    assert await h.spend(1, budget)
    assert resets_at("1d", NOON) == datetime(2026, 12, 16, tzinfo=UTC)


async def test_a_rolling_window_counts_whole_days() -> None:
    h = Harness()
    budget = Budget(max_usd=3.0, period="7d")
    for _ in range(3):  # 1 USD on each of three days
        assert await h.spend(USD, budget)
        h.clock.advance(DAY)
        h.counters.forget_past_days()  # the minute-long cache of past days, in test time
    assert not await h.spend(1, budget)
    h.clock.advance(4 * DAY)  # the first day leaves the window after 7 days
    h.counters.forget_past_days()
    assert await h.counters.spent("key", "k", "7d") == 2 * USD
    assert await h.spend(1, budget)


async def test_a_calendar_month_resets_on_the_first() -> None:
    h = Harness(datetime(2026, 12, 31, 23, tzinfo=UTC).timestamp())
    budget = Budget(max_usd=1.0, period="1mo")
    assert await h.spend(USD, budget)
    assert not await h.spend(1, budget)
    assert resets_at("1mo", h.clock()) == datetime(2027, 1, 1, tzinfo=UTC)
    h.clock.advance(3600)
    h.counters.forget_past_days()
    assert await h.spend(1, budget)


async def test_a_lifetime_budget_never_resets() -> None:
    h = Harness()
    budget = Budget(max_usd=1.0, period="lifetime")
    assert await h.spend(USD, budget)
    h.clock.advance(400 * DAY)
    assert not await h.spend(1, budget)
    assert resets_at("lifetime", NOON) is None


async def test_a_scope_given_a_budget_is_overwritten_with_what_the_ledger_holds() -> None:
    h = Harness()
    today = day_of(NOON)
    await h.counters.overwrite("key", "k", [(today, 2 * USD), (today - 1, USD)], 9 * USD)
    assert await h.counters.spent("key", "k", "1d") == 2 * USD
    assert await h.counters.spent("key", "k", "7d") == 3 * USD
    assert await h.counters.spent("key", "k", "lifetime") == 9 * USD
    assert not await h.spend(1, Budget(max_usd=3.0, period="7d"))
    assert await h.spend(1, Budget(max_usd=10.0, period="lifetime"))


async def test_the_soft_limit_is_crossed_once_by_the_charge_that_crosses_it() -> None:
    h = Harness()
    budget = Budget(max_usd=10.0, period="1d", soft_usd=2.5)
    crossings = []
    for _ in range(5):
        made, _ = await h.counters.reserve((("key", "k", budget),), USD)
        assert made is not None
        crossings.append(await h.counters.settle(made, USD))
    assert [len(c) for c in crossings] == [0, 0, 1, 0, 0]
    crossing = crossings[2][0]
    assert crossing.spent == 3 * USD
    assert await h.counters.first_alert(crossing, h.clock())
    assert not await h.counters.first_alert(crossing, h.clock())  # once a period


async def test_rebuild_seeds_only_what_the_store_does_not_hold() -> None:
    h = Harness()
    today = day_of(NOON)
    await h.spend(USD, Budget(max_usd=100, period="1d"), ident="live")
    await h.spend(USD, Budget(max_usd=100, period="lifetime"), ident="live")
    written = await h.counters.rebuild(
        [("key", "live", today, 9 * USD), ("key", "old", today - 3, 2 * USD)],
        [("key", "live", 9 * USD), ("key", "old", 5 * USD)],
    )
    assert written == 2  # the live counters win
    assert await h.counters.spent("key", "live", "1d") == USD
    assert await h.counters.spent("key", "live", "lifetime") == USD
    assert await h.counters.spent("key", "old", "30d") == 2 * USD
    assert await h.counters.spent("key", "old", "lifetime") == 5 * USD


@pytest.mark.parametrize(
    ("period", "expected"),
    [("1d", "2026-12-16"), ("7d", "2026-12-16"), ("30d", "2026-12-16"), ("1mo", "2027-01-01")],
)
def test_when_each_period_moves(period: str, expected: str) -> None:
    moved = resets_at(period, NOON)  # type: ignore[arg-type]
    assert moved is not None
    assert moved.date().isoformat() == expected
