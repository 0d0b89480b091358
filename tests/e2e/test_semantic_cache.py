"""The semantic cache end to end, with the openai SDK against the mock provider (whose answer
quotes the question it was asked, so a reply shows which question it answers, and whose
embeddings score paraphrases high and unrelated questions low): paraphrases hit, unrelated
questions miss, hits never cross teams or models, an embedding that fails or hangs is an exact
miss, a semantic hit streams, costs the embedding only, and two instances over one Redis share
their entries."""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from proxy.runtime.config import ConfigError
from proxy.server.app import create_app
from tests.e2e.conftest import start_site

MASTER = "master-key-" + "0123456789abcdef" * 2
ALPHA = "sk-cw-alpha-team-" + "abcdefghij" * 4
ALPHA_TOO = "sk-cw-alpha-also-" + "abcdefghij" * 4
BETA = "sk-cw-beta-team-" + "klmnopqrst" * 4
QUESTION = "What is the capital of France?"
PARAPHRASE = "what is the capital city of France"
UNRELATED = "How do I reset my password?"


def config_text(
    tmp_path: Path, *, embedding: str = "embed", semantic: str = "", state: str = ""
) -> str:
    return textwrap.dedent(
        f"""
        server: {{access_log: true}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        {state}
        auth:
          master_key: "{MASTER}"
          teams: {{alpha: {{}}, beta: {{}}}}
          keys:
            - {{key: "{ALPHA}", alias: alpha-1, team: alpha}}
            - {{key: "{ALPHA_TOO}", alias: alpha-2, team: alpha}}
            - {{key: "{BETA}", alias: beta-1, team: beta}}
        providers:
          mock: {{type: mock, faults: true}}
        models:
          chat: [{{target: mock/chat-model, prices: {{input: 1000, output: 2000}}}}]
          other: [{{target: mock/other-model}}]
          embed: [{{target: mock/embed-small, prices: {{input: 100000, output: 0}}}}]
          embed-broken: [{{target: mock/error-500}}]
          embed-hangs: [{{target: mock/hang}}]
        plugins:
          - auth: {{}}
          - cache:
              backend: {"store" if state else "memory"}
              semantic: {{embedding_model: {embedding}, threshold: 0.6, timeout: 0.3{semantic}}}
          - cost: {{}}
        """
    )


class Gateway:
    def __init__(self, url: str, logs: io.StringIO) -> None:
        self.url = url
        self.logs = logs

    def client(self, key: str = ALPHA) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def ask(self, question: str, key: str = ALPHA, model: str = "chat") -> Any:
        return await self.client(key).chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": question}]
        )

    async def cached(self, question: str, key: str = ALPHA, model: str = "chat") -> None:
        """Wait until ``question``'s answer is stored (its exact repeat hits): its entry and
        vector are written off the request's path."""
        deadline = asyncio.get_running_loop().time() + 10
        while (await self.ask(question, key, model)).headers["x-crossway-cache"] != "hit":
            assert asyncio.get_running_loop().time() < deadline, "the answer was never stored"
            await asyncio.sleep(0.02)

    async def get(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, headers=headers) as response,
        ):
            return json.loads(await response.read())

    async def metric(self, line_start: str) -> float:
        async with aiohttp.ClientSession() as session, session.get(self.url + "/metrics") as r:
            for line in (await r.text()).splitlines():
                if line.startswith(line_start):
                    return float(line.rsplit(" ", 1)[1])
        return 0.0


async def running(tmp_path: Path, name: str = "gateway", **options: str) -> tuple[Any, Gateway]:
    config = tmp_path / f"{name}.yaml"
    config.write_text(config_text(tmp_path, **options))
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    return runner, Gateway(url, logs)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    runner, gateway = await running(tmp_path)
    yield gateway
    await runner.cleanup()


def text_of(raw: Any) -> str:
    return raw.parse().choices[0].message.content


async def test_a_paraphrase_hits_and_an_unrelated_question_misses(gateway: Gateway) -> None:
    first = await gateway.ask(QUESTION)
    assert first.headers["x-crossway-cache"] == "miss"
    await gateway.cached(QUESTION)
    paraphrased = await gateway.ask(PARAPHRASE)
    assert paraphrased.headers["x-crossway-cache"] == "semantic"
    assert 0.6 <= float(paraphrased.headers["x-crossway-cache-similarity"]) < 1.0
    assert "age" in paraphrased.headers
    assert text_of(paraphrased) == text_of(first)  # the answer to the first question
    assert QUESTION in text_of(paraphrased)
    unrelated = await gateway.ask(UNRELATED)
    assert unrelated.headers["x-crossway-cache"] == "miss"
    assert UNRELATED in text_of(unrelated)
    assert await gateway.metric('crossway_cache_requests_total{result="semantic"}') == 1


