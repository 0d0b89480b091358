"""Keeping the budget counters true to the spend ledger: rebuilt on start, re-read for a scope
that starts to have a budget.

The live counters (:mod:`proxy.governance.budgets.counters`) count only the spend of scopes that
have a budget. On start they are rebuilt from the ledger (keys and teams, and the
:data:`REBUILD_USERS` most recent end users, over the last :data:`REBUILD_DAYS` days and ever), once
the journal an earlier run left is replayed into the database
(:meth:`~proxy.governance.ledger.writer.LedgerWriter.catch_up`), so that what clients were charged
while the database was down counts too. A scope seen spending without a budget is remembered
(:meth:`CounterSync.uncounted`); when it is later seen with one, its counters are re-read from the
ledger in the background (:meth:`CounterSync.check`) — what it spent meanwhile was not counted —
while requests go on against what the counters held. Past :data:`MAX_TRACKED` such scopes every
budgeted scope is re-read once.

A database that does not answer within :data:`REBUILD_TIMEOUT` seconds is logged; the counters
then keep what the store holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from proxy.core.canonical import Budget
from proxy.governance.budgets.counters import SpendCounters
from proxy.governance.budgets.plans import Scope, day_of
from proxy.governance.ledger.spend_db import SpendRepository
from proxy.governance.ledger.writer import LedgerWriter
from proxy.state.store import StoreUnavailable

REBUILD_DAYS = 40
REBUILD_USERS = 10_000
REBUILD_TIMEOUT = 30.0
MAX_TRACKED = 100_000


class CounterSync:
    """Rebuilds and re-reads ``counters`` from the ledger in ``database`` (module docstring).

    ``in_flight(scope, id)`` is what the requests in flight have reserved on a scope (kept on
    a re-read); ``unavailable()`` is called when the store cannot take the rebuild. Without a
    ledger writer or a database nothing is rebuilt or re-read.
    """

    def __init__(
        self,
        counters: SpendCounters,
        ledger: LedgerWriter | None,
        database: Any,
        logger: Any,
        in_flight: Callable[[Scope, str], int],
        unavailable: Callable[[], None],
    ) -> None:
        self._counters = counters
        self._ledger = ledger
        self._database = database
        self._logger = logger
        self._in_flight = in_flight
        self._unavailable = unavailable
        self._uncounted: set[tuple[Scope, str]] = set()
        self._resynced: set[tuple[Scope, str]] = set()
        self._lost_track = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.watching = False
        """Whether a budgeted scope may need a re-read (:meth:`check` has work to do): an
        attribute, not a property, as the hot path reads it on every budgeted request."""

    def uncounted(self, scope: Scope, ident: str) -> None:
        """``scope`` spends while its counters are not kept up (it has no budget)."""
        uncounted = self._uncounted
        if (scope, ident) in uncounted:
            return
        if len(uncounted) < MAX_TRACKED:
            uncounted.add((scope, ident))
        else:
            self._lost_track = True
        self.watching = True

    def check(self, budgeted: tuple[tuple[Scope, str, Budget], ...]) -> None:
        """Start a background re-read for each of ``budgeted`` that spent uncounted."""
        for scope, ident, _ in budgeted:
            if self._resync_needed(scope, ident):
                task = asyncio.get_running_loop().create_task(self._reread(scope, ident))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def rebuild(self) -> None:
        """Seed the counters from the ledger (only those the store does not hold yet), its
        journal replayed first. A replay that fails or takes longer than
        :data:`REBUILD_TIMEOUT` is logged and the counters are rebuilt from what the database
        holds (the rest is replayed in the background, uncounted)."""
        if self._database is None:
            return
        if self._ledger is not None:
            await self._catch_up(self._ledger)
        now = self._counters.clock()
        since = datetime.fromtimestamp(now, UTC) - timedelta(days=REBUILD_DAYS)
        try:
            async with asyncio.timeout(REBUILD_TIMEOUT):
                repository = SpendRepository(self._database)
                days = await repository.day_sums(since, REBUILD_USERS)
                totals = await repository.lifetime_sums()
        except Exception as exc:
            self._logger.warning(
                "budget_counters_not_rebuilt", reason=f"{type(exc).__name__}: {exc}"
            )
            return
        by_number = [(scope, ident, day_of(_day_start(day)), n) for scope, ident, day, n in days]
        try:
            written = await self._counters.rebuild(by_number, totals)
        except StoreUnavailable:
            self._unavailable()
            return
        self._logger.info("budget_counters_rebuilt", counters=written)

    async def _catch_up(self, ledger: LedgerWriter) -> None:
        """Replay the journal an earlier run left, within :data:`REBUILD_TIMEOUT`."""
        try:
            async with asyncio.timeout(REBUILD_TIMEOUT):
                await ledger.catch_up()
        except Exception as exc:
            self._logger.warning(
                "budget_rebuild_before_journal_replayed", reason=f"{type(exc).__name__}: {exc}"
            )

    def close(self) -> None:
        """Stop the re-reads in progress."""
        for task in list(self._tasks):
            task.cancel()

    def _resync_needed(self, scope: Scope, ident: str) -> bool:
        key = (scope, ident)
        if key in self._resynced:
            return False
        if key not in self._uncounted and not self._lost_track:
            return False
        if len(self._resynced) >= MAX_TRACKED:
            self._resynced.clear()
        self._resynced.add(key)
        self._uncounted.discard(key)
        self.watching = bool(self._uncounted) or self._lost_track
        return self._ledger is not None and self._database is not None

    async def _reread(self, scope: Scope, ident: str) -> None:
        assert self._ledger is not None
        now = self._counters.clock()
        since = datetime.fromtimestamp(now, UTC) - timedelta(days=REBUILD_DAYS)
        try:
            await self._ledger.flush()
            async with asyncio.timeout(REBUILD_TIMEOUT):
                days, total = await SpendRepository(self._database).scope_sums(scope, ident, since)
            in_flight = self._in_flight(scope, ident)
            today = day_of(now)
            spent = {day_of(_day_start(day)): nanos for day, nanos in days}
            spent[today] = spent.get(today, 0) + in_flight
            await self._counters.overwrite(scope, ident, spent.items(), total + in_flight)
            self._logger.info("budget_counters_reread", scope=scope)
        except Exception as exc:
            self._logger.warning(
                "budget_counters_not_reread", scope=scope, reason=f"{type(exc).__name__}: {exc}"
            )


def _day_start(day: str) -> float:
    """The UNIX time of a ledger ``day`` (``YYYY-MM-DD``, UTC)."""
    return datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()
