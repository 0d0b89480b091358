"""The response cache end to end: real SDK clients, the gateway over HTTP, the fake upstream.

Each test starts a gateway whose chain is a stand-in principal plugin (the ``auth`` plugin's
place), the cache on an injected clock and the ``cost`` plugin, in front of the fake OpenAI
upstream priced at $1 / $2 per million input / output tokens, and counts what reached that
upstream.
"""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web

from proxy.server.app import RUNTIME, create_app, reload_runtime
from tests.e2e.cache_plugins import ClockedCache
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import ANSWER, FakeOpenAI
from tests.schemas import validate
from tests.waiting import until

HELPERS = "tests.e2e.cache_plugins"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


class Gateway:
    """A running gateway with the cache, and clients for it."""

    def __init__(
        self, url: str, app: web.Application, upstream: FakeOpenAI, logs: io.StringIO
    ) -> None:
        self.url = url
        self.app = app
        self.upstream = upstream
        self.logs = logs
        self.openai = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        self.anthropic = anthropic.AsyncAnthropic(base_url=url, api_key="k", max_retries=0)

    def access_lines(self) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.logs.getvalue().splitlines() if line]
        return [line for line in lines if line.get("event") == "request"]

    @property
    def cache(self) -> ClockedCache:
        plugins = self.app[RUNTIME].snapshot.plugins
        return next(p for p in plugins if isinstance(p, ClockedCache))

    async def chat(self, model: str = "chat", **kwargs: Any) -> Any:
        """A whole chat completion through the openai SDK: (parsed, headers)."""
        kwargs.setdefault("messages", MESSAGES)
        raw = await self.openai.chat.completions.with_raw_response.create(model=model, **kwargs)
        return raw.parse(), raw.headers

    async def post(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> tuple[int, Any, bytes]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}{path}", json=body, headers=headers) as response,
        ):
            return response.status, response.headers, await response.read()

    async def metric(self, name: str, **labels: str) -> float:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}/metrics") as response,
        ):
            text = await response.text()
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # as exposed
        series = f"{name}{{{wanted}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    async def settle(self) -> None:
        """Wait for the entry writes in progress (they run after each reply is handed on)."""
        await self.cache.close()

    async def close(self) -> None:
        await self.openai.close()
        await self.anthropic.close()


Launch = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def launch(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Launch]:
    fake, upstream_url = upstream
    started: list[tuple[web.AppRunner, Gateway]] = []

    async def start(options: str = "{}") -> Gateway:
        config = tmp_path / f"gateway-{len(started)}.yaml"
        config.write_text(
            textwrap.dedent(
                f"""
                server: {{access_log: true}}
                providers:
                  up:
                    type: openai
                    base_url: "{upstream_url}/v1"
                    api_key: "{UPSTREAM_KEY}"
                    timeouts: {{first_byte: 5, idle: 2, total: 10}}
                    prices: {{"*": {{input: 1, output: 2}}}}
                models:
                  chat: [{{target: up/gpt-test}}]
                plugins:
                  - plugin: {HELPERS}:HeaderPrincipal
                  - plugin: {HELPERS}:ClockedCache
                    options: {options}
                  - cost: {{}}
                """
            )
        )
        logs = io.StringIO()
        app = create_app(config, log_stream=logs)
        runner, url = await start_site(app)
        gateway = Gateway(url, app, fake, logs)
        started.append((runner, gateway))
        return gateway

    yield start
    for runner, gateway in started:
        await gateway.close()
        await runner.cleanup()


def sse_data(body: bytes) -> list[bytes]:
    """The ``data:`` payloads of an unnamed-event SSE body, in order."""
    frames = body.decode().split("\n\n")
    assert frames[-1] == "", "the body ends with a whole frame"
    return [frame.removeprefix("data: ").encode() for frame in frames[:-1]]


