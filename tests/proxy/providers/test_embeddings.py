"""The providers' embedding translations (pure): requests built, answers read, bad answers and
what a family cannot express refused. The HTTP round trips are tests/e2e/test_embeddings.py's."""

from __future__ import annotations

import base64
import json
import struct
from datetime import UTC, datetime
from typing import Any

import pytest

from proxy.core.canonical import Call, EmbeddingRequest, Params
from proxy.core.errors import BadRequest, UpstreamError
from proxy.providers.anthropic.provider import AnthropicConfig, AnthropicProvider
from proxy.providers.azure import AzureConfig, AzureProvider
from proxy.providers.bedrock.embeddings import COHERE_BATCH
from proxy.providers.bedrock.provider import BedrockConfig, BedrockProvider
from proxy.providers.gemini.provider import GeminiConfig, GeminiProvider
from proxy.providers.mock.provider import MockConfig, MockProvider
from proxy.providers.mock.vectors import text_vector
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider

OPENAI = OpenAIProvider("up", OpenAIConfig(base_url="https://api.example/v1", api_key="sk-up"))
GEMINI = GeminiProvider("gem", GeminiConfig(api_key="g-key"))
BEDROCK = BedrockProvider(
    "aws",
    BedrockConfig(region="us-east-1", access_key_id="AKID", secret_access_key="secret"),
    clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
)


def call(
    texts: list[str] | None = None,
    tokens: list[list[int]] | None = None,
    dimensions: int | None = None,
    user: str | None = None,
) -> Call:
    return Call(
        request_id="r",
        dialect="openai_embeddings",
        model="embed",
        messages=[],
        params=Params() if user is None else Params(user=user),
        embedding=EmbeddingRequest(texts=texts, tokens=tokens, dimensions=dimensions),
    )


def floats(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


# -- OpenAI-compatible and Azure -----------------------------------------------------------


def test_openai_request_names_only_what_was_asked() -> None:
    [request] = OPENAI.build_embeddings(call(["a", "b"], dimensions=8, user="u"), "te-3")
    assert request.url == "https://api.example/v1/embeddings"
    assert request.headers["authorization"] == "Bearer sk-up"
    assert json.loads(request.body) == {
        "model": "te-3",
        "input": ["a", "b"],
        "dimensions": 8,
        "user": "u",
    }
    [request] = OPENAI.build_embeddings(call(tokens=[[1, 2]]), "te-3")
    assert json.loads(request.body) == {"model": "te-3", "input": [[1, 2]]}


def test_openai_answer_floats_or_base64_in_index_order() -> None:
    body = {
        "data": [
            {"index": 1, "embedding": floats([0.5, 0.25])},
            {"index": 0, "embedding": [1.0, 2.0]},
        ],
        "model": "te-3-v",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
    embeddings = OPENAI.parse_embeddings([json.dumps(body).encode()], call(["a", "b"]), "te-3")
    assert embeddings.vectors == [[1.0, 2.0], [0.5, 0.25]]
    assert embeddings.model == "te-3-v"
    assert embeddings.usage is not None
    assert embeddings.usage.input == 3


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"data": [{"embedding": "not base64!"}]}',
        b'{"data": []}',
        b'{"data": [{"embedding": [1.0]}, {"embedding": [2.0]}]}',
    ],
)
def test_openai_bad_answers_are_upstream_errors(body: bytes) -> None:
    with pytest.raises(UpstreamError) as failure:
        OPENAI.parse_embeddings([body], call(["only one"]), "te-3")
    assert failure.value.status == 502


def test_azure_goes_to_the_deployment_of_the_model() -> None:
    azure = AzureProvider(
        "az",
        AzureConfig(endpoint="https://x.openai.azure.com", api_key="k", deployments={"m": "d"}),
    )
    [request] = azure.build_embeddings(call(["a"]), "m")
    assert request.url.startswith("https://x.openai.azure.com/openai/deployments/d/embeddings?")
    assert "api-version=" in request.url
    assert request.headers["api-key"] == "k"


def test_providers_without_embeddings_have_no_translation() -> None:
    anthropic = AnthropicProvider("claude", AnthropicConfig(api_key="k"))
    assert not hasattr(anthropic, "build_embeddings")


# -- Gemini --------------------------------------------------------------------------------


def test_gemini_one_batch_request() -> None:
    [request] = GEMINI.build_embeddings(call(["a", "b"], dimensions=4), "gemini-embedding-001")
    assert request.url.endswith("/models/gemini-embedding-001:batchEmbedContents")
    assert request.headers["x-goog-api-key"] == "g-key"
    assert json.loads(request.body)["requests"][1] == {
        "model": "models/gemini-embedding-001",
        "content": {"parts": [{"text": "b"}]},
        "outputDimensionality": 4,
    }


