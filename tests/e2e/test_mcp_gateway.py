"""The MCP gateway end to end: real MCP servers written with the SDK (streamable HTTP behind a
bearer token, SSE, stdio), the SDK's own client against ``/mcp`` and ``/mcp/{server}``, with
keys, allow-lists, limits, the ledger and metrics. One gateway serves the whole module."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import mcp.types as types
import openai
import pytest
import pytest_asyncio
from aiohttp import web
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from playwright.async_api import expect

from proxy.mcp.gateway import MCP_HUB
from proxy.server.app import create_app
from tests.e2e.browser import browser
from tests.e2e.conftest import start_site
from tests.e2e.mcp_servers import Record, serve_http, tools_server
from tests.e2e.otlp_receiver import CLIENT, SERVER, OtlpReceiver
from tests.proxy.providers.fakes.anthropic import AnthropicFake
from tests.proxy.providers.fakes.gemini import GeminiFake

pytestmark = pytest.mark.asyncio(loop_scope="module")

REPO = Path(__file__).resolve().parents[2]
MASTER = "master-key-" + "0123456789abcdef" * 2
FULL = "sk-cw-mcpfull-" + "abcdefghij" * 4
NARROW = "sk-cw-mcpnarrow-" + "klmnopqrst" * 4
LIMITED = "sk-cw-mcplimited-" + "uvwxyzabcd" * 4
TOKEN = "ghp-upstream-token-0123456789abcdefXYZ"
STDIO_SECRET = "stdio-secret-value-9876543210zyxwv"


class Sentinel:
    """An HTTP server that counts the requests it gets (none must reach it)."""

    def __init__(self) -> None:
        self.hits = 0

    def app(self) -> web.Application:
        async def hit(request: web.Request) -> web.Response:
            self.hits += 1
            return web.Response(status=404)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", hit)
        return app


class Served:
    """The gateway and the MCP servers behind it."""

    def __init__(self, url: str, app: web.Application, logs: io.StringIO) -> None:
        self.url = url
        self.app = app
        self.logs = logs
        self.records: dict[str, Record] = {}
        self.stoppers: dict[str, Callable[[], Awaitable[None]]] = {}
        self.fakes: dict[str, Any] = {}
        self.sentinel = Sentinel()
        self.sentinel_url = ""
        self.github_url = ""
        self.otlp = OtlpReceiver()

    def openai(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def admin(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with aiohttp.ClientSession() as http, http.get(self.url + path, headers=headers) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    async def admin_send(self, method: str, path: str, body: Any) -> Any:
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, self.url + path, json=body, headers=headers) as r,
        ):
            assert r.status < 300, await r.text()
            return await r.json()

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as http, http.get(self.url + "/metrics") as r:
            return await r.text()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    tmp = tmp_path_factory.mktemp("mcp")
    github, search = Record(), Record()
    async with contextlib.AsyncExitStack() as stack:
        github_url, _ = await stack.enter_async_context(
            serve_http(tools_server("github", github), "streamable_http", github, TOKEN)
        )
        search_url, _ = await stack.enter_async_context(
            serve_http(tools_server("search", search), "sse", search)
        )
        flaky_process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.e2e.mcp_servers",
            "http",
            "flaky",
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
        )
        stack.push_async_callback(_end, flaky_process)
        assert flaky_process.stdout is not None
        flaky_url = (await asyncio.wait_for(flaky_process.stdout.readline(), 20)).decode().strip()
        assert flaky_url.startswith("http://127.0.0.1:"), "the flaky server did not start"
        anthropic_fake, gemini_fake = AnthropicFake(), GeminiFake()
        providers = {}
        for name, fake in (("anth", anthropic_fake), ("gem", gemini_fake)):
            fake_runner, fake_url = await start_site(fake.app())
            stack.push_async_callback(fake_runner.cleanup)
            providers[name] = fake.config(fake_url)
        sentinel = Sentinel()
        sentinel_runner, sentinel_url = await start_site(sentinel.app())
        stack.push_async_callback(sentinel_runner.cleanup)
        otlp = OtlpReceiver()
        otlp_runner, otlp_url = await start_site(otlp.app())
        stack.push_async_callback(otlp_runner.cleanup)
        config = tmp / "gateway.yaml"
        config.write_text(
            textwrap.dedent(
                f"""
                server: {{access_log: true}}
                database: {{url: "sqlite:///{tmp}/crossway.db"}}
                auth:
                  master_key: "{MASTER}"
                  teams:
                    support: {{mcp: {{github: [echo]}}}}
                  keys:
                    - {{key: "{FULL}", alias: full}}
                    - {{key: "{NARROW}", alias: narrow, team: support}}
                    - {{key: "{LIMITED}", alias: limited, rpm: 3, max_parallel: 1,
                       mcp: {{github: "*"}}}}
                providers: {json.dumps(providers)}
                models:
                  claude: [{{target: anth/text}}]
                  gem: [{{target: gem/text}}]
                plugins: [{{auth: {{}}}}]
                telemetry: {{traces: {{endpoint: "{otlp_url}"}}}}
                mcp:
                  health_interval: 0.2
                  restart_backoff: 0.1
                  max_restart_backoff: 0.5
                  page_size: 5
                  servers:
                    github:
                      url: "{github_url}"
                      headers: {{Authorization: "Bearer ${{GITHUB_MCP_TOKEN}}"}}
                      price_per_call: 0.002
                    search: {{url: "{search_url}", transport: sse}}
                    flaky: {{url: "{flaky_url}"}}
                    local:
                      transport: stdio
                      command: ["{sys.executable}", "-m", "tests.e2e.mcp_servers", "stdio"]
                      env: {{STDIO_SECRET: "{STDIO_SECRET}"}}
                      cwd: "{REPO}"
                """
            )
        )
        logs = io.StringIO()
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("GITHUB_MCP_TOKEN", TOKEN)
            patch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # spans exported 50 ms after their end
            app = create_app(config, log_stream=logs)
        runner, url = await start_site(app)
        stack.push_async_callback(runner.cleanup)
        gateway = Served(url, app, logs)
        gateway.records = {"github": github, "search": search}
        gateway.fakes = {"anthropic": anthropic_fake, "gemini": gemini_fake}
        gateway.sentinel, gateway.sentinel_url = sentinel, sentinel_url
        gateway.github_url = github_url
        gateway.otlp = otlp
        gateway.stoppers["flaky"] = lambda: _end(flaky_process)  # awaited by the test
        async with session(gateway, FULL) as client:
            await eventually(lambda: _all_up(client))
        yield gateway


async def _end(process: asyncio.subprocess.Process) -> None:
    """Stop a server process this test started (by its PID), at once."""
    if process.returncode is None:
        process.kill()
        await asyncio.wait_for(process.wait(), 5)


@contextlib.asynccontextmanager
async def session(
    served: Served,
    key: str | None,
    path: str = "/mcp",
    on_message: Callable[[IncomingMessage], Awaitable[None]] | None = None,
) -> AsyncIterator[ClientSession]:
    """The SDK's client, initialised, against ``path`` with ``key``."""
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(served.url + path, http_client=http) as (read, write),
        ClientSession(read, write, message_handler=on_message, read_timeout_seconds=20) as client,
    ):
        await client.initialize()
        yield client


