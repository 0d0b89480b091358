"""proxy/providers/openai/media.py: media requests as JSON or rebuilt multipart forms, answers
passed on as they came, and what each answer billed."""

from __future__ import annotations

import email.parser
import email.policy
import json
from typing import Any

import pytest

from proxy.core.canonical import Call, MediaFile, MediaOperation, MediaRequest, MediaUnits, Usage
from proxy.core.errors import UpstreamError, UpstreamResponseTooLarge
from proxy.providers.openai.media import StreamMeter, build_media, media_usage, parse_media

BASE = "https://api.example/v1"
HEADERS = {"content-type": "application/json", "authorization": "Bearer k"}


def _call(
    operation: MediaOperation,
    fields: dict[str, Any],
    files: list[MediaFile] | None = None,
    worst: MediaUnits | None = None,
    tokens: int = 0,
) -> Call:
    media = MediaRequest(operation, fields, files or [], worst=worst, tokens=tokens)
    return Call(request_id="r1", dialect="d", model="alias", messages=[], media=media)


def _form(body: bytes, content_type: str) -> list[tuple[str, str | None, bytes]]:
    """The parts of a multipart body: (name, filename, payload)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"content-type: {content_type}\r\n\r\n".encode() + body
    )
    parts = []
    for part in message.iter_parts():
        disposition = part.get("content-disposition")
        params = dict(disposition.params)
        parts.append((params["name"], params.get("filename"), part.get_payload(decode=True)))
    return parts


def test_a_json_operation_sends_its_fields_with_the_upstream_model() -> None:
    call = _call("speech", {"input": "hi", "voice": "alloy"})
    call.upstream_headers = {"x-trace": "1"}
    request = build_media(BASE, HEADERS, call, "tts-1")
    assert request.url == BASE + "/audio/speech"
    assert json.loads(request.body) == {"model": "tts-1", "input": "hi", "voice": "alloy"}
    assert request.headers["authorization"] == "Bearer k"
    assert request.headers["x-trace"] == "1"


@pytest.mark.parametrize(
    ("operation", "path"),
    [
        ("image_generation", "/images/generations"),
        ("moderation", "/moderations"),
        ("rerank", "/rerank"),
    ],
)
def test_each_json_operation_has_its_path(operation: MediaOperation, path: str) -> None:
    assert build_media(BASE, HEADERS, _call(operation, {}), "m").url == BASE + path


def test_an_upload_is_rebuilt_as_a_form_with_its_files() -> None:
    audio = MediaFile("file", 'we"ird\r\nname.wav', "audio/wav", b"RIFF\x00\xff")
    call = _call("transcription", {"language": "en", "include[]": ["logprobs", "x"]}, [audio])
    request = build_media(BASE, HEADERS, call, "whisper-1")
    assert request.url == BASE + "/audio/transcriptions"
    content_type = request.headers["content-type"]
    assert content_type.startswith("multipart/form-data; boundary=crossway-")
    assert "application/json" not in request.headers.values()
    assert isinstance(request.body, tuple)  # in pieces: the file's bytes are not copied
    assert any(piece is audio.data for piece in request.body)
    body = b"".join(request.body)
    assert request.headers["content-length"] == str(len(body))
    assert _form(body, content_type) == [
        ("model", None, b"whisper-1"),
        ("language", None, b"en"),
        ("include[]", None, b"logprobs"),
        ("include[]", None, b"x"),
        ("file", "we%22irdname.wav", b"RIFF\x00\xff"),
    ]


@pytest.mark.parametrize(
    ("operation", "content_type", "body", "worst", "usage"),
    [
        (
            "transcription",
            "application/json",
            b'{"text":"x","usage":{"type":"duration","seconds":12}}',
            None,
            Usage(media=MediaUnits(audio_seconds=12)),
        ),
        (
            "transcription",
            "application/json",
            b'{"text":"x","usage":{"type":"tokens","input_tokens":30,"output_tokens":5}}',
            None,
            Usage(input=30, output=5),
        ),
        (
            "translation",
            "application/json; charset=utf-8",
            b'{"text":"x","duration":3.5,"language":"fr"}',
            None,
            Usage(media=MediaUnits(audio_seconds=3.5)),
        ),
        (
            "transcription",
            "text/plain",
            b"WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nhi\n\n00:00:02.500 --> 00:01:04.125\nyo\n",
            None,
            Usage(media=MediaUnits(audio_seconds=64.125)),
        ),
        ("transcription", "text/plain", b"just text", None, None),
        (
            "transcription",
            "text/plain",
            b"just text",
            MediaUnits(audio_seconds=2.0),
            Usage(media=MediaUnits(audio_seconds=2.0)),
        ),
        (
            "image_generation",
            "application/json",
            b'{"created":1,"data":[{"b64_json":"AAAA"},{"b64_json":"BBBB"}],"quality":"high"}',
            MediaUnits(images=3, image_size="1024x1024"),
            Usage(media=MediaUnits(images=2, image_size="1024x1024", image_quality="high")),
        ),
        (
            "rerank",
            "application/json",
            b'{"results":[],"meta":{"billed_units":{"search_units":4}}}',
            MediaUnits(search_units=1),
            Usage(media=MediaUnits(search_units=4)),
        ),
        (
            "rerank",
            "application/json",
            b'{"results":[]}',
            MediaUnits(search_units=1),
            Usage(media=MediaUnits(search_units=1)),
        ),
        (
            "speech",
            "audio/mpeg",
            b"\xff\xfb",
            MediaUnits(characters=42),
            Usage(media=MediaUnits(characters=42)),
        ),
    ],
    ids=[
        "seconds",
        "tokens",
        "duration",
        "vtt-last-cue",
        "text-unknown",
        "text-wav",
        "images",
        "rerank-billed",
        "rerank-request",
        "speech",
    ],
)
def test_what_an_answer_billed(
    operation: MediaOperation,
    content_type: str,
    body: bytes,
    worst: MediaUnits | None,
    usage: Usage | None,
) -> None:
    assert media_usage("up", content_type, body, _call(operation, {}, worst=worst)) == usage


def test_the_answer_is_passed_on_undecoded_with_its_type() -> None:
    call = _call("speech", {}, worst=MediaUnits(characters=1))
    answer = parse_media("up", {"content-type": "audio/wav"}, b"RIFFdata", call)
    assert (answer.body, answer.content_type) == (b"RIFFdata", "audio/wav")


def test_a_json_answer_that_does_not_decode_is_an_upstream_error() -> None:
    call = _call("transcription", {})
    with pytest.raises(UpstreamError) as failed:
        media_usage("up", "application/json", b"{not json", call)
    assert failed.value.status == 502
    assert "malformed transcription answer" in failed.value.message


# -- streamed answers: the meter -------------------------------------------------------------


def _frames(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)


def _metered(
    call: Call,
    body: bytes,
    content_type: str = "text/event-stream",
    *,
    piece: int = 7,
    max_event: int = 1 << 20,
    max_body: int = 1 << 20,
) -> Usage | None:
    """The usage a meter reads from ``body`` fed in ``piece``-byte pieces."""
    meter = StreamMeter("up", content_type, call, max_event, max_body)
    for start in range(0, len(body), piece):
        meter.feed(body[start : start + piece])
    return meter.usage()


def test_streamed_speech_is_its_tokens_and_its_characters() -> None:
    call = _call("speech", {}, worst=MediaUnits(characters=11), tokens=3)
    body = _frames(
        {"type": "speech.audio.delta", "audio": "AAAA"},
        {"type": "speech.audio.done", "usage": {"input_tokens": 4, "output_tokens": 50}},
    )
    assert _metered(call, body) == Usage(input=4, output=50, media=MediaUnits(characters=11))
    # audio bytes are not read: the characters the request speaks
    audio = _metered(call, b"\xff\xfb" * 100, "audio/mpeg")
    assert audio == Usage(input=3, media=MediaUnits(characters=11))


def test_a_streamed_transcript_is_its_tokens_or_its_seconds() -> None:
    call = _call("transcription", {})
    tokens = {"type": "tokens", "input_tokens": 40, "output_tokens": 9, "total_tokens": 49}
    body = _frames(
        {"type": "transcript.text.delta", "delta": "hi"},
        {"type": "transcript.text.done", "text": "hi", "usage": tokens},
    )
    assert _metered(call, body) == Usage(input=40, output=9)
    seconds = {"type": "duration", "seconds": 3.5}
    timed = _frames({"type": "transcript.text.done", "text": "hi", "usage": seconds})
    assert _metered(call, timed) == Usage(media=MediaUnits(audio_seconds=3.5))
    assert _metered(call, _frames({"type": "transcript.text.delta", "delta": "cut"})) is None


def test_streamed_images_are_their_completed_events_not_their_partial_images() -> None:
    worst = MediaUnits(images=2, image_size="", image_quality="")
    call = _call("image_generation", {}, worst=worst)
    usage = {"input_tokens": 10, "output_tokens": 100, "total_tokens": 110}
    image = {"b64_json": "QUJD" * 1000, "size": "1024x1536", "quality": "high"}
    body = _frames(
        {"type": "image_generation.partial_image", **image, "partial_image_index": 0},
        {"type": "image_generation.completed", **image, "usage": usage},
        {"type": "image_generation.partial_image", **image, "partial_image_index": 0},
        {"type": "image_generation.completed", **image, "usage": usage},
    )
    expected = Usage(
        input=20,
        output=200,
        media=MediaUnits(images=2, image_size="1024x1536", image_quality="high"),
    )
    assert _metered(call, body, piece=500) == expected
    auto = _frames({"type": "image_edit.completed", "b64_json": "", "size": "auto"})
    edit = _call("image_edit", {}, worst=MediaUnits(images=1, image_size="512x512"))
    assert _metered(edit, auto) == Usage(media=MediaUnits(images=1, image_size="512x512"))


def test_an_answer_that_is_not_an_event_stream_is_read_whole_at_its_end() -> None:
    call = _call("transcription", {})
    body = json.dumps({"text": "hi", "usage": {"type": "duration", "seconds": 2}}).encode()
    assert _metered(call, body, "application/json") == Usage(media=MediaUnits(audio_seconds=2.0))
    worst = _call("transcription", {}, worst=MediaUnits(audio_seconds=1.5))
    broken = _metered(worst, b"{not json", "application/json")
    assert broken == Usage(media=MediaUnits(audio_seconds=1.5))  # relayed already: the bound


def test_a_meter_holds_at_most_one_event_or_one_body() -> None:
    call = _call("image_generation", {}, worst=MediaUnits(images=1))
    big = _frames({"type": "image_generation.completed", "b64_json": "A" * 5000})
    with pytest.raises(UpstreamResponseTooLarge):
        _metered(call, big, max_event=2048, piece=1000)
    assert _metered(call, big, max_event=8192, piece=1000) is not None
    transcript = _call("transcription", {})
    with pytest.raises(UpstreamResponseTooLarge):
        _metered(transcript, b"x" * 3000, "text/plain", max_body=2048, piece=1000)


def test_a_meters_bound_is_the_requests_worst_case() -> None:
    call = _call("speech", {}, worst=MediaUnits(characters=5), tokens=2)
    assert StreamMeter("up", "audio/mpeg", call, 1024, 1024).bound() == Usage(
        input=2, media=MediaUnits(characters=5)
    )
    unknown = _call("transcription", {})
    assert StreamMeter("up", "text/event-stream", unknown, 1024, 1024).bound() is None
