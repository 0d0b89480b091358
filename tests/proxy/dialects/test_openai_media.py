"""proxy/dialects/openai_media.py: each media route's request checked and made canonical (its
fields as sent, the most it can bill), its answer passed on with its content type."""

from __future__ import annotations

import io
import json
import wave
from typing import Any

import pytest

from proxy.core.canonical import MediaFile, MediaUnits, MultipartForm, Usage
from proxy.core.errors import BadRequest, UpstreamUnavailable
from proxy.core.reply import Chunk, MediaAnswer, Reply
from proxy.dialects import other_dialects
from proxy.dialects.base import DecodesForms
from proxy.dialects.openai_media import (
    ImageEditDialect,
    ImageGenerationDialect,
    ModerationDialect,
    RerankDialect,
    SpeechDialect,
    TranscriptionDialect,
    TranslationDialect,
)


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def _wav(seconds: float) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(1000)
        out.writeframes(b"\x80" * int(seconds * 1000))
    return buffer.getvalue()


def test_every_media_route_is_registered() -> None:
    paths = {path for dialect in other_dialects() for path in dialect.paths}
    assert {
        "/v1/audio/speech",
        "/v1/audio/transcriptions",
        "/v1/audio/translations",
        "/v1/images/generations",
        "/v1/images/edits",
        "/v1/moderations",
        "/v1/rerank",
        "/v2/rerank",
        "/rerank",
    } <= paths


def test_speech_keeps_its_fields_and_reserves_its_characters() -> None:
    body = {"model": "tts", "input": "héllo", "voice": "alloy", "api_key": "x", "speed": 2}
    call = SpeechDialect().decode(_json(body), {}, "r1", 0.0)
    assert call.model == "tts"
    assert call.media is not None
    assert call.media.operation == "speech"
    assert call.media.fields == {"input": "héllo", "voice": "alloy", "speed": 2}
    assert call.media.worst == MediaUnits(characters=5)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "t", "voice": "a"}, "input"),
        ({"model": "t", "voice": "a", "input": ""}, "input"),
        ({"model": "t", "voice": "a", "input": "x", "response_format": "ogg"}, "response_format"),
        ({"model": "t", "voice": "a", "input": "x" * 4097}, "input"),
    ],
    ids=["no-input", "empty-input", "bad-format", "too-long"],
)
def test_a_bad_speech_request_names_its_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as refused:
        SpeechDialect().decode(_json(body), {}, "r1", 0.0)
    assert refused.value.param == param


def test_images_reserve_n_of_the_size_and_quality_named() -> None:
    body = {"prompt": "a cat", "n": 3, "size": "1024x1792", "quality": "HD"}
    call = ImageGenerationDialect().decode(_json(body), {}, "r1", 0.0)
    assert call.model == "dall-e-2"  # OpenAI's default
    assert call.media is not None
    assert call.media.worst == MediaUnits(images=3, image_size="1024x1792", image_quality="hd")
    auto = ImageGenerationDialect().decode(_json({"prompt": "p", "size": "auto"}), {}, "r", 0.0)
    assert auto.media is not None
    assert auto.media.worst == MediaUnits(images=1)


def test_a_moderation_defaults_its_model_and_counts_its_text() -> None:
    call = ModerationDialect().decode(_json({"input": ["abcd", "efgh"]}), {}, "r1", 0.0)
    assert call.model == "omni-moderation-latest"
    assert call.media is not None
    assert call.media.tokens == 2
    with pytest.raises(BadRequest):
        ModerationDialect().decode(_json({"input": []}), {}, "r1", 0.0)


def test_rerank_reserves_a_search_unit_per_hundred_documents() -> None:
    body = {"model": "r", "query": "q", "documents": ["d"] * 101 + [{"text": "t"}]}
    call = RerankDialect().decode(_json(body), {}, "r1", 0.0)
    assert call.media is not None
    assert call.media.worst == MediaUnits(search_units=2)


def test_a_transcription_form_reserves_a_wav_files_seconds() -> None:
    form = MultipartForm(
        fields={"model": "whisper-1", "language": "en", "api_key": "x"},
        files=[MediaFile("file", "a.wav", "audio/wav", _wav(1.5))],
    )
    call = TranscriptionDialect().decode_form(form, {}, "r1", 0.0)
    assert call.model == "whisper-1"
    assert call.media is not None
    assert call.media.fields == {"language": "en"}
    assert call.media.worst == MediaUnits(audio_seconds=1.5)
    other = MultipartForm(
        fields={"model": "whisper-1"}, files=[MediaFile("file", "a.mp3", "audio/mpeg", b"ID3")]
    )
    unknown = TranslationDialect().decode_form(other, {}, "r1", 0.0)
    assert unknown.media is not None
    assert unknown.media.worst is None  # only the upstream knows an mp3's length


