"""A Redis Cluster's faults under two ``crossway serve`` instances: one cluster of three primaries
(``cluster-node-timeout`` 2000 ms, ``cluster-require-full-coverage no``) and two gateways for
the module, the scenarios in this order (the last kills a node):

1. the limits' slot moved to another node, then migrated again — each gateway's first admission
   gets ``MOVED`` then ``ASK`` — and no request gets a 500;
2. the limits' slot migrated key by key under traffic, a request's two buckets split between two
   nodes for 150 ms (``TRYAGAIN``): every request served, no decision degraded (the retry bound,
   about 0.6 s of waits with ``timeout_ms: 1000``, is four times the window: slack for a loaded
   2-core machine);
3. a primary holding only cache entries killed (``kill -9``) under traffic: the rate limit and
   the budget, whose keys live on another node, stay exact across both gateways and nothing is
   decided without them; ``crossway_state_up{node}`` reads 0 for the dead node on both, 1 for
   the others, so the shipped alert's expression holds for that node alone; a third gateway
   started with the dead node as its first seed finds the cluster through the second and serves
   with the shared state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from proxy.state.cluster import key_slot
from tests.e2e.processes import REPO, Served, free_port, serve
from tests.e2e.scaleout import COST, FREE, LIMITED, Client, config, poll
from tests.engines import PostgresServer, RedisCluster, RedisServer, redis_command

MULTI = "sk-cw-multi-bucket-key-for-cluster-faults-0123456"
"""rpm 600 and its team's rpm 600: every admission takes two buckets of the limits' slot, which
the scenario's hundred or so requests never fill, and which stay in Redis while it runs (each
request puts a bucket 100 ms further from full: its key expires only once it is full again)."""
FRESH = "sk-cw-fresh-limited-key-for-cluster-faults-012345"
FRESH_RPM = 30
SPENDER = "sk-cw-spender-key-for-cluster-faults-0123456789ab"
SPENDER_USD = 0.0001
RESERVATION_USD = 0.00004  # what one request of max_tokens 10 reserves at most (test_scaleout)
LIMITS_SLOT = key_slot(b"limits")
SPEND_SLOT = key_slot(b"spend")
TEAM_BUCKET = "crossway:{limits}:rpm:team:crew"
SPLIT_SECONDS = 0.15


def cluster_config(port: int, seeds: list[str], database: str) -> str:
    """The scale-out tests' config over the cluster's ``seeds``, with this module's keys."""
    text = config(port, redis_url="SEEDS", database_url=database, plugins=COST, cluster=True)
    keys = [
        f'{{key: "{MULTI}", alias: multi, team: crew, rpm: 600}}',
        f'{{key: "{FRESH}", alias: fresh, rpm: {FRESH_RPM}}}',
        f'{{key: "{SPENDER}", alias: spender, budget: {{max_usd: {SPENDER_USD}, period: 1d}}}}',
    ]
    listed = "".join(f"    - {key}\n" for key in keys)
    text = text.replace('url: "SEEDS"', f"url: {json.dumps(seeds)}")
    return text.replace("  keys:\n", f"  teams:\n    crew: {{rpm: 600}}\n  keys:\n{listed}")


@contextlib.contextmanager
def gateway(directory: Path, name: str, seeds: list[str], database: str) -> Iterator[Served]:
    port = free_port()
    path = directory / f"{name}.yaml"
    path.write_text(cluster_config(port, seeds, database))
    data = {"CROSSWAY_DATA_DIR": str(directory / f"data-{name}")}
    with serve(path, port, 1, directory / f"{name}.log", env=data) as served:
        yield served


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster(3, node_timeout_ms=2000).start()
    try:
        for node in cluster.primaries:  # the live nodes serve while one is down
            reply_of(node, "CONFIG", "SET", "cluster-require-full-coverage", "no")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def database(postgres_server: PostgresServer) -> Iterator[str]:
    postgres_server.sql("CREATE DATABASE cluster_faults", database="postgres")
    yield postgres_server.url.rsplit("/", 1)[0] + "/cluster_faults"
    postgres_server.sql("DROP DATABASE IF EXISTS cluster_faults WITH (FORCE)", database="postgres")


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster-faults")


@pytest.fixture(scope="module")
def gateways(cluster: RedisCluster, database: str, directory: Path) -> Iterator[list[str]]:
    with (
        gateway(directory, "first", [cluster.url], database) as first,
        gateway(directory, "second", [cluster.url], database) as second,
    ):
        yield [first.url, second.url]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    http = Client()
    yield http
    await http.close()


def reply_of(node: RedisServer, *command: str) -> bytes:
    reply = redis_command(node.port, *command)
    assert not reply.startswith(b"-"), reply
    return reply


def errors_counted(node: RedisServer, kind: str) -> int:
    """How many ``kind`` error replies (MOVED, ASK, TRYAGAIN…) ``node`` has sent."""
    for line in redis_command(node.port, "INFO", "errorstats").decode().splitlines():
        if line.startswith(f"errorstat_{kind}:count="):
            return int(line.split("=", 1)[1])
    return 0