async def initialize_error(served: Served, key: str | None, path: str) -> MCPError:
    """The error the SDK's client meets initialising against ``path`` with ``key``."""
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - the SDK's task groups wrap it
        async with session(served, key, path):
            pass
    error = raised.value
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, MCPError), error
    return error


async def names(client: ClientSession) -> list[str]:
    """Every tool name, all pages followed."""
    found: list[str] = []
    cursor: str | None = None
    while True:
        params = None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
        page = await client.list_tools(params=params)
        found += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            return found


async def _all_up(client: ClientSession) -> bool:
    listed = await names(client)
    return all(f"{s}__echo" in listed for s in ("github", "search", "flaky")) and (
        "local__pid" in listed
    )


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        await asyncio.sleep(0.1)


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_the_aggregate_lists_and_calls_every_server_with_prefixes(served: Served) -> None:
    async with session(served, FULL) as client:
        listed = await names(client)
        assert {"github__echo", "search__add", "local__pid", "flaky__slow"} <= set(listed)
        assert len(listed) == len(set(listed))
        first = await client.list_tools()
        assert len(first.tools) == 5
        assert first.next_cursor is not None
        assert text_of(await client.call_tool("github__echo", {"text": "hi"})) == "github:hi"
        assert text_of(await client.call_tool("search__add", {"a": 2, "b": 3})) == "5"
        failed = await client.call_tool("github__fail", {})
        assert failed.is_error
        assert "this tool fails" in text_of(failed)
        resources = (await client.list_resources()).resources
        uris = {str(resource.uri) for resource in resources}
        assert {"note://github/readme", "note://search/readme"} <= uris
        read = await client.read_resource("note://search/readme")
        content = read.contents[0]
        assert isinstance(content, types.TextResourceContents)
        assert content.text == "the search readme"
        prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
        assert {"github__greet", "search__greet"} <= prompts
        prompt = await client.get_prompt("search__greet", {"who": "Ada"})
        message = prompt.messages[0].content
        assert isinstance(message, types.TextContent)
        assert message.text == "Hello Ada, from search"
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("nowhere__echo", {"text": "x"})
        assert unknown.value.code == types.INVALID_PARAMS