@pytest.mark.parametrize(
    ("fields", "files", "param"),
    [
        ({"model": "w"}, [], "file"),
        ({}, [MediaFile("file", "a", "audio/wav", b"")], "model"),
        ({"model": "w", "response_format": "xml"}, [MediaFile("file", "a", "", b"")], None),
        ({"model": "w", "temperature": "hot"}, [MediaFile("file", "a", "", b"")], None),
    ],
    ids=["no-file", "no-model", "bad-format", "bad-temperature"],
)
def test_a_bad_transcription_form_is_a_400(
    fields: dict[str, Any], files: list[MediaFile], param: str | None
) -> None:
    with pytest.raises(BadRequest) as refused:
        TranscriptionDialect().decode_form(MultipartForm(fields, files), {}, "r1", 0.0)
    if param is not None:
        assert refused.value.param == param


def test_an_image_edit_needs_an_image_and_a_prompt() -> None:
    image = MediaFile("image[]", "a.png", "image/png", b"png")
    call = ImageEditDialect().decode_form(
        MultipartForm({"prompt": "hat", "n": "2", "quality": "high"}, [image]), {}, "r1", 0.0
    )
    assert call.model == "dall-e-2"
    assert call.media is not None
    assert call.media.worst == MediaUnits(images=2, image_quality="high")
    for fields, files in (
        ({"prompt": "p"}, []),
        ({}, [image]),
        ({"prompt": "p", "n": "11"}, [image]),
    ):
        with pytest.raises(BadRequest):
            ImageEditDialect().decode_form(MultipartForm(fields, files), {}, "r1", 0.0)


def test_upload_routes_take_forms_and_refuse_json() -> None:
    assert isinstance(TranscriptionDialect(), DecodesForms)
    assert not isinstance(SpeechDialect(), DecodesForms)
    with pytest.raises(BadRequest) as refused:
        TranscriptionDialect().decode(b"{}", {}, "r1", 0.0)
    assert refused.value.code == "invalid_content_type"


def test_the_answer_is_the_body_as_it_came_with_its_type() -> None:
    dialect = SpeechDialect()
    call = dialect.decode(_json({"model": "t", "input": "x", "voice": "a"}), {}, "r1", 0.0)
    answer = MediaAnswer(body=b"\xff\xfbaudio", content_type="audio/mpeg", usage=Usage())
    reply = Reply(provider="p", model="m", media=answer)
    assert dialect.encode_response(call, reply) == b"\xff\xfbaudio"
    assert dialect.response_headers(call, reply) == {"content-type": "audio/mpeg"}
    assert reply.whole_usage() is answer.usage


# -- streamed answers ------------------------------------------------------------------------


def _form(**fields: str) -> MultipartForm:
    audio = MediaFile("file", "a.mp3", "audio/mpeg", b"mp3")
    return MultipartForm(fields={"model": "m", **fields}, files=[audio])


def test_speech_always_streams() -> None:
    for extra in ({}, {"stream_format": "sse"}, {"stream_format": "audio"}):
        body = _json({"model": "t", "input": "x", "voice": "a", **extra})
        assert SpeechDialect().decode(body, {}, "r1", 0.0).stream


def test_images_stream_when_asked_with_up_to_three_partial_images() -> None:
    dialect = ImageGenerationDialect()
    assert not dialect.decode(_json({"prompt": "p"}), {}, "r1", 0.0).stream
    call = dialect.decode(_json({"prompt": "p", "stream": True, "partial_images": 3}), {}, "r", 0)
    assert call.stream
    assert call.media is not None
    assert call.media.fields["partial_images"] == 3
    with pytest.raises(BadRequest) as refused:
        dialect.decode(_json({"prompt": "p", "stream": True, "partial_images": 4}), {}, "r", 0)
    assert refused.value.param == "partial_images"


@pytest.mark.parametrize(
    ("value", "streams"), [("true", True), ("True", True), ("1", True), ("false", False)]
)
def test_a_forms_stream_field_is_a_boolean(value: str, streams: bool) -> None:
    assert TranscriptionDialect().decode_form(_form(stream=value), {}, "r1", 0.0).stream is streams
    assert not TranscriptionDialect().decode_form(_form(), {}, "r1", 0.0).stream


def test_a_forms_stream_field_that_is_not_a_boolean_is_a_400() -> None:
    with pytest.raises(BadRequest) as refused:
        TranscriptionDialect().decode_form(_form(stream="maybe"), {}, "r1", 0.0)
    assert refused.value.param == "stream"


def test_a_streamed_answer_is_relayed_as_it_came() -> None:
    dialect = TranscriptionDialect()
    call = dialect.decode_form(_form(stream="true"), {}, "r1", 0.0)
    events = Reply(provider="p", model="m", headers={"content-type": "text/event-stream"})
    encoder = dialect.stream_encoder(call, events)
    assert encoder.keepalive is None
    frame = b'data: {"type":"transcript.text.delta","delta":"hi"}\n\n'
    assert encoder.chunk(Chunk(id="", model="m", choices=[], media=frame)) == frame
    assert encoder.chunk(Chunk(id="", model="m", choices=[], media=b"", usage=Usage())) == b""
    assert encoder.end() == b""
    error = json.loads(encoder.error(UpstreamUnavailable("gone", provider="p"))[6:])
    assert error["type"] == "error"
    assert error["error"]["code"] == "upstream_unavailable"
    audio = Reply(provider="p", model="m", headers={"content-type": "audio/mpeg"})
    assert dialect.stream_encoder(call, audio).error(UpstreamUnavailable("gone")) == b""
