"""A native batch: an alias whose deployment says ``batch: native`` runs its batches through the
provider's own batch API — a real fake of OpenAI's Files and Batch APIs on 127.0.0.1
(:mod:`tests.e2e.fake_openai_batches`). Through the ``openai`` SDK: the batch is submitted (its
lines' model rewritten to the upstream's, the provider's key sent upstream and never shown),
polled, its results mapped back into the gateway's own output and error files (the client's
custom ids, in input order), and each line recorded in the ledger priced at the batch rate
(half the model's price) and tagged with the batch; no line goes through chat completions."""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
from pathlib import Path
from typing import Any

import aiohttp
import openai

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.e2e.fake_openai_batches import REFUSED_KEY, FakeBatchAPI
from tests.schemas import validate_in
from tests.waiting import until

SPEC = "openai-batches.openapi.json"
MASTER = "master-key-native-" + "0123456789" * 3
KEY = "sk-cw-native-batch-" + "abcdefghij" * 4
UPSTREAM_KEY = "prov-native-upstream-key-0123456789"
BUDGETED = "sk-cw-native-budget-" + "abcdefghij" * 4
LINE_NANOS = (10 * 1_000 + 5 * 2_000) // 2  # 10 input at $1/M, 5 output at $2/M, halved


def config(tmp_path: Path, upstream: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: true}}
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            batches: {{poll_interval: 0.1}}
            auth:
              master_key: "{MASTER}"
              keys:
                - {{key: "{KEY}", alias: native}}
                - {{key: "{BUDGETED}", alias: budgeted, budget: {{max_usd: 5}}}}
            providers:
              up: {{type: openai, base_url: "{upstream}/v1", api_key: "{UPSTREAM_KEY}"}}
              denied: {{type: openai, base_url: "{upstream}/v1", api_key: "{REFUSED_KEY}"}}
            models:
              cheap:
                - {{target: up/gpt-batch, batch: native, prices: {{input: 1, output: 2}}}}
              refused: [{{target: denied/gpt-batch, batch: native}}]
            plugins:
              - auth: {{}}
              - cost: {{}}
            """
        )
    )
    return path


def lines(count: int, model: str = "cheap") -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": f"q{n}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": model,
                    "messages": [{"role": "user", "content": "refuse" if n == 3 else f"ask {n}"}],
                },
            }
        ).encode()
        + b"\n"
        for n in range(count)
    )


async def test_a_native_batch_is_submitted_polled_mapped_back_and_priced_at_the_batch_rate(
    tmp_path: Path,
) -> None:
    fake = FakeBatchAPI()
    upstream_runner, upstream = await start_site(fake.app())
    logs = io.StringIO()
    runner, url = await start_site(create_app(config(tmp_path, upstream), log_stream=logs))
    try:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0) as client:
            uploaded = await client.files.create(file=("in.jsonl", lines(8)), purpose="batch")
            created = await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            batch = await finished(client, created.id)
            assert batch.status == "completed", batch.errors
            counts = batch.request_counts
            assert counts is not None
            assert (counts.total, counts.completed, counts.failed) == (8, 7, 1)
            output = await read(client, batch.output_file_id)
            errors = await read(client, batch.error_file_id)
        spend = await spend_of(url, created.id)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()
    assert [line["custom_id"] for line in output] == [f"q{n}" for n in range(8) if n != 3]
    assert [line["response"]["body"]["choices"][0]["message"]["content"] for line in output] == [
        f"batched: ask {n}" for n in range(8) if n != 3
    ]
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [("q3", 400)]
    assert [line["body"]["model"] for line in fake.lines] == ["gpt-batch"] * 8
    assert fake.authorizations == {f"Bearer {UPSTREAM_KEY}"}
    assert fake.chat_calls == 0
    assert fake.polls >= 2
    assert spend["requests"] == 8
    assert spend["cost_usd"] == round(7 * LINE_NANOS / 1e9, 9)
    assert UPSTREAM_KEY not in logs.getvalue()


async def test_a_native_batch_the_provider_refuses_fails_naming_the_refusal_not_the_key(
    tmp_path: Path,
) -> None:
    fake = FakeBatchAPI()
    upstream_runner, upstream = await start_site(fake.app())
    logs = io.StringIO()
    runner, url = await start_site(create_app(config(tmp_path, upstream), log_stream=logs))
    try:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0) as client:
            uploaded = await client.files.create(
                file=("in.jsonl", lines(2, "refused")), purpose="batch"
            )
            created = await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            batch = await finished(client, created.id)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()
    assert batch.status == "failed"
    assert batch.errors is not None
    assert batch.errors.data is not None
    ((error),) = batch.errors.data
    assert error.code == "native_batch_failed"
    assert "401" in (error.message or "")
    assert REFUSED_KEY not in batch.model_dump_json()
    assert REFUSED_KEY not in logs.getvalue()


async def test_a_native_batch_cancelled_by_its_client_is_cancelled_upstream(tmp_path: Path) -> None:
    fake = FakeBatchAPI()
    upstream_runner, upstream = await start_site(fake.app())
    runner, url = await start_site(create_app(config(tmp_path, upstream), log_stream=io.StringIO()))
    try:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0) as client:
            held = lines(3).replace(b"ask", b"hold")
            uploaded = await client.files.create(file=("in.jsonl", held), purpose="batch")
            created = await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            await until_submitted(fake)
            cancelling = await client.batches.cancel(created.id)
            assert cancelling.status == "cancelling"
            batch = await finished(client, created.id)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()
    assert batch.status == "cancelled"
    assert fake.cancelled == list(fake.batches)
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed) == (3, 0)
    assert batch.output_file_id is None


async def until_submitted(fake: FakeBatchAPI) -> None:
    """Wait until the gateway created the upstream batch and polled it once."""
    await until(lambda: fake.polls > 0, seconds=20, what="the upstream batch polled")


async def finished(client: openai.AsyncOpenAI, batch_id: str) -> Any:
    async with asyncio.timeout(30):
        while True:
            batch = await client.batches.retrieve(batch_id)
            validate_in(SPEC, "Batch", batch.model_dump(mode="json", exclude_none=True))
            if batch.status in ("completed", "failed", "cancelled", "expired"):
                return batch
            await asyncio.sleep(0.05)


async def read(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    content = (await client.files.content(file_id)).content
    parsed = [json.loads(line) for line in content.splitlines()]
    for line in parsed:
        validate_in(SPEC, "BatchRequestOutput", line)
    return parsed


async def spend_of(url: str, batch_id: str) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {MASTER}"}
    async with aiohttp.ClientSession() as session, asyncio.timeout(20):
        while True:
            async with session.get(f"{url}/admin/spend?group_by=batch", headers=headers) as got:
                rows = [r for r in (await got.json())["data"] if r["batch_id"] == batch_id]
            if rows and rows[0]["requests"] >= 8:
                return rows[0]
            await asyncio.sleep(0.1)


async def test_a_native_batch_the_provider_ended_expired_ends_expired(tmp_path: Path) -> None:
    fake = FakeBatchAPI()
    upstream_runner, upstream = await start_site(fake.app())
    runner, url = await start_site(create_app(config(tmp_path, upstream), log_stream=io.StringIO()))
    try:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0) as client:
            content = lines(4).replace(b"ask 2", b"expire 2")  # and line 3 is refused
            uploaded = await client.files.create(file=("in.jsonl", content), purpose="batch")
            created = await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            batch = await finished(client, created.id)
            assert batch.status == "expired"
            output = await read(client, batch.output_file_id)
            errors = await read(client, batch.error_file_id)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()
    assert batch.expired_at is not None
    assert [line["custom_id"] for line in output] == ["q0", "q1"]
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [
        ("q2", "batch_expired"),
        ("q3", "refused"),
    ]
    assert batch.usage is not None
    assert batch.usage.total_tokens == 30  # the two lines that ran


async def test_a_batch_of_a_key_with_a_budget_runs_through_the_chain_not_natively(
    tmp_path: Path,
) -> None:
    # A native batch's spend is known only when its results come back: only lines run one by
    # one through the chain keep a budget's bound, so such a key's batches never go native.
    fake = FakeBatchAPI()
    upstream_runner, upstream = await start_site(fake.app())
    runner, url = await start_site(create_app(config(tmp_path, upstream), log_stream=io.StringIO()))
    try:
        async with openai.AsyncOpenAI(
            base_url=f"{url}/v1", api_key=BUDGETED, max_retries=0
        ) as client:
            uploaded = await client.files.create(file=("in.jsonl", lines(2)), purpose="batch")
            created = await client.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            batch = await finished(client, created.id)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()
    assert fake.batches == {}  # nothing submitted to the batch API
    assert fake.chat_calls == 2  # each line went to the online endpoint, through the chain
    assert batch.request_counts is not None
    assert batch.request_counts.failed == 2  # (which the fake refuses)
