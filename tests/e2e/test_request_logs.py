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
from proxy.request_logs.service import RequestLogs
from proxy.server.app import METRICS, create_app
from tests.e2e.conftest import start_site
from tests.e2e.masking_upstream import EchoUpstream
from tests.e2e.test_masking_http import EMAIL, PHONE, PROMPT, SSN
from tests.proxy.request_logs.records_factory import log_record
from tests.waiting import until

MASTER = "master-key-" + "0123456789abcdef" * 2
UPSTREAM_KEY = "sk-upstream-key-0123456789abcdef"
DECLARED = "sk-declared-" + "0123456789abcdef" * 2
DECLARED_QUIET = "sk-declared-quiet-" + "0123456789abcdef" * 2
MASKED_VALUES = (EMAIL, PHONE, SSN, "EMP-004217", "Bluebird")
MASKED = "Write to <EMAIL_1> or call <PHONE_1>, employee <EMPLOYEE_ID_1>, project <PROJECT>"


def config_text(tmp_path: Path, upstream_url: str, telemetry: str, output: str) -> str:
    return textwrap.dedent(
        f"""
        server: {{access_log: false}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          cache_ttl: 0
          teams:
            quiet: {{request_logs: none}}
          keys:
            - {{key: "{DECLARED}", alias: declared, request_logs: payloads}}
            - {{key: "{DECLARED_QUIET}", alias: declared-quiet, team: quiet}}
        providers:
          up: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
          mock: {{type: mock}}
        models:
          chat: [{{target: up/echo, prices: {{input: 10, output: 20}}}}]
        plugins:
          - auth: {{}}
          - masking:
              entities: {{email: mask, phone: mask, us_ssn: redact}}
              custom:
                - {{name: employee_id, pattern: "EMP-[0-9]{{6}}", action: mask}}
                - {{name: project, words: [bluebird], action: redact}}
              {output}
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
async def running(
    tmp_path: Path, telemetry: str, output: str = "output: restore"
) -> AsyncIterator[Gateway]:
    upstream = EchoUpstream()
    upstream_runner, upstream_url = await start_site(upstream.app())
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text(tmp_path, upstream_url, telemetry, output))
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
    await gateway.client(DECLARED_QUIET).chat.completions.create(model="chat", messages=messages)
    declared = await gateway.client(DECLARED).chat.completions.with_raw_response.create(
        model="chat", messages=messages
    )
    declared_id = declared.headers["x-request-id"]

    listed = await gateway.admin("GET", "/admin/requests?limit=10")
    by_id = {record["request_id"]: record for record in listed["data"]}
    assert set(by_id) == {whole_id, stream_id, plain_id, declared_id}  # muted teams keep none
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
    from_yaml = await gateway.admin("GET", f"/admin/requests/{declared_id}")
    assert from_yaml["request"]["messages"][0]["content"].startswith(MASKED)
    plain_record = await gateway.admin("GET", f"/admin/requests/{plain_id}")
    assert plain_record["request"] is None
    assert plain_record["response"] is None
    assert plain_record["key_alias"] == "plain"

    stored = gateway.stored_text()
    assert MASKED in stored
    for value in (*MASKED_VALUES, UPSTREAM_KEY, loud, plain, MASTER, DECLARED):
        assert value not in stored

    keys = await gateway.admin("GET", "/admin/keys")
    loud_id = next(k["id"] for k in keys["data"] if k["alias"] == "loud")
    await gateway.admin("PATCH", f"/admin/keys/{loud_id}", {"request_logs": "none"})
    await gateway.client(loud).chat.completions.create(model="chat", messages=messages)
    assert len((await gateway.admin("GET", "/admin/requests"))["data"]) == 4  # nothing new


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


async def test_overhead_header_on_errors_and_background_answers(gateway: Gateway) -> None:
    key = await gateway.mint("errs")
    async with aiohttp.ClientSession() as session:
        background = {"model": "mock/echo", "input": "hello", "background": True}
        async with session.post(
            f"{gateway.url}/v1/responses",
            json=background,
            headers={"Authorization": f"Bearer {key}"},
        ) as accepted:
            assert accepted.status == 200, await accepted.text()
            overhead(accepted.headers)
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
        old = log_record(0, id="old-record", request_id="old", time=time.time() - 8 * 86_400)
        await gateway.request_logs.repository.write([old])
        assert await gateway.request_logs.repository.get("old-record") is not None
    async with running(tmp_path, telemetry) as restarted:  # pruned at start, then hourly
        await until(
            lambda: "request_logs_pruned" in restarted.logs.getvalue(),
            seconds=10,
            what="the start-up prune",
        )
        assert await restarted.request_logs.repository.get("old-record") is None
        assert await restarted.request_logs.repository.get(fresh["request_id"]) is not None


class OtlpReceiver:
    """A small OTLP/HTTP logs receiver: decodes each export with ``opentelemetry.proto``."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.resources: list[Any] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/logs", self._logs)
        return app

    async def _logs(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
            ExportLogsServiceResponse,
        )

        assert request.headers["x-ingest-key"] == "ingest-123"
        export = ExportLogsServiceRequest()
        export.ParseFromString(await request.read())
        for resource_logs in export.resource_logs:
            self.resources.append(resource_logs.resource)
            for scope_logs in resource_logs.scope_logs:
                self.records.extend(scope_logs.log_records)
        body = ExportLogsServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")


