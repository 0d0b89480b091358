"""Native batches at Azure OpenAI and at Anthropic, and across the two chat wires: real fakes of
Azure's Files and Batch APIs (:mod:`tests.e2e.fake_openai_batches` under ``/openai``, with
``api-version`` and ``api-key``) and of Anthropic's Message Batches
(:mod:`tests.e2e.fake_anthropic_batches`) on 127.0.0.1, driven by the official ``openai`` and
``anthropic`` SDKs through a real gateway.

- An OpenAI batch to an Azure alias goes to Azure's batch API: its lines name
  ``/chat/completions`` and the Azure deployment, the ``api-key`` and ``api-version`` are sent.
- A message batch to an Anthropic alias goes to Anthropic's Message Batches as it is.
- An OpenAI SDK chat batch to an Anthropic alias is translated to Messages requests and its
  results back into chat completions; an Anthropic SDK message batch to an OpenAI alias the
  other way round. A refused request comes back in the client's error shape.
- A message batch cancelled by its client is cancelled upstream.
- A gateway stopped while it polls an upstream batch leaves it to the next process, which
  resumes polling it (it is never submitted twice) and maps its results back.

Every result is recorded in the ledger at the batch rate (half the model's price), no request
goes through the online endpoints, and no provider key reaches a client or a log line."""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import anthropic
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.e2e.fake_anthropic_batches import FakeMessageBatches
from tests.e2e.fake_openai_batches import FakeBatchAPI
from tests.schemas import validate_in
from tests.waiting import until

SPEC = "openai-batches.openapi.json"
MASTER = "master-key-vendors-" + "0123456789" * 3
KEY = "sk-cw-vendor-batch-" + "abcdefghij" * 4
AZURE_KEY = "prov-azure-batch-key-0123456789"
ANTHROPIC_KEY = "prov-anthropic-batch-key-0123456789"
OPENAI_KEY = "prov-openai-batch-key-0123456789"
UPSTREAM_KEYS = (AZURE_KEY, ANTHROPIC_KEY, OPENAI_KEY)
LINE_NANOS = (10 * 1_000 + 5 * 2_000) // 2  # 10 input at $1/M, 5 output at $2/M, halved


class Gateway(NamedTuple):
    url: str
    azure: FakeBatchAPI
    claude: FakeMessageBatches
    openai: FakeBatchAPI
    logs: io.StringIO