async def test_the_second_identical_openai_call_is_a_hit_and_the_upstream_saw_one(
    launch: Launch,
) -> None:
    gateway = await launch()
    first, first_headers = await gateway.chat()
    await gateway.settle()
    gateway.cache.clock.advance(12.5)
    second, headers = await gateway.chat()
    assert first_headers["x-crossway-cache"] == "miss"
    assert first_headers["x-crossway-cost-usd"] == "0.00002"  # 10 input + 5 output tokens
    assert (headers["x-crossway-cache"], headers["age"]) == ("hit", "12")
    assert second.choices[0].message.content == ANSWER
    assert second.model_dump() == first.model_dump()
    assert headers["x-crossway-provider"] == "up"
    assert len(gateway.upstream.requests) == 1
    assert await gateway.metric("crossway_cache_requests_total", result="hit") == 1
    assert await gateway.metric("crossway_cache_bytes") > 0
    assert await gateway.metric("crossway_cache_saved_usd_total") == pytest.approx(0.00002)
    miss_line, hit_line = gateway.access_lines()
    assert (miss_line["cache"], miss_line["cost_usd"]) == ("miss", 0.00002)
    assert (hit_line["cache"], hit_line["cost_usd"]) == ("hit", 0)
    output = await gateway.metric(
        "crossway_tokens_total", model="chat", provider="up", kind="output"
    )
    assert output == 4, "the hit's tokens were not processed again (5 output = 4 + 1 reasoning)"


@pytest.mark.parametrize("first_streamed", [True, False], ids=["after-stream", "after-whole"])
async def test_a_streamed_repeat_replays_sse_that_validates_against_the_openai_schema(
    launch: Launch, first_streamed: bool
) -> None:
    gateway = await launch()
    body = {"model": "chat", "messages": MESSAGES, "stream": first_streamed}
    if first_streamed:
        body["stream_options"] = {"include_usage": True}
    status, headers, _ = await gateway.post("/v1/chat/completions", body)
    assert (status, headers["x-crossway-cache"]) == (200, "miss")
    await gateway.settle()
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    status, headers, raw = await gateway.post("/v1/chat/completions", streamed)
    assert (status, headers["x-crossway-cache"]) == (200, "hit")
    assert headers["content-type"].startswith("text/event-stream")
    # Everything is there already: one body with its length, not a chunked stream.
    assert headers["content-length"] == str(len(raw))
    assert "transfer-encoding" not in headers
    payloads = sse_data(raw)
    assert payloads[-1] == b"[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == ANSWER
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] == 15
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert len(gateway.upstream.requests) == 1


