"""Key changes between instances: Redis pub/sub on top of each instance's key lookup cache.

A change of a key or team made on one process (the admin API, the CLI) drops that key from the
process's lookup cache at once (:class:`~proxy.governance.auth.authenticator.Authenticator`) and is
announced on the channel ``crossway:keys``: the message is the key's hash, or ``*`` for "every
key" (a team changed). Every gateway process subscribes and drops what it is told, so a revoked
key is refused everywhere within the time a message takes — milliseconds — instead of
``auth.cache_ttl``. Messages carry hashes only (never a key).

Pub/sub delivers at most once: a process whose subscription was down when a change was
announced would miss it, so on every (re)subscription it drops its whole cache. Publishing is
bounded by the store's timeout; a publish that fails is logged and the change still reaches the
others within ``auth.cache_ttl``. Without Redis there is nothing to tell: :class:`KeyEvents`
is then inert.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from proxy.state.redis import RedisStore
from proxy.state.resp import RespConnection
from proxy.state.store import StoreUnavailable

CHANNEL = "crossway:keys"
EVERY_KEY = "*"
_RESUBSCRIBE_AFTER = 0.5


class KeyEvents:
    """See the module docstring. ``drop(key_hash | None)`` forgets one cached key (None:
    all) in this process; it is called for every message, this process's own included."""

    def __init__(
        self, redis: RedisStore | None, drop: Callable[[str | None], None], logger: Any = None
    ) -> None:
        self._redis = redis
        self._drop = drop
        self.logger = logger
        self._task: asyncio.Task[None] | None = None
        self._publishing: set[asyncio.Task[None]] = set()
        self.subscribed = asyncio.Event()
        """Set while the subscription is up (tests wait for it)."""

    def start(self) -> None:
        """Start listening (idempotent; nothing to do without Redis)."""
        if self._redis is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def close(self) -> None:
        """Stop listening; wait for announcements still being published."""
        if self._publishing:
            await asyncio.wait(tuple(self._publishing), timeout=2.0)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def announce(self, key_hash: str | None) -> None:
        """Tell every process that ``key_hash`` (None: every key) changed. Never blocks."""
        if self._redis is None:
            return
        message = (key_hash or EVERY_KEY).encode()
        task = asyncio.get_running_loop().create_task(self._publish(message))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def publish(self, key_hash: str | None) -> None:
        """:meth:`announce`, awaited (the CLI's way: it exits right after)."""
        if self._redis is not None:
            await self._publish((key_hash or EVERY_KEY).encode())

    async def _publish(self, message: bytes) -> None:
        assert self._redis is not None
        try:
            await self._redis.publish(CHANNEL, message)
        except StoreUnavailable as exc:
            if self.logger is not None:
                self.logger.warning("key_change_not_announced", error=str(exc))

    async def _listen(self) -> None:
        assert self._redis is not None
        while True:
            connection = RespConnection(self._redis.address, 2.0)
            try:
                queue = await connection.subscribe(CHANNEL)
                while True:
                    message = await queue.get()
                    if isinstance(message, Exception):
                        break
                    try:
                        self._receive(message)
                    except Exception:  # a broken handler must not end the subscription
                        if self.logger is not None:
                            self.logger.exception("key_change_not_applied")
            except StoreUnavailable:
                pass
            finally:
                self.subscribed.clear()
                await connection.close()
            await asyncio.sleep(_RESUBSCRIBE_AFTER)

    def _receive(self, message: Any) -> None:
        if not isinstance(message, list) or len(message) != 3:
            return
        kind, _, data = message
        if kind == b"subscribe":
            self._drop(None)  # whatever was announced while unsubscribed is unknown
            self.subscribed.set()
        elif kind == b"message" and isinstance(data, bytes):
            text = data.decode(errors="replace")
            self._drop(None if text == EVERY_KEY else text)


async def announce_changes(redis: RedisStore | None, changes: list[str | None]) -> None:
    """Publish ``changes`` (key hashes, None for every key) once, from a process that does
    not serve (the CLI); nothing without Redis. Failures are the caller's to ignore: the
    others then see the change within ``auth.cache_ttl``."""
    if redis is None or not changes:
        return
    await redis.start()
    try:
        events = KeyEvents(redis, lambda key: None)
        for change in dict.fromkeys(changes):
            await events.publish(change)
    finally:
        await redis.close()