def write_config(tmp_path: Path, azure_url: str, claude_url: str, openai_url: str) -> Path:
    """The gateway's config: one native alias on each of the three upstreams."""
    config = tmp_path / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: true}}
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            batches: {{poll_interval: 0.1}}
            auth:
              master_key: "{MASTER}"
              keys: [{{key: "{KEY}", alias: vendors}}]
            providers:
              azure:
                type: azure
                endpoint: "{azure_url}"
                api_key: "{AZURE_KEY}"
                deployments: {{gpt-batch: global-batch-deployment}}
              claude: {{type: anthropic, base_url: "{claude_url}", api_key: "{ANTHROPIC_KEY}"}}
              up: {{type: openai, base_url: "{openai_url}/v1", api_key: "{OPENAI_KEY}"}}
            models:
              azure-cheap:
                - {{target: azure/gpt-batch, batch: native, prices: {{input: 1, output: 2}}}}
              claude-cheap:
                - {{target: claude/claude-batch, batch: native, prices: {{input: 1, output: 2}}}}
              gpt-cheap:
                - {{target: up/gpt-batch, batch: native, prices: {{input: 1, output: 2}}}}
            plugins:
              - auth: {{}}
              - cost: {{}}
            """
        )
    )
    return config


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    azure, claude, gpt = FakeBatchAPI(root="/openai"), FakeMessageBatches(), FakeBatchAPI()
    upstreams = [await start_site(fake.app()) for fake in (azure, claude, gpt)]
    (_, azure_url), (_, claude_url), (_, openai_url) = upstreams
    config = write_config(tmp_path, azure_url, claude_url, openai_url)
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    try:
        yield Gateway(url, azure, claude, gpt, logs)
    finally:
        await runner.cleanup()
        for upstream_runner, _ in upstreams:
            await upstream_runner.cleanup()
    for key in UPSTREAM_KEYS:
        assert key not in logs.getvalue()


def chat_lines(count: int, model: str) -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": f"q{n}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": model,
                    "messages": [{"role": "user", "content": "refuse" if n == 2 else f"ask {n}"}],
                },
            }
        ).encode()
        + b"\n"
        for n in range(count)
    )


def message_requests(count: int, model: str, word: str = "ask") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"m{n}",
            "params": {
                "model": model,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "refuse" if n == 2 else f"{word} {n}"}],
            },
        }
        for n in range(count)
    ]


def openai_sdk(gateway: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)


def anthropic_sdk(gateway: Gateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gateway.url, api_key=KEY, max_retries=0)


async def openai_batch(client: openai.AsyncOpenAI, content: bytes) -> Any:
    """Upload ``content``, create a chat batch of it, and wait until it ended."""
    uploaded = await client.files.create(file=("in.jsonl", content), purpose="batch")
    created = await client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    async with asyncio.timeout(30):
        while True:
            batch = await client.batches.retrieve(created.id)
            validate_in(SPEC, "Batch", batch.model_dump(mode="json", exclude_none=True))
            if batch.status in ("completed", "failed", "cancelled"):
                return batch
            await asyncio.sleep(0.05)


async def file_lines(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    content = (await client.files.content(file_id)).content
    parsed = [json.loads(line) for line in content.splitlines()]
    for line in parsed:
        validate_in(SPEC, "BatchRequestOutput", line)
    return parsed


async def ended(client: anthropic.AsyncAnthropic, batch_id: str) -> Any:
    async with asyncio.timeout(30):
        while True:
            batch = await client.messages.batches.retrieve(batch_id)
            if batch.processing_status == "ended":
                return batch
            await asyncio.sleep(0.05)


async def spend_of(gateway: Gateway, batch_id: str, requests: int) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {MASTER}"}
    url = f"{gateway.url}/admin/spend?group_by=batch"
    async with aiohttp.ClientSession() as session, asyncio.timeout(20):
        while True:
            async with session.get(url, headers=headers) as got:
                rows = [r for r in (await got.json())["data"] if r["batch_id"] == batch_id]
            if rows and rows[0]["requests"] >= requests:
                return rows[0]
            await asyncio.sleep(0.1)


async def test_an_openai_batch_to_an_azure_alias_runs_on_azures_batch_api(
    gateway: Gateway,
) -> None:
    async with openai_sdk(gateway) as client:
        batch = await openai_batch(client, chat_lines(4, "azure-cheap"))
        assert batch.status == "completed", batch.errors
        output = await file_lines(client, batch.output_file_id)
        errors = await file_lines(client, batch.error_file_id)
    assert [line["custom_id"] for line in output] == ["q0", "q1", "q3"]
    texts = [line["response"]["body"]["choices"][0]["message"]["content"] for line in output]
    assert texts == ["batched: ask 0", "batched: ask 1", "batched: ask 3"]
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [("q2", 400)]
    azure = gateway.azure
    assert {line["url"] for line in azure.lines} == {"/chat/completions"}
    assert {line["body"]["model"] for line in azure.lines} == {"global-batch-deployment"}
    assert azure.authorizations == {f"api-key {AZURE_KEY}"}
    assert azure.api_versions == {"2024-10-21"}
    assert azure.chat_calls == 0
    spend = await spend_of(gateway, batch.id, 4)
    assert spend["cost_usd"] == round(3 * LINE_NANOS / 1e9, 9)


async def test_a_message_batch_to_an_anthropic_alias_runs_on_anthropics_batch_api(
    gateway: Gateway,
) -> None:
    async with anthropic_sdk(gateway) as client:
        created = await client.messages.batches.create(
            requests=message_requests(4, "claude-cheap")  # type: ignore[arg-type]
        )
        batch = await ended(client, created.id)
        results = [r async for r in await client.messages.batches.results(created.id)]
    counts = batch.request_counts
    assert (counts.succeeded, counts.errored, counts.canceled) == (3, 1, 0)
    assert [r.custom_id for r in results] == ["m0", "m1", "m2", "m3"]
    for n, result in enumerate(results):
        if n == 2:
            assert result.result.type == "errored"
            assert result.result.error.error.type == "invalid_request_error"
        else:
            assert result.result.type == "succeeded"
            assert result.result.message.content[0].text == f"batched: ask {n}"  # type: ignore[union-attr]
    claude = gateway.claude
    (submitted,) = claude.requests.values()
    assert {item["params"]["model"] for item in submitted} == {"claude-batch"}
    assert [item["params"]["max_tokens"] for item in submitted] == [64] * 4
    assert claude.keys == {ANTHROPIC_KEY}
    assert claude.versions == {"2023-06-01"}
    assert claude.message_calls == 0
    spend = await spend_of(gateway, created.id, 4)
    assert spend["cost_usd"] == round(3 * LINE_NANOS / 1e9, 9)


async def test_an_openai_sdk_chat_batch_runs_at_anthropic_translated_both_ways(
    gateway: Gateway,
) -> None:
    async with openai_sdk(gateway) as client:
        batch = await openai_batch(client, chat_lines(4, "claude-cheap"))
        assert batch.status == "completed", batch.errors
        output = await file_lines(client, batch.output_file_id)
        errors = await file_lines(client, batch.error_file_id)
    for line in output:
        validate_in(
            "openai-chat.openapi.json", "CreateChatCompletionResponse", line["response"]["body"]
        )
    texts = [line["response"]["body"]["choices"][0]["message"]["content"] for line in output]
    assert texts == ["batched: ask 0", "batched: ask 1", "batched: ask 3"]
    assert [line["response"]["body"]["usage"]["total_tokens"] for line in output] == [15] * 3
    ((error),) = errors
    assert (error["custom_id"], error["response"]["status_code"]) == ("q2", 400)
    assert error["response"]["body"]["error"]["type"] == "invalid_request_error"
    (submitted,) = gateway.claude.requests.values()
    params = [item["params"] for item in submitted]
    assert {p["model"] for p in params} == {"claude-batch"}
    assert all(p["max_tokens"] > 0 and "stream" not in p for p in params)
    assert params[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "ask 0"}]}
    ]  # as the anthropic provider sends an online request
    spend = await spend_of(gateway, batch.id, 4)
    assert spend["cost_usd"] == round(3 * LINE_NANOS / 1e9, 9)


async def test_an_anthropic_sdk_message_batch_runs_at_openai_translated_both_ways(
    gateway: Gateway,
) -> None:
    async with anthropic_sdk(gateway) as client:
        created = await client.messages.batches.create(
            requests=message_requests(4, "gpt-cheap")  # type: ignore[arg-type]
        )
        batch = await ended(client, created.id)
        results = [r async for r in await client.messages.batches.results(created.id)]
    assert (batch.request_counts.succeeded, batch.request_counts.errored) == (3, 1)
    for n, result in enumerate(results):
        if n == 2:
            assert result.result.type == "errored"
            assert result.result.error.error.type == "invalid_request_error"
        else:
            assert result.result.type == "succeeded"
            message = result.result.message  # type: ignore[union-attr]
            assert message.content[0].text == f"batched: ask {n}"
            assert (message.usage.input_tokens, message.usage.output_tokens) == (10, 5)
    gpt = gateway.openai
    assert {line["url"] for line in gpt.lines} == {"/v1/chat/completions"}
    assert {line["body"]["model"] for line in gpt.lines} == {"gpt-batch"}
    assert gpt.lines[0]["body"]["max_tokens"] == 64
    assert gpt.authorizations == {f"Bearer {OPENAI_KEY}"}
    spend = await spend_of(gateway, created.id, 4)
    assert spend["cost_usd"] == round(3 * LINE_NANOS / 1e9, 9)


async def test_a_native_message_batch_cancelled_by_its_client_is_cancelled_upstream(
    gateway: Gateway,
) -> None:
    claude = gateway.claude
    async with anthropic_sdk(gateway) as client:
        created = await client.messages.batches.create(
            requests=message_requests(3, "claude-cheap", word="hold")  # type: ignore[arg-type]
        )
        await until(lambda: claude.polls > 0, seconds=20, what="the upstream batch polled")
        cancelling = await client.messages.batches.cancel(created.id)
        assert cancelling.processing_status == "canceling"
        batch = await ended(client, created.id)
        results = [r async for r in await client.messages.batches.results(created.id)]
    assert claude.cancelled == list(claude.batches)
    counts = batch.request_counts
    assert (counts.succeeded, counts.errored, counts.canceled) == (0, 0, 3)
    assert {r.result.type for r in results} == {"canceled"}


async def test_a_native_batch_resumes_polling_after_a_restart_without_submitting_again(
    tmp_path: Path,
) -> None:
    claude = FakeMessageBatches()
    upstream_runner, claude_url = await start_site(claude.app())
    nowhere = "http://127.0.0.1:9"
    config = write_config(tmp_path, nowhere, claude_url, nowhere)
    try:
        runner, url = await start_site(create_app(config, log_stream=io.StringIO()))
        try:
            async with anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0) as client:
                created = await client.messages.batches.create(
                    requests=message_requests(3, "claude-cheap", word="hold")  # type: ignore[arg-type]
                )
                await until(lambda: claude.polls > 0, seconds=20, what="the upstream batch polled")
        finally:
            await runner.cleanup()  # a clean stop: the batch is released, its upstream id kept
        claude.release()
        runner, url = await start_site(create_app(config, log_stream=io.StringIO()))
        try:
            async with anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0) as client:
                batch = await ended(client, created.id)
                results = [r async for r in await client.messages.batches.results(created.id)]
        finally:
            await runner.cleanup()
    finally:
        await upstream_runner.cleanup()
    assert len(claude.batches) == 1  # submitted once, polled by both processes
    assert (batch.request_counts.succeeded, batch.request_counts.errored) == (2, 1)
    assert [r.result.type for r in results] == ["succeeded", "succeeded", "errored"]
