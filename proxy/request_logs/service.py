"""The process's request logs: records queued off the request path for the database and the
export sinks, and the database pruned by age.

:class:`RequestLogs` is made once per process (like the spend ledger's writer, it outlives
reloads; its sinks, journal and retention are those the process started with). :meth:`record` is
all the request path does: the record goes to the batching writer of the spend ledger's
machinery (:class:`~proxy.governance.ledger.writer.BatchWriter` — a bounded queue, written in
batches, journaled to local files while the database is down and replayed once it answers;
``crossway_request_logs_pending``, ``…_journaled_total``, ``…_dropped_total``) and to each
export sink's bounded buffer (:mod:`proxy.request_logs.sinks`). Neither ever blocks nor raises;
what is dropped is counted and logged. Records older than ``retention_days`` are deleted at
start and every ``prune_every`` seconds (an hour), a failure logged and tried at the next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proxy.core.metrics import Metrics
from proxy.db import Database
from proxy.governance.ledger.journal import Journal
from proxy.governance.ledger.records import RecordIds
from proxy.governance.ledger.writer import BatchWriter, WriterMeters
from proxy.request_logs.config import RequestLogsConfig
from proxy.request_logs.logs_db import RequestLogRepository
from proxy.request_logs.records import RequestLogRecord
from proxy.request_logs.sinks import Exporter, JsonlSink, OtlpSink

JOURNAL_DIR = "request-log-journal"
_DAY = 86_400.0


class RequestLogs:
    """See the module docstring. ``journal_dir`` is where records wait while the database is
    down; ``clock`` gives the wall time (epoch seconds)."""

    def __init__(
        self,
        config: RequestLogsConfig,
        database: Database,
        metrics: Metrics,
        logger: Any,
        *,
        journal_dir: Path,
        prune_every: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.database = database
        self.repository = RequestLogRepository(database)
        self._logger = logger
        self._writer = BatchWriter(
            self.repository,
            Journal(journal_dir, RequestLogRecord, "request-log"),
            metrics,
            logger,
            name="request_logs",
            meters=WriterMeters(
                metrics.request_logs_pending(),
                metrics.request_logs_journaled(),
                metrics.request_logs_dropped(),
            ),
            max_queue=config.max_queue,
        )
        self.exporters: list[Exporter] = []
        if config.jsonl is not None:
            self.exporters.append(
                Exporter(JsonlSink(config.jsonl), config.jsonl.max_buffer, metrics, logger)
            )
        if config.otlp is not None:
            self.exporters.append(
                Exporter(OtlpSink(config.otlp), config.otlp.max_buffer, metrics, logger)
            )
        self.next_id: Callable[[], str] = RecordIds().next
        self._prune_every = prune_every
        self._clock = clock
        self._pruning: asyncio.Task[None] | None = None

    @property
    def logger(self) -> Any:
        """The logger of the writer and the sinks."""
        return self._logger

    @logger.setter
    def logger(self, logger: Any) -> None:
        self._logger = self._writer.logger = logger
        for exporter in self.exporters:
            exporter.logger = logger

    @property
    def pending(self) -> int:
        """Records not yet in the database."""
        return self._writer.pending

    def record(self, record: RequestLogRecord) -> None:
        """Queue ``record`` for the database and every sink (never blocks, never raises)."""
        self._writer.record(record)
        for exporter in self.exporters:
            exporter.offer(record)

    async def start(self, *, prune: bool) -> None:
        """Replay a journal an earlier run left, start the writer, and (``prune``: the
        database is in use) start pruning."""
        if prune:
            await self._writer.catch_up()
            self._writer.start()
            self._pruning = asyncio.get_running_loop().create_task(self._prune_rounds())

    async def flush(self) -> None:
        """Write what is queued now (to the database, else the journal)."""
        await self._writer.flush()

    async def prune(self) -> int:
        """Delete the records older than ``retention_days``; how many."""
        before = datetime.fromtimestamp(self._clock() - self.config.retention_days * _DAY, UTC)
        return await self.repository.prune(before)

    async def close(self) -> None:
        """Stop pruning; write what is queued (database, else journal); flush the sinks."""
        pruning, self._pruning = self._pruning, None
        if pruning is not None:
            pruning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pruning
        await self._writer.close()
        for exporter in self.exporters:
            await exporter.close()

    async def _prune_rounds(self) -> None:
        while True:
            try:
                pruned = await self.prune()
            except Exception as exc:  # the database is down: the next round tries again
                self._logger.warning(
                    "request_logs_prune_failed", reason=f"{type(exc).__name__}: {exc}"[:500]
                )
            else:
                if pruned:
                    self._logger.info("request_logs_pruned", records=pruned)
            await asyncio.sleep(self._prune_every)
