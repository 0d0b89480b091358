"""The media dialects: OpenAI's audio, image and moderation routes, and Cohere's rerank.

=============================  ===================  ==========================================
route                          operation            request
=============================  ===================  ==========================================
``/v1/audio/speech``           ``speech``           JSON ``CreateSpeechRequest``
``/v1/audio/transcriptions``   ``transcription``    multipart ``CreateTranscriptionRequest``
``/v1/audio/translations``     ``translation``      multipart ``CreateTranslationRequest``
``/v1/images/generations``     ``image_generation`` JSON ``CreateImageRequest``
``/v1/images/edits``           ``image_edit``       multipart ``CreateImageEditRequest``
``/v1/moderations``            ``moderation``       JSON ``CreateModerationRequest``
``/v1/rerank``, ``/v2/rerank``, ``/rerank``   ``rerank``   JSON, Cohere's rerank request
=============================  ===================  ==========================================

Each OpenAI route also answers without ``/v1``, as the other OpenAI routes do; rerank answers
on the three paths LiteLLM serves. A request is checked for the fields the gateway needs (a
400 naming the field otherwise) and becomes a :class:`~proxy.core.canonical.Call` with
:attr:`~proxy.core.canonical.Call.media` set: its fields as sent (credentials such as
``api_key`` dropped; the model is :attr:`Call.model`), its files, and the most it can bill
(:class:`~proxy.core.canonical.MediaUnits`): the characters to speak, the images asked for
(``n`` of the size and quality named), a rerank's search units (one per 100 documents), a WAV
file's seconds (any other audio's length is known only to the upstream). A moderation without
``model`` asks for ``omni-moderation-latest``, an image request without one for ``dall-e-2``,
as OpenAI does.

The answer is the upstream's body as it came (:class:`~proxy.core.reply.MediaAnswer`: JSON,
text, audio bytes, an event stream), with its content type. Errors are OpenAI's error JSON.

Streamed answers (:attr:`Call.stream` set): speech always (its audio, or with ``stream_format:
sse`` its ``speech.audio.*`` events, relayed as they arrive), and transcriptions, image
generations and image edits that ask for ``stream`` (``true``; a form's ``true``, ``True`` or
``1``). Their bytes are relayed as the upstream sends them (:attr:`~proxy.core.reply.Chunk.media`),
with the upstream's content type; a failure after the first byte is, in an event stream, an
``error`` event with OpenAI's error object (the openai SDK raises it), and in audio a body cut
short (audio has no in-band error: the connection is dropped before the body's end).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Generic, Literal, NamedTuple, TypeVar

import msgspec
from msgspec import Meta, Struct

from proxy.core.audio import wav_seconds
from proxy.core.canonical import (
    Call,
    MediaFile,
    MediaOperation,
    MediaRequest,
    MediaUnits,
    MultipartForm,
    Params,
    Timings,
)
from proxy.core.errors import BadRequest, GatewayError
from proxy.core.reply import Chunk, Reply
from proxy.core.sse import encode_data_frame
from proxy.dialects.base import StreamEncoder, bad_request, invalid
from proxy.dialects.openai_chat import NEVER_FORWARDED, OpenAIErrors, error_json

DOCUMENTS_PER_SEARCH_UNIT = 100
"""Cohere bills one search unit per query over up to this many documents."""

_CHARACTERS_PER_TOKEN = 4
_OBJECT = msgspec.json.Decoder(dict[str, Any])


class _Speech(Struct):
    model: str
    input: Annotated[str, Meta(min_length=1, max_length=4096)]
    voice: str | dict[str, Any]
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: Annotated[float, Meta(ge=0.25, le=4.0)] = 1.0
    instructions: Annotated[str, Meta(max_length=4096)] | None = None
    stream_format: Literal["sse", "audio"] = "audio"


class _ImageGeneration(Struct):
    prompt: Annotated[str, Meta(min_length=1, max_length=32000)]
    model: str = "dall-e-2"
    n: Annotated[int, Meta(ge=1, le=10)] | None = None
    size: str | None = None
    quality: str | None = None
    response_format: Literal["url", "b64_json"] | None = None
    stream: bool | None = None
    partial_images: Annotated[int, Meta(ge=0, le=3)] | None = None


class _Moderation(Struct):
    input: str | list[Any]
    model: str = "omni-moderation-latest"


class _Rerank(Struct):
    model: str
    query: Annotated[str, Meta(min_length=1)]
    documents: Annotated[list[str | dict[str, Any]], Meta(min_length=1, max_length=10000)]
    top_n: Annotated[int, Meta(ge=1)] | None = None
    return_documents: bool | None = None


_Request = TypeVar("_Request")
_SPEECH = msgspec.json.Decoder(_Speech)
_IMAGE = msgspec.json.Decoder(_ImageGeneration)
_MODERATION = msgspec.json.Decoder(_Moderation)
_RERANK = msgspec.json.Decoder(_Rerank)

_TRANSCRIPTION_FORMATS = frozenset({"json", "text", "srt", "verbose_json", "vtt", "diarized_json"})
_TRANSLATION_FORMATS = frozenset({"json", "text", "srt", "verbose_json", "vtt"})


class _MediaDialect(OpenAIErrors):
    """What every media dialect shares: the answer is the upstream's body with its type."""

    name: str
    operation: MediaOperation
    paths: tuple[str, ...]

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_response`: the body as it came."""
        media = reply.media
        assert media is not None  # a media call's reply
        return media.body

    def response_headers(self, call: Call, reply: Reply) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.response_headers`: the body's content type."""
        media = reply.media
        return {} if media is None else {"content-type": media.content_type}

    def stream_encoder(self, call: Call, reply: Reply) -> StreamEncoder:
        """See :meth:`proxy.dialects.base.Dialect.stream_encoder`: the upstream's bytes as they
        came (see the module docstring)."""
        content_type = reply.headers.get("content-type", "")
        return MediaStreamEncoder(events=content_type.startswith("text/event-stream"))

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode` (JSON routes)."""
        raise BadRequest("this route takes a multipart/form-data body", code="invalid_content_type")

    def _call(
        self,
        model: str,
        fields: dict[str, Any],
        headers: Mapping[str, str],
        request_id: str,
        start: float,
        *,
        files: list[MediaFile] | None = None,
        worst: MediaUnits | None = None,
        text: int = 0,
        stream: bool = False,
    ) -> Call:
        """The canonical media call (``text``: characters of text in the request; ``stream``:
        its answer is relayed as it arrives)."""
        user = fields.get("user")
        return Call(
            request_id=request_id,
            dialect=self.name,
            model=model,
            messages=[],
            stream=stream,
            params=Params(user=user) if isinstance(user, str) else Params(),
            client_headers=headers,
            timings=Timings(start=start),
            media=MediaRequest(
                operation=self.operation,
                fields=fields,
                files=files or [],
                worst=worst,
                tokens=-(-text // _CHARACTERS_PER_TOKEN),
            ),
        )


def _fields(body: bytes) -> dict[str, Any]:
    """The body's members to pass on: all but the model and credentials (a member the typed
    pass skipped, such as a number past 64 bits, is a 400 here)."""
    try:
        fields = _OBJECT.decode(body)
    except msgspec.DecodeError as exc:
        raise bad_request(exc) from None
    return {
        key: value for key, value in fields.items() if key != "model" and key not in NEVER_FORWARDED
    }


def _decode(decoder: msgspec.json.Decoder[_Request], body: bytes) -> _Request:
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise bad_request(exc) from None


class _Planned(NamedTuple):
    """What a JSON media request asks for: its ``model``, the most it can bill (None: not
    known), the characters of text in it, and whether its answer streams."""

    model: str
    worst: MediaUnits | None
    text: int = 0
    stream: bool = False


class _JsonDialect(_MediaDialect, Generic[_Request]):
    """A JSON media route: the body checked by ``decoder`` (a 400 naming the field), then
    ``plan``\ned; its fields are passed on as sent."""

    decoder: msgspec.json.Decoder[_Request]
    plan: Callable[[_Request], _Planned]

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`."""
        planned = self.plan(_decode(self.decoder, body))
        return self._call(
            planned.model,
            _fields(body),
            headers,
            request_id,
            start,
            worst=planned.worst,
            text=planned.text,
            stream=planned.stream,
        )


def _plan_speech(request: _Speech) -> _Planned:
    """Speech always streams: its audio (or its events) relayed as they arrive."""
    return _Planned(request.model, MediaUnits(characters=len(request.input)), stream=True)


def _plan_images(request: _ImageGeneration) -> _Planned:
    worst = _images(request.n or 1, request.size, request.quality)
    return _Planned(request.model, worst, len(request.prompt), bool(request.stream))


def _plan_moderation(request: _Moderation) -> _Planned:
    inputs = [request.input] if isinstance(request.input, str) else request.input
    if not inputs:
        raise invalid("expected at least one input", "input")
    text = sum(len(item) if isinstance(item, str) else len(str(item)) for item in inputs)
    return _Planned(request.model, MediaUnits(), text)


def _plan_rerank(request: _Rerank) -> _Planned:
    documents = request.documents
    units = math.ceil(len(documents) / DOCUMENTS_PER_SEARCH_UNIT)
    text = len(request.query) + sum(
        len(doc) if isinstance(doc, str) else len(str(doc.get("text", doc))) for doc in documents
    )
    return _Planned(request.model, MediaUnits(search_units=units), text)


class SpeechDialect(_JsonDialect[_Speech]):
    """``POST /v1/audio/speech``: text to audio (see the module docstring)."""

    name = "openai_speech"
    operation: MediaOperation = "speech"
    paths = ("/v1/audio/speech", "/audio/speech")
    decoder = _SPEECH
    plan = staticmethod(_plan_speech)


class ImageGenerationDialect(_JsonDialect[_ImageGeneration]):
    """``POST /v1/images/generations`` (see the module docstring)."""

    name = "openai_images"
    operation: MediaOperation = "image_generation"
    paths = ("/v1/images/generations", "/images/generations")
    decoder = _IMAGE
    plan = staticmethod(_plan_images)


class ModerationDialect(_JsonDialect[_Moderation]):
    """``POST /v1/moderations`` (see the module docstring)."""

    name = "openai_moderations"
    operation: MediaOperation = "moderation"
    paths = ("/v1/moderations", "/moderations")
    decoder = _MODERATION
    plan = staticmethod(_plan_moderation)


class RerankDialect(_JsonDialect[_Rerank]):
    """Cohere's rerank request and answer, on ``/v1/rerank``, ``/v2/rerank`` and ``/rerank``
    (the paths LiteLLM serves; see the module docstring)."""

    name = "rerank"
    operation: MediaOperation = "rerank"
    paths = ("/v1/rerank", "/v2/rerank", "/rerank")
    decoder = _RERANK
    plan = staticmethod(_plan_rerank)


class _FormDialect(_MediaDialect):
    """A multipart media route: the form's text fields checked, its files kept."""

    def _form_call(
        self,
        form: MultipartForm,
        headers: Mapping[str, str],
        request_id: str,
        start: float,
        *,
        default_model: str | None = None,
        worst: MediaUnits | None = None,
        text: int = 0,
    ) -> Call:
        """The call of ``form``; its answer streams when its ``stream`` field is true."""
        fields: dict[str, Any] = {
            key: value
            for key, value in form.fields.items()
            if key != "model" and key not in NEVER_FORWARDED
        }
        model = _text(form, "model", default_model)
        if model is None:
            raise BadRequest("Invalid request: missing required field `model`", param="model")
        stream = _flag(form, "stream")
        return self._call(
            model,
            fields,
            headers,
            request_id,
            start,
            files=form.files,
            worst=worst,
            text=text,
            stream=stream,
        )


