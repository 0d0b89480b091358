"""The Google Gemini provider: ``generateContent`` and ``streamGenerateContent?alt=sse``.

Request translation (canonical, OpenAI-shaped → ``GenerateContentRequest``, v1beta): the
contents, system instruction, tools, tool config and generation config are translated by
:mod:`proxy.providers.gemini.request` (which says what it maps where, and what it refuses);
this module sends them:

- ``POST {base_url}/models/{model}:generateContent`` (or ``:streamGenerateContent?alt=sse``);
  a model that already has a collection prefix (``tunedModels/x``) keeps it; each segment is
  percent-encoded, and a dot segment is a 400 (the model is client-chosen). Auth is the
  ``x-goog-api-key`` header; configured ``headers`` go with every request.
- Extra fields: ``safetySettings`` and ``cachedContent`` (or their snake_case names) are passed
  at top level (:data:`PASSED_THROUGH`); ``logprobs``, ``logit_bias``, ``user`` have no
  equivalent and are dropped.

Response translation: text parts → content, ``thought`` parts → ``reasoning_content``,
``functionCall`` parts → ``tool_calls``. Gemini gives no tool-call ids (or only sometimes), so ids
are derived deterministically (:func:`~proxy.providers.gemini.stream.tool_call_id`); a part's
``thoughtSignature`` (which Gemini 3 requires back with its function call) rides in the id after
:data:`~proxy.providers.gemini.request.SIGNATURE_MARK` and is restored on the way back. Finish
reasons per :data:`~proxy.providers.gemini.stream.FINISH_REASONS`, and ``tool_calls`` whenever the
candidate called a function (Gemini says ``STOP``). A prompt blocked by
``promptFeedback.blockReason`` is a :class:`~proxy.core.errors.ContentPolicyViolation`, a whole
response without candidates an :class:`~proxy.core.errors.UpstreamError` (502). Usage:
``promptTokenCount`` includes ``cachedContentTokenCount``, tool-use prompt tokens are billed as
input, ``candidatesTokenCount`` excludes ``thoughtsTokenCount``. Streams have no end marker:
:class:`~proxy.providers.gemini.stream.GeminiStreamParser` treats a body that ends after a finish
reason as complete (and sends the usage then), any other end as a cut. Errors use Google's
``{"error": {code, message, status, details}}``; a bad key is a 400 ``API_KEY_INVALID``, shown as
an auth error, and a 429's ``RetryInfo.retryDelay`` is its Retry-After.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from msgspec import UNSET, Struct

from proxy.core.canonical import Call, MediaOperation, Message
from proxy.core.errors import (
    ContextWindowExceeded,
    UpstreamAuthError,
    UpstreamError,
    upstream_error_for_status,
)
from proxy.core.reply import Choice, Chunk, Embeddings, MediaAnswer, Response
from proxy.providers.base import (
    HttpRequest,
    ProviderConfig,
    encode_raw_fields,
    merge_json_objects,
    path_segment,
    retry_after_seconds,
    with_plugin_headers,
)
from proxy.providers.gemini.embeddings import gemini_embeddings_body, parse_gemini_embeddings
from proxy.providers.gemini.media import OPERATIONS, build_gemini_media, parse_gemini_media
from proxy.providers.gemini.request import (
    Content,
    Request,
    conversation,
    generation_config,
    tool_config,
    tools,
)
from proxy.providers.gemini.stream import (
    GeminiStreamParser,
    GoogleError,
    decode_response,
    finish_reason,
    split_parts,
)

PASSED_THROUGH: dict[str, str] = {
    "safetySettings": "safetySettings",
    "safety_settings": "safetySettings",
    "cachedContent": "cachedContent",
    "cached_content": "cachedContent",
}
"""Extra request fields passed at top level, by the name a client used → Gemini's name."""

_CONTEXT_MARKERS = ("exceeds the maximum number of tokens", "input token count", "context window")
_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED"})
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


class GeminiConfig(ProviderConfig, tag="gemini", frozen=True, forbid_unknown_fields=True):
    """A Gemini API upstream (Google AI Studio keys).

    ``api_key`` is required (empty or absent: the provider is not ready); ``base_url`` ends at the
    API version; ``headers`` go with every request.
    """

    base_url: str = "https://generativelanguage.googleapis.com/v1beta"
    api_key: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)


# --- the error envelope (the response wire types, which stream events share: gemini_stream) ---


class _ErrorEnvelope(Struct):
    error: GoogleError | None = None


_ENCODER = msgspec.json.Encoder()
_ERROR_DECODER = msgspec.json.Decoder(_ErrorEnvelope | list[_ErrorEnvelope])


