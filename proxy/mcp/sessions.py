"""The gateway's MCP sessions (``Mcp-Session-Id``): :class:`Session` and :class:`Sessions`.

A session begins with ``initialize`` and belongs to the key that began it (another key naming
its id is answered as if it did not exist); it holds the caller's :class:`~proxy.mcp.hub.View`
(one server or the aggregate), the requests it has in flight (so that
``notifications/cancelled`` can end them), and the queue of notifications waiting for its
``GET`` stream. Sessions live in this process's memory: at most ``max_sessions``, the least
recently used dropped past that, and one idle for ``idle_timeout`` seconds is forgotten.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from typing import Any

from proxy.mcp.hub import View

_QUEUE = 256  # notifications waiting for a session's GET stream; past it the oldest dropped


class Session:
    """One client session (module docstring). ``version``: the protocol revision agreed."""

    def __init__(self, session_id: str, owner: str | None, view: View, version: str) -> None:
        self.id = session_id
        self.owner = owner
        self.view = view
        self.version = version
        self.in_flight: dict[str | int, asyncio.Task[Any]] = {}
        self.cancelled: set[str | int] = set()
        self.notifications: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(_QUEUE)
        self.streaming = False
        self.used = time.monotonic()

    def notify(self, message: dict[str, Any]) -> None:
        """Queue ``message`` for the GET stream (only while one is open: the spec lets a
        server drop what no stream can carry)."""
        if not self.streaming:
            return
        queue = self.notifications
        if queue.full():
            queue.get_nowait()
        queue.put_nowait(message)

    def cancel(self, request_id: str | int) -> None:
        """End the request ``request_id`` if it is in flight (its answer is not sent)."""
        task = self.in_flight.get(request_id)
        if task is not None and not task.done():
            self.cancelled.add(request_id)
            task.cancel()

    def close(self) -> None:
        """End the GET stream and every request in flight."""
        for request_id in list(self.in_flight):
            self.cancel(request_id)
        if self.streaming:
            if self.notifications.full():
                self.notifications.get_nowait()
            self.notifications.put_nowait(None)


class Sessions:
    """This process's sessions (module docstring)."""

    def __init__(self, *, max_sessions: int = 10_000, idle_timeout: float = 3600.0) -> None:
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._max = max_sessions
        self._idle = idle_timeout

    def open(self, owner: str | None, view: View, version: str) -> Session:
        """A new session of ``owner`` (a key id; None for an open gateway)."""
        self._sweep()
        while len(self._sessions) >= self._max:
            _, oldest = self._sessions.popitem(last=False)
            oldest.close()
        session = Session(secrets.token_hex(16), owner, view, version)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str, owner: str | None) -> Session | None:
        """The session ``session_id`` if ``owner`` began it, else None."""
        session = self._sessions.get(session_id)
        if session is None or session.owner != owner:
            return None
        session.used = time.monotonic()
        self._sessions.move_to_end(session_id)
        return session

    def end(self, session: Session) -> None:
        """Forget ``session`` and close it."""
        self._sessions.pop(session.id, None)
        session.close()

    def all(self) -> list[Session]:
        """Every open session."""
        return list(self._sessions.values())

    def close(self) -> None:
        """Close every session (the app is stopping)."""
        for session in self.all():
            self.end(session)

    def _sweep(self) -> None:
        deadline = time.monotonic() - self._idle
        for session in list(self._sessions.values()):
            if session.used >= deadline:
                break  # in order of use: the rest are newer
            if not session.in_flight and not session.streaming:
                self.end(session)
