"""proxy/providers/gemini/media.py: Imagen and Gemini TTS requests built from OpenAI's, their
answers read back in OpenAI's shapes, and what cannot be expressed or read refused. The HTTP
round trips are tests/e2e/test_media_vendors.py's."""

from __future__ import annotations

import base64
import io
import json
import wave
from typing import Any

import pytest

from proxy.core.canonical import Call, MediaOperation, MediaRequest, MediaUnits, Usage
from proxy.core.errors import BadRequest, ContentPolicyViolation, UpstreamError
from proxy.providers.gemini.media import aspect_ratio, wav_file
from proxy.providers.gemini.provider import GeminiConfig, GeminiProvider

GEMINI = GeminiProvider("gem", GeminiConfig(base_url="https://g.example/v1beta", api_key="g-k"))


def call(
    operation: MediaOperation, fields: dict[str, Any], worst: MediaUnits | None = None
) -> Call:
    media = MediaRequest(operation, fields, worst=worst)
    return Call(request_id="r", dialect="d", model="alias", messages=[], media=media)


@pytest.mark.parametrize(
    ("size", "ratio"),
    [
        ("1024x1024", "1:1"),
        ("1792x1024", "16:9"),
        ("1024x1792", "9:16"),
        ("1024x768", "4:3"),
        ("768x1024", "3:4"),
    ],
)
def test_a_size_becomes_the_nearest_aspect_ratio(size: str, ratio: str) -> None:
    assert aspect_ratio(size) == ratio


def test_more_images_than_imagen_makes_is_a_400_naming_n() -> None:
    with pytest.raises(BadRequest) as refused:
        GEMINI.build_media(call("image_generation", {"prompt": "p", "n": 5}), "imagen")
    assert refused.value.param == "n"


@pytest.mark.parametrize("size", ["1536x1024", "1000x200", "big", "0x10", "10x"])
def test_a_size_no_ratio_is_near_is_a_400_naming_it(size: str) -> None:
    with pytest.raises(BadRequest) as refused:
        aspect_ratio(size)
    assert refused.value.param == "size"


def test_imagen_request_carries_its_parameters_and_the_key() -> None:
    fields = {"prompt": "fox", "n": 3, "size": "auto", "person_generation": "dont_allow",
              "quality": "hd", "style": "vivid"}  # fmt: skip
    request = GEMINI.build_media(call("image_generation", fields), "imagen-4.0-generate-001")
    assert request.url == "https://g.example/v1beta/models/imagen-4.0-generate-001:predict"
    assert request.headers["x-goog-api-key"] == "g-k"
    assert json.loads(request.body) == {
        "instances": [{"prompt": "fox"}],
        "parameters": {"sampleCount": 3, "personGeneration": "dont_allow"},
    }


def test_imagen_answer_leaves_out_filtered_images_and_counts_the_rest() -> None:
    body = json.dumps(
        {"predictions": [{"bytesBase64Encoded": "QUJD", "mimeType": "image/png"},
                         {"raiFilteredReason": "filtered"}]}
    ).encode()  # fmt: skip
    asked = MediaUnits(images=2, image_size="1024x1024")
    answer = GEMINI.parse_media({}, body, call("image_generation", {"prompt": "x"}, asked), "m")
    assert json.loads(answer.body)["data"] == [{"b64_json": "QUJD"}]
    assert answer.usage == Usage(media=MediaUnits(images=1, image_size="1024x1024"))


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b'{"predictions": [{"raiFilteredReason": "unsafe"}]}', ContentPolicyViolation),
        (b'{"predictions": []}', UpstreamError),
        (b"not json", UpstreamError),
    ],
)
def test_an_imagen_answer_without_images_is_an_error(body: bytes, error: type) -> None:
    with pytest.raises(error):
        GEMINI.parse_media({}, body, call("image_generation", {"prompt": "x"}), "m")


def test_speech_request_asks_for_audio_in_the_voice_named() -> None:
    fields = {"input": "hi", "voice": {"id": "Kore"}, "response_format": "wav"}
    request = GEMINI.build_media(call("speech", fields), "gemini-2.5-flash-preview-tts")
    assert request.url.endswith("/models/gemini-2.5-flash-preview-tts:generateContent")
    body = json.loads(request.body)
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert body["generationConfig"]["speechConfig"]["voiceConfig"] == {
        "prebuiltVoiceConfig": {"voiceName": "Kore"}
    }


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"response_format": "mp3"}, "response_format"),
        ({"response_format": "opus"}, "response_format"),
        ({"stream_format": "sse"}, "stream_format"),
        ({"speed": 1.5}, "speed"),
        ({"voice": {"name": "x"}}, "voice"),
    ],
)
def test_speech_gemini_cannot_make_is_a_400_naming_the_field(extra: dict, param: str) -> None:
    with pytest.raises(BadRequest) as refused:
        GEMINI.build_media(call("speech", {"input": "hi", "voice": "Kore", **extra}), "tts")
    assert refused.value.param == param


def _speech_answer(rate: int, pcm: bytes) -> bytes:
    part = {"inlineData": {"mimeType": f"audio/L16;codec=pcm;rate={rate}",
                           "data": base64.b64encode(pcm).decode()}}  # fmt: skip
    return json.dumps(
        {
            "candidates": [{"content": {"parts": [part]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 7},
        }
    ).encode()


def test_speech_answer_is_a_wav_file_at_the_parts_rate_and_bills_tokens() -> None:
    pcm = b"\x01\x00\x02\x00" * 100
    answer = GEMINI.parse_media(
        {}, _speech_answer(16000, pcm), call("speech", {"input": "hi", "voice": "K"}), "tts"
    )
    assert answer.content_type == "audio/wav"
    with wave.open(io.BytesIO(answer.body)) as audio:
        assert (audio.getframerate(), audio.getnframes()) == (16000, 200)
        assert audio.readframes(200) == pcm
    assert answer.usage == Usage(input=2, output=7)


def test_speech_answer_as_pcm_is_the_samples_themselves() -> None:
    fields = {"input": "hi", "voice": "K", "response_format": "pcm"}
    answer = GEMINI.parse_media({}, _speech_answer(24000, b"\x00\x01"), call("speech", fields), "t")
    assert (answer.body, answer.content_type) == (b"\x00\x01", "audio/pcm")


def test_a_speech_answer_without_audio_is_an_error() -> None:
    body = b'{"candidates": [{"content": {"parts": [{"text": "no"}]}}]}'
    with pytest.raises(UpstreamError):
        GEMINI.parse_media({}, body, call("speech", {"input": "hi", "voice": "K"}), "t")


def test_wav_file_header_is_what_the_wave_module_reads() -> None:
    with wave.open(io.BytesIO(wav_file(b"\x00\x00" * 24000, 24000))) as audio:
        assert (audio.getnchannels(), audio.getsampwidth(), audio.getnframes()) == (1, 2, 24000)