class GeminiProvider:
    """Pure translation between canonical calls and the Gemini ``generateContent`` API; image
    generation (Imagen) and speech in OpenAI's shapes (:mod:`.media`)."""

    media_operations: frozenset[MediaOperation] = OPERATIONS

    def __init__(self, name: str, config: GeminiConfig) -> None:
        self.name = name
        self.config = config
        self.ready = bool(config.api_key)
        self.secrets: tuple[str, ...] = (config.api_key,) if config.api_key else ()
        self._base = config.base_url.rstrip("/")
        self._headers = {
            "content-type": "application/json",
            **config.headers,
            "x-goog-api-key": config.api_key or "",
        }

    def build_request(self, call: Call, model: str) -> HttpRequest:
        """See :meth:`proxy.providers.base.HttpProvider.build_request`."""
        params = call.params
        system, contents = conversation(call.messages)
        request = Request(
            contents=contents,
            system_instruction=Content(parts=system) if system else UNSET,
            tools=tools(call),
            tool_config=tool_config(params.tool_choice),
            generation_config=generation_config(params, call.extra),
        )
        extra = {
            PASSED_THROUGH[key]: value for key, value in call.extra.items() if key in PASSED_THROUGH
        }
        body = merge_json_objects(_ENCODER.encode(request), encode_raw_fields(extra))
        path = _model_path(model)
        method = ":streamGenerateContent?alt=sse" if call.stream else ":generateContent"
        headers = with_plugin_headers(self._headers, call.upstream_headers)
        return HttpRequest(url=f"{self._base}/{path}{method}", headers=headers, body=body)

    def build_embeddings(self, call: Call, model: str) -> list[HttpRequest]:
        """An embeddings call: ``batchEmbedContents`` (:mod:`.gemini_embeddings`)."""
        path = _model_path(model)
        body = gemini_embeddings_body(call, path)
        headers = with_plugin_headers(self._headers, call.upstream_headers)
        url = f"{self._base}/{path}:batchEmbedContents"
        return [HttpRequest(url=url, headers=headers, body=body)]

    def parse_embeddings(self, bodies: list[bytes], call: Call, model: str) -> Embeddings:
        """The vectors of a ``batchEmbedContents`` answer (:mod:`.gemini_embeddings`)."""
        return parse_gemini_embeddings(self.name, bodies[0], call, model)

    def build_media(self, call: Call, model: str) -> HttpRequest:
        """An image generation (Imagen ``predict``) or a speech (``generateContent``) call
        (:mod:`.media`; see :meth:`proxy.providers.base.ServesMedia.build_media`)."""
        url, body = build_gemini_media(self._base, _model_path(model), call)
        headers = with_plugin_headers(self._headers, call.upstream_headers)
        return HttpRequest(url=url, headers=headers, body=body)

    def parse_media(
        self, headers: Mapping[str, str], body: bytes, call: Call, model: str
    ) -> MediaAnswer:
        """OpenAI's images or audio from Gemini's answer (:mod:`.media`)."""
        return parse_gemini_media(self, body, call)

    def parse_response(self, body: bytes, model: str) -> Response:
        """See :meth:`proxy.providers.base.HttpProvider.parse_response`."""
        wire = decode_response(self, body, "response")
        if not wire.candidates:
            raise UpstreamError(
                "upstream answered with no candidates", upstream_status=200, provider=self.name
            )
        choices = []
        for candidate in wire.candidates:
            texts, thoughts, calls = split_parts(candidate, wire.response_id, 0)
            message = Message(
                role="assistant",
                content="".join(texts) if texts or not calls else None,
                tool_calls=[call.whole() for call in calls] or UNSET,
                reasoning_content="".join(thoughts) if thoughts else UNSET,
            )
            finish = finish_reason(candidate.finish_reason, bool(calls)) or "stop"
            choices.append(Choice(index=candidate.index, message=message, finish_reason=finish))
        return Response(
            id=wire.response_id,
            model=wire.model_version or model,
            choices=choices,
            usage=wire.usage_metadata.canonical() if wire.usage_metadata is not None else None,
        )

    def stream_parser(self) -> GeminiStreamParser:
        """A parser for one stream (see :class:`proxy.providers.base.StreamParser`)."""
        return GeminiStreamParser(self)

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """One event translated as if it opened a stream.

        A stream's tool-call numbering and its end need :meth:`stream_parser`, which is what the
        transport uses.
        """
        return GeminiStreamParser(self).parse_event(event, data)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> UpstreamError:
        """See :meth:`proxy.providers.base.HttpProvider.parse_error`."""
        try:
            envelope = _ERROR_DECODER.decode(body)
        except msgspec.DecodeError:
            envelope = None
        if isinstance(envelope, list):
            envelope = envelope[0] if envelope else None
        error = envelope.error if envelope is not None else None
        if error is None:
            error = GoogleError(message=body[:500].decode("utf-8", "replace").strip())
        return self.classify(status, error, retry_after=retry_after_seconds(headers))

    def classify(
        self, status: int, error: GoogleError, *, retry_after: float | None = None
    ) -> UpstreamError:
        """The gateway error for a Google error envelope answered with ``status``."""
        message = error.message or f"upstream answered HTTP {status}"
        reasons = {detail.reason for detail in error.details}
        if reasons & _AUTH_REASONS or "api key not valid" in message.lower():
            return UpstreamAuthError(
                message, upstream_status=status, status=502, provider=self.name
            )
        if status == 400 and any(marker in message.lower() for marker in _CONTEXT_MARKERS):
            return ContextWindowExceeded(
                message, upstream_status=status, status=400, provider=self.name
            )
        if retry_after is None:
            retry_after = _retry_delay(error)
        return upstream_error_for_status(
            status, message, provider=self.name, retry_after=retry_after
        )


def _model_path(model: str) -> str:
    """The URL path of ``model``: ``models/{model}``, or a name with its collection
    (``tunedModels/x``) as is; each segment percent-encoded (see :func:`path_segment`)."""
    if "/" not in model:
        return "models/" + path_segment(model)
    return "/".join(path_segment(segment) for segment in model.split("/"))


def _retry_delay(error: GoogleError) -> float | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail (``"3s"``, ``"1.5s"``), if any."""
    for detail in error.details:
        if detail.type == _RETRY_INFO and detail.retry_delay.endswith("s"):
            try:
                return max(float(detail.retry_delay[:-1]), 0.0)
            except ValueError:
                return None
    return None
