"""Auth and tenancy end to end: keys minted over the admin API, the CLI and YAML, used by the
official openai and anthropic SDKs through the gateway, with the auth and limits plugins."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web

from proxy.dialects import all_dialects, other_dialects
from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import ANSWER, FakeOpenAI

REPO = Path(__file__).resolve().parents[2]
MASTER = "master-key-" + "0123456789abcdef" * 2
DECLARED = "sk-cw-declared-" + "abcdefghij" * 4
TEAM_KEY = "sk-cw-teamkey-" + "klmnopqrst" * 4
HI = [{"role": "user", "content": "hi"}]
CACHE_TTL = 0.5


def config_text(tmp_path: Path, upstream_url: str) -> str:
    return textwrap.dedent(
        f"""
        server: {{access_log: true}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          cache_ttl: {CACHE_TTL}
          teams:
            search: {{models: [chat, fast], rpm: 3}}
          keys:
            - {{key: "{DECLARED}", alias: ci, models: [chat]}}
            - {{key: "{TEAM_KEY}", alias: search-bot, team: search}}
        providers:
          up: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
          mock: {{type: mock}}
        models:
          chat: [{{target: up/gpt-test}}]
          fast: [{{target: up/gpt-test}}]
          stuck: [{{target: up/hang}}]
          broken: [{{target: up/fail-500}}]
        plugins:
          - auth: {{}}
          - limits: {{}}
          - fallback: {{chains: {{broken: [mock/echo, chat]}}}}
        """
    )


class Gateway:
    """A running gateway with auth, its fake upstream, logs and config path."""

    def __init__(
        self, url: str, app: web.Application, upstream: FakeOpenAI, logs: io.StringIO, path: Path
    ) -> None:
        self.url = url
        self.app = app
        self.upstream = upstream
        self.logs = logs
        self.config = path

    def openai(self, key: str) -> openai.AsyncOpenAI:
        """A client for ``key``; every timeout, connect included, is generous, for the tests
        that open 50 connections at once on a loaded machine (the SDK's default is 5 s)."""
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1",
            api_key=key,
            max_retries=0,
            timeout=120.0,  # a number: every openai SDK takes it (3.63 moved to httpx2)
        )

    def anthropic(self, key: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=self.url, api_key=key, max_retries=0)

    async def admin(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, self.url + path, json=body, headers=headers) as response,
        ):
            text = await response.text()
            return response.status, json.loads(text) if text else None

    async def mint(self, **fields: Any) -> tuple[str, str]:
        status, record = await self.admin("POST", "/admin/keys", fields)
        assert status == 201, record
        return record["id"], record["key"]


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Gateway]:
    fake, upstream_url = upstream
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text(tmp_path, upstream_url))
    logs = io.StringIO()
    app = create_app(path, log_stream=logs)
    runner, url = await start_site(app)
    yield Gateway(url, app, fake, logs, path)
    await runner.cleanup()


async def chat(client: openai.AsyncOpenAI, model: str = "chat", **kwargs: Any) -> Any:
    return await client.chat.completions.with_raw_response.create(
        model=model, messages=HI, **kwargs
    )


async def status_of(call: Awaitable[Any]) -> int:
    try:
        await call
    except openai.APIStatusError as error:
        return error.status_code
    return 200


async def eventually(check: Callable[[], Awaitable[bool]], deadline: float = 10.0) -> None:
    """Poll ``check`` until it holds; fail after ``deadline`` seconds."""
    stop = time.monotonic() + deadline
    while not await check():
        if time.monotonic() > stop:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.05)


async def metrics_text(gateway: Gateway) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(gateway.url + "/metrics") as response,
    ):
        return await response.text()


def crossway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# ---------------------------------------------------------------------------------------------