async def test_one_server_unprefixed(served: Served) -> None:
    async with session(served, FULL, "/mcp/github") as client:
        listed = await names(client)
        assert "echo" in listed
        assert not any("__" in name for name in listed)
        assert text_of(await client.call_tool("echo", {"text": "one"})) == "github:one"
        prompt = await client.get_prompt("greet", {"who": "Bo"})
        assert prompt.messages


async def test_a_key_sees_only_its_tool_and_is_refused_the_others(served: Served) -> None:
    async with session(served, NARROW) as client:
        assert await names(client) == ["github__echo"]
        assert (await client.list_prompts()).prompts == [] or all(
            p.name.startswith("github__") for p in (await client.list_prompts()).prompts
        )
        assert text_of(await client.call_tool("github__echo", {"text": "ok"})) == "github:ok"
        with pytest.raises(MCPError) as refused:
            await client.call_tool("github__add", {"a": 1, "b": 2})
        assert refused.value.code == -32003
        assert refused.value.data["status"] == 403
        with pytest.raises(MCPError) as other:
            await client.call_tool("search__echo", {"text": "x"})
        assert other.value.code == -32003
    refused_scope = await initialize_error(served, NARROW, "/mcp/search")
    assert refused_scope.code == -32003  # a server it may not use at all


async def test_progress_is_relayed_and_cancellation_passed_through(served: Served) -> None:
    updates: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        updates.append((done, total, message))

    async with session(served, FULL) as client:
        result = await client.call_tool("github__slow", {"steps": 3}, progress_callback=progress)
        assert text_of(result) == "done"
        assert [u[0] for u in updates] == [1, 2, 3]
        assert updates[-1][1:] == (3, "step 3")
        waiting = asyncio.ensure_future(client.call_tool("github__wait", {"label": "w1"}))
        await asyncio.sleep(0.5)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError, MCPError):
            await waiting

        async def seen() -> bool:
            return "w1" in served.records["github"].cancelled

        await eventually(seen)