class _AudioDialect(_FormDialect):
    """Transcriptions and translations: one audio ``file``, a ``model``, a known format."""

    formats: frozenset[str]

    def decode_form(
        self, form: MultipartForm, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.DecodesForms.decode_form`."""
        audio = [file for file in form.files if file.field == "file"]
        if len(audio) != 1:
            raise invalid("expected one audio file", "file")
        response_format = _text(form, "response_format", "json")
        if response_format not in self.formats:
            allowed = ", ".join(sorted(self.formats))
            raise invalid(f"expected one of {allowed}", "response_format")
        temperature = _text(form, "temperature", None)
        if temperature is not None:
            try:
                value = float(temperature)
            except ValueError:
                value = math.nan
            if not 0 <= value <= 1:
                raise invalid("expected a number from 0 to 1", "temperature")
        seconds = wav_seconds(audio[0].data)
        worst = None if seconds is None else MediaUnits(audio_seconds=seconds)
        prompt = _text(form, "prompt", "") or ""
        return self._form_call(form, headers, request_id, start, worst=worst, text=len(prompt))


class TranscriptionDialect(_AudioDialect):
    """``POST /v1/audio/transcriptions`` (multipart; see the module docstring)."""

    name = "openai_transcriptions"
    operation: MediaOperation = "transcription"
    paths = ("/v1/audio/transcriptions", "/audio/transcriptions")
    formats = _TRANSCRIPTION_FORMATS


class TranslationDialect(_AudioDialect):
    """``POST /v1/audio/translations`` (multipart; see the module docstring)."""

    name = "openai_translations"
    operation: MediaOperation = "translation"
    paths = ("/v1/audio/translations", "/audio/translations")
    formats = _TRANSLATION_FORMATS


class ImageEditDialect(_FormDialect):
    """``POST /v1/images/edits`` (multipart: ``image`` or ``image[]`` files, an optional
    ``mask``; see the module docstring)."""

    name = "openai_image_edits"
    operation: MediaOperation = "image_edit"
    paths = ("/v1/images/edits", "/images/edits")

    def decode_form(
        self, form: MultipartForm, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.DecodesForms.decode_form`."""
        if not any(file.field in ("image", "image[]") for file in form.files):
            raise invalid("expected an image file", "image")
        prompt = _text(form, "prompt", None)
        if not prompt:
            raise BadRequest("Invalid request: missing required field `prompt`", param="prompt")
        count = _text(form, "n", "1") or "1"
        if not count.isdigit() or not 1 <= int(count) <= 10:
            raise invalid("expected an integer from 1 to 10", "n")
        worst = _images(int(count), _text(form, "size", None), _text(form, "quality", None))
        return self._form_call(
            form,
            headers,
            request_id,
            start,
            default_model="dall-e-2",
            worst=worst,
            text=len(prompt),
        )


def _flag(form: MultipartForm, name: str) -> bool:
    """Whether the form's field ``name`` is true (``true``, ``True`` or ``1``: what the openai
    SDKs send); absent or ``false`` is False, anything else a 400 naming it."""
    value = _text(form, name, None)
    if value is None or value.lower() in ("false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise invalid("expected true or false", name)


def _text(form: MultipartForm, name: str, default: str | None) -> str | None:
    """The text field ``name`` of ``form`` (its last value when repeated), else ``default``."""
    value = form.fields.get(name)
    if value is None:
        return default
    return value[-1] if isinstance(value, list) else value


def _images(count: int, size: str | None, quality: str | None) -> MediaUnits:
    """``count`` images of ``size`` and ``quality`` (``auto`` or absent: not known, priced at
    the dearest)."""
    return MediaUnits(
        images=count,
        image_size="" if size in (None, "auto") else str(size).lower(),
        image_quality="" if quality in (None, "auto") else str(quality).lower(),
    )


def media_dialects() -> tuple[_MediaDialect, ...]:
    """One instance of every media dialect."""
    return (
        SpeechDialect(),
        TranscriptionDialect(),
        TranslationDialect(),
        ImageGenerationDialect(),
        ImageEditDialect(),
        ModerationDialect(),
        RerankDialect(),
    )


class MediaStreamEncoder:
    """A streamed media answer's :class:`~proxy.dialects.base.StreamEncoder`: each chunk's
    :attr:`~proxy.core.reply.Chunk.media` bytes as they came, nothing added at the end, no
    keep-alive frames (an audio body has none, and OpenAI's media events have no ping); a
    failure after the first byte is an ``error`` event in an event stream (``events``), and
    nothing in audio (whose answer the app then cuts short)."""

    __slots__ = ("_events",)

    keepalive = None

    def __init__(self, *, events: bool) -> None:
        self._events = events

    def ping(self) -> bytes:
        """Never sent (no ``keepalive``)."""
        return b""

    def chunk(self, chunk: Chunk) -> bytes:
        """The upstream's bytes of ``chunk``."""
        return chunk.media or b""

    def end(self) -> bytes:
        """Nothing: the upstream's own last event (or byte) was the end."""
        return b""

    def error(self, error: GatewayError) -> bytes:
        """``data: {"type": "error", "error": {...}}`` in an event stream, else nothing (see
        :meth:`proxy.dialects.base.StreamEncoder.error`)."""
        if not self._events:
            return b""
        return encode_data_frame(b'{"type":"error",' + error_json(error)[1:])
