"""A preset's quirks through the gateway: rejected fields are dropped and logged at debug level."""

from __future__ import annotations

import io
import json
from pathlib import Path

import openai

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.e2e.fake_openai import ANSWER, FakeOpenAI

CONFIG = """
server: {{log_level: debug}}
providers:
  groq: {{type: openai, preset: groq, base_url: "{url}/v1", api_key: "gsk-test-key"}}
"""


async def test_rejected_fields_are_dropped_and_logged(tmp_path: Path) -> None:
    fake = FakeOpenAI()
    upstream_runner, upstream_url = await start_site(fake.app())
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(url=upstream_url))
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    try:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client-key", max_retries=0)
        completion = await client.chat.completions.create(
            model="groq/gpt-test",
            messages=[{"role": "user", "content": "Hi", "name": "alice"}],
            logprobs=True,
            temperature=0.5,
        )
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()
    assert completion.choices[0].message.content == ANSWER
    sent = fake.requests[-1]
    assert "logprobs" not in sent
    assert sent["temperature"] == 0.5
    assert "name" not in sent["messages"][0]
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    dropped = [line for line in lines if line["event"] == "request_fields_dropped"]
    assert dropped == [
        {
            "provider": "groq",
            "model": "gpt-test",
            "fields": ["logprobs"],
            "event": "request_fields_dropped",
            "level": "debug",
            "timestamp": dropped[0]["timestamp"],
        }
    ]
