"""The ledger writer: records queued on the request path, written to the database in batches.

:meth:`LedgerWriter.record` is all the request path does: append to an in-memory queue (O(1),
no I/O). A background task writes the queue to the :class:`LedgerSink` (the database) in
batches of at most ``batch_size`` records, at least every ``interval`` seconds while records
wait. The sink is never waited on for more than ``write_timeout``: a batch that fails or is
slower goes to the :class:`~proxy.governance.ledger.journal.Journal` instead (a slow write is left
to finish on its own; the database ignores the ids it then gets twice), and for ``retry_after``
seconds every batch goes straight to the journal; then the next batch tries the database
again. Once a batch reaches the database, journal files are replayed — one batch per round,
interleaved with new records so that catching up never starves them — and deleted.

A batch that neither takes (the database failing and the journal's directory unwritable, or
its disk full) is not dropped: it goes back to the front of the queue and waits in memory.
Every ``interval`` the journal is tried again, and the database once ``retry_after`` has
passed, until one of them takes it; so is a batch whose write was interrupted (a flush
cancelled with its request). The queue holds at most ``max_queue`` records (a batch put back
may pass that by at most ``batch_size``): a record that finds it full is dropped, logged and
counted in ``crossway_ledger_dropped_total`` — the only loss while the process runs. Two more
are counted there: journal lines that cannot be read back (the torn last line of a process
killed mid-append), and what neither the database nor the journal takes at :meth:`close`, after
one last attempt at each.

``crossway_ledger_pending`` is what this process has not yet written to the database: queued
(held records included), journaled since its last replay, and the lines of the journal files it
is replaying (counted anew each time it claims files, since a file one worker journaled may be
replayed by another); ``crossway_ledger_journaled_total`` counts records that went to the
journal. :meth:`catch_up` replays the journal an earlier run left before the task starts, so
that the budget counters rebuilt at start-up from the database count it. :meth:`close` (on
SIGTERM, after in-flight requests finished) writes what is queued: to the database if it answers
in time, else to the journal.

The writer (:class:`BatchWriter`; :data:`LedgerWriter` for spend records) is generic over its
record: any msgspec Struct with a unique ``id`` that the sink ignores when it has it. The spend
ledger is its first user; another batching writer (the request logs, :mod:`proxy.request_logs`)
gives its own ``name`` (the prefix of its log events), its own journal and its own
:class:`WriterMeters`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import msgspec

from proxy.core.metrics import Metrics
from proxy.governance.ledger.journal import Claimed, Journal
from proxy.governance.ledger.records import SpendRecord

Clock = Callable[[], float]
Record = TypeVar("Record", bound=msgspec.Struct)
Record_contra = TypeVar("Record_contra", bound=msgspec.Struct, contravariant=True)


class LedgerSink(Protocol[Record_contra]):
    """Where records go: the database. ``write`` stores every record of ``records`` whose id it
    does not have yet (idempotent), or raises; it may be slow."""

    async def write(self, records: Sequence[Record_contra]) -> None:
        """Store ``records`` (ignoring ids already stored)."""
        ...


class WriterMeters(NamedTuple):
    """The metric children a writer keeps true: records not yet in the database (a gauge),
    records journaled and records dropped (counters)."""

    pending: Any
    journaled: Any
    dropped: Any


class BatchWriter(Generic[Record]):
    """See the module docstring. Use from one event loop; the task starts with the first
    record (or :meth:`start`). ``logger`` may be replaced (the app gives it its own).
    ``meters`` default to the spend ledger's (``crossway_ledger_*``), ``name`` (the prefix of
    the writer's log events) to ``ledger``."""

    def __init__(
        self,
        sink: LedgerSink[Record],
        journal: Journal,
        metrics: Metrics,
        logger: Any,
        *,
        name: str = "ledger",
        meters: WriterMeters | None = None,
        batch_size: int = 500,
        interval: float = 1.0,
        max_queue: int = 100_000,
        write_timeout: float = 2.0,
        retry_after: float = 5.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self._sink = sink
        self._journal = journal
        self.logger = logger
        self._batch_size = batch_size
        self._interval = interval
        self._max_queue = max_queue
        self._write_timeout = write_timeout
        self._retry_after = retry_after
        self._clock = clock
        self._queue: list[Record] = []  # taken whole (or a batch's slice) by _take
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._down_until = 0.0
        self._straggler: asyncio.Future[None] | None = None  # a write that outlived its timeout
        self._replaying: list[Claimed] = []
        self._replay_batches: Any = None
        self._catch_up = True  # journal files from earlier runs are replayed once it answers
        self._journaled_pending = 0
        self._journal_error = ""  # why the journal last refused a batch
        self._holding = False  # a batch nothing took waits in the queue
        if meters is None:
            meters = WriterMeters(
                metrics.ledger_pending(), metrics.ledger_journaled(), metrics.ledger_dropped()
            )
        self._pending, self._journaled, self._dropped = meters
        self._name = name

    @property
    def pending(self) -> int:
        """Records not yet in the database: queued (held ones included), and journaled but not
        replayed."""
        return len(self._queue) + self._journaled_pending

    def record(self, record: Record) -> None:
        """Queue ``record`` for the database (never blocks, never raises; once closed, the
        record goes to the journal at once). Dropped, counted, only when ``max_queue`` records
        wait already."""
        queue = self._queue
        queued = len(queue)
        if queued >= self._max_queue or self._closing:
            if self._closing:
                self._late(record)
            else:
                self._drop(1, f"the {self._name} queue is full: {queued} records wait for a place")
            return
        queue.append(record)
        self._pending.inc()
        if self._task is None:
            self.start()
        elif not queued or queued + 1 >= self._batch_size:
            self._wake.set()  # the first record starts the interval; a full batch ends it

    def start(self) -> None:
        """Start the background task (idempotent)."""
        if self._task is None and not self._closing:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def flush(self) -> None:
        """Write everything queued now, each batch to the database or else the journal, then
        return. A batch neither takes goes back to the queue (the task retries it) and ends the
        flush early: a flush never waits for an outage to end."""
        while self._queue:
            if not await self._write():
                return

    async def catch_up(self) -> None:
        """Replay the journal files no live writer holds into the database now (at start-up,
        before the task runs: the budget counters are rebuilt from the database next). Returns
        once they are replayed, or at the first batch the database does not take (the task
        replays the rest once it answers); interrupted, it leaves every file to replay again.
        Does nothing once the task runs."""
        if self._task is not None or self._closing:
            return
        try:
            await self._replay_step()
            while self._replaying:
                await self._replay_step()
        except BaseException:
            self._stop_replay()
            raise

    async def close(self) -> None:
        """Stop the task and write what is queued (database if it answers in time, else the
        journal; what neither takes then gets one last attempt at the database, and is dropped,
        counted, if that fails too). Idempotent."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            self._wake.set()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._drain()
        self._stop_replay()
        straggler = self._straggler
        if straggler is not None and not straggler.done():
            await asyncio.wait((straggler,), timeout=self._write_timeout)
        self._journal.release()

    async def _run(self) -> None:
        while not self._closing:
            try:
                await self._wait()
                if self._queue and not await self._write():
                    continue
                if self._usable() and (self._catch_up or self._replaying):
                    await self._replay_step()
            except Exception:  # a bug or an unexpected I/O error must not stop the ledger
                self.logger.exception(f"{self._name}_writer_error")
                self._stop_replay()
                await asyncio.sleep(self._interval)

    async def _wait(self) -> None:
        """Until a batch is full, ``interval`` has passed since the first record waiting (or
        since a catch-up became due), or closing; idle (nothing queued, nothing to replay)
        until a record arrives; no wait while a replay has more to do. While records are held
        (nothing took the last batch), ``interval`` however many records arrive."""
        if self._holding:
            await self._pause()
            return
        if self._ready() or (self._replaying and self._usable()):
            return
        wake = self._wake
        if not self._queue and not self._catch_up:
            wake.clear()
            await wake.wait()  # record() wakes on the first record, close() on closing
        await self._wait_for(self._ready)

    async def _pause(self) -> None:
        """Wait ``interval`` (however many records arrive meanwhile), or until closing."""
        await self._wait_for(lambda: self._closing)

    async def _wait_for(self, done: Callable[[], bool]) -> None:
        """Wait until ``done()`` holds, checked each time a record or ``close`` wakes the
        writer, for at most ``interval`` seconds."""
        deadline = asyncio.get_running_loop().time() + self._interval
        wake = self._wake
        while not done():
            wake.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await wake.wait()
            except TimeoutError:
                return

    def _ready(self) -> bool:
        """Whether to write without waiting longer: a full batch, or closing."""
        return self._closing or len(self._queue) >= self._batch_size

    def _take(self, limit: int) -> list[Record]:
        """At most ``limit`` records from the front of the queue."""
        queue = self._queue
        if len(queue) <= limit:
            batch, self._queue = queue, []
        else:  # a backlog: a batch from its front (a memmove of the rest)
            batch = queue[:limit]
            del queue[:limit]
        self._pending.dec(len(batch))
        return batch

    def _usable(self) -> bool:
        straggler = self._straggler
        return self._clock() >= self._down_until and (straggler is None or straggler.done())

    async def _write(self) -> bool:
        """Write a batch from the queue's front; whether the database or the journal took it.
        A batch neither took, or whose write was interrupted, goes back to the front."""
        batch = self._take(self._batch_size)
        try:
            stored = await self._store(batch)
        except BaseException:
            self._put_back(batch)
            raise
        if not stored:
            self._hold(batch)
        elif self._holding:
            self._holding = False
            self.logger.info(f"{self._name}_held_records_stored", waiting=len(self._queue))
        return stored

    async def _store(self, batch: list[Record]) -> bool:
        """Whether the database (tried unless it failed within ``retry_after``) or else the
        journal took ``batch``."""
        if self._usable() and await self._to_database(batch):
            return True
        return self._to_journal(batch)

    def _append(self, batch: Sequence[Record]) -> bool:
        """Whether the journal took ``batch`` (durably; counted as journaled)."""
        try:
            self._journal.append(batch)
        except OSError as exc:
            self._journal_error = f"{type(exc).__name__}: {exc.strerror or exc}"
            return False
        self._journaled.inc(len(batch))
        return True

    def _to_journal(self, batch: Sequence[Record]) -> bool:
        """Whether the journal took ``batch``, now pending replay."""
        if not self._append(batch):
            return False
        self._journaled_pending += len(batch)
        self._pending.inc(len(batch))
        self._catch_up = True
        return True

    def _put_back(self, batch: list[Record]) -> None:
        """Put ``batch`` back at the front of the queue."""
        self._queue[:0] = batch
        self._pending.inc(len(batch))

    def _hold(self, batch: list[Record]) -> None:
        """Put ``batch``, which nothing took, back at the front of the queue; the task pauses
        an ``interval`` before each retry (one warning per outage)."""
        self._put_back(batch)
        if not self._holding:
            self._holding = True
            self.logger.warning(
                f"{self._name}_records_held",
                reason=f"the journal cannot be written: {self._journal_error}",
                journal=str(self._journal.directory),
                waiting=len(self._queue),
                retry_in_s=self._interval,
            )

    async def _drain(self) -> None:
        """At close: write the queue a batch at a time (database if usable, else journal); at
        the first batch neither takes, the rest get one last attempt at the database together
        and are dropped, counted, if it fails too."""
        while self._queue:
            if await self._write():
                continue
            rest = self._take(len(self._queue))
            if not await self._to_database(rest):
                self._drop(
                    len(rest),
                    f"closing, and neither the database nor the journal takes records"
                    f" (journal: {self._journal_error})",
                )
            return

    async def _to_database(self, batch: Sequence[Record]) -> bool:
        """Whether ``batch`` reached the database within ``write_timeout``."""
        write = asyncio.ensure_future(self._sink.write(batch))
        done, _ = await asyncio.wait((write,), timeout=self._write_timeout)
        if write in done and write.exception() is None:
            return True
        if write in done:
            error = write.exception()
            reason = f"{type(error).__name__}: {error}"
        else:
            self._straggler = write
            write.add_done_callback(_consume)
            reason = f"no answer within {self._write_timeout} s"
        if self._clock() >= self._down_until:  # one warning per outage, not per batch
            self.logger.warning(
                f"{self._name}_database_unavailable",
                reason=reason,
                journal=str(self._journal.directory),
                retry_in_s=self._retry_after,
            )
        self._down_until = self._clock() + self._retry_after
        self._stop_replay()
        return False

    async def _replay_step(self) -> None:
        """Replay one batch of the journal (claiming its files first)."""
        if not self._replaying:
            self._catch_up = False
            self._replaying = self._journal.claim()
            # What this process now has to replay is what it claimed: a file it journaled but
            # released after a failed replay may have been claimed by another worker since.
            self._set_journaled(sum(claimed.lines for claimed in self._replaying))
            if not self._replaying:
                return
        while self._replaying:
            claimed = self._replaying[0]
            if self._replay_batches is None:
                self._replay_batches = claimed.batches(self._batch_size)
            batch = next(self._replay_batches, None)
            if batch is None:
                self._finish(claimed)
                continue
            if not await self._to_database(batch):
                return
            self._set_journaled(self._journaled_pending - len(batch))
            return

    def _set_journaled(self, count: int) -> None:
        count = max(0, count)
        self._pending.inc(count - self._journaled_pending)
        self._journaled_pending = count

    def _finish(self, claimed: Claimed) -> None:
        self._replaying.pop(0)
        self._replay_batches = None
        if claimed.torn:
            self._drop(claimed.torn, f"unreadable lines in the {self._name} journal {claimed.path}")
            self._set_journaled(self._journaled_pending - claimed.torn)
        claimed.finish()
        if not self._replaying:
            self.logger.info(f"{self._name}_journal_replayed")

    def _stop_replay(self) -> None:
        for claimed in self._replaying:
            claimed.close()
        self._replaying = []
        self._replay_batches = None
        self._catch_up = True

    def _late(self, record: Record) -> None:
        """A record after :meth:`close` (a request that finished late): the journal, else
        dropped, counted (nothing would retry it)."""
        if not self._append([record]):
            self._drop(
                1, f"closed, and the {self._name} journal cannot be written: {self._journal_error}"
            )

    def _drop(self, count: int, reason: str) -> None:
        self._dropped.inc(count)
        self.logger.error(f"{self._name}_records_dropped", records=count, reason=reason)


LedgerWriter = BatchWriter[SpendRecord]
"""The spend ledger's writer."""


def _consume(future: asyncio.Future[None]) -> None:
    """Retrieve a straggling write's outcome (its records were journaled meanwhile)."""
    if not future.cancelled():
        future.exception()
