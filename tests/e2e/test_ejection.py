"""A burst of concurrent requests to a failing upstream ejects its deployment once, through the
HTTP server (Envoy's outlier-detection semantics; see proxy/upstream/health.py)."""

from __future__ import annotations

import asyncio

import openai

from tests.e2e.reliability_plugins import ClockedBalance
from tests.e2e.test_reliability import HELPERS, MESSAGES, Launch, fault, launch
from tests.faults import status

__all__ = ["fault", "launch"]  # the fixtures this module uses

BURST = 256


async def test_a_burst_of_failures_ejects_once_for_the_first_cooldown(launch: Launch) -> None:
    gateway = await launch(
        f"""
        - plugin: {HELPERS}:ClockedBalance
          options: {{health: {{failures: 5, cooldown: 30, max_cooldown: 300}}}}
        """,
        first_byte=60,  # a loaded machine must not turn the burst's 500s into 504s
        patient=True,  # nor into connect or body-read timeouts
    )
    gateway.upstream.script("gpt-a", then=status(500))
    # 256 requests at once on a loaded machine wait long for a connection: the SDK's default
    # 5 s connect timeout would fail them before the gateway saw them.
    client = openai.AsyncOpenAI(
        base_url=f"{gateway.url}/v1",
        api_key="k",
        max_retries=0,
        timeout=120.0,  # a number: every openai SDK takes it (3.63 moved to httpx2)
    )

    async def one() -> int:
        raw = await client.chat.completions.with_raw_response.create(
            model="chat", messages=MESSAGES
        )
        return raw.http_response.status_code

    async def attempt() -> int | str:
        try:
            return await one()
        except Exception as exc:  # the SDK raises for every error status
            return getattr(exc, "status_code", type(exc).__name__)

    try:
        outcomes = await asyncio.gather(*(attempt() for _ in range(BURST)))
    finally:
        await client.close()
    client = gateway.client()
    assert set(outcomes) <= {502, 503}, outcomes
    metrics = await gateway.metrics()
    assert 'crossway_deployment_ejections_total{model="gpt-a",provider="up"} 1.0' in metrics
    before = gateway.upstream.count("gpt-a")
    clock = gateway.plugin(ClockedBalance).clock
    clock.advance(29.5)
    assert await attempt() == 503, "still cooling down: no upstream call"
    assert gateway.upstream.count("gpt-a") == before
    clock.advance(0.5)  # the first cooldown (30 s), not an escalated one, has passed
    assert await attempt() == 502
    assert gateway.upstream.count("gpt-a") == before + 1
