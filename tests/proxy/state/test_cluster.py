"""proxy/state/cluster.py against a real Redis Cluster of three nodes: hash slots as Redis
computes them, commands sent to the node serving their key, the multi-key scripts of the
limits on one slot, and MOVED and ASK followed while a slot changes hands."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from proxy.state.cluster import key_slot
from proxy.state.config import RedisConfig
from proxy.state.redis import RedisStore
from proxy.state.store import RateBucket
from tests.engines import RedisCluster, RedisServer, redis_command


def slot_of_server(port: int, key: str) -> int:
    return int(redis_command(port, "CLUSTER", "KEYSLOT", key)[1:].split(b"\r\n")[0])


def keys_in_slot(node: RedisServer, slot: int) -> int:
    reply = redis_command(node.port, "CLUSTER", "COUNTKEYSINSLOT", str(slot))
    return int(reply[1:].split(b"\r\n")[0])


def owner(cluster: RedisCluster, slot: int) -> RedisServer:
    return cluster.nodes[slot * len(cluster.nodes) // 16384]  # RedisCluster's even split


@pytest.fixture
async def store(redis_cluster: RedisCluster) -> AsyncIterator[RedisStore]:
    redis = RedisStore(RedisConfig(url=redis_cluster.url, cluster=True, timeout_ms=2000))
    await redis.start()
    assert redis.up
    yield redis
    await redis.close()


def test_hash_slots_are_redis_cluster_s() -> None:
    assert key_slot(b"123456789") == 0x31C3 % 16384  # CRC16-XMODEM's check value
    assert key_slot(b"foo") == 12182
    assert key_slot(b"{user1000}.following") == key_slot(b"user1000")
    assert key_slot(b"{}.x") == key_slot(b"{}.x")  # an empty tag hashes the whole key
    assert key_slot(b"{}.x") != key_slot(b"")


def test_hash_slots_agree_with_the_server(redis_cluster: RedisCluster) -> None:
    port = redis_cluster.nodes[0].port
    for key in ("crossway:cache:v1:abc", "crossway:{limits}:rpm:key:k1", "a{b}c", "x{}y", "é"):
        assert key_slot(key.encode()) == slot_of_server(port, key), key


async def test_keys_spread_over_the_nodes_and_read_back(
    store: RedisStore, redis_cluster: RedisCluster
) -> None:
    for i in range(60):
        await store.set(f"crossway:cache:entry-{i}", str(i).encode(), ttl=60)
        assert await store.incr(f"crossway:spend:key:k{i}:20000", 5, ttl=60) == 5
    for i in range(60):
        assert await store.get(f"crossway:cache:entry-{i}") == str(i).encode()
    sizes = [
        int(redis_command(n.port, "DBSIZE")[1:].split(b"\r\n")[0]) for n in redis_cluster.nodes
    ]
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
    store: RedisStore, redis_cluster: RedisCluster
) -> None:
    source, target, other = redis_cluster.nodes
    await store.set("crossway:cache:warm", b"1", ttl=60)  # the map is read
    key, slot = _key_owned_by(redis_cluster, source, "crossway:cache:moved")
    target_id = redis_cluster.node_id(target)
    for node in (target, source, other):  # the resharding order Redis documents
        reply = redis_command(node.port, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id)
        assert reply.startswith(b"+OK"), reply
    await store.set(key, b"moved", ttl=60)  # sent to the source, which answers MOVED
    assert keys_in_slot(target, slot) == 1
    assert keys_in_slot(source, slot) == 0
    assert await store.get(key) == b"moved"


async def test_a_slot_being_migrated_is_followed_with_asking(
    store: RedisStore, redis_cluster: RedisCluster
) -> None:
    source, target, _ = redis_cluster.nodes
    await store.set("crossway:cache:warm", b"1", ttl=60)
    key, slot = _key_owned_by(redis_cluster, source, "crossway:cache:asked")
    source_id, target_id = redis_cluster.node_id(source), redis_cluster.node_id(target)
    importing = ("CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
    assert redis_command(target.port, *importing).startswith(b"+OK")
    migrating = ("CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id)
    assert redis_command(source.port, *migrating).startswith(b"+OK")
    # The key is not on the source: it answers ASK, the target takes it after ASKING.
    await store.set(key, b"asked", ttl=60)
    assert keys_in_slot(target, slot) == 1
    assert keys_in_slot(source, slot) == 0


def test_a_cluster_has_database_0_and_no_unix_socket() -> None:
    for url in ("redis://127.0.0.1:7000/2", "unix:///run/redis.sock"):
        with pytest.raises(msgspec.ValidationError, match="database 0"):
            msgspec.convert({"url": url, "cluster": True}, RedisConfig)
    assert msgspec.convert({"url": "rediss://h:7000/0", "cluster": True}, RedisConfig).cluster


async def test_a_requests_spend_counters_share_one_slot(store: RedisStore) -> None:
    keys = [f"crossway:spend:key:k{i}:d20000" for i in range(5)] + ["crossway:spend:team:t:all"]
    assert await store.incr_within(keys, 3, [5] * 6, [60.0] * 5 + [None]) == (None, [3] * 6)
    assert await store.incr_within(keys, 3, [5] * 6, [60.0] * 5 + [None]) == (None, [6] * 6)
    assert await store.incr_within(keys, 1, [5] * 6, [60.0] * 6) == (0, [6] * 6)
    assert await store.get("crossway:spend:key:k3:d20000") == b"6"
