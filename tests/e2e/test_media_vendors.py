"""Gemini and Bedrock media end to end: Imagen and Gemini TTS through the openai SDK, Bedrock's
rerank through a plain HTTP client and Amazon's image models through the SDK, against a fake
Gemini/Bedrock upstream on 127.0.0.1 that checks the key and the SigV4 signature. Each test
checks the request the provider sent (path, body, credentials), the answer in OpenAI's (or
Cohere's) shape, and the ledger record with its units and cost; what a provider cannot serve
or express is a 400 before anything is sent."""

from __future__ import annotations

import asyncio
import base64
import io
import textwrap
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.e2e.fake_vendor_media import (
    GEMINI_KEY,
    PCM_BYTES_PER_CHARACTER,
    FakeVendorMedia,
    image_bytes,
)
from tests.proxy.providers.fakes.bedrock import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY
from tests.schemas import validate_in

SPEC = "openai-media.openapi.json"
MASTER = "master-key-" + "0a1b2c3d4e5f6789" * 2
KEY = "sk-cw-vendors-" + "qrstuvwxyz" * 4
RERANK_PRICES = "{input: 0, output: 0, search_unit: 0.002}"
CANVAS_PRICES = "{input: 0, output: 0, image: {standard/1024x1024: 0.04, hd/1024x1024: 0.08}}"


def config_text(tmp_path: Path, upstream: str) -> str:
    return textwrap.dedent(
        f"""
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          keys: [{{key: "{KEY}", alias: vendors}}]
        providers:
          gem: {{type: gemini, base_url: "{upstream}/v1beta", api_key: "{GEMINI_KEY}"}}
          aws:
            type: bedrock
            region: {REGION}
            access_key_id: "{ACCESS_KEY_ID}"
            secret_access_key: "{SECRET_ACCESS_KEY}"
            endpoint_url: "{upstream}"
            agent_endpoint_url: "{upstream}"
        models:
          imagen: [{{target: gem/imagen-4.0-generate-001}}]
          voice: [{{target: gem/gemini-2.5-flash-preview-tts, prices: {{input: 0.5, output: 10}}}}]
          gem-omni: [{{target: gem/omni-moderation-latest}}]
          bedrock-rerank: [{{target: "aws/cohere.rerank-v3-5:0", prices: {RERANK_PRICES}}}]
          canvas: [{{target: "aws/amazon.nova-canvas-v1:0", prices: {CANVAS_PRICES}}}]
          aws-whisper: [{{target: aws/whisper-1}}]
        plugins:
          - auth: {{}}
          - cost: {{}}
        """
    )


class Gateway:
    def __init__(self, url: str, upstream: FakeVendorMedia) -> None:
        self.url = url
        self.upstream = upstream
        self.client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)

    async def post(self, path: str, body: Any) -> httpx.Response:
        async with httpx.AsyncClient() as client:
            return await client.post(
                self.url + path, json=body, headers={"Authorization": f"Bearer {KEY}"}
            )

    async def record(self, dialect: str) -> dict[str, Any]:
        """The ledger's newest record of ``dialect`` (written off the request path)."""
        deadline = asyncio.get_running_loop().time() + 10
        async with httpx.AsyncClient() as client:
            while True:
                answer = await client.get(
                    self.url + "/admin/spend/logs", headers={"Authorization": f"Bearer {MASTER}"}
                )
                records = [r for r in answer.json()["data"] if r["dialect"] == dialect]
                if records or asyncio.get_running_loop().time() > deadline:
                    assert records, f"no ledger record of {dialect}"
                    return records[0]
                await asyncio.sleep(0.05)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    fake = FakeVendorMedia()
    upstream_runner, upstream_url = await start_site(fake.app())
    config = tmp_path / "gateway.yaml"
    config.write_text(config_text(tmp_path, upstream_url))
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    running = Gateway(url, fake)
    yield running
    await running.client.close()
    await runner.cleanup()
    await upstream_runner.cleanup()
    assert GEMINI_KEY not in logs.getvalue()
    assert SECRET_ACCESS_KEY not in logs.getvalue()


# -- Gemini: Imagen ----------------------------------------------------------------------------