def attributes(record: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for pair in record.attributes:
        value = pair.value
        found[pair.key] = getattr(value, value.WhichOneof("value"))
    return found


async def test_jsonl_and_otlp_exports(tmp_path: Path) -> None:
    receiver = OtlpReceiver()
    receiver_runner, receiver_url = await start_site(receiver.app())
    lines = tmp_path / "logs" / "requests.jsonl"
    telemetry = f"""\
        request_logs:
          store: payloads
          jsonl: {{path: "{lines}"}}
          otlp: {{endpoint: "{receiver_url}/v1/logs", headers: {{x-ingest-key: ingest-123}}}}
        """
    try:
        async with running(tmp_path, telemetry) as gateway:
            key = await gateway.mint("exported")
            messages: Any = [{"role": "user", "content": PROMPT}]
            raw = await gateway.client(key).chat.completions.with_raw_response.create(
                model="chat", messages=messages
            )
            request_id = raw.headers["x-request-id"]
            for sink in ("otlp", "jsonl"):
                await until(
                    lambda sink=sink: (
                        gateway.metric(  # type: ignore[misc]
                            "crossway_request_log_exported_total", sink=sink
                        )
                        == 1
                    ),
                    seconds=10,
                    what=f"the {sink} export",
                )
    finally:
        await receiver_runner.cleanup()
    (line,) = lines.read_text().splitlines()
    written = json.loads(line)
    assert written["request_id"] == request_id
    assert MASKED in written["request"]
    (record,) = receiver.records
    assert record.event_name == "crossway.request"
    shown = attributes(record)
    assert shown["crossway.request_id"] == request_id
    assert shown["gen_ai.request.model"] == "chat"
    assert shown["crossway.key_alias"] == "exported"
    body = {pair.key: pair.value.string_value for pair in record.body.kvlist_value.values}
    assert MASKED in body["request"]
    assert MASKED in body["response"]
    sent = line + json.dumps(body)
    for value in (*MASKED_VALUES, UPSTREAM_KEY, key):
        assert value not in sent
    (resource,) = receiver.resources
    assert any(a.key == "service.name" for a in resource.attributes)


async def test_sinks_that_are_down_never_fail_requests(tmp_path: Path) -> None:
    closed = web.TCPSite  # a port nothing listens on: taken, then given back
    probe = web.AppRunner(web.Application())
    await probe.setup()
    site = closed(probe, "127.0.0.1", 0)
    await site.start()
    dead_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await probe.cleanup()
    (tmp_path / "blocked").mkdir()  # a directory where the file should be: every write fails
    telemetry = f"""\
        request_logs:
          store: payloads
          jsonl: {{path: "{tmp_path / "blocked"}", max_buffer: 2}}
          otlp: {{endpoint: "http://127.0.0.1:{dead_port}/v1/logs", max_buffer: 2, timeout: 1}}
        """
    async with running(tmp_path, telemetry) as gateway:
        key = await gateway.mint("steady")
        client = gateway.client(key)
        for _ in range(5):
            answer = await client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "hello"}]
            )
            assert answer.choices[0].message.content == "hello"
        for sink in ("jsonl", "otlp"):
            assert gateway.metric("crossway_request_log_export_dropped_total", sink=sink) >= 3
            assert gateway.metric("crossway_request_log_exported_total", sink=sink) == 0
        await until(
            lambda: "request_log_export_failed" in gateway.logs.getvalue(),
            seconds=10,
            what="the failing export logged",
        )
        assert "request_log_export_dropped" in gateway.logs.getvalue()
        listed = await gateway.admin("GET", "/admin/requests")
        assert len(listed["data"]) == 5  # the database still has them all


