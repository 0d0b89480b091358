"""Spend end to end: the ledger in SQLite behind the gateway, the spend API, budgets enforced on
keys minted over the admin API, with the openai SDK as the client."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import textwrap
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import openai
import pytest
from aiohttp import web

from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import FakeOpenAI

MASTER = "master-key-" + "0123456789abcdef" * 2
HI = [{"role": "user", "content": "hi"}]
# The fake upstream's usage in disjoint buckets is input 6, cache_read 4, output 4,
# reasoning 1: at these prices a whole answer costs 6*10 + 4*1 + 4*20 + 1*20 = 164 micro-USD.
PRICES = "{input: 10, cache_read: 1, output: 20}"
ANSWER_NANOS = 164_000


def config_text(tmp_path: Path, upstream_url: str, plugins: str = "") -> str:
    return (
        textwrap.dedent(
            f"""
        server: {{access_log: true}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          cache_ttl: 0
          teams:
            search: {{budget: {{max_usd: 100, period: 1mo}}}}
        providers:
          up: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
          mock: {{type: mock}}
        models:
          chat: [{{target: up/gpt-test, prices: {PRICES}}}]
          slow: [{{target: up/slow-stream, prices: {PRICES}}}]
        plugins:
          - auth: {{}}
          - limits: {{}}
          - cost: {{reserve_output_tokens: 100}}
        """
        )
        + plugins
    )


class Gateway:
    def __init__(
        self, url: str, app: web.Application, upstream: FakeOpenAI, path: Path, logs: io.StringIO
    ) -> None:
        self.url = url
        self.app = app
        self.upstream = upstream
        self.path = path
        self.logs = logs

    def openai(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def get(self, path: str, key: str = MASTER) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, headers=headers) as response,
        ):
            return response.status, json.loads(await response.text())

    async def mint(self, **fields: Any) -> tuple[str, str]:
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/admin/keys", json=fields, headers=headers) as response,
        ):
            record = await response.json()
            assert response.status == 201, record
            return record["id"], record["key"]

    async def metric(self, name: str) -> float:
        async with aiohttp.ClientSession() as session, session.get(self.url + "/metrics") as r:
            for line in (await r.text()).splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0


async def serve(tmp_path: Path, upstream_url: str, fake: FakeOpenAI, plugins: str = "") -> Any:
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text(tmp_path, upstream_url, plugins))
    logs = io.StringIO()
    app = create_app(path, log_stream=logs)
    runner, url = await start_site(app)
    return runner, Gateway(url, app, fake, path, logs)


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Gateway]:
    fake, upstream_url = upstream
    runner, gateway = await serve(tmp_path, upstream_url, fake)
    yield gateway
    assert await gateway.metric("crossway_ledger_dropped_total") == 0
    await runner.cleanup()


async def chat(client: openai.AsyncOpenAI, **kwargs: Any) -> Any:
    return await client.chat.completions.with_raw_response.create(
        model=kwargs.pop("model", "chat"), messages=HI, **kwargs
    )


async def test_spend_totals_equal_the_costs_the_clients_saw(gateway: Gateway) -> None:
    _, first = await gateway.mint(alias="one", team="search")
    _, second = await gateway.mint(alias="two")
    seen = Decimal(0)
    for key in (first, first, second):
        raw = await chat(gateway.openai(key))
        seen += Decimal(raw.headers["x-crossway-cost-usd"])
    stream = await gateway.openai(second).chat.completions.create(
        model="chat", messages=HI, stream=True
    )
    async for _ in stream:
        pass
    seen += Decimal(ANSWER_NANOS) / 10**9  # the stream carried no header: same usage
    status, spend = await gateway.get("/admin/spend?group_by=key")
    assert status == 200
    assert Decimal(str(spend["total"]["cost_usd"])) == seen
    assert spend["total"]["requests"] == 4
    by_key = {row["key_id"]: row for row in spend["data"]}
    assert [row["requests"] for row in by_key.values()] == [2, 2]
    status, logs = await gateway.get("/admin/spend/logs?limit=10")
    assert status == 200
    assert sum(Decimal(str(r["cost_usd"])) for r in logs["data"]) == seen
    record = logs["data"][0]  # newest first: the stream
    assert record["key_alias"] == "two"
    assert record["model"] == "chat"
    assert record["provider"] == "up"
    assert record["upstream_model"] == "gpt-test"
    assert (record["input_tokens"], record["cache_read_tokens"]) == (6, 4)
    assert (record["output_tokens"], record["reasoning_tokens"]) == (4, 1)
    assert record["status"] == 200
    assert record["cost_source"] == "estimated"
    assert logs["next"] is None


async def test_every_request_is_recorded_refused_failed_or_served(gateway: Gateway) -> None:
    _, key = await gateway.mint(alias="k")
    await chat(gateway.openai(key))
    with pytest.raises(openai.AuthenticationError):
        await chat(gateway.openai("sk-cw-" + "x" * 40))
    with pytest.raises(openai.NotFoundError):
        await chat(gateway.openai(key), model="no-such-model")
    status, logs = await gateway.get("/admin/spend/logs")
    assert status == 200
    statuses = sorted((r["status"], r["error_code"], r["key_alias"]) for r in logs["data"])
    assert statuses == [
        (200, None, "k"),
        (401, "invalid_api_key", None),
        (404, "model_not_found", "k"),
    ]


async def test_a_spent_budget_gets_429_and_sends_nothing_upstream(gateway: Gateway) -> None:
    # Worst case of one request: (1 + 4) prompt tokens * 10 + max_tokens 1 * 20 = 70 micro-USD.
    # The fake upstream ignores max_tokens (the one overshoot the budget's bound allows): its
    # answers cost 164 each, so the second one, admitted with 136 left, spends the budget.
    _, key = await gateway.mint(alias="capped", budget={"max_usd": 0.0003, "period": "1d"})
    client = gateway.openai(key)
    await chat(client, max_tokens=1)
    await chat(client, max_tokens=1)
    sent = len(gateway.upstream.requests)
    with pytest.raises(openai.RateLimitError) as caught:
        await chat(client, max_tokens=1)
    error = caught.value
    assert error.response.headers["x-should-retry"] == "false"
    assert error.response.headers["x-crossway-budget-scope"] == "key"
    body = error.response.json()["error"]
    assert body["code"] == "budget_exceeded"
    assert "key budget is spent" in body["message"]
    assert "resets at" in body["message"]
    assert len(gateway.upstream.requests) == sent  # refused before the upstream
    status, own = await gateway.get("/v1/spend", key)
    assert status == 200
    assert own["total"]["requests"] == 3
    assert own["total"]["cost_usd"] == 2 * ANSWER_NANOS / 1e9


async def test_a_request_whose_worst_case_passes_what_is_left_is_refused_in_its_dialect(
    gateway: Gateway,
) -> None:
    # n=128 with max_tokens=20 (the issue's $2.57 on a $0.10 budget) may cost (1 + 4) * 10 +
    # 128 * 20 * 20 = 51,250 micro-USD here: far more than the $0.003 budget.
    _, key = await gateway.mint(alias="small", budget={"max_usd": 0.003, "period": "1d"})
    with pytest.raises(openai.RateLimitError) as caught:
        await chat(gateway.openai(key), n=128, max_tokens=20)
    error = caught.value
    assert error.response.headers["x-should-retry"] == "false"
    body = error.response.json()["error"]
    assert body["code"] == "budget_exceeded"
    assert body["message"].startswith(
        "this request may cost up to $0.05125, more than the $0.003 left of the key budget"
    )
    # Anthropic's max_tokens and the Responses API's max_output_tokens are the same limit:
    # 5 * 10 + 200 * 20 = 4,050 micro-USD each, refused in each route's own error shape.
    headers = {"Authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"}
    messages = {"model": "chat", "max_tokens": 200, "messages": HI}
    responses = {"model": "chat", "max_output_tokens": 200, "input": "hi"}
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{gateway.url}/v1/messages", json=messages, headers=headers
        ) as response:
            assert response.status == 429
            refused = await response.json()
            assert refused["type"] == "error"
            assert "may cost up to $0.00405" in refused["error"]["message"]
        async with session.post(
            f"{gateway.url}/v1/responses", json=responses, headers=headers
        ) as response:
            assert response.status == 429
            refused = await response.json()
            assert refused["error"]["code"] == "budget_exceeded"
            assert "may cost up to $0.00405" in refused["error"]["message"]
    assert gateway.upstream.requests == []
    await chat(gateway.openai(key), n=2, max_tokens=20)  # 850 micro-USD fits
    assert len(gateway.upstream.requests) == 1


async def test_20_concurrent_requests_against_room_for_5_serve_about_5(gateway: Gateway) -> None:
    # Each request reserves 2,050 micro-USD (see above) and costs 164: the budget has room for
    # five reservations at once, not for twenty.
    _, key = await gateway.mint(alias="burst", budget={"max_usd": 5 * 0.00205, "period": "1d"})
    client = gateway.openai(key)
    results = await asyncio.gather(
        *(chat(client, model="slow", stream=True) for _ in range(20)), return_exceptions=True
    )
    served = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, openai.RateLimitError)]
    assert len(served) + len(refused) == 20
    assert 4 <= len(served) <= 6, len(served)
    for raw in served:
        await raw.parse().close()


async def test_a_stream_the_client_abandons_is_in_the_ledger_with_its_cost(
    gateway: Gateway,
) -> None:
    _, key = await gateway.mint(alias="quitter")
    stream = await gateway.openai(key).chat.completions.create(
        model="slow", messages=HI, stream=True
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    await stream.close()
    deadline = time.monotonic() + 5
    while True:  # the server notices the client left, then records the request
        _, logs = await gateway.get("/admin/spend/logs")
        if logs["data"] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    (record,) = logs["data"]
    assert record["status"] == 499
    assert record["cost_source"] == "estimated"
    assert record["cost_usd"] > 0
    assert record["output_tokens"] >= 1


async def test_a_key_reads_only_its_own_spend(gateway: Gateway) -> None:
    mine_id, mine = await gateway.mint(alias="mine")
    _, other = await gateway.mint(alias="other")
    await chat(gateway.openai(mine))
    await chat(gateway.openai(other))
    await chat(gateway.openai(other))
    status, own = await gateway.get("/v1/spend", mine)
    assert status == 200
    assert own["key_id"] == mine_id
    assert own["total"]["requests"] == 1
    assert [r["key_alias"] for r in own["data"]] == ["mine"]
    status, _ = await gateway.get("/admin/spend", mine)  # the admin API is the master's
    assert status == 401
    status, _ = await gateway.get("/v1/spend", "sk-cw-" + "y" * 40)
    assert status == 401


async def test_bad_spend_queries_are_400_naming_the_field(gateway: Gateway) -> None:
    for query, param in [
        ("group_by=colour", "group_by"),
        ("from=yesterday", "from"),
        ("from=2026-12-02&to=2026-12-01", "to"),
    ]:
        status, body = await gateway.get(f"/admin/spend?{query}")
        assert (status, body["error"]["param"]) == (400, param)
    status, body = await gateway.get("/admin/spend/logs?limit=0")
    assert (status, body["error"]["param"]) == (400, "limit")
    status, body = await gateway.get("/admin/spend/logs?cursor=bogus")
    assert (status, body["error"]["param"]) == (400, "cursor")


@pytest.mark.parametrize(
    "moment",
    [
        "9999-12-31T23:59:59-14:00",  # past year 9999 in UTC: a 500 before
        "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
        "9999-12-31",
        "1969-12-31",
        "2026-12-01T00:00:00\u00e9",
    ],
)
async def test_dates_out_of_range_are_400_naming_the_parameter(
    gateway: Gateway, moment: str
) -> None:
    _, key = await gateway.mint(alias="dates")
    for path, param, caller in [
        ("/v1/spend", "from", key),
        ("/v1/spend", "to", key),
        ("/admin/spend", "from", MASTER),
        ("/admin/spend/logs", "to", MASTER),
        ("/spend/logs", "start_date", MASTER),
        ("/spend/logs", "end_date", MASTER),
    ]:
        status, body = await gateway.get(f"{path}?{urlencode({param: moment})}", caller)
        assert (status, body["error"]["param"]) == (400, param), (path, body)


async def test_a_range_from_1970_is_answered_from_the_ledgers_days(gateway: Gateway) -> None:
    """Before, a range from long ago rolled up every empty day since (20,000 transactions)."""
    _, key = await gateway.mint(alias="old")
    await chat(gateway.openai(key))
    status, own = await gateway.get("/v1/spend?from=1970-01-01", key)
    assert status == 200, own
    assert own["total"]["requests"] == 1
    status, totals = await gateway.get("/admin/spend?from=1970-01-01T00:00:00Z&group_by=day")
    assert status == 200, totals
    assert totals["total"]["requests"] == 1


async def test_logs_are_paginated_newest_first(gateway: Gateway) -> None:
    _, key = await gateway.mint(alias="pager")
    for _ in range(5):
        await chat(gateway.openai(key))
    pages: list[list[str]] = []
    cursor = ""
    while True:
        _, page = await gateway.get(f"/admin/spend/logs?limit=2{cursor}")
        pages.append([r["time"] for r in page["data"]])
        if page["next"] is None:
            break
        cursor = f"&cursor={page['next']}"
    assert [len(p) for p in pages] == [2, 2, 1]
    times = [t for page in pages for t in page]
    assert times == sorted(times, reverse=True)


async def test_a_locked_database_loses_no_record(tmp_path: Path, upstream) -> None:
    fake, upstream_url = upstream
    runner, gateway = await serve(tmp_path, upstream_url, fake)
    _, key = await gateway.mint(alias="steady")
    await chat(gateway.openai(key))  # the ledger is open and written
    database = tmp_path / "data" / "crossway.db"
    lock = sqlite3.connect(database, timeout=0, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the file: every write waits
    try:
        costs = [Decimal((await chat(gateway.openai(key))).headers["x-crossway-cost-usd"])]
        costs += [Decimal((await chat(gateway.openai(key))).headers["x-crossway-cost-usd"])]
        deadline = time.monotonic() + 20
        while await gateway.metric("crossway_ledger_journaled_total") < 2:
            assert time.monotonic() < deadline, "the records never reached the journal"
            await asyncio.sleep(0.1)
        assert list((tmp_path / "data" / "ledger-journal").glob("ledger-*.jsonl"))
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    await runner.cleanup()  # as on SIGTERM
    # The next start replays the journal: every request is there, once.
    runner, gateway = await serve(tmp_path, upstream_url, fake)
    journal = tmp_path / "data" / "ledger-journal"
    deadline = time.monotonic() + 20
    while list(journal.glob("ledger-*.jsonl")):  # replayed, then deleted
        assert time.monotonic() < deadline, "the journal was never replayed"
        await asyncio.sleep(0.1)
    _, logs = await gateway.get("/admin/spend/logs")
    assert len(logs["data"]) == 3
    assert len({r["request_id"] for r in logs["data"]}) == 3
    assert sum(Decimal(str(r["cost_usd"])) for r in logs["data"][:2]) == sum(costs)
    assert await gateway.metric("crossway_ledger_dropped_total") == 0
    await runner.cleanup()


async def test_budgets_are_rebuilt_from_the_ledger_on_start(tmp_path: Path, upstream) -> None:
    fake, upstream_url = upstream
    runner, gateway = await serve(tmp_path, upstream_url, fake)
    _, key = await gateway.mint(alias="kept", budget={"max_usd": 0.0003, "period": "1mo"})
    await chat(gateway.openai(key), max_tokens=1)  # as in the spent budget's test: 2 * 164
    await chat(gateway.openai(key), max_tokens=1)
    await runner.cleanup()  # the ledger is flushed on the way out
    runner, gateway = await serve(tmp_path, upstream_url, fake)  # a fresh state store
    with pytest.raises(openai.RateLimitError) as caught:
        await chat(gateway.openai(key), max_tokens=1)
    assert "key budget is spent" in caught.value.response.json()["error"]["message"]
    await runner.cleanup()


async def test_a_budget_set_later_counts_what_the_key_spent_before(gateway: Gateway) -> None:
    key_id, key = await gateway.mint(alias="late")
    client = gateway.openai(key)
    for _ in range(3):  # 3 * 164 micro-USD while the key has no budget
        await chat(client, max_tokens=1)  # a worst case of 70 (the fake ignores max_tokens)
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with (
        aiohttp.ClientSession() as session,
        session.patch(
            f"{gateway.url}/admin/keys/{key_id}",
            json={"budget": {"max_usd": 0.0004, "period": "1d"}},
            headers=headers,
        ) as response,
    ):
        assert response.status == 200
    # The first request under the budget has its counters re-read from the ledger in the
    # background; from then on the spend before the budget counts (492 > 400 micro-USD).
    # Counted from zero, three more answers would fit (0, 164, 328 < 400). The first request
    # under the budget is checked against what the counters held, and makes them be re-read
    # from the ledger; from then on the spend before the budget counts (492 > 400).
    await chat(client, max_tokens=1)
    deadline = time.monotonic() + 10
    while "budget_counters_reread" not in gateway.logs.getvalue():
        assert time.monotonic() < deadline, "the counters were never re-read"
        await asyncio.sleep(0.02)
    with pytest.raises(openai.RateLimitError) as caught:
        await chat(client, max_tokens=1)
    refused = caught.value
    assert refused.response.json()["error"]["code"] == "budget_exceeded"
