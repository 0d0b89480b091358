"""The Google Gemini provider: ``generateContent`` and ``streamGenerateContent?alt=sse``.

Request translation (canonical, OpenAI-shaped → ``GenerateContentRequest``, v1beta): the
contents, system instruction, tools, tool config and generation config are translated by
:mod:`proxy.providers.gemini_request` (which says what it maps where, and what it refuses);
this module sends them:

- ``POST {base_url}/models/{model}:generateContent`` (or ``:streamGenerateContent?alt=sse``);
  a model that already has a collection prefix (``tunedModels/x``) keeps it; each segment is
  percent-encoded, and a dot segment is a 400 (the model is client-chosen). Auth is the
  ``x-goog-api-key`` header; configured ``headers`` go with every request.
- Extra fields: ``safetySettings`` and ``cachedContent`` (or their snake_case names) are passed
  at top level (:data:`PASSED_THROUGH`); ``logprobs``, ``logit_bias``, ``user`` have no
  equivalent and are dropped.

Response translation: text parts → content, ``thought`` parts → ``reasoning_content``,
``functionCall`` parts → ``tool_calls``. Gemini gives no tool-call ids (or only sometimes), so
ids are derived deterministically (:func:`tool_call_id`); a part's ``thoughtSignature`` (which
Gemini 3 requires back with its function call) rides in the id after
:data:`~proxy.providers.gemini_request.SIGNATURE_MARK` and is restored on the way back. Finish
reasons per :data:`FINISH_REASONS`, and ``tool_calls`` whenever the candidate called a function
(Gemini says ``STOP``). A prompt blocked by
``promptFeedback.blockReason`` is a :class:`~proxy.errors.ContentPolicyViolation`, a whole
response without candidates an :class:`~proxy.errors.UpstreamError` (502). Usage:
``promptTokenCount`` includes ``cachedContentTokenCount``, tool-use prompt tokens are billed as
input, ``candidatesTokenCount`` excludes ``thoughtsTokenCount``. Streams have no end marker:
:class:`GeminiStreamParser` treats a body that ends after a finish reason as complete (and sends
the usage then), any other end as a cut. Errors use Google's ``{"error": {code, message,
status, details}}``; a bad key is a 400 ``API_KEY_INVALID``, shown as an auth error, and a
429's ``RetryInfo.retryDelay`` is its Retry-After.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import NamedTuple

import msgspec
from msgspec import UNSET, Struct

from proxy.canonical import (
    Call,
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    Embeddings,
    FinishReason,
    FunctionCall,
    FunctionCallDelta,
    Message,
    Response,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from proxy.errors import (
    ContentPolicyViolation,
    ContextWindowExceeded,
    UpstreamAuthError,
    UpstreamError,
    UpstreamUnavailable,
    upstream_error_for_status,
)
from proxy.providers.base import (
    HttpRequest,
    ProviderConfig,
    encode_raw_fields,
    malformed,
    merge_json_objects,
    path_segment,
    retry_after_seconds,
    with_plugin_headers,
)
from proxy.providers.gemini_embeddings import gemini_embeddings_body, parse_gemini_embeddings
from proxy.providers.gemini_request import (
    SIGNATURE_MARK,
    Content,
    Request,
    conversation,
    generation_config,
    tool_config,
    tools,
)

FINISH_REASONS: dict[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
}
"""Gemini ``finishReason`` → canonical finish reason (anything else: ``stop``)."""


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


# --- response wire types (a candidate's Content is the request module's) ----------------------


class _Candidate(Struct, rename="camel"):
    content: Content | None = None
    finish_reason: str | None = None
    index: int = 0


class _PromptFeedback(Struct, rename="camel"):
    block_reason: str | None = None


class _UsageMetadata(Struct, rename="camel"):
    prompt_token_count: int = 0
    cached_content_token_count: int = 0
    candidates_token_count: int = 0
    tool_use_prompt_token_count: int = 0
    thoughts_token_count: int = 0

    def canonical(self) -> Usage:
        cached = self.cached_content_token_count
        return Usage(
            input=max(self.prompt_token_count - cached, 0) + self.tool_use_prompt_token_count,
            cache_read=cached,
            output=self.candidates_token_count,
            reasoning=self.thoughts_token_count,
        )


class _ErrorDetail(Struct):
    type: str = msgspec.field(default="", name="@type")
    reason: str = ""
    retry_delay: str = msgspec.field(default="", name="retryDelay")


class GoogleError(Struct):
    """Google's error object: ``{code, message, status, details}``."""

    code: int = 0
    message: str = ""
    status: str = ""
    details: list[_ErrorDetail] = msgspec.field(default_factory=list)


