"""The mock provider's media answers: deterministic, offline, in the vendors' shapes.

==================  ==========================================================================
operation           answer
==================  ==========================================================================
speech              ``crossway-mock-audio:<format>:`` and a SHA-256 of the voice and the text,
                    typed as the format asks (``audio/mpeg`` for mp3 …), in two pieces;
                    ``stream_format: sse``: two ``speech.audio.delta`` events (the same two
                    pieces) and a ``speech.audio.done`` event with token usage
transcription,      ``mock transcript of <file name> (<bytes> bytes)`` in the format asked
translation         (``json`` with ``usage.seconds``, ``verbose_json`` with ``duration``, ``text``,
                    ``srt``, ``vtt``; ``stream``: ``transcript.text.delta`` events, one a
                    word, and ``transcript.text.done`` with token usage: ten input tokens a
                    second, one output token a word); the audio's length is a WAV file's own,
                    else one second per 16,000 bytes
image generation,   ``n`` one-pixel PNG images whose colour is a hash of the prompt (and, for an
image edit          edit, of the images given), as ``b64_json`` or as ``data:`` URLs (``url``);
                    ``stream``: per image, ``partial_images`` ``image_generation.partial_image``
                    events (``image_edit.partial_image``: the same pixel), then one
                    ``image_generation.completed`` (``image_edit.completed``)
moderation          one result per input: a category is flagged when its name is a word of the
                    input (``violence``, ``hate`` …), every score 0.9 if flagged, else 0.001
rerank              Cohere's shape: documents scored by the share of the query's words they
                    hold, best first, ``top_n`` of them; one search unit per 100 documents
==================  ==========================================================================

A streamed call (``call.stream``) is answered as a :class:`~proxy.core.reply.MediaStream`: each
piece (an event, or a piece of audio) is one chunk, handed over one at a time, the first with
the request's worst case as a provisional usage and the last with the usage; otherwise the
pieces are joined into one answer.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
import struct
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any, NamedTuple, get_args

import msgspec

from proxy.core.audio import wav_seconds
from proxy.core.canonical import Call, MediaOperation, MediaUnits, Usage
from proxy.core.reply import Chunk, MediaAnswer, MediaStream
from proxy.providers.openai.media import worst_usage

OPERATIONS: frozenset[MediaOperation] = frozenset(get_args(MediaOperation))
BYTES_PER_SECOND = 16_000
"""The mock's idea of audio that is not WAV: 16,000 bytes a second."""

_AUDIO_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
_CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)
_WORD = re.compile(r"[\w-]+")
_JSON = "application/json"
_ENCODER = msgspec.json.Encoder()


class _Answer(NamedTuple):
    """An answer in the pieces a stream hands over one at a time (joined when whole)."""

    pieces: list[bytes]
    content_type: str
    usage: Usage | None


def media_answer(call: Call, model: str) -> MediaAnswer | MediaStream:
    """The mock's answer to the media ``call`` to ``model`` (see the module docstring)."""
    media = call.media
    assert media is not None  # a media call
    fields = media.fields
    match media.operation:
        case "speech":
            answer = _speech(fields)
        case "transcription" | "translation":
            answer = _transcript(call, media.operation)
        case "image_generation" | "image_edit":
            answer = _images(call)
        case "moderation":
            answer = _moderation(call, model)
        case "rerank":
            answer = _rerank(call, model)
    if call.stream:
        provisional = worst_usage(call)
        return MediaStream(answer.content_type, _streamed_pieces(answer, model, provisional))
    body = b"".join(answer.pieces)
    return MediaAnswer(body=body, content_type=answer.content_type, usage=answer.usage)


async def _streamed_pieces(
    answer: _Answer, model: str, provisional: Usage | None
) -> AsyncIterator[Chunk]:
    """``answer``'s pieces, one chunk each (the first with the ``provisional`` usage, as a
    provider's stream has), then a last chunk with its usage."""
    for piece in answer.pieces:
        yield Chunk(id="", model=model, choices=[], media=piece, usage=provisional)
        provisional = None
    yield Chunk(id="", model=model, choices=[], media=b"", usage=answer.usage)


