"""``/v1/embeddings`` end to end: the openai SDK and LangChain's ``OpenAIEmbeddings`` against
the mock, an OpenAI-compatible, an Azure, a Gemini and a Bedrock fake upstream on 127.0.0.1,
with the chain around it (auth's allow-list, limits, cost, retry, fallback, the ledger)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import struct
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from langchain_openai import OpenAIEmbeddings

from proxy.providers.mock.vectors import text_vector, token_vector
from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_embeddings import FakeEmbeddings, vector_for
from tests.schemas import validate

MASTER = "master-key-" + "0123456789abcdef" * 2
ALLOWED = "sk-cw-embedder-" + "abcdefghij" * 4
CHAT_ONLY = "sk-cw-chatonly-" + "klmnopqrst" * 4
METERED = "sk-cw-metered-" + "uvwxyzabcd" * 4


def config_text(tmp_path: Path, upstream: str) -> str:
    return textwrap.dedent(
        f"""
        server: {{access_log: true}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          teams: {{search: {{}}}}
          keys:
            - {{key: "{ALLOWED}", alias: rag, team: search}}
            - {{key: "{CHAT_ONLY}", alias: chat-only, models: [chat]}}
            - {{key: "{METERED}", alias: metered, tpm: 45}}
        providers:
          mock: {{type: mock, faults: true}}
          up: {{type: openai, base_url: "{upstream}/v1", api_key: "{UPSTREAM_KEY}"}}
          az:
            type: azure
            endpoint: "{upstream}"
            api_key: "{UPSTREAM_KEY}"
            deployments: {{text-embedding-3-small: emb-deploy}}
          gem: {{type: gemini, base_url: "{upstream}/v1beta", api_key: "{UPSTREAM_KEY}"}}
          aws:
            type: bedrock
            region: us-east-1
            access_key_id: AKIDEXAMPLE
            secret_access_key: "{UPSTREAM_KEY}"
            endpoint_url: "{upstream}"
          claude: {{type: anthropic, api_key: "{UPSTREAM_KEY}"}}
        models:
          embed: [{{target: mock/embed-small}}]
          chat: [{{target: mock/echo}}]
          openai-embed: [{{target: up/text-embedding-3-small}}]
          b64-embed: [{{target: up/b64-model}}]
          azure-embed: [{{target: az/text-embedding-3-small}}]
          gemini-embed: [{{target: gem/gemini-embedding-001}}]
          titan: [{{target: aws/amazon.titan-embed-text-v2:0}}]
          cohere: [{{target: aws/cohere.embed-english-v3}}]
          claude-embed: [{{target: claude/claude-sonnet-4}}]
          flaky-embed: [{{target: up/fail-500}}]
        plugins:
          - auth: {{}}
          - limits: {{}}
          - masking: {{entities: {{email: mask, credit_card: block}}}}
          - cost: {{}}
          - fallback: {{chains: {{flaky-embed: [openai-embed]}}}}
          - retry: {{retries: 1, backoff_base: 0}}
        """
    )


class Gateway:
    def __init__(self, url: str, upstream: FakeEmbeddings, logs: io.StringIO) -> None:
        self.url = url
        self.upstream = upstream
        self.logs = logs

    def client(self, key: str = ALLOWED) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def post(self, body: Any, key: str = ALLOWED, path: str = "/v1/embeddings") -> Any:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url + path, json=body, headers=headers) as response,
        ):
            return response.status, dict(response.headers), json.loads(await response.read())

    async def get(self, path: str, key: str = MASTER) -> Any:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, headers=headers) as response,
        ):
            return response.status, json.loads(await response.read())


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    fake = FakeEmbeddings()
    upstream_runner, upstream_url = await start_site(fake.app())
    config = tmp_path / "gateway.yaml"
    config.write_text(config_text(tmp_path, upstream_url))
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    yield Gateway(url, fake, logs)
    await runner.cleanup()
    await upstream_runner.cleanup()
    assert UPSTREAM_KEY not in logs.getvalue()


def close(a: list[float], b: list[float]) -> bool:
    if len(a) != len(b):
        return False
    return all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(a, b, strict=True))


def from_base64(data: str) -> list[float]:
    raw = base64.b64decode(data)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


# -- the mock, with the openai SDK -----------------------------------------------------------


async def test_a_single_text_with_the_sdk_defaults(gateway: Gateway) -> None:
    # The SDK asks for base64 unless told otherwise, and decodes it.
    answer = await gateway.client().embeddings.create(model="embed", input="the capital of France")
    assert len(answer.data) == 1
    assert close(answer.data[0].embedding, text_vector("the capital of France"))
    assert answer.usage.prompt_tokens == 4
    assert answer.model == "embed-small"


async def test_a_batch_as_floats_validates_against_the_schema(gateway: Gateway) -> None:
    texts = ["first text", "second text here", "third"]
    status, headers, body = await gateway.post(
        {"model": "embed", "input": texts, "encoding_format": "float"}
    )
    assert status == 200, body
    validate("CreateEmbeddingResponse", body)
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    for item, text in zip(body["data"], texts, strict=True):
        assert close(item["embedding"], text_vector(text))
    assert body["usage"] == {"prompt_tokens": 6, "total_tokens": 6}
    assert headers["x-crossway-provider"] == "mock"


async def test_base64_is_little_endian_float32_and_validates_once_decoded(
    gateway: Gateway,
) -> None:
    status, _, body = await gateway.post(
        {"model": "embed", "input": ["paris", "rome"], "encoding_format": "base64"}
    )
    assert status == 200
    for item, text in zip(body["data"], ["paris", "rome"], strict=True):
        assert isinstance(item["embedding"], str)
        item["embedding"] = from_base64(item["embedding"])
        assert close(item["embedding"], text_vector(text))
    validate("CreateEmbeddingResponse", body)


async def test_dimensions_shorten_the_vectors(gateway: Gateway) -> None:
    answer = await gateway.client().embeddings.create(
        model="embed", input=["a longer text to embed"], dimensions=64
    )
    vector = answer.data[0].embedding
    assert len(vector) == 64
    assert math.isclose(sum(x * x for x in vector), 1.0, rel_tol=1e-5)


async def test_token_inputs_one_list_and_several(gateway: Gateway) -> None:
    status, _, body = await gateway.post({"model": "embed", "input": [1, 2, 3]})
    assert status == 200
    assert close(body["data"][0]["embedding"], token_vector([1, 2, 3]))
    status, _, body = await gateway.post({"model": "embed", "input": [[1, 2], [3]]})
    assert status == 200
    assert [len(item["embedding"]) for item in body["data"]] == [256, 256]
    assert body["usage"]["prompt_tokens"] == 3


async def test_the_route_without_v1_serves_too(gateway: Gateway) -> None:
    status, _, body = await gateway.post({"model": "embed", "input": "x y"}, path="/embeddings")
    assert status == 200
    validate("CreateEmbeddingResponse", body)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "embed", "input": []}, "input"),
        ({"model": "embed", "input": ""}, "input"),
        ({"model": "embed", "input": ["ok", ""]}, "input"),
        ({"model": "embed", "input": ["text", 3]}, "input"),
        ({"model": "embed", "input": [[1], []]}, "input"),
        ({"model": "embed", "input": ["x"] * 2049}, "input"),
        ({"model": "embed", "input": {"text": "x"}}, "input"),
        ({"model": "embed"}, "input"),
        ({"input": "x"}, "model"),
        ({"model": "embed", "input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "embed", "input": "x", "dimensions": 0}, "dimensions"),
    ],
)
async def test_bad_requests_are_openai_400s_naming_the_field(
    gateway: Gateway, body: Any, param: str
) -> None:
    status, _, answer = await gateway.post(body)
    assert status == 400, answer
    assert answer["error"]["param"] == param
    assert answer["error"]["type"] == "invalid_request_error"


async def test_a_provider_without_embeddings_is_a_clear_400(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as failure:
        await gateway.client().embeddings.create(model="claude-embed", input="x")
    assert failure.value.code == "embeddings_not_supported"
    assert "does not serve embeddings" in failure.value.message
    assert gateway.upstream.requests == []


# -- other upstreams -------------------------------------------------------------------------


async def test_an_openai_compatible_upstream_gets_openai_s_request(gateway: Gateway) -> None:
    status, headers, body = await gateway.post(
        {
            "model": "openai-embed",
            "input": ["one", "two words"],
            "dimensions": 3,
            "user": "end-user-7",
            "encoding_format": "base64",
        }
    )
    assert status == 200, body
    [sent] = gateway.upstream.requests
    assert sent == {
        "model": "text-embedding-3-small",
        "input": ["one", "two words"],
        "dimensions": 3,
        "user": "end-user-7",
    }
    assert gateway.upstream.headers[0]["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    # The fake answers in reverse order: the index puts each vector back with its input.
    assert [from_base64(item["embedding"]) for item in body["data"]] == [
        vector_for("one", 3),
        vector_for("two words", 3),
    ]
    assert body["model"] == "text-embedding-3-small-2024"
    assert body["usage"]["prompt_tokens"] == 3
    assert headers["x-crossway-model"] == "up/text-embedding-3-small"


async def test_an_upstream_answering_base64_is_decoded(gateway: Gateway) -> None:
    answer = await gateway.client().embeddings.create(
        model="b64-embed", input="hello", encoding_format="float"
    )
    assert answer.data[0].embedding == vector_for("hello")


async def test_azure_gets_its_deployment_url(gateway: Gateway) -> None:
    answer = await gateway.client().embeddings.create(model="azure-embed", input="hello azure")
    assert close(answer.data[0].embedding, vector_for("hello azure"))
    assert gateway.upstream.paths[0].startswith("/openai/deployments/emb-deploy/embeddings?")
    assert gateway.upstream.headers[0]["api-key"] == UPSTREAM_KEY


async def test_gemini_gets_one_batch_request(gateway: Gateway) -> None:
    answer = await gateway.client().embeddings.create(
        model="gemini-embed", input=["un", "deux mots"], dimensions=5, encoding_format="float"
    )
    assert [item.embedding for item in answer.data] == [
        vector_for("un", 5),
        vector_for("deux mots", 5),
    ]
    assert gateway.upstream.paths == ["/v1beta/models/gemini-embedding-001:batchEmbedContents"]
    assert gateway.upstream.requests[0] == {
        "requests": [
            {
                "model": "models/gemini-embedding-001",
                "content": {"parts": [{"text": "un"}]},
                "outputDimensionality": 5,
            },
            {
                "model": "models/gemini-embedding-001",
                "content": {"parts": [{"text": "deux mots"}]},
                "outputDimensionality": 5,
            },
        ]
    }
    assert gateway.upstream.headers[0]["x-goog-api-key"] == UPSTREAM_KEY
    assert answer.usage.prompt_tokens > 0  # Gemini reports none: the gateway's estimate


async def test_gemini_refuses_token_inputs_with_a_400(gateway: Gateway) -> None:
    status, _, body = await gateway.post({"model": "gemini-embed", "input": [1, 2]})
    assert status == 400
    assert body["error"]["param"] == "input"


async def test_bedrock_titan_sends_one_signed_request_per_text(gateway: Gateway) -> None:
    answer = await gateway.client().embeddings.create(
        model="titan", input=["alpha beta", "gamma"], dimensions=256, encoding_format="float"
    )
    assert [item.embedding for item in answer.data] == [
        vector_for("alpha beta", 256),
        vector_for("gamma", 256),
    ]
    assert sorted(gateway.upstream.paths) == ["/model/amazon.titan-embed-text-v2:0/invoke"] * 2
    assert sorted(r["inputText"] for r in gateway.upstream.requests) == ["alpha beta", "gamma"]
    assert all(r["normalize"] is True for r in gateway.upstream.requests)
    assert all("AWS4-HMAC-SHA256" in h["Authorization"] for h in gateway.upstream.headers)
    assert answer.usage.prompt_tokens == 3  # inputTextTokenCount, summed


async def test_bedrock_cohere_batches_texts(gateway: Gateway) -> None:
    texts = [f"text {i}" for i in range(100)]
    answer = await gateway.client().embeddings.create(
        model="cohere", input=texts, encoding_format="float"
    )
    assert [item.embedding for item in answer.data] == [vector_for(t) for t in texts]
    assert sorted(len(r["texts"]) for r in gateway.upstream.requests) == [4, 96]
    assert all(r["input_type"] == "search_document" for r in gateway.upstream.requests)


# -- the chain -------------------------------------------------------------------------------


async def test_the_allow_list_applies_to_embedding_models(gateway: Gateway) -> None:
    with pytest.raises(openai.PermissionDeniedError) as refused:
        await gateway.client(CHAT_ONLY).embeddings.create(model="embed", input="x")
    assert refused.value.code == "model_not_allowed"
    with pytest.raises(openai.AuthenticationError):
        await gateway.client("sk-cw-unknown").embeddings.create(model="embed", input="x")


async def test_masking_keeps_pii_from_the_embedding_provider(gateway: Gateway) -> None:
    await gateway.client().embeddings.create(
        model="openai-embed", input=["write to jane.doe@example.com today", "no pii here"]
    )
    [sent] = gateway.upstream.requests
    assert "jane.doe@example.com" not in json.dumps(sent)
    assert sent["input"][1] == "no pii here"
    with pytest.raises(openai.BadRequestError) as blocked:
        await gateway.client().embeddings.create(model="openai-embed", input="4111 1111 1111 1111")
    assert blocked.value.code == "pii_blocked"
    assert len(gateway.upstream.requests) == 1


async def test_tokens_per_minute_count_embedding_inputs(gateway: Gateway) -> None:
    texts = ["eight ch"] * 10  # 20 tokens: estimated (8 characters) and reported (2 words)
    client = gateway.client(METERED)
    await client.embeddings.create(model="openai-embed", input=texts)
    await client.embeddings.create(model="openai-embed", input=texts)
    with pytest.raises(openai.RateLimitError):
        await client.embeddings.create(model="openai-embed", input=texts)
    assert len(gateway.upstream.requests) == 2


async def test_a_failing_embedding_upstream_is_retried_then_falls_back(gateway: Gateway) -> None:
    raw = await gateway.client().embeddings.with_raw_response.create(
        model="flaky-embed", input="fallback please"
    )
    assert [sent["model"] for sent in gateway.upstream.requests] == [
        "fail-500",
        "fail-500",  # the retry
        "text-embedding-3-small",  # the fallback
    ]
    assert raw.headers["x-crossway-fallback"] == "openai-embed"
    assert close(raw.parse().data[0].embedding, vector_for("fallback please"))
    assert UPSTREAM_KEY not in json.dumps(raw.parse().model_dump())


async def test_embedding_aliases_are_listed_and_priced_in_the_ledger(gateway: Gateway) -> None:
    status, models = await gateway.get("/v1/models", key=ALLOWED)
    assert status == 200
    ids = {model["id"] for model in models["data"]}
    assert {"embed", "openai-embed", "gemini-embed", "titan"} <= ids
    raw = await gateway.client().embeddings.with_raw_response.create(
        model="openai-embed", input=["price me"]
    )
    # text-embedding-3-small is $0.02 per million input tokens: 2 tokens cost $0.00000004.
    assert raw.headers["x-crossway-cost-usd"] == "0.00000004"
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        status, logs = await gateway.get("/admin/spend/logs")
        records = [r for r in logs["data"] if r["dialect"] == "openai_embeddings"]
        if records or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.05)
    assert records, logs
    [record] = records
    assert record["model"] == "openai-embed"
    assert record["input_tokens"] == 2
    assert record["output_tokens"] == 0
    assert record["status"] == 200


async def test_metrics_count_embedding_requests(gateway: Gateway) -> None:
    await gateway.client().embeddings.create(model="embed", input="count me")
    async with aiohttp.ClientSession() as session, session.get(gateway.url + "/metrics") as r:
        text = await r.text()
    assert 'crossway_requests_total{dialect="openai_embeddings",model="embed"' in text


# -- LangChain -------------------------------------------------------------------------------


def langchain(gateway: Gateway, **kwargs: Any) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(
        model="embed",
        base_url=f"{gateway.url}/v1",
        api_key=ALLOWED,  # type: ignore[arg-type]
        # Without this LangChain tokenizes with tiktoken, whose vocabulary it downloads.
        check_embedding_ctx_length=False,
        max_retries=0,
        **kwargs,
    )


async def test_langchain_embeds_documents_and_a_query(gateway: Gateway) -> None:
    embeddings = langchain(gateway)
    documents = ["Paris is the capital of France.", "Rome is the capital of Italy."]
    vectors = await embeddings.aembed_documents(documents)
    assert len(vectors) == 2
    for vector, text in zip(vectors, documents, strict=True):
        assert close(vector, text_vector(text))
    query = await embeddings.aembed_query("capital of France")
    assert close(query, text_vector("capital of France"))


async def test_langchain_with_dimensions(gateway: Gateway) -> None:
    vector = await langchain(gateway, dimensions=32).aembed_query("short vector")
    assert len(vector) == 32
