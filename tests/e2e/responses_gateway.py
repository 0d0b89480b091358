"""A gateway for the Responses-API client tests, in front of two upstreams: the offline mock, and
the Anthropic-format fake (a real server on 127.0.0.1), so that each client library is proven
against a passthrough-free translation (Responses in, Anthropic Messages out) as well as the mock.

:class:`Upstream` says, per upstream, which model to name and what it answers: the mock echoes
the last user message (``echo``) or calls the first tool, then answers ``The tool said: …``
(``tools``); the fake answers ``Hello from anthropic``, calls the first tool offered with
``{"city": "Paris"}`` unless the last turn is a tool result, and answers structured-output
requests with JSON built from the schema.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from tests.e2e.conftest import start_site
from tests.proxy.dialects.adapters.gateway import serve
from tests.proxy.providers.fakes.anthropic import KEY, AnthropicFake
from tests.proxy.providers.fakes.base import TOOL_ARGUMENTS, answer

UPSTREAMS = ("mock", "anthropic")


@dataclass
class Upstream:
    """How to reach one upstream through the gateway, and what it will say."""

    name: str
    text_model: str
    tools_model: str
    fake: AnthropicFake | None

    def answer(self, text: str) -> str:
        """The text answer to a user turn ``text``."""
        return text if self.fake is None else answer("anthropic")

    def tool_arguments(self, text: str) -> dict[str, Any]:
        """The arguments the upstream calls ``get_weather`` (``{city: string}``) with."""
        return {"city": text} if self.fake is None else dict(TOOL_ARGUMENTS)

    def after_tool(self, output: str) -> str:
        """The answer once the conversation ends with a tool result ``output``."""
        return f"The tool said: {output}" if self.fake is None else answer("anthropic")

    def sent(self) -> dict[str, Any]:
        """The last request body the Anthropic fake received (only for the fake)."""
        assert self.fake is not None
        return self.fake.requests[-1].body


@dataclass
class Gateway:
    url: str
    upstream: Upstream

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="client", max_retries=0)


@contextlib.asynccontextmanager
async def responses_gateway(tmp_path: Path, upstream: str) -> AsyncIterator[Gateway]:
    """A gateway whose ``upstream`` is ``mock`` or ``anthropic`` (the Anthropic fake)."""
    fake = AnthropicFake()
    runner, fake_url = await start_site(fake.app())
    config = f"""\
server: {{access_log: false}}
providers:
  mock: {{type: mock}}
  claude: {{type: anthropic, base_url: "{fake_url}", api_key: "{KEY}"}}
"""
    if upstream == "mock":
        chosen = Upstream("mock", "mock/echo", "mock/tools", None)
    else:
        chosen = Upstream("anthropic", "claude/text", "claude/text", fake)
    try:
        async with serve(tmp_path, config) as url:
            yield Gateway(url, chosen)
    finally:
        await runner.cleanup()
