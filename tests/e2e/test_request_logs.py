"""The request logs through the HTTP server, with the openai SDK as the client.

A gateway with auth, masking (the masking tests' values and rules) and cost in front of the
masking tests' echoing upstream — which answers with the (masked) text it was sent, so that the
answer the upstream gave holds placeholders and the client's holds the values restored. Keys
opt in (``request_logs: payloads``) or stay with the config's ``metadata``; a team opts out
(``none``). Each test checks what the admin API and the database file hold, and that no value
masking replaced is anywhere in them.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web

from proxy.admin.requests import REQUEST_LOGS
from proxy.request_logs.records import RequestLogRecord
from proxy.request_logs.service import RequestLogs
from proxy.server.app import METRICS, create_app
from tests.e2e.conftest import start_site
from tests.e2e.masking_upstream import EchoUpstream
from tests.e2e.test_masking_http import EMAIL, PHONE, PROMPT, SSN
from tests.waiting import until

MASTER = "master-key-" + "0123456789abcdef" * 2
UPSTREAM_KEY = "sk-upstream-key-0123456789abcdef"
MASKED_VALUES = (EMAIL, PHONE, SSN, "EMP-004217", "Bluebird")
MASKED = "Write to <EMAIL_1> or call <PHONE_1>, employee <EMPLOYEE_ID_1>, project <PROJECT>"


def config_text(tmp_path: Path, upstream_url: str, telemetry: str) -> str:
    return textwrap.dedent(
        f"""
        server: {{access_log: false}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          cache_ttl: 0
          teams:
            quiet: {{request_logs: none}}
        providers:
          up: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
        models:
          chat: [{{target: up/echo, prices: {{input: 10, output: 20}}}}]
        plugins:
          - auth: {{}}
          - masking:
              entities: {{email: mask, phone: mask, us_ssn: redact}}
              custom:
                - {{name: employee_id, pattern: "EMP-[0-9]{{6}}", action: mask}}
                - {{name: project, words: [bluebird], action: redact}}
          - cost: {{}}
        telemetry:
        """
    ) + textwrap.indent(textwrap.dedent(telemetry), "  ")


class Gateway:
    """A running gateway, its upstream and what the tests ask of its admin API."""

    def __init__(self, url: str, app: web.Application, tmp_path: Path, logs: io.StringIO) -> None:
        self.url = url
        self.app = app
        self.tmp_path = tmp_path
        self.logs = logs

    @property
    def request_logs(self) -> RequestLogs:
        return self.app[REQUEST_LOGS]

    def client(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def admin(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.url + path, json=body, headers=headers) as answer,
        ):
            payload = await answer.json()
            assert answer.status < 300, (answer.status, payload)
            return payload

    async def mint(self, alias: str, **fields: Any) -> str:
        record = await self.admin("POST", "/admin/keys", {"alias": alias, **fields})
        return str(record["key"])

    def metric(self, name: str, **labels: str) -> float:
        value = self.app[METRICS].registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def stored_text(self) -> str:
        """Every row of the request_logs table, as text."""
        path = self.tmp_path / "data" / "crossway.db"
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as connection:
            rows = connection.execute("SELECT * FROM request_logs").fetchall()
        return json.dumps(rows, ensure_ascii=False)


@contextlib.asynccontextmanager
async def running(tmp_path: Path, telemetry: str) -> AsyncIterator[Gateway]:
    upstream = EchoUpstream()
    upstream_runner, upstream_url = await start_site(upstream.app())
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text(tmp_path, upstream_url, telemetry))
    logs = io.StringIO()
    app = create_app(path, log_stream=logs)
    runner, url = await start_site(app)
    try:
        yield Gateway(url, app, tmp_path, logs)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running(tmp_path, "request_logs: {store: metadata}") as gateway:
        yield gateway


def overhead(headers: Any) -> float:
    value = float(headers["x-crossway-overhead-ms"])
    assert value >= 0
    return value


async def test_payloads_for_opted_in_keys_only_masked_and_assembled(gateway: Gateway) -> None:
    loud = await gateway.mint("loud", request_logs="payloads")
    plain = await gateway.mint("plain")
    await gateway.admin("POST", "/admin/teams", {"id": "muted", "request_logs": "none"})
    muted = await gateway.mint("muted", team="muted")
    messages: Any = [{"role": "user", "content": PROMPT}]

    raw = await gateway.client(loud).chat.completions.with_raw_response.create(
        model="chat", messages=messages, extra_headers={"traceparent": TRACEPARENT}
    )
    whole_id = raw.headers["x-request-id"]
    overhead(raw.headers)
    assert raw.parse().choices[0].message.content is not None
    assert EMAIL in (raw.parse().choices[0].message.content or "")  # restored for the client
    streamed = await gateway.client(loud).chat.completions.with_raw_response.create(
        model="chat", messages=messages, stream=True
    )
    stream_id = streamed.headers["x-request-id"]
    overhead(streamed.headers)
    text = "".join(
        [chunk.choices[0].delta.content or "" async for chunk in streamed.parse() if chunk.choices]
    )
    assert EMAIL in text
    plain_answer = await gateway.client(plain).chat.completions.with_raw_response.create(
        model="chat", messages=messages
    )
    plain_id = plain_answer.headers["x-request-id"]
    await gateway.client(muted).chat.completions.create(model="chat", messages=messages)

    listed = await gateway.admin("GET", "/admin/requests?limit=10")
    by_id = {record["request_id"]: record for record in listed["data"]}
    assert set(by_id) == {whole_id, stream_id, plain_id}  # the muted team keeps nothing
    assert "request" not in by_id[whole_id]  # a listing carries no payloads
    assert by_id[plain_id]["store"] == "metadata"

    whole = await gateway.admin("GET", f"/admin/requests/{whole_id}")
    assert whole["store"] == "payloads"
    assert whole["trace_id"] == TRACEPARENT.split("-")[1]
    assert whole["request"]["messages"][0]["content"].startswith(MASKED)
    assert whole["response"]["choices"][0]["message"]["content"].startswith(MASKED)
    assert whole["status"] == 200
    assert whole["cost_usd"] is not None
    assert whole["duration_ms"] == pytest.approx(
        whole["upstream_ms"] + whole["overhead_ms"], abs=0.01
    )
    stream = await gateway.admin("GET", f"/admin/requests/{stream_id}")
    assert stream["stream"] is True
    assert stream["response"]["choices"][0]["message"]["content"].startswith(MASKED)
    assert stream["response"]["choices"][0]["finish_reason"] == "stop"
    plain_record = await gateway.admin("GET", f"/admin/requests/{plain_id}")
    assert plain_record["request"] is None
    assert plain_record["response"] is None
    assert plain_record["key_alias"] == "plain"

    stored = gateway.stored_text()
    assert MASKED in stored
    for value in (*MASKED_VALUES, UPSTREAM_KEY, loud, plain, MASTER):
        assert value not in stored


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_filters_and_cursor_pages(gateway: Gateway) -> None:
    first = await gateway.mint("first")
    second = await gateway.mint("second")
    messages: Any = [{"role": "user", "content": "hello"}]
    for key in (first, first, first, second):
        await gateway.client(key).chat.completions.create(model="chat", messages=messages)
    with pytest.raises(openai.NotFoundError):
        await gateway.client(second).chat.completions.create(model="nope", messages=messages)
    keys = await gateway.admin("GET", "/admin/keys")
    first_id = next(k["id"] for k in keys["data"] if k["alias"] == "first")
    page = await gateway.admin("GET", f"/admin/requests?key_id={first_id}&limit=2")
    assert len(page["data"]) == 2
    assert page["next"]
    rest = await gateway.admin("GET", f"/admin/requests?key_id={first_id}&cursor={page['next']}")
    assert len(rest["data"]) == 1
    assert rest["next"] is None
    failed = await gateway.admin("GET", "/admin/requests?status=4xx")
    assert [record["status"] for record in failed["data"]] == [404]
    assert (await gateway.admin("GET", "/admin/requests?model=chat&limit=100"))["data"][0][
        "model"
    ] == "chat"
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{gateway.url}/admin/requests/unknown", headers=headers) as answer:
            assert answer.status == 404
        async with session.get(f"{gateway.url}/admin/requests?cursor=zz", headers=headers) as bad:
            assert bad.status == 400
        async with session.get(f"{gateway.url}/admin/requests") as anonymous:
            assert anonymous.status == 401


async def test_overhead_header_on_errors(gateway: Gateway) -> None:
    key = await gateway.mint("errs")
    async with aiohttp.ClientSession() as session:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        async with session.post(
            f"{gateway.url}/v1/chat/completions", json=body, headers={"Authorization": "Bearer x"}
        ) as refused:
            assert refused.status == 401
            overhead(refused.headers)
        async with session.post(
            f"{gateway.url}/v1/chat/completions",
            data=b"{not json",
            headers={"Authorization": f"Bearer {key}", "content-type": "application/json"},
        ) as bad:
            assert bad.status == 400
            overhead(bad.headers)


async def test_retention_prunes_old_records(tmp_path: Path) -> None:
    telemetry = "request_logs: {store: metadata, retention_days: 7}"
    async with running(tmp_path, telemetry) as gateway:
        key = await gateway.mint("kept")
        await gateway.client(key).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}]
        )
        await gateway.request_logs.flush()
        fresh = (await gateway.admin("GET", "/admin/requests"))["data"][0]
        await gateway.request_logs.repository.write([_old_record()])
        assert await gateway.request_logs.repository.get("old-record") is not None
    async with running(tmp_path, telemetry) as restarted:  # pruned at start, then hourly
        await until(
            lambda: "request_logs_pruned" in restarted.logs.getvalue(),
            seconds=10,
            what="the start-up prune",
        )
        assert await restarted.request_logs.repository.get("old-record") is None
        assert await restarted.request_logs.repository.get(fresh["request_id"]) is not None


def _old_record() -> RequestLogRecord:
    """A record of eight days ago."""
    return RequestLogRecord(
        id="old-record",
        request_id="old-request",
        time=time.time() - 8 * 86_400,
        store="metadata",
        key_id=None,
        key_alias=None,
        team=None,
        dialect="openai",
        model="chat",
        provider="up",
        upstream_model="echo",
        stream=False,
        status=200,
        error_code=None,
        duration_ms=1.0,
        upstream_ms=0.5,
        overhead_ms=0.5,
        ttft_ms=None,
        input_tokens=1,
        output_tokens=1,
        cost_nanos=None,
        cache=None,
        attempts=1,
        trace_id=None,
    )
