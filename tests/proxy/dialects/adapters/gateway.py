"""A gateway on 127.0.0.1 backed by in-process ``mock`` providers, for dialect HTTP tests.

The providers are named after real ones (``openai``, ``anthropic``) because some dialects' schemas
enumerate provider names (Bifrost's ``extra_fields.provider``); all are the offline mock, whose
model name chooses its behaviour (``echo``, ``tools``, ``error-<status>``, ``cut-<n>`` …).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from proxy.server.app import create_app
from tests.e2e.conftest import start_site

MOCK_PROVIDERS = """\
server: {access_log: false}
providers:
  openai: {type: mock, faults: true}
  anthropic: {type: mock, faults: true}
  mock: {type: mock, faults: true}
"""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, headers and raw body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, config: str = MOCK_PROVIDERS) -> AsyncIterator[str]:
    """Run a gateway for ``config`` (YAML text); yields its base URL."""
    path = tmp_path / "gateway.yaml"
    path.write_text(config)
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        yield url
    finally:
        await runner.cleanup()


async def post(
    url: str, path: str, body: dict[str, Any] | bytes, headers: Mapping[str, str] | None = None
) -> Answer:
    """POST ``body`` (JSON-encoded unless already bytes), with ``headers`` added, and read the
    whole answer."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", **(headers or {})}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + path, data=data, headers=headers) as response,
    ):
        return Answer(response.status, response.headers.copy(), await response.read())
