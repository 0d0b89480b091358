"""OpenAI's media wire formats — audio, images, moderations — and Cohere's rerank, for every
provider that speaks them (OpenAI and the OpenAI-compatible servers, Azure with its own URLs).

Pure translation. A request goes to ``{base}/<path>`` (:data:`PATHS`): the client's fields with
the upstream model, as JSON, or as a multipart form rebuilt with the client's files (a list
field repeated, in order; the form is sent in pieces, its files' bytes as they were read, never
copied into one body). An answer is passed on as it came, with its content type, and only
what billing needs is read from it (:func:`media_usage`): a transcription's ``usage`` (tokens
or seconds) or ``duration``, the last cue of an SRT or WebVTT transcript; an image answer's
count of images (the ``data`` items are skipped, never decoded) and its ``size``/``quality``
when it names them; a rerank's ``meta.billed_units.search_units``. What the answer does not say
comes from the request (:attr:`~proxy.core.canonical.MediaRequest.worst`): the characters
spoken, the images asked for, the search units of its documents, a WAV file's seconds.

A streamed call (``call.stream``: speech, whose audio is always relayed as it arrives, a
transcription or an image request with ``stream``) is relayed piece by piece, and its usage is
read on the way by a :class:`StreamMeter`: from an event stream, ``speech.audio.done``'s and
``transcript.text.done``'s ``usage`` (tokens, or a transcript's seconds), and the images of the
``image_generation.completed`` / ``image_edit.completed`` events (one each, at the size and
quality the event names, with their tokens); partial images are not counted as images (OpenAI
bills them as output tokens of the completed event). An answer that is not an event stream (an
upstream that ignored ``stream``) is read as a whole answer is, at its end; audio bytes are
not read at all (speech is billed by the characters of its input). The stream's first piece
carries the request's worst case (:func:`worst_usage`) as a provisional usage, so that a stream
the client leaves before its end is charged what it may have cost, as its budget reserved.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import Raw, Struct

from proxy.core.canonical import Call, MediaOperation, MediaUnits, Usage
from proxy.core.errors import UpstreamError, UpstreamResponseTooLarge
from proxy.core.reply import MediaAnswer
from proxy.core.sse import SSEDecoder
from proxy.providers.base import HttpRequest, ProviderConfig, malformed, with_plugin_headers

PATHS: Mapping[MediaOperation, str] = {
    "speech": "/audio/speech",
    "transcription": "/audio/transcriptions",
    "translation": "/audio/translations",
    "image_generation": "/images/generations",
    "image_edit": "/images/edits",
    "moderation": "/moderations",
    "rerank": "/rerank",
}
"""Where each operation goes, below the provider's base URL."""

_MULTIPART: frozenset[MediaOperation] = frozenset({"transcription", "translation", "image_edit"})
_ENCODER = msgspec.json.Encoder()
_CUE_END = re.compile(rb"--> ?(\d+):(\d\d):(\d\d)[,.](\d{3})")
_UNSAFE_IN_HEADER = str.maketrans({'"': "%22", "\r": "", "\n": ""})


class _TokenUsage(Struct):
    type: str = "tokens"
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0


class _Transcript(Struct):
    usage: _TokenUsage | None = None
    duration: float | None = None


class _Images(Struct):
    data: list[Raw] = msgspec.field(default_factory=list)
    size: str | None = None
    quality: str | None = None


class _BilledUnits(Struct):
    search_units: int | None = None


class _Meta(Struct):
    billed_units: _BilledUnits | None = None


class _Reranked(Struct):
    meta: _Meta | None = None


_TRANSCRIPT = msgspec.json.Decoder(_Transcript)
_IMAGES = msgspec.json.Decoder(_Images)
_RERANKED = msgspec.json.Decoder(_Reranked)


def build_media(base: str, headers: Mapping[str, str], call: Call, model: str) -> HttpRequest:
    """The upstream request for the media ``call`` to ``model`` at ``base`` + its path."""
    media = call.media
    assert media is not None  # a media call
    url = base + PATHS[media.operation]
    return build_media_at(url, headers, call, model)


def build_media_at(url: str, headers: Mapping[str, str], call: Call, model: str) -> HttpRequest:
    """The upstream request for the media ``call`` to ``model``, sent to ``url`` (a JSON body,
    or a multipart one for uploads; ``headers`` may name a JSON content type, which a form's
    replaces)."""
    media = call.media
    assert media is not None  # a media call
    sent = with_plugin_headers(dict(headers), call.upstream_headers)
    if media.operation not in _MULTIPART:
        body = _ENCODER.encode({"model": model, **media.fields})
        return HttpRequest(url=url, headers=sent, body=body)
    boundary = "crossway-" + secrets.token_hex(16)
    for name in [name for name in sent if name.lower() == "content-type"]:
        del sent[name]
    sent["content-type"] = f"multipart/form-data; boundary={boundary}"
    parts = _form(boundary, model, call)
    sent["content-length"] = str(sum(len(part) for part in parts))
    return HttpRequest(url=url, headers=sent, body=parts)


