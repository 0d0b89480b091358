"""The gateway-executed batches: each process claims batches still to run and runs their lines
through the chain (:class:`~proxy.batches.lines.LineRunner`), resumable after a restart.

:class:`BatchExecutor` looks for a batch to run every ``batches.poll_interval`` seconds, and at
once when one is created here (:meth:`BatchExecutor.wake`): a new one, or one whose process
stopped (its lease, :data:`LEASE_SECONDS`, released at a clean stop or passed after a crash).
It holds each batch it runs under that lease, renewed every third of it; the renewal also reads
whether the batch was asked to cancel by another process (a cancel asked of this one stops its
lines at once, :meth:`BatchExecutor.cancel`), and so does writing it ``finalizing``.

A batch runs its lines without a result, in order, at most ``batches.concurrency`` at a time and
at most ``batches.rate`` a second. Each line's result is stored as soon as it is known (results
that end together are written in one transaction), and a line with a stored result never runs
again: after a restart the batch resumes with the lines that have none. A line in flight when
the process dies (SIGKILL, a crash) has no stored result and runs again when the batch resumes
— at most ``concurrency`` lines, plus those whose result was being written. At a clean stop
(:meth:`BatchExecutor.stop`) no new line starts, the lines in flight get the drain's deadline
to end and have their results stored, and the lease is released so that the next process
resumes at once; a line still running at the deadline is cancelled, stores no result and runs
again later.

No line of a batch starts once its ``expires_at`` passed (on the executor's ``clock``; a batch
claimed after it runs none): the lines in flight end, and the batch ends ``expired``, each line
without a result recorded as a failed ``batch_expired`` line
(:func:`~proxy.batches.lines.expired_line`; a message batch's are left without one: its
results name them ``expired``).

When every line has a result (or a cancel was asked: the lines without one are left out; or it
expired), the batch is ``finalizing`` (with its ``expired_at`` when it expired, so that a process
that resumes it ends it alike): its output file (the lines that succeeded) and error file (those
that failed), in line order, are written as the owner's files (``purpose: batch_output``,
expiring after the batch's ``output_expires_after`` or ``batches.retention_days``, the sooner;
not for a message batch, whose results are read from its lines), then it is ``completed`` (or
``cancelled``, or ``expired``) with its ``request_counts`` and the ``usage`` its output lines
sum (:mod:`proxy.batches.usage`). A failure of the database while a batch runs is logged and
leaves the batch to its lease: another pass resumes it. A native batch
(:mod:`proxy.batches.native`) is submitted to its provider instead, polled, and its results
recorded; a provider that refuses it (a 4xx but 429) fails it, naming the refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from proxy.batches.batches_db import BatchStore, Held, Line, Result
from proxy.batches.files import FileStore
from proxy.batches.lines import LineRunner, expired_line
from proxy.batches.native import PLAN_DECODER, NativeRunner
from proxy.batches.objects import (
    DAY_SECONDS,
    ENCODER,
    MESSAGES,
    Batch,
    BatchError,
    BatchErrors,
)
from proxy.batches.usage import UsageTally
from proxy.core.canonical import Principal
from proxy.providers.base import BatchAPIError
from proxy.runtime.config import BatchesConfig

LEASE_SECONDS = 10.0
"""How long a process holds a batch it runs without renewing it."""
PAGE = 512
"""Lines read from the database at a time."""


class _Recorder:
    """Stores results as they come: whatever ended while the previous write ran is written in
    the next transaction."""

    def __init__(self, store: BatchStore, batch_id: str) -> None:
        self._store = store
        self._batch_id = batch_id
        self._held: list[Result] = []
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._write())
        self._closing = False

    def add(self, result: Result) -> None:
        self._held.append(result)
        self._ready.set()

    async def _write(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            held, self._held = self._held, []
            await self._store.record(self._batch_id, held)
            if self._closing and not self._held:
                return

    async def close(self) -> None:
        """Write what is held, then stop (raises what a write raised)."""
        self._closing = True
        self._ready.set()
        await self._task


class BatchExecutor:
    """See the module docstring. ``logger()`` gives the current logger."""

    def __init__(
        self,
        store: BatchStore,
        files: FileStore,
        runner: LineRunner,
        native: NativeRunner,
        config: BatchesConfig,
        logger: Callable[[], Any],
        *,
        lease: float = LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._files = files
        self._runner = runner
        self._native_runner = native
        self._config = config
        self._logger = logger
        self._lease = lease
        self._clock = clock
        self._wakeup = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}
        self._cancels: dict[str, asyncio.Event] = {}
        self._poller: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        """Begin looking for batches to run."""
        self._poller = asyncio.create_task(self._poll())

    def wake(self) -> None:
        """Look for batches to run now (one was created, or a file: the database is in use);
        start looking if this process did not yet."""
        if self._poller is None and not self._stopping:
            self.start()
        self._wakeup.set()

    def cancel(self, batch_id: str) -> None:
        """A cancel of ``batch_id`` was stored: if this process runs it, start no more of its
        lines now (another process sees it on its next renewal); else look for it to end it."""
        cancel = self._cancels.get(batch_id)
        if cancel is not None:
            cancel.set()
        else:
            self.wake()

    async def stop(self, seconds: float) -> int:
        """Start no more lines; give the running batches ``seconds`` to store the results of
        their lines in flight and release their leases, then cancel those left; how many were
        cancelled. Never raises."""
        self._stopping = True
        self._wakeup.set()
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        running = list(self._running.values())
        if running:
            await asyncio.wait(running, timeout=seconds)
        late = [task for task in running if not task.done()]
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=1.0)
        return len(late)

    async def _poll(self) -> None:
        while not self._stopping:
            try:
                while held := await self._store.claim(self._lease, list(self._running)):
                    batch_id = held.batch.id
                    task = asyncio.create_task(self._run(held))
                    self._running[batch_id] = task
                    task.add_done_callback(self._forget(batch_id))
            except Exception:
                self._logger().exception("batch_claim_failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._config.poll_interval):
                    await self._wakeup.wait()
            self._wakeup.clear()

    def _forget(self, batch_id: str) -> Callable[[asyncio.Task[None]], None]:
        """What drops ``batch_id``'s task once it ended."""

        def forget(_: asyncio.Task[None]) -> None:
            self._running.pop(batch_id, None)
            self._cancels.pop(batch_id, None)

        return forget

    async def _run(self, held: Held) -> None:
        batch = held.batch
        cancel = self._cancels[batch.id] = asyncio.Event()
        if batch.status == "cancelling":
            cancel.set()
        renewer = asyncio.create_task(self._renew(batch.id, cancel))
        try:
            if batch.status == "validating":
                batch.status = "in_progress"
                batch.in_progress_at = int(self._clock())
                if not await self._store.save(batch, lease=self._lease):
                    cancel.set()
            if held.native is not None and batch.status in ("in_progress", "cancelling"):
                if not await self._native(batch, held, cancel):
                    return
            elif batch.status == "in_progress" and not cancel.is_set():
                await self._lines(batch, held.principal, cancel)
                if self._stopping:
                    await self._store.save(batch, lease=None)  # the next process resumes it
                    return
            await self._finish(batch, held.principal, cancel.is_set())
        except asyncio.CancelledError:
            raise
        except BatchAPIError as failure:
            await self._native_failed(batch, failure)
        except Exception:
            self._logger().exception("batch_run_failed", batch_id=batch.id)
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _renew(self, batch_id: str, cancel: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self._lease / 3)
            try:
                status = await self._store.renew(batch_id, self._lease)
            except Exception:
                self._logger().exception("batch_renew_failed", batch_id=batch_id)
                continue
            if status in (None, "cancelling"):
                cancel.set()

    async def _lines(self, batch: Batch, principal: Principal, cancel: asyncio.Event) -> None:
        """Run ``batch``'s lines without a result until none is left, a cancel is asked, or the
        executor stops; their results stored."""
        config = self._config
        slots = asyncio.Semaphore(config.concurrency)
        spacing = 0.0 if config.rate is None else 1.0 / config.rate
        recorder = _Recorder(self._store, batch.id)
        flying: set[asyncio.Task[None]] = set()
        next_start = time.monotonic()

        async def one(line: Any) -> None:
            try:
                recorder.add(await self._runner.run(batch.endpoint, batch.id, principal, line))
            finally:
                slots.release()

        def halted() -> bool:
            return cancel.is_set() or self._stopping or self._clock() >= batch.expires_at

        try:
            after = -1
            while not halted():
                lines = await self._store.pending(batch.id, after, PAGE)
                if not lines:
                    break
                for line in lines:
                    await slots.acquire()
                    if halted():
                        slots.release()
                        break
                    if spacing:
                        now = time.monotonic()
                        if next_start > now:
                            await asyncio.sleep(next_start - now)
                        next_start = max(next_start, now) + spacing
                    task = asyncio.create_task(one(line))
                    flying.add(task)
                    task.add_done_callback(flying.discard)
                    after = line.number
            if flying:
                await asyncio.gather(*flying)
        finally:
            for task in flying:
                task.cancel()
            if flying:
                await asyncio.wait(flying)
            await asyncio.shield(recorder.close())

    async def _native(self, batch: Batch, held: Held, cancel: asyncio.Event) -> bool:
        """Run ``batch`` through its provider's batch API (:mod:`proxy.batches.native`):
        submit it once, poll it until it ends (asking it to cancel when asked), record its
        results; whether to finish it now (False: the executor stops, or it failed upstream)."""
        assert held.native is not None
        plan = PLAN_DECODER.decode(held.native)
        store, native = self._store, self._native_runner
        if plan.upstream_id is None:
            if cancel.is_set():
                return True
            upstream_id, refused = await native.submit(
                plan, batch.endpoint, await self._pending(batch.id)
            )
            await store.record(batch.id, refused)
            if upstream_id is None:  # no line could be sent: each has its result
                return True
            plan.upstream_id = upstream_id
            await store.save_native(batch.id, ENCODER.encode(plan))
        while True:
            if cancel.is_set() and not plan.cancel_sent:
                await native.cancel(plan)
                plan.cancel_sent = True
                await store.save_native(batch.id, ENCODER.encode(plan))
            upstream = await native.poll(plan)
            if upstream.outcome is not None:
                break
            if self._stopping:
                await store.save(batch, lease=None)
                return False
            if plan.cancel_sent:
                await asyncio.sleep(self._config.poll_interval)
                continue
            with contextlib.suppress(TimeoutError):  # a cancel asked meanwhile is sent at once
                async with asyncio.timeout(self._config.poll_interval):
                    await cancel.wait()
        if upstream.outcome == "failed":
            batch.status, batch.failed_at = "failed", int(self._clock())
            errors = [BatchError(code, message) for code, message in upstream.errors]
            batch.errors = BatchErrors(errors or [BatchError("native_batch_failed", "failed")])
            await store.save(batch, lease=None)
            return False
        lines = await self._pending(batch.id)
        page: list[Result] = []  # stored a page at a time: a result file is never held whole
        async for result in native.results(
            plan, batch.endpoint, batch.id, held.principal, upstream, lines
        ):
            page.append(result)
            if len(page) >= PAGE:
                await store.record(batch.id, page)
                page = []
        await store.record(batch.id, page)
        if upstream.outcome == "cancelled":
            cancel.set()
        elif upstream.outcome == "expired":  # the provider's window passed: so did ours
            batch.expired_at = int(self._clock())
        return True

    async def _native_failed(self, batch: Batch, failure: BatchAPIError) -> None:
        """A provider's batch API refused for good (a 4xx but 429, or an answer it cannot
        read): the batch is ``failed``, naming it; anything else (unreachable, 429, 5xx) is
        logged and left to the lease: tried again."""
        if not failure.lasting:
            self._logger().warning("native_batch_retry", batch_id=batch.id, error=str(failure))
            return
        batch.status, batch.failed_at = "failed", int(self._clock())
        batch.errors = BatchErrors([BatchError("native_batch_failed", str(failure))])
        await self._store.save(batch, lease=None)

    async def _pending(self, batch_id: str) -> list[Line]:
        """Every line of ``batch_id`` without a result, in order."""
        lines: list[Line] = []
        while page := await self._store.pending(batch_id, lines[-1].number if lines else -1, PAGE):
            lines += page
        return lines

    async def _finish(self, batch: Batch, principal: Principal, cancelled: bool) -> None:
        """Write ``batch``'s output and error files and end it (module docstring)."""
        if batch.status != "finalizing" or cancelled:
            now = int(self._clock())
            if not cancelled:
                counts = await self._store.counts(batch.id)
                if counts.completed + counts.failed < counts.total and now >= batch.expires_at:
                    batch.expired_at = now
                batch.status, batch.finalizing_at = "finalizing", now
                cancelled = not await self._store.save(batch, lease=self._lease)
            if cancelled:  # asked (here, or found on writing finalizing)
                batch.status, batch.cancelling_at = "cancelling", batch.cancelling_at or now
                batch.expired_at = None
                await self._store.save(batch, lease=self._lease)
        files = batch.endpoint != MESSAGES  # a message batch's results are read from its lines
        if files and batch.expired_at is not None:
            await self._expire_rest(batch.id)
        counts = await self._store.counts(batch.id)
        tally = UsageTally()
        if files and counts.completed:
            batch.output_file_id = await self._file(batch, principal, "output", False, tally)
        if files and counts.failed:
            batch.error_file_id = await self._file(batch, principal, "error", True)
        batch.request_counts = counts
        if files:
            batch.usage = tally.usage
        now = int(self._clock())
        if cancelled:
            batch.status, batch.cancelled_at = "cancelled", now
        elif batch.expired_at is not None:
            batch.status = "expired"
        else:
            batch.status, batch.completed_at = "completed", now
        await self._store.save(batch, lease=None)
        self._logger().info(
            "batch_ended",
            batch_id=batch.id,
            status=batch.status,
            completed=counts.completed,
            failed=counts.failed,
        )

    async def _expire_rest(self, batch_id: str) -> None:
        """Record each line of ``batch_id`` without a result as a failed ``batch_expired``
        line."""
        while lines := await self._store.pending(batch_id, -1, PAGE):
            expired = [Result(line.number, expired_line(line.custom_id), True) for line in lines]
            await self._store.record(batch_id, expired)

    async def _file(
        self,
        batch: Batch,
        principal: Principal,
        kind: str,
        failed: bool,
        tally: UsageTally | None = None,
    ) -> str:
        """Write the results of ``batch`` that failed (or did not) as one JSONL file of the
        owner's, expiring after the batch's ``output_expires_after`` or
        ``batches.retention_days``, the sooner, each line added to ``tally`` when given; its
        id."""
        store = self._store

        async def pieces() -> AsyncIterator[bytes]:
            after = -1
            while results := await store.results(batch.id, failed, after, PAGE):
                if tally is not None:
                    for result in results:
                        tally.add(result.line)
                yield b"".join(result.line + b"\n" for result in results)
                after = results[-1].number

        name = f"{batch.id}_{kind}.jsonl"
        days = self._config.retention_days
        retained = None if days is None else round(days * DAY_SECONDS)
        bounds = (await store.output_expires_after(batch.id), retained)
        keep = min((seconds for seconds in bounds if seconds is not None), default=None)
        created = await self._files.create(
            principal, name, "batch_output", pieces(), sys.maxsize, expires_after=keep
        )
        return created.id
