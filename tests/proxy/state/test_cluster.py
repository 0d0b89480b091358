"""proxy/state/cluster.py against real Redis Clusters: hash slots as Redis computes them,
commands sent to the node serving their key, the limits' multi-key scripts on one slot, MOVED
and ASK followed (one after the other too; a loop ends unavailable after 16 sends), TRYAGAIN and
CLUSTERDOWN retried within the timeout, the map read from any seed, a dead node breaking alone,
and a failover followed. Tests that leave the slots where they are share the module's cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import msgspec
import pytest

from proxy.state.cluster import key_slot
from proxy.state.config import BreakerConfig, RedisConfig
from proxy.state.redis import RedisStore
from proxy.state.store import RateBucket, StoreUnavailable
from tests.engines import RedisCluster, RedisServer, free_port, redis_command
from tests.waiting import until


def slot_of_server(port: int, key: str) -> int:
    return int(redis_command(port, "CLUSTER", "KEYSLOT", key)[1:].split(b"\r\n")[0])


def keys_in_slot(node: RedisServer, slot: int) -> int:
    reply = redis_command(node.port, "CLUSTER", "COUNTKEYSINSLOT", str(slot))
    return int(reply[1:].split(b"\r\n")[0])


def owner(cluster: RedisCluster, slot: int) -> RedisServer:
    return cluster.primaries[slot * len(cluster.primaries) // 16384]  # RedisCluster's split


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(shared_cluster: RedisCluster) -> RedisCluster:
    """The module's cluster, emptied, for the tests that leave its slots where they are (the
    others take a ``redis_cluster`` of their own)."""
    for node in shared_cluster.primaries:
        assert redis_command(node.port, "FLUSHALL").startswith(b"+OK")
    return shared_cluster


async def started(url: str) -> RedisStore:
    redis = RedisStore(RedisConfig(url=url, cluster=True, timeout_ms=2000))
    await redis.start()
    assert redis.up
    return redis


@pytest.fixture
async def store(cluster: RedisCluster) -> AsyncIterator[RedisStore]:
    redis = await started(cluster.url)
    yield redis
    await redis.close()


@pytest.fixture
async def own_store(redis_cluster: RedisCluster) -> AsyncIterator[RedisStore]:
    redis = await started(redis_cluster.url)
    yield redis
    await redis.close()


def test_hash_slots_are_redis_cluster_s() -> None:
    assert key_slot(b"123456789") == 0x31C3 % 16384  # CRC16-XMODEM's check value
    assert key_slot(b"foo") == 12182
    assert key_slot(b"{user1000}.following") == key_slot(b"user1000")
    assert key_slot(b"{}.x") == key_slot(b"{}.x")  # an empty tag hashes the whole key
    assert key_slot(b"{}.x") != key_slot(b"")


def test_hash_slots_agree_with_the_server(cluster: RedisCluster) -> None:
    port = cluster.nodes[0].port
    for key in ("crossway:cache:v1:abc", "crossway:{limits}:rpm:key:k1", "a{b}c", "x{}y", "é"):
        assert key_slot(key.encode()) == slot_of_server(port, key), key


async def test_keys_spread_over_the_nodes_and_read_back(
    store: RedisStore, cluster: RedisCluster
) -> None:
    for i in range(60):
        await store.set(f"crossway:cache:entry-{i}", str(i).encode(), ttl=60)
        assert await store.incr(f"crossway:spend:key:k{i}:20000", 5, ttl=60) == 5
    for i in range(60):
        assert await store.get(f"crossway:cache:entry-{i}") == str(i).encode()
    sizes = [int(redis_command(n.port, "DBSIZE")[1:].split(b"\r\n")[0]) for n in cluster.nodes]
    assert sum(sizes) == 120
    assert all(size > 0 for size in sizes), sizes  # every node serves part of them
    await store.delete("crossway:cache:entry-0")
    assert await store.get("crossway:cache:entry-0") is None
    assert 0 < (await store.ttl("crossway:cache:entry-1") or 0) <= 60


async def test_the_limits_multi_key_scripts_run_on_one_slot(store: RedisStore) -> None:
    buckets = [
        RateBucket("crossway:limits:rpm:key:k1", 1, 2),
        RateBucket("crossway:limits:rpm:team:t1", 1, 5),
    ]
    assert [s.allowed for s in await store.rate_take(buckets)] == [True, True]
    assert [s.allowed for s in await store.rate_take(buckets)] == [True, True]
    assert [s.allowed for s in await store.rate_take(buckets)] == [False, True]
    await store.rate_adjust(buckets)
    slots = ["crossway:limits:inflight:key:k1", "crossway:limits:inflight:team:t1"]
    assert await store.hold(slots, [1, 1]) is None
    assert await store.hold(slots, [1, 1]) == 0
    await store.release(slots)
    assert await store.hold(slots, [1, 1]) is None


async def test_keys_of_different_slots_in_one_script_are_refused(store: RedisStore) -> None:
    with pytest.raises(ValueError, match="CROSSSLOT"):
        await store.rate_take([RateBucket("a", 1, 5), RateBucket("b", 1, 5)])


def _key_owned_by(cluster: RedisCluster, node: RedisServer, prefix: str) -> tuple[str, int]:
    for i in range(10_000):
        key = f"{prefix}-{i}"
        slot = key_slot(key.encode())
        if owner(cluster, slot) is node:
            return key, slot
    raise AssertionError("no key found")


async def test_a_slot_moved_to_another_node_is_followed(
    own_store: RedisStore, redis_cluster: RedisCluster
) -> None:
    source, target, other = redis_cluster.nodes
    await own_store.set("crossway:cache:warm", b"1", ttl=60)  # the map is read
    key, slot = _key_owned_by(redis_cluster, source, "crossway:cache:moved")
    target_id = redis_cluster.node_id(target)
    for node in (target, source, other):  # the resharding order Redis documents
        reply = redis_command(node.port, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id)
        assert reply.startswith(b"+OK"), reply
    await own_store.set(key, b"moved", ttl=60)  # sent to the source, which answers MOVED
    assert keys_in_slot(target, slot) == 1
    assert keys_in_slot(source, slot) == 0
    assert await own_store.get(key) == b"moved"


async def test_a_slot_being_migrated_is_followed_with_asking(
    own_store: RedisStore, redis_cluster: RedisCluster
) -> None:
    source, target, _ = redis_cluster.nodes
    await own_store.set("crossway:cache:warm", b"1", ttl=60)
    key, slot = _key_owned_by(redis_cluster, source, "crossway:cache:asked")
    source_id, target_id = redis_cluster.node_id(source), redis_cluster.node_id(target)
    importing = ("CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
    assert redis_command(target.port, *importing).startswith(b"+OK")
    migrating = ("CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id)
    assert redis_command(source.port, *migrating).startswith(b"+OK")
    # The key is not on the source: it answers ASK, the target takes it after ASKING.
    await own_store.set(key, b"asked", ttl=60)
    assert keys_in_slot(target, slot) == 1
    assert keys_in_slot(source, slot) == 0


def test_a_cluster_has_database_0_and_no_unix_socket() -> None:
    for url in ("redis://127.0.0.1:7000/2", "unix:///run/redis.sock"):
        with pytest.raises(msgspec.ValidationError, match="database 0"):
            msgspec.convert({"url": url, "cluster": True}, RedisConfig)
    assert msgspec.convert({"url": "rediss://h:7000/0", "cluster": True}, RedisConfig).cluster


def test_several_urls_are_the_seeds_of_a_cluster() -> None:
    seeds = ["redis://:pw@10.0.0.1:7000", "redis://:pw@10.0.0.2:7000/0"]
    config = msgspec.convert({"url": seeds, "cluster": True}, RedisConfig)
    assert config.urls == seeds
    assert config.description == "redis://10.0.0.1:7000/0, redis://10.0.0.2:7000/0"
    assert RedisConfig().urls == ["redis://127.0.0.1:6379/0"]
    refused = {
        "cluster: true": {"url": seeds},
        "same scheme and credentials": {"url": [seeds[0], "rediss://:pw@h:7000"], "cluster": True},
        "length >= 1": {"url": [], "cluster": True},
    }
    for message, fields in refused.items():
        with pytest.raises(msgspec.ValidationError, match=message):
            msgspec.convert(fields, RedisConfig)


async def test_a_requests_spend_counters_share_one_slot(store: RedisStore) -> None:
    keys = [f"crossway:spend:key:k{i}:d20000" for i in range(5)] + ["crossway:spend:team:t:all"]
    assert await store.incr_within(keys, 3, [5] * 6, [60.0] * 5 + [None]) == (None, [3] * 6)
    assert await store.incr_within(keys, 3, [5] * 6, [60.0] * 5 + [None]) == (None, [6] * 6)
    assert await store.incr_within(keys, 1, [5] * 6, [60.0] * 6) == (0, [6] * 6)
    assert await store.get("crossway:spend:key:k3:d20000") == b"6"


def reply_of(node: RedisServer, *command: str) -> bytes:
    reply = redis_command(node.port, *command)
    assert not reply.startswith(b"-"), reply
    return reply


def keys_of_slot(node: RedisServer, slot: int) -> list[str]:
    """The keys of ``slot`` that ``node`` holds (at most 1000)."""
    reply = redis_command(node.port, "CLUSTER", "GETKEYSINSLOT", str(slot), "1000").decode()
    return [line for line in reply.split("\r\n")[1:] if line and line[0] not in "$*"]


def errors_counted(node: RedisServer, kind: str) -> int:
    """How many ``kind`` error replies (MOVED, ASK, TRYAGAIN…) ``node`` has sent."""
    for line in redis_command(node.port, "INFO", "errorstats").decode().splitlines():
        if line.startswith(f"errorstat_{kind}:count="):
            return int(line.split("=", 1)[1])
    return 0


def begin_migration(cluster: RedisCluster, slot: int, source: RedisServer, target: RedisServer):
    """``slot`` from ``source`` to ``target``: importing on one, migrating on the other."""
    source_id, target_id = cluster.node_id(source), cluster.node_id(target)
    reply_of(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
    reply_of(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id)


def migrate(source: RedisServer, target: RedisServer, *keys: str) -> None:
    for key in keys:
        reply_of(source, "MIGRATE", "127.0.0.1", str(target.port), key, "0", "5000")


def end_migration(cluster: RedisCluster, slot: int, target: RedisServer) -> None:
    """``slot`` is ``target``'s, on every primary (the order Redis documents); what keys of it
    are still elsewhere (a lease a store wrote beside the keys a test moved) move first."""
    target_id = cluster.node_id(target)
    for node in cluster.primaries:
        if node is not target:
            migrate(node, target, *keys_of_slot(node, slot))
    for node in sorted(cluster.primaries, key=lambda node: node is not target):
        reply_of(node, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id)


def name(node: RedisServer) -> str:
    return f"127.0.0.1:{node.port}"


def cluster_store(url: str | list[str], ups: list | None = None, **options) -> RedisStore:
    config = RedisConfig(url=url, cluster=True, **{"timeout_ms": 2000, **options})
    return RedisStore(config, on_up=None if ups is None else lambda n, up: ups.append((n, up)))


def spy(store: RedisStore, node: RedisServer, sent: list[str]) -> None:
    """Note in ``sent`` the first word of every reply ``node`` gives ``store``'s commands from
    now on ("ok" for a reply that is no error; the map's reads left out)."""
    connection = store._connection._guarded(("127.0.0.1", node.port)).connection  # type: ignore[union-attr]
    for method in ("call", "call_asking"):
        send = getattr(connection, method)

        async def noted(*args, send=send):
            reply = await send(*args)
            if args[0] != "CLUSTER":
                failed = isinstance(reply, Exception)
                sent.append(str(reply).split(" ", 1)[0] if failed else "ok")
            return reply

        setattr(connection, method, noted)


async def test_a_moved_then_an_ask_is_followed(own_store: RedisStore, redis_cluster: RedisCluster):
    first, second, third = redis_cluster.primaries
    await own_store.set("crossway:cache:warm", b"1", ttl=60)  # the map is read: the slot is first's
    key, slot = _key_owned_by(redis_cluster, first, "crossway:cache:twice")
    end_migration(redis_cluster, slot, second)  # moved once (an empty slot)…
    reply_of(second, "SET", key, "twice")
    begin_migration(redis_cluster, slot, second, third)  # …and being moved again, its key gone
    migrate(second, third, key)
    moved, asked = errors_counted(first, "MOVED"), errors_counted(second, "ASK")
    assert await own_store.get(key) == b"twice"  # first: MOVED to second; second: ASK third
    assert errors_counted(first, "MOVED") == moved + 1
    assert errors_counted(second, "ASK") == asked + 1
    # A new key of that slot, by the same two redirects, lands on the importing node.
    await own_store.set(f"crossway:cache:{{{key}}}:new", b"new", ttl=60)
    assert keys_in_slot(third, slot) == 2
    assert own_store.up


async def test_a_redirect_loop_ends_unavailable_after_16_sends(
    own_store: RedisStore, redis_cluster: RedisCluster
):
    source, target, _ = redis_cluster.primaries
    await own_store.set("crossway:cache:warm", b"1", ttl=60)
    key, slot = _key_owned_by(redis_cluster, source, "crossway:cache:looping")
    # Migrating on the source only: it sends ASK to the target, which does not import the slot
    # and sends MOVED back to the source, and so on.
    reply_of(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", redis_cluster.node_id(target))
    sent: list[str] = []
    spy(own_store, source, sent)
    spy(own_store, target, sent)
    with pytest.raises(StoreUnavailable, match="did not serve"):
        await own_store.get(key)
    assert len(sent) == 16, sent
    assert set(sent) == {"ASK", "MOVED"}
    assert own_store.up, "a redirect is no node's failure"
    reply_of(source, "CLUSTER", "SETSLOT", str(slot), "STABLE")
    assert await own_store.get(key) is None


async def test_tryagain_is_retried_while_a_slots_keys_are_split(
    own_store: RedisStore, redis_cluster: RedisCluster
):
    buckets = [
        RateBucket("crossway:limits:rpm:key:k1", 1, 5),
        RateBucket("crossway:limits:rpm:team:t1", 1, 5),
    ]
    await own_store.rate_take(buckets)  # both buckets on the slot's owner
    slot = key_slot(b"limits")
    source = redis_cluster.serving(slot)
    target = next(node for node in redis_cluster.primaries if node is not source)
    begin_migration(redis_cluster, slot, source, target)
    migrate(source, target, "crossway:{limits}:rpm:key:k1")  # the other bucket stays behind
    sent: list[str] = []
    spy(own_store, source, sent)  # the source has one key of two: TRYAGAIN (Redis 7)
    spy(own_store, target, sent)
    connection = own_store._connection._guarded(("127.0.0.1", source.port)).connection  # type: ignore[union-attr]
    call = connection.call

    async def migration_ends_after_the_first_tryagain(*args):
        reply = await call(*args)
        if sent == ["TRYAGAIN"]:
            migrate(source, target, "crossway:{limits}:rpm:team:t1")
            end_migration(redis_cluster, slot, target)
        return reply

    connection.call = migration_ends_after_the_first_tryagain  # type: ignore[method-assign]
    states = await own_store.rate_take(buckets)
    assert sent == ["TRYAGAIN", "MOVED", "ok"]
    assert [state.remaining for state in states] == [3, 3]  # both buckets, as they were


async def test_tryagain_past_the_timeout_is_unavailable_and_trips_no_breaker(
    redis_cluster: RedisCluster,
):
    store = cluster_store(redis_cluster.url, timeout_ms=100)
    await store.start()
    try:
        keys = ["crossway:limits:inflight:key:k1", "crossway:limits:inflight:team:t1"]
        assert await store.hold(keys, [5, 5]) is None
        slot = key_slot(b"limits")
        source = redis_cluster.serving(slot)
        target = next(node for node in redis_cluster.primaries if node is not source)
        begin_migration(redis_cluster, slot, source, target)
        migrate(source, target, "crossway:{limits}:inflight:key:k1")
        tried = errors_counted(source, "TRYAGAIN")
        for _ in range(5):  # more than breaker.failures
            with pytest.raises(StoreUnavailable, match="TRYAGAIN"):
                await store.hold(keys, [5, 5])
        assert errors_counted(source, "TRYAGAIN") - tried >= 10, "retried before giving up"
        assert store.up
        migrate(source, target, "crossway:{limits}:inflight:team:t1")
        end_migration(redis_cluster, slot, target)
        assert await store.hold(keys, [5, 5]) is None
    finally:
        await store.close()


async def test_clusterdown_is_retried_then_unavailable(redis_cluster: RedisCluster):
    store = cluster_store(redis_cluster.url, timeout_ms=100)
    await store.start()
    try:
        # The slot leaves its node's view only: the map, read from the other nodes, still
        # names it, and it answers "CLUSTERDOWN Hash slot not served".
        second = redis_cluster.primaries[1]
        key, slot = _key_owned_by(redis_cluster, second, "crossway:cache:down")
        await store.set(key, b"kept", ttl=60)
        reply_of(second, "CLUSTER", "DELSLOTS", str(slot))
        for _ in range(5):
            with pytest.raises(StoreUnavailable, match="CLUSTERDOWN"):
                await store.get(key)
        assert errors_counted(second, "CLUSTERDOWN") >= 10, "retried before giving up"
        assert store.up
        reply_of(second, "CLUSTER", "ADDSLOTS", str(slot))
        assert await eventually(lambda: store.get(key)) == b"kept"
    finally:
        await store.close()


async def eventually(operation, seconds: float = 10.0):
    """``await operation()`` until it does not raise :class:`StoreUnavailable`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            return await operation()
        except StoreUnavailable:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_a_single_node_store_on_a_cluster_is_unavailable_not_wrong(
    cluster: RedisCluster,
):
    first, second, _ = cluster.primaries
    store = RedisStore(RedisConfig(url=first.url, timeout_ms=2000))  # cluster: false
    await store.start()
    try:
        key, _ = _key_owned_by(cluster, second, "crossway:cache:elsewhere")
        for operation in (store.get, store.ttl, store.delete, store.incr):
            with pytest.raises(StoreUnavailable, match="MOVED"):
                await operation(key)
    finally:
        await store.close()


async def test_the_map_is_read_from_the_first_seed_that_answers(cluster: RedisCluster):
    down = f"redis://127.0.0.1:{free_port()}/0"
    ups: list[tuple[str, bool]] = []
    store = cluster_store([down, cluster.primaries[1].url], ups)
    await store.start()
    try:
        assert store.up
        assert sorted(ups) == sorted((name(node), True) for node in cluster.primaries)
        await test_keys_spread_over_the_nodes_and_read_back(store, cluster)
    finally:
        await store.close()


async def test_with_no_seed_up_at_start_the_cluster_is_found_once_one_answers(
    redis_cluster: RedisCluster,
):
    seed = redis_cluster.primaries[0]
    seed.kill()
    ups: list[tuple[str, bool]] = []
    store = cluster_store(seed.url, ups, breaker=BreakerConfig(failures=3, cooldown_ms=50))
    await store.start()  # does not raise
    try:
        assert not store.up
        assert ups == [(name(seed), False)]
        with pytest.raises(StoreUnavailable):
            await store.get("crossway:cache:k")
        seed.start()  # the same node again (its cluster config kept), without its data
        await until(lambda: store.up, seconds=10, what="the map read once the seed answers")
        assert (name(seed), True) in ups
        await eventually(lambda: store.set("crossway:cache:k", b"v", ttl=60))
        assert await store.get("crossway:cache:k") == b"v"
    finally:
        await store.close()


async def test_a_dead_node_makes_only_its_own_slots_unavailable(redis_cluster: RedisCluster):
    for node in redis_cluster.primaries:  # the others serve while a node is down
        reply_of(node, "CONFIG", "SET", "cluster-require-full-coverage", "no")
    ups: list[tuple[str, bool]] = []
    store = cluster_store(
        redis_cluster.url, ups, timeout_ms=500, breaker=BreakerConfig(failures=2, cooldown_ms=50)
    )
    await store.start()
    try:
        shared = {redis_cluster.serving(key_slot(tag)) for tag in (b"limits", b"spend")}
        victim = next(node for node in redis_cluster.primaries if node not in shared)
        key, _ = _key_owned_by(redis_cluster, victim, "crossway:cache:lost")
        await store.set(key, b"v", ttl=60)
        ups.clear()
        victim.kill()
        for _ in range(2):  # breaker.failures
            with pytest.raises(StoreUnavailable):
                await store.get(key)
        with pytest.raises(StoreUnavailable, match="circuit open"):
            await store.get(key)
        assert ups == [(name(victim), False)]
        assert not store.up
        # Limits and budgets live elsewhere: their guarantees hold.
        bucket = [RateBucket("crossway:limits:rpm:key:k", 1, 2)]
        assert [(await store.rate_take(bucket))[0].allowed for _ in range(3)] == [
            True,
            True,
            False,
        ]
        spend = ["crossway:spend:key:k:d1", "crossway:spend:team:t:d1"]
        assert await store.incr_within(spend, 3, [5, 5], [60.0, 60.0]) == (None, [3, 3])
        assert await store.incr_within(spend, 3, [5, 5], [60.0, 60.0]) == (None, [6, 6])
        assert await store.incr_within(spend, 3, [5, 5], [60.0, 60.0]) == (0, [6, 6])
        victim.start()  # back (its cluster config kept, its data lost): probed, closed
        await until(lambda: store.up, seconds=10, what="the dead node's probe")
        assert ups == [(name(victim), False), (name(victim), True)]
        assert await eventually(lambda: store.get(key)) is None  # the node's cluster is ok again
    finally:
        await store.close()


async def test_after_a_failover_the_promoted_replica_serves_and_the_dead_node_leaves():
    cluster = RedisCluster(3, replicas=1, node_timeout_ms=2000).start()
    ups: list[tuple[str, bool]] = []
    store = cluster_store(
        cluster.url, ups, timeout_ms=500, breaker=BreakerConfig(failures=1, cooldown_ms=50)
    )
    try:
        await store.start()
        victim = cluster.primaries[1]
        key, slot = _key_owned_by(cluster, victim, "crossway:cache:failed-over")
        await store.set(key, b"before", ttl=60)
        promoted = cluster.fail_over(victim)
        await eventually(lambda: store.set(key, b"after", ttl=60))
        assert await store.get(key) == b"after"
        assert keys_in_slot(promoted, slot) == 1
        await until(lambda: store.up, seconds=10, what="every node of the new map up")
        last = dict(ups)  # each node's last report
        assert (name(victim), False) in ups
        assert last[name(victim)] is True, "a node that left the map makes nothing unavailable"
        assert last[name(promoted)] is True
    finally:
        await store.close()
        cluster.stop()
