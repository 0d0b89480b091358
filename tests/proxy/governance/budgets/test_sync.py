"""proxy/governance/budgets/sync.py: the budget counters are rebuilt from the ledger on start (only
those the store does not hold), a scope that spent without a budget is re-read once it has one, and
a database that cannot answer leaves the counters as they are, logged."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing

from proxy.core.canonical import Budget
from proxy.core.metrics import Metrics
from proxy.db import Database
from proxy.governance.budgets.counters import SpendCounters
from proxy.governance.budgets.sync import CounterSync
from proxy.governance.ledger.journal import Journal
from proxy.governance.ledger.records import RecordIds, SpendRecord
from proxy.governance.ledger.spend_db import SpendRepository
from proxy.governance.ledger.writer import LedgerWriter
from proxy.state.memory_store import MemoryStore
from tests.waiting import until

IDS = RecordIds()
MONTH = Budget(max_usd=1.0, period="1mo")


def spent(key_id: str, team: str | None, nanos: int) -> SpendRecord:
    return SpendRecord(
        IDS(), "r", time.time(), key_id, None, team, None, "openai", "m", "p", "m",
        1, 0, 0, 1, 0, nanos, "estimated", None, 200, None, 1.0, None, 1, None, None,
    )  # fmt: skip


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path}/data/crossway.db")
    yield database
    await database.close()


def sync(database: Any, tmp_path: Path, store: MemoryStore, events: list) -> CounterSync:
    counters = SpendCounters(store)
    logger = structlog.get_logger()
    ledger = LedgerWriter(SpendRepository(database), Journal(tmp_path / "j"), Metrics(), logger)
    return CounterSync(counters, ledger, database, logger, lambda s, i: 0, lambda: events.append(1))


async def test_the_counters_are_rebuilt_from_the_ledger_once(database: Database, tmp_path: Path):
    await SpendRepository(database).write([spent("k1", "t", 300), spent("k1", None, 200)])
    store = MemoryStore(time.time)
    today = f"d{int(time.time() // 86_400)}"
    await store.set(f"crossway:spend:team:t:{today}", b"7")  # a shared store already kept it
    await sync(database, tmp_path, store, []).rebuild()
    assert await store.get(f"crossway:spend:key:k1:{today}") == b"500"
    assert await store.get("crossway:spend:key:k1:all") == b"500"
    assert await store.get(f"crossway:spend:team:t:{today}") == b"7"


async def test_the_rebuild_counts_what_an_earlier_run_left_in_the_journal(
    database: Database, tmp_path: Path
):
    # Charged while the database was down, journaled, the process restarted: the journal is
    # replayed before the counters are read back, so the rebuilt budget is what was charged.
    await SpendRepository(database).write([spent("k1", None, 300)])
    earlier = Journal(tmp_path / "j")
    earlier.append([spent("k1", None, 200), spent("k1", None, 50)])
    earlier.release()
    store = MemoryStore(time.time)
    await sync(database, tmp_path, store, []).rebuild()
    today = f"d{int(time.time() // 86_400)}"
    assert await store.get(f"crossway:spend:key:k1:{today}") == b"550"
    assert await store.get("crossway:spend:key:k1:all") == b"550"
    assert list((tmp_path / "j").glob("ledger-*.jsonl")) == []


async def test_a_journal_that_cannot_be_replayed_leaves_the_rebuild_to_the_database(
    database: Database, tmp_path: Path
):
    class Unreadable:
        async def catch_up(self) -> None:
            raise PermissionError("the journal directory cannot be read")

    await SpendRepository(database).write([spent("k1", None, 300)])
    store = MemoryStore(time.time)
    counters = SpendCounters(store)
    logger = structlog.get_logger()
    ledger: Any = Unreadable()
    counter_sync = CounterSync(counters, ledger, database, logger, lambda s, i: 0, list)
    with structlog.testing.capture_logs() as logs:
        await counter_sync.rebuild()
    assert await store.get("crossway:spend:key:k1:all") == b"300"
    events = [entry["event"] for entry in logs]
    assert events == ["budget_rebuild_before_journal_replayed", "budget_counters_rebuilt"]


async def test_a_scope_that_spent_uncounted_is_reread_once_it_has_a_budget(
    database: Database, tmp_path: Path
):
    store = MemoryStore(time.time)
    counter_sync = sync(database, tmp_path, store, [])
    assert not counter_sync.watching
    counter_sync.uncounted("key", "k1")  # it spends without a budget
    await SpendRepository(database).write([spent("k1", None, 900)])
    assert counter_sync.watching
    counter_sync.check((("key", "k1", MONTH),))
    assert not counter_sync.watching  # nothing else spent uncounted
    today = f"d{int(time.time() // 86_400)}"
    day = f"crossway:spend:key:k1:{today}"
    await until(lambda: store._data.get(day) is not None, what="the re-read")
    assert await store.get(day) == b"900"
    started = set(counter_sync._tasks)  # the re-read, if its done callback has not run yet
    counter_sync.check((("key", "k1", MONTH),))  # once only: no new re-read
    assert counter_sync._tasks <= started


async def test_a_database_that_fails_leaves_the_counters_as_they_are(tmp_path: Path):
    class Down:
        async def fetch(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("the database is down")

        def __getattr__(self, name: str) -> Any:
            raise OSError("the database is down")

    store = MemoryStore(time.time)
    with structlog.testing.capture_logs() as logs:
        await sync(Down(), tmp_path, store, []).rebuild()
    assert store._data == {}
    assert [entry["event"] for entry in logs] == ["budget_counters_not_rebuilt"]
