"""The ``cost`` plugin end to end: the openai SDK and raw Fabro clients see what each reply cost,
and the access log and ``/metrics`` agree, for whole answers, streams and abandoned streams."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import Running, gateway_config, start_site
from tests.e2e.fake_openai import FakeOpenAI

# The fake upstream's usage (prompt 10 with 4 cached, completion 5 with 1 reasoning) in the
# disjoint buckets: input 6, cache_read 4, output 4, reasoning 1. At these prices (USD per
# million) it costs 6*1 + 4*0.5 + 4*2 + 1*3 = 19 micro-dollars.
PRICES = "{input: 1, cache_read: 0.5, output: 2, reasoning: 3}"
FAKE_NANOS = 19_000
CONFIG = f"""
models:
  priced: [{{target: up/gpt-test, prices: {PRICES}}}]
  slow: [{{target: up/slow-stream, prices: {PRICES}}}]
  unpriced: [{{target: up/gpt-unpriced}}]
"""
PLUGINS = "\n  - cost: {}\n"


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Running]:
    fake, upstream_url = upstream
    text = gateway_config(upstream_url)
    # The shared config's models and plugins, plus ours.
    text = text.replace("models:\n", CONFIG.strip("\n") + "\n", 1).rstrip("\n") + PLUGINS
    config = tmp_path / "gateway.yaml"
    config.write_text(text)
    logs = io.StringIO()
    app = create_app(config, log_stream=logs)
    runner, url = await start_site(app)
    yield Running(url, app, logs, fake)
    await runner.cleanup()


async def access_line(gateway: Running, request_id: str, within: float = 5.0) -> dict[str, Any]:
    """The access line of ``request_id``, waiting (bounded) for the server to finish it."""
    stop = time.monotonic() + within
    while time.monotonic() < stop:
        for raw in gateway.logs.getvalue().splitlines():
            line = json.loads(raw)
            if line.get("event") == "request" and line.get("request_id") == request_id:
                return line
        await asyncio.sleep(0.02)
    raise AssertionError(f"no access line for {request_id} within {within} s")


async def metric(gateway: Running, name: str, **labels: str) -> float:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{gateway.url}/metrics") as response,
    ):
        text = await response.text()
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{"):
            series, value = line.rsplit(" ", 1)
            given = ",".join(sorted(series[len(name) + 1 : -1].split(",")))
            if given == wanted:
                return float(value)
    return 0.0


async def test_the_openai_sdk_sees_what_a_whole_answer_cost(gateway: Running) -> None:
    raw = await gateway.client().chat.completions.with_raw_response.create(
        model="priced",
        messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"x-request-id": "cost-whole"},
    )
    assert raw.headers["x-crossway-cost-usd"] == "0.000019"
    line = await access_line(gateway, "cost-whole")
    assert (line["cost_usd"], line["cost_source"]) == (FAKE_NANOS / 1e9, "estimated")
    total = await metric(gateway, "crossway_cost_usd_total", provider="up", model="priced")
    assert total == pytest.approx(FAKE_NANOS / 1e9)


async def test_a_streamed_answer_is_charged_from_its_usage_when_it_ends(gateway: Running) -> None:
    stream = await gateway.client().chat.completions.create(
        model="priced",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        extra_headers={"x-request-id": "cost-stream"},
    )
    async for _ in stream:
        pass
    line = await access_line(gateway, "cost-stream")
    assert (line["cost_usd"], line["cost_source"]) == (FAKE_NANOS / 1e9, "estimated")


async def test_a_stream_the_client_abandons_is_charged_for_what_was_generated(
    gateway: Running,
) -> None:
    stream = await gateway.client().chat.completions.create(
        model="slow",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        extra_headers={"x-request-id": "cost-abandoned"},
    )
    received = 0
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received += 1
            if received == 3:
                break
    await stream.close()
    line = await access_line(gateway, "cost-abandoned")
    assert line["status"] == 499
    assert line["cost_source"] == "estimated"  # no usage came: an estimate of what streamed
    # At least the prompt (1 message: 1 + 4 tokens) and the three words the client read.
    assert line["cost_usd"] >= (5 * 1000 + 3 * 2000) / 1e9
    total = await metric(gateway, "crossway_cost_usd_total", provider="up", model="slow")
    assert total == pytest.approx(line["cost_usd"])


async def test_a_model_without_a_price_has_no_cost_header_and_is_counted(gateway: Running) -> None:
    raw = await gateway.client().chat.completions.with_raw_response.create(
        model="unpriced",
        messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"x-request-id": "cost-unknown"},
    )
    assert "x-crossway-cost-usd" not in raw.headers
    line = await access_line(gateway, "cost-unknown")
    assert "cost_usd" not in line
    assert await metric(gateway, "crossway_cost_unknown_total", provider="up") == 1


async def test_mock_models_cost_the_documented_fixed_price(gateway: Running) -> None:
    raw = await gateway.client().chat.completions.with_raw_response.create(
        model="mock/echo", messages=[{"role": "user", "content": "one two three"}]
    )
    completion = raw.parse()
    assert completion.usage is not None
    # 1 USD per million input tokens, 2 per million output tokens.
    expected = completion.usage.prompt_tokens * 1000 + completion.usage.completion_tokens * 2000
    assert raw.headers["x-crossway-cost-usd"] == f"{expected / 1e9:.9f}".rstrip("0")


async def test_fabro_clients_get_cost_usd_and_its_source_whole_and_in_the_finish_event(
    gateway: Running,
) -> None:
    body = {
        "model": "priced",
        "messages": [{"role": "user", "content": [{"kind": "text", "data": "Hi"}]}],
    }
    async with aiohttp.ClientSession() as session:
        url = f"{gateway.url}/api/v1/completions"
        async with session.post(url, json={**body, "stream": False}) as response:
            whole = await response.json()
        async with session.post(url, json=body) as response:
            events = await response.text()
    assert (whole["cost_usd"], whole["cost_source"]) == (FAKE_NANOS / 1e9, "estimated")
    frames = [
        json.loads(line[len("data: ") :])
        for line in events.splitlines()
        if line.startswith("data: ")
    ]
    finish = frames[-1]
    assert finish["type"] == "finish"
    assert finish["response"]["cost_usd"] == FAKE_NANOS / 1e9
    assert finish["response"]["cost_source"] == "estimated"
