"""Alert webhooks: JSON POSTs to an operator's URL, delivered in the background.

:meth:`WebhookAlerts.send` only schedules a delivery and returns: a request is never held up by
an alert. A delivery is tried up to ``attempts`` times, ``timeout`` seconds each, waiting
``backoff`` seconds before the second try and twice as long before each next one; a 2xx answer
ends it, anything else (another status, a refused connection, a timeout) is retried, and the
last failure is logged. At most ``max_pending`` deliveries run at once; past that an alert is
logged and not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgspec

_ENCODER = msgspec.json.Encoder()


class WebhookAlerts:
    """Deliveries to one URL (see the module docstring)."""

    def __init__(
        self,
        url: str,
        logger: Any,
        *,
        attempts: int = 3,
        timeout: float = 5.0,
        backoff: float = 1.0,
        max_pending: int = 100,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._url = url
        self._logger = logger
        self._attempts = attempts
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._backoff = backoff
        self._max_pending = max_pending
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None
        self._pending: set[asyncio.Task[None]] = set()

    def send(self, payload: dict[str, Any]) -> None:
        """Deliver ``payload`` in the background (never blocks, never raises)."""
        if len(self._pending) >= self._max_pending:
            self._logger.error("alert_not_sent", reason="too many deliveries pending")
            return
        task = asyncio.get_running_loop().create_task(self._deliver(_ENCODER.encode(payload)))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def drain(self) -> None:
        """Wait until every delivery scheduled so far has ended."""
        while self._pending:
            await asyncio.wait(set(self._pending))

    async def close(self) -> None:
        """Stop pending deliveries and close the connection pool (idempotent)."""
        for task in list(self._pending):
            task.cancel()
        for task in list(self._pending):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _deliver(self, body: bytes) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        wait = self._backoff
        reason = ""
        for attempt in range(1, self._attempts + 1):
            try:
                async with self._session.post(
                    self._url, data=body, headers={"content-type": "application/json"}
                ) as response:
                    if 200 <= response.status < 300:
                        return
                    reason = f"HTTP {response.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                reason = type(exc).__name__
            if attempt < self._attempts:
                await self._sleep(wait)
                wait *= 2
        self._logger.warning("alert_not_delivered", attempts=self._attempts, reason=reason)
