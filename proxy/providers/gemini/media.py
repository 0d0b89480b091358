"""Gemini's media: image generation through Imagen and speech through Gemini's TTS models,
answered in OpenAI's shapes. Pure translation.

**Images** (``POST /v1/images/generations`` → ``{base_url}/models/{model}:predict``): the body
is ``{"instances": [{"prompt"}], "parameters": {"sampleCount": n, "aspectRatio"}}``; OpenAI's
``size`` (``WxH``) becomes the supported aspect ratio nearest to it (``1:1``, ``3:4``, ``4:3``,
``9:16``, ``16:9``; one more than 10% off any of them is a 400 naming ``size``); Imagen's own
``aspectRatio``, ``imageSize`` and ``personGeneration`` (or their snake_case names) are passed
in ``parameters``; ``n`` is at most 4 (more is a 400); ``quality``, ``style`` and OpenAI's
other fields have no equivalent and are dropped. Imagen answers images as bytes only:
``response_format: url`` is a 400. The answer ``{"predictions": [{"bytesBase64Encoded",
"mimeType"}]}`` becomes OpenAI's ``ImagesResponse`` (``created``, ``data: [{"b64_json"}]``);
predictions the safety filters removed (``raiFilteredReason``) are left out, and an answer
whose every image was removed is a 400 ``content_policy_violation``. Usage: the images
returned, of the size and quality the request named
(:class:`~proxy.core.canonical.MediaUnits`), priced per image by the catalog.

**Speech** (``POST /v1/audio/speech`` → ``{base_url}/models/{model}:generateContent``): the
``input`` is the one user text (after ``instructions`` and a colon when given: Gemini's TTS
models take their direction in the prompt, "Say cheerfully: …"); ``generationConfig`` asks for
``responseModalities: ["AUDIO"]`` and
``speechConfig.voiceConfig.prebuiltVoiceConfig.voiceName`` = ``voice`` (a Gemini voice such as
``Kore``; ``{"id": …}`` names one too). Gemini speaks raw 16-bit mono PCM (24 kHz, per the
part's ``mimeType`` ``audio/L16;…;rate=24000``): it is sent as a WAV file (``response_format``
absent or ``wav``) or as the raw PCM (``pcm``, which is OpenAI's own 24 kHz 16-bit format);
``mp3``, ``opus``, ``aac`` and ``flac`` would need an encoder and are a 400 naming
``response_format``, as are ``stream_format: sse`` and a ``speed`` other than 1. Usage: the
tokens Gemini reports (``usageMetadata``; text in, audio out), priced per token.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import Struct

from proxy.core.canonical import Call, MediaOperation, MediaUnits, Usage
from proxy.core.errors import BadRequest, ContentPolicyViolation, UpstreamError
from proxy.core.reply import MediaAnswer
from proxy.providers.base import malformed
from proxy.providers.gemini.stream import decode_response

if TYPE_CHECKING:
    from proxy.providers.gemini.provider import GeminiProvider

OPERATIONS: frozenset[MediaOperation] = frozenset({"image_generation", "speech"})
"""The media operations a Gemini provider serves."""

ASPECT_RATIOS: Mapping[str, float] = {
    "1:1": 1.0,
    "3:4": 3 / 4,
    "4:3": 4 / 3,
    "9:16": 9 / 16,
    "16:9": 16 / 9,
}
"""Imagen's aspect ratios (width over height)."""

MAX_IMAGES = 4
"""The most images one Imagen request makes (``sampleCount``)."""

_RATIO_TOLERANCE = 0.10
_IMAGEN_PARAMETERS = {
    "aspectRatio": "aspectRatio",
    "aspect_ratio": "aspectRatio",
    "imageSize": "imageSize",
    "image_size": "imageSize",
    "personGeneration": "personGeneration",
    "person_generation": "personGeneration",
}
_SPEECH_FORMATS = frozenset({"wav", "pcm"})
_PCM_RATE = re.compile(r"rate=(\d+)")
_DEFAULT_PCM_RATE = 24_000
_ENCODER = msgspec.json.Encoder()


class _Prediction(Struct, rename="camel"):
    bytes_base64_encoded: str | None = None
    mime_type: str = "image/png"
    rai_filtered_reason: str | None = None


class _Predictions(Struct):
    predictions: list[_Prediction] = msgspec.field(default_factory=list)


_PREDICTIONS = msgspec.json.Decoder(_Predictions)


def build_gemini_media(base: str, model_path: str, call: Call) -> tuple[str, bytes]:
    """The URL (below ``base``) and body of the media ``call`` to the model at ``model_path``
    (``models/…``). Raises :class:`BadRequest` for what the operation cannot express."""
    media = call.media
    assert media is not None  # a media call
    if media.operation == "image_generation":
        return f"{base}/{model_path}:predict", _ENCODER.encode(_imagen_body(media.fields))
    return f"{base}/{model_path}:generateContent", _ENCODER.encode(_speech_body(media.fields))


