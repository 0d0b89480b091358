"""proxy/providers/bedrock/media.py: Bedrock's Rerank and Amazon's image models' requests built
from Cohere's and OpenAI's, their answers read back in those shapes, and what cannot be
expressed or read refused. The signed HTTP round trips are tests/e2e/test_media_vendors.py's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from proxy.core.canonical import Call, MediaOperation, MediaRequest, MediaUnits, Usage
from proxy.core.errors import BadRequest, ContentPolicyViolation, UpstreamError
from proxy.providers.bedrock.provider import BedrockConfig, BedrockProvider

BEDROCK = BedrockProvider(
    "aws",
    BedrockConfig(region="eu-west-1", access_key_id="AKID", secret_access_key="secret"),
    clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
)


def call(
    operation: MediaOperation, fields: dict[str, Any], worst: MediaUnits | None = None
) -> Call:
    media = MediaRequest(operation, fields, worst=worst)
    return Call(request_id="req-1", dialect="d", model="alias", messages=[], media=media)


def test_rerank_goes_signed_to_the_agent_runtime_of_the_region() -> None:
    fields = {"query": "q", "documents": ["a", {"text": "b"}, {"k": 1}], "max_tokens_per_doc": 64}
    request = BEDROCK.build_media(call("rerank", fields), "amazon.rerank-v1:0")
    assert request.url == "https://bedrock-agent-runtime.eu-west-1.amazonaws.com/rerank"
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKID/")
    assert "/eu-west-1/bedrock/aws4_request" in request.headers["authorization"]
    body = json.loads(request.body)
    assert [s["inlineDocumentSource"] for s in body["sources"]] == [
        {"type": "TEXT", "textDocument": {"text": "a"}},
        {"type": "TEXT", "textDocument": {"text": "b"}},
        {"type": "JSON", "jsonDocument": {"k": 1}},
    ]
    configuration = body["rerankingConfiguration"]["bedrockRerankingConfiguration"]
    assert configuration == {
        "numberOfResults": 3,
        "modelConfiguration": {
            "modelArn": "arn:aws:bedrock:eu-west-1::foundation-model/amazon.rerank-v1:0",
            "additionalModelRequestFields": {"max_tokens_per_doc": 64},
        },
    }


def test_a_model_arn_is_sent_as_it_is_and_top_n_bounds_the_results() -> None:
    arn = "arn:aws:bedrock:us-west-2::foundation-model/cohere.rerank-v3-5:0"
    fields = {"query": "q", "documents": ["a", "b"], "top_n": 5}
    body = json.loads(BEDROCK.build_media(call("rerank", fields), arn).body)
    configuration = body["rerankingConfiguration"]["bedrockRerankingConfiguration"]
    assert configuration["modelConfiguration"]["modelArn"] == arn
    assert configuration["numberOfResults"] == 2


def test_rerank_answer_in_coheres_shape_billed_a_unit_per_100_documents() -> None:
    fields = {"query": "q", "documents": ["d"] * 150, "return_documents": True}
    body = b'{"results": [{"index": 149, "relevanceScore": 0.75}]}'
    answer = BEDROCK.parse_media({}, body, call("rerank", fields), "m")
    assert json.loads(answer.body) == {
        "id": "req-1",
        "results": [{"index": 149, "relevance_score": 0.75, "document": {"text": "d"}}],
        "meta": {"billed_units": {"search_units": 2}},
    }
    assert answer.usage == Usage(media=MediaUnits(search_units=2))


@pytest.mark.parametrize(
    "body", [b'{"results": [{"index": 3, "relevanceScore": 1}]}', b'{"results": 1}', b"x"]
)
def test_a_rerank_answer_it_cannot_read_is_an_upstream_error(body: bytes) -> None:
    with pytest.raises(UpstreamError):
        BEDROCK.parse_media({}, body, call("rerank", {"query": "q", "documents": ["a"]}), "m")


def test_image_request_is_an_invoke_of_the_model() -> None:
    fields = {"prompt": "p", "n": 2, "size": "512x768", "quality": "standard",
              "negative_prompt": "rain", "seed": 7, "style": "natural"}  # fmt: skip
    request = BEDROCK.build_media(call("image_generation", fields), "amazon.nova-canvas-v1:0")
    assert request.url == (
        "https://bedrock-runtime.eu-west-1.amazonaws.com/model/amazon.nova-canvas-v1:0/invoke"
    )
    assert json.loads(request.body) == {
        "taskType": "TEXT_IMAGE",
        "textToImageParams": {"text": "p", "negativeText": "rain", "style": "natural"},
        "imageGenerationConfig": {
            "numberOfImages": 2, "width": 512, "height": 768, "quality": "standard", "seed": 7
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"response_format": "url"}, "response_format"),
        ({"size": "huge"}, "size"),
        ({"quality": "ultra"}, "quality"),
        ({"n": 6}, "n"),
    ],
)
def test_an_image_request_it_cannot_express_is_a_400(extra: dict, param: str) -> None:
    with pytest.raises(BadRequest) as refused:
        BEDROCK.build_media(call("image_generation", {"prompt": "p", **extra}), "m")
    assert refused.value.param == param


def test_image_answer_in_openais_shape() -> None:
    asked = MediaUnits(images=1, image_quality="hd")
    answer = BEDROCK.parse_media(
        {}, b'{"images": ["QUJD"], "error": null}', call("image_generation", {}, asked), "m"
    )
    assert json.loads(answer.body)["data"] == [{"b64_json": "QUJD"}]
    assert answer.usage == Usage(media=MediaUnits(images=1, image_quality="hd"))


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"images": [], "error": "blocked by content filters"}', ContentPolicyViolation),
        (b'{"images": []}', UpstreamError),
        (b"[", UpstreamError),
    ],
)
def test_an_image_answer_without_images_is_an_error(body: bytes, error: type) -> None:
    with pytest.raises(error):
        BEDROCK.parse_media({}, body, call("image_generation", {}), "m")
