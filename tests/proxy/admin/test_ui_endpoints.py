"""What the admin API gained for the UI, through the HTTP server: the overview, the models
list, paginated keys with their spend, and the request log's filters."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest
from aiohttp import ClientSession

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.proxy.admin.test_admin_api import ADMIN, write_config

MODELS = """
models:
  chat: [{target: mock/echo, prices: {input: 1.5, output: 6}}, {target: mock/other, weight: 2}]
plugins:
  - auth: {}
  - cost: {}
  - balance: {}
"""


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[tuple[ClientSession, str, Path]]:
    app = create_app(write_config(tmp_path, extra=MODELS), log_stream=io.StringIO())
    runner, url = await start_site(app)
    async with ClientSession() as session:
        yield session, url, tmp_path / "crossway.db"
    await runner.cleanup()


async def get(session: ClientSession, url: str, headers: dict[str, str] = ADMIN):
    async with session.get(url, headers=headers) as response:
        return response.status, await response.json()


async def chat(session: ClientSession, url: str, key: str, model: str = "chat") -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
        return r.status


async def mint(session: ClientSession, url: str, **fields) -> dict:
    async with session.post(url + "/admin/keys", json=fields, headers=ADMIN) as response:
        assert response.status == 201
        return await response.json()


@pytest.mark.parametrize("path", ["/admin/overview", "/admin/models", "/admin/keys?limit=5"])
async def test_the_new_routes_need_the_master_key(admin, path):
    session, url, _ = admin
    for headers in ({}, {"Authorization": "Bearer " + "d" * 40}):
        status, body = await get(session, url + path, headers)
        assert status == 401
        assert body["error"]["code"] == "invalid_api_key"


async def test_the_overview_counts_what_the_gateway_served(admin):
    session, url, _ = admin
    key = (await mint(session, url, alias="a"))["key"]
    assert await chat(session, url, key) == 200
    assert await chat(session, url, key, model="nope") == 404
    assert await chat(session, url, "sk-cw-" + "x" * 40) == 401
    status, overview = await get(session, url + "/admin/overview")
    assert status == 200
    totals = overview["totals"]
    assert totals["requests"] == 3
    assert totals["errors"] == 2
    assert totals["auth_failures"] == 1
    assert totals["tokens"] > 0
    assert totals["cost_usd"] > 0
    now = overview["now"]
    assert now["requests_per_second"] > 0
    assert now["error_rate"] == pytest.approx(2 / 3)
    assert now["latency_p99_ms"] >= now["latency_p50_ms"] > 0
    assert now["overhead_p99_ms"] > 0
    assert overview["today"]["requests"] == 3
    assert overview["today"]["cost_usd"] == pytest.approx(totals["cost_usd"])
    series = overview["series"]
    assert series["interval_seconds"] == 10
    assert len(series["time"]) == len(series["requests_per_second"]) >= 1


async def test_models_show_deployments_health_and_prices(admin):
    session, url, _ = admin
    status, models = await get(session, url + "/admin/models")
    assert status == 200
    (chat,) = [m for m in models["data"] if m["alias"] == "chat"]
    assert chat["routable"] is True
    first, second = chat["deployments"]
    assert first["target"] == "mock/echo"
    assert first["health"] == "healthy"
    assert first["cooldown_seconds"] is None
    assert first["provider_ready"] is True
    assert first["prices"]["input"] == 1.5
    assert first["prices"]["output"] == 6
    assert first["prices"]["cache_read"] == 1.5  # defaults to input
    assert second["weight"] == 2
    assert models["providers"] == [{"name": "mock", "type": "mock", "ready": True}]


async def test_keys_paginate_newest_first_with_filters_and_usage(admin):
    session, url, _ = admin
    made = [await mint(session, url, alias=f"svc-{i}") for i in range(5)]
    await mint(session, url, alias="100%_odd")
    async with session.patch(
        url + f"/admin/keys/{made[0]['id']}", json={"blocked": True}, headers=ADMIN
    ) as r:
        assert r.status == 200
    assert await chat(session, url, made[4]["key"]) == 200

    status, page = await get(session, url + "/admin/keys?limit=2&q=svc")
    assert status == 200
    assert page["total"] == 5
    assert [k["alias"] for k in page["data"]] == ["svc-4", "svc-3"]
    assert page["data"][0]["spend_usd"] > 0
    assert page["data"][0]["last_used_at"] is not None
    assert page["data"][1]["spend_usd"] == 0
    assert page["data"][1]["last_used_at"] is None
    seen = [k["alias"] for k in page["data"]]
    while page["next"]:
        _, page = await get(session, url + f"/admin/keys?limit=2&q=svc&cursor={page['next']}")
        seen += [k["alias"] for k in page["data"]]
    assert seen == ["svc-4", "svc-3", "svc-2", "svc-1", "svc-0"]

    _, blocked = await get(session, url + "/admin/keys?limit=10&status=blocked")
    assert [k["alias"] for k in blocked["data"]] == ["svc-0"]
    _, literal = await get(session, url + "/admin/keys?limit=10&q=0%25_")  # % and _ are text
    assert [k["alias"] for k in literal["data"]] == ["100%_odd"]
    _, everything = await get(session, url + "/admin/keys?limit=100")
    assert everything["data"][0]["source"] == "config"  # config keys lead the first page
    assert everything["total"] == 7
    _, old = await get(session, url + "/admin/keys")  # without limit: as before
    assert set(old) == {"data"}
    assert len(old["data"]) == 7


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=x", "limit"), ("limit=5&status=gone", "status"),
     ("limit=5&cursor=%%%", "cursor")],
)  # fmt: skip
async def test_bad_page_parameters_are_400_naming_them(admin, query, param):
    session, url, _ = admin
    status, body = await get(session, url + "/admin/keys?" + query)
    assert status == 400
    assert body["error"]["param"] == param


async def test_the_request_log_filters_by_model_status_and_cache(admin):
    session, url, _ = admin
    key = (await mint(session, url, alias="a"))["key"]
    assert await chat(session, url, key) == 200
    assert await chat(session, url, key, model="nope") == 404
    _, ok = await get(session, url + "/admin/spend/logs?status=2xx")
    assert [r["status"] for r in ok["data"]] == [200]
    _, missing = await get(session, url + "/admin/spend/logs?status=404")
    assert [r["model"] for r in missing["data"]] == ["nope"]
    _, by_model = await get(session, url + "/admin/spend/logs?model=chat")
    assert [r["status"] for r in by_model["data"]] == [200]
    _, cached = await get(session, url + "/admin/spend/logs?cache=hit")
    assert cached["data"] == []
    status, bad = await get(session, url + "/admin/spend/logs?status=teapot")
    assert status == 400
    assert bad["error"]["param"] == "status"


async def test_nothing_the_ui_reads_holds_a_key(admin):
    session, url, database = admin
    minted = await mint(session, url, alias="secretive")
    assert await chat(session, url, minted["key"]) == 200
    for path in ("/admin/overview", "/admin/models", "/admin/keys?limit=50", "/admin/spend/logs"):
        async with session.get(url + path, headers=ADMIN) as response:
            text = await response.text()
        assert minted["key"] not in text
        assert ADMIN["Authorization"].split()[1] not in text
    # Read-only, closed at once: the test's own reader never holds a lock the gateway's ledger
    # writer could wait on (it runs on this same event loop), whatever the machine's load.
    with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=60)) as db:
        dump = "\n".join(db.iterdump())
    assert minted["key"] not in dump