class _WireResponse(Struct, rename="camel"):
    candidates: list[_Candidate] = msgspec.field(default_factory=list)
    prompt_feedback: _PromptFeedback | None = None
    usage_metadata: _UsageMetadata | None = None
    model_version: str = ""
    response_id: str = ""
    error: GoogleError | None = None


class _ErrorEnvelope(Struct):
    error: GoogleError | None = None


_ENCODER = msgspec.json.Encoder()
_RESPONSE_DECODER = msgspec.json.Decoder(_WireResponse)
_ERROR_DECODER = msgspec.json.Decoder(_ErrorEnvelope | list[_ErrorEnvelope])


def tool_call_id(response_id: str, candidate: int, position: int, name: str) -> str:
    """The id of the ``position``-th function call of a candidate, when Gemini gave none."""
    digest = zlib.crc32(f"{response_id}:{candidate}:{position}:{name}".encode())
    return f"call_{digest:08x}{position}"


class GeminiProvider:
    """Pure translation between canonical calls and the Gemini ``generateContent`` API."""

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

    def parse_response(self, body: bytes, model: str) -> Response:
        """See :meth:`proxy.providers.base.HttpProvider.parse_response`."""
        wire = _decode(self, body, "response")
        if not wire.candidates:
            raise UpstreamError(
                "upstream answered with no candidates", upstream_status=200, provider=self.name
            )
        choices = []
        for candidate in wire.candidates:
            texts, thoughts, calls = _split_parts(candidate, wire.response_id, 0)
            message = Message(
                role="assistant",
                content="".join(texts) if texts or not calls else None,
                tool_calls=[call.whole() for call in calls] or UNSET,
                reasoning_content="".join(thoughts) if thoughts else UNSET,
            )
            finish = _finish(candidate.finish_reason, bool(calls)) or "stop"
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


class GeminiStreamParser:
    """Translates one Gemini SSE stream; see :class:`proxy.providers.base.StreamParser`.

    Each event is a whole ``GenerateContentResponse`` carrying only the new parts. The parser
    numbers function calls per candidate across events, remembers which candidates called one
    (their ``STOP`` becomes ``tool_calls``), keeps the latest ``usageMetadata``, and, at the end
    of the body, sends it in a usage-only chunk if a finish reason was seen (else the stream was
    cut).
    """

    __slots__ = ("_calls", "_finished", "_id", "_model", "_provider", "_started", "_usage")

    def __init__(self, provider: GeminiProvider) -> None:
        self._provider = provider
        self._id = ""
        self._model = ""
        self._started = False
        self._finished = False
        self._calls: dict[int, int] = {}
        self._usage: Usage | None = None

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """See :meth:`proxy.providers.base.StreamParser.parse_event`."""
        wire = _decode(self._provider, data, "stream event")
        self._id = self._id or wire.response_id
        self._model = self._model or wire.model_version
        if wire.usage_metadata is not None:
            self._usage = wire.usage_metadata.canonical()
        choices = []
        for candidate in wire.candidates:
            index = candidate.index
            texts, thoughts, calls = _split_parts(candidate, self._id, self._calls.get(index, 0))
            if calls:
                self._calls[index] = self._calls.get(index, 0) + len(calls)
            finish = _finish(candidate.finish_reason, index in self._calls)
            if finish is not None:
                self._finished = True
            if not (texts or thoughts or calls or finish):
                continue
            delta = Delta(
                content="".join(texts) if texts else UNSET,
                reasoning_content="".join(thoughts) if thoughts else UNSET,
                tool_calls=[call.delta() for call in calls] or UNSET,
            )
            choices.append(ChunkChoice(index=index, delta=delta, finish_reason=finish))
        if not choices:
            return None
        if not self._started:
            self._started = True
            for choice in choices:
                choice.delta.role = "assistant"
        return Chunk(id=self._id, model=self._model, choices=choices)

    def end(self) -> Chunk | None:
        """See :meth:`proxy.providers.base.StreamParser.end`."""
        if not self._finished:
            raise UpstreamUnavailable(
                "upstream closed the stream before a finish reason", provider=self._provider.name
            )
        if self._usage is None:
            return None
        return Chunk(id=self._id, model=self._model, choices=[], usage=self._usage)


