"""Key changes between instances: Redis pub/sub on top of each instance's key lookup cache.

A change of a key or team made on one process (the admin API, the CLI) drops that key from the
process's lookup cache at once (:class:`~proxy.governance.auth.authenticator.Authenticator`) and is
announced on the channel ``crossway:keys``: the message is the key's hash, or ``*`` for "every
key" (a team changed). Every gateway process subscribes and drops what it is told, so a revoked
key is refused everywhere within the time a message takes — milliseconds — instead of
``auth.cache_ttl``. Messages carry hashes only (never a key).

Where the subscription is. On a single Redis, that Redis. On a Redis Cluster, any live node: a
classic ``PUBLISH``, sent to any node, is broadcast over the cluster bus to every node, replicas
included, so a subscriber on any one of them hears every announcement. Sharded pub/sub
(``SSUBSCRIBE``, Redis 7) is not used: its subscription lives on the primary owning the
channel's slot, so it dies with that primary and can only move once a replica has been promoted
(``cluster-node-timeout`` and an election later), it needs every publisher to switch to
``SPUBLISH`` at once, and its gain, not broadcasting, is nothing at the rate keys change. The
listener tries the store's address (:func:`seeds_of`) first, then every node the cluster listed
when last asked (``CLUSTER SLOTS``: primaries and replicas), the node whose subscription just
ended last.

Resubscription. The listener checks its node every :data:`_CHECK_EVERY` seconds on a second
connection (``CLUSTER SLOTS`` on a cluster, which keeps its list of nodes current; ``PING`` on
one Redis); a node that does not answer within :data:`_TIMEOUT` ends the subscription, as a
lost connection does (a killed node: at once; a silent one: within ``_CHECK_EVERY +
_TIMEOUT`` s). :data:`_RESUBSCRIBE_AFTER` seconds after a subscription ended, the listener
subscribes again on the first node that answers (each try bounded by ``_TIMEOUT``), which on a
cluster need not wait for the failover: any live node will do. When no node answers, it tries
them all again every ``_RESUBSCRIBE_AFTER`` seconds. Not detected: a node cut off from the rest
of the cluster that still answers its clients (its subscribers hear nothing published
elsewhere).

Pub/sub delivers at most once: a process whose subscription was down when a change was
announced would miss it, so on every (re)subscription it drops its whole cache. Publishing goes
through the store (its timeout, its breaker); one that fails — the channel's node failing over,
the breaker open — is retried every :data:`_PUBLISH_RETRY_AFTER` seconds for
:data:`_PUBLISH_FOR` seconds (the store reads the slot map again after a failure), then logged.
Whatever is not announced, or not heard, reaches every process within ``auth.cache_ttl``: no
cached lookup outlives it. Without Redis there is nothing to tell: :class:`KeyEvents` is then
inert.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable, Sequence
from typing import Any

from proxy.state.config import RedisAddress
from proxy.state.redis import RedisStore
from proxy.state.resp import RespConnection
from proxy.state.store import StoreUnavailable

CHANNEL = "crossway:keys"
EVERY_KEY = "*"
_TIMEOUT = 2.0
"""Seconds per connection and per command of the listener."""
_CHECK_EVERY = 1.0
"""Seconds between two checks that the subscription's node answers."""
_RESUBSCRIBE_AFTER = 0.5
"""Seconds between a subscription's end (or a round of nodes none of which answered) and the
next round."""
_PUBLISH_FOR = 3.0
"""Seconds an announcement is retried for while the store cannot publish."""
_PUBLISH_RETRY_AFTER = 0.2


def seeds_of(redis: RedisStore) -> list[RedisAddress]:
    """Where the listener looks first: the store's configured addresses (a cluster's seeds, in
    the order given), so that a gateway started while its first seed is down still subscribes."""
    return list(redis.addresses)


def _identity(address: RedisAddress) -> tuple[str | None, str, int]:
    return (address.path, address.host, address.port)


class Nodes:
    """The nodes a subscription may go to: ``seeds`` (non-empty) first, then those
    :meth:`learn` was told of, each once. A learned node is reached as the first seed is (its
    password and TLS)."""

    def __init__(self, seeds: Sequence[RedisAddress]) -> None:
        self._seeds = list(seeds)
        self._learned: list[RedisAddress] = []

    def candidates(self, last: RedisAddress | None = None) -> list[RedisAddress]:
        """Every node in order, ``last`` (the node whose subscription just ended) moved to the
        end."""
        found: dict[tuple[str | None, str, int], RedisAddress] = {}
        for address in (*self._seeds, *self._learned):
            found.setdefault(_identity(address), address)
        if last is not None and _identity(last) in found:
            found[_identity(last)] = found.pop(_identity(last))
        return list(found.values())

    def learn(self, reply: Any, asked: RedisAddress) -> None:
        """Take the nodes of a ``CLUSTER SLOTS`` reply from ``asked`` (an empty or ``?`` host
        is ``asked``'s). Anything else — an error reply (not a cluster), an empty or malformed
        list — leaves them as they were; never raises."""
        try:
            learned = {_endpoint(node, asked): None for _, _, *nodes in reply for node in nodes}
        except (TypeError, ValueError, IndexError, UnicodeDecodeError):
            return
        if learned:
            self._learned = [self._reached_as_seed(host, port) for host, port in learned]

    def _reached_as_seed(self, host: str, port: int) -> RedisAddress:
        address = copy.copy(self._seeds[0])
        address.path, address.host, address.port = None, host, port
        return address