async def test_a_tool_list_change_is_relayed(served: Served) -> None:
    notices: list[IncomingMessage] = []

    async def on_message(message: IncomingMessage) -> None:
        notices.append(message)

    async with session(served, FULL, on_message=on_message) as client:
        await asyncio.sleep(0.3)  # the client's GET stream opens
        assert text_of(await client.call_tool("github__grow", {})) == "grew"

        async def relayed() -> bool:
            return any(isinstance(n, types.ToolListChangedNotification) for n in notices)

        await eventually(relayed)
        assert "github__grown" in await names(client)
        assert text_of(await client.call_tool("github__grown", {})) == "grown"


async def test_limits_apply_to_tool_calls(served: Served) -> None:
    async with session(served, LIMITED) as client:
        listed = await names(client)
        assert listed
        assert all(name.startswith("github__") for name in listed)
        waiting = asyncio.ensure_future(client.call_tool("github__wait", {"label": "held"}))

        async def released() -> bool:  # the cancelled wait call is over: its slot is free
            recent = served.app[MCP_HUB].recent
            return any(c["tool"] == "wait" and c["key_alias"] == "limited" for c in recent)

        await asyncio.sleep(0.5)  # the wait call holds the key's one max_parallel slot
        with pytest.raises(MCPError) as parallel:
            await client.call_tool("github__echo", {"text": "2"})
        assert parallel.value.code == -32029
        assert parallel.value.data["code"] == "rate_limit_exceeded"
        assert "in flight" in parallel.value.message
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError, MCPError):
            await waiting
        await eventually(released)
        await client.call_tool("github__echo", {"text": "3"})
        await client.call_tool("github__echo", {"text": "4"})  # rpm 3: wait, echo 3, echo 4
        with pytest.raises(MCPError) as limited:  # (a call refused for its slot took nothing)
            await client.call_tool("github__echo", {"text": "5"})
        assert limited.value.code == -32029
        assert limited.value.data["status"] == 429
        assert "rpm" in limited.value.message


async def test_a_key_is_required(served: Served) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    async with aiohttp.ClientSession() as http:
        async with http.post(served.url + "/mcp", json=body) as response:
            assert response.status == 401
            answer = await response.json()
        assert answer["error"]["code"] == -32011
        headers = {"Authorization": f"Bearer {FULL}", "Mcp-Session-Id": "no-such-session"}
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        async with http.post(served.url + "/mcp", json=ping, headers=headers) as response:
            assert response.status == 404
        async with http.post(served.url + "/mcp/nope", json=body, headers=headers) as response:
            assert response.status == 404
    no_key = await initialize_error(served, None, "/mcp")
    assert no_key.code == -32011
    assert "Missing API key" in no_key.message


async def test_every_call_is_in_the_ledger_and_the_metrics(served: Served) -> None:
    async with session(served, FULL) as client:
        await client.call_tool("github__echo", {"text": "ledger"})
    async with session(served, NARROW) as client:  # a refusal is counted too
        with pytest.raises(MCPError):
            await client.call_tool("github__add", {"a": 1, "b": 2})
    records: list[dict[str, Any]] = []

    async def recorded() -> bool:  # the ledger is written off the request path, in batches
        logs = await served.admin("/admin/spend/logs?model=github/echo&limit=100")
        records[:] = [r for r in logs["data"] if r["key_alias"] == "full"]
        return bool(records)

    await eventually(recorded)
    record = records[0]
    assert record["dialect"] == "mcp"
    assert record["mcp_server"] == "github"
    assert record["mcp_tool"] == "echo"
    assert record["status"] == 200
    assert record["mcp_bytes"] > 0
    assert record["duration_ms"] >= 0
    assert record["cost_usd"] == pytest.approx(0.002)
    metrics = await served.metrics()
    assert 'crossway_mcp_tool_calls_total{result="ok",server="github"}' in metrics
    assert 'crossway_mcp_tool_calls_total{result="denied",server="github"}' in metrics
    assert 'crossway_mcp_server_up{server="github"} 1.0' in metrics


