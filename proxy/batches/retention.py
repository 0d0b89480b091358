"""Retention: what files and batches leave behind is deleted once it is old.

:meth:`Retention.sweep` deletes, whoever owns them:

- each batch that ended more than ``batches.retention_days`` ago (None: none is), with its lines
  and the output and error files it made;
- each file whose ``expires_at`` passed (an upload's ``expires_after``; a batch's output file,
  ``retention_days`` after it was made) — already a 404 from that instant on, its bytes and
  record are removed here;
- each upload left incomplete (its process died) that began over :data:`ABANDONED_UPLOAD`
  seconds ago.

Each process sweeps every :data:`SWEEP_EVERY` seconds on the ``clock`` (at once when it starts
with its database open, else once it opened it), looking every ``batches.poll_interval``
whether one is due. Every deletion is idempotent — bytes first, then the record; a batch's
files, then the batch and its lines in one transaction — so that processes sweeping at once
never fail each other, and a sweep stopped midway leaves what it did not delete to the next.
A sweep that fails (the database cannot answer) is logged and tried again at the next look.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from proxy.batches.batches_db import BatchStore
from proxy.batches.files import FileStore
from proxy.batches.objects import DAY_SECONDS
from proxy.db import Database

SWEEP_EVERY = 3600.0
"""Seconds between two sweeps of one process."""
ABANDONED_UPLOAD = 3600.0
"""Seconds after which an upload still incomplete is taken as abandoned."""
PAGE = 200
"""Batches or files deleted per query."""


class Retention:
    """See the module docstring. ``logger()`` gives the current logger."""

    def __init__(
        self,
        batches: BatchStore,
        files: FileStore,
        database: Database,
        *,
        retention_days: float | None,
        look_every: float,
        logger: Callable[[], Any],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._batches = batches
        self._files = files
        self._database = database
        self._retention_days = retention_days
        self._look_every = look_every
        self._logger = logger
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    async def sweep(self) -> tuple[int, int]:
        """Delete what is old (module docstring); how many batches and files were deleted."""
        swept_batches = swept_files = 0
        if self._retention_days is not None:
            age = self._retention_days * DAY_SECONDS
            while old := await self._batches.ended_before(age, PAGE):
                for batch in old:
                    for file_id in (batch.output_file_id, batch.error_file_id):
                        if file_id is not None:
                            await self._files.remove(file_id)
                    await self._batches.purge(batch.id)
                swept_batches += len(old)
        while expired := await self._files.expired(PAGE):
            for file_id in expired:
                await self._files.remove(file_id)
            swept_files += len(expired)
        swept_files += await self._files.sweep(ABANDONED_UPLOAD)
        return swept_batches, swept_files

    def start(self) -> None:
        """Begin sweeping (module docstring)."""
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop sweeping (a sweep under way is cancelled: the next process finishes it)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        due = float("-inf")
        while True:
            if self._database.is_open and self._clock() >= due:
                try:
                    swept_batches, swept_files = await self.sweep()
                except Exception:
                    self._logger().exception("batch_retention_failed")
                else:
                    due = self._clock() + SWEEP_EVERY
                    if swept_batches or swept_files:
                        self._logger().info(
                            "batch_retention_swept", batches=swept_batches, files=swept_files
                        )
            await asyncio.sleep(self._look_every)