def _speech(fields: dict[str, Any]) -> _Answer:
    text = str(fields.get("input", ""))
    audio_format = str(fields.get("response_format", "mp3"))
    digest = hashlib.sha256(f"{fields.get('voice')}\n{text}".encode()).digest()
    audio = f"crossway-mock-audio:{audio_format}:".encode() + digest
    halves = [audio[: len(audio) // 2], audio[len(audio) // 2 :]]
    if fields.get("stream_format") != "sse":
        kind = _AUDIO_TYPES.get(audio_format, "application/octet-stream")
        return _Answer(halves, kind, Usage(media=MediaUnits(characters=len(text))))
    tokens = -(-len(text) // 4)
    events: list[dict[str, Any]] = [
        *(
            {"type": "speech.audio.delta", "audio": base64.b64encode(half).decode()}
            for half in halves
        ),
        {
            "type": "speech.audio.done",
            "usage": {"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens},
        },
    ]
    usage = Usage(input=tokens, media=MediaUnits(characters=len(text)))
    return _event_stream(events, usage)


def _transcript(call: Call, operation: MediaOperation) -> _Answer:
    media = call.media
    assert media is not None
    audio = next(file for file in media.files if file.field == "file")
    seconds = wav_seconds(audio.data)
    if seconds is None:
        seconds = round(len(audio.data) / BYTES_PER_SECOND, 3)
    text = f"mock transcript of {audio.filename} ({len(audio.data)} bytes)"
    usage = Usage(media=MediaUnits(audio_seconds=seconds))
    if _streamed(media.fields):
        words = _words(text)
        heard = math.ceil(seconds * 10)
        tokens: dict[str, Any] = {
            "type": "tokens",
            "input_tokens": heard,
            "input_token_details": {"text_tokens": 0, "audio_tokens": heard},
            "output_tokens": len(words),
            "total_tokens": heard + len(words),
        }
        events: list[dict[str, Any]] = [
            *({"type": "transcript.text.delta", "delta": word} for word in words),
            {"type": "transcript.text.done", "text": text, "usage": tokens},
        ]
        return _event_stream(events, Usage(input=heard, output=len(words)))
    answer_format = media.fields.get("response_format", "json")
    if answer_format == "text":
        return _Answer([text.encode()], "text/plain", usage)
    if answer_format in ("srt", "vtt"):
        separator = "," if answer_format == "srt" else "."
        cue = f"{_clock(0.0, separator)} --> {_clock(seconds, separator)}\n{text}\n"
        body = f"1\n{cue}" if answer_format == "srt" else f"WEBVTT\n\n{cue}"
        return _Answer([body.encode()], "text/plain", usage)
    answer: dict[str, Any] = {"text": text}
    if answer_format == "verbose_json":
        answer = {
            "task": "transcribe" if operation == "transcription" else "translate",
            "language": "english",
            "duration": seconds,
            "text": text,
            "segments": [],
        }
    elif operation == "transcription":
        answer["usage"] = {"type": "duration", "seconds": math.ceil(seconds)}
    return _Answer([_ENCODER.encode(answer)], _JSON, usage)


def _clock(seconds: float, separator: str) -> str:
    millis = round(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{separator}{rest % 1000:03d}"


def _images(call: Call) -> _Answer:
    media = call.media
    assert media is not None
    fields = media.fields
    seed = hashlib.sha256(str(fields.get("prompt", "")).encode())
    for file in media.files:
        seed.update(file.data)
    count = int(fields.get("n") or 1)
    as_url = fields.get("response_format") == "url"
    data = []
    for index in range(count):
        png = base64.b64encode(_pixel(seed.digest()[index * 3 : index * 3 + 3])).decode()
        data.append({"url": f"data:image/png;base64,{png}"} if as_url else {"b64_json": png})
    worst = media.worst or MediaUnits()
    usage = Usage(
        media=MediaUnits(
            images=count, image_size=worst.image_size, image_quality=worst.image_quality
        )
    )
    if _streamed(fields):
        kind = "image_edit" if media.operation == "image_edit" else "image_generation"
        partials = int(fields.get("partial_images") or 0)
        events: list[dict[str, Any]] = []
        for item in data:
            image = item.get("b64_json") or item["url"].partition(",")[2]
            events.extend(_partial(kind, image, index) for index in range(partials))
            events.append(_completed(kind, image))
        return _event_stream(events, usage)
    body = _ENCODER.encode({"created": int(time.time()), "data": data})
    return _Answer([body], _JSON, usage)


def _image_event(kind: str, image: str) -> dict[str, Any]:
    """What every event of one image of a GPT image model's stream says."""
    return {
        "type": kind,
        "b64_json": image,
        "created_at": int(time.time()),
        "size": "auto",
        "quality": "auto",
        "background": "auto",
        "output_format": "png",
    }


def _partial(kind: str, image: str, index: int) -> dict[str, Any]:
    """The ``<kind>.partial_image`` event number ``index`` of one image."""
    return {**_image_event(f"{kind}.partial_image", image), "partial_image_index": index}


def _completed(kind: str, image: str) -> dict[str, Any]:
    """The ``<kind>.completed`` event of one image."""
    tokens = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    return {
        **_image_event(f"{kind}.completed", image),
        "usage": {**tokens, "input_tokens_details": {"text_tokens": 0, "image_tokens": 0}},
    }


def _streamed(fields: dict[str, Any]) -> bool:
    """Whether the request asked for an event stream (``stream``: JSON true, or a form's
    ``true``)."""
    return fields.get("stream") in (True, "true", "True", "1")


def _words(text: str) -> list[str]:
    """``text`` in pieces that join back to it (each word with the space before it)."""
    words = text.split(" ")
    return [words[0], *(f" {word}" for word in words[1:])]


def _event_stream(events: list[dict[str, Any]], usage: Usage) -> _Answer:
    frames = [b"data: " + _ENCODER.encode(event) + b"\n\n" for event in events]
    return _Answer(frames, "text/event-stream", usage)


def _pixel(rgb: bytes) -> bytes:
    """A one-pixel PNG of colour ``rgb``."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload)
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + rgb)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def _moderation(call: Call, model: str) -> _Answer:
    media = call.media
    assert media is not None
    given = media.fields.get("input", "")
    inputs = [given] if isinstance(given, str) else list(given)
    results = []
    for item in inputs:
        text = (
            item
            if isinstance(item, str)
            else str(item.get("text", ""))
            if isinstance(item, dict)
            else ""
        )
        words = {word.lower() for word in _WORD.findall(text)}
        flags = {name: name.split("/")[0] in words for name in _CATEGORIES}
        results.append(
            {
                "flagged": any(flags.values()),
                "categories": flags,
                "category_scores": {name: 0.9 if hit else 0.001 for name, hit in flags.items()},
                "category_applied_input_types": {name: ["text"] for name in _CATEGORIES},
            }
        )
    answer = {"id": f"modr-mock-{call.request_id[:32]}", "model": model, "results": results}
    return _Answer([_ENCODER.encode(answer)], _JSON, Usage(input=media.tokens))


def _rerank(call: Call, model: str) -> _Answer:
    media = call.media
    assert media is not None
    fields = media.fields
    query = {word.lower() for word in _WORD.findall(str(fields.get("query", "")))}
    documents = list(fields.get("documents", []))
    scored = []
    for index, document in enumerate(documents):
        text = document if isinstance(document, str) else str(document.get("text", ""))
        words = {word.lower() for word in _WORD.findall(text)}
        score = len(query & words) / len(query) if query else 0.0
        scored.append((-score, index, text))
    scored.sort()
    top = fields.get("top_n") or len(scored)
    results: list[dict[str, Any]] = []
    for negative, index, text in scored[:top]:
        result: dict[str, Any] = {"index": index, "relevance_score": round(-negative, 6)}
        if fields.get("return_documents"):
            result["document"] = {"text": text}
        results.append(result)
    units = math.ceil(len(documents) / 100)
    answer = {
        "id": f"rerank-mock-{call.request_id[:32]}",
        "results": results,
        "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": units}},
    }
    return _Answer([_ENCODER.encode(answer)], _JSON, Usage(media=MediaUnits(search_units=units)))
