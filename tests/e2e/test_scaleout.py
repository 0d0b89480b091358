"""Scale-out through real ``crossway serve`` processes sharing one Redis and one PostgreSQL:
two instances on two ports, and two workers on one port, hold one rate limit and one budget,
share cache entries and see a revoked key refused everywhere within a second.

The rate-limit proof needs no minute of waiting: GCRA admits a burst of exactly ``rpm`` and
then one request per ``60 / rpm`` seconds, so in a test lasting ``t`` seconds a key with
``rpm: 60`` gets between 60 and ``60 + t`` successes (the bound every assertion states).

The budget's bound: a request is admitted only while the key's spend, charged plus reserved by
the requests in flight on every process, plus its own reservation stays within ``max_usd`` (one
atomic script in Redis), so the spend ends within one request's reservation below ``max_usd``
and never above it, however many processes serve the key and however many requests are in
flight.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.scaleout import (
    BUDGET_USD,
    BUDGETED,
    COST,
    FREE,
    LIMITED,
    Client,
    instances,
    poll,
)
from tests.engines import RedisCluster, RedisServer
from tests.engines.plugin import redis_command

TOPOLOGIES = {"two instances": (2, 1), "two workers": (1, 2)}


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    http = Client()
    yield http
    await http.close()


@pytest.fixture(params=list(TOPOLOGIES))
def gateways(request, tmp_path: Path, redis_url: str, postgres_url: str):
    count, workers = TOPOLOGIES[request.param]
    with instances(
        tmp_path,
        count,
        workers=workers,
        redis_url=redis_url,
        database_url=postgres_url,
        plugins=COST,
    ) as served:
        # Two instances: two URLs. Two workers: one URL, which the kernel spreads.
        yield [s.url for s in served] * (2 // count)


async def test_one_rpm_limit_holds_across_every_process(gateways: list[str], client: Client):
    loop = asyncio.get_running_loop()
    started = loop.time()
    targets = itertools.cycle(gateways)
    gate = asyncio.Semaphore(20)

    async def one(url: str) -> int:
        async with gate:
            return (await client.chat(url, LIMITED, text=f"rpm {id(url)}"))[0]

    statuses = await asyncio.gather(*(one(next(targets)) for _ in range(150)))
    elapsed = loop.time() - started
    ok, limited = statuses.count(200), statuses.count(429)
    assert ok + limited == 150, statuses
    # Per process, 60 each would be 120: the bound is the shared one.
    assert 60 <= ok <= 60 + int(elapsed) + 1, (ok, elapsed)


# One request of the budget test: "budget N" is 3 input tokens ($0.000001 each at the mock's
# prices) and echoes 2 output tokens ($0.000002 each): $0.000007. It reserves its estimated
# prompt plus max_tokens (10) of output, at most $0.00004.
RESERVATION_USD = 0.00004


async def test_one_budget_holds_across_every_process(gateways: list[str], client: Client):
    targets = itertools.cycle(gateways)
    gate = asyncio.Semaphore(8)
    counter = itertools.count()

    async def one(url: str) -> tuple[int, dict[str, str], dict]:
        async with gate:
            return await client.completion(
                url, BUDGETED, text=f"budget {next(counter)}", max_tokens=10
            )

    # Concurrent requests on every process, then one at a time until the budget refuses (the
    # concurrent ones may stop short of it while reservations are in flight).
    replies = list(await asyncio.gather(*(one(next(targets)) for _ in range(40))))
    while True:  # nothing in flight now: a settled refusal means the spend reached the budget
        replies.append(await client.budgeted(next(targets), BUDGETED, f"budget {next(counter)}"))
        if replies[-1][0] != 200:
            break
        assert len(replies) < 100, "the budget never refused"
    served = [headers for status, headers, _ in replies if status == 200]
    refused = [(headers, body) for status, headers, body in replies if status == 429]
    assert len(served) + len(refused) == len(replies), [r[0] for r in replies]
    spent = sum(Decimal(headers["x-crossway-cost-usd"]) for headers in served)
    # Counted per process, each would admit its own $0.0001 (about 28 requests in all).
    budget = Decimal(str(BUDGET_USD))
    assert budget - Decimal(str(RESERVATION_USD)) < spent <= budget, (spent, len(served))
    for headers, body in refused:
        assert body["error"]["code"] == "budget_exceeded"
        assert headers["x-crossway-budget-scope"] == "key"
        assert headers["x-should-retry"] == "false"
    # Spent on one process, refused by every one.
    for url in gateways * 3:
        status, _, body = await client.completion(url, BUDGETED, text="after", max_tokens=10)
        assert (status, body["error"]["code"]) == (429, "budget_exceeded")


async def test_an_entry_cached_by_one_is_a_hit_on_the_other(
    gateways: list[str], client: Client, redis_server: RedisServer
):
    first, second = gateways
    status, headers = await client.chat(first, FREE, text="cache me")
    assert (status, headers["x-crossway-cache"]) == (200, "miss")

    async def stored() -> bool:  # the entry is written after the reply, off its path
        return b"crossway:cache:" in redis_command(redis_server.port, "KEYS", "crossway:cache:*")

    await poll(stored, seconds=5, what="the entry in Redis")
    # Each try opens a new connection; with two workers the kernel may send several to the
    # worker that stored it, but every one of them must hit.
    for _ in range(10):
        status, headers = await client.chat(second, FREE, text="cache me")
        assert (status, headers["x-crossway-cache"]) == (200, "hit")


async def test_a_key_revoked_on_one_is_refused_by_the_other_within_a_second(
    gateways: list[str], client: Client
):
    first, second = gateways
    status, created = await client.admin("POST", first, "/admin/keys", {"alias": "ephemeral"})
    assert status == 201, created
    key = created["key"]
    for _ in range(6):  # cached (auth.cache_ttl is 60 s) on every process that served it
        assert (await client.chat(second, key, text="before"))[0] == 200
    status, _ = await client.admin("DELETE", first, f"/admin/keys/{created['id']}")
    assert status == 204

    async def refused_everywhere() -> bool:
        statuses = [(await client.chat(second, key))[0] for _ in range(6)]
        return statuses == [401] * 6

    # Without the announcement this would take auth.cache_ttl (60 s).
    await poll(refused_everywhere, seconds=1.0, what="the revoked key refused by the other")


async def test_a_config_reload_keeps_the_shared_counters(
    tmp_path: Path, redis_url: str, postgres_url: str, client: Client
):
    loop = asyncio.get_running_loop()
    with instances(tmp_path, 1, redis_url=redis_url, database_url=postgres_url) as (served,):
        statuses = [(await client.chat(served.url, LIMITED, f"r {i}"))[0] for i in range(65)]
        assert statuses.count(429) >= 1
        spent = loop.time()
        text = served.config.read_text()
        served.config.write_text(
            text.replace("models:\n", "models:\n  reloaded: [{target: mock/echo}]\n")
        )
        os.kill(served.pid, signal.SIGHUP)

        async def reloaded() -> bool:
            return (
                await client.metric(served.url, "crossway_config_reloads_total", result="ok") == 1
            )

        await poll(reloaded, seconds=20.0, what="the reload")
        # The new snapshot's limits count in the same Redis buckets: still spent, refilled at
        # one request a second since (a fresh bucket would admit all 30).
        after = [
            (await client.chat(served.url, LIMITED, f"after {i}", model="reloaded"))[0]
            for i in range(30)
        ]
        elapsed = loop.time() - spent
        assert after.count(200) <= int(elapsed) + 1 < 30, (after, elapsed)
        assert after.count(429) == 30 - after.count(200)


async def test_the_memory_backend_counts_per_worker_and_says_so(tmp_path: Path, client: Client):
    from tests.e2e.processes import free_port, serve
    from tests.e2e.scaleout import config

    port = free_port()
    path = tmp_path / "gateway.yaml"
    text = config(port, workers=2, redis_url="redis://127.0.0.1:9/0", database_url="x")
    text = text.replace("  backend: redis\n", "  backend: memory\n").replace(
        'database: {url: "x"}', f'database: {{url: "sqlite:///{tmp_path}/crossway.db"}}'
    )
    path.write_text(text)
    with serve(path, port, 2, tmp_path / "gateway.log") as served:
        warnings = served.log_lines("state_per_worker")
        assert len(warnings) == 1
        assert set(warnings[0]["per_worker"]) == {"limits", "cache"}
        statuses = await asyncio.gather(
            *(client.chat(served.url, LIMITED, text="memory") for _ in range(200))
        )
        ok = [status for status, _ in statuses].count(200)
        assert ok > 60, "per worker, each worker admits its own 60"
    _check_says_so(path)


def _check_says_so(path: Path) -> None:
    import subprocess
    import sys

    from tests.e2e.processes import REPO

    result = subprocess.run(
        [sys.executable, "-m", "proxy", "check", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "per worker" in result.stdout


async def test_redis_killed_under_load_then_restarted(
    tmp_path: Path, own_redis: RedisServer, client: Client
):
    database = f"sqlite:///{tmp_path}/crossway.db"
    with instances(tmp_path, 1, redis_url=own_redis.url, database_url=database, plugins=COST) as (
        served,
    ):
        url = served.url

        async def budgeted() -> tuple[int, str | None]:
            status, _, body = await client.completion(url, BUDGETED, "spend", max_tokens=10)
            return status, body.get("error", {}).get("code")

        async def load(round_: int, model: str = "echo") -> list[int]:
            # 100 concurrent requests, half of them repeats (cache hits while Redis is up).
            texts = [f"load {round_} {i % 50}" for i in range(100)]
            replies = await asyncio.gather(
                *(client.chat(url, FREE, text, model=model) for text in texts)
            )
            return [status for status, _ in replies]

        assert await load(0) == [200] * 100
        assert await budgeted() == (200, None)
        # The slow model keeps the next 100 in the upstream (300 ms) while Redis dies: they
        # passed the limits and the cache lookup, their cache writes will fail.
        in_flight = asyncio.ensure_future(load(1, model="slow"))

        async def all_in_flight() -> bool:
            return await client.metric(url, "crossway_requests_in_flight") >= 50

        await poll(all_in_flight, seconds=10.0, what="the round to be in flight")
        own_redis.kill()
        assert await in_flight == [200] * 100, "no request fails because of the state store"
        assert await load(2) == [200] * 100
        assert await client.metric(url, "crossway_state_up") == 0
        assert await client.metric(url, "crossway_state_degraded_total", use="cache") > 0

        # Limits continue per process: the 60 of rpm: 60, then 429s.
        statuses = [(await client.chat(url, LIMITED, f"local {i}"))[0] for i in range(70)]
        assert statuses.count(200) in range(60, 63), statuses
        assert statuses.count(429) == 70 - statuses.count(200)
        assert (
            await client.metric(
                url, "crossway_state_degraded_total", use="limits", decision="local"
            )
            >= 70
        )

        # Budgets follow state.on_unavailable.budgets, closed by default: refused before any
        # upstream call, the key without a budget still served.
        assert await budgeted() == (503, "state_unavailable")
        assert (await client.chat(url, FREE, "no budget"))[0] == 200
        assert (
            await client.metric(
                url, "crossway_state_degraded_total", use="budgets", decision="closed"
            )
            == 1
        )

        own_redis.start()

        async def reconnected() -> bool:
            return await client.metric(url, "crossway_state_up") == 1

        await poll(reconnected, seconds=5.0, what="the gateway to reconnect to Redis")
        # Shared counting resumes: the key's bucket is in Redis again.
        assert (await client.chat(url, LIMITED, "shared again"))[0] == 200
        keys = redis_command(own_redis.port, "KEYS", "crossway:limits:rpm:*")
        assert b"crossway:limits:rpm:key:" in keys

        async def budgets_checked_again() -> bool:
            return await budgeted() == (200, None)

        await poll(budgets_checked_again, seconds=5.0, what="budgets checked in Redis again")
        assert b"crossway:spend:key:" in redis_command(own_redis.port, "KEYS", "crossway:spend:*")


async def test_two_instances_over_a_redis_cluster_share_limits_budgets_and_cache(
    tmp_path: Path, redis_cluster: RedisCluster, postgres_url: str, client: Client
):
    with instances(
        tmp_path,
        2,
        redis_url=redis_cluster.url,
        database_url=postgres_url,
        plugins=COST,
        cluster=True,
    ) as served:
        first, second = (s.url for s in served)
        status, headers = await client.chat(first, FREE, text="cached on the cluster")
        assert (status, headers["x-crossway-cache"]) == (200, "miss")

        async def stored() -> bool:  # the entry is written after the reply, off its path
            return any(
                b"crossway:cache:" in redis_command(node.port, "KEYS", "crossway:cache:*")
                for node in redis_cluster.nodes
            )

        await poll(stored, seconds=5, what="the entry in the cluster")
        status, headers = await client.chat(second, FREE, text="cached on the cluster")
        assert (status, headers["x-crossway-cache"]) == (200, "hit")

        loop = asyncio.get_running_loop()
        started = loop.time()
        targets = itertools.cycle([first, second])
        statuses = [(await client.chat(next(targets), LIMITED, f"c {i}"))[0] for i in range(80)]
        elapsed = loop.time() - started
        assert 60 <= statuses.count(200) <= 60 + int(elapsed) + 1, statuses
        assert statuses.count(429) == 80 - statuses.count(200)

        spent = 0.0
        for i in range(40):
            status, headers, _ = await client.budgeted(next(targets), BUDGETED, f"budget {i}")
            if status != 200:
                break
            spent += float(headers["x-crossway-cost-usd"])
        assert status == 429
        # A request whose worst case does not fit what is left is refused: the budget is a cap.
        assert BUDGET_USD - RESERVATION_USD < spent <= BUDGET_USD + 1e-12
        for url in (first, second):  # nothing was decided without the cluster
            assert await client.metric(url, "crossway_state_up") == 3  # 1 for each node
            assert await client.metric(url, "crossway_state_degraded_total") == 0
        # The limits' buckets share one slot, hence one node, under their hash tag.
        holding = [
            node
            for node in redis_cluster.nodes
            if b"crossway:{limits}:rpm:key:" in redis_command(node.port, "KEYS", "crossway:*")
        ]
        assert len(holding) == 1
