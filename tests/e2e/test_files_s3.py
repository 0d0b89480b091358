"""Files in an S3-compatible object store (``batches.storage: s3``) through the official
``openai`` SDK and a real gateway, against moto's S3 server on 127.0.0.1: an upload becomes one
object under the prefix (a small one in one put, a large one as a multipart upload) and is read
back whole; a delete removes the object; an upload past the bound is a 413 that leaves neither
an object nor an unfinished multipart upload; a batch reads its input from the store and writes
its output there; a store that cannot be reached is a 503 in OpenAI's shape that names neither
the store's credentials nor anything but the operation."""

from __future__ import annotations

import io
import json
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import boto3
import openai
import pytest
from moto.server import ThreadedMotoServer

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.e2e.processes import free_port
from tests.e2e.test_batches_openai_sdk import chat_lines, finished, jsonl

MASTER = "master-key-s3-files-" + "0123456789" * 3
KEY = "sk-cw-s3-files-" + "abcdefghij" * 4
BUCKET = "crossway-files"
PREFIX = "tenant-a/files/"
ACCESS_KEY = "AKIACROSSWAYTEST0001"
SECRET_KEY = "s3-secret-key-never-shown-0123456789"
MAX_FILE_BYTES = 12 * 1024 * 1024


class Gateway(NamedTuple):
    url: str
    logs: io.StringIO


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_endpoint: str) -> Iterator[Any]:
    """A fresh bucket: the boto3 client the test reads the store with."""
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    s3.create_bucket(Bucket=BUCKET)
    try:
        yield s3
    finally:
        for listed in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []):
            s3.delete_object(Bucket=BUCKET, Key=listed["Key"])
        s3.delete_bucket(Bucket=BUCKET)


async def serve(tmp_path: Path, endpoint: str) -> tuple[Any, Gateway]:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            server: {{access_log: true}}
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            batches:
              max_file_bytes: {MAX_FILE_BYTES}
              poll_interval: 0.2
              storage: s3
              s3:
                bucket: {BUCKET}
                prefix: {PREFIX}
                endpoint_url: "{endpoint}"
                region: us-east-1
                access_key_id: {ACCESS_KEY}
                secret_access_key: {SECRET_KEY}
            auth:
              master_key: "{MASTER}"
              keys: [{{key: "{KEY}", alias: s3}}]
            providers:
              mock: {{type: mock}}
            plugins:
              - auth: {{}}
            """
        )
    )
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    return runner, Gateway(url, logs)


@pytest.fixture
async def gateway(tmp_path: Path, s3_endpoint: str, bucket: Any) -> AsyncIterator[Gateway]:
    runner, served = await serve(tmp_path, s3_endpoint)
    try:
        yield served
    finally:
        await runner.cleanup()
    assert SECRET_KEY not in served.logs.getvalue()


def sdk(gateway: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)


def objects(bucket: Any) -> dict[str, bytes]:
    listed = bucket.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return {
        item["Key"]: bucket.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
        for item in listed
    }


async def test_files_are_objects_under_the_prefix_and_leave_the_store_when_deleted(
    gateway: Gateway, bucket: Any
) -> None:
    small = jsonl(chat_lines(3))
    large = bytes(range(256)) * (9 * 1024 * 1024 // 256 + 7)  # past one part: a multipart upload
    async with sdk(gateway) as client:
        first = await client.files.create(file=("small.jsonl", small), purpose="batch")
        second = await client.files.create(file=("large.jsonl", large), purpose="batch")
        assert (first.bytes, second.bytes) == (len(small), len(large))
        stored = objects(bucket)
        assert stored == {PREFIX + first.id: small, PREFIX + second.id: large}
        assert (await client.files.content(second.id)).content == large
        await client.files.delete(second.id)
        assert set(objects(bucket)) == {PREFIX + first.id}
        with pytest.raises(openai.NotFoundError):
            await client.files.content(second.id)


async def test_an_upload_past_the_bound_is_a_413_that_keeps_nothing(
    gateway: Gateway, bucket: Any
) -> None:
    too_large = b"x" * (MAX_FILE_BYTES + 1)
    async with sdk(gateway) as client:
        with pytest.raises(openai.APIStatusError) as refused:
            await client.files.create(file=("big.jsonl", too_large), purpose="batch")
        assert refused.value.status_code == 413
        assert (await client.files.list()).data == []
    assert objects(bucket) == {}
    assert bucket.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


async def test_a_batch_reads_its_input_from_the_store_and_writes_its_output_there(
    gateway: Gateway, bucket: Any
) -> None:
    async with sdk(gateway) as client:
        uploaded = await client.files.create(
            file=("in.jsonl", jsonl(chat_lines(4))), purpose="batch"
        )
        created = await client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        batch = await finished(client, created.id)
        assert batch.status == "completed"
        output = (await client.files.content(batch.output_file_id or "")).content
    stored = objects(bucket)
    assert stored[PREFIX + (batch.output_file_id or "")] == output
    assert [json.loads(line)["custom_id"] for line in output.splitlines()] == [
        f"line-{n}" for n in range(4)
    ]


async def test_a_store_that_cannot_be_reached_is_a_503_naming_the_operation(
    tmp_path: Path,
) -> None:
    runner, served = await serve(tmp_path, f"http://127.0.0.1:{free_port()}")
    try:
        async with sdk(served) as client:
            with pytest.raises(openai.APIStatusError) as failed:
                await client.files.create(file=("in.jsonl", b"{}\n"), purpose="batch")
    finally:
        await runner.cleanup()
    assert failed.value.status_code == 503
    body = failed.value.response.text
    assert json.loads(body)["error"]["code"] == "file_store_unavailable"
    assert "write" in json.loads(body)["error"]["message"]
    for secret in (SECRET_KEY, ACCESS_KEY):
        assert secret not in body
        assert secret not in served.logs.getvalue()
