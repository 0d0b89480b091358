"""Streamed audio and image answers end to end: the openai SDK's streaming methods against the
gateway, served by the mock and by a fake OpenAI upstream on 127.0.0.1 that holds its last
piece back until the test lets it go — so each test sees the first piece reach the client while
the upstream has not sent its last (no clock involved). Every event is checked against OpenAI's
schema; each stream goes through auth, guardrails, masking, limits, budgets, the cost plugin
and the request logs unchanged, and its cost (from its final usage event) reaches the ledger; a
client that leaves mid-stream ends the upstream call and is accounted 499."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import openai
import pytest

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.fake_media import (
    IMAGE_QUALITY,
    IMAGE_SIZE,
    STREAMED_TOKENS,
    FakeMedia,
    fake_audio,
    fake_png,
    media_gateway,
)
from tests.schemas import validate_in

SPEC = "openai-media.openapi.json"
MASTER = "master-key-" + "fedcba9876543210" * 2
KEY = "sk-cw-streams-" + "abcdefghij" * 4
BUDGETED = "sk-cw-streams-budget-" + "klmnopqrst" * 4
SINGLE = "sk-cw-streams-single-" + "uvwxyzabcd" * 4
TTS_PER_CHARACTER = 0.000015  # tts-1, the catalog's
GPT_IMAGE_HIGH_SQUARE = 0.167  # gpt-image-1, high, 1024x1024
TRANSCRIBE_PER_TOKEN = (6.00e-6, 10.00e-6)  # gpt-4o-transcribe, input and output
MOCK_PER_TOKEN = (1.00e-6, 2.00e-6)  # every mock model, input and output


def config_text(tmp_path: Path, upstream: str) -> str:
    return textwrap.dedent(
        f"""
        server: {{access_log: true}}
        database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
        auth:
          master_key: "{MASTER}"
          keys:
            - {{key: "{KEY}", alias: streams}}
            - {{key: "{BUDGETED}", alias: budgeted, budget: {{max_usd: 0.2, period: 1d}}}}
            - {{key: "{SINGLE}", alias: single, max_parallel: 1}}
        providers:
          mock: {{type: mock, faults: true}}
          up: {{type: openai, base_url: "{upstream}/v1", api_key: "{UPSTREAM_KEY}"}}
        models:
          tts: [{{target: mock/tts-1}}]
          transcriber: [{{target: mock/gpt-4o-transcribe}}]
          painter: [{{target: mock/gpt-image-1}}]
          cut-painter: [{{target: mock/cut-2}}]
          up-tts: [{{target: up/tts-1}}]
          up-transcriber: [{{target: up/gpt-4o-transcribe}}]
          up-painter: [{{target: up/gpt-image-1}}]
          up-dropping: [{{target: up/drop-transcribe}}]
          up-dropping-tts: [{{target: up/drop-tts}}]
        guardrails:
          no-secrets: {{type: secrets, on: both, action: block}}
        plugins:
          - auth: {{}}
          - guardrails: {{default: [no-secrets]}}
          - masking: {{entities: {{email: mask}}}}
          - limits: {{}}
          - cost: {{}}
        telemetry:
          request_logs: {{store: payloads}}
        """
    )


class Gateway:
    def __init__(self, url: str, upstream: FakeMedia, logs: io.StringIO) -> None:
        self.url = url
        self.upstream = upstream
        self.logs = logs

    def client(self, key: str = KEY) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    def hold(self) -> asyncio.Event:
        """Make the upstream's streams wait before their last piece until the event is set."""
        held = self.upstream.hold = asyncio.Event()
        return held

    async def spend_log(self, request_id: str) -> dict[str, Any]:
        """The ledger's record of ``request_id``, once written (the ledger writes off the
        request's path)."""
        headers = {"Authorization": f"Bearer {MASTER}"}
        async with aiohttp.ClientSession() as session:
            for _ in range(200):
                async with session.get(self.url + "/admin/spend/logs", headers=headers) as r:
                    logs = await r.json()
                for record in logs["data"]:
                    if record["request_id"] == request_id:
                        return dict(record)
                await asyncio.sleep(0.05)
        raise AssertionError(f"no ledger record of {request_id}")

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as session, session.get(self.url + "/metrics") as r:
            return await r.text()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with media_gateway(tmp_path, config_text) as (url, fake, logs):
        yield Gateway(url, fake, logs)
    assert UPSTREAM_KEY not in logs.getvalue()
    assert KEY not in logs.getvalue()


