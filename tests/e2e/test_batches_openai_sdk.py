"""Files and gateway-executed batches through the official ``openai`` SDK against a real gateway
(the ``auth`` plugin with config keys, the ``cost`` plugin and its ledger, the mock provider):
``files.create/list/retrieve/content/delete``, ``batches.create/retrieve/list/cancel`` for chat
completions, responses and embeddings; every body validated against OpenAI's schema; each line
one ledger record tagged with its batch (``/admin/spend?group_by=batch``); another key sees none
of it; a budget that runs out midway fails the remaining lines with ``budget_exceeded``; an
upload past the bound is a 413, whether or not it says its length, and nothing of it is kept; a
batch's lines start no faster than its rate."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import textwrap
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.schemas import validate_in

SPEC = "openai-batches.openapi.json"
MASTER = "master-key-batches-" + "0123456789" * 3
ALICE = "sk-cw-batch-alice-" + "abcdefghij" * 4
BOB = "sk-cw-batch-bobby-" + "abcdefghij" * 4
THRIFTY = "sk-cw-batch-thrifty-" + "abcdefghij" * 4
MAX_FILE_BYTES = 64 * 1024
THRIFTY_USD = 0.0002  # a few lines of the mock's replies
BUDGET = f"{{max_usd: {THRIFTY_USD}, period: 1d}}"


@dataclass
class Gateway:
    url: str

    def client(self, key: str = ALICE) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def admin(self, path: str) -> Any:
        headers = {"authorization": f"Bearer {MASTER}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, headers=headers) as answer,
        ):
            assert answer.status == 200, await answer.text()
            return await answer.json()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with serving(tmp_path, "") as running:
        yield running


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, more: str) -> AsyncIterator[Gateway]:
    """A gateway with ``more`` added to its ``batches`` section."""
    config = tmp_path / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: false}}
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            batches: {{max_file_bytes: {MAX_FILE_BYTES}, concurrency: 4, poll_interval: 0.2{more}}}
            auth:
              master_key: "{MASTER}"
              keys:
                - {{key: "{ALICE}", alias: alice}}
                - {{key: "{BOB}", alias: bob}}
                - {{key: "{THRIFTY}", alias: thrifty, budget: {BUDGET}}}
            providers:
              mock: {{type: mock, faults: true}}
            plugins:
              - auth: {{}}
              - cost: {{reserve_output_tokens: 10}}
            """
        )
    )
    runner, url = await start_site(create_app(config, log_stream=io.StringIO()))
    try:
        yield Gateway(url)
    finally:
        await runner.cleanup()


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat_lines(count: int, model: str = "mock/echo") -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"line-{n}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": f"say {n}"}]},
        }
        for n in range(count)
    ]


async def upload(client: openai.AsyncOpenAI, lines: list[dict[str, Any]]) -> str:
    created = await client.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch")
    validate_in(SPEC, "OpenAIFile", created.model_dump(mode="json", exclude_none=True))
    return created.id


async def finished(client: openai.AsyncOpenAI, batch_id: str, seconds: float = 60) -> Any:
    """Poll the batch until it ended (validated each time); the batch."""
    async with asyncio.timeout(seconds):
        while True:
            batch = await client.batches.retrieve(batch_id)
            validate_in(SPEC, "Batch", batch.model_dump(mode="json", exclude_none=True))
            if batch.status in ("completed", "failed", "cancelled", "expired"):
                return batch
            await asyncio.sleep(0.05)


async def until_completed(client: openai.AsyncOpenAI, batch_id: str, lines: int) -> None:
    """Poll the batch until at least ``lines`` of its lines completed."""
    async with asyncio.timeout(60):
        while True:
            counts = (await client.batches.retrieve(batch_id)).request_counts
            if counts is not None and counts.completed >= lines:
                return
            await asyncio.sleep(0.05)


