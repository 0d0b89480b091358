"""Graceful stop with a bound: the requests in flight get ``server.shutdown_timeout``, no more.

On SIGTERM the server stops accepting connections and the app's ``on_shutdown`` runs
:meth:`Drain.stop`: the requests in flight may finish within ``shutdown_timeout`` seconds. At
that deadline the ones still running are cancelled and marked as ended by the drain. A dialect
route claims the mark (:meth:`Drain.claim`) and still answers in the client's dialect — a 503
``server_shutting_down`` error before the first byte, the dialect's in-band error event after
it (:mod:`proxy.http.dialect_route`, :mod:`proxy.http.sse_answer`) — so its client learns why, and
its metrics, access line and ``finished`` hooks (the spend ledger's record) run as for any request.
Any other route is cancelled, as aiohttp would cancel it. The drain then gives them at most
:data:`ENDING_GRACE` seconds to write that last answer, and the server closes what is left.

The server's request handler (:class:`proxy.aiohttp_ext.exact_routes.ExactRoutes`) tracks every
request from its start until its answer is written (:meth:`Drain.enter`: a set insertion, and its
removal when the request's task is done).
"""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.core.errors import ShuttingDown

ENDING_GRACE = 0.5
"""Seconds the requests ended at the deadline get to write their last answer."""


def shutting_down() -> ShuttingDown:
    """The error a request ended at the deadline answers with."""
    return ShuttingDown(
        "the gateway is shutting down and could not finish this request in time; retry it",
        should_retry=True,
    )


class Drain:
    """The requests in flight, and how they end when the process stops (see the module
    docstring). Use from one event loop."""

    __slots__ = ("_ended", "_running")

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()
        self._ended: set[asyncio.Task[Any]] = set()

    @property
    def running(self) -> int:
        """How many requests are in flight."""
        return len(self._still_running())

    def _still_running(self) -> list[asyncio.Task[Any]]:
        # A task just done stays in the set until its callback has run.
        return [task for task in self._running if not task.done()]

    def enter(self) -> None:
        """Track the current task, a request's (aiohttp runs each in a task of its own that
        ends once the answer is written), until it is done."""
        task = asyncio.current_task()
        assert task is not None, "a request runs in a task"
        self._running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        self._ended.discard(task)

    def claim(self) -> bool:
        """Whether the cancellation the current task is handling is the drain's, the first
        time it is asked: the cancellation is then withdrawn (``uncancel``) so that the request
        can still answer (with :func:`shutting_down`). False for any other cancellation (a
        client that went away, or a second one), which the caller must let propagate."""
        task = asyncio.current_task()
        if task not in self._ended:
            return False
        self._ended.discard(task)
        assert task is not None
        task.uncancel()
        return True

    async def stop(self, seconds: float) -> int:
        """Wait until no request is in flight, for at most ``seconds``; then cancel
        those still running, marked as the drain's, and wait at most :data:`ENDING_GRACE`
        seconds for them to end. Returns how many were ended at the deadline; never raises."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (running := self._still_running()) and (left := deadline - loop.time()) > 0:
            await asyncio.wait(running, timeout=left)
        ending = self._still_running()
        for task in ending:
            self._ended.add(task)
            task.cancel()
        if ending:
            await asyncio.wait(ending, timeout=ENDING_GRACE)
        return len(ending)
