"""A background response whose gateway process is killed mid-run is reported ``failed`` (the
gateway stopped) after a restart, never lost or stuck: a real ``crossway serve`` with a SQLite
database, SIGKILLed while a response runs, started again on the same database; the openai SDK
polls the response there until its lease has passed and it reads ``failed``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai

from proxy.stored.response_store import LEASE_SECONDS, STOPPED
from tests.e2e.processes import free_port, kill_tree, serve
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"
CONFIG = """\
server: {{host: 127.0.0.1, port: {port}, access_log: false}}
database: {{url: "sqlite:///{database}"}}
providers:
  mock: {{type: mock, faults: true}}
plugins:
  - plugin: tests.e2e.key_plugin:HeaderKey
"""


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="client", max_retries=0, default_headers={"x-test-key": "a"}
    )


async def test_a_response_running_when_the_process_died_reads_failed_after_a_restart(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(port=port, database=tmp_path / "crossway.db"))
    with serve(config, port, 1, tmp_path / "first.log") as first:
        async with sdk(first.url) as client:
            created = await client.responses.create(
                model="mock/stall-0", input="never ends", background=True
            )
            for _ in range(100):
                if (await client.responses.retrieve(created.id)).status == "in_progress":
                    break
                await asyncio.sleep(0.1)
        kill_tree(first.process)  # no drain, no last write: the lease is all that is left
    with serve(config, port, 1, tmp_path / "second.log") as second:
        async with sdk(second.url) as client:
            for _ in range(int(LEASE_SECONDS * 10) + 300):
                response = await client.responses.retrieve(created.id)
                validate_in(SPEC, "Response", response.model_dump(mode="json"))
                if response.status == "failed":
                    break
                assert response.status == "in_progress"
                await asyncio.sleep(0.1)
            assert response.status == "failed"
            assert response.error is not None
            assert (response.error.code, response.error.message) == ("server_error", STOPPED)
