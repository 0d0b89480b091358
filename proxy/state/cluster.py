"""Redis Cluster (``state.redis.cluster: true``): each command sent to the node serving its key.

:class:`ClusterConnection` offers :class:`~proxy.state.resp.RespConnection`'s ``call`` over a
cluster: it reads the slot map (``CLUSTER SLOTS``) from the configured node on first use, keeps
one pipelined :class:`~proxy.state.resp.RespConnection` per primary, and routes a command by the
hash slot of its first key (:func:`key_slot`: CRC16 of the key, or of its ``{hash tag}``).
``SCRIPT`` commands go to every primary (so that ``EVALSHA`` finds the scripts on each);
commands without a key go to any primary.

Resharding and failover: a ``MOVED`` reply updates that slot and resends the command once to
the node named (the whole map is re-read before the next command); an ``ASK`` reply resends it
once to the importing node, after ``ASKING``, on a connection of its own (``ASKING`` applies to
the next command of a connection, which a shared pipelined one cannot promise). A node that
cannot be reached raises :class:`~proxy.state.store.StoreUnavailable` as a lost connection does, and
the map is re-read — from any node that answers — before the next command.

Multi-key commands must name keys of one slot (Redis refuses others with ``CROSSSLOT``):
:class:`~proxy.state.redis.RedisStore` gives the keys its multi-key scripts share one hash tag.
Cluster nodes have only database 0 (``state.redis.url`` must not name another).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from proxy.state.config import RedisAddress
from proxy.state.resp import ReplyError, RespConnection
from proxy.state.store import StoreUnavailable

SLOTS = 16384
Node = tuple[str, int]


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def key_slot(key: bytes) -> int:
    """The cluster hash slot of ``key``: CRC16-XMODEM of the key — or, when it has one, of its
    hash tag (what the first ``{`` and the next ``}`` enclose, if not empty) — modulo 16384."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    crc = 0
    for byte in key:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc % SLOTS


def _first_key(args: tuple[Any, ...]) -> Any:
    """The first key a command names, or None (``EVAL``/``EVALSHA`` name theirs after the
    key count; the others used here, ``GET``, ``SET``, ``UNLINK``, ``PTTL``, ``PUBLISH``,
    first)."""
    command = args[0]
    if command in ("EVALSHA", "EVAL"):
        return args[3] if len(args) > 3 and int(args[2]) > 0 else None
    return args[1] if len(args) > 1 else None


def _encoded(key: Any) -> bytes:
    return key if type(key) is bytes else str(key).encode()


class ClusterConnection:
    """See the module docstring. ``address`` is the node to read the map from first (its
    password and TLS apply to every node); ``timeout`` is seconds per command, as
    :class:`RespConnection`'s. Use it from one event loop."""

    def __init__(self, address: RedisAddress, timeout: float) -> None:
        self._seed = address
        self._timeout = timeout
        self._slots: list[Node | None] = [None] * SLOTS
        self._primaries: list[Node] = []
        self._connections: dict[Node, RespConnection] = {}
        self._stale = True
        self._refreshing: asyncio.Future[None] | None = None

    @property
    def connected(self) -> bool:
        """Whether a connection to some node is open now."""
        return any(connection.connected for connection in self._connections.values())

    async def call(self, *args: Any) -> Any:
        """Send one command to the node serving its key and return its reply (a
        :class:`ReplyError` for an error reply). Raises :class:`StoreUnavailable`."""
        if self._stale:
            await self._refresh()
        if args[0] == "SCRIPT":
            return await self._everywhere(args)
        key = _first_key(args)
        node = self._primaries[0] if key is None else self._slots[key_slot(_encoded(key))]
        if node is None:
            self._stale = True
            raise StoreUnavailable("no Redis Cluster node serves that slot")
        reply = await self._send(node, args)
        if type(reply) is ReplyError:
            redirect = str(reply).split()
            if len(redirect) == 3 and redirect[0] == "MOVED":
                moved = _node(redirect[2], node)
                self._slots[int(redirect[1])] = moved
                self._stale = True  # a resharding or a failover: read the whole map again
                reply = await self._send(moved, args)
            elif len(redirect) == 3 and redirect[0] == "ASK":
                reply = await self._ask(_node(redirect[2], node), args)
        return reply

    async def close(self) -> None:
        """Close every node's connection (idempotent)."""
        connections, self._connections = self._connections, {}
        await asyncio.gather(*(connection.close() for connection in connections.values()))

    async def _send(self, node: Node, args: tuple[Any, ...]) -> Any:
        try:
            return await self._connection(node).call(*args)
        except StoreUnavailable:
            self._stale = True  # the node may be gone: the next command re-reads the map
            raise

    async def _ask(self, node: Node, args: tuple[Any, ...]) -> Any:
        connection = RespConnection(self._address_of(node), self._timeout)
        try:
            await connection.call("ASKING")
            return await connection.call(*args)
        finally:
            await connection.close()

    async def _everywhere(self, args: tuple[Any, ...]) -> Any:
        """Send ``args`` to every primary; the first error reply, else the first reply."""
        replies = await asyncio.gather(*(self._send(node, args) for node in self._primaries))
        for reply in replies:
            if type(reply) is ReplyError:
                return reply
        return replies[0]

    def _connection(self, node: Node) -> RespConnection:
        connection = self._connections.get(node)
        if connection is None:
            connection = RespConnection(self._address_of(node), self._timeout)
            self._connections[node] = connection
        return connection

    def _address_of(self, node: Node) -> RedisAddress:
        address = copy.copy(self._seed)
        address.host, address.port = node
        return address

    async def _refresh(self) -> None:
        """Read the slot map (concurrent callers share one read)."""
        pending = self._refreshing
        if pending is None:
            pending = self._refreshing = asyncio.ensure_future(self._read_map())
            pending.add_done_callback(self._refreshed)
        await asyncio.shield(pending)

    def _refreshed(self, future: asyncio.Future[None]) -> None:
        self._refreshing = None
        if not future.cancelled():
            future.exception()  # retrieved: the callers got it

    async def _read_map(self) -> None:
        seed: Node = (self._seed.host, self._seed.port)
        candidates = list(dict.fromkeys([*self._primaries, seed]))
        for candidate in candidates:
            try:
                reply = await self._connection(candidate).call("CLUSTER", "SLOTS")
            except StoreUnavailable:
                continue
            if type(reply) is ReplyError or not isinstance(reply, list) or not reply:
                continue
            slots: list[Node | None] = [None] * SLOTS
            primaries: list[Node] = []
            for start, end, primary, *_replicas in reply:
                node = _node_of(primary, candidate)
                slots[start : end + 1] = [node] * (end - start + 1)
                if node not in primaries:
                    primaries.append(node)
            self._slots, self._primaries, self._stale = slots, primaries, False
            for gone in set(self._connections) - {*primaries, seed}:
                await self._connections.pop(gone).close()
            return
        raise StoreUnavailable("no Redis Cluster node answered CLUSTER SLOTS")


def _node_of(entry: list[Any], asked: Node) -> Node:
    """A node of a ``CLUSTER SLOTS`` entry (``[host, port, id, …]``); an empty or ``?`` host
    is the node that was asked."""
    host = entry[0].decode() if isinstance(entry[0], bytes) else str(entry[0])
    return (host if host not in ("", "?") else asked[0], int(entry[1]))


def _node(text: str, asked: Node) -> Node:
    """The node of a redirect's ``host:port`` (an empty host is the node that was asked)."""
    host, _, port = text.rpartition(":")
    return (host or asked[0], int(port))
