"""A reply that a dialect cannot render is still answered in that dialect's error shape."""

from __future__ import annotations

import io
from pathlib import Path

import aiohttp

from proxy.core.canonical import Call
from proxy.core.plugin import Next
from proxy.core.reply import Reply, Response
from proxy.server.app import create_app
from tests.e2e.conftest import start_site

CONFIG = """
server: {access_log: false}
providers:
  mock: {type: mock}
plugins:
  - plugin: tests.e2e.test_encode_failures:EmptyReply
"""


class EmptyReply:
    """A (buggy) plugin that answers with no choices at all."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        return Reply(provider="mock", model="m", response=Response(id="r", model="m", choices=[]))


async def test_an_unrenderable_reply_is_a_500_in_the_dialects_shape(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG)
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    body = {"model": "mock/x", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{url}/v1/messages", json=body) as response,
        ):
            status, answer = response.status, await response.json()
    finally:
        await runner.cleanup()
    assert status == 500
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "api_error"
    assert "unhandled_error" in logs.getvalue()