def _imagen_body(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The ``predict`` body of an image generation (see the module docstring)."""
    if fields.get("response_format") == "url":
        raise BadRequest(
            "Imagen answers images as bytes only: ask for response_format b64_json",
            param="response_format",
        )
    count = fields.get("n") or 1
    if count > MAX_IMAGES:
        raise BadRequest(f"Imagen makes at most {MAX_IMAGES} images a request", param="n")
    parameters: dict[str, Any] = {"sampleCount": count}
    size = fields.get("size")
    if isinstance(size, str) and size != "auto":
        parameters["aspectRatio"] = aspect_ratio(size)
    for name, wire in _IMAGEN_PARAMETERS.items():
        if name in fields:
            parameters[wire] = fields[name]
    return {"instances": [{"prompt": fields["prompt"]}], "parameters": parameters}


def aspect_ratio(size: str) -> str:
    """Imagen's aspect ratio nearest to OpenAI's ``size`` (``WxH``). Raises
    :class:`BadRequest` naming ``size`` when it is not ``WxH`` or no ratio is within 10%."""
    width, _, height = size.lower().partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise BadRequest(f"expected a size such as 1024x1024, not {size!r}", param="size")
    wanted = math.log(int(width) / int(height))
    name, ratio = min(ASPECT_RATIOS.items(), key=lambda item: abs(math.log(item[1]) - wanted))
    if abs(math.log(ratio) - wanted) > math.log1p(_RATIO_TOLERANCE):
        ratios = ", ".join(ASPECT_RATIOS)
        raise BadRequest(
            f"Imagen makes images of the aspect ratios {ratios}; {size} is none of them",
            param="size",
        )
    return name


def _speech_body(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The ``generateContent`` body of a speech request (see the module docstring)."""
    response_format = fields.get("response_format", "wav")
    if response_format not in _SPEECH_FORMATS:
        raise BadRequest(
            "Gemini speaks PCM: ask for response_format wav or pcm", param="response_format"
        )
    if fields.get("stream_format", "audio") != "audio":
        raise BadRequest(
            "Gemini speech is answered whole: stream_format sse is not served",
            param="stream_format",
        )
    if fields.get("speed", 1) != 1:
        raise BadRequest("Gemini speech has no speed setting", param="speed")
    voice = fields.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    if not isinstance(voice, str) or not voice:
        raise BadRequest("expected a Gemini voice name, such as Kore", param="voice")
    text = fields["input"]
    instructions = fields.get("instructions")
    if isinstance(instructions, str) and instructions:
        text = f"{instructions}: {text}"
    return {
        "contents": [{"role": "user", "parts": [{"text": text}]}],
        "generationConfig": {
            "responseModalities": ["AUDIO"],
            "speechConfig": {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": voice}}},
        },
    }


def parse_gemini_media(provider: GeminiProvider, body: bytes, call: Call) -> MediaAnswer:
    """The client's answer from a 2xx ``predict`` or ``generateContent`` answer. Raises
    :class:`UpstreamError` for a body that does not decode or holds no image or audio, and
    :class:`ContentPolicyViolation` when the safety filters removed every image."""
    media = call.media
    assert media is not None  # a media call
    if media.operation == "image_generation":
        return _images(provider.name, body, media.worst or MediaUnits())
    return _speech(provider, body, call)


def _images(provider: str, body: bytes, asked: MediaUnits) -> MediaAnswer:
    try:
        predictions = _PREDICTIONS.decode(body).predictions
    except msgspec.DecodeError as exc:
        raise malformed(provider, "Imagen answer", exc) from None
    images = [{"b64_json": p.bytes_base64_encoded} for p in predictions if p.bytes_base64_encoded]
    if not images:
        filtered = [p.rai_filtered_reason for p in predictions if p.rai_filtered_reason]
        if filtered:
            raise ContentPolicyViolation(
                f"the provider's safety filters removed every image: {filtered[0]}",
                upstream_status=200,
                status=400,
                provider=provider,
            )
        raise UpstreamError("Imagen answered no image", upstream_status=200, provider=provider)
    answer = {"created": int(time.time()), "data": images}
    units = MediaUnits(
        images=len(images), image_size=asked.image_size, image_quality=asked.image_quality
    )
    return MediaAnswer(
        body=_ENCODER.encode(answer), content_type="application/json", usage=Usage(media=units)
    )


def _speech(provider: GeminiProvider, body: bytes, call: Call) -> MediaAnswer:
    media = call.media
    assert media is not None
    wire = decode_response(provider, body, "speech answer")
    pcm: list[bytes] = []
    rate = _DEFAULT_PCM_RATE
    for candidate in wire.candidates[:1]:
        for part in candidate.content.parts if candidate.content is not None else ():
            blob = part.inline_data
            if isinstance(blob, msgspec.UnsetType) or not blob.mime_type.startswith("audio/"):
                continue
            found = _PCM_RATE.search(blob.mime_type)
            rate = int(found.group(1)) if found else rate
            try:
                pcm.append(base64.b64decode(blob.data, validate=True))
            except (binascii.Error, ValueError) as exc:
                raise malformed(provider.name, "speech answer", exc) from None
    if not pcm:
        raise UpstreamError("Gemini answered no audio", upstream_status=200, provider=provider.name)
    audio = b"".join(pcm)
    usage = wire.usage_metadata.canonical() if wire.usage_metadata is not None else None
    if media.fields.get("response_format") == "pcm":
        return MediaAnswer(body=audio, content_type="audio/pcm", usage=usage)
    return MediaAnswer(body=wav_file(audio, rate), content_type="audio/wav", usage=usage)


def wav_file(pcm: bytes, rate: int, channels: int = 1, sample_bytes: int = 2) -> bytes:
    """``pcm`` (little-endian samples) as a WAV file: the RIFF header, then the samples."""
    block = channels * sample_bytes
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + len(pcm),
        b"WAVE",
        b"fmt ",
        16,
        1,  # PCM
        channels,
        rate,
        rate * block,
        block,
        sample_bytes * 8,
        b"data",
        len(pcm),
    )
    return header + pcm