def test_gemini_answer_and_estimated_usage() -> None:
    body = json.dumps({"embeddings": [{"values": [1.0]}, {"values": [2.0]}]}).encode()
    embeddings = GEMINI.parse_embeddings([body], call(["abcdefgh", "x"]), "g")
    assert embeddings.vectors == [[1.0], [2.0]]
    assert embeddings.usage is not None
    assert embeddings.usage.input == 3  # 8 characters are 2 tokens, and at least 1 per text


def test_gemini_refuses_tokens_and_bad_answers() -> None:
    with pytest.raises(BadRequest):
        GEMINI.build_embeddings(call(tokens=[[1]]), "g")
    with pytest.raises(UpstreamError):
        GEMINI.parse_embeddings([b'{"embeddings": []}'], call(["a"]), "g")
    with pytest.raises(UpstreamError):
        GEMINI.parse_embeddings([b"{"], call(["a"]), "g")


# -- Bedrock -------------------------------------------------------------------------------


def bodies(requests: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(request.body) for request in requests]


def test_titan_one_signed_request_per_text() -> None:
    requests = BEDROCK.build_embeddings(
        call(["a", "b"], dimensions=256), "amazon.titan-embed-text-v2:0"
    )
    assert [r.url for r in requests] == [
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.titan-embed-text-v2:0/invoke"
    ] * 2
    assert bodies(requests) == [
        {"inputText": "a", "normalize": True, "dimensions": 256},
        {"inputText": "b", "normalize": True, "dimensions": 256},
    ]
    assert all(r.headers["authorization"].startswith("AWS4-HMAC-SHA256") for r in requests)
    answers = [
        json.dumps({"embedding": [1.0], "inputTextTokenCount": 2}).encode(),
        json.dumps({"embedding": [2.0], "inputTextTokenCount": 5}).encode(),
    ]
    embeddings = BEDROCK.parse_embeddings(answers, call(["a", "b"]), "amazon.titan-embed-text-v2:0")
    assert embeddings.vectors == [[1.0], [2.0]]
    assert embeddings.usage is not None
    assert embeddings.usage.input == 7


def test_cohere_batches_of_96_and_both_answer_shapes() -> None:
    texts = [f"t{i}" for i in range(COHERE_BATCH + 1)]
    requests = BEDROCK.build_embeddings(call(texts), "us.cohere.embed-english-v3")
    assert [len(body["texts"]) for body in bodies(requests)] == [COHERE_BATCH, 1]
    assert all(body["input_type"] == "search_document" for body in bodies(requests))
    answers = [
        json.dumps({"embeddings": [[0.0]] * COHERE_BATCH}).encode(),
        json.dumps({"embeddings": {"float": [[1.0]]}}).encode(),
    ]
    embeddings = BEDROCK.parse_embeddings(answers, call(texts), "cohere.embed-english-v3")
    assert embeddings.vectors[-1] == [1.0]
    assert len(embeddings.vectors) == COHERE_BATCH + 1


@pytest.mark.parametrize(
    ("request_call", "model", "param"),
    [
        (call(["a"]), "anthropic.claude-3", "model"),
        (call(tokens=[[1]]), "amazon.titan-embed-text-v2:0", "input"),
        (call(["a"], dimensions=8), "cohere.embed-english-v3", "dimensions"),
    ],
)
def test_bedrock_refuses_what_the_family_cannot_express(
    request_call: Call, model: str, param: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        BEDROCK.build_embeddings(request_call, model)
    assert refused.value.param == param


def test_bedrock_bad_answers_are_upstream_errors() -> None:
    with pytest.raises(UpstreamError):
        BEDROCK.parse_embeddings([b"{}"], call(["a"]), "amazon.titan-embed-text-v2:0")
    with pytest.raises(UpstreamError):
        BEDROCK.parse_embeddings(
            [b'{"embeddings": [[1.0], [2.0]]}'], call(["a"]), "cohere.embed-english-v3"
        )


# -- mock ----------------------------------------------------------------------------------


async def test_mock_vectors_are_deterministic_and_meaningful() -> None:
    mock = MockProvider("mock", MockConfig())
    embeddings = await mock.embed(call(["the capital of France", "capital city of France"]), "m")
    first, second = embeddings.vectors
    assert first == text_vector("the capital of France")
    assert len(first) == 256
    assert sum(a * b for a, b in zip(first, second, strict=True)) > 0.6
    unrelated = text_vector("how do I reset my password")
    assert abs(sum(a * b for a, b in zip(first, unrelated, strict=True))) < 0.2
    assert embeddings.usage is not None
    assert embeddings.usage.input == 8  # one token per word


async def test_mock_embedding_faults() -> None:
    mock = MockProvider("mock", MockConfig(faults=True))
    with pytest.raises(UpstreamError) as failure:
        await mock.embed(call(["x"]), "error-503")
    assert failure.value.upstream_status == 503
    short = await mock.embed(call(tokens=[[1, 2, 3]], dimensions=16), "m")
    assert len(short.vectors[0]) == 16
    assert short.usage is not None
    assert short.usage.input == 3
