"""Redis Cluster (``state.redis.cluster: true``): each command sent to the node serving its key,
each node behind a circuit breaker of its own.

**The slot map** (``CLUSTER SLOTS``) is read from the first node that answers among the nodes
of the last map (primaries, then replicas) and the seeds (``state.redis.url``: one URL or a
list), so a gateway starts while some seeds are down and finds the cluster again after its
nodes change. It is read at :meth:`ClusterConnection.start`, then again in the background — at
most every :data:`REFRESH_EVERY` seconds — after a ``MOVED``, a ``CLUSTERDOWN``, a node's
failure or a slot that no node serves, and by the probe while a node is down.

**Routing**: a command goes to the primary serving the hash slot of its first key
(:func:`key_slot`: CRC16 of the key, or of its ``{hash tag}``), over one pipelined
:class:`~proxy.state.resp.RespConnection` per node. Multi-key commands must name keys of one
slot (Redis refuses others with ``CROSSSLOT``): :class:`~proxy.state.redis.RedisStore` gives the
keys its multi-key scripts share one hash tag. Cluster nodes have only database 0.

**Redirects and retries**, as redis-py's cluster client does them, bounded likewise: a command
is sent at most :data:`ATTEMPTS` times in all.

- ``MOVED slot host:port`` (a slot moved, a failover): the slot is patched to that node, the
  command sent there again, and the whole map re-read in the background;
- ``ASK slot host:port`` (a slot being migrated, the key already gone): sent again to that node
  after ``ASKING``, the two back to back on its connection
  (:meth:`~proxy.state.resp.RespConnection.call_asking`);
- ``TRYAGAIN`` (a multi-key command while its slot's keys are split between two nodes by a
  migration) and ``CLUSTERDOWN`` (a slot not served now, a failover under way): sent again from
  the slot's owner after a wait — :data:`FIRST_WAIT`, doubling up to :data:`LONGEST_WAIT` (the
  pause redis-py makes) — as long as the operation's timeout has not passed since the first
  such reply.

What is left — still redirected after :data:`ATTEMPTS` sends, ``TRYAGAIN`` or ``CLUSTERDOWN``
past the timeout — raises :class:`~proxy.state.store.StoreUnavailable`, so that the use's
failure policy applies; a redirect never reaches the caller.

**Breaking per node**: a node's failures — refused or lost connection, timeout, a node that
cannot serve (loading, busy…) — count towards its own breaker (:mod:`proxy.state.breaker`),
never a redirect, ``TRYAGAIN`` or ``CLUSTERDOWN`` (the node answered). Once a node's breaker is
open, commands for its slots raise at once while the other nodes serve theirs. While a node
serving slots has its breaker open, or no map is known, a probe every ``cooldown`` re-reads the
map (so that a failover is seen: the promoted replica serves the slots and the dead node leaves
the map) and prepares each such node whose probe is due (the store's scripts loaded on that
node only), closing its breaker once it answers.

``on_up(node, up)`` (the ``crossway_state_up{node}`` gauge) is told about the nodes serving
slots, named ``host:port``: each one's state when it enters the map, each change of its
breaker, and ``up`` when it leaves the map (it serves nothing: nothing is unavailable because
of it). Until a map is known, the seeds are those nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Sequence
from typing import Any

from proxy.state.breaker import Guarded, OnUp, Prepare, Prober, breaker_of
from proxy.state.config import BreakerConfig, RedisAddress
from proxy.state.resp import ReplyError, RespConnection
from proxy.state.store import StoreUnavailable

SLOTS = 16384
ATTEMPTS = 16
"""Sends of one command at most, redirects and retries together (redis-py's
``RedisClusterRequestTTL``)."""
FIRST_WAIT = 0.005
"""Seconds before the first retry after ``TRYAGAIN`` or ``CLUSTERDOWN``; each later wait doubles."""
LONGEST_WAIT = 0.05
"""The longest wait between two retries (redis-py's, after ``TRYAGAIN``)."""
REFRESH_EVERY = 0.1
"""Seconds between the starts of two background reads of the map, at least."""
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
    """See the module docstring. ``seeds`` are the nodes to read the map from first (the first
    one's password and TLS apply to every node); ``timeout`` is seconds per command, as
    :class:`RespConnection`'s, and bounds the retries of one; ``breaker`` configures each node's
    breaker; ``prepare`` readies a node (at start, and in its probes). Use it from one event
    loop."""

    def __init__(
        self,
        seeds: Sequence[RedisAddress],
        timeout: float,
        breaker: BreakerConfig,
        prepare: Prepare,
        on_up: OnUp,
    ) -> None:
        self._template = seeds[0]
        self._seeds: list[Node] = list(dict.fromkeys((seed.host, seed.port) for seed in seeds))
        self._timeout = timeout
        self._breaker = breaker
        self._prepare = prepare
        self._on_up = on_up
        self._slots: list[Node | None] = [None] * SLOTS
        self._primaries: list[Node] = []  # empty until a map is known
        self._replicas: list[Node] = []
        self._nodes: dict[Node, Guarded] = {}
        self._reported: set[Node] = set()
        self._reading: asyncio.Future[None] | None = None
        self._next_read = 0.0
        self._closed = False
        self._prober = Prober(breaker.cooldown_ms / 1000, self._down, self._probe)

    @property
    def up(self) -> bool:
        """Whether a map is known and every node serving slots answers (no breaker open)."""
        return not self._down()

    async def start(self) -> None:
        """Read the map and prepare every primary (bounded by the timeout, per node). Never
        raises: a node that does not answer starts with its breaker open — every seed, when
        none answers — and is probed."""
        try:
            await self._read_map(probing=False)
        except StoreUnavailable:
            for seed in self._seeds:
                self._guarded(seed).breaker.trip()
            return
        await asyncio.gather(*(self._start_node(node) for node in self._primaries))

    async def call(self, *args: Any) -> Any:
        """Send one command to the node serving its key and return its reply — following
        redirects and retrying as the module docstring says — a :class:`ReplyError` for an error
        reply of the command's own (a script's error, ``WRONGTYPE``, ``CROSSSLOT``). Raises
        :class:`StoreUnavailable`."""
        key = _first_key(args)
        slot = None if key is None else key_slot(_encoded(key))
        node = None if slot is None else self._slots[slot]
        if node is None:
            node = await self._owner(slot)
        reply = await self._send(node, args, False)
        if type(reply) is not ReplyError:
            return reply
        return await self._redirected(slot, node, args, reply)

    async def close(self) -> None:
        """Stop probing and reading the map; close every node's connection (idempotent)."""
        self._closed = True
        await self._prober.close()
        reading, self._reading = self._reading, None
        if reading is not None:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreUnavailable):
                await reading
        nodes, self._nodes = self._nodes, {}
        await asyncio.gather(*(node.connection.close() for node in nodes.values()))

    async def _redirected(
        self, slot: int | None, node: Node, args: tuple[Any, ...], reply: ReplyError
    ) -> Any:
        """Follow ``reply`` (the first error reply to ``args`` from ``node``) and what comes
        after, within :data:`ATTEMPTS` sends and the timeout (module docstring)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        wait = FIRST_WAIT
        for _ in range(ATTEMPTS - 1):
            kind, _, where = str(reply).partition(" ")
            asking = kind == "ASK"
            if kind == "MOVED":
                node = self._moved(where, node)
            elif asking:
                node = _address(where.split()[-1], node)
            elif kind in ("TRYAGAIN", "CLUSTERDOWN"):
                if kind == "CLUSTERDOWN":
                    self._refresh_soon()
                if loop.time() + wait > deadline:
                    break
                await asyncio.sleep(wait)
                wait = min(wait * 2, LONGEST_WAIT)
                node = await self._owner(slot)
            else:
                return reply  # the command's own error
            reply = await self._send(node, args, asking)
            if type(reply) is not ReplyError:
                return reply
        raise StoreUnavailable(f"the Redis Cluster did not serve slot {slot}: {str(reply)[:80]}")

    def _moved(self, where: str, asked: Node) -> Node:
        """The node a ``MOVED`` names (``slot host:port``), patched into the map, which is read
        again in the background."""
        slot, _, address = where.partition(" ")
        node = _address(address, asked)
        self._slots[int(slot)] = node
        self._refresh_soon()
        return node

    async def _owner(self, slot: int | None) -> Node:
        """The primary serving ``slot`` (None: any, one that answers first). Without a map,
        one is read first. Raises :class:`StoreUnavailable` when no node serves the slot."""
        if not self._primaries:
            await self._refresh()
        if slot is None:
            up = [n for n in self._primaries if not self._guarded(n).breaker.open]
            return (up or self._primaries)[0]
        node = self._slots[slot]
        if node is None:
            self._refresh_soon()
            raise StoreUnavailable(f"no node of the Redis Cluster serves slot {slot}")
        return node

    async def _send(self, node: Node, args: tuple[Any, ...], asking: bool) -> Any:
        try:
            return await self._guarded(node).call(*args, asking=asking)
        except StoreUnavailable:
            self._refresh_soon()  # the node may be gone (a failover): read the map again
            raise

    def _guarded(self, node: Node) -> Guarded:
        """The node's connection and breaker (made on first use)."""
        guarded = self._nodes.get(node)
        if guarded is None:
            address = copy.copy(self._template)
            address.host, address.port = node
            guarded = self._nodes[node] = Guarded(
                _name(node),
                RespConnection(address, self._timeout),
                breaker_of(self._breaker, lambda up: self._changed(node, up)),
            )
        return guarded

    async def _start_node(self, node: Node) -> None:
        guarded = self._guarded(node)
        try:
            await guarded.ready(self._prepare)
        except StoreUnavailable:
            guarded.breaker.trip()

    async def _refresh(self) -> None:
        """Read the map now (concurrent callers share one read). Raises
        :class:`StoreUnavailable` when no node answers."""
        reading = self._reading
        if reading is None:
            reading = self._start_reading()
        await asyncio.shield(reading)

    def _refresh_soon(self) -> None:
        """Read the map in the background, unless a read is under way, or began less than
        :data:`REFRESH_EVERY` ago."""
        loop = asyncio.get_running_loop()
        if self._reading is None and not self._closed and loop.time() >= self._next_read:
            self._start_reading()

    def _start_reading(self) -> asyncio.Future[None]:
        self._next_read = asyncio.get_running_loop().time() + REFRESH_EVERY
        reading = self._reading = asyncio.ensure_future(self._read_map(probing=False))
        reading.add_done_callback(self._read)
        return reading

    def _read(self, reading: asyncio.Future[None]) -> None:
        if self._reading is reading:
            self._reading = None
        if not reading.cancelled():
            reading.exception()  # retrieved: the callers that waited got it

    async def _read_map(self, *, probing: bool) -> None:
        """Read the map from the first node that answers ``CLUSTER SLOTS`` with one — the last
        map's primaries, its replicas, the seeds; those whose breaker is open only when
        ``probing`` (then a map closes it). Raises :class:`StoreUnavailable` when none does."""
        candidates = dict.fromkeys([*self._primaries, *self._replicas, *self._seeds])
        for candidate in candidates:
            node = self._guarded(candidate)
            if node.breaker.open and not probing:
                continue
            try:
                reply = await (node.connection.call if probing else node.call)("CLUSTER", "SLOTS")
            except StoreUnavailable:
                continue
            if isinstance(reply, list) and reply:
                if probing:
                    node.breaker.succeeded()
                await self._apply(reply, candidate)
                return
        raise StoreUnavailable("no Redis Cluster node answered CLUSTER SLOTS")

    async def _apply(self, reply: list[Any], asked: Node) -> None:
        """Route by the map of a ``CLUSTER SLOTS`` reply; tell ``on_up`` of the nodes that
        entered it or left it; close the connections of nodes no longer known."""
        slots: list[Node | None] = [None] * SLOTS
        primaries: list[Node] = []
        replicas: list[Node] = []
        for start, end, primary, *others in reply:
            node = _node_of(primary, asked)
            slots[start : end + 1] = [node] * (end - start + 1)
            if node not in primaries:
                primaries.append(node)
            replicas += (_node_of(other, asked) for other in others)
        self._slots, self._primaries, self._replicas = slots, primaries, replicas
        self._report_members()
        known = {*primaries, *replicas, *self._seeds}
        gone = [self._nodes.pop(node) for node in list(self._nodes) if node not in known]
        await asyncio.gather(*(node.connection.close() for node in gone))

    def _serving(self) -> set[Node]:
        """The nodes ``on_up`` is told about: the primaries of the map (before one is known,
        the seeds)."""
        return set(self._primaries or self._seeds)

    def _report_members(self) -> None:
        serving = self._serving()
        for node in self._reported - serving:
            self._reported.discard(node)
            self._on_up(_name(node), True)
        for node in serving - self._reported:
            self._report(node, not self._guarded(node).breaker.open)
        if self._down():
            self._prober.start()

    def _report(self, node: Node, up: bool) -> None:
        self._reported.add(node)
        self._on_up(_name(node), up)

    def _changed(self, node: Node, up: bool) -> None:
        """A node's breaker closed (``up``) or opened."""
        if node in self._serving():
            self._report(node, up)
        if not up:
            self._prober.start()

    def _down(self) -> bool:
        """Whether no map is known or a node serving slots has its breaker open."""
        nodes = self._nodes
        return not self._primaries or any(
            node in nodes and nodes[node].breaker.open for node in self._primaries
        )

    async def _probe(self) -> None:
        """One probe (every cooldown while :meth:`_down`): read the map, whatever the breakers
        say, then prepare each node of it whose breaker is open and whose probe is due."""
        with contextlib.suppress(StoreUnavailable):
            await self._read_map(probing=True)
        due = [self._guarded(n) for n in self._primaries if self._guarded(n).breaker.probe_due()]
        await asyncio.gather(*(self._probe_node(node) for node in due))

    async def _probe_node(self, node: Guarded) -> None:
        with contextlib.suppress(StoreUnavailable):
            await node.ready(self._prepare)


def _name(node: Node) -> str:
    return f"{node[0]}:{node[1]}"


def _node_of(entry: list[Any], asked: Node) -> Node:
    """A node of a ``CLUSTER SLOTS`` entry (``[host, port, id, …]``); an empty or ``?`` host
    is the node that was asked."""
    host = entry[0].decode() if isinstance(entry[0], bytes) else str(entry[0])
    return (host if host not in ("", "?") else asked[0], int(entry[1]))


def _address(text: str, asked: Node) -> Node:
    """The node of a redirect's ``host:port`` (an empty host is the node that was asked)."""
    host, _, port = text.rpartition(":")
    return (host or asked[0], int(port))