async def first_of(items: AsyncIterator[Any]) -> Any:
    """The first item of ``items``, which must come while the upstream holds its last piece:
    a gateway that waited for the whole answer would never hand it over (a bounded wait, so
    that the test fails instead of hanging)."""
    try:
        return await asyncio.wait_for(anext(items), 30)
    except TimeoutError:
        raise AssertionError("nothing reached the client before the upstream's end") from None


def request_id(tag: str) -> dict[str, str]:
    return {"x-request-id": tag}


def one_pixel_png() -> bytes:
    return base64.b64decode(fake_png("source"))


# -- speech ----------------------------------------------------------------------------------


async def test_speech_audio_reaches_the_client_before_the_upstream_sent_its_last_byte(
    gateway: Gateway,
) -> None:
    held = gateway.hold()
    async with gateway.client().audio.speech.with_streaming_response.create(
        model="up-tts", voice="nova", input="say it", extra_headers=request_id("speech-audio")
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        assert response.headers["transfer-encoding"] == "chunked"
        pieces = response.iter_bytes()
        first = await first_of(pieces)
        assert gateway.upstream.finished == []  # the upstream still holds its last piece
        held.set()
        audio = first + b"".join([piece async for piece in pieces])
    assert first
    assert audio == fake_audio("say it")
    assert gateway.upstream.finished == ["/v1/audio/speech"]
    record = await gateway.spend_log("speech-audio")
    assert record["status"] == 200
    assert record["cost_usd"] == pytest.approx(len("say it") * TTS_PER_CHARACTER)


async def test_speech_events_are_relayed_as_the_upstream_sends_them(gateway: Gateway) -> None:
    held = gateway.hold()
    async with gateway.client().audio.speech.with_streaming_response.create(
        model="up-tts",
        voice="nova",
        input="stream it",
        stream_format="sse",
        extra_headers=request_id("speech-sse"),
    ) as response:
        assert response.headers["content-type"] == "text/event-stream"
        lines = response.iter_lines()
        first = await first_of(lines)
        assert gateway.upstream.finished == []
        held.set()
        rest = [line async for line in lines]
    events = [_event(line) for line in [first, *rest] if line]
    assert [event["type"] for event in events] == [
        "speech.audio.delta",
        "speech.audio.delta",
        "speech.audio.done",
    ]
    for event in events:
        validate_in(SPEC, "CreateSpeechResponseStreamEvent", event)
    audio = b"".join(base64.b64decode(event["audio"]) for event in events[:2])
    assert audio == fake_audio("stream it")
    record = await gateway.spend_log("speech-sse")
    # tts-1 is priced per character; the tokens the done event reports cost nothing
    assert record["cost_usd"] == pytest.approx(len("stream it") * TTS_PER_CHARACTER)
    assert "crossway_time_to_first_token_seconds_count{" in await gateway.metrics()


async def test_audio_that_fails_midway_is_cut_short_not_ended(gateway: Gateway) -> None:
    async with gateway.client().audio.speech.with_streaming_response.create(
        model="up-dropping-tts", voice="nova", input="cut me", extra_headers=request_id("cut")
    ) as response:
        pieces = response.iter_bytes()
        first = await first_of(pieces)
        with pytest.raises(httpx2.RemoteProtocolError):  # an incomplete body, not a whole file
            await anext(pieces)
    assert fake_audio("cut me").startswith(first)
    record = await gateway.spend_log("cut")
    assert record["status"] == 502


async def test_speech_from_the_mock_streams_audio_and_events(gateway: Gateway) -> None:
    client = gateway.client()
    async with client.audio.speech.with_streaming_response.create(
        model="tts", voice="alloy", input="mock me"
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        audio = b"".join([piece async for piece in response.iter_bytes()])
    assert audio.startswith(b"crossway-mock-audio:mp3:")
    async with client.audio.speech.with_streaming_response.create(
        model="tts", voice="alloy", input="mock me", stream_format="sse"
    ) as response:
        events = [_event(line) async for line in response.iter_lines() if line]
    for event in events:
        validate_in(SPEC, "CreateSpeechResponseStreamEvent", event)
    assert b"".join(base64.b64decode(event["audio"]) for event in events[:-1]) == audio


# -- transcriptions --------------------------------------------------------------------------


async def test_a_transcription_streams_from_an_upstream_and_is_priced_by_its_tokens(
    gateway: Gateway,
) -> None:
    held = gateway.hold()
    stream = await gateway.client().audio.transcriptions.create(
        model="up-transcriber",
        file=("talk.mp3", b"mp3 bytes" * 10, "audio/mpeg"),
        stream=True,
        extra_headers=request_id("transcript"),
    )
    events_in = stream.__aiter__()
    first = (await first_of(events_in)).model_dump(exclude_none=True)
    assert first["type"] == "transcript.text.delta"
    assert gateway.upstream.finished == []
    held.set()
    events = [first, *[event.model_dump(exclude_none=True) async for event in events_in]]
    for event in events:
        validate_in(SPEC, "CreateTranscriptionResponseStreamEvent", event)
    done = events[-1]
    assert done["type"] == "transcript.text.done"
    assert "".join(event["delta"] for event in events[:-1]) == done["text"]
    [sent] = gateway.upstream.requests
    assert sent.fields["stream"] == "true"
    assert sent.fields["model"] == "gpt-4o-transcribe"
    record = await gateway.spend_log("transcript")
    heard, said = STREAMED_TOKENS
    cost = heard * TRANSCRIBE_PER_TOKEN[0] + said * TRANSCRIBE_PER_TOKEN[1]
    assert record["cost_usd"] == pytest.approx(cost)
    assert (record["input_tokens"], record["output_tokens"]) == STREAMED_TOKENS


async def test_a_transcription_streams_from_the_mock(gateway: Gateway) -> None:
    stream = await gateway.client().audio.transcriptions.create(
        model="transcriber",
        file=("s.mp3", b"\0" * 16_000, "audio/mpeg"),
        stream=True,
        extra_headers=request_id("mock-transcript"),
    )
    events = [event.model_dump(exclude_none=True) async for event in stream]
    for event in events:
        validate_in(SPEC, "CreateTranscriptionResponseStreamEvent", event)
    assert events[-1]["text"] == "mock transcript of s.mp3 (16000 bytes)"
    record = await gateway.spend_log("mock-transcript")
    usage = events[-1]["usage"]
    cost = usage["input_tokens"] * MOCK_PER_TOKEN[0] + usage["output_tokens"] * MOCK_PER_TOKEN[1]
    assert record["cost_usd"] == pytest.approx(cost)


async def test_a_stream_that_fails_midway_ends_with_an_error_event(gateway: Gateway) -> None:
    stream = await gateway.client().audio.transcriptions.create(
        model="up-dropping",
        file=("cut.mp3", b"mp3", "audio/mpeg"),
        stream=True,
        extra_headers=request_id("dropped-upstream"),
    )
    received: list[dict[str, Any]] = []

    async def read_all() -> None:
        async for event in stream:
            received.append(event.model_dump(exclude_none=True))

    with pytest.raises(openai.APIError) as failed:
        await read_all()
    assert [event["type"] for event in received] == ["transcript.text.delta"]
    assert isinstance(failed.value.body, dict)
    assert failed.value.body["code"] == "upstream_unavailable"  # OpenAI's error object, in-band
    record = await gateway.spend_log("dropped-upstream")
    assert record["status"] == 502


# -- images ----------------------------------------------------------------------------------


async def test_images_stream_their_partial_images_from_an_upstream(gateway: Gateway) -> None:
    held = gateway.hold()
    stream = await gateway.client().images.generate(
        model="up-painter",
        prompt="a lighthouse",
        size=IMAGE_SIZE,  # type: ignore[arg-type]  # the SDK's literal
        quality=IMAGE_QUALITY,  # type: ignore[arg-type]
        stream=True,
        partial_images=2,
        extra_headers=request_id("images"),
    )
    events_in = stream.__aiter__()
    first = (await first_of(events_in)).model_dump(exclude_none=True)
    assert first["type"] == "image_generation.partial_image"
    assert gateway.upstream.finished == []
    held.set()
    events = [first, *[event.model_dump(exclude_none=True) async for event in events_in]]
    assert [event["type"] for event in events] == [
        "image_generation.partial_image",
        "image_generation.partial_image",
        "image_generation.completed",
    ]
    for event in events:
        validate_in(SPEC, "ImageGenStreamEvent", event)
    assert events[-1]["b64_json"] == fake_png("a lighthouse#0")
    [sent] = gateway.upstream.requests
    assert (sent.fields["stream"], sent.fields["partial_images"]) == (True, 2)
    record = await gateway.spend_log("images")
    assert record["cost_usd"] == pytest.approx(GPT_IMAGE_HIGH_SQUARE)


async def test_image_edits_stream_from_an_upstream_and_from_the_mock(gateway: Gateway) -> None:
    client = gateway.client()
    for model in ("up-painter", "painter"):
        stream = await client.images.edit(
            model=model,
            image=("in.png", one_pixel_png(), "image/png"),
            prompt="add a boat",
            stream=True,
            partial_images=1,
        )
        events = [event.model_dump(exclude_none=True) async for event in stream]
        assert [event["type"] for event in events] == [
            "image_edit.partial_image",
            "image_edit.completed",
        ], model
        for event in events:
            validate_in(SPEC, "ImageEditStreamEvent", event)
    sent = gateway.upstream.requests[-1]
    assert sent.fields["stream"] == "true"
    assert sent.files[0][:2] == ("image", "in.png")
    # the form goes upstream in pieces, with its length (not chunked)
    headers = {name.lower(): value for name, value in sent.headers.items()}
    assert "transfer-encoding" not in headers
    assert int(headers["content-length"]) > len(one_pixel_png())


async def test_a_mock_stream_cut_midway_ends_with_an_error_event(gateway: Gateway) -> None:
    stream = await gateway.client().images.generate(
        model="cut-painter", prompt="sea", stream=True, partial_images=3
    )
    received: list[str] = []

    async def read_all() -> None:
        async for event in stream:
            received.append(event.type)

    with pytest.raises(openai.APIError) as failed:
        await read_all()
    assert received == ["image_generation.partial_image"] * 2
    assert isinstance(failed.value.body, dict)
    assert failed.value.body["code"] == "upstream_unavailable"


async def test_images_stream_from_the_mock(gateway: Gateway) -> None:
    stream = await gateway.client().images.generate(
        model="painter", prompt="sea", n=2, stream=True, partial_images=2
    )
    events = [event.model_dump(exclude_none=True) async for event in stream]
    partial, completed = "image_generation.partial_image", "image_generation.completed"
    assert [event["type"] for event in events] == [partial, partial, completed] * 2
    for event in events:
        validate_in(SPEC, "ImageGenStreamEvent", event)


# -- budgets, limits, a client that leaves ---------------------------------------------------


async def test_a_budget_reserves_a_streams_worst_case_and_charges_its_usage(
    gateway: Gateway,
) -> None:
    client = gateway.client(BUDGETED)
    # Of the $0.20 budget, a high 1024x1024 image may cost $0.167: reserved, then charged
    stream = await client.images.generate(
        model="up-painter",
        prompt="one",
        size=IMAGE_SIZE,  # type: ignore[arg-type]
        quality=IMAGE_QUALITY,  # type: ignore[arg-type]
        stream=True,
    )
    assert [event.type async for event in stream] == ["image_generation.completed"]
    # ... so another one may cost more than is left, and is refused before it is sent
    with pytest.raises(openai.RateLimitError) as refused:
        await client.images.generate(
            model="up-painter",
            prompt="two",
            size=IMAGE_SIZE,  # type: ignore[arg-type]
            quality=IMAGE_QUALITY,  # type: ignore[arg-type]
            stream=True,
        )
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["code"] == "budget_exceeded"
    assert len(gateway.upstream.requests) == 1


async def test_a_stream_holds_its_parallel_slot_until_it_ends(gateway: Gateway) -> None:
    client = gateway.client(SINGLE)
    held = gateway.hold()
    async with client.audio.speech.with_streaming_response.create(
        model="up-tts", voice="nova", input="one at a time"
    ) as response:
        pieces = response.iter_bytes()
        await first_of(pieces)
        with pytest.raises(openai.RateLimitError):  # the stream still holds the one slot
            await client.audio.speech.create(model="tts", voice="alloy", input="two")
        held.set()
        async for _ in pieces:
            pass
    answer = await client.audio.speech.create(model="tts", voice="alloy", input="two")
    assert answer.content.startswith(b"crossway-mock-audio:")


async def test_a_client_that_leaves_mid_stream_ends_the_upstream_call(gateway: Gateway) -> None:
    gateway.hold()  # never set while the client reads: the upstream waits on its last piece
    text = "leave early"
    async with gateway.client().audio.speech.with_streaming_response.create(
        model="up-tts",
        voice="nova",
        input=text,
        stream_format="sse",
        extra_headers=request_id("left"),
    ) as response:
        first = await first_of(response.iter_lines())
        assert _event(first)["type"] == "speech.audio.delta"
    # The client closed its response: the gateway dropped the upstream call, which never ended
    for _ in range(200):
        if gateway.upstream.dropped:
            break
        await asyncio.sleep(0.02)
    assert gateway.upstream.dropped == ["/v1/audio/speech"]
    assert gateway.upstream.finished == []
    record = await gateway.spend_log("left")
    assert record["status"] == 499
    # charged what the request may cost (speech bills its characters), as it was reserved
    assert record["cost_usd"] == pytest.approx(len(text) * TTS_PER_CHARACTER)


def _event(line: str) -> dict[str, Any]:
    assert line.startswith("data: ")
    event: dict[str, Any] = json.loads(line[6:])
    return event
