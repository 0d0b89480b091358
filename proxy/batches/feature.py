"""Files and batches assembled for the application: the stores, the executor and the routes
(OpenAI's files and batches, Anthropic's message batches) from the ``batches`` config section,
with the hooks the app runs at start and stop.

At start the executor looks for batches to run when the gateway opened its database (it uses
keys or a master key), and the uploads a stopped process left incomplete are removed; otherwise
it looks from the first use of a file or batch route in the process — a gateway without keys
that restarts resumes its batches once it is asked about one.
"""

from __future__ import annotations

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
from proxy.batches.routes import BatchRoutes, RouteParts
from proxy.core.metrics import Metrics
from proxy.db import Database
from proxy.http.app_keys import SERVER
from proxy.runtime.config import BatchesConfig
from proxy.runtime.snapshot import Snapshot

ABANDONED_UPLOAD = 3600.0
"""Seconds after which an upload still incomplete at start-up is taken as abandoned."""


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
    ) -> None:
        contents = _contents(config, database)
        self._contents = contents
        self._database = database
        self._snapshot = snapshot
        self.files = FileStore(database, contents)
        self.batches = BatchStore(database)
        self.executor = BatchExecutor(
            self.batches,
            self.files,
            LineRunner(snapshot, metrics),
            NativeRunner(snapshot),
            config,
            lambda: snapshot().logger,
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
        snapshot = self._snapshot

        async def start(app: web.Application) -> None:
            if self._database.is_open:
                self.executor.start()
                await self._sweep(snapshot().logger)

        async def stop(app: web.Application) -> None:
            await self.executor.stop(timeout)

        async def close(app: web.Application) -> None:
            if isinstance(self._contents, Closes):
                await self._contents.close()

        app.on_startup.append(start)
        app.on_shutdown.append(stop)
        app.on_cleanup.append(close)

    async def _sweep(self, logger: Any) -> None:
        """Remove the uploads a stopped process left incomplete (begun over
        :data:`ABANDONED_UPLOAD` seconds ago); a database that cannot answer is logged."""
        try:
            swept = await self.files.sweep(ABANDONED_UPLOAD)
        except Exception:
            logger.exception("file_sweep_failed")
            return
        if swept:
            logger.warning("incomplete_uploads_removed", count=swept)