async def test_upstream_credentials_never_reach_a_client_log_or_metric(served: Served) -> None:
    async with session(served, FULL) as client:
        listed = await client.list_tools()
        answer = await client.call_tool("local__env", {"name": "STDIO_SECRET"})
        assert text_of(answer) == "set"  # the stdio server got its env
        visible = listed.model_dump_json() + answer.model_dump_json()
    admin = json.dumps(await served.admin("/admin/mcp"))
    for secret in (TOKEN, STDIO_SECRET):
        assert secret not in visible
        assert secret not in served.logs.getvalue()
        assert secret not in await served.metrics()
        assert secret not in admin
    assert f"Bearer {TOKEN}" in served.records["github"].authorizations  # the gateway sent it


async def test_admin_lists_servers_health_and_tools(served: Served) -> None:
    listing = await served.admin("/admin/mcp")
    servers = {server["name"]: server for server in listing["servers"]}
    assert set(servers) >= {"github", "search", "local"}
    github = servers["github"]
    assert github["health"] == "up"
    assert github["transport"] == "streamable_http"
    assert "echo" in github["tools"]
    assert github["tool_count"] == len(github["tools"])
    assert "url" not in github
    assert "headers" not in github


async def test_a_crashed_stdio_server_is_restarted_and_its_tools_come_back(
    served: Served,
) -> None:
    async with session(served, FULL) as client:
        before = text_of(await client.call_tool("local__pid", {}))
        with pytest.raises(MCPError) as crashed:
            await client.call_tool("local__crash", {})
        assert crashed.value.code in (-32010, -32000)

        async def back() -> bool:
            if "local__pid" not in await names(client):
                return False
            with contextlib.suppress(MCPError):
                return text_of(await client.call_tool("local__pid", {})) != before
            return False

        await eventually(back)
    listing = await served.admin("/admin/mcp")
    local = next(s for s in listing["servers"] if s["name"] == "local")
    assert local["restarts"] >= 1


async def test_one_server_down_leaves_the_others_working(served: Served) -> None:
    async with session(served, FULL) as client:
        assert text_of(await client.call_tool("flaky__echo", {"text": "x"})) == "flaky:x"
        await served.stoppers["flaky"]()

        async def gone() -> bool:
            return not any(name.startswith("flaky__") for name in await names(client))

        await eventually(gone)
        with pytest.raises(MCPError) as down:
            await client.call_tool("flaky__echo", {"text": "x"})
        assert down.value.code == -32010
        assert down.value.data["status"] == 503
        assert text_of(await client.call_tool("github__echo", {"text": "y"})) == "github:y"
    metrics = await served.metrics()
    assert 'crossway_mcp_server_up{server="flaky"} 0.0' in metrics


async def test_the_admin_ui_shows_servers_tools_and_recent_calls(
    served: Served, tmp_path: Path
) -> None:
    async with session(served, FULL) as client:
        await client.call_tool("github__echo", {"text": "ui"})
    errors: list[str] = []
    async with browser(tmp_path / "profile") as context:
        page = await context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        await page.goto(f"{served.url}/ui/")
        await page.get_by_label("Master key").fill(MASTER)
        await page.get_by_role("button", name="Sign in").click()
        await page.get_by_role("link", name="MCP").click()
        await expect(page.get_by_role("heading", name="MCP", exact=True)).to_be_visible()
        servers = page.get_by_role("table", name="MCP servers")
        github = servers.get_by_role("row").filter(has_text="github")
        await expect(github).to_contain_text("streamable_http")
        await expect(github).to_contain_text("up")
        tools = page.get_by_role("table", name="Tools by server")
        await expect(tools.get_by_role("row").filter(has_text="search").first).to_be_visible()
        calls = page.get_by_role("table", name="Latest tool calls, newest first")
        await expect(calls.get_by_role("row").nth(1)).to_contain_text("echo")
        await expect(calls.get_by_role("row").nth(1)).to_contain_text("full")
        assert TOKEN not in await page.content()
    assert errors == []


