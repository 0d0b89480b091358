"""proxy/governance/ledger/writer.py and journal.py: batches, a failing or slow database, the
journal and its replay without duplicates, close, and every loss counted."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import structlog
import structlog.testing

from proxy.core.metrics import Metrics
from proxy.governance.ledger.journal import Journal
from proxy.governance.ledger.records import RecordIds, SpendRecord
from proxy.governance.ledger.writer import LedgerWriter
from tests.faults import FakeClock


class FakeDatabase:
    """A sink keeping records by id (as the database does); ``mode`` ok, down or slow."""

    def __init__(self) -> None:
        self.rows: dict[str, SpendRecord] = {}
        self.batches: list[int] = []
        self.mode = "ok"
        self.slow = asyncio.Event()
        self.attempts = 0

    async def write(self, records: Sequence[SpendRecord]) -> None:
        self.attempts += 1
        if self.mode == "down":
            raise ConnectionError("database is down")
        if self.mode == "slow":
            await self.slow.wait()
        self.batches.append(len(records))
        for record in records:
            self.rows.setdefault(record.id, record)


IDS = RecordIds()


def record(i: int = 0) -> SpendRecord:
    return SpendRecord(
        id=IDS(),
        request_id=f"req-{i}",
        time=1_760_000_000.0 + i,
        key_id="k1",
        key_alias="ci",
        team="search",
        user=None,
        dialect="openai",
        model="fast",
        provider="mock",
        upstream_model="echo",
        input_tokens=3,
        cache_read_tokens=0,
        cache_write_tokens=0,
        output_tokens=2,
        reasoning_tokens=0,
        cost_nanos=7000,
        cost_source="estimated",
        saved_nanos=None,
        status=200,
        error_code=None,
        duration_ms=1.5,
        ttft_ms=None,
        attempts=1,
        fallback=None,
        cache=None,
    )


class Harness:
    def __init__(self, tmp_path: Path, **options) -> None:
        self.database = FakeDatabase()
        self.metrics = Metrics()
        self.clock = FakeClock()
        self.journal_dir = tmp_path / "journal"
        options = {"interval": 0.01, "write_timeout": 0.2, "retry_after": 5.0, **options}
        self.writer = LedgerWriter(
            self.database,
            Journal(self.journal_dir),
            self.metrics,
            structlog.get_logger(),
            clock=self.clock,
            **options,
        )

    def metric(self, name: str) -> float:
        value = self.metrics.registry.get_sample_value(name)
        return 0.0 if value is None else value

    def journal_files(self) -> list[Path]:
        return sorted(self.journal_dir.glob("ledger-*.jsonl")) if self.journal_dir.exists() else []


async def until(condition, within: float = 5.0) -> None:
    """Poll ``condition`` (bounded): the writer works in the background."""
    stop = time.monotonic() + within
    while not condition():
        if time.monotonic() > stop:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.005)


async def test_records_reach_the_database_in_batches_of_at_most_500(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    sent = [record(i) for i in range(1200)]
    for r in sent:
        h.writer.record(r)
    await until(lambda: len(h.database.rows) == 1200)
    assert max(h.database.batches) <= 500
    assert set(h.database.rows) == {r.id for r in sent}
    assert h.writer.pending == 0
    assert h.metric("crossway_ledger_pending") == 0
    await h.writer.close()
    assert h.metric("crossway_ledger_dropped_total") == 0


async def test_a_lone_record_is_written_within_the_interval(tmp_path: Path) -> None:
    h = Harness(tmp_path, interval=0.05)
    h.writer.record(record())
    assert h.writer.pending == 1  # queued: nothing was written on the request path
    await until(lambda: len(h.database.rows) == 1)
    await h.writer.close()


async def test_a_record_after_an_idle_spell_is_written_within_the_interval(
    tmp_path: Path,
) -> None:
    # Once the first batch is written and the start-up catch-up is done, the writer waits
    # for the next record without a timer: that record must start one, not wait for 499 more.
    h = Harness(tmp_path, interval=0.05)
    h.writer.record(record(1))
    await until(lambda: len(h.database.rows) == 1)
    await until(lambda: not h.writer._catch_up)
    for i in range(3):
        h.writer.record(record(2 + i))
        await until(lambda i=i: len(h.database.rows) == 2 + i)
    assert h.database.batches == [1, 1, 1, 1]
    await h.writer.close()


async def test_records_arriving_together_after_an_idle_spell_share_a_batch(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, interval=0.05)
    h.writer.start()
    await until(lambda: not h.writer._catch_up)
    for i in range(20):
        h.writer.record(record(i))
    await until(lambda: len(h.database.rows) == 20)
    assert h.database.batches == [20]
    await h.writer.close()


async def test_a_database_outage_goes_to_the_journal_and_is_replayed_once_it_is_back(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    h.database.mode = "down"
    first = [record(i) for i in range(700)]
    for r in first:
        h.writer.record(r)
    await until(lambda: h.metric("crossway_ledger_journaled_total") == 700)
    assert h.database.rows == {}
    assert h.writer.pending == 700
    assert h.metric("crossway_ledger_pending") == 700
    assert len(h.journal_files()) == 1
    assert oct(h.journal_files()[0].stat().st_mode & 0o777) == "0o600"
    # Back up, but within retry_after: still journaled, the database is not hammered.
    h.database.mode = "ok"
    h.writer.record(second := record(1000))
    await until(lambda: h.metric("crossway_ledger_journaled_total") == 701)
    # After retry_after the next batch probes the database, then the journal is replayed.
    h.clock.advance(5.0)
    h.writer.record(third := record(2000))
    await until(lambda: len(h.database.rows) == 702)
    assert set(h.database.rows) == {r.id for r in [*first, second, third]}
    await until(lambda: h.journal_files() == [])
    assert h.writer.pending == 0
    await h.writer.close()
    assert h.metric("crossway_ledger_dropped_total") == 0


async def test_a_slow_database_is_not_waited_for_and_the_late_write_is_not_duplicated(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, write_timeout=0.05)
    h.database.mode = "slow"
    batch = [record(i) for i in range(10)]
    for r in batch:
        h.writer.record(r)
    await until(lambda: h.metric("crossway_ledger_journaled_total") == 10)
    assert h.database.rows == {}
    h.database.mode = "ok"
    h.database.slow.set()  # the slow write finishes late: its records arrive once
    await until(lambda: len(h.database.rows) == 10)
    h.clock.advance(5.0)
    h.writer.record(last := record(99))
    await until(lambda: len(h.database.rows) == 11 and h.journal_files() == [])
    assert set(h.database.rows) == {r.id for r in [*batch, last]}  # replay added no duplicate
    await h.writer.close()


async def test_a_journal_left_by_another_process_is_replayed_when_the_database_answers(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    gone = Journal(h.journal_dir)  # a worker that crashed with records in its journal
    left = [record(i) for i in range(3)]
    gone.append(left)
    gone.release()
    h.writer.record(mine := record(9))
    await until(lambda: len(h.database.rows) == 4 and h.journal_files() == [])
    assert set(h.database.rows) == {r.id for r in [*left, mine]}
    await h.writer.close()


def claimable(path: Path) -> bool:
    """Whether no writer holds ``path``'s lock (flock locks conflict within one process too)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the lock
    return True