async def lines_of(client: openai.AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    content = await client.files.content(file_id)
    parsed = [json.loads(line) for line in content.content.splitlines()]
    for line in parsed:
        validate_in(SPEC, "BatchRequestOutput", line)
    return parsed


async def test_files_are_uploaded_listed_read_and_deleted_by_their_key_only(
    gateway: Gateway,
) -> None:
    body = jsonl(chat_lines(3))
    async with gateway.client() as alice, gateway.client(BOB) as bob:
        first = await upload(alice, chat_lines(3))
        second = await upload(alice, chat_lines(1))
        got = await alice.files.retrieve(first)
        assert (got.bytes, got.filename, got.purpose) == (len(body), "input.jsonl", "batch")
        listed = await alice.files.list()
        validate_in(SPEC, "ListFilesResponse", listed.model_dump(mode="json", exclude_none=True))
        assert [f.id for f in listed.data] == [second, first]  # newest first
        assert [f.id for f in (await alice.files.list(order="asc", limit=1)).data] == [first]
        assert (await alice.files.content(first)).content == body
        assert [f.id for f in (await bob.files.list()).data] == []
        with pytest.raises(openai.NotFoundError):
            await bob.files.retrieve(first)
        with pytest.raises(openai.NotFoundError):
            await bob.files.content(first)
        with pytest.raises(openai.NotFoundError):
            await bob.files.delete(first)
        deleted = await alice.files.delete(first)
        validate_in(SPEC, "DeleteFileResponse", deleted.model_dump(mode="json"))
        assert deleted.deleted
        assert deleted.id == first
        with pytest.raises(openai.NotFoundError):
            await alice.files.retrieve(first)
        with pytest.raises(openai.BadRequestError) as refused:
            await alice.files.create(file=("x.jsonl", body), purpose="fine-tune")
        assert refused.value.body["param"] == "purpose"


async def test_an_upload_past_the_bound_is_a_413_and_nothing_is_kept(gateway: Gateway) -> None:
    big = b'{"custom_id": "x"}\n' * (2 * MAX_FILE_BYTES // 19)
    async with gateway.client() as alice:
        with pytest.raises(openai.APIStatusError) as refused:
            await alice.files.create(file=("big.jsonl", big), purpose="batch")
        assert refused.value.status_code == 413
        assert refused.value.body["code"] == "request_too_large"

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the bound stops it
            yield (
                b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
                b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
                b"Content-Type: application/jsonl\r\n\r\n"
            )
            for _ in range(64):
                yield big[: MAX_FILE_BYTES // 8]
            yield b"\r\n--b--\r\n"

        headers = {
            "authorization": f"Bearer {ALICE}",
            "content-type": "multipart/form-data; boundary=b",
        }
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{gateway.url}/v1/files", data=chunked(), headers=headers) as answer,
        ):
            assert answer.status == 413
            assert (await answer.json())["error"]["code"] == "request_too_large"
        assert (await alice.files.list()).data == []


async def test_a_chat_batch_runs_every_line_through_the_chain_into_the_ledger(
    gateway: Gateway,
) -> None:
    lines = chat_lines(12)
    lines[5]["body"]["model"] = "mock/error-400"  # a line the upstream refuses
    async with gateway.client() as alice, gateway.client(BOB) as bob:
        input_id = await upload(alice, lines)
        created = await alice.batches.create(
            input_file_id=input_id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"job": "nightly"},
        )
        validate_in(SPEC, "Batch", created.model_dump(mode="json", exclude_none=True))
        assert created.status == "validating"
        with pytest.raises(openai.NotFoundError):
            await bob.batches.retrieve(created.id)
        batch = await finished(alice, created.id)
        assert batch.status == "completed"
        assert batch.metadata == {"job": "nightly"}
        counts = batch.request_counts
        assert counts is not None
        assert (counts.total, counts.completed, counts.failed) == (12, 11, 1)
        output = await lines_of(alice, batch.output_file_id)
        assert [line["custom_id"] for line in output] == [f"line-{n}" for n in range(12) if n != 5]
        for line in output:
            assert line["response"]["status_code"] == 200
            assert line["error"] is None
            assert line["response"]["body"]["object"] == "chat.completion"
            number = line["custom_id"].removeprefix("line-")
            assert line["response"]["body"]["choices"][0]["message"]["content"] == f"say {number}"
        (failed,) = await lines_of(alice, batch.error_file_id)
        assert failed["custom_id"] == "line-5"
        assert failed["response"]["status_code"] == 400
        assert failed["response"]["body"]["error"]["code"] == failed["error"]["code"]
        listed = await alice.batches.list()
        validate_in(SPEC, "ListBatchesResponse", listed.model_dump(mode="json", exclude_none=True))
        assert [b.id for b in listed.data] == [created.id]
        assert (await bob.batches.list()).data == []
    spend = await ledger_of(gateway, created.id)
    assert spend["requests"] == 12
    assert spend["cost_usd"] > 0


async def ledger_of(gateway: Gateway, batch_id: str) -> dict[str, Any]:
    """The batch's row of ``/admin/spend?group_by=batch``, once the ledger wrote every line."""
    async with asyncio.timeout(20):
        while True:
            rows = (await gateway.admin("/admin/spend?group_by=batch"))["data"]
            mine = [row for row in rows if row["batch_id"] == batch_id]
            if mine:
                return mine[0]
            await asyncio.sleep(0.1)


async def test_responses_and_embeddings_batches_answer_in_their_endpoints_shapes(
    gateway: Gateway,
) -> None:
    async with gateway.client() as alice:
        responses = [
            {
                "custom_id": f"r{n}",
                "method": "POST",
                "url": "/v1/responses",
                "body": {"model": "mock/echo", "input": f"hello {n}"},
            }
            for n in range(3)
        ]
        embeddings = [
            {
                "custom_id": f"e{n}",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": "mock/vectors", "input": f"text {n}"},
            }
            for n in range(3)
        ]
        for endpoint, lines, kind in (
            ("/v1/responses", responses, "response"),
            ("/v1/embeddings", embeddings, "list"),
        ):
            created = await alice.batches.create(
                input_file_id=await upload(alice, lines),
                endpoint=endpoint,  # type: ignore[arg-type]
                completion_window="24h",
            )
            batch = await finished(alice, created.id)
            assert batch.status == "completed", batch
            output = await lines_of(alice, batch.output_file_id)
            assert [line["response"]["body"]["object"] for line in output] == [kind] * 3


async def test_a_budget_that_runs_out_midway_fails_the_rest_with_budget_exceeded(
    gateway: Gateway,
) -> None:
    async with gateway.client(THRIFTY) as thrifty:
        created = await thrifty.batches.create(
            input_file_id=await upload(thrifty, chat_lines(60)),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        batch = await finished(thrifty, created.id)
        assert batch.status == "completed"
        output = await lines_of(thrifty, batch.output_file_id)
        errors = await lines_of(thrifty, batch.error_file_id)
        assert output
        assert errors
        assert len(output) + len(errors) == 60
        assert {line["error"]["code"] for line in errors} == {"budget_exceeded"}
        assert {line["response"]["status_code"] for line in errors} == {429}
        done = max(int(line["custom_id"].removeprefix("line-")) for line in output)
        refused = min(int(line["custom_id"].removeprefix("line-")) for line in errors)
        assert refused <= done + 4  # at most the lines in flight ran past the first refusal
    spend = await ledger_of(gateway, created.id)
    assert spend["requests"] == 60
    assert spend["cost_usd"] <= THRIFTY_USD


async def test_bad_batches_are_refused_or_failed_as_openai_does(gateway: Gateway) -> None:
    async with gateway.client() as alice, gateway.client(BOB) as bob:
        good = await upload(alice, chat_lines(2))
        with pytest.raises(openai.BadRequestError) as refused:
            await alice.batches.create(
                input_file_id=good,
                endpoint="/v1/completions",
                completion_window="24h",
            )
        assert refused.value.body["param"] == "endpoint"
        with pytest.raises(openai.NotFoundError):
            await bob.batches.create(
                input_file_id=good, endpoint="/v1/chat/completions", completion_window="24h"
            )
        mixed = chat_lines(3)
        mixed[1]["url"] = "/v1/embeddings"
        mixed[2]["custom_id"] = "line-0"
        created = await alice.batches.create(
            input_file_id=await upload(alice, mixed),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        validate_in(SPEC, "Batch", created.model_dump(mode="json", exclude_none=True))
        assert created.status == "failed"
        assert created.errors is not None
        assert created.errors.data is not None
        assert [(e.code, e.line) for e in created.errors.data] == [
            ("mismatched_url", 2),
            ("duplicate_custom_id", 3),
        ]


async def test_a_cancelled_batch_ends_cancelled_with_the_lines_that_ran(gateway: Gateway) -> None:
    async with gateway.client() as alice:
        created = await alice.batches.create(
            input_file_id=await upload(alice, chat_lines(400, "mock/slow-50")),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        await until_completed(alice, created.id, 4)
        cancelling = await alice.batches.cancel(created.id)
        validate_in(SPEC, "Batch", cancelling.model_dump(mode="json", exclude_none=True))
        assert cancelling.status == "cancelling"
        batch = await finished(alice, created.id)
        assert batch.status == "cancelled"
        assert batch.cancelled_at is not None
        counts = batch.request_counts
        assert counts is not None
        assert 4 <= counts.completed < 400
        assert len(await lines_of(alice, batch.output_file_id)) == counts.completed
        again = await alice.batches.cancel(created.id)  # an ended batch is answered as it is
        assert again.status == "cancelled"


async def test_a_batch_starts_its_lines_no_faster_than_its_rate(tmp_path: Path) -> None:
    async with serving(tmp_path, ", rate: 10") as gateway, gateway.client() as alice:
        started = time.monotonic()
        created = await alice.batches.create(
            input_file_id=await upload(alice, chat_lines(9)),
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
        batch = await finished(alice, created.id)
        took = time.monotonic() - started
    assert batch.status == "completed"
    assert batch.request_counts is not None
    assert batch.request_counts.completed == 9
    assert took >= 8 / 10  # nine lines at 10 a second: the last starts 0.8 s after the first
