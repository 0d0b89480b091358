"""The Redis Cluster engine with replicas: it forms, and a killed primary is failed over."""

from __future__ import annotations

from tests.engines import RedisCluster, redis_command


def test_a_cluster_with_replicas_fails_a_killed_primary_over_to_its_replica() -> None:
    cluster = RedisCluster(3, replicas=1, node_timeout_ms=2000).start()
    try:
        assert len(cluster.nodes) == 6
        victim = cluster.primaries[1]
        promoted = cluster.fail_over(victim)
        assert promoted in cluster.replicas
        assert b"role:master" in redis_command(promoted.port, "INFO", "replication")
    finally:
        cluster.stop()
