"""The Google Gemini provider: ``generateContent`` and ``streamGenerateContent?alt=sse``.

Request translation (canonical, OpenAI-shaped → ``GenerateContentRequest``, v1beta):

- ``POST {base_url}/models/{model}:generateContent`` (or ``:streamGenerateContent?alt=sse``);
  a model that already has a collection prefix (``tunedModels/x``) keeps it; each segment is
  percent-encoded, and a dot segment is a 400 (the model is client-chosen). Auth is the
  ``x-goog-api-key`` header; configured ``headers`` go with every request.
- ``system`` and ``developer`` messages → ``systemInstruction`` (one text part each). Roles
  ``user`` → ``user``, ``assistant`` → ``model``; ``tool`` messages → ``functionResponse`` parts
  of a user turn, named after the tool call they answer (found in the earlier assistant turn).
  The response object is the tool's JSON output when that is an object, else
  ``{"output": <value or text>}`` (the convention the API documents). Consecutive turns of the
  same role are merged.
- Parts: text → ``text``; ``image_url`` ``data:`` URLs and audio → ``inlineData``; http(s) image
  URLs → ``fileData`` (MIME type guessed from the path); a ``file`` part with a ``data:`` URL →
  ``inlineData``. Assistant ``tool_calls`` → ``functionCall`` parts (arguments must be a JSON
  object); assistant ``reasoning_content`` is not sent back.
- ``tools`` → one ``functionDeclarations`` tool, parameters sent as ``parametersJsonSchema`` (the
  client's JSON Schema unchanged, no lossy conversion to the OpenAPI subset); ``tool_choice``
  ``auto`` / ``none`` / ``required`` / ``{function}`` → ``AUTO`` / ``NONE`` / ``ANY`` / ``ANY``
  with ``allowedFunctionNames``.
- ``generationConfig``: ``temperature``, ``top_p`` → ``topP``, ``top_k`` (an extra field) →
  ``topK``, ``max_completion_tokens``/``max_tokens`` → ``maxOutputTokens``, ``stop`` →
  ``stopSequences``, ``n`` → ``candidateCount``, ``seed``, presence/frequency penalties;
  ``response_format`` ``json_object`` → ``responseMimeType: application/json``, ``json_schema``
  → that plus ``responseJsonSchema``; ``reasoning_effort`` → ``thinkingConfig`` with
  :data:`THINKING_BUDGETS` (Google's own OpenAI-compatibility mapping: low 1024, medium 8192,
  high 24576; ``none`` → budget 0) and ``includeThoughts`` so thought summaries come back as
  ``reasoning_content``.
- Extra fields: ``safetySettings`` and ``cachedContent`` (or their snake_case names) are passed
  at top level; ``logprobs``, ``logit_bias``, ``user`` have no equivalent and are dropped.

Response translation: text parts → content, ``thought`` parts → ``reasoning_content``,
``functionCall`` parts → ``tool_calls``. Gemini gives no tool-call ids (or only sometimes), so
ids are derived deterministically (:func:`tool_call_id`); a part's ``thoughtSignature`` (which
Gemini 3 requires back with its function call) rides in the id after :data:`SIGNATURE_MARK`
and is restored on the way back. Finish reasons per :data:`FINISH_REASONS`, and ``tool_calls``
whenever the candidate called a function (Gemini says ``STOP``). A prompt blocked by
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

import mimetypes
import zlib
from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

from proxy.canonical import (
    AudioPart,
    Call,
    Choice,
    Chunk,
    ChunkChoice,
    ContentPart,
    Delta,
    Embeddings,
    FilePart,
    FinishReason,
    FunctionCall,
    FunctionCallDelta,
    ImagePart,
    Message,
    Params,
    RefusalPart,
    Response,
    TextPart,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from proxy.errors import (
    BadRequest,
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

THINKING_BUDGETS: dict[str, int] = {
    "none": 0,
    "minimal": 1024,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 24576,
    "max": 24576,
}
"""``reasoning_effort`` → ``thinkingConfig.thinkingBudget`` (24576 is valid on every 2.5 model)."""

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

SIGNATURE_MARK = "__thought__"
"""Separates a generated tool-call id from the ``thoughtSignature`` carried inside it."""

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


# --- wire types (request and response share Part and Content) ----------------------------------


class _Blob(Struct, rename="camel"):
    mime_type: str
    data: str


class _FileData(Struct, rename="camel"):
    mime_type: str
    file_uri: str


class _FunctionCall(Struct, omit_defaults=True):
    name: str
    args: Raw | UnsetType = UNSET
    id: str | UnsetType = UNSET


class _FunctionResponse(Struct):
    name: str
    response: Raw


class _Part(Struct, omit_defaults=True, rename="camel"):
    text: str | UnsetType = UNSET
    inline_data: _Blob | UnsetType = UNSET
    file_data: _FileData | UnsetType = UNSET
    function_call: _FunctionCall | UnsetType = UNSET
    function_response: _FunctionResponse | UnsetType = UNSET
    thought: bool | UnsetType = UNSET
    thought_signature: str | UnsetType = UNSET


class _Content(Struct, omit_defaults=True):
    parts: list[_Part] = msgspec.field(default_factory=list)
    role: str | UnsetType = UNSET


class _FunctionDeclaration(Struct, omit_defaults=True, rename="camel"):
    name: str
    description: str | UnsetType = UNSET
    parameters_json_schema: dict[str, Any] | UnsetType = UNSET


class _Tool(Struct, rename="camel"):
    function_declarations: list[_FunctionDeclaration]


class _FunctionCallingConfig(Struct, omit_defaults=True, rename="camel"):
    mode: str
    allowed_function_names: list[str] | UnsetType = UNSET


class _ToolConfig(Struct, rename="camel"):
    function_calling_config: _FunctionCallingConfig


class _ThinkingConfig(Struct, omit_defaults=True, rename="camel"):
    thinking_budget: int
    include_thoughts: bool | UnsetType = UNSET


class _GenerationConfig(Struct, omit_defaults=True, rename="camel"):
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    top_k: int | UnsetType = UNSET
    max_output_tokens: int | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    candidate_count: int | UnsetType = UNSET
    seed: int | UnsetType = UNSET
    presence_penalty: float | UnsetType = UNSET
    frequency_penalty: float | UnsetType = UNSET
    response_mime_type: str | UnsetType = UNSET
    response_json_schema: dict[str, Any] | UnsetType = UNSET
    thinking_config: _ThinkingConfig | UnsetType = UNSET


class _Request(Struct, omit_defaults=True, rename="camel"):
    contents: list[_Content]
    system_instruction: _Content | UnsetType = UNSET
    tools: list[_Tool] | UnsetType = UNSET
    tool_config: _ToolConfig | UnsetType = UNSET
    generation_config: _GenerationConfig | UnsetType = UNSET


class _Candidate(Struct, rename="camel"):
    content: _Content | None = None
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
_ANY_DECODER = msgspec.json.Decoder()
_INT_DECODER = msgspec.json.Decoder(int)


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
        system, contents = _conversation(call.messages)
        request = _Request(
            contents=contents,
            system_instruction=_Content(parts=system) if system else UNSET,
            tools=_tools(call),
            tool_config=_tool_config(params.tool_choice),
            generation_config=_generation_config(params, call.extra),
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


# --- request helpers ---------------------------------------------------------------------------


def _conversation(messages: list[Message]) -> tuple[list[_Part], list[_Content]]:
    """The ``systemInstruction`` parts and the contents for ``messages`` (see module docstring)."""
    system: list[_Part] = []
    contents: list[_Content] = []
    names: dict[str, str] = {}
    for position, message in enumerate(messages):
        role = message.role
        if role in ("system", "developer"):
            text = message.text()
            if text:
                system.append(_Part(text=text))
            continue
        if role == "user":
            parts = _parts(message.content, position)
        elif role == "assistant":
            role = "model"
            parts = _parts(message.content, position) + _function_calls(message, position, names)
        elif role == "tool":
            role = "user"
            parts = [_function_response(message, position, names)]
        else:
            raise BadRequest(
                f"messages[{position}]: role {role!r} is not supported by the gemini provider;"
                " use tool messages",
                param=f"messages[{position}].role",
            )
        if not parts:
            continue
        if contents and contents[-1].role == role:
            contents[-1].parts.extend(parts)
        else:
            contents.append(_Content(parts=parts, role=role))
    return system, contents


def _parts(content: str | list[ContentPart] | None, position: int) -> list[_Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_Part(text=content)] if content else []
    parts: list[_Part] = []
    for index, part in enumerate(content):
        where = f"messages[{position}].content[{index}]"
        if isinstance(part, TextPart):
            if part.text:
                parts.append(_Part(text=part.text))
        elif isinstance(part, RefusalPart):
            parts.append(_Part(text=part.refusal))
        elif isinstance(part, ImagePart):
            parts.append(_media(part.image_url.url, where))
        elif isinstance(part, AudioPart):
            mime_type = f"audio/{part.input_audio.format}"
            parts.append(_Part(inline_data=_Blob(mime_type=mime_type, data=part.input_audio.data)))
        elif isinstance(part, FilePart):
            data_url = part.file.get("file_data")
            if not isinstance(data_url, str) or not data_url.startswith("data:"):
                raise BadRequest(
                    "the gemini provider accepts files only as data: URLs in file_data",
                    param=where,
                )
            parts.append(_media(data_url, where))
    return parts


def _media(url: str, where: str) -> _Part:
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        mime_type, _, encoding = header.partition(";")
        if not comma or encoding != "base64" or not mime_type:
            raise BadRequest("a data: URL must be data:<media type>;base64,<data>", param=where)
        return _Part(inline_data=_Blob(mime_type=mime_type, data=data))
    if url.startswith(("http://", "https://")):
        mime_type = mimetypes.guess_type(url.split("?", 1)[0])[0] or "image/jpeg"
        return _Part(file_data=_FileData(mime_type=mime_type, file_uri=url))
    raise BadRequest("an image must be an http(s) URL or a base64 data: URL", param=where)


def _function_calls(message: Message, position: int, names: dict[str, str]) -> list[_Part]:
    if not message.tool_calls:
        return []
    parts: list[_Part] = []
    for index, tool_call in enumerate(message.tool_calls):
        name = tool_call.function.name
        names[tool_call.id] = name
        arguments = tool_call.function.arguments.strip() or "{}"
        if not isinstance(_decode_any(arguments), dict):
            raise BadRequest(
                "tool call arguments must be a JSON object",
                param=f"messages[{position}].tool_calls[{index}].function.arguments",
            )
        _, mark, signature = tool_call.id.partition(SIGNATURE_MARK)
        parts.append(
            _Part(
                function_call=_FunctionCall(name=name, args=Raw(arguments)),
                thought_signature=signature if mark else UNSET,
            )
        )
    return parts


def _function_response(message: Message, position: int, names: dict[str, str]) -> _Part:
    call_id = message.tool_call_id
    name = names.get(call_id) if isinstance(call_id, str) else None
    if name is None:
        name = message.name if isinstance(message.name, str) else None
    if name is None:
        raise BadRequest(
            "a tool message must answer a tool call of an earlier assistant message",
            param=f"messages[{position}].tool_call_id",
        )
    text = message.text()
    value = _decode_any(text)
    if isinstance(value, dict):
        response = Raw(text.encode())
    else:
        response = Raw(_ENCODER.encode({"output": text if value is _INVALID else value}))
    return _Part(function_response=_FunctionResponse(name=name, response=response))


_INVALID = object()


def _decode_any(text: str) -> Any:
    """The JSON value of ``text``, or ``_INVALID`` if it is not JSON."""
    try:
        return _ANY_DECODER.decode(text)
    except msgspec.DecodeError:
        return _INVALID


def _tools(call: Call) -> list[_Tool] | UnsetType:
    tools = call.params.tools
    if not tools:
        return UNSET
    declarations = [
        _FunctionDeclaration(
            name=tool.function.name,
            description=tool.function.description,
            parameters_json_schema=tool.function.parameters,
        )
        for tool in tools
    ]
    return [_Tool(function_declarations=declarations)]


def _tool_config(choice: str | dict[str, Any] | UnsetType | None) -> _ToolConfig | UnsetType:
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise BadRequest("tool_choice must name a function", param="tool_choice")
        calling = _FunctionCallingConfig(mode="ANY", allowed_function_names=[name])
    elif choice == "none":
        calling = _FunctionCallingConfig(mode="NONE")
    elif choice == "required":
        calling = _FunctionCallingConfig(mode="ANY")
    elif choice == "auto":
        calling = _FunctionCallingConfig(mode="AUTO")
    else:
        return UNSET
    return _ToolConfig(function_calling_config=calling)


def _generation_config(params: Params, extra: dict[str, Raw]) -> _GenerationConfig | UnsetType:
    config = _GenerationConfig(
        temperature=_unset(params.temperature),
        top_p=_unset(params.top_p),
        top_k=_top_k(extra),
        max_output_tokens=_first_int(params.max_completion_tokens, params.max_tokens),
        stop_sequences=[params.stop] if isinstance(params.stop, str) else params.stop or UNSET,
        candidate_count=_unset(params.n),
        seed=_unset(params.seed),
        presence_penalty=_unset(params.presence_penalty),
        frequency_penalty=_unset(params.frequency_penalty),
        thinking_config=_thinking(params.reasoning_effort),
    )
    response_format = params.response_format
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind in ("json_object", "json_schema"):
            config.response_mime_type = "application/json"
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise BadRequest(
                    "response_format json_schema needs a schema",
                    param="response_format.json_schema",
                )
            config.response_json_schema = schema
    return UNSET if config == _EMPTY_CONFIG else config


_EMPTY_CONFIG = _GenerationConfig()


def _thinking(effort: str | UnsetType | None) -> _ThinkingConfig | UnsetType:
    budget = THINKING_BUDGETS.get(effort) if isinstance(effort, str) else None
    if budget is None:
        return UNSET
    return _ThinkingConfig(thinking_budget=budget, include_thoughts=True if budget else UNSET)


def _top_k(extra: dict[str, Raw]) -> int | UnsetType:
    raw = extra.get("top_k")
    if raw is None:
        return UNSET
    try:
        return _INT_DECODER.decode(raw)
    except msgspec.DecodeError:
        raise BadRequest("top_k must be an integer", param="top_k") from None


def _unset(value: Any) -> Any:
    return UNSET if value is None else value


def _first_int(*values: int | UnsetType | None) -> int | UnsetType:
    for value in values:
        if isinstance(value, int):
            return value
    return UNSET