async def test_every_route_demands_a_key(gateway: Gateway):
    with pytest.raises(openai.AuthenticationError) as caught:
        await gateway.openai("sk-cw-unknown").chat.completions.create(model="chat", messages=HI)
    assert caught.value.body["code"] == "invalid_api_key"
    with pytest.raises(anthropic.AuthenticationError) as failed:
        await gateway.anthropic("sk-cw-unknown").messages.create(
            model="chat", max_tokens=10, messages=HI
        )
    assert failed.value.body["error"]["type"] == "authentication_error"
    async with aiohttp.ClientSession() as session:
        # an unauthenticated client learns nothing: not even that its body or model is bad
        async with session.post(gateway.url + "/v1/chat/completions", data=b"{") as response:
            assert response.status == 401
        async with session.post(
            gateway.url + "/api/v1/completions", json={"model": "nope", "messages": []}
        ) as response:
            assert response.status == 401
            assert (await response.json())["errors"][0]["code"] == "invalid_api_key"
        async with session.get(gateway.url + "/v1/models") as response:
            assert response.status == 401
    assert gateway.upstream.requests == []


def client_body_routes() -> list[str]:
    """Every route a client posts a body to: the dialects' and the token count."""
    paths = [path for d in (*all_dialects(), *other_dialects()) for path in d.paths]
    return [*paths, "/v1/messages/count_tokens"]