async def test_request_logs_survive_a_database_outage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.request_logs.logs_db import RequestLogRepository

    write = RequestLogRepository.write
    failing = {"on": False}

    async def flaky(repository: RequestLogRepository, records: Any) -> None:
        if failing["on"]:
            raise sqlite3.OperationalError("database is locked")
        await write(repository, records)

    monkeypatch.setattr(RequestLogRepository, "write", flaky)
    journal = tmp_path / "request-journal"
    telemetry = f'request_logs: {{store: payloads, journal_dir: "{journal}"}}'
    async with running(tmp_path, telemetry) as gateway:
        key = await gateway.mint("through")
        failing["on"] = True
        ids = []
        for index in range(6):
            raw = await gateway.client(key).chat.completions.with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": f"question {index}"}]
            )
            ids.append(raw.headers["x-request-id"])
        await gateway.request_logs.flush()
        assert gateway.metric("crossway_request_logs_journaled_total") >= 6
        assert gateway.metric("crossway_request_logs_pending") >= 6
        assert list(journal.glob("request-log-*.jsonl"))
        failing["on"] = False
        await until(
            lambda: gateway.metric("crossway_request_logs_pending") == 0,
            seconds=30,
            what="the journal replayed into the database",
        )
        listed = await gateway.admin("GET", "/admin/requests?limit=100")
        assert {record["request_id"] for record in listed["data"]} == set(ids)
        assert gateway.metric("crossway_request_logs_dropped_total") == 0
        record = await gateway.admin("GET", f"/admin/requests/{ids[0]}")
        assert record["response"]["choices"][0]["message"]["content"] == "question 0"


async def test_the_admin_ui_shows_one_request_on_one_page(tmp_path: Path) -> None:
    from playwright.async_api import expect

    from tests.e2e.browser import browser
    from tests.e2e.test_ui_browser import watch

    async with running(tmp_path, "request_logs: {store: payloads}") as gateway:
        key = await gateway.mint("shown")
        raw = await gateway.client(key).chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": PROMPT}]
        )
        request_id = raw.headers["x-request-id"]
        async with browser(tmp_path / "profile") as context:
            page = await context.new_page()
            problems = watch(page)
            await page.goto(f"{gateway.url}/ui/")
            await page.get_by_label("Master key").fill(MASTER)
            await page.get_by_role("button", name="Sign in").click()
            await page.get_by_role("link", name="Kept requests").click()
            await page.get_by_role("link", name=request_id).click()
            await expect(page.get_by_role("heading", name="Timing")).to_be_visible()
            summary = page.locator("#request-summary")
            await expect(summary).to_contain_text(request_id)
            await expect(summary).to_contain_text("shown")
            timing = page.locator("#request-timing")
            await expect(timing).to_contain_text("Gateway overhead")
            await expect(timing).to_contain_text("Waiting on upstreams")
            await expect(page.locator("#request-cost")).to_contain_text("$")
            await expect(page.locator("#request-payload pre")).to_contain_text("<EMAIL_1>")
            await expect(page.locator("#request-answer pre")).to_contain_text("<PHONE_1>")
            await page.screenshot(path=tmp_path / "kept-request.png", full_page=True)
            content = await page.content()
            for value in (*MASKED_VALUES, key, UPSTREAM_KEY):
                assert value not in content
            assert not problems, problems


async def test_the_anthropic_dialect_is_kept_the_same_way(gateway: Gateway) -> None:
    import anthropic

    key = await gateway.mint("claude-user", request_logs="payloads")
    client = anthropic.AsyncAnthropic(base_url=gateway.url, api_key=key, max_retries=0)
    messages: Any = [{"role": "user", "content": PROMPT}]
    whole = await client.messages.with_raw_response.create(
        model="chat", max_tokens=100, messages=messages
    )
    overhead(whole.headers)
    assert EMAIL in (await whole.parse()).content[0].text  # type: ignore[union-attr]
    async with client.messages.stream(model="chat", max_tokens=100, messages=messages) as stream:
        streamed_id = stream.response.headers["x-request-id"]
        overhead(stream.response.headers)
        assert EMAIL in await stream.get_final_text()
    for request_id in (whole.headers["x-request-id"], streamed_id):
        record = await gateway.admin("GET", f"/admin/requests/{request_id}")
        assert record["dialect"] == "anthropic"
        assert record["request"]["messages"][0]["content"].startswith(MASKED)
        assert record["response"]["choices"][0]["message"]["content"].startswith(MASKED)
    stored = gateway.stored_text()
    for value in (*MASKED_VALUES, key):
        assert value not in stored


async def test_what_the_output_scan_redacts_is_not_kept_either(tmp_path: Path) -> None:
    # Only system text is masked on the way in, so the echo writes the e-mail address itself;
    # the output scan redacts it for the client, and the kept answer must not hold it either.
    scan = "output: scan\n              roles: [system]"
    async with running(tmp_path, "request_logs: {store: payloads}", scan) as gateway:
        key = await gateway.mint("scanned")
        raw = await gateway.client(key).chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": f"write to {EMAIL}"}]
        )
        assert EMAIL not in (raw.parse().choices[0].message.content or "")
        record = await gateway.admin("GET", f"/admin/requests/{raw.headers['x-request-id']}")
        assert record["response"]["choices"][0]["message"]["content"] == "write to <EMAIL>"
        assert EMAIL not in json.dumps(record["response"])