class _Call(NamedTuple):
    """A whole function call of a candidate, numbered among the candidate's calls."""

    index: int
    id: str
    name: str
    arguments: str

    def whole(self) -> ToolCall:
        return ToolCall(id=self.id, function=FunctionCall(name=self.name, arguments=self.arguments))

    def delta(self) -> ToolCallDelta:
        function = FunctionCallDelta(name=self.name, arguments=self.arguments)
        return ToolCallDelta(index=self.index, id=self.id, type="function", function=function)


def _split_parts(
    candidate: _Candidate, response_id: str, first_call: int
) -> tuple[list[str], list[str], list[_Call]]:
    """A candidate's answer text, thought text and function calls (numbered from ``first_call``)."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[_Call] = []
    parts = candidate.content.parts if candidate.content is not None else []
    for part in parts:
        call = part.function_call
        if call is not UNSET:
            position = first_call + len(calls)
            call_id = call.id or tool_call_id(response_id, candidate.index, position, call.name)
            if part.thought_signature:
                call_id = f"{call_id}{SIGNATURE_MARK}{part.thought_signature}"
            arguments = bytes(call.args).decode() if call.args is not UNSET else "{}"
            calls.append(_Call(position, call_id, call.name, arguments))
        elif isinstance(part.text, str):
            (thoughts if part.thought is True else texts).append(part.text)
    return texts, thoughts, calls


def _decode(provider: GeminiProvider, data: bytes, what: str) -> _WireResponse:
    """Decode a response or stream event; raise the error it carries or its prompt block."""
    try:
        wire = _RESPONSE_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise malformed(provider.name, what, exc) from None
    if wire.error is not None:
        raise provider.classify(wire.error.code or 500, wire.error)
    feedback = wire.prompt_feedback
    if not wire.candidates and feedback is not None and feedback.block_reason:
        raise ContentPolicyViolation(
            f"the prompt was blocked by the provider (blockReason {feedback.block_reason})",
            upstream_status=200,
            status=400,
            provider=provider.name,
        )
    return wire


def _model_path(model: str) -> str:
    """The URL path of ``model``: ``models/{model}``, or a name with its collection
    (``tunedModels/x``) as is; each segment percent-encoded (see :func:`path_segment`)."""
    if "/" not in model:
        return "models/" + path_segment(model)
    return "/".join(path_segment(segment) for segment in model.split("/"))


def _finish(reason: str | None, called: bool) -> FinishReason | None:
    if reason is None or reason == "FINISH_REASON_UNSPECIFIED":
        return None
    finish = FINISH_REASONS.get(reason, "stop")
    return "tool_calls" if called and finish == "stop" else finish


def _retry_delay(error: GoogleError) -> float | None:
    """Seconds from a ``google.rpc.RetryInfo`` detail (``"3s"``, ``"1.5s"``), if any."""
    for detail in error.details:
        if detail.type == _RETRY_INFO and detail.retry_delay.endswith("s"):
            try:
                return max(float(detail.retry_delay[:-1]), 0.0)
            except ValueError:
                return None
    return None
