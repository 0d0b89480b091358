"""Issue 43, items 5 and 7, through two real gateways over a real Redis Cluster of three
primaries and three replicas (``cluster-node-timeout`` 2000 ms), one cluster for the module:

- the budget counter equals the ledger after a run during which the primary of the budgets'
  slot stalled (SIGSTOP for 1.5 s, under the node timeout: it keeps and later runs what it
  received, as a stalled server does) — no correction lost, none applied twice, no reservation
  the gateway gave up on left counted;
- ``max_parallel`` is exact after the primary of the limits' slot is killed and its replica
  promoted: once the traffic is over no lease is left in Redis (read directly), and a burst
  gets exactly ``max_parallel`` streams.

The failover test kills a node, so it runs last (the module runs in file order, on one worker).
Bounds are generous for a loaded 2-core machine. The leases must be gone within 10 s of both
gateways answering from the cluster again — released, not expired (a lease lasts 30 s); the
one way left for a lease to outlive that, a release the old primary acknowledged but did not
replicate before it died, needs the kill to fall between a reply and its replication, which
Redis writes in the same turn of its event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from proxy.state.cluster import key_slot
from proxy.state.redis import LEASE_TTL
from tests.e2e.processes import free_port, serve
from tests.e2e.scaleout import COST, Client, config, poll
from tests.engines import PostgresServer, RedisCluster, RedisServer, redis_command

PARALLEL = "sk-cw-parallel-key-for-cluster-lease-tests-0123"
SPENDER = "sk-cw-spender-key-for-cluster-lease-tests-01234"
MAX_PARALLEL = 4
TOKENS_PER_SECOND = 20  # the mock's streaming pace: a stream of n words lasts n / 20 s
DATABASE = "cluster_leases"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    nodes = RedisCluster(3, replicas=1, node_timeout_ms=2000).start()
    yield nodes
    nodes.stop()


@pytest.fixture(scope="module")
def database(postgres_server: PostgresServer) -> Iterator[str]:
    postgres_server.sql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)", database="postgres")
    postgres_server.sql(f"CREATE DATABASE {DATABASE}", database="postgres")
    yield postgres_server.url.rsplit("/", 1)[0] + "/" + DATABASE
    postgres_server.sql(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)", database="postgres")


def gateway_config(port: int, redis_url: str, database_url: str) -> str:
    """The scale-out tests' config on a cluster, with a paced mock, a key with
    ``max_parallel`` and one with a budget that the runs never reach, and Redis operations
    given up after 400 ms (still hundreds of times what they take), so that a stall of 1.5 s
    times some out."""
    text = config(port, redis_url=redis_url, database_url=database_url, plugins=COST, cluster=True)
    timeout = "timeout_ms: 1000"
    assert timeout in text
    text = text.replace(timeout, "timeout_ms: 400")
    text = text.replace(
        "mock: {type: mock, faults: true}",
        f"mock: {{type: mock, faults: true, tokens_per_second: {TOKENS_PER_SECOND}}}",
    )
    keys = "\n  keys:\n"
    assert keys in text
    return text.replace(
        keys,
        keys
        + f'    - {{key: "{PARALLEL}", alias: parallel, max_parallel: {MAX_PARALLEL}}}\n'
        + f'    - {{key: "{SPENDER}", alias: spender, budget: {{max_usd: 1000, period: 1d}}}}\n',
    )


@pytest.fixture(scope="module")
def gateways(
    tmp_path_factory: pytest.TempPathFactory, cluster: RedisCluster, database: str
) -> Iterator[list[str]]:
    directory: Path = tmp_path_factory.mktemp("cluster-leases")
    with contextlib.ExitStack() as stack:
        urls = []
        for index in range(2):
            port = free_port()
            path = directory / f"gateway-{index}.yaml"
            path.write_text(gateway_config(port, cluster.url, database))
            served = serve(
                path,
                port,
                1,
                directory / f"gateway-{index}.log",
                env={"CROSSWAY_DATA_DIR": str(directory / f"data-{index}")},
            )
            urls.append(stack.enter_context(served).url)
        yield urls


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    http = Client()
    yield http
    await http.close()


async def stream(client: Client, url: str, key: str, text: str, words: int) -> int:
    """One streamed chat completion echoing ``words`` words (``words / 20`` seconds), with an
    output limit above that (its budget reservation is corrected down when it ends); its status
    once the stream is read to its end."""
    content = " ".join([text, *(f"w{i}" for i in range(words - len(text.split())))])
    body = {
        "model": "echo",
        "stream": True,
        "max_tokens": 2 * words,
        "messages": [{"role": "user", "content": content}],
    }
    async with client.session.post(
        f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
    ) as response:
        await response.read()
        return response.status


async def traffic(
    client: Client, urls: list[str], key: str, words: int, workers: int
) -> tuple[asyncio.Event, asyncio.Future[list[int]]]:
    """``workers`` loops of streams over ``urls`` until the event is set, each of ``words``
    words give or take a quarter (so that the loops do not start their requests together);
    their statuses."""
    stop = asyncio.Event()
    counter = itertools.count()
    lengths = random.Random(43)

    async def loop(url: str) -> list[int]:
        statuses = []
        while not stop.is_set():
            length = lengths.randint(words - words // 4, words + words // 4)
            statuses.append(await stream(client, url, key, f"run {next(counter)}", length))
        return statuses

    async def every() -> list[int]:
        runs = await asyncio.gather(*(loop(urls[i % len(urls)]) for i in range(workers)))
        return [status for run in runs for status in run]

    return stop, asyncio.ensure_future(every())


def integer(reply: bytes) -> int:
    """A RESP integer or bulk-string reply as an int (nil: 0)."""
    if reply.startswith(b"$-1"):
        return 0
    if reply.startswith(b"$"):
        return int(reply.split(b"\r\n")[1])
    return int(reply[1:].split(b"\r\n")[0])


def keys(node: RedisServer, pattern: str) -> list[str]:
    reply = redis_command(node.port, "KEYS", pattern).decode().split("\r\n")
    return [line for line in reply[1:] if line and not line.startswith("$")]


@contextlib.contextmanager
def stalled(node: RedisServer) -> Iterator[None]:
    assert node.process is not None
    os.kill(node.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(node.process.pid, signal.SIGCONT)


async def degraded(client: Client, urls: list[str], use: str) -> float:
    return sum([await client.metric(url, "crossway_state_degraded_total", use=use) for url in urls])


async def test_the_budget_counter_equals_the_ledger_after_a_stall_mid_run(
    cluster: RedisCluster,
    gateways: list[str],
    postgres_server: PostgresServer,
    client: Client,
) -> None:
    node = cluster.serving(key_slot(b"{spend}"))
    stop, statuses = await traffic(client, gateways, SPENDER, words=20, workers=8)
    await asyncio.sleep(1.5)
    with stalled(node):  # gateways give up after 400 ms: some answers never come
        await asyncio.sleep(1.5)
    await asyncio.sleep(2.0)
    stop.set()
    done = await statuses
    assert set(done) <= {200, 503}, done
    assert done.count(200) >= 8, done
    # The stall refused budgeted requests (on_unavailable.budgets: closed): it was felt.
    assert await degraded(client, gateways, "budgets") > 0

    def counted() -> int:
        serving = cluster.serving(key_slot(b"{spend}"))
        counters = keys(serving, "crossway:{spend}:key:config:spender:d*")
        return sum(integer(redis_command(serving.port, "GET", key)) for key in counters)

    def ledger() -> int:
        query = "SELECT coalesce(sum(cost_nanos), 0) FROM spend WHERE key_id = 'config:spender'"
        return int(postgres_server.sql(query, database=DATABASE))

    async def equal() -> bool:
        return counted() == ledger() > 0

    # The ledger writes within its interval (1 s); corrections retry within 2 s of the node
    # answering again: 30 s is slack for a loaded machine.
    await poll(equal, seconds=30.0, what="the budget counter equal to the ledger", every=0.2)
    await asyncio.sleep(1.0)
    assert counted() == ledger(), "nothing the stalled node ran late changed it"


async def test_max_parallel_is_exact_after_the_primary_of_its_slot_fails_over(
    cluster: RedisCluster, gateways: list[str], client: Client
) -> None:
    slot = key_slot(b"{limits}")
    primary = cluster.serving(slot)
    stop, statuses = await traffic(client, gateways, PARALLEL, words=30, workers=10)
    await asyncio.sleep(2.0)
    held = keys(primary, "crossway:leases:{limits}:parallel:key:config:parallel")
    assert held, "the streams hold leases in Redis"
    await asyncio.to_thread(cluster.fail_over, primary)  # kill -9, a replica promoted
    await asyncio.sleep(2.0)
    stop.set()
    done = await statuses
    assert set(done) <= {200, 429}, done
    assert done.count(200) >= MAX_PARALLEL, done
    assert done.count(429) > 0, done  # ten streams at a time on a limit of four

    async def shared_again() -> bool:
        # crossway_state_up has one sample per node of the slot map: every one must read 1
        ups = [await client.samples(url, "crossway_state_up") for url in gateways]
        return all(samples and min(samples) == 1 for samples in ups)

    await poll(shared_again, seconds=30.0, what="both gateways on the cluster again", every=0.2)

    lease_set = "crossway:leases:{limits}:parallel:key:config:parallel"

    async def no_lease_left() -> bool:
        serving = cluster.serving(slot)
        now_ms = int(time.time() * 1000)  # the nodes run on this machine's clock
        live = redis_command(serving.port, "ZCOUNT", lease_set, f"({now_ms}", "+inf")
        return integer(live) == 0

    async def no_count_left() -> bool:
        count = "crossway:{limits}:parallel:key:config:parallel"
        return integer(redis_command(cluster.serving(slot).port, "GET", count)) == 0

    # Released, not expired: the first leases were taken less than a lease's time (30 s) ago
    # (renewed since, while their streams ran), and a release that failed during the
    # failover is retried within 2 s of the slot answering again.
    await poll(no_lease_left, seconds=LEASE_TTL / 3, what="no lease left", every=0.2)
    await poll(no_count_left, seconds=LEASE_TTL / 3, what="no count left", every=0.2)

    # Exact again: a burst of twice the limit, half on each gateway, streams long enough to
    # outlast the burst's admissions: exactly max_parallel of them served, decided in Redis.
    before = await degraded(client, gateways, "limits")
    burst = await asyncio.gather(
        *(
            stream(client, gateways[i % 2], PARALLEL, f"burst {i}", words=4 * TOKENS_PER_SECOND)
            for i in range(2 * MAX_PARALLEL)
        )
    )
    assert sorted(burst) == [200] * MAX_PARALLEL + [429] * MAX_PARALLEL, burst
    assert await degraded(client, gateways, "limits") == before, "every decision was shared"