async def test_imagen_generates_images_through_the_sdk(gateway: Gateway) -> None:
    answer = await gateway.client.images.generate(
        model="imagen", prompt="a red fox", n=2, size="1792x1024", response_format="b64_json"
    )
    images = [base64.b64decode(item.b64_json or "") for item in answer.data or []]
    assert images == [image_bytes("a red fox", 0), image_bytes("a red fox", 1)]
    validate_in(SPEC, "ImagesResponse", answer.model_dump(exclude_unset=True))
    [sent] = gateway.upstream.requests
    assert sent.path == "/v1beta/models/imagen-4.0-generate-001:predict"
    assert sent.body == {
        "instances": [{"prompt": "a red fox"}],
        "parameters": {"sampleCount": 2, "aspectRatio": "16:9"},
    }
    assert sent.headers["x-goog-api-key"] == GEMINI_KEY
    record = await gateway.record("openai_images")
    assert (record["provider"], record["upstream_model"]) == ("gem", "imagen-4.0-generate-001")
    assert record["media_units"] == {"images": 2, "image_size": "1792x1024"}
    assert record["cost_usd"] == pytest.approx(0.08)  # the catalog's $0.04 an image


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "response_format": "url"}, "response_format"),
        ({"prompt": "x", "size": "1000x200"}, "size"),
    ],
)
async def test_what_imagen_cannot_express_is_a_400_before_sending(
    gateway: Gateway, body: dict[str, Any], param: str
) -> None:
    answer = await gateway.post("/v1/images/generations", {"model": "imagen", **body})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param
    assert gateway.upstream.requests == []


async def test_images_the_safety_filters_removed_are_a_content_policy_400(
    gateway: Gateway,
) -> None:
    for model in ("imagen", "canvas"):
        with pytest.raises(openai.BadRequestError) as refused:
            await gateway.client.images.generate(
                model=model, prompt="filtered", response_format="b64_json"
            )
        assert refused.value.code == "content_policy_violation"


# -- Gemini: speech ----------------------------------------------------------------------------