async def test_a_semantic_hit_never_crosses_teams(gateway: Gateway) -> None:
    await gateway.ask(QUESTION, key=ALPHA)
    await gateway.cached(QUESTION, key=ALPHA)
    other_team = await gateway.ask(PARAPHRASE, key=BETA)
    assert other_team.headers["x-crossway-cache"] == "miss"
    assert PARAPHRASE in text_of(other_team)
    same_team = await gateway.ask(PARAPHRASE, key=ALPHA_TOO)
    assert same_team.headers["x-crossway-cache"] == "semantic"


async def test_a_semantic_hit_never_crosses_models(gateway: Gateway) -> None:
    await gateway.ask(QUESTION, model="chat")
    await gateway.cached(QUESTION, model="chat")
    elsewhere = await gateway.ask(PARAPHRASE, model="other")
    assert elsewhere.headers["x-crossway-cache"] == "miss"
    assert elsewhere.headers["x-crossway-model"] == "mock/other-model"


async def test_a_different_system_prompt_is_another_scope(gateway: Gateway) -> None:
    await gateway.ask(QUESTION)
    await gateway.cached(QUESTION)
    raw = await gateway.client().chat.completions.with_raw_response.create(
        model="chat",
        messages=[
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": PARAPHRASE},
        ],
    )
    assert raw.headers["x-crossway-cache"] == "miss"


async def test_a_streamed_paraphrase_replays_the_answer(gateway: Gateway) -> None:
    answer = text_of(await gateway.ask(QUESTION))
    await gateway.cached(QUESTION)
    async with gateway.client().chat.completions.with_streaming_response.create(
        model="chat",
        messages=[{"role": "user", "content": PARAPHRASE}],
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        assert response.headers["x-crossway-cache"] == "semantic"
        chunks = await response.parse()
        pieces = [chunk.choices[0].delta.content or "" async for chunk in chunks if chunk.choices]
    assert "".join(pieces) == answer


async def test_a_semantic_hit_costs_the_embedding_only(gateway: Gateway) -> None:
    await gateway.ask(QUESTION)
    await gateway.cached(QUESTION)
    hit = await gateway.ask(PARAPHRASE)
    assert hit.headers["x-crossway-cache"] == "semantic"
    request_id = hit.headers["x-request-id"]
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        logs = await gateway.get("/admin/spend/logs?limit=100")
        record = next((r for r in logs["data"] if r["request_id"] == request_id), None)
        if record is not None or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert record is not None, logs
    assert record["cache"] == "hit"
    # The paraphrase is 7 mock tokens (one per word): 7 x $0.1 at $100,000 per million.
    assert record["cost_usd"] == pytest.approx(0.7)
    first = next(r for r in logs["data"] if r["cache"] == "miss")
    # The first question's record carries its answer and its own embedding (5 words).
    assert first["cost_usd"] > 0.5


async def test_an_embedding_model_nothing_routes_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"semantic\.embedding_model"):
        await running(tmp_path, embedding="no-such-model")


@pytest.mark.parametrize("embedding", ["embed-broken", "embed-hangs"])
async def test_an_embedding_that_fails_is_an_exact_only_miss(
    tmp_path: Path, embedding: str
) -> None:
    runner, gateway = await running(tmp_path, embedding=embedding)
    try:
        first = await gateway.ask(QUESTION)
        assert first.headers["x-crossway-cache"] == "miss"
        assert QUESTION in text_of(first)
        await gateway.cached(QUESTION)  # the exact cache still works
        paraphrased = await gateway.ask(PARAPHRASE)
        assert paraphrased.headers["x-crossway-cache"] == "miss"
        assert PARAPHRASE in text_of(paraphrased)
        assert await gateway.metric('crossway_cache_errors_total{reason="embedding"}') >= 2
    finally:
        await runner.cleanup()


async def test_only_text_questions_are_embedded(gateway: Gateway) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    for _ in range(2):
        raw = await gateway.client().chat.completions.with_raw_response.create(
            model="chat",
            messages=[{"role": "user", "content": [{"type": "text", "text": QUESTION}, image]}],
        )
    assert raw.headers["x-crossway-cache"] in {"miss", "hit"}
    assert await gateway.metric('crossway_cache_errors_total{reason="embedding"}') == 0
    assert await gateway.metric('crossway_cache_requests_total{result="semantic"}') == 0


async def test_two_instances_over_one_redis_share_semantic_entries(
    tmp_path: Path, redis_url: str
) -> None:
    state = f'state: {{backend: redis, redis: {{url: "{redis_url}"}}}}'
    first_runner, first = await running(tmp_path, "first", state=state)
    second_runner, second = await running(tmp_path, "second", state=state)
    try:
        answer = text_of(await first.ask(QUESTION))
        await first.cached(QUESTION)
        # The second instance never saw the question: it learns of the entry at its lookup.
        hit = await second.ask(PARAPHRASE)
        assert hit.headers["x-crossway-cache"] == "semantic"
        assert text_of(hit) == answer
        other_team = await second.ask(PARAPHRASE, key=BETA)
        assert other_team.headers["x-crossway-cache"] == "miss"
    finally:
        await first_runner.cleanup()
        await second_runner.cleanup()
