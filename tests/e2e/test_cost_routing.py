"""Cost-aware routing end to end: ``balance: {strategy: cost}`` and the fallback plugin's
``order: cost`` pick the cheaper of two deployments, seen by the openai SDK."""

from __future__ import annotations

import io
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, Running, start_site
from tests.e2e.fake_openai import FakeOpenAI

DEAR = "{input: 5, output: 15}"
CHEAP = "{input: 0.5, output: 1.5}"


def config(upstream_url: str) -> str:
    return textwrap.dedent(
        f"""
        providers:
          dear: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
          cheap: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
        models:
          # Listed dear first, and weighted towards it: only the price can explain the choice.
          chat:
            - {{target: dear/gpt-test, weight: 9, prices: {DEAR}}}
            - {{target: cheap/gpt-test, weight: 1, prices: {CHEAP}}}
          broken: [{{target: dear/fail-503}}]
          dear-chat: [{{target: dear/gpt-test, prices: {DEAR}}}]
          cheap-chat: [{{target: cheap/gpt-test, prices: {CHEAP}}}]
        plugins:
          - cost: {{}}
          - fallback:
              order: cost
              chains: {{broken: [dear-chat, cheap-chat]}}
          - balance: {{strategy: cost}}
        """
    )


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Running]:
    fake, upstream_url = upstream
    path = tmp_path / "gateway.yaml"
    path.write_text(config(upstream_url))
    logs = io.StringIO()
    app = create_app(path, log_stream=logs)
    runner, url = await start_site(app)
    yield Running(url, app, logs, fake)
    await runner.cleanup()


async def test_balance_cost_serves_every_request_from_the_cheaper_deployment(
    gateway: Running,
) -> None:
    client = gateway.client()
    served = []
    for _ in range(10):
        raw = await client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "Hi"}], max_tokens=50
        )
        served.append(raw.headers["x-crossway-model"])
        assert raw.headers["x-crossway-cost-usd"]  # priced at the cheap deployment's rates
    assert served == ["cheap/gpt-test"] * 10


async def test_fallback_order_cost_tries_the_cheaper_model_first(gateway: Running) -> None:
    raw = await gateway.client().chat.completions.with_raw_response.create(
        model="broken", messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers["x-crossway-fallback"] == "cheap-chat"  # written second, tried first
    assert raw.headers["x-crossway-model"] == "cheap/gpt-test"
    assert [r["model"] for r in gateway.upstream.requests] == ["fail-503", "gpt-test"]
