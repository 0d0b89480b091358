"""proxy/state/events.py: where key changes are subscribed to and published, against a real Redis
and a real Redis Cluster of three primaries and three replicas (one for the module, kept healthy:
the nodes these tests kill or stop are replicas, restarted or resumed before the test ends).

What is proved: the nodes a subscription may go to (the seeds first, then the cluster's, the one
that just failed last); a subscription hears a publish sent to any node of the cluster; every
(re)subscription drops the whole cache; a subscription whose node is killed, or falls silent,
moves to another node; an announcement the store cannot publish is retried, then given up and
logged. No assertion here is on time: every wait is bounded only so that a broken listener fails
the test instead of hanging it."""

from __future__ import annotations

import asyncio
import copy
import signal
from collections.abc import AsyncIterator, Iterator

import pytest

from proxy.state import events as events_module
from proxy.state.config import BreakerConfig, RedisAddress, RedisConfig
from proxy.state.events import CHANNEL, KeyEvents, Nodes, seeds_of
from proxy.state.redis import RedisStore
from proxy.state.store import StoreUnavailable
from tests.engines import RedisCluster, RedisServer, redis_command
from tests.waiting import until

BOUND = 20.0
"""Seconds any wait here may take before the test fails (a guard, not a measured bound)."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    nodes = RedisCluster(3, replicas=1, node_timeout_ms=2000).start()
    yield nodes
    nodes.stop()


def subscribers(node: RedisServer) -> int:
    """How many connections of ``node`` subscribe to the key-change channel."""
    return int(redis_command(node.port, "PUBSUB", "NUMSUB", CHANNEL).split(b"\r\n")[-2][1:])


class Listener:
    """A :class:`KeyEvents` on its own store, recording what it is told to drop."""

    def __init__(self, url: str, *, cluster: bool) -> None:
        self.store = RedisStore(RedisConfig(url=url, cluster=cluster, timeout_ms=2000))
        self.dropped: list[str | None] = []
        self.events = KeyEvents(self.store, self.dropped.append)

    async def __aenter__(self) -> Listener:
        await self.store.start()
        self.events.start()
        await until(self.events.subscribed.is_set, seconds=BOUND, what="the subscription")
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.events.close()
        await self.store.close()

    @property
    def subscriptions(self) -> int:
        """How many times it (re)subscribed: each one dropped the whole cache."""
        return self.dropped.count(None)


@pytest.fixture
async def publisher(cluster: RedisCluster) -> AsyncIterator[KeyEvents]:
    store = RedisStore(RedisConfig(url=cluster.url, cluster=True, timeout_ms=2000))
    await store.start()
    yield KeyEvents(store, lambda key: None)
    await store.close()


def address(url: str) -> RedisAddress:
    return RedisAddress(url)


def test_the_seeds_come_first_then_the_cluster_s_nodes_the_last_one_last() -> None:
    seed = address("redis://:pw@10.0.0.1:7000/0")
    nodes = Nodes([seed])
    assert nodes.candidates() == [seed]
    nodes.learn(
        [
            [0, 8191, [b"10.0.0.2", 7001, b"id2"], [b"10.0.0.1", 7000, b"id1"]],
            [8192, 16383, [b"", 7002, b"id3"], [b"?", 7003, b"id4"]],
        ],
        asked=seed,
    )
    order = [(a.host, a.port) for a in nodes.candidates()]
    assert order == [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("10.0.0.1", 7002), ("10.0.0.1", 7003)]
    assert all(a.password == "pw" for a in nodes.candidates())  # reached as the seed is
    last = nodes.candidates()[0]
    assert [(a.host, a.port) for a in nodes.candidates(last)][-1] == ("10.0.0.1", 7000)


def test_what_is_not_a_cluster_s_node_list_changes_nothing() -> None:
    seed = address("redis://127.0.0.1:7000/0")
    nodes = Nodes([seed])
    nodes.learn([[0, 16383, [b"127.0.0.1", 7001, b"id"]]], asked=seed)
    before = nodes.candidates()
    for reply in (
        Exception("ERR This instance has cluster support disabled"),
        b"PONG",
        [],
        None,
        [[0, 16383, [b"127.0.0.1", b"not a port", b"id"]]],
    ):
        nodes.learn(reply, asked=seed)
        assert nodes.candidates() == before
    other = copy.copy(seed)
    other.port = 7009
    assert nodes.candidates(other) == before  # an unknown node is not added


def test_the_seeds_are_the_store_s_address() -> None:
    store = RedisStore(RedisConfig(url="redis://127.0.0.1:7000/0", cluster=True))
    assert [(a.host, a.port) for a in seeds_of(store)] == [("127.0.0.1", 7000)]


async def test_a_single_redis_restarted_is_subscribed_again_and_everything_dropped(
    own_redis: RedisServer,
):
    async with Listener(own_redis.url, cluster=False) as listener:
        assert listener.dropped == [None]
        await listener.events.publish("hash-1")
        await until(lambda: "hash-1" in listener.dropped, seconds=BOUND, what="the message")
        own_redis.kill()
        own_redis.start()
        await until(lambda: listener.subscriptions == 2, seconds=BOUND, what="resubscription")
        await until(lambda: subscribers(own_redis) == 1, seconds=BOUND, what="one subscriber")


async def test_a_subscription_on_any_node_hears_a_publish_sent_to_any_other(
    cluster: RedisCluster, publisher: KeyEvents
):
    for node in (cluster.replicas[0], cluster.primaries[2]):
        async with Listener(node.url, cluster=True) as listener:
            assert subscribers(node) == 1  # on the node of its URL while that one answers
            await publisher.publish(f"heard-on-{node.port}")
            await publisher.publish(None)  # "every key"
            await until(
                lambda listener=listener: listener.dropped.count(None) == 2,
                seconds=BOUND,
                what="the messages",
            )
            assert listener.dropped == [None, f"heard-on-{node.port}", None]


async def test_the_node_killed_the_subscription_moves_to_another_and_drops_everything(
    cluster: RedisCluster, publisher: KeyEvents
):
    seed = cluster.replicas[1]
    try:
        async with Listener(seed.url, cluster=True) as listener:
            assert subscribers(seed) == 1
            seed.kill()
            await until(lambda: listener.subscriptions == 2, seconds=BOUND, what="resubscription")
            live = [node for node in cluster.nodes if node is not seed]
            assert sum(map(subscribers, live)) == 1
            await publisher.publish("after-the-kill")
            await until(
                lambda: "after-the-kill" in listener.dropped, seconds=BOUND, what="the message"
            )
    finally:
        seed.start()


async def test_a_silent_node_ends_the_subscription_and_another_takes_it(
    cluster: RedisCluster, publisher: KeyEvents
):
    seed = cluster.replicas[2]
    assert seed.process is not None
    async with Listener(seed.url, cluster=True) as listener:
        assert subscribers(seed) == 1
        seed.process.send_signal(signal.SIGSTOP)  # alive to TCP, answering nothing
        try:
            await until(lambda: listener.subscriptions == 2, seconds=BOUND, what="resubscription")
            live = [node for node in cluster.nodes if node is not seed]
            assert sum(map(subscribers, live)) == 1
            await publisher.publish("while-silent")
            await until(
                lambda: "while-silent" in listener.dropped, seconds=BOUND, what="the message"
            )
        finally:
            seed.process.send_signal(signal.SIGCONT)


class FailingFirst(RedisStore):
    """A store whose first ``failures`` publishes fail as an unreachable node's would."""

    def __init__(self, url: str, failures: int) -> None:
        super().__init__(RedisConfig(url=url, breaker=BreakerConfig(failures=100)))
        self.failures = failures

    async def publish(self, channel: str, message: bytes) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("the connection to Redis was lost")
        await super().publish(channel, message)


async def test_an_announcement_the_store_cannot_publish_yet_is_retried(
    own_redis: RedisServer,
):
    store = FailingFirst(own_redis.url, failures=2)
    await store.start()
    try:
        async with Listener(own_redis.url, cluster=False) as listener:
            KeyEvents(store, lambda key: None).announce("retried")  # not awaited: a task
            await until(lambda: "retried" in listener.dropped, seconds=BOUND, what="the retry")
            assert store.failures == 0
    finally:
        await store.close()


class Warnings:
    def __init__(self) -> None:
        self.events: list[str] = []

    def warning(self, event: str, **_: object) -> None:
        self.events.append(event)


async def test_an_announcement_that_never_lands_is_given_up_and_logged(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(events_module, "_PUBLISH_FOR", 0.5)
    store = FailingFirst("redis://127.0.0.1:9/0", failures=1_000)  # nothing listens there
    logger = Warnings()
    events = KeyEvents(store, lambda key: None, logger)
    events.announce("lost")
    await asyncio.wait_for(events.close(), timeout=BOUND)
    assert logger.events == ["key_change_not_announced"]
    assert store.failures <= 1_000 - 2  # tried again before giving up
