"""Files and batches assembled for the application: the stores, the executor and the routes
(OpenAI's files and batches, Anthropic's message batches) from the ``batches`` config section,
with the hooks the app runs at start and stop.

At start the executor looks for batches to run when the gateway opened its database (it uses
keys or a master key); otherwise it looks from the first use of a file or batch route in the
process — a gateway without keys that restarts resumes its batches once it is asked about one.
The retention sweep (:mod:`proxy.batches.retention`) runs from start, once the database is open.
Every part reads the time from one ``clock`` (epoch seconds; tests move it to see batches expire
and retention pass without waiting days).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from aiohttp import web

from proxy.batches.batches_db import BatchStore
from proxy.batches.contents import Contents, DatabaseContents, DirectoryContents
from proxy.batches.executor import BatchExecutor
from proxy.batches.files import FileStore
from proxy.batches.lines import LineRunner
from proxy.batches.message_batches import MessageBatchRoutes
from proxy.batches.native import NativeRunner
from proxy.batches.retention import Retention
from proxy.batches.routes import BatchRoutes, RouteParts
from proxy.core.metrics import Metrics
from proxy.db import Database
from proxy.http.app_keys import SERVER
from proxy.runtime.config import BatchesConfig
from proxy.runtime.snapshot import Snapshot


@runtime_checkable
class Closes(Protocol):
    """Contents that hold a client to close when the app stops."""

    async def close(self) -> None:
        """Release the client."""
        ...


def _contents(config: BatchesConfig, database: Database) -> Contents:
    """Where file contents go (``batches.storage``); the S3 client's module is imported only
    when it is configured (aiobotocore takes a while to import)."""
    if config.storage == "directory" and config.directory:
        return DirectoryContents(config.directory)
    if config.storage == "s3" and config.s3 is not None:
        from proxy.batches.s3 import S3Contents  # see the docstring

        return S3Contents(config.s3)
    return DatabaseContents(database)


class BatchesFeature:
    """See the module docstring."""

    def __init__(
        self,
        config: BatchesConfig,
        database: Database,
        metrics: Metrics,
        snapshot: Callable[[], Snapshot],
        read_body: Callable[[web.Request], Awaitable[bytes]],
        request_id: Callable[[web.Request], str],
        clock: Callable[[], float] = time.time,
    ) -> None:
        contents = _contents(config, database)
        self._contents = contents
        self._database = database
        self.files = FileStore(database, contents, clock)
        self.batches = BatchStore(database, clock)
        self.executor = BatchExecutor(
            self.batches,
            self.files,
            LineRunner(snapshot, metrics),
            NativeRunner(snapshot),
            config,
            lambda: snapshot().logger,
            clock=clock,
        )
        self.retention = Retention(
            self.batches,
            self.files,
            database,
            retention_days=config.retention_days,
            look_every=config.poll_interval,
            logger=lambda: snapshot().logger,
            clock=clock,
        )
        parts = RouteParts(
            config, self.files, self.batches, self.executor, snapshot, read_body, request_id
        )
        self._routes = BatchRoutes(parts)
        self._message_routes = MessageBatchRoutes(parts)

    def add_to(self, app: web.Application, plain: Callable[[str, Any], Any]) -> None:
        """Add the routes (:mod:`proxy.batches.routes`) and the start and stop hooks; the stop
        gives the running batches ``server.shutdown_timeout``."""
        self._routes.add_to(app, plain)
        self._message_routes.add_to(app, plain)
        timeout = app[SERVER].shutdown_timeout

        async def start(app: web.Application) -> None:
            if self._database.is_open:
                self.executor.start()
            self.retention.start()

        async def stop(app: web.Application) -> None:
            await self.retention.stop()
            await self.executor.stop(timeout)

        async def close(app: web.Application) -> None:
            if isinstance(self._contents, Closes):
                await self._contents.close()

        app.on_startup.append(start)
        app.on_shutdown.append(stop)
        app.on_cleanup.append(close)
