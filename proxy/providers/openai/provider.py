"""The OpenAI-compatible provider: OpenAI itself and any server that speaks its chat API.

Translation is nearly a copy, because the canonical types are shaped after OpenAI chat. What it
adds: the Bearer key and configured headers, the upstream model name,
``stream_options.include_usage`` on every stream (so that the gateway always learns token
usage), request fields the gateway does not model passed through verbatim, and usage
normalised into disjoint buckets (OpenAI's ``prompt_tokens`` includes cached tokens;
``completion_tokens`` includes reasoning tokens). Answers keep the upstream's own JSON
(``Response.raw``, ``Chunk.raw``), so that OpenAI clients also get the fields the canonical types
do not model. With a ``preset`` (see
:mod:`proxy.providers.presets`) the same provider reaches a named vendor: its base URL by default,
and each request adapted to the fields that vendor accepts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from proxy.core.canonical import Call, MediaOperation, Message, Params, Usage
from proxy.core.errors import (
    ContentPolicyViolation,
    ContextWindowExceeded,
    UpstreamError,
    upstream_error_for_status,
)
from proxy.core.reply import (
    Choice,
    Chunk,
    ChunkChoice,
    Embeddings,
    MediaAnswer,
    RawFrames,
    Response,
)
from proxy.providers.base import (
    HoldsBatchAPI,
    HttpRequest,
    ProviderConfig,
    StreamEnd,
    encode_raw_fields,
    malformed,
    merge_json_objects,
    retry_after_seconds,
    with_plugin_headers,
)
from proxy.providers.openai.batches import OpenAIBatchAPI
from proxy.providers.openai.embeddings import build_openai_embeddings, parse_openai_embeddings
from proxy.providers.openai.media import PATHS, StreamMeter, build_media, parse_media, stream_meter
from proxy.providers.presets import PRESETS, PresetName, adapt, rejected_fields

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIConfig(ProviderConfig, tag="openai", frozen=True, forbid_unknown_fields=True):
    """An OpenAI-compatible upstream.

    ``preset`` names a known vendor (:data:`proxy.providers.presets.PRESETS`): ``base_url``
    defaults to the vendor's, and requests are adapted to its quirks. Without a preset
    ``base_url`` defaults to OpenAI's. ``api_key`` absent means the upstream needs no key (a local
    vLLM or Ollama) — unless the preset is a hosted vendor, which always needs one; present but
    empty means a key is needed and missing. Either way a missing key makes the provider not
    ready. ``headers`` are sent with every request. ``stream_usage`` asks for usage on streams;
    turn it off only for a server that rejects ``stream_options`` (the presets know theirs).
    """

    base_url: str | None = None
    preset: PresetName | None = None
    api_key: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    stream_usage: bool = True


class _StreamOptions(Struct):
    include_usage: bool


class _RequestHead(Struct, omit_defaults=True):
    model: str
    messages: list[Message]
    stream: bool = False
    stream_options: _StreamOptions | None = None


class _PromptDetails(Struct):
    cached_tokens: int | None = 0


class _CompletionDetails(Struct):
    reasoning_tokens: int | None = 0


class _WireUsage(Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None
    cost: float | None = None

    def canonical(self) -> Usage:
        cached = (self.prompt_tokens_details and self.prompt_tokens_details.cached_tokens) or 0
        reasoning = (
            self.completion_tokens_details and self.completion_tokens_details.reasoning_tokens
        ) or 0
        prompt = self.prompt_tokens or 0
        completion = self.completion_tokens or 0
        return Usage(
            input=max(prompt - cached, 0),
            cache_read=cached,
            output=max(completion - reasoning, 0),
            reasoning=reasoning,
            cost_usd=self.cost,
        )


class _WireResponse(Struct):
    choices: list[Choice]
    id: str = ""
    model: str = ""
    created: int = 0
    usage: _WireUsage | None = None
    system_fingerprint: str | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET


class _WireError(Struct):
    message: str = ""
    type: str | None = None
    code: str | int | None = None
    param: str | None = None


class _WireChunk(Struct):
    id: str = ""
    model: str = ""
    created: int = 0
    choices: list[ChunkChoice] = msgspec.field(default_factory=list)
    usage: _WireUsage | None = None
    system_fingerprint: str | UnsetType | None = UNSET
    error: _WireError | None = None


class _OrdinaryChunk(Struct):
    """What makes a stream event an ordinary chunk, fit to relay verbatim (other keys ignored)."""

    id: Annotated[str, Meta(min_length=1)]
    created: Annotated[int, Meta(ge=1)]
    model: Annotated[str, Meta(min_length=1)]
    usage: None = None
    error: None = None


class _ErrorEnvelope(Struct):
    error: _WireError | str | None = None
    message: str | None = None


_RESPONSE_DECODER = msgspec.json.Decoder(_WireResponse)
_CHUNK_DECODER = msgspec.json.Decoder(_WireChunk)
_FAST_CHUNK_DECODER = msgspec.json.Decoder(Chunk)
_ORDINARY_CHUNKS_DECODER = msgspec.json.Decoder(list[_OrdinaryChunk])
_FRAME_START = b"data: "
_FRAME_END = b"\n\n"
_FRAME_JOIN = b"\n\ndata: "
_ERROR = b'"error"'
_ERROR_DECODER = msgspec.json.Decoder(_ErrorEnvelope)
_ENCODER = msgspec.json.Encoder()
_DONE = b"[DONE]"
_USAGE = b'"usage":{'  # with _SPACED_USAGE, _DONE and _ERROR: only in a stream's last frames
_SPACED_USAGE = b'"usage": {'
_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_POLICY_CODES = frozenset({"content_policy_violation", "content_filter"})


BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings", "/v1/responses")
"""The endpoints OpenAI's batch API takes (of those the gateway's batches take)."""


class OpenAIProvider(HoldsBatchAPI):
    """Pure translation between canonical calls and an OpenAI-compatible chat API; its media
    routes (audio, images, moderations) and a Cohere-compatible ``{base_url}/rerank`` are
    :mod:`proxy.providers.openai.media`'s, its batch API (``{base_url}/files``,
    ``{base_url}/batches``) :mod:`proxy.providers.openai.batches`'."""

    media_operations: frozenset[MediaOperation] = frozenset(PATHS)

    def __init__(self, name: str, config: OpenAIConfig) -> None:
        self.name = name
        self.config = config
        preset = PRESETS[config.preset] if config.preset is not None else None
        if config.api_key is None:
            self.ready = preset is None or not preset.key_required
        else:
            self.ready = bool(config.api_key)
        self.secrets: tuple[str, ...] = (config.api_key,) if config.api_key else ()
        self._quirks = preset if preset is not None and preset.adapts_requests else None
        self._stream_options = preset is None or preset.stream_options
        base_url = config.base_url or (preset.base_url if preset is not None else DEFAULT_BASE_URL)
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._embeddings_url = base_url.rstrip("/") + "/embeddings"
        self._base_url = base_url.rstrip("/")
        self._parse_payload = functools.partial(self.parse_event, "")
        headers = {"content-type": "application/json", **config.headers}
        if config.api_key:
            headers["authorization"] = f"Bearer {config.api_key}"
        self._headers = headers
        self.batch_api = OpenAIBatchAPI(
            self._base_url.__add__, headers, {path: path for path in BATCH_ENDPOINTS}
        )

    def build_request(self, call: Call, model: str) -> HttpRequest:
        """See :meth:`proxy.providers.base.HttpProvider.build_request`."""
        stream_options = None
        if (
            call.stream
            and self._stream_options
            and (self.config.stream_usage or call.include_usage)
        ):
            stream_options = _StreamOptions(include_usage=True)
        messages, params, extra = call.messages, call.params, call.extra
        if self._quirks is not None:
            messages, params, extra = adapt(self._quirks, call, model)
        if any(m.reasoning_content is not UNSET or m.annotations is not UNSET for m in messages):
            # A client's thinking (from Anthropic or Fabro dialects), and the citations of an
            # earlier answer sent back, are not OpenAI input fields.
            messages = [
                msgspec.structs.replace(message, reasoning_content=UNSET, annotations=UNSET)
                for message in messages
            ]
        head = _RequestHead(
            model=model, messages=messages, stream=call.stream, stream_options=stream_options
        )
        body = merge_json_objects(
            _ENCODER.encode(head), _ENCODER.encode(params), encode_raw_fields(extra)
        )
        headers = with_plugin_headers(self._headers, call.upstream_headers)
        return HttpRequest(url=self._url, headers=headers, body=body)

    def build_embeddings(self, call: Call, model: str) -> list[HttpRequest]:
        """The upstream request for an embeddings call (:mod:`.openai_embeddings`)."""
        return [build_openai_embeddings(self._embeddings_url, self._headers, call, model)]

    def parse_embeddings(self, bodies: list[bytes], call: Call, model: str) -> Embeddings:
        """The vectors of the embeddings answer (:mod:`.openai_embeddings`)."""
        assert call.embedding is not None
        return parse_openai_embeddings(self.name, bodies[0], model, call.embedding.count)

    def build_media(self, call: Call, model: str) -> HttpRequest:
        """The upstream request for a media call (:mod:`.media`)."""
        return build_media(self._base_url, self._headers, call, model)

    def parse_media(
        self, headers: Mapping[str, str], body: bytes, call: Call, model: str
    ) -> MediaAnswer:
        """A media answer, passed on as it came (:mod:`.media`)."""
        return parse_media(self.name, headers, body, call)

    def media_meter(self, headers: Mapping[str, str], call: Call, model: str) -> StreamMeter:
        """What reads a streamed media answer's usage (:func:`.media.stream_meter`)."""
        return stream_meter(self.name, self.config, headers, call)

    def dropped_fields(self, call: Call, model: str) -> list[str]:
        """The fields of ``call`` that this vendor's preset removes for ``model`` (for logs)."""
        if self._quirks is None:
            return []
        params = call.params
        return sorted(
            name
            for name in rejected_fields(self._quirks, model)
            if name in call.extra
            or (name in Params.__struct_fields__ and getattr(params, name) is not UNSET)
        )

    def parse_response(self, body: bytes, model: str) -> Response:
        """See :meth:`proxy.providers.base.HttpProvider.parse_response`."""
        try:
            wire = _RESPONSE_DECODER.decode(body)
        except msgspec.DecodeError as exc:
            raise malformed(self.name, "response", exc) from None
        if not wire.choices:
            raise UpstreamError(
                "upstream answered with no choices", upstream_status=200, provider=self.name
            )
        response = Response(
            id=wire.id,
            model=wire.model or model,
            choices=wire.choices,
            created=wire.created,
            usage=wire.usage.canonical() if wire.usage is not None else None,
            system_fingerprint=wire.system_fingerprint,
            service_tier=wire.service_tier,
        )
        if wire.id and wire.created and wire.model:
            # A complete body: OpenAI clients get it whole, with what the canonical types lack.
            response.keep_raw(body)
        return response

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """See :meth:`proxy.providers.base.HttpProvider.parse_event`."""
        if data == _DONE:
            raise StreamEnd
        if _ERROR not in data:
            # The common chunk decodes straight into the canonical type, whose fields are
            # OpenAI's, and keeps its bytes for OpenAI clients. A usage object needs translating:
            # such a chunk (one per stream) takes the full path below. (Quotes inside JSON strings
            # are escaped, so the marker matches an "error" key, or at worst costs the fast path.)
            try:
                chunk: Chunk | None = _FAST_CHUNK_DECODER.decode(data)
            except msgspec.DecodeError:  # lacks a field the full path defaults, or malformed
                chunk = None
            if chunk is not None and chunk.usage is None:
                if chunk.id and chunk.created and chunk.model:
                    chunk.raw = data
                return chunk
        try:
            wire = _CHUNK_DECODER.decode(data)
        except msgspec.DecodeError as exc:
            raise malformed(self.name, "stream event", exc) from None
        if wire.error is not None:
            raise self._classify(
                500, wire.error.message, _code_text(wire.error.code), retry_after=None
            )
        usage = wire.usage
        return Chunk(
            id=wire.id,
            model=wire.model,
            choices=wire.choices,
            created=wire.created,
            usage=usage.canonical() if usage is not None else None,
            system_fingerprint=wire.system_fingerprint,
            # Complete OpenAI chunks, the usage chunk included, can go to OpenAI clients as
            # they came.
            raw=data if wire.id and wire.created and wire.model else None,
        )

    def relay_frames(self, data: bytes) -> tuple[RawFrames | None, bytes]:
        """The whole ``data: {...}`` frames of ordinary chunks that ``data`` starts with, kept
        verbatim (see :class:`~proxy.core.reply.RawFrames`), and the rest of ``data`` to decode
        as usual; ``(None, data)`` when there are none.

        Usage, an error and the end marker only ever come in a stream's last frames, so the run
        is found by peeling frames that mention them off the end (with an unfinished frame);
        one C-level pass then checks the whole run: its frames are spliced into one JSON array
        and decoded against :class:`_OrdinaryChunk`. A comment, a multi-line, named or
        CRLF-framed event, or a usage or error the peeling missed makes the array invalid or
        fails the check, and the whole read is decoded instead. (Quotes inside JSON strings are
        escaped, so ``"error"`` can only match a key.)
        """
        cut = data.rfind(_FRAME_END) + 2  # after the last whole frame
        while cut > 1:
            start = data.rfind(_FRAME_END, 0, cut - 2) + 2
            last = data[start if start > 1 else 0 : cut]
            if not (_DONE in last or _USAGE in last or _SPACED_USAGE in last or _ERROR in last):
                break
            cut = start
        if cut < 2 or not data.startswith(_FRAME_START):
            return None, data
        run = data[:cut] if cut < len(data) else data
        try:
            # one search pass (``bytes.replace`` makes two: it counts first)
            frames = _ORDINARY_CHUNKS_DECODER.decode(
                b"[" + b",".join(run[6:-2].split(_FRAME_JOIN)) + b"]"
            )
        except msgspec.DecodeError:
            return None, data
        return RawFrames(run, self._parse_payload, len(frames)), data[cut:]

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> UpstreamError:
        """See :meth:`proxy.providers.base.HttpProvider.parse_error`."""
        message, code = _error_text(body)
        return self._classify(status, message, code, retry_after=retry_after_seconds(headers))

    def _classify(
        self, status: int, message: str, code: str | None, *, retry_after: float | None
    ) -> UpstreamError:
        message = message or f"upstream answered HTTP {status}"
        # Context-window and content-policy errors carry the gateway's code whatever the
        # vendor's spelling (Azure's ``content_filter``), so clients can rely on it.
        if code in _CONTEXT_CODES:
            return ContextWindowExceeded(
                message, upstream_status=status, status=400, provider=self.name
            )
        if code in _POLICY_CODES:
            return ContentPolicyViolation(
                message, upstream_status=status, status=400, provider=self.name
            )
        return upstream_error_for_status(
            status, message, provider=self.name, retry_after=retry_after, code=code
        )


def _code_text(code: str | int | None) -> str | None:
    return None if code is None else str(code)


def _error_text(body: bytes) -> tuple[str, str | None]:
    """The message and code of an OpenAI-style error body; raw text if it is not JSON."""
    try:
        envelope = _ERROR_DECODER.decode(body)
    except msgspec.DecodeError:
        return body[:500].decode("utf-8", "replace").strip(), None
    error: Any = envelope.error
    if isinstance(error, _WireError):
        return error.message, _code_text(error.code)
    if isinstance(error, str):
        return error, None
    return envelope.message or "", None