def _form(boundary: str, model: str, call: Call) -> tuple[bytes, ...]:
    """The multipart body of ``call``'s fields (the model first) and files, in pieces: each
    file's bytes are one piece, as the client sent them (not copied)."""
    media = call.media
    assert media is not None
    mark = f"--{boundary}\r\n".encode()
    parts: list[bytes] = []

    def text(name: str, value: Any) -> None:
        disposition = f'Content-Disposition: form-data; name="{_quoted(name)}"\r\n\r\n'
        parts.extend((mark, _utf8(disposition), _utf8(str(value)), b"\r\n"))

    text("model", model)
    for name, value in media.fields.items():
        for item in value if isinstance(value, list) else (value,):
            text(name, item)
    for file in media.files:
        head = (
            f'Content-Disposition: form-data; name="{_quoted(file.field)}"; '
            f'filename="{_quoted(file.filename)}"\r\n'
            f"Content-Type: {_quoted(file.content_type)}\r\n\r\n"
        )
        parts.extend((mark, _utf8(head), file.data, b"\r\n"))
    parts.append(f"--{boundary}--\r\n".encode())
    return tuple(parts)


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8 (a lone surrogate a client's file name may hold becomes ``?``)."""
    return text.encode("utf-8", "replace")


def _quoted(value: str) -> str:
    """``value`` safe inside a quoted header parameter (no quote, no line break)."""
    return value.translate(_UNSAFE_IN_HEADER)


def parse_media(provider: str, headers: Mapping[str, str], body: bytes, call: Call) -> MediaAnswer:
    """The client's answer from a 2xx media answer: the body as it came, with its content type,
    and the usage read from it (see the module docstring). Raises :class:`UpstreamError` for a
    JSON answer that does not decode."""
    content_type = headers.get("content-type", "application/octet-stream")
    return MediaAnswer(
        body=body, content_type=content_type, usage=media_usage(provider, content_type, body, call)
    )


def media_usage(provider: str, content_type: str, body: bytes, call: Call) -> Usage | None:
    """What the media answer ``body`` billed (see the module docstring); None when neither the
    answer nor the request says."""
    media = call.media
    assert media is not None
    worst = media.worst
    json_body = content_type.startswith("application/json")
    try:
        match media.operation:
            case "transcription" | "translation":
                if json_body:
                    return _transcript_usage(_TRANSCRIPT.decode(body), worst)
                seconds = _last_cue_end(body)
                if seconds is not None:
                    return Usage(media=MediaUnits(audio_seconds=seconds))
            case "image_generation" | "image_edit" if json_body and worst is not None:
                images = _IMAGES.decode(body)
                return Usage(
                    media=MediaUnits(
                        images=len(images.data),
                        image_size=(images.size or worst.image_size).lower(),
                        image_quality=(images.quality or worst.image_quality).lower(),
                    )
                )
            case "rerank" if json_body:
                meta = _RERANKED.decode(body).meta
                billed = meta.billed_units if meta is not None else None
                if billed is not None and billed.search_units is not None:
                    return Usage(media=MediaUnits(search_units=billed.search_units))
            case _:
                pass
    except msgspec.DecodeError as exc:
        raise _malformed(provider, media.operation, exc) from None
    return worst_usage(call)


def _transcript_usage(answer: _Transcript, worst: MediaUnits | None) -> Usage | None:
    """A transcript's usage: tokens, or seconds (``usage.seconds``, else ``duration``)."""
    usage = answer.usage
    if usage is not None and usage.type == "tokens":
        return Usage(input=usage.input_tokens, output=usage.output_tokens)
    seconds = usage.seconds if usage is not None and usage.type == "duration" else answer.duration
    if seconds is not None:
        return Usage(media=MediaUnits(audio_seconds=seconds))
    return None if worst is None else Usage(media=worst)


def _last_cue_end(body: bytes) -> float | None:
    """The end of an SRT or WebVTT transcript's last cue, in seconds (None: no cue)."""
    ends = _CUE_END.findall(body)
    if not ends:
        return None
    hours, minutes, seconds, millis = (int(part) for part in ends[-1])
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


def worst_usage(call: Call) -> Usage | None:
    """The most the media ``call`` can bill, as its request says (None: not known)."""
    media = call.media
    assert media is not None
    worst = media.worst
    return None if worst is None else Usage(input=media.tokens, media=worst)


def stream_meter(
    provider: str, config: ProviderConfig, headers: Mapping[str, str], call: Call
) -> StreamMeter:
    """The meter of the streamed answer with ``headers`` to ``call``, bounded by ``config``'s
    ``max_event_bytes`` and ``max_response_bytes``."""
    content_type = headers.get("content-type", "application/octet-stream")
    return StreamMeter(
        provider, content_type, call, config.max_event_bytes, config.max_response_bytes
    )


def _malformed(provider: str, operation: str, exc: Exception) -> UpstreamError:
    return malformed(provider, f"{operation.replace('_', ' ')} answer", exc)


class _EventUsage(Struct):
    type: str = "tokens"
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float | None = None


class _Event(Struct):
    """What billing reads of one streamed media event (an image's ``b64_json`` is skipped)."""

    type: str = ""
    usage: _EventUsage | None = None
    size: str | None = None
    quality: str | None = None


_EVENT = msgspec.json.Decoder(_Event)
_COMPLETED = frozenset({"image_generation.completed", "image_edit.completed"})
_USAGE_EVENTS = frozenset({"speech.audio.done", "transcript.text.done"})


class StreamMeter:
    """The :class:`~proxy.providers.base.MediaMeter` of OpenAI's streamed media answers (see
    the module docstring): ``content_type`` is the answer's, ``max_event`` bounds one event
    held, ``max_body`` a whole JSON or text answer held."""

    __slots__ = (
        "_body",
        "_call",
        "_content_type",
        "_events",
        "_held",
        "_images",
        "_input",
        "_max_body",
        "_max_event",
        "_output",
        "_provider",
        "_quality",
        "_seconds",
        "_size",
        "_tokens",
    )

    def __init__(
        self, provider: str, content_type: str, call: Call, max_event: int, max_body: int
    ) -> None:
        media = call.media
        assert media is not None  # a media call
        self._provider = provider
        self._call = call
        self._content_type = content_type
        self._max_event = max_event
        self._max_body = max_body
        self._events = SSEDecoder() if content_type.startswith("text/event-stream") else None
        whole = self._events is None and media.operation != "speech"
        self._body: list[bytes] | None = [] if whole else None
        self._held = 0
        self._tokens = False  # a usage event came
        self._input = self._output = self._images = 0
        self._seconds: float | None = None
        self._size = self._quality = ""

    def feed(self, data: bytes) -> None:
        """See :meth:`proxy.providers.base.MediaMeter.feed`."""
        events = self._events
        if events is not None:
            for event in events.feed(data):
                self._read(event.data)
            if events.pending > self._max_event:
                raise self._too_large("a stream event", self._max_event)
        elif self._body is not None:
            self._held += len(data)
            if self._held > self._max_body:
                raise self._too_large("an answer", self._max_body)
            self._body.append(data)

    def bound(self) -> Usage | None:
        """See :meth:`proxy.providers.base.MediaMeter.bound`: the request's worst case."""
        return worst_usage(self._call)

    def usage(self) -> Usage | None:
        """See :meth:`proxy.providers.base.MediaMeter.usage`."""
        media = self._call.media
        assert media is not None
        worst = media.worst
        if self._body is not None:
            try:
                return media_usage(
                    self._provider, self._content_type, b"".join(self._body), self._call
                )
            except UpstreamError:  # relayed already: the request's bound stands
                pass
        elif self._images:
            units = worst or MediaUnits()
            return Usage(
                input=self._input,
                output=self._output,
                media=MediaUnits(
                    images=self._images,
                    image_size=self._size or units.image_size,
                    image_quality=self._quality or units.image_quality,
                ),
            )
        elif self._seconds is not None:
            return Usage(media=MediaUnits(audio_seconds=self._seconds))
        elif self._tokens:
            spoken = worst if media.operation == "speech" else None
            return Usage(input=self._input, output=self._output, media=spoken)
        return worst_usage(self._call)

    def _read(self, data: bytes) -> None:
        """Take what billing needs from one event's JSON (one it cannot read is skipped)."""
        try:
            event = _EVENT.decode(data)
        except msgspec.DecodeError:
            return
        usage = event.usage
        if event.type in _COMPLETED:
            self._images += 1
            if event.size not in (None, "auto"):
                self._size = str(event.size).lower()
            if event.quality not in (None, "auto"):
                self._quality = str(event.quality).lower()
        elif event.type not in _USAGE_EVENTS or usage is None:
            return
        if usage is None:
            return
        if usage.type == "duration" and usage.seconds is not None:
            self._seconds = usage.seconds
            return
        self._tokens = True
        self._input += usage.input_tokens
        self._output += usage.output_tokens

    def _too_large(self, what: str, limit: int) -> UpstreamResponseTooLarge:
        return UpstreamResponseTooLarge(
            f"provider {self._provider!r} sent {what} larger than the {limit}-byte limit",
            upstream_status=200,
            provider=self._provider,
        )