async def test_records_another_worker_replayed_are_no_longer_pending_here(
    tmp_path: Path,
) -> None:
    a, b = Harness(tmp_path), Harness(tmp_path)  # two workers, one journal directory
    a.database.mode = "down"
    mine = [record(i) for i in range(5)]
    for r in mine:
        a.writer.record(r)
    await until(lambda: a.metric("crossway_ledger_journaled_total") == 5)
    # A's replay fails too (the database is still down): A gives its file up, unreplayed.
    a.clock.advance(5.0)
    await until(lambda: a.database.attempts == 2)
    (left,) = a.journal_files()
    await until(lambda: claimable(left))
    assert a.writer.pending == 5
    b.writer.start()  # B catches up on start: it claims and replays A's file
    await until(lambda: len(b.database.rows) == 5 and a.journal_files() == [])
    assert b.writer.pending == 0
    # A, back, finds nothing left to replay: nothing of its own is pending any more.
    a.database.mode = "ok"
    a.clock.advance(5.0)
    a.writer.record(record(9))
    await until(lambda: a.writer.pending == 0)
    assert a.metric("crossway_ledger_pending") == 0
    assert a.metric("crossway_ledger_dropped_total") == 0
    await a.writer.close()
    await b.writer.close()


async def test_a_live_writers_journal_is_never_claimed(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    live = Journal(h.journal_dir)  # another worker, still appending (holds its lock)
    live.append([record(1)])
    h.writer.record(record(2))
    await until(lambda: len(h.database.rows) == 1)
    await h.writer.flush()
    assert len(h.journal_files()) == 1  # still there, for its owner to replay
    live.release()
    await h.writer.close()


async def test_an_unreadable_journal_line_is_counted_as_dropped(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.journal_dir.mkdir()
    torn = h.journal_dir / "ledger-torn.jsonl"
    journal = Journal(h.journal_dir)
    journal.append([kept := record(1)])
    journal.release()
    (path,) = h.journal_files()
    path.rename(torn)
    with torn.open("ab") as file:
        file.write(b'{"id": "half a rec')  # killed mid-write
    h.writer.record(record(2))
    await until(lambda: h.journal_files() == [])
    assert kept.id in h.database.rows
    assert h.metric("crossway_ledger_dropped_total") == 1
    await h.writer.close()


async def test_close_writes_what_is_queued_to_the_database_or_else_the_journal(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path, interval=60.0)
    h.writer.record(queued := record(1))
    await h.writer.close()
    assert queued.id in h.database.rows
    down = Harness(tmp_path / "down", interval=60.0)
    down.database.mode = "down"
    down.writer.record(record(1))
    await down.writer.close()
    assert down.metric("crossway_ledger_journaled_total") == 1
    assert len(down.journal_files()) == 1
    down.writer.record(record(2))  # after close (a request that finished late): journaled
    assert down.metric("crossway_ledger_journaled_total") == 2


async def test_a_full_queue_drops_loudly_never_silently(tmp_path: Path) -> None:
    h = Harness(tmp_path, max_queue=5, interval=60.0)
    for i in range(8):
        h.writer.record(record(i))
    assert h.metric("crossway_ledger_dropped_total") == 3
    await h.writer.close()
    assert len(h.database.rows) == 5


def block(directory: Path) -> None:
    """Make ``directory`` impossible to create or write, as root too: a file takes its path."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    directory.write_text("")


def unblock(directory: Path) -> None:
    directory.unlink()


async def test_records_neither_the_database_nor_the_journal_takes_wait_in_memory(
    tmp_path: Path,
) -> None:
    # Item 4 of issue 36: a failed journal write dropped the batch, though the queue was far
    # below its bound. The records wait, and the journal takes them once it can.
    h = Harness(tmp_path)
    h.database.mode = "down"
    block(h.journal_dir)
    sent = [record(i) for i in range(700)]
    with structlog.testing.capture_logs() as logs:
        for r in sent:
            h.writer.record(r)
        await until(lambda: h.database.attempts >= 1 and h.writer._holding)
        await h.writer.flush()  # an admin read flushing meanwhile returns, keeping them
    assert h.metric("crossway_ledger_dropped_total") == 0
    assert h.writer.pending == 700
    assert h.metric("crossway_ledger_pending") == 700
    (held,) = [entry for entry in logs if entry["event"] == "ledger_records_held"]
    assert "NotADirectoryError" in held["reason"] or "FileExistsError" in held["reason"]
    unblock(h.journal_dir)  # the disk is writable again: the next retry journals them
    await until(lambda: h.metric("crossway_ledger_journaled_total") == 700)
    h.database.mode = "ok"
    h.clock.advance(5.0)
    await until(lambda: len(h.database.rows) == 700 and h.journal_files() == [])
    assert set(h.database.rows) == {r.id for r in sent}
    assert h.writer.pending == 0
    await h.writer.close()
    assert h.metric("crossway_ledger_dropped_total") == 0


async def test_held_records_go_to_the_database_when_it_is_back_first(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.database.mode = "down"
    block(h.journal_dir)
    first = [record(i) for i in range(30)]
    for r in first:
        h.writer.record(r)
    await until(lambda: h.writer._holding)
    h.database.mode = "ok"
    h.writer.record(late := record(99))
    h.clock.advance(5.0)  # retry_after passed: the database is tried before the journal
    await until(lambda: len(h.database.rows) == 31)
    assert set(h.database.rows) == {r.id for r in [*first, late]}
    assert h.metric("crossway_ledger_journaled_total") == 0
    assert h.writer.pending == 0
    await h.writer.close()
    assert h.metric("crossway_ledger_dropped_total") == 0


async def test_only_records_past_max_queue_are_dropped(tmp_path: Path) -> None:
    h = Harness(tmp_path, max_queue=10, batch_size=4)
    h.database.mode = "down"
    block(h.journal_dir)
    sent = [record(i) for i in range(10)]
    for r in sent:
        h.writer.record(r)
    await until(lambda: h.writer._holding)
    assert h.metric("crossway_ledger_dropped_total") == 0
    for i in range(3):  # the queue is full: these are the overflow
        h.writer.record(record(100 + i))
    assert h.metric("crossway_ledger_dropped_total") == 3
    unblock(h.journal_dir)
    h.database.mode = "ok"
    h.clock.advance(5.0)
    await until(lambda: len(h.database.rows) == 10 and h.journal_files() == [])
    assert set(h.database.rows) == {r.id for r in sent}
    await h.writer.close()
    assert h.metric("crossway_ledger_dropped_total") == 3


async def test_a_journal_write_that_fails_halfway_leaves_no_torn_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path)
    h.database.mode = "down"
    h.writer.record(first := record(1))
    await until(lambda: h.metric("crossway_ledger_journaled_total") == 1)
    real_write = os.write
    full = [True]

    def write(fd: int, data: bytes) -> int:
        """Half a journal append reaches the file, then the disk is full (once)."""
        if full[0] and bytes(data[:6]) == b'{"id":':
            full[0] = False
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    h.writer.record(second := record(2))
    await until(lambda: h.metric("crossway_ledger_journaled_total") == 2)
    files = h.journal_files()
    assert len(files) == 2, "the retry starts a new file"
    assert sorted(path.read_bytes().count(b"\n") for path in files) == [1, 1]
    assert all(path.read_bytes().endswith(b"\n") for path in files)  # the half line cut off
    h.database.mode = "ok"
    h.clock.advance(5.0)
    await until(lambda: len(h.database.rows) == 2 and h.journal_files() == [])
    assert set(h.database.rows) == {first.id, second.id}
    assert h.metric("crossway_ledger_dropped_total") == 0  # no unreadable line
    await h.writer.close()


async def test_a_flush_interrupted_mid_write_keeps_its_batch(tmp_path: Path) -> None:
    h = Harness(tmp_path, interval=60.0, write_timeout=30.0)
    h.database.mode = "slow"
    h.writer.record(kept := record(1))
    flush = asyncio.ensure_future(h.writer.flush())
    await until(lambda: h.database.attempts == 1)
    flush.cancel()  # the admin request that flushed went away
    with pytest.raises(asyncio.CancelledError):
        await flush
    assert h.writer.pending == 1
    h.database.mode = "ok"
    h.database.slow.set()
    await h.writer.close()
    assert kept.id in h.database.rows
    assert h.metric("crossway_ledger_dropped_total") == 0


async def test_catch_up_replays_an_earlier_runs_journal_before_the_task_starts(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    earlier = Journal(h.journal_dir)
    left = [record(i) for i in range(1200)]
    earlier.append(left)
    earlier.release()
    await h.writer.catch_up()
    assert set(h.database.rows) == {r.id for r in left}
    assert h.journal_files() == []
    assert h.writer.pending == 0
    await h.writer.close()


async def test_catch_up_leaves_the_journal_when_the_database_is_down(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    earlier = Journal(h.journal_dir)
    earlier.append(left := [record(i) for i in range(3)])
    earlier.release()
    h.database.mode = "down"
    await h.writer.catch_up()
    assert h.database.rows == {}
    (path,) = h.journal_files()
    assert claimable(path)  # given up, for the task to replay later
    h.database.mode = "ok"
    h.clock.advance(5.0)
    h.writer.start()
    await until(lambda: len(h.database.rows) == 3 and h.journal_files() == [])
    assert set(h.database.rows) == {r.id for r in left}
    await h.writer.close()


async def test_at_close_what_nothing_takes_is_dropped_loudly(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.database.mode = "down"
    block(h.journal_dir)
    h.writer.record(record(1))
    h.writer.record(record(2))
    with structlog.testing.capture_logs() as logs:
        await h.writer.close()
    assert h.metric("crossway_ledger_dropped_total") == 2
    (dropped,) = [entry for entry in logs if entry["event"] == "ledger_records_dropped"]
    assert dropped["records"] == 2
    assert "closing" in dropped["reason"]


def test_ledger_ids_are_unique_across_writers() -> None:
    first, second = RecordIds(), RecordIds()
    ids = {first() for _ in range(1000)} | {second() for _ in range(1000)}
    assert len(ids) == 2000
    assert all(len(i) == 32 for i in ids)


def test_the_journal_directory_is_private(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    journal.append([record()])
    assert oct((tmp_path / "j").stat().st_mode & 0o777) == "0o700"
