"""A gateway-executed batch of 1,000 lines survives a restart halfway: a real ``crossway serve``
(SQLite database, the ``auth`` and ``cost`` plugins) runs the lines against a real upstream on
127.0.0.1 that answers each after a few milliseconds and counts them; the test stops the gateway
(SIGTERM) while lines are in flight, starts it again on the same database, and the batch
completes there. The upstream saw every line exactly once (no line run twice, none lost), never
more than ``batches.concurrency`` at a time and that many at its peak, the output file holds one
line per input line, and the ledger one record per line tagged with the batch."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import openai
from aiohttp import web

from tests.e2e.conftest import start_site
from tests.e2e.processes import free_port, serve

MASTER = "master-key-batch-restart-" + "0123456789" * 3
KEY = "sk-cw-batch-restart-" + "abcdefghij" * 4
LINES = 1000
CONCURRENCY = 25
HELD_AFTER = 400  # the upstream holds the lines after this many until the gateway is stopping
REPLY_SECONDS = 0.004


class CountingUpstream:
    """An OpenAI-compatible upstream that counts each line it answers (by its prompt) and its
    requests in flight; past ``HELD_AFTER`` requests it holds them until ``gate`` is set."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.flying = 0
        self.peak = 0
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        self.seen[prompt] += 1
        self.flying += 1
        self.peak = max(self.peak, self.flying)
        try:
            if sum(self.seen.values()) > HELD_AFTER and not self.gate.is_set():
                self.held.set()
                await self.gate.wait()
            await asyncio.sleep(REPLY_SECONDS)
        finally:
            self.flying -= 1
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"done: {prompt}"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
        )


def config(port: int, upstream: str, database: Path) -> str:
    return textwrap.dedent(
        f"""
        server: {{host: 127.0.0.1, port: {port}, access_log: false}}
        database: {{url: "sqlite:///{database}"}}
        batches: {{concurrency: {CONCURRENCY}, poll_interval: 0.5}}
        auth:
          master_key: "{MASTER}"
          keys: [{{key: "{KEY}", alias: batcher}}]
        providers:
          up: {{type: openai, base_url: "{upstream}/v1", api_key: "upstream-key"}}
        models:
          chat: [{{target: up/gpt-test, prices: {{input: 1, output: 2}}}}]
        plugins:
          - auth: {{}}
          - cost: {{}}
        """
    )


def input_file() -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": f"line-{n}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "chat", "messages": [{"role": "user", "content": f"n{n}"}]},
            }
        ).encode()
        + b"\n"
        for n in range(LINES)
    )


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)


async def test_a_batch_stopped_halfway_resumes_after_a_restart_running_each_line_once(
    tmp_path: Path,
) -> None:
    upstream = CountingUpstream()
    runner, upstream_url = await start_site(upstream.app())
    port = free_port()
    path = tmp_path / "gateway.yaml"
    path.write_text(config(port, upstream_url, tmp_path / "crossway.db"))
    try:
        with contextlib.ExitStack() as first_stack:
            first = await asyncio.to_thread(
                first_stack.enter_context, serve(path, port, 1, tmp_path / "first.log")
            )
            async with client(first.url) as gateway:
                uploaded = await gateway.files.create(
                    file=("lines.jsonl", input_file()), purpose="batch"
                )
                batch = await gateway.batches.create(
                    input_file_id=uploaded.id,
                    endpoint="/v1/chat/completions",
                    completion_window="24h",
                )
            async with asyncio.timeout(120):
                await upstream.held.wait()  # lines in flight, held at the upstream
                first.process.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.5)  # the gateway is stopping: no new line starts
                upstream.gate.set()  # the lines in flight end, and their results are stored
                assert await asyncio.to_thread(first.process.wait, 60) == 0
        ran_before_restart = sum(upstream.seen.values())
        assert HELD_AFTER < ran_before_restart < LINES
        with serve(path, port, 1, tmp_path / "second.log") as second:
            async with client(second.url) as gateway:
                done = await completed(gateway, batch.id)
                counts = done.request_counts
                assert counts is not None
                assert (counts.total, counts.completed, counts.failed) == (LINES, LINES, 0)
                assert done.output_file_id is not None
                assert done.error_file_id is None
                content = (await gateway.files.content(done.output_file_id)).content
            output = [json.loads(line) for line in content.splitlines()]
            spend = await spend_of(second.url, batch.id)
    finally:
        await runner.cleanup()
    assert [line["custom_id"] for line in output] == [f"line-{n}" for n in range(LINES)]
    assert all(
        line["response"]["body"]["choices"][0]["message"]["content"] == f"done: n{n}"
        for n, line in enumerate(output)
    )
    assert set(upstream.seen) == {f"n{n}" for n in range(LINES)}  # none lost
    assert set(upstream.seen.values()) == {1}  # none run twice
    assert CONCURRENCY // 2 <= upstream.peak <= CONCURRENCY
    assert spend["requests"] == LINES


async def completed(gateway: openai.AsyncOpenAI, batch_id: str) -> Any:
    """Poll the batch until it completed; the batch."""
    async with asyncio.timeout(120):
        while True:
            batch = await gateway.batches.retrieve(batch_id)
            if batch.status == "completed":
                return batch
            await asyncio.sleep(0.1)


async def spend_of(url: str, batch_id: str) -> dict[str, Any]:
    """The batch's row of ``/admin/spend?group_by=batch`` once the ledger holds every line."""
    headers = {"authorization": f"Bearer {MASTER}"}
    async with aiohttp.ClientSession() as session, asyncio.timeout(30):
        while True:
            async with session.get(f"{url}/admin/spend?group_by=batch", headers=headers) as got:
                rows = [r for r in (await got.json())["data"] if r["batch_id"] == batch_id]
            if rows and rows[0]["requests"] >= LINES:
                return rows[0]
            await asyncio.sleep(0.1)