def keys_in_slot(node: RedisServer, slot: int) -> list[str]:
    reply = redis_command(node.port, "CLUSTER", "GETKEYSINSLOT", str(slot), "1000").decode()
    return [line for line in reply.split("\r\n")[1:] if line and line[0] not in "$*"]


def begin_migration(cluster: RedisCluster, slot: int, source: RedisServer, target: RedisServer):
    reply_of(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", cluster.node_id(source))
    reply_of(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", cluster.node_id(target))


def migrate(source: RedisServer, target: RedisServer, key: str) -> None:
    reply_of(source, "MIGRATE", "127.0.0.1", str(target.port), key, "0", "5000")


def end_migration(cluster: RedisCluster, slot: int, target: RedisServer) -> None:
    target_id = cluster.node_id(target)
    for node in (target, *(n for n in cluster.primaries if n is not target)):
        reply_of(node, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id)


def move(cluster: RedisCluster, slot: int, source: RedisServer, target: RedisServer) -> None:
    """Move ``slot`` and its keys from ``source`` to ``target`` (as ``redis-cli`` reshards)."""
    begin_migration(cluster, slot, source, target)
    for key in keys_in_slot(source, slot):
        migrate(source, target, key)
    end_migration(cluster, slot, target)


async def degraded(client: Client, urls: list[str], **labels: str) -> float:
    return sum(
        [await client.metric(url, "crossway_state_degraded_total", **labels) for url in urls]
    )


async def test_a_slot_moved_then_migrated_again_is_served_never_a_500(
    cluster: RedisCluster, gateways: list[str], client: Client
):
    for url in gateways:  # each gateway reads the map and fills the limits' slot
        assert (await client.chat(url, LIMITED, "warm"))[0] == 200
    first = cluster.serving(LIMITS_SLOT)
    second, third = (node for node in cluster.primaries if node is not first)
    move(cluster, LIMITS_SLOT, first, second)  # moved once: the gateways' maps are stale…
    begin_migration(cluster, LIMITS_SLOT, second, third)  # …and it is being moved again
    for key in keys_in_slot(second, LIMITS_SLOT):
        migrate(second, third, key)
    moved, asked = errors_counted(first, "MOVED"), errors_counted(second, "ASK")
    for url in gateways:
        assert (await client.chat(url, LIMITED, "twice redirected"))[0] == 200
    assert errors_counted(first, "MOVED") >= moved + 2, "each gateway was sent MOVED…"
    assert errors_counted(second, "ASK") >= asked + 2, "…then ASK"
    statuses = await asyncio.gather(
        *(client.chat(url, LIMITED, f"during {i}") for i in range(8) for url in gateways)
    )
    assert [status for status, _ in statuses] == [200] * 16
    end_migration(cluster, LIMITS_SLOT, third)
    for url in gateways:
        assert (await client.chat(url, LIMITED, "after"))[0] == 200
    assert await degraded(client, gateways) == 0


async def test_a_migration_splitting_a_requests_buckets_degrades_nothing(
    cluster: RedisCluster, gateways: list[str], client: Client
):
    source = cluster.serving(LIMITS_SLOT)
    target = next(node for node in cluster.primaries if node is not source)
    statuses: list[int] = []
    stop = asyncio.Event()

    async def load(url: str) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            statuses.append((await client.chat(url, MULTI, f"split {i}"))[0])

    loads = [asyncio.ensure_future(load(url)) for url in gateways * 3]
    try:
        await poll(lambda: _at_least(statuses, 30), seconds=60, what="traffic on both buckets")
        tried = errors_counted(source, "TRYAGAIN")
        begin_migration(cluster, LIMITS_SLOT, source, target)
        # Every key of the slot but the team's bucket: MULTI's own bucket moves, its team's
        # stays behind, and each admission of MULTI gets TRYAGAIN until it follows.
        for key in keys_in_slot(source, LIMITS_SLOT):
            if key != TEAM_BUCKET:
                migrate(source, target, key)
        await asyncio.sleep(SPLIT_SECONDS)
        migrate(source, target, TEAM_BUCKET)
        end_migration(cluster, LIMITS_SLOT, target)
        served = len(statuses)
        await poll(lambda: _at_least(statuses, served + 30), seconds=60, what="traffic after")
    finally:
        stop.set()
        await asyncio.gather(*loads)
    assert errors_counted(source, "TRYAGAIN") > tried, "requests came while the keys were split"
    assert set(statuses) == {200}
    assert await degraded(client, gateways) == 0


async def _at_least(items: list[int], count: int) -> bool:
    return len(items) >= count


async def test_a_dead_primary_with_only_cache_entries_leaves_limits_and_budgets_exact(
    cluster: RedisCluster, gateways: list[str], client: Client, database: str, directory: Path
):
    shared = {cluster.serving(LIMITS_SLOT), cluster.serving(SPEND_SLOT)}
    victim = next(node for node in cluster.primaries if node not in shared)
    dead, alive = f"127.0.0.1:{victim.port}", [n for n in cluster.primaries if n is not victim]
    cached: list[int] = []
    stop = asyncio.Event()

    async def cache_load(url: str) -> None:  # 40 entries, about a third of them on the victim
        for i in itertools.count():
            if stop.is_set():
                return
            cached.append((await client.chat(url, FREE, f"entry {i % 40}"))[0])

    loads = [asyncio.ensure_future(cache_load(url)) for url in gateways * 2]
    try:
        await poll(lambda: _at_least(cached, 80), seconds=60, what="the cache in use")
        victim.kill()
        loop = asyncio.get_running_loop()
        started = loop.time()
        limited = await asyncio.gather(
            *(client.chat(url, FRESH, f"fresh {i}") for i in range(25) for url in gateways)
        )
        spent = await _spend_to_the_budget(client, gateways)
        elapsed = loop.time() - started
    finally:
        stop.set()
        await asyncio.gather(*loads)
    assert set(cached) == {200}, "no request fails because of the dead node"
    ok = [status for status, _ in limited].count(200)
    # Shared: one bucket of 30 for both gateways (counted per process it would be 60).
    assert FRESH_RPM <= ok <= FRESH_RPM + int(elapsed * FRESH_RPM / 60) + 1, (ok, elapsed)
    # One budget for both (counted per process, each would admit its own). It refuses once a
    # reservation does not fit what is left; the previous request's correction, sent by the
    # other gateway after its answer, may not have landed yet: at most one reservation early.
    budget, reservation = Decimal(str(SPENDER_USD)), Decimal(str(RESERVATION_USD))
    assert budget - 2 * reservation < spent <= budget, spent
    for use in ("limits", "budgets"):
        assert await degraded(client, gateways, use=use) == 0, use
    assert await degraded(client, gateways, use="cache") > 0, "the victim held cache entries"

    for url in gateways:

        async def dead_node_down(url: str = url) -> bool:
            return await client.metric(url, "crossway_state_up", node=dead) == 0

        await poll(dead_node_down, seconds=10, what="crossway_state_up 0 for the dead node")
        for node in alive:
            assert await client.metric(url, "crossway_state_up", node=f"127.0.0.1:{node.port}") == 1
        assert _alert_fires_for(await _state_up(client, url)) == {dead}

    # A gateway started now, its first seed the dead node: the second gives it the map. It
    # reads the budget spent through the others, and counts in the same rate-limit bucket.
    seeds = [victim.url, alive[0].url]
    with gateway(directory, "third", seeds, database) as third:
        later = [(await client.chat(third.url, FRESH, f"third {i}"))[0] for i in range(10)]
        elapsed = loop.time() - started
        assert ok + later.count(200) <= FRESH_RPM + int(elapsed * FRESH_RPM / 60) + 1, elapsed
        assert later.count(429) == 10 - later.count(200)
        # The shared budget is nearly spent: the third admits at most what the others' refusal
        # left (their last correction may have landed since: up to two reservations), never a
        # budget of its own, and the whole stays within the budget.
        more = await _spend_to_the_budget(client, [third.url], prompt="third")
        assert more < 2 * reservation, more
        assert spent + more <= budget, (spent, more)
        assert (await client.chat(third.url, FREE, "third"))[0] == 200
        assert await degraded(client, [third.url], use="limits") == 0
        assert await degraded(client, [third.url], use="budgets") == 0
        assert _alert_fires_for(await _state_up(client, third.url)) == {dead}


async def _spend_to_the_budget(client: Client, urls: list[str], prompt: str = "spend") -> Decimal:
    """Budgeted requests, alternating gateways, until one is refused; what the served cost.
    Each asks something new (``prompt`` and a number), so that none is a cache hit."""
    spent = Decimal(0)
    for i, url in zip(range(40), itertools.cycle(urls), strict=False):
        status, headers, body = await client.completion(
            url, SPENDER, f"{prompt} {i}", max_tokens=10
        )
        if status != 200:
            assert (status, body["error"]["code"]) == (429, "budget_exceeded")
            return spent
        spent += Decimal(headers["x-crossway-cost-usd"])
    raise AssertionError("the budget never refused")


async def _state_up(client: Client, url: str) -> dict[str, float]:
    """``crossway_state_up`` of ``url``, by node."""
    async with client.session.get(f"{url}/metrics") as response:
        text = await response.text()
    values = {}
    for line in text.splitlines():
        if line.startswith("crossway_state_up{"):
            node = line.split('node="', 1)[1].split('"', 1)[0]
            values[node] = float(line.rsplit(" ", 1)[1])
    return values


def _alert_fires_for(values: dict[str, float]) -> set[str]:
    """The nodes for which deploy/prometheus/alerts.yml's CrosswaySharedStateDown expression
    holds, over one instance's samples (``min by (job, instance, node) (…) == 0``)."""
    rules = yaml.safe_load((REPO / "deploy/prometheus/alerts.yml").read_text())
    (expression,) = [
        rule["expr"]
        for group in rules["groups"]
        for rule in group["rules"]
        if rule.get("alert") == "CrosswaySharedStateDown"
    ]
    assert expression == "min by (job, instance, node) (crossway_state_up) == 0"
    return {node for node, value in values.items() if value == 0}