async def test_the_openai_sdk_reads_a_replayed_stream_without_usage_unless_asked(
    launch: Launch,
) -> None:
    gateway = await launch()
    await gateway.chat()
    await gateway.settle()
    stream = await gateway.openai.chat.completions.create(
        model="chat", messages=MESSAGES, stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER
    assert all(c.usage is None for c in chunks)
    assert len(gateway.upstream.requests) == 1


async def test_the_anthropic_sdk_reassembles_a_replayed_anthropic_stream(launch: Launch) -> None:
    gateway = await launch()
    request: dict[str, Any] = {
        "model": "chat",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi"}],
    }
    first = await gateway.anthropic.messages.with_raw_response.create(**request)
    assert first.headers["x-crossway-cache"] == "miss"
    await gateway.settle()
    async with gateway.anthropic.messages.stream(**request) as stream:
        assert stream.response.headers["x-crossway-cache"] == "hit"
        texts = [text async for text in stream.text_stream]
        message = await stream.get_final_message()
    assert "".join(texts) == ANSWER
    assert message.content[0].text == ANSWER  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 5
    assert len(gateway.upstream.requests) == 1


async def test_an_openai_answer_serves_the_same_request_from_an_anthropic_client(
    launch: Launch,
) -> None:
    gateway = await launch()
    await gateway.chat(max_tokens=100)
    await gateway.settle()
    raw = await gateway.anthropic.messages.with_raw_response.create(
        model="chat",
        max_tokens=100,
        system="Be brief.",
        messages=[{"role": "user", "content": "Hi"}],
    )
    message = await raw.parse()
    assert raw.headers["x-crossway-cache"] == "hit"
    assert message.content[0].text == ANSWER  # type: ignore[union-attr]
    assert len(gateway.upstream.requests) == 1


async def test_two_teams_never_share_an_entry_under_team_scope(launch: Launch) -> None:
    gateway = await launch("{scope: team}")

    async def as_tenant(key: str, team: str) -> str:
        _, headers = await gateway.chat(extra_headers={"x-test-key": key, "x-test-team": team})
        await gateway.settle()
        return headers["x-crossway-cache"]

    assert await as_tenant("k1", "team-a") == "miss"
    assert await as_tenant("k2", "team-b") == "miss"
    assert await as_tenant("k3", "team-a") == "hit", "a team shares across its keys"
    assert await as_tenant("k4", "team-b") == "hit"
    assert len(gateway.upstream.requests) == 2


async def test_key_scope_never_shares_between_keys(launch: Launch) -> None:
    gateway = await launch("{scope: key}")
    for key in ("k1", "k2"):
        _, headers = await gateway.chat(extra_headers={"x-test-key": key, "x-test-team": "t"})
        await gateway.settle()
        assert headers["x-crossway-cache"] == "miss"
    assert len(gateway.upstream.requests) == 2


async def test_cache_control_no_cache_refreshes_no_store_bypasses_max_age_bounds(
    launch: Launch,
) -> None:
    gateway = await launch()
    await gateway.chat()
    await gateway.settle()
    _, headers = await gateway.chat(extra_headers={"cache-control": "no-cache"})
    assert headers["x-crossway-cache"] == "miss"
    await gateway.settle()
    assert len(gateway.upstream.requests) == 2

    _, headers = await gateway.chat(extra_headers={"cache-control": "no-store"})
    assert headers["x-crossway-cache"] == "bypass"
    assert len(gateway.upstream.requests) == 3

    gateway.cache.clock.advance(100)
    _, headers = await gateway.chat(extra_headers={"cache-control": "max-age=150"})
    assert (headers["x-crossway-cache"], headers["age"]) == ("hit", "100")
    _, headers = await gateway.chat(extra_headers={"cache-control": "max-age=60"})
    assert headers["x-crossway-cache"] == "miss"
    assert len(gateway.upstream.requests) == 4
    assert await gateway.metric("crossway_cache_requests_total", result="bypass") == 1


async def test_errors_are_never_cached(launch: Launch) -> None:
    gateway = await launch()
    for model in ("up/fail-500", "up/fail-500", "up/fail-400", "up/fail-400"):
        with pytest.raises(openai.APIStatusError):
            await gateway.chat(model)
        await gateway.settle()
    assert len(gateway.upstream.requests) == 4


async def test_cut_streams_are_never_cached(launch: Launch) -> None:
    gateway = await launch()
    for _ in range(2):
        status, _, raw = await gateway.post(
            "/v1/chat/completions", {"model": "up/cut-stream", "messages": MESSAGES, "stream": True}
        )
        assert status == 200
        assert b'"error"' in raw, "an in-band error ends the cut stream"
        assert b"[DONE]" not in raw
        await gateway.settle()
    assert len(gateway.upstream.requests) == 2


async def test_a_stream_the_client_abandons_is_never_cached(launch: Launch) -> None:
    gateway = await launch()
    stream = await gateway.openai.chat.completions.create(
        model="up/slow-stream", messages=MESSAGES, stream=True
    )
    await anext(aiter(stream))
    await stream.close()
    await until(lambda: gateway.upstream.closed_streams == 1, what="the upstream stream closed")
    await gateway.settle()
    assert not gateway.cache._flights, "nothing in flight once the client is gone"


async def test_a_bad_ttl_header_is_a_400_in_the_clients_dialect(launch: Launch) -> None:
    gateway = await launch()
    status, _, raw = await gateway.post(
        "/v1/chat/completions",
        {"model": "chat", "messages": MESSAGES},
        headers={"x-crossway-cache-ttl": "forever"},
    )
    error = json.loads(raw)["error"]
    assert (status, error["param"]) == (400, "x-crossway-cache-ttl")
    assert gateway.upstream.requests == []


async def test_entries_expire_after_their_ttl_on_the_injected_clock(launch: Launch) -> None:
    gateway = await launch("{ttl: 60}")
    await gateway.chat()
    await gateway.settle()
    gateway.cache.clock.advance(59)
    assert (await gateway.chat())[1]["x-crossway-cache"] == "hit"
    gateway.cache.clock.advance(1)
    assert (await gateway.chat())[1]["x-crossway-cache"] == "miss"
    await gateway.settle()
    _, headers = await gateway.chat(extra_headers={"x-crossway-cache-ttl": "5"})
    assert headers["x-crossway-cache"] == "hit", "the refreshed entry is served"
    assert len(gateway.upstream.requests) == 2


async def test_a_client_ttl_header_shortens_the_entry(launch: Launch) -> None:
    gateway = await launch("{ttl: 600}")
    await gateway.chat(extra_headers={"x-crossway-cache-ttl": "5"})
    await gateway.settle()
    gateway.cache.clock.advance(5)
    assert (await gateway.chat())[1]["x-crossway-cache"] == "miss"


async def test_orq_cache_control_in_opt_in_mode(launch: Launch) -> None:
    gateway = await launch("{mode: opt_in}")
    asked = {"model": "chat", "prompt": "Hi", "cache": {"type": "exact_match", "ttl": 30}}
    plain = {"model": "chat", "prompt": "Hi"}
    verdicts = []
    for body in (plain, asked, asked, plain):
        status, headers, raw = await gateway.post("/v2/router/completions", body)
        assert status == 200, raw
        assert json.loads(raw)["choices"][0]["text"] == ANSWER
        verdicts.append(headers["x-crossway-cache"])
        await gateway.settle()
    assert verdicts == ["bypass", "miss", "hit", "bypass"]
    gateway.cache.clock.advance(30)
    status, headers, _ = await gateway.post("/v2/router/completions", asked)
    assert headers["x-crossway-cache"] == "miss", "orq's ttl is the entry's lifetime"
    assert len(gateway.upstream.requests) == 4


async def test_a_config_reload_keeps_the_memory_cache_and_applies_its_max_bytes(
    launch: Launch,
) -> None:
    """The memory backend's entries belong to the process, not to one config: after a reload
    (what SIGHUP runs) the same request is still a hit; a reload that lowers ``max_bytes``
    evicts what no longer fits once it serves."""
    gateway = await launch()
    runtime = gateway.app[RUNTIME]
    _, headers = await gateway.chat()
    assert headers["x-crossway-cache"] == "miss"
    await gateway.settle()
    before = gateway.cache
    assert reload_runtime(gateway.app)
    assert runtime.starting is not None
    await runtime.starting
    assert gateway.cache is not before, "the reload built a new cache plugin"
    _, headers = await gateway.chat()
    assert headers["x-crossway-cache"] == "hit"
    assert len(gateway.upstream.requests) == 1
    path = runtime.loader.config_path
    path.write_text(
        path.read_text().replace("options: {}", "options: {max_bytes: 64, max_entry_bytes: 64}")
    )
    assert reload_runtime(gateway.app)
    await runtime.starting
    assert await gateway.metric("crossway_cache_bytes") == 0, "the entry no longer fits"
    _, headers = await gateway.chat()
    assert headers["x-crossway-cache"] == "miss"
    assert len(gateway.upstream.requests) == 2


async def test_max_bytes_evicts_the_least_recently_used(launch: Launch) -> None:
    # An entry of the fake's answer is about 750 bytes (its upstream body included, which
    # OpenAI clients are answered with): two fit in 2000, three do not.
    gateway = await launch("{max_bytes: 2000, max_entry_bytes: 1000}")
    for word in ("one", "two", "three"):
        _, headers = await gateway.chat(messages=[{"role": "user", "content": word}])
        assert headers["x-crossway-cache"] == "miss"
        await gateway.settle()
        assert 0 < await gateway.metric("crossway_cache_bytes") <= 2000
    _, headers = await gateway.chat(messages=[{"role": "user", "content": "three"}])
    assert headers["x-crossway-cache"] == "hit"
    _, headers = await gateway.chat(messages=[{"role": "user", "content": "one"}])
    assert headers["x-crossway-cache"] == "miss", "the oldest entry was evicted"
    assert len(gateway.upstream.requests) == 4


def concurrent(
    gateway: Gateway, count: int, *, stream: bool
) -> list[asyncio.Future[tuple[str, str]]]:
    """``count`` identical requests at once to the gated model: (verdict, text) of each."""

    async def one() -> tuple[str, str]:
        if not stream:
            completion, headers = await gateway.chat("up/gated")
            return headers["x-crossway-cache"], completion.choices[0].message.content
        raw = await gateway.openai.chat.completions.with_raw_response.create(
            model="up/gated", messages=MESSAGES, stream=True
        )
        chunks = [chunk async for chunk in raw.parse()]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return raw.headers["x-crossway-cache"], text

    return [asyncio.ensure_future(one()) for _ in range(count)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_20_concurrent_identical_requests_reach_the_upstream_once(
    launch: Launch, stream: bool
) -> None:
    gateway = await launch("{coalesce: true}")
    requests = concurrent(gateway, 20, stream=stream)
    await until(
        lambda: len(gateway.upstream.requests) == 1 and gateway.cache.waiting == 19,
        what="one upstream call and 19 waiting requests",
    )
    gateway.upstream.gate.set()
    results = await asyncio.gather(*requests)
    assert [text for _, text in results] == [ANSWER] * 20
    assert sorted(verdict for verdict, _ in results) == ["hit"] * 19 + ["miss"]
    assert len(gateway.upstream.requests) == 1
    assert await gateway.metric("crossway_cache_requests_total", result="coalesced") == 19


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_20_concurrent_identical_requests_reach_the_upstream_20_times_without_coalescing(
    launch: Launch, stream: bool
) -> None:
    gateway = await launch("{coalesce: false}")
    requests = concurrent(gateway, 20, stream=stream)
    await until(lambda: len(gateway.upstream.requests) == 20, what="20 upstream calls")
    gateway.upstream.gate.set()
    results = await asyncio.gather(*requests)
    assert [text for _, text in results] == [ANSWER] * 20
    assert [verdict for verdict, _ in results] == ["miss"] * 20


async def test_the_first_clients_disconnect_does_not_cut_a_stream_another_client_shares(
    launch: Launch,
) -> None:
    gateway = await launch()
    upstream = gateway.upstream
    first = await gateway.openai.chat.completions.create(
        model="up/gated-stream", messages=MESSAGES, stream=True
    )
    first_chunks = aiter(first)
    await anext(first_chunks)  # chunk 1 of 7; the upstream holds the rest behind its gates
    joining = asyncio.ensure_future(
        gateway.openai.chat.completions.with_raw_response.create(
            model="up/gated-stream", messages=MESSAGES, stream=True
        )
    )
    await until(lambda: gateway.cache.waiting == 1, what="the second request waiting")
    upstream.gate.set()  # chunk 2 arrives: the second request joins the stream
    raw = await joining
    assert raw.headers["x-crossway-cache"] == "hit", "the second request joined the first"
    await anext(first_chunks)
    await first.close()  # the first client goes away mid-stream
    for _ in range(500):  # until the gateway has seen it go (each poll is an HTTP round trip)
        if await gateway.metric("crossway_requests_in_flight", dialect="openai") == 1:
            break
    else:
        raise AssertionError("the gateway never saw the first client go")
    upstream.second_gate.set()
    chunks = [chunk async for chunk in raw.parse()]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ANSWER
    assert len(upstream.requests) == 1
    assert upstream.closed_streams == 0, "the shared upstream stream ran to its end"
    await gateway.settle()
    assert (await gateway.chat("up/gated-stream"))[1]["x-crossway-cache"] == "hit"


HI_BODY = b'{"model": "chat", "messages": [{"role": "user", "content": "Hi"}], '


async def post_raw(gateway: Gateway, body: bytes) -> tuple[int, Any, Any]:
    """``body`` as written (a number no Python float holds survives only as JSON text)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gateway.url}/v1/chat/completions",
            data=body,
            headers={"content-type": "application/json"},
        ) as response,
    ):
        return response.status, response.headers, await response.json()


@pytest.mark.parametrize(
    ("fields", "passed"),
    [
        (b'"top_k": 1180591620717411303424', {"top_k": 2**70}),
        (b'"top_k": -1180591620717411303424', {"top_k": -(2**70)}),
        (b'"top_k": 1e400', {"top_k": float("inf")}),  # what Python's json reads it as
        (b'"vendor": [1e400, 1e-400]', {"vendor": [float("inf"), 0.0]}),
        (
            b'"response_format": {"type": "json_schema", "json_schema": {"name": "n", '
            b'"schema": {"type": "integer", "maximum": 1180591620717411303424}}}',
            {},
        ),
    ],
)
async def test_numbers_beyond_64_bits_or_a_double_pass_through_and_are_cached(
    launch: Launch, fields: bytes, passed: dict[str, Any]
) -> None:
    """Before, the cache key's encoder raised on them: a 500 for every such request."""
    gateway = await launch()
    for expected in ("miss", "hit"):
        status, headers, answer = await post_raw(gateway, HI_BODY + fields + b"}")
        assert status == 200, answer
        assert headers["x-crossway-cache"] == expected
        await gateway.settle()
    [sent] = gateway.upstream.requests
    assert {name: sent[name] for name in passed} == passed


@pytest.mark.parametrize("seed", [b"9223372036854775808", b"1180591620717411303424"])
async def test_a_seed_beyond_int64_is_a_400_naming_it(launch: Launch, seed: bytes) -> None:
    gateway = await launch()
    status, _, answer = await post_raw(gateway, HI_BODY + b'"seed": ' + seed + b"}")
    assert (status, answer["error"]["param"]) == (400, "seed"), answer
    assert gateway.upstream.requests == []