@pytest.mark.parametrize(("model", "fake"), [("claude", "anthropic"), ("gem", "gemini")])
async def test_a_responses_request_runs_mcp_tools_on_any_provider(
    served: Served, model: str, fake: str
) -> None:
    mcp_tool = {
        "type": "mcp",
        "server_label": "github",
        "allowed_tools": ["weather"],
        "require_approval": "never",
    }
    response = await served.openai(FULL).responses.create(
        model=model, input="What is the weather?", tools=[mcp_tool]
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_list_tools", "mcp_call", "message"]
    listed, called = response.output[:2]
    assert [tool.name for tool in listed.tools] == ["weather"]
    assert called.server_label == "github"
    assert called.name == "weather"
    assert json.loads(called.arguments) == {"city": "Paris"}
    assert called.output == "github: sunny in Paris"
    assert response.output_text == f"Hello from {fake}"
    second = served.fakes[fake].requests[-1].body  # the round that got the tool's result
    assert "github: sunny in Paris" in json.dumps(second)

    async def recorded() -> bool:  # the ledger is written off the request path, in batches
        logs = await served.admin("/admin/spend/logs?model=github/weather&limit=10")
        return any(r["mcp_tool"] == "weather" and r["key_alias"] == "full" for r in logs["data"])

    await eventually(recorded)


async def test_a_server_url_names_a_configured_server_or_is_refused_before_connecting(
    served: Served,
) -> None:
    client = served.openai(FULL)
    by_url = {"type": "mcp", "server_label": "gh", "server_url": served.github_url,
              "allowed_tools": ["weather"], "require_approval": "never"}  # fmt: skip
    response = await client.responses.create(model="claude", input="hi", tools=[by_url])
    assert response.output[1].output == "github: sunny in Paris"
    elsewhere = {**by_url, "server_url": served.sentinel_url + "/mcp"}
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model="claude", input="hi", tools=[elsewhere])
    assert refused.value.code == "mcp_server_not_allowed"
    assert served.sentinel.hits == 0  # no connection was made
    with pytest.raises(openai.PermissionDeniedError):  # the key's grants apply here too
        await served.openai(NARROW).responses.create(
            model="claude",
            input="hi",
            tools=[{**by_url, "server_url": None, "server_label": "search"}],
        )


@pytest.mark.parametrize(("model", "fake"), [("claude", "anthropic"), ("gem", "gemini")])
async def test_a_streamed_responses_request_runs_mcp_tools(
    served: Served, model: str, fake: str
) -> None:
    mcp_tool = {"type": "mcp", "server_label": "github", "allowed_tools": ["weather"],
                "require_approval": "never"}  # fmt: skip
    events = []
    stream = await served.openai(FULL).responses.create(
        model=model, input="What is the weather?", tools=[mcp_tool], stream=True
    )
    async for event in stream:
        events.append(event)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    assert [e.type for e in events[2:10]] == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    assert events[8].item_id == events[9].item.id
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [(e.output_index, e.item.type) for e in done] == [
        (0, "mcp_list_tools"),
        (1, "mcp_call"),
        (2, "message"),
    ]
    assert done[1].item.output == "github: sunny in Paris"
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas
    assert all(e.output_index == 2 for e in deltas)
    completed = events[-1]
    assert completed.type == "response.completed"
    assert [item.type for item in completed.response.output] == [
        "mcp_list_tools",
        "mcp_call",
        "message",
    ]
    assert completed.response.output_text == f"Hello from {fake}"
    stored = await served.openai(FULL).responses.retrieve(completed.response.id)
    assert [item.type for item in stored.output] == ["mcp_list_tools", "mcp_call", "message"]


