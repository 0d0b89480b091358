"""Fixtures for end-to-end tests: a real fake upstream and the gateway, both on 127.0.0.1."""

from __future__ import annotations

import io
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web

from proxy.aiohttp_ext.server import GatewayRunner
from proxy.http.rejections import rejection_answers
from proxy.server.app import DRAIN, METRICS, RUNTIME, create_app
from tests.e2e.fake_openai import FakeOpenAI

# Matches no built-in key shape (proxy.core.redact), so only the configured-secret rule can hide it:
# every leak check against it proves that the runtime gave the redactor its providers' keys.
UPSTREAM_KEY = "prov-key-upstream-0123456789abcdefXYZ"


class Running:
    """A started gateway: its base URL, app, captured log stream and fake upstream."""

    def __init__(self, url: str, app: web.Application, logs: io.StringIO, upstream: FakeOpenAI):
        self.url = url
        self.app = app
        self.logs = logs
        self.upstream = upstream

    def client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key="client-key", max_retries=0, **kwargs
        )

    def sync_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="client-key", max_retries=0)


def gateway_config(upstream_url: str, extra: str = "") -> str:
    return (
        textwrap.dedent(
            f"""
        server: {{access_log: true}}
        providers:
          up:
            type: openai
            base_url: "{upstream_url}/v1"
            api_key: "{UPSTREAM_KEY}"
            timeouts: {{first_byte: 2, idle: 1, total: 8}}
          mock: {{type: mock, faults: true}}
          mockfast: {{type: mock, faults: true, timeouts: {{first_byte: 0.5, idle: 0.3, total: 3}}}}
          keyless: {{type: openai, base_url: "http://127.0.0.1:9/v1", api_key: ""}}
        models:
          chat: [{{target: up/gpt-test}}]
          offline: [{{target: keyless/gpt-x}}]
        plugins:
          - headers: {{forward: [x-trace-id]}}
        """
        )
        + extra
    )


async def start_site(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on a free port: a gateway app as ``crossway serve`` serves it (through
    :class:`~proxy.aiohttp_ext.server.GatewayRunner`), any other (a fake upstream) as aiohttp
    does."""
    if METRICS in app:
        runner: web.AppRunner = GatewayRunner(
            app,
            on_rejected=rejection_answers(app[METRICS], lambda: app[RUNTIME].snapshot.logger),
            drain=app[DRAIN],
            handler_cancellation=True,
        )
    else:
        runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    runner, url = await start_site(fake.app())
    yield fake, url
    await runner.cleanup()


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Running]:
    fake, upstream_url = upstream
    config = tmp_path / "gateway.yaml"
    config.write_text(gateway_config(upstream_url))
    logs = io.StringIO()
    app = create_app(config, log_stream=logs)
    runner, url = await start_site(app)
    yield Running(url, app, logs, fake)
    await runner.cleanup()