async def test_gemini_speech_is_answered_as_a_wav_file(gateway: Gateway) -> None:
    answer = await gateway.client.audio.speech.create(
        model="voice", voice="Kore", input="Hello there", instructions="Say cheerfully"
    )
    spoken = "Say cheerfully: Hello there"
    with wave.open(io.BytesIO(answer.content)) as audio:
        assert (audio.getframerate(), audio.getnchannels(), audio.getsampwidth()) == (24000, 1, 2)
        assert audio.getnframes() == len(spoken) * PCM_BYTES_PER_CHARACTER // 2
    assert answer.response.headers["content-type"] == "audio/wav"
    [sent] = gateway.upstream.requests
    assert sent.path == "/v1beta/models/gemini-2.5-flash-preview-tts:generateContent"
    assert sent.body == {
        "contents": [{"role": "user", "parts": [{"text": spoken}]}],
        "generationConfig": {
            "responseModalities": ["AUDIO"],
            "speechConfig": {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": "Kore"}}},
        },
    }
    assert sent.headers["x-goog-api-key"] == GEMINI_KEY
    record = await gateway.record("openai_speech")
    audio_tokens = len(spoken) * PCM_BYTES_PER_CHARACTER // 960
    assert (record["input_tokens"], record["output_tokens"]) == (4, audio_tokens)
    assert record["cost_usd"] == pytest.approx((4 * 0.5 + audio_tokens * 10) / 1e6)


async def test_gemini_speech_as_raw_pcm_and_formats_it_cannot_encode(gateway: Gateway) -> None:
    answer = await gateway.client.audio.speech.create(
        model="voice", voice="Puck", input="abc", response_format="pcm"
    )
    assert len(answer.content) == 3 * PCM_BYTES_PER_CHARACTER
    for field, value in (("response_format", "mp3"), ("speed", 2.0), ("stream_format", "sse")):
        refused = await gateway.post(
            "/v1/audio/speech", {"model": "voice", "voice": "Puck", "input": "x", field: value}
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == field
    assert len(gateway.upstream.requests) == 1


# -- Bedrock: rerank ---------------------------------------------------------------------------


async def test_bedrock_rerank_in_coheres_shape(gateway: Gateway) -> None:
    documents: list[Any] = [
        "Berlin, Germany",
        {"text": "Paris is the capital of France"},
        {"title": "France", "body": "its capital"},
    ]
    answer = await gateway.post(
        "/v1/rerank",
        {
            "model": "bedrock-rerank",
            "query": "capital of France",
            "documents": documents,
            "top_n": 2,
            "return_documents": True,
        },
    )
    assert answer.status_code == 200
    body = answer.json()
    assert [result["index"] for result in body["results"]] == [1, 2]
    assert body["results"][0] == {
        "index": 1,
        "relevance_score": 1.0,
        "document": {"text": "Paris is the capital of France"},
    }
    assert body["meta"] == {"billed_units": {"search_units": 1}}
    [sent] = gateway.upstream.requests
    assert sent.path == "/rerank"
    assert sent.headers["Authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/")
    assert "x-amz-date" in {name.lower() for name in sent.headers}
    assert sent.body["queries"] == [{"type": "TEXT", "textQuery": {"text": "capital of France"}}]
    assert [s["inlineDocumentSource"]["type"] for s in sent.body["sources"]] == [
        "TEXT",
        "TEXT",
        "JSON",
    ]
    assert sent.body["rerankingConfiguration"] == {
        "type": "BEDROCK_RERANKING_MODEL",
        "bedrockRerankingConfiguration": {
            "numberOfResults": 2,
            "modelConfiguration": {
                "modelArn": f"arn:aws:bedrock:{REGION}::foundation-model/cohere.rerank-v3-5:0"
            },
        },
    }
    record = await gateway.record("rerank")
    assert record["media_units"] == {"search_units": 1}
    assert record["cost_usd"] == pytest.approx(0.002)


async def test_more_documents_than_bedrock_reranks_is_a_400(gateway: Gateway) -> None:
    answer = await gateway.post(
        "/v1/rerank", {"model": "bedrock-rerank", "query": "q", "documents": ["d"] * 1001}
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "documents"
    assert gateway.upstream.requests == []


# -- Bedrock: images ---------------------------------------------------------------------------


async def test_bedrock_image_model_through_the_sdk(gateway: Gateway) -> None:
    answer = await gateway.client.images.generate(
        model="canvas",
        prompt="a lighthouse",
        n=2,
        size="1024x1024",
        quality="hd",
        response_format="b64_json",
    )
    images = [base64.b64decode(item.b64_json or "") for item in answer.data or []]
    assert images == [image_bytes("a lighthouse", 0), image_bytes("a lighthouse", 1)]
    validate_in(SPEC, "ImagesResponse", answer.model_dump(exclude_unset=True))
    [sent] = gateway.upstream.requests
    assert sent.path == "/model/amazon.nova-canvas-v1:0/invoke"
    assert sent.headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert sent.body == {
        "taskType": "TEXT_IMAGE",
        "textToImageParams": {"text": "a lighthouse"},
        "imageGenerationConfig": {
            "numberOfImages": 2,
            "width": 1024,
            "height": 1024,
            "quality": "premium",
        },
    }
    record = await gateway.record("openai_images")
    assert record["media_units"] == {
        "images": 2,
        "image_size": "1024x1024",
        "image_quality": "hd",
    }
    assert record["cost_usd"] == pytest.approx(0.16)


# -- what neither serves -----------------------------------------------------------------------


async def test_an_operation_the_provider_lacks_is_a_400_naming_both(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await gateway.client.moderations.create(model="gem-omni", input="x")
    assert refused.value.code == "unsupported_operation"
    assert "'gem'" in str(refused.value.message)
    assert "moderation" in str(refused.value.message)
    with pytest.raises(openai.BadRequestError) as refused:
        await gateway.client.audio.transcriptions.create(
            model="aws-whisper", file=("a.wav", b"RIFF")
        )
    assert refused.value.code == "unsupported_operation"
    assert "'aws'" in str(refused.value.message)
    assert gateway.upstream.requests == []


async def test_a_stream_neither_upstream_can_send_is_a_400_before_sending(
    gateway: Gateway,
) -> None:
    # Imagen and Amazon's image models answer whole: a streamed image is refused, not faked.
    for model in ("imagen", "canvas"):
        refused = await gateway.post(
            "/v1/images/generations",
            {"model": model, "prompt": "x", "stream": True, "partial_images": 1},
        )
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert (error["code"], error["param"]) == ("unsupported_operation", "stream")
    assert gateway.upstream.requests == []
