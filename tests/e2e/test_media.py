"""Audio, images, moderations and rerank end to end: the openai SDK's own methods (and a plain
HTTP client for rerank) against the gateway, served by the mock and by a real fake upstream on
127.0.0.1 (OpenAI, Azure, Cohere), through auth, limits, cost and the ledger; every body checked
against OpenAI's schema (or Cohere's shape); uploads over ``media.max_upload_bytes`` refused
with 413 before the body is read."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import textwrap
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.fake_media import (
    TRANSCRIPT_SECONDS,
    FakeMedia,
    fake_audio,
    fake_png,
    media_gateway,
)
from tests.schemas import validate_in

SPEC = "openai-media.openapi.json"
MASTER = "master-key-" + "0123456789abcdef" * 2
ALLOWED = "sk-cw-media-" + "abcdefghij" * 4
BUDGETED = "sk-cw-budget-" + "klmnopqrst" * 4
LIMITED = "sk-cw-limited-" + "uvwxyzabcd" * 4
UPLOAD_LIMIT = 64 * 1024


def config_text(tmp_path: Path, upstream: str) -> str:
    return textwrap.dedent(
        f"""
        server: {{access_log: true}}
        media: {{max_upload_bytes: {UPLOAD_LIMIT}}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          keys:
            - {{key: "{ALLOWED}", alias: media}}
            - {{key: "{BUDGETED}", alias: budgeted, budget: {{max_usd: 0.1, period: 1d}}}}
            - {{key: "{LIMITED}", alias: limited, rpm: 2}}
        providers:
          mock: {{type: mock, faults: true}}
          up: {{type: openai, base_url: "{upstream}/v1", api_key: "{UPSTREAM_KEY}"}}
          az:
            type: azure
            endpoint: "{upstream}"
            api_key: "{UPSTREAM_KEY}"
            deployments: {{whisper-1: whisper-deploy, dall-e-3: images-deploy}}
          gem: {{type: gemini, base_url: "{upstream}/v1beta", api_key: "{UPSTREAM_KEY}"}}
          cohere: {{type: openai, base_url: "{upstream}/v2", api_key: "{UPSTREAM_KEY}"}}
        models:
          tts: [{{target: mock/tts-1}}]
          whisper: [{{target: mock/whisper-1}}]
          painter: [{{target: mock/dall-e-3}}]
          omni: [{{target: mock/omni-moderation-latest}}]
          ranker: [{{target: mock/rerank-v3.5}}]
          openai-tts: [{{target: up/tts-1}}]
          openai-whisper: [{{target: up/whisper-1}}]
          openai-painter: [{{target: up/dall-e-3}}]
          openai-omni: [{{target: up/omni-moderation-latest}}]
          azure-whisper: [{{target: az/whisper-1}}]
          azure-painter: [{{target: az/dall-e-3}}]
          azure-omni: [{{target: az/omni-moderation-latest}}]
          gemini-tts: [{{target: gem/gemini-2.5-flash-preview-tts}}]
          cohere-rerank: [{{target: cohere/rerank-v3.5}}]
          broken-tts: [{{target: up/fail-500}}]
        plugins:
          - auth: {{}}
          - limits: {{}}
          - masking: {{entities: {{email: mask, credit_card: block}}}}
          - cache: {{}}
          - cost: {{}}
          - fallback: {{chains: {{broken-tts: [tts]}}}}
          - retry: {{retries: 1, backoff_base: 0}}
        """
    )


class Gateway:
    def __init__(self, url: str, upstream: FakeMedia, logs: io.StringIO) -> None:
        self.url = url
        self.upstream = upstream
        self.logs = logs

    def client(self, key: str = ALLOWED) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def post(
        self, path: str, body: Any = None, key: str = ALLOWED, **kwargs: Any
    ) -> tuple[int, dict[str, str], bytes]:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url + path, json=body, headers=headers, **kwargs) as response,
        ):
            return response.status, dict(response.headers), await response.read()

    async def spend_logs(self, dialects: set[str], count: int) -> list[dict[str, Any]]:
        """The ledger's records of ``dialects``, once ``count`` of them are written."""
        headers = {"Authorization": f"Bearer {MASTER}"}
        deadline = asyncio.get_running_loop().time() + 10
        async with aiohttp.ClientSession() as session:
            while True:
                async with session.get(self.url + "/admin/spend/logs", headers=headers) as r:
                    logs = await r.json()
                records = [r for r in logs["data"] if r["dialect"] in dialects]
                if len(records) >= count or asyncio.get_running_loop().time() > deadline:
                    return records
                await asyncio.sleep(0.05)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with media_gateway(tmp_path, config_text) as (url, fake, logs):
        yield Gateway(url, fake, logs)
    assert UPSTREAM_KEY not in logs.getvalue()
    assert ALLOWED not in logs.getvalue()


def wav(seconds: float, rate: int = 8000) -> bytes:
    """A silent mono 16-bit WAV file of ``seconds``."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\0\0" * int(seconds * rate))
    return buffer.getvalue()


def error_of(body: bytes) -> dict[str, Any]:
    answer = json.loads(body)
    validate_in(SPEC, "ErrorResponse", answer)
    error: dict[str, Any] = answer["error"]
    return error


# -- speech ----------------------------------------------------------------------------------


async def test_speech_with_the_sdk_from_the_mock_is_streamed(
    gateway: Gateway,
) -> None:
    text = "Hello from the gateway."
    raw = await gateway.client().audio.speech.with_raw_response.create(
        model="tts", voice="alloy", input=text
    )
    audio = raw.parse().content
    assert audio.startswith(b"crossway-mock-audio:mp3:")
    assert raw.headers["content-type"] == "audio/mpeg"
    # Relayed as it arrives, so its cost ($0.000015 a character) is only in the ledger
    assert raw.headers["transfer-encoding"] == "chunked"
    assert "x-crossway-cost-usd" not in raw.headers
    again = await gateway.client().audio.speech.create(model="tts", voice="alloy", input=text)
    assert again.content == audio  # deterministic


async def test_speech_is_relayed_from_an_openai_upstream_byte_for_byte(gateway: Gateway) -> None:
    answer = await gateway.client().audio.speech.create(
        model="openai-tts", voice="nova", input="relay me", response_format="wav", speed=1.5
    )
    assert answer.content == fake_audio("relay me")
    [sent] = gateway.upstream.requests
    assert sent.path == "/v1/audio/speech"
    assert sent.fields == {
        "model": "tts-1",
        "voice": "nova",
        "input": "relay me",
        "response_format": "wav",
        "speed": 1.5,
    }
    assert sent.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"


async def test_speech_as_server_sent_events_validates(gateway: Gateway) -> None:
    async with gateway.client().audio.speech.with_streaming_response.create(
        model="tts", voice="alloy", input="stream me", stream_format="sse"
    ) as response:
        assert response.headers["content-type"] == "text/event-stream"
        body = await response.read()
    events = [json.loads(line[6:]) for line in body.decode().splitlines() if line]
    assert [event["type"] for event in events] == [
        "speech.audio.delta",
        "speech.audio.delta",
        "speech.audio.done",
    ]
    for event in events:
        validate_in(SPEC, "CreateSpeechResponseStreamEvent", event)


async def test_a_bad_speech_request_is_a_400_naming_the_field(gateway: Gateway) -> None:
    status, _, body = await gateway.post(
        "/v1/audio/speech", {"model": "tts", "voice": "alloy", "input": "x", "speed": 9}
    )
    assert status == 400
    assert error_of(body)["param"] == "speed"
    status, _, body = await gateway.post("/v1/audio/speech", {"model": "tts", "voice": "alloy"})
    assert status == 400
    assert error_of(body)["param"] == "input"


# -- transcriptions and translations --------------------------------------------------------


async def test_transcription_with_the_sdk_from_the_mock(gateway: Gateway) -> None:
    audio = wav(2.5)
    raw = await gateway.client().audio.transcriptions.with_raw_response.create(
        model="whisper", file=("meeting.wav", audio, "audio/wav")
    )
    answer = json.loads(raw.http_response.content)
    validate_in(SPEC, "CreateTranscriptionResponseJson", answer)
    assert answer["text"] == f"mock transcript of meeting.wav ({len(audio)} bytes)"
    # 2.5 s at the mock's $0.0001 a second.
    assert raw.headers["x-crossway-cost-usd"] == "0.00025"
    assert raw.parse().text == answer["text"]


async def test_transcription_formats_from_the_mock(gateway: Gateway) -> None:
    client = gateway.client()
    audio = ("a.wav", wav(1.0), "audio/wav")
    verbose = await client.audio.transcriptions.with_raw_response.create(
        model="whisper", file=audio, response_format="verbose_json"
    )
    body = json.loads(verbose.http_response.content)
    validate_in(SPEC, "CreateTranscriptionResponseVerboseJson", body)
    assert body["duration"] == 1.0
    text = await client.audio.transcriptions.create(
        model="whisper", file=audio, response_format="text"
    )
    assert text.startswith("mock transcript of a.wav")
    srt = await client.audio.transcriptions.create(
        model="whisper", file=audio, response_format="srt"
    )
    assert "00:00:00,000 --> 00:00:01,000" in srt


async def test_streamed_transcription_and_images_from_the_mock(gateway: Gateway) -> None:
    client = gateway.client()
    stream = await client.audio.transcriptions.create(
        model="whisper", file=("s.wav", wav(0.25), "audio/wav"), stream=True
    )
    events = [event.model_dump(exclude_none=True) async for event in stream]
    for event in events:
        validate_in(SPEC, "CreateTranscriptionResponseStreamEvent", event)
    assert events[-1]["type"] == "transcript.text.done"
    assert "".join(e["delta"] for e in events[:-1]) == events[-1]["text"]
    images = await client.images.generate(model="painter", prompt="sea", n=2, stream=True)
    completed = [event.model_dump(exclude_none=True) async for event in images]
    assert [event["type"] for event in completed] == ["image_generation.completed"] * 2
    for event in completed:
        validate_in(SPEC, "ImageGenStreamEvent", event)


async def test_transcription_is_relayed_to_an_openai_upstream(gateway: Gateway) -> None:
    audio = b"not really mp3 " * 100
    raw = await gateway.client().audio.transcriptions.with_raw_response.create(
        model="openai-whisper",
        file=("talk.mp3", audio, "audio/mpeg"),
        language="en",
        timestamp_granularities=["word", "segment"],
        response_format="verbose_json",
    )
    [sent] = gateway.upstream.requests
    assert sent.path == "/v1/audio/transcriptions"
    assert sent.files == [("file", "talk.mp3", "audio/mpeg", audio)]
    assert sent.fields["model"] == "whisper-1"
    assert sent.fields["language"] == "en"
    assert sent.fields["timestamp_granularities[]"] == ["word", "segment"]
    assert sent.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert json.loads(raw.http_response.content)["text"] == f"heard talk.mp3: {len(audio)} bytes"
    # whisper-1 is $0.006 a minute; the upstream reported 7 seconds.
    assert raw.headers["x-crossway-cost-usd"] == f"{TRANSCRIPT_SECONDS * 0.0001:.4f}"


async def test_an_srt_answer_is_priced_by_its_last_cue(gateway: Gateway) -> None:
    raw = await gateway.client().audio.transcriptions.with_raw_response.create(
        model="openai-whisper", file=("x.mp3", b"abc", "audio/mpeg"), response_format="srt"
    )
    assert raw.parse().startswith("1\n00:00:00,000")
    assert raw.headers["x-crossway-cost-usd"] == "0.000725"  # 7.25 s


async def test_translation_with_the_sdk_from_the_mock_and_an_upstream(gateway: Gateway) -> None:
    client = gateway.client()
    raw = await client.audio.translations.with_raw_response.create(
        model="whisper", file=("fr.wav", wav(0.5), "audio/wav")
    )
    body = json.loads(raw.http_response.content)
    validate_in(SPEC, "CreateTranslationResponseJson", body)
    relayed = await client.audio.translations.create(
        model="openai-whisper", file=("fr.ogg", b"ogg!", "audio/ogg")
    )
    assert relayed.text == "heard fr.ogg: 4 bytes"
    assert gateway.upstream.requests[0].path == "/v1/audio/translations"


async def test_a_json_body_on_an_upload_route_is_a_400(gateway: Gateway) -> None:
    status, _, body = await gateway.post("/v1/audio/transcriptions", {"model": "whisper"})
    assert status == 400
    assert error_of(body)["code"] == "invalid_content_type"
    form = aiohttp.FormData({"model": "whisper"})
    form.add_field("audio", b"RIFF", filename="a.wav")  # not the field the route reads
    status, _, body = await gateway.post("/v1/audio/transcriptions", data=form)
    assert status == 400
    assert error_of(body)["param"] == "file"


# -- images ----------------------------------------------------------------------------------


async def test_image_generation_with_the_sdk_from_the_mock(gateway: Gateway) -> None:
    raw = await gateway.client().images.with_raw_response.generate(
        model="painter", prompt="a lighthouse", n=2, quality="hd", response_format="b64_json"
    )
    body = json.loads(raw.http_response.content)
    validate_in(SPEC, "ImagesResponse", body)
    images = [base64.b64decode(item["b64_json"]) for item in body["data"]]
    assert len(images) == 2
    assert all(image.startswith(b"\x89PNG\r\n\x1a\n") for image in images)
    assert raw.headers["x-crossway-cost-usd"] == "0.16"  # two hd images at the mock's $0.08
    assert raw.parse().data[0].b64_json == body["data"][0]["b64_json"]


async def test_image_generation_relayed_from_an_upstream_and_priced_by_size(
    gateway: Gateway,
) -> None:
    raw = await gateway.client().images.with_raw_response.generate(
        model="openai-painter", prompt="a fox", size="1024x1792", quality="standard"
    )
    answer = raw.parse()
    assert answer.data[0].b64_json == fake_png("a fox#0")
    assert raw.headers["x-crossway-cost-usd"] == "0.08"  # dall-e-3 standard 1024x1792
    [sent] = gateway.upstream.requests
    assert sent.fields == {
        "model": "dall-e-3",
        "prompt": "a fox",
        "size": "1024x1792",
        "quality": "standard",
    }


async def test_image_edit_with_the_sdk_from_the_mock_and_an_upstream(gateway: Gateway) -> None:
    client = gateway.client()
    image = ("in.png", base64.b64decode(fake_png("source")), "image/png")
    mask = ("mask.png", b"\x89PNG-mask", "image/png")
    raw = await client.images.with_raw_response.edit(
        model="painter", image=image, mask=mask, prompt="add a hat", n=1
    )
    body = json.loads(raw.http_response.content)
    validate_in(SPEC, "ImagesResponse", body)
    relayed = await client.images.edit(
        model="openai-painter", image=image, mask=mask, prompt="add a hat", n=2
    )
    assert [item.b64_json for item in relayed.data] == [
        fake_png("add a hat#0"),
        fake_png("add a hat#1"),
    ]
    [sent] = gateway.upstream.requests
    assert sent.path == "/v1/images/edits"
    assert [(f[0], f[1], f[3]) for f in sent.files] == [
        ("image", "in.png", image[1]),
        ("mask", "mask.png", mask[1]),
    ]
    assert sent.fields["model"] == "dall-e-3"
    assert sent.fields["n"] == "2"


# -- moderations -----------------------------------------------------------------------------


async def test_moderation_with_the_sdk_from_the_mock(gateway: Gateway) -> None:
    raw = await gateway.client().moderations.with_raw_response.create(
        model="omni", input=["a calm sentence", "a threat of violence"]
    )
    body = json.loads(raw.http_response.content)
    validate_in(SPEC, "CreateModerationResponse", body)
    assert [result["flagged"] for result in body["results"]] == [False, True]
    assert body["results"][1]["categories"]["violence"] is True
    assert raw.parse().results[1].flagged is True


async def test_moderation_relayed_from_an_upstream(gateway: Gateway) -> None:
    answer = await gateway.client().moderations.create(model="openai-omni", input="hello")
    assert answer.id == "modr-fake"
    assert gateway.upstream.requests[0].fields == {
        "model": "omni-moderation-latest",
        "input": "hello",
    }


# -- rerank ----------------------------------------------------------------------------------


async def test_rerank_from_the_mock_on_every_path(gateway: Gateway) -> None:
    documents = ["Paris is in France", "Berlin is in Germany", "France borders Spain"]
    request = {"model": "ranker", "query": "Paris France", "documents": documents, "top_n": 2}
    for path in ("/v1/rerank", "/v2/rerank", "/rerank"):
        status, headers, body = await gateway.post(path, request)
        assert status == 200, body
        answer = json.loads(body)
        assert [result["index"] for result in answer["results"]] == [0, 2]
        assert answer["results"][0]["relevance_score"] == 1.0
        assert answer["meta"]["billed_units"] == {"search_units": 1}
        assert headers["x-crossway-cost-usd"] == "0.002"


async def test_rerank_relayed_to_a_cohere_upstream(gateway: Gateway) -> None:
    documents = [f"document {index}" for index in range(250)]
    status, headers, body = await gateway.post(
        "/v1/rerank",
        {"model": "cohere-rerank", "query": "which?", "documents": documents, "top_n": 3},
    )
    assert status == 200, body
    answer = json.loads(body)
    assert answer["id"] == "rerank-fake"
    assert [result["index"] for result in answer["results"]] == [0, 1, 2]
    [sent] = gateway.upstream.requests
    assert sent.path == "/v2/rerank"
    assert sent.fields["model"] == "rerank-v3.5"
    assert sent.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert headers["x-crossway-cost-usd"] == "0.006"  # the 3 search units the upstream billed


# -- Azure, and providers without the capability ---------------------------------------------


async def test_azure_serves_audio_and_images_at_its_deployment_urls(gateway: Gateway) -> None:
    client = gateway.client()
    text = await client.audio.transcriptions.create(
        model="azure-whisper", file=("a.mp3", b"mp3", "audio/mpeg"), response_format="text"
    )
    assert text == "heard a.mp3: 3 bytes"
    await client.images.generate(model="azure-painter", prompt="sky", size="1024x1024")
    paths = [request.path for request in gateway.upstream.requests]
    assert paths == [
        "/openai/deployments/whisper-deploy/audio/transcriptions?api-version=2024-10-21",
        "/openai/deployments/images-deploy/images/generations?api-version=2024-10-21",
    ]
    assert gateway.upstream.requests[0].headers["api-key"] == UPSTREAM_KEY


async def test_an_operation_a_provider_lacks_is_a_400_naming_both(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await gateway.client().moderations.create(model="azure-omni", input="x")
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] == "unsupported_operation"
    assert "'az'" in error["message"]
    assert "moderation" in error["message"]
    status, _, body = await gateway.post("/v1/moderations", {"model": "gemini-tts", "input": "hi"})
    assert status == 400
    assert "'gem'" in error_of(body)["message"]
    assert "moderation" in error_of(body)["message"]
    assert gateway.upstream.requests == []


async def test_a_failing_upstream_falls_back_and_its_error_is_sanitised(
    gateway: Gateway,
) -> None:
    raw = await gateway.client().audio.speech.with_raw_response.create(
        model="broken-tts", voice="alloy", input="hi"
    )
    assert raw.parse().content.startswith(b"crossway-mock-audio:mp3:")
    assert raw.headers["x-crossway-fallback"] == "tts"
    # The upstream failed twice (a retry, then the fallback) and echoed the key it was sent.
    assert [request.fields["model"] for request in gateway.upstream.requests] == ["fail-500"] * 2
    status, _, body = await gateway.post(
        "/v1/audio/speech", {"model": "up/fail-500", "voice": "x", "input": "hi"}
    )
    assert status == 502
    assert UPSTREAM_KEY not in body.decode()


async def test_pii_in_media_texts_is_masked_or_blocked(gateway: Gateway) -> None:
    client = gateway.client()
    await client.audio.speech.create(
        model="openai-tts", voice="alloy", input="Write to jane.doe@example.com today"
    )
    await client.moderations.create(model="openai-omni", input=["fine", "mail bob@example.org"])
    speech, moderation = gateway.upstream.requests
    assert "jane.doe@example.com" not in speech.fields["input"]
    assert "EMAIL" in speech.fields["input"]
    assert speech.fields["input"].startswith("Write to ")
    assert moderation.fields["input"][0] == "fine"
    assert "bob@example.org" not in moderation.fields["input"][1]
    status, _, body = await gateway.post(
        "/v1/rerank",
        {"model": "cohere-rerank", "query": "card 4111 1111 1111 1111", "documents": ["a"]},
    )
    assert status == 400
    assert error_of(body)["code"] == "pii_blocked"
    assert len(gateway.upstream.requests) == 2


async def test_a_model_the_config_does_not_route_is_refused_clearly(gateway: Gateway) -> None:
    # No model: OpenAI's default (dall-e-2), which this config does not route.
    status, _, body = await gateway.post("/v1/images/generations", {"prompt": "x"})
    error = error_of(body)
    assert (status, error["code"]) == (404, "model_not_found"), error
    assert "dall-e-2" in error["message"]


async def test_the_cache_lets_media_calls_by(gateway: Gateway) -> None:
    client = gateway.client()
    for _ in range(2):
        await client.moderations.create(model="openai-omni", input="same words")
    assert len(gateway.upstream.requests) == 2


# -- limits, budgets, the ledger -------------------------------------------------------------


async def test_a_budget_refuses_what_the_request_may_cost_before_it_is_sent(
    gateway: Gateway,
) -> None:
    client = gateway.client(BUDGETED)
    # Two standard 1024x1024 dall-e-3 images cost $0.08, within the $0.10 budget ...
    await client.images.generate(
        model="openai-painter", prompt="one", n=2, size="1024x1024", quality="standard"
    )
    # ... and one more of that size may be hd ($0.08, no quality named): more than is left.
    with pytest.raises(openai.RateLimitError) as refused:
        await client.images.generate(model="openai-painter", prompt="two", size="1024x1024")
    assert "may cost up to $0.08" in refused.value.message
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["code"] == "budget_exceeded"
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert len(gateway.upstream.requests) == 1  # the refused request never left


async def test_a_key_rpm_applies_to_media_routes(gateway: Gateway) -> None:
    client = gateway.client(LIMITED)
    await client.moderations.create(model="omni", input="one")
    await client.audio.speech.create(model="tts", voice="alloy", input="two")
    with pytest.raises(openai.RateLimitError):
        await client.images.generate(model="painter", prompt="three")


async def test_each_request_is_one_ledger_record_with_its_cost(gateway: Gateway) -> None:
    client = gateway.client()
    await client.audio.speech.create(model="tts", voice="alloy", input="x" * 1000)
    await client.images.generate(model="painter", prompt="p", quality="hd")
    await gateway.post("/v1/rerank", {"model": "ranker", "query": "q", "documents": ["d"]})
    dialects = {"openai_speech", "openai_images", "rerank"}
    records = await gateway.spend_logs(dialects, 3)
    costs = {record["dialect"]: record["cost_usd"] for record in records}
    assert costs == {"openai_speech": 0.015, "openai_images": 0.08, "rerank": 0.002}
    assert all(record["status"] == 200 and record["key_alias"] == "media" for record in records)
    lines = [json.loads(line) for line in gateway.logs.getvalue().splitlines() if line]
    access = [line for line in lines if line.get("event") == "request"]
    assert {line["dialect"] for line in access} >= dialects
    async with aiohttp.ClientSession() as session, session.get(gateway.url + "/metrics") as r:
        text = await r.text()
    assert 'crossway_requests_total{dialect="openai_speech",model="tts"' in text


# -- the upload bound ------------------------------------------------------------------------


async def test_an_announced_upload_over_the_bound_is_413(gateway: Gateway) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        await gateway.client().audio.transcriptions.create(
            model="whisper", file=("big.wav", b"\0" * (UPLOAD_LIMIT + 1), "audio/wav")
        )
    assert refused.value.status_code == 413
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["code"] == "request_too_large"


async def test_a_chunked_upload_is_refused_before_it_ends(gateway: Gateway) -> None:
    """The body never ends: a 413 proves the gateway stopped reading at the bound."""
    boundary = "cwtest"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode()

    async def endless() -> AsyncIterator[bytes]:
        yield head
        for _ in range(UPLOAD_LIMIT // 4096 + 2):
            yield b"\0" * 4096
        await asyncio.Event().wait()  # the rest never comes

    headers = {
        "Authorization": f"Bearer {ALLOWED}",
        "Content-Type": f"multipart/form-data; boundary={boundary}",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            gateway.url + "/v1/audio/transcriptions", data=endless(), headers=headers
        ) as response,
    ):
        assert response.status == 413
        assert error_of(await response.read())["code"] == "request_too_large"