async def status_before_the_body(url: str, path: str) -> int:
    """The status answered to a request whose 1 MB body never comes (a few bytes of it do)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000000\r\n\r\n".encode()
            + b'{"model": 1, "messages": ['
        )
        await writer.drain()
        async with asyncio.timeout(60):  # a handler waiting for the body would answer 408 at 30 s
            status_line = await reader.readline()
    finally:
        writer.close()
    return int(status_line.split()[1])


async def test_every_body_route_checks_the_key_before_reading_the_body(gateway: Gateway):
    """An unauthenticated client learns no field name and costs no body read (or inflation)."""
    routes = client_body_routes()
    assert {"/v1/messages", "/v1/embeddings", "/v1/messages/count_tokens"} <= set(routes)
    for path in routes:
        assert await status_before_the_body(gateway.url, path) == 401, path
    async with aiohttp.ClientSession() as session:
        for body in (b"{", b'{"model": 1}', b'{"model": "chat", "messages": "x"}'):
            async with session.post(
                gateway.url + "/v1/messages/count_tokens", data=body
            ) as response:
                answer = await response.json()
                assert response.status == 401, answer
                assert answer["error"]["type"] == "authentication_error"
                assert "messages" not in json.dumps(answer)


async def test_a_key_minted_over_the_api_works_then_is_revoked(gateway: Gateway):
    key_id, key = await gateway.mint(alias="app", models=["chat"])
    reply = await chat(gateway.openai(key))
    assert reply.parse().choices[0].message.content == ANSWER
    status, _ = await gateway.admin("DELETE", f"/admin/keys/{key_id}")
    assert status == 204
    # revoked on this instance: refused at once, not after the cache TTL
    assert await status_of(chat(gateway.openai(key))) == 401
    # the upstream saw the gateway's key, never the client's
    assert gateway.upstream.headers[0]["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert not any(key in str(headers) for headers in gateway.upstream.headers)


async def test_every_sdk_header_carries_the_key(gateway: Gateway):
    _, key = await gateway.mint(alias="multi")
    message = await gateway.anthropic(key).messages.create(model="chat", max_tokens=10, messages=HI)
    assert message.content[0].text == ANSWER
    async with aiohttp.ClientSession() as session:
        for header in ({"api-key": key}, {"x-bf-vk": key}, {"Authorization": f"Bearer {key}"}):
            async with session.post(
                gateway.url + "/v1/chat/completions",
                json={"model": "chat", "messages": HI},
                headers=header,
            ) as response:
                assert response.status == 200, header


async def test_declared_keys_and_the_master_key(gateway: Gateway):
    assert (await chat(gateway.openai(DECLARED))).parse().choices[0].message.content == ANSWER
    assert await status_of(chat(gateway.openai(DECLARED), model="fast")) == 403
    message = await gateway.anthropic(MASTER).messages.create(
        model="mock/echo", max_tokens=10, messages=HI
    )
    assert message.content[0].text == "hi"
    _status, listed = await gateway.admin("GET", "/admin/keys")
    declared = [k for k in listed["data"] if k["source"] == "config"]
    assert [k["alias"] for k in declared] == ["ci", "search-bot"]


async def test_models_outside_the_allow_list_are_403(gateway: Gateway):
    _, key = await gateway.mint(models=["chat", "broken"])
    client = gateway.openai(key)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        await client.chat.completions.create(model="mock/echo", messages=HI)
    assert denied.value.body["code"] == "model_not_allowed"
    with pytest.raises(openai.PermissionDeniedError) as denied:  # Bifrost fallbacks
        await client.chat.completions.create(
            model="chat", messages=HI, extra_body={"fallbacks": ["chat", "mock/echo"]}
        )
    assert denied.value.body["param"] == "fallbacks[1]"
    async with (
        aiohttp.ClientSession() as session,  # orq's load balancer targets
        session.post(
            gateway.url + "/v2/router/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={
                "model": "chat",
                "prompt": "hi",
                "orq": {
                    "load_balancer": {
                        "type": "weight_based",
                        "models": [
                            {"model": "chat", "weight": 0.5},
                            {"model": "mock/echo", "weight": 0.5},
                        ],
                    }
                },
            },
        ) as response,
    ):
        assert response.status == 403, await response.text()
        assert (await response.json())["error"]["code"] == "model_not_allowed"
    # A configured chain that leads outside the allow-list skips, never serves, that model.
    reply = await chat(client, model="broken")
    assert reply.headers["x-crossway-fallback"] == "chat"
    assert [r["model"] for r in gateway.upstream.requests] == ["fail-500", "gpt-test"]


async def test_models_lists_what_the_key_may_use(gateway: Gateway):
    _, key = await gateway.mint(models=["chat", "up/*"])
    models = await gateway.openai(key).models.list()
    assert sorted(m.id for m in models.data) == ["chat", "up/fail-500", "up/gpt-test", "up/hang"]
    everything = await gateway.openai(MASTER).models.list()
    assert {"chat", "fast", "stuck", "broken"} <= {m.id for m in everything.data}


async def test_rpm_is_exact_under_50_concurrent_requests(gateway: Gateway):
    _, key = await gateway.mint(rpm=10)
    client = gateway.openai(key)
    statuses = await asyncio.gather(*(status_of(chat(client)) for _ in range(50)))
    assert statuses.count(200) == 10
    assert statuses.count(429) == 40
    with pytest.raises(openai.RateLimitError) as limited:
        await client.chat.completions.create(model="chat", messages=HI)
    headers = limited.value.response.headers
    assert limited.value.body["code"] == "rate_limit_exceeded"
    assert int(headers["retry-after"]) >= 1
    assert int(headers["retry-after-ms"]) > 0
    assert headers["x-ratelimit-limit-requests"] == "10"
    assert headers["x-ratelimit-remaining-requests"] == "0"


async def test_ratelimit_headers_on_every_response_of_a_limited_key(gateway: Gateway):
    _, key = await gateway.mint(rpm=5, tpm=100_000)
    reply = await chat(gateway.openai(key), max_tokens=10)
    assert reply.headers["x-ratelimit-limit-requests"] == "5"
    assert reply.headers["x-ratelimit-remaining-requests"] == "4"
    assert reply.headers["x-ratelimit-reset-requests"].endswith("s")
    assert reply.headers["x-ratelimit-limit-tokens"] == "100000"
    assert int(reply.headers["x-ratelimit-remaining-tokens"]) < 100_000
    unlimited = await chat(gateway.openai(DECLARED))
    assert "x-ratelimit-limit-requests" not in unlimited.headers


async def test_team_limits_are_shared_by_the_team_keys(gateway: Gateway):
    _, api_key = await gateway.mint(team="search", alias="second")
    statuses = [
        await status_of(chat(gateway.openai(api_key))),
        await status_of(chat(gateway.openai(TEAM_KEY))),
        await status_of(chat(gateway.openai(api_key))),
        await status_of(chat(gateway.openai(TEAM_KEY))),
    ]
    assert statuses == [200, 200, 200, 429]  # the team's rpm: 3, across both keys
    text = await metrics_text(gateway)
    assert 'crossway_rate_limited_total{limit="rpm",scope="team"} 1.0' in text


async def test_max_parallel_caps_requests_in_flight(gateway: Gateway):
    _, key = await gateway.mint(models=["stuck", "chat"], max_parallel=2)
    client = gateway.openai(key)
    stuck = [asyncio.ensure_future(chat(client, model="stuck")) for _ in range(2)]

    async def both_arrived() -> bool:
        return len(gateway.upstream.requests) == 2

    await eventually(both_arrived)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="chat", messages=HI)
    for task in stuck:  # the clients give up: their slots are freed
        task.cancel()
    await asyncio.gather(*stuck, return_exceptions=True)

    async def admitted() -> bool:
        return await status_of(chat(client)) == 200

    await eventually(admitted)


async def test_tpm_counts_real_usage(gateway: Gateway):
    # Each call reserves its estimate (a few tokens: max_tokens 2) and is corrected to the
    # fake upstream's real usage, 15 tokens: with 40 per minute the fourth call is refused,
    # though four estimates alone would fit.
    _, key = await gateway.mint(tpm=40)
    client = gateway.openai(key)
    statuses = [await status_of(chat(client, max_tokens=2)) for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    streamed = [await status_of(chat(client, max_tokens=2, stream=True))]
    assert streamed == [429]


async def test_tpm_corrects_a_streamed_reservation(gateway: Gateway):
    _, key = await gateway.mint(tpm=40)
    client = gateway.openai(key)
    for _ in range(3):
        stream = await client.chat.completions.create(
            model="chat", messages=HI, max_tokens=2, stream=True
        )
        async for _chunk in stream:
            pass
    assert await status_of(chat(client, max_tokens=2)) == 429


async def test_a_call_whose_worst_case_passes_the_tpm_is_refused_before_the_upstream(
    gateway: Gateway,
):
    # The case: n=128 with max_tokens=20 used 2,565 tokens of a 1,000 tpm. Its worst
    # case is 5 input tokens ("hi" and framing) and 128 * 20 output: refused at once.
    _, key = await gateway.mint(tpm=1000)
    with pytest.raises(openai.RateLimitError) as caught:
        await chat(gateway.openai(key), n=128, max_tokens=20)
    response = caught.value.response
    assert response.headers["x-should-retry"] == "false"  # waiting would not help
    assert "retry-after" not in response.headers
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["message"].startswith(
        "this request needs up to 2565 tokens (its input and its output limit for every "
        "answer), more than this key's tpm limit of 1000"
    )
    with pytest.raises(anthropic.RateLimitError) as refused:  # in Anthropic's shape too
        await gateway.anthropic(key).messages.create(model="chat", max_tokens=1000, messages=HI)
    assert refused.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert "needs up to 1005 tokens" in refused.value.message
    assert gateway.upstream.requests == []
    assert await status_of(chat(gateway.openai(key), n=4, max_tokens=20)) == 200  # 85 fit


async def test_the_cli_and_the_api_share_the_database(gateway: Gateway):
    created = crossway("keys", "create", "--config", str(gateway.config), "--alias", "from-cli")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert (await chat(gateway.openai(key))).parse().choices[0].message.content == ANSWER
    _status, listed = await gateway.admin("GET", "/admin/keys")
    record = next(k for k in listed["data"] if k["alias"] == "from-cli")
    key_id, api_key = await gateway.mint(alias="from-api")
    listing = crossway("keys", "list", "--config", str(gateway.config), "--json")
    assert key_id in listing.stdout
    assert api_key not in listing.stdout
    revoked = crossway("keys", "revoke", "--config", str(gateway.config), record["id"])
    assert revoked.returncode == 0, revoked.stderr

    async def refused() -> bool:  # another process changed it: within cache_ttl
        return await status_of(chat(gateway.openai(key))) == 401

    started = time.monotonic()
    await eventually(refused)
    assert time.monotonic() - started < CACHE_TTL + 5  # bounded, not a timing measurement


async def test_no_plaintext_key_in_the_database_logs_or_metrics(gateway: Gateway, tmp_path: Path):
    _, key = await gateway.mint(alias="secret-holder", rpm=100)
    await chat(gateway.openai(key))
    await chat(gateway.openai(DECLARED))
    await status_of(chat(gateway.openai(key + "x")))
    metrics = await metrics_text(gateway)
    stored = b"".join(p.read_bytes() for p in (tmp_path / "data").iterdir())
    logs = gateway.logs.getvalue()
    assert '"key_alias":"secret-holder"' in logs
    assert '"key_id":"key_' in logs
    for secret in (key, DECLARED, MASTER, TEAM_KEY):
        assert secret.encode() not in stored
        assert secret not in logs
        assert secret not in metrics
