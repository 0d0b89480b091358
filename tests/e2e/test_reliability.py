"""Retry, fallback, load balancing and health, end to end: clients → gateway → fault upstream.

The upstream is :class:`tests.faults.FaultUpstream` (a real OpenAI-compatible HTTP server that
follows a script of faults per model); the gateway runs the recommended chain ``fallback`` →
``retry`` → ``balance``, with the test-only subclasses of :mod:`tests.e2e.reliability_plugins`
where a test needs to read waits or move a clock. Clients are the official openai SDK and, for
the Bifrost and orq dialects, raw aiohttp requests in those wire formats.
"""

from __future__ import annotations

import asyncio
import io
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import openai
import pytest
from aiohttp import web

from proxy.server.app import RUNTIME, create_app
from tests.e2e.conftest import start_site
from tests.e2e.reliability_plugins import ClockedBalance, RecordingRetry
from tests.faults import FaultUpstream, answer_text, burst, cut, hang, held, reset, status

MESSAGES = [{"role": "user", "content": "Hi"}]
HELPERS = "tests.e2e.reliability_plugins"
CHAIN = f"""
- fallback: {{chains: {{chat: [backup]}}}}
- plugin: {HELPERS}:RecordingRetry
  options: {{retries: 2, max_retries: 3, backoff_base: 0.01, max_retry_after: 10}}
- plugin: {HELPERS}:ClockedBalance
  options: {{health: {{failures: 3, cooldown: 30}}}}
"""

P = TypeVar("P")


class Gateway:
    """A running gateway in front of the fault upstream."""

    def __init__(self, url: str, app: web.Application, upstream: FaultUpstream) -> None:
        self.url = url
        self.app = app
        self.upstream = upstream
        self._client: openai.AsyncOpenAI | None = None

    def client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="k", max_retries=0)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    def plugin(self, cls: type[P]) -> P:
        """The running instance of plugin class ``cls``."""
        plugins = self.app[RUNTIME].snapshot.plugins
        return next(p for p in plugins if isinstance(p, cls))

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, Any]]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}{path}", json=body) as response,
        ):
            return response.status, response.headers, await response.json()

    async def metrics(self) -> str:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}/metrics") as response,
        ):
            return await response.text()


Launch = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def fault() -> AsyncIterator[tuple[FaultUpstream, str]]:
    upstream = FaultUpstream()
    runner, url = await start_site(upstream.app())
    yield upstream, url
    await runner.cleanup()


@pytest.fixture
async def launch(tmp_path: Path, fault: tuple[FaultUpstream, str]) -> AsyncIterator[Launch]:
    upstream, upstream_url = fault
    started: list[tuple[web.AppRunner, Gateway]] = []

    async def start(plugins: str = CHAIN, first_byte: float = 5, patient: bool = False) -> Gateway:
        # patient: a burst of hundreds of requests shares this one event loop with the client
        # and the upstream; on a loaded machine connecting (a full listen backlog retries after
        # 1 s, 3 s, 7 s) and reading an error body can each take seconds.
        connect, idle = (60, 60) if patient else (5, 2)
        provider = (
            f'{{type: openai, base_url: "{upstream_url}/v1", api_key: "sk-test-0123456789abcdef",'
            f" timeouts: {{connect: {connect}, first_byte: {first_byte}, idle: {idle},"
            f" total: {max(10, 2 * first_byte)}}}}}"
        )
        config = tmp_path / "gateway.yaml"
        config.write_text(
            textwrap.dedent(
                f"""
                server: {{access_log: false}}
                providers:
                  up: {provider}
                  alt: {provider}
                  far: {provider}
                models:
                  chat: [{{target: up/gpt-a}}]
                  backup: [{{target: alt/gpt-b}}]
                  trio: [{{target: up/t-1}}, {{target: alt/t-2}}, {{target: far/t-dead}}]
                  lat: [{{target: up/fast-1}}, {{target: up/fast-2}}, {{target: up/slow}}]
                """
            )
            + "plugins:\n"
            + textwrap.indent(textwrap.dedent(plugins).strip(), "  ")
            + "\n"
        )
        app = create_app(config, log_stream=io.StringIO())
        runner, url = await start_site(app)
        gateway = Gateway(url, app, upstream)
        started.append((runner, gateway))
        return gateway

    yield start
    for runner, gateway in started:
        await gateway.close()
        await runner.cleanup()


async def chat(gateway: Gateway, model: str) -> Any:
    return await gateway.client().chat.completions.with_raw_response.create(
        model=model, messages=MESSAGES
    )


# ---------------------------------------------------------------------------------------------
# retry
# ---------------------------------------------------------------------------------------------