def _endpoint(node: Any, asked: RedisAddress) -> tuple[str, int]:
    host = node[0].decode() if isinstance(node[0], bytes) else str(node[0])
    return (host if host not in ("", "?") else asked.host, int(node[1]))


class KeyEvents:
    """See the module docstring. ``drop(key_hash | None)`` forgets one cached key (None:
    all) in this process; it is called for every message, this process's own included."""

    def __init__(
        self, redis: RedisStore | None, drop: Callable[[str | None], None], logger: Any = None
    ) -> None:
        self._redis = redis
        self._drop = drop
        self.logger = logger
        self._nodes = Nodes(seeds_of(redis)) if redis is not None else None
        self._task: asyncio.Task[None] | None = None
        self._publishing: set[asyncio.Task[None]] = set()
        self.subscribed = asyncio.Event()
        """Set while the subscription is up (tests wait for it)."""

    def start(self) -> None:
        """Start listening (idempotent; nothing to do without Redis)."""
        if self._redis is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen())

    async def close(self) -> None:
        """Stop listening; wait (2 s at most) for announcements still being published, then
        give up those."""
        if self._publishing:
            await asyncio.wait(tuple(self._publishing), timeout=2.0)
        for task in [*self._publishing, self._task]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = None

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
        """Publish through the store, retried as the module docstring says; logged (never
        raised) when it cannot."""
        assert self._redis is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _PUBLISH_FOR
        while True:
            try:
                await self._redis.publish(CHANNEL, message)
                return
            except StoreUnavailable as exc:
                if loop.time() + _PUBLISH_RETRY_AFTER > deadline:
                    if self.logger is not None:
                        self.logger.warning("key_change_not_announced", error=str(exc))
                    return
            await asyncio.sleep(_PUBLISH_RETRY_AFTER)

    async def _listen(self) -> None:
        """Subscribe on the first node that answers, again each time a subscription ends."""
        assert self._nodes is not None
        last: RedisAddress | None = None
        while True:
            for address in self._nodes.candidates(last):
                if await self._subscription(address):
                    last = address
                    break
            await asyncio.sleep(_RESUBSCRIBE_AFTER)

    async def _subscription(self, address: RedisAddress) -> bool:
        """Subscribe on ``address`` and serve its messages until the subscription ends (the
        connection lost, or the node silent); whether it was ever up (False: the node could
        not be reached)."""
        assert self._nodes is not None
        connection = RespConnection(address, _TIMEOUT)
        checker = RespConnection(address, _TIMEOUT)
        watching: asyncio.Task[None] | None = None
        try:
            topology = await checker.call("CLUSTER", "SLOTS")
            self._nodes.learn(topology, address)
            check = ("CLUSTER", "SLOTS") if isinstance(topology, list) else ("PING",)
            queue = await connection.subscribe(CHANNEL)
            watching = asyncio.get_running_loop().create_task(
                self._watch(checker, check, address, connection)
            )
            await self._serve(queue)
        except StoreUnavailable:
            pass
        finally:
            was_up = self.subscribed.is_set()
            self.subscribed.clear()
            if watching is not None:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
            await asyncio.gather(connection.close(), checker.close())
        return was_up

    async def _watch(
        self,
        checker: RespConnection,
        check: tuple[str, ...],
        address: RedisAddress,
        subscription: RespConnection,
    ) -> None:
        """Send ``check`` to ``address`` every :data:`_CHECK_EVERY` seconds — ``CLUSTER SLOTS``
        on a cluster (learning its nodes as they change), else ``PING``; when it does not
        answer, close ``subscription`` (which ends :meth:`_serve`)."""
        assert self._nodes is not None
        try:
            while True:
                await asyncio.sleep(_CHECK_EVERY)
                self._nodes.learn(await checker.call(*check), address)
        except StoreUnavailable:
            await subscription.close()

    async def _serve(self, queue: asyncio.Queue[Any]) -> None:
        """Apply each message of ``queue`` until it says the connection was lost."""
        while True:
            message = await queue.get()
            if isinstance(message, Exception):
                return
            try:
                self._receive(message)
            except Exception:  # a broken handler must not end the subscription
                if self.logger is not None:
                    self.logger.exception("key_change_not_applied")

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
    not serve (the CLI); nothing without Redis. A change that cannot be announced within
    :data:`_PUBLISH_FOR` seconds is given up: the others then see it within
    ``auth.cache_ttl``."""
    if redis is None or not changes:
        return
    await redis.start()
    try:
        events = KeyEvents(redis, lambda key: None)
        for change in dict.fromkeys(changes):
            await events.publish(change)
    finally:
        await redis.close()
