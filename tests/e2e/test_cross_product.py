"""Every client dialect with every provider, streaming and not, through the gateway.

The dialect adapters (tests/proxy/dialects/adapters) know how each client speaks; the provider
fakes (tests/proxy/providers/fakes) are real servers speaking each upstream's wire format. A
provider is named after its type, so Bifrost's ``extra_fields.provider`` stays within its schema.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.proxy.dialects.adapters import load_adapters
from tests.proxy.dialects.adapters.gateway import post
from tests.proxy.providers.fakes import FAKES
from tests.proxy.providers.fakes.base import answer

ADAPTERS = load_adapters()
TIMEOUTS = {"connect": 2, "first_byte": 5, "idle": 5, "total": 10}


@pytest.fixture(params=sorted(FAKES))
async def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    fake = FAKES[request.param]
    upstream_runner, upstream_url = await start_site(fake.app())
    provider = {"timeouts": TIMEOUTS, **fake.config(upstream_url)}
    config = {"server": {"access_log": False}, "providers": {fake.type: provider}}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        yield url, fake.type
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_dialect_meets_provider(gateway: tuple[str, str], dialect: str, stream: bool) -> None:
    url, provider = gateway
    adapter = ADAPTERS[dialect]
    path, body = adapter.request(f"{provider}/text", "Hi", stream=stream)
    reply = await post(url, path, body)
    assert reply.status == 200, reply.body
    outcome = adapter.read_stream(reply.body) if stream else adapter.read_response(reply.json())
    assert outcome.error is None
    assert outcome.text == answer(provider)
    assert outcome.input_tokens, "usage crosses every dialect and provider"
    assert outcome.output_tokens