async def test_max_tool_calls_bounds_the_mcp_calls(served: Served) -> None:
    mcp_tool = {"type": "mcp", "server_label": "github", "allowed_tools": ["weather"],
                "require_approval": "never"}  # fmt: skip
    before = len(served.fakes["anthropic"].requests)
    response = await served.openai(FULL).responses.create(
        model="claude", input="weather?", tools=[mcp_tool], max_tool_calls=0
    )
    assert [item.type for item in response.output] == ["mcp_list_tools", "message"]
    assert response.max_tool_calls == 0
    sent = served.fakes["anthropic"].requests[before:]
    assert len(sent) == 1
    assert "tools" not in sent[0].body  # withdrawn: the model could not call them


async def test_grants_set_over_the_admin_api_apply_at_once(served: Served) -> None:
    record = await served.admin_send(
        "POST", "/admin/keys", {"alias": "minted", "mcp": {"github": ["add"]}}
    )
    assert record["mcp"] == {"github": ["add"]}
    async with session(served, record["key"]) as client:
        assert await names(client) == ["github__add"]
        assert text_of(await client.call_tool("github__add", {"a": 1, "b": 1})) == "2"
    changed = await served.admin_send(
        "PATCH", f"/admin/keys/{record['id']}", {"mcp": {"search": "*"}}
    )
    assert changed["mcp"] == {"search": "*"}
    async with session(served, record["key"]) as client:
        listed = await names(client)
        assert listed
        assert all(name.startswith("search__") for name in listed)
        with pytest.raises(MCPError) as refused:
            await client.call_tool("github__add", {"a": 1, "b": 1})
        assert refused.value.code == -32003
    team = await served.admin_send("POST", "/admin/teams", {"id": "tools", "mcp": {"github": "*"}})
    assert team["mcp"] == {"github": "*"}


async def test_every_tool_call_is_a_span(served: Served) -> None:
    async with session(served, NARROW) as client:
        assert (
            text_of(await client.call_tool("github__echo", {"text": "traced"})) == "github:traced"
        )
        with pytest.raises(MCPError):
            await client.call_tool("github__add", {"a": 1, "b": 2})

    def narrow(tool: str) -> list[Any]:
        return [
            span
            for span in served.otlp.spans
            if span.name == f"tools/call {tool}"
            and span.attributes.get("crossway.key_alias") == "narrow"
            and span.attributes["crossway.mcp.server"] == "github"
        ]

    async def both_exported() -> bool:
        return bool(narrow("echo")) and bool(narrow("add"))

    await eventually(both_exported)
    served_call, refused = narrow("echo")[-1], narrow("add")[-1]
    assert served_call.kind == CLIENT
    assert served_call.attributes["mcp.method.name"] == "tools/call"
    assert served_call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert served_call.attributes["gen_ai.tool.name"] == "echo"
    assert served_call.attributes["crossway.mcp.server"] == "github"
    assert served_call.attributes["crossway.mcp.result"] == "ok"
    assert served_call.attributes["crossway.team"] == "support"
    assert "error.type" not in served_call.attributes
    assert refused.attributes["crossway.mcp.result"] == "denied"
    assert refused.attributes["error.type"] == "tool_not_allowed"
    assert TOKEN not in json.dumps([span.attributes for span in served.otlp.spans])


async def test_a_responses_requests_tool_calls_are_spans_of_its_trace(served: Served) -> None:
    mcp_tool = {
        "type": "mcp",
        "server_label": "github",
        "allowed_tools": ["weather"],
        "require_approval": "never",
    }
    raw = await served.openai(FULL).responses.with_raw_response.create(
        model="claude", input="What is the weather?", tools=[mcp_tool]
    )
    trace_id = raw.headers["x-crossway-trace-id"]

    async def called() -> bool:
        return any(s.name == "tools/call weather" for s in served.otlp.trace(trace_id))

    await eventually(called)
    trace = served.otlp.trace(trace_id)
    [request] = [span for span in trace if span.kind == SERVER]
    [tool_call] = [span for span in trace if span.name == "tools/call weather"]
    assert tool_call.parent_id == request.span_id  # between the model's rounds, in the request
    assert tool_call.attributes["crossway.key_alias"] == "full"