async def test_a_503_on_the_first_attempt_is_answered_by_the_retry(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-a", [status(503)])
    raw = await chat(gateway, "chat")
    assert raw.parse().choices[0].message.content == answer_text("gpt-a")
    assert raw.headers["x-crossway-attempts"] == "2"
    assert raw.headers["x-crossway-model"] == "up/gpt-a"
    assert "x-crossway-fallback" not in raw.headers
    assert gateway.upstream.count("gpt-a") == 2


@pytest.mark.parametrize(
    ("hint", "waited"),
    [(status(429, retry_after="1"), 1.0), (status(429, retry_after_ms="1500"), 1.5)],
)
async def test_retry_after_is_waited(launch: Launch, hint, waited: float):
    gateway = await launch()
    gateway.upstream.script("gpt-a", [hint])
    raw = await chat(gateway, "chat")
    assert raw.headers["x-crossway-attempts"] == "2"
    assert gateway.plugin(RecordingRetry).delays == [waited]


async def test_a_retry_after_above_the_cap_falls_back_instead(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-a", then=status(429, retry_after="120"))
    raw = await chat(gateway, "chat")
    assert raw.parse().choices[0].message.content == answer_text("gpt-b")
    assert raw.headers["x-crossway-fallback"] == "backup"
    assert raw.headers["x-crossway-model"] == "alt/gpt-b"
    assert gateway.upstream.count("gpt-a") == 1
    assert gateway.plugin(RecordingRetry).delays == []


async def test_a_400_is_not_retried(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-a", then=status(400))
    with pytest.raises(openai.BadRequestError):
        await chat(gateway, "chat")
    assert gateway.upstream.calls == ["gpt-a"]


async def test_orq_retry_count_is_honoured_within_the_operator_max(launch: Launch):
    gateway = await launch(
        f"""
        - plugin: {HELPERS}:RecordingRetry
          options: {{retries: 1, max_retries: 3, backoff_base: 0.01}}
        """
    )
    gateway.upstream.script("gpt-x", then=status(502))
    body = {"model": "up/gpt-x", "prompt": "Hi", "retry": {"count": 5, "on_codes": [502]}}
    code, _, _ = await gateway.post("/v2/router/completions", body)
    assert code == 502
    assert gateway.upstream.count("gpt-x") == 4  # 1 + max_retries (3), not 1 + 5


# ---------------------------------------------------------------------------------------------
# fallback
# ---------------------------------------------------------------------------------------------


async def test_primary_down_the_fallback_model_answers_openai(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-a", then=status(503))
    raw = await chat(gateway, "chat")
    assert raw.http_response.status_code == 200
    assert raw.parse().choices[0].message.content == answer_text("gpt-b")
    assert raw.headers["x-crossway-model"] == "alt/gpt-b"
    assert raw.headers["x-crossway-provider"] == "alt"
    assert raw.headers["x-crossway-fallback"] == "backup"
    assert raw.headers["x-crossway-attempts"] == "4"  # 3 on gpt-a, 1 on gpt-b
    assert gateway.upstream.calls == ["gpt-a"] * 3 + ["gpt-b"]
    assert 'crossway_fallbacks_total{from_model="chat",to_model="backup"} 1.0' in (
        await gateway.metrics()
    )


async def test_primary_down_the_fallback_model_answers_bifrost(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-a", then=status(503))
    body = {"model": "up/gpt-a", "text": "Hi", "fallbacks": ["alt/gpt-b"]}
    code, headers, answer = await gateway.post("/v1/text/completions", body)
    assert code == 200
    assert answer["choices"][0]["message"]["content"] == answer_text("gpt-b")
    assert answer["extra_fields"]["provider"] == "alt"
    assert headers["x-bf-retries"] == "3"
    assert headers["x-crossway-fallback"] == "alt/gpt-b"


async def test_primary_down_the_fallback_model_answers_orq(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-a", then=status(503))
    body = {"model": "chat", "prompt": "Hi", "fallbacks": [{"model": "alt/gpt-c"}]}
    code, headers, answer = await gateway.post("/v2/router/completions", body)
    assert code == 200
    assert answer["choices"][0]["text"] == answer_text("gpt-c")
    assert headers["x-crossway-model"] == "alt/gpt-c"
    assert headers["x-crossway-fallback"] == "alt/gpt-c"  # the request's chain, not the config's


async def test_primary_down_the_fallback_model_answers_fabro(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-a", then=status(503))
    message = {"role": "user", "content": [{"kind": "text", "data": "Hi"}]}
    body = {"model": "chat", "messages": [message], "stream": False}
    code, headers, answer = await gateway.post("/api/v1/completions", body)
    assert code == 200, answer
    assert answer["provider"] == "alt"
    assert headers["x-crossway-fallback"] == "backup"


async def test_a_dead_single_deployment_cools_down_and_the_fallback_answers_at_once(
    launch: Launch,
):
    gateway = await launch()
    gateway.upstream.script("gpt-a", then=status(500))
    await chat(gateway, "chat")  # 3 failures: gpt-a is ejected
    assert gateway.upstream.count("gpt-a") == 3
    raw = await chat(gateway, "chat")
    assert raw.headers["x-crossway-fallback"] == "backup"
    assert raw.headers["x-crossway-attempts"] == "1"
    assert gateway.upstream.count("gpt-a") == 3, "no call to the cooling-down deployment"


# ---------------------------------------------------------------------------------------------
# balance and health
# ---------------------------------------------------------------------------------------------


async def test_an_ejected_deployment_gets_no_requests_until_its_cooldown_ends(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("t-dead", then=status(503))
    while gateway.upstream.count("t-dead") < 3:
        raw = await chat(gateway, "trio")
        assert raw.http_response.status_code == 200, "retries hide the dead deployment"
    for _ in range(40):
        await chat(gateway, "trio")
    assert gateway.upstream.count("t-dead") == 3
    metrics = await gateway.metrics()
    assert 'crossway_deployment_ejections_total{model="t-dead",provider="far"} 1.0' in metrics
    assert 'crossway_deployment_healthy{model="t-dead",provider="far"} 0.0' in metrics

    clock = gateway.plugin(ClockedBalance).clock
    clock.advance(29)
    for _ in range(20):
        await chat(gateway, "trio")
    assert gateway.upstream.count("t-dead") == 3
    clock.advance(1)
    for _ in range(20):
        await chat(gateway, "trio")
    assert gateway.upstream.count("t-dead") > 3


async def test_a_deployment_at_its_rpm_limit_is_skipped_for_the_fallback(launch: Launch):
    gateway = await launch(
        f"""
        - fallback: {{chains: {{chat: [backup]}}}}
        - plugin: {HELPERS}:ClockedBalance
          options: {{limits: {{up/gpt-a: {{rpm: 2}}}}}}
        """
    )
    served = [(await chat(gateway, "chat")).headers["x-crossway-model"] for _ in range(3)]
    assert served == ["up/gpt-a", "up/gpt-a", "alt/gpt-b"]
    with pytest.raises(openai.RateLimitError) as caught:
        await chat(gateway, "up/gpt-a")
    assert int(caught.value.response.headers["retry-after"]) > 0
    gateway.plugin(ClockedBalance).clock.advance(60)
    assert (await chat(gateway, "chat")).headers["x-crossway-model"] == "up/gpt-a"
    assert gateway.upstream.count("gpt-a") == 3


async def test_latency_sends_a_small_share_to_a_ten_times_slower_deployment(launch: Launch):
    gateway = await launch(
        f"""
        - plugin: {HELPERS}:ClockedBalance
          options: {{strategy: latency}}
        """
    )
    gateway.upstream.clock = gateway.plugin(ClockedBalance).clock
    gateway.upstream.latency.update({"fast-1": 0.05, "fast-2": 0.05, "slow": 0.5})
    for _ in range(100):
        await chat(gateway, "lat")
    assert gateway.upstream.count("slow") <= 5
    assert gateway.upstream.count("fast-1") > 30
    assert gateway.upstream.count("fast-2") > 30


# ---------------------------------------------------------------------------------------------
# deadline
# ---------------------------------------------------------------------------------------------


async def test_a_deadline_of_2_s_with_a_hanging_upstream_answers_504_in_time(launch: Launch):
    gateway = await launch(
        f"""
        - plugin: {HELPERS}:RecordingRetry
          options: {{retries: 5, backoff_base: 0.01, deadline: 2}}
        """,
        first_byte=1.5,
    )
    gateway.upstream.script("hang", then=hang())
    with pytest.raises(openai.APIStatusError) as caught:
        await chat(gateway, "up/hang")
    # Without a deadline over every attempt, six attempts would each end in a 1.5 s first-byte
    # timeout (code first_byte_timeout); with it, the second attempt is cut at 2 s.
    assert caught.value.status_code == 504
    assert caught.value.code == "deadline_exceeded"
    assert gateway.upstream.count("hang") == 2


async def test_an_orq_call_timeout_bounds_the_whole_call(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-h", then=hang())
    body = {"model": "up/gpt-h", "prompt": "Hi", "timeout": {"call_timeout": 300}}
    code, _, answer = await gateway.post("/v2/router/completions", body)
    # Without the call timeout the attempt would end at the provider's 5 s first-byte clock
    # (code first_byte_timeout) and be retried twice.
    assert code == 504
    assert answer["error"]["code"] == "deadline_exceeded"
    assert gateway.upstream.count("gpt-h") == 1


# ---------------------------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------------------------


async def read_stream(gateway: Gateway, model: str) -> tuple[str, Any]:
    response = await gateway.client().chat.completions.with_raw_response.create(
        model=model, messages=MESSAGES, stream=True
    )
    text = ""
    async for chunk in response.parse():
        for choice in chunk.choices:
            text += choice.delta.content or ""
    return text, response.headers


@pytest.mark.parametrize("failure", [reset(), status(503)], ids=["reset", "503"])
async def test_a_failure_before_the_first_chunk_is_retried_invisibly(launch: Launch, failure):
    gateway = await launch()
    gateway.upstream.script("gpt-a", [failure])
    text, headers = await read_stream(gateway, "chat")
    assert text == answer_text("gpt-a")
    assert headers["x-crossway-attempts"] == "2"
    assert gateway.upstream.count("gpt-a") == 2


async def test_a_cut_after_chunks_ends_with_an_in_band_error_and_no_duplicate(launch: Launch):
    gateway = await launch()
    gateway.upstream.script("gpt-a", [cut(3)])
    received: list[str] = []
    response = await gateway.client().chat.completions.create(
        model="chat", messages=MESSAGES, stream=True
    )
    with pytest.raises(openai.APIError, match="provider 'up'"):
        await collect(response, received)
    assert "".join(received) == "gpt-a alpha"  # the 3 chunks sent: role, "gpt-a", " alpha"
    assert gateway.upstream.calls == ["gpt-a"], "a stream that started is never retried"


async def collect(stream: Any, into: list[str]) -> None:
    async for chunk in stream:
        into.extend(choice.delta.content or "" for choice in chunk.choices)


# ---------------------------------------------------------------------------------------------
# retry budget
# ---------------------------------------------------------------------------------------------


async def test_a_client_sending_one_request_at_a_time_always_gets_its_retries(launch: Launch):
    gateway = await launch(
        f"""
        - plugin: {HELPERS}:RecordingRetry
          options: {{retries: 3, backoff_base: 0.01, budget_ratio: 0.2, budget_min: 3}}
        """
    )
    gateway.upstream.script("gpt-a", burst(503, 1000))
    for _ in range(30):
        with pytest.raises(openai.APIStatusError):
            await chat(gateway, "up/gpt-a")
    body = {"model": "up/gpt-a", "prompt": "Hi", "retry": {"count": 2, "on_codes": [503]}}
    for _ in range(5):  # orq's per-request retry.count, asked for one request after another
        status_code, _, _ = await gateway.post("/v2/router/completions", body)
        assert status_code == 503
    assert gateway.upstream.count("gpt-a") == 30 * 4 + 5 * 3
    assert 'crossway_retries_denied_total{cause="budget"}' not in await gateway.metrics()


async def test_a_full_outage_adds_at_most_the_budget_in_flight(launch: Launch):
    gateway = await launch(
        f"""
        - plugin: {HELPERS}:RecordingRetry
          options: {{retries: 3, backoff_base: 0.01, budget_ratio: 0.2, budget_min: 3}}
        """,
        first_byte=60,  # requests wait at the gate for the test, however loaded the machine
    )
    upstream = gateway.upstream
    upstream.script("gpt-a", then=held(503))
    budget = gateway.plugin(RecordingRetry).budget

    async def one() -> int:
        with pytest.raises(openai.APIStatusError) as caught:
            await chat(gateway, "up/gpt-a")
        return caught.value.status_code

    def settled() -> bool:
        """Every retry in flight has reached the upstream and waits at the closed gate."""
        return upstream.held == upstream.waiting == budget.retries == budget.requests

    requests = [asyncio.ensure_future(one()) for _ in range(30)]
    await until(lambda: upstream.waiting == 30, "30 requests in flight")
    upstream.release()
    # 20% of the 30 requests in flight may be retries in flight: 6; the other 24 fail now.
    await until(lambda: settled() and budget.retries == 6, "6 retries in flight")
    while budget.requests:
        upstream.release()
        await until(lambda: budget.requests == 0 or settled(), "the next wave")
    assert [await r for r in requests] == [503] * 30
    # Unbudgeted: 30 x 4 = 120 upstream calls. Budgeted: 30, 6, then 3 and 3.
    assert upstream.count("gpt-a") == 30 + 6 + 3 + 3
    denied = 'crossway_retries_denied_total{cause="budget"} 27.0'  # 24, then 3 of the 6
    assert denied in await gateway.metrics()


async def until(condition: Callable[[], bool], what: str, deadline: float = 30.0) -> None:
    """Wait until ``condition()`` holds, polling the loop up to ``deadline`` seconds."""
    loop = asyncio.get_running_loop()
    stop = loop.time() + deadline
    while not condition():
        if loop.time() > stop:
            raise AssertionError(f"never reached: {what}")
        await asyncio.sleep(0.005)
