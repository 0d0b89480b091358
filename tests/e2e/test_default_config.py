"""The shipped config/gateway.yaml answers offline, with no provider key in the environment."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "gateway.yaml"


@pytest.fixture
async def url(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    runner, base = await start_site(create_app(DEFAULT_CONFIG, log_stream=io.StringIO()))
    yield base
    await runner.cleanup()


async def test_offline_chat_and_stream(url: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    completion = await client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Hello"}]
    )
    assert completion.choices[0].message.content.endswith("You said: Hello")
    stream = await client.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "Hello"}], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text.endswith("You said: Hello")


async def test_keyless_model_falls_back_to_the_mock(url: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello"}]
    )
    assert raw.headers["x-crossway-model"] == "mock/fast"
    assert raw.parse().choices[0].message.content.endswith("You said: Hello")


async def test_fabro_without_a_model_uses_the_default(url: str) -> None:
    body = {"messages": [{"role": "user", "content": [{"kind": "text", "data": "hey"}]}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/api/v1/completions", json={**body, "stream": False}) as response,
    ):
        answer = await response.json()
    assert answer["provider"] == "mock"
    assert answer["message"]["content"][0]["data"].endswith("You said: hey")


async def test_the_readme_quick_start_uses_listed_models(url: str) -> None:
    readme = (DEFAULT_CONFIG.parents[1] / "README.md").read_text()
    quick_start = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    used = set(re.findall(r'"model": "([^"]+)"|model="([^"]+)"', quick_start))
    names = {name for pair in used for name in pair if name}
    assert names, "the quick start names no model"
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    listed = {model.id for model in (await client.models.list()).data}
    assert names <= listed


@pytest.mark.parametrize("model", ["hang", "slow-100000", "error-500", "cut-1", "stall-1"])
async def test_the_shipped_mock_has_no_fault_models(url: str, model: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
    stream = await client.chat.completions.create(
        model=f"mock/{model}", messages=[{"role": "user", "content": "Hello"}], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text.endswith("You said: Hello"), "an ordinary model name: the fixed reply"
