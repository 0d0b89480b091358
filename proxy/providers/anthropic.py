"""The Anthropic Messages provider: ``POST {base_url}/v1/messages``.

Request translation (canonical, OpenAI-shaped → Messages API):

- Auth is ``x-api-key`` plus ``anthropic-version`` (config, default ``2023-06-01``); configured
  ``headers`` (e.g. ``anthropic-beta``) go with every request.
- ``system`` and ``developer`` messages, wherever they appear, are lifted in order into the
  top-level ``system`` (one text block each). ``tool`` messages become ``tool_result`` blocks of a
  user turn. Consecutive turns of the same role are merged (the API wants alternation), and in a
  merged user turn the ``tool_result`` blocks come first, as the API requires.
- Parts: text → ``text`` (empty text is dropped: the API rejects it); ``image_url`` → ``image``
  with a ``base64`` source for ``data:`` URLs or a ``url`` source for http(s) URLs; a ``file``
  part carrying a PDF ``data:`` URL → ``document``; audio is a 400.
- Assistant ``tool_calls`` → ``tool_use`` blocks (the arguments must be a JSON object, else 400).
  Assistant ``reasoning_content`` is not sent back: the API would need its signature.
- ``tools`` → ``{name, description, input_schema}``; ``tool_choice`` ``auto`` / ``required`` /
  ``none`` / ``{"type": "function", ...}`` → ``auto`` / ``any`` / ``none`` / ``tool``;
  ``parallel_tool_calls: false`` → ``disable_parallel_tool_use``.
- ``max_tokens`` (required by the API) is ``max_completion_tokens``, else ``max_tokens``, else the
  config's ``max_tokens_default``. ``stop`` → ``stop_sequences``; ``temperature`` and ``top_p``
  are passed as given; ``user`` → ``metadata.user_id``; ``response_format`` ``json_schema`` →
  ``output_config.format``.
- ``reasoning_effort`` → ``thinking: {type: enabled, budget_tokens}`` with
  :data:`THINKING_BUDGETS` (``none`` sends no thinking). The budget counts inside ``max_tokens``,
  so when ``max_tokens`` is not above the budget it becomes ``budget + max_tokens``: the answer
  keeps the allowance the client asked for. ``temperature`` is then not sent (the API accepts
  none but 1 with thinking on).
- Request fields the gateway does not model are passed only if the Messages API has them
  (:data:`PASSED_THROUGH`, e.g. ``top_k``, ``thinking``); an explicit one wins over the mapping
  above. ``n`` > 1 is a 400; ``seed``, penalties, ``logit_bias`` and ``logprobs`` have no
  Anthropic equivalent and are dropped.

Response translation: ``text`` blocks → content, ``thinking`` blocks → ``reasoning_content``,
``tool_use`` → ``tool_calls``; stop reasons per :data:`FINISH_REASONS`, and the matched
``stop_sequence`` kept on the choice (``Choice.stop_sequence``). Usage is already in
disjoint buckets: ``input_tokens`` excludes cache reads (``cache_read_input_tokens``) and writes
(``cache_creation_input_tokens``); Anthropic does not report thinking tokens apart from
``output_tokens``, so ``reasoning`` stays 0. Streams (``message_start``, ``content_block_*``,
``message_delta``, ``message_stop``, ``ping``, ``error``) are translated by a per-stream
:class:`AnthropicStreamParser`, which maps each content block's ``input_json_delta`` fragments
to argument deltas of the right tool call. Errors: the ``{"type": "error", "error": {type,
message}}`` envelope, classified by status and message (prompt too long → context window,
content filtering → content policy, 529 ``overloaded_error`` → overloaded).

Token counting: :meth:`AnthropicProvider.count_tokens_request` asks the API's own
``POST /v1/messages/count_tokens`` for the exact input tokens of a call, translated as above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from proxy.canonical import (
    AudioPart,
    Call,
    Choice,
    Chunk,
    ChunkChoice,
    ContentPart,
    Delta,
    FilePart,
    FinishReason,
    FunctionCall,
    FunctionCallDelta,
    ImagePart,
    Message,
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
    UpstreamError,
    UpstreamUnavailable,
    upstream_error_for_status,
)
from proxy.providers.base import (
    HttpRequest,
    ProviderConfig,
    encode_raw_fields,
    malformed,
    merge_into_turn,
    merge_json_objects,
    retry_after_seconds,
    with_plugin_headers,
)

THINKING_BUDGETS: dict[str, int] = {
    "minimal": 1024,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "xhigh": 32768,
    "max": 32768,
}
"""``reasoning_effort`` → ``thinking.budget_tokens`` (1024 is the API's minimum)."""

FINISH_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic ``stop_reason`` → canonical finish reason (anything else: ``stop``)."""

PASSED_THROUGH = frozenset(
    {"top_k", "thinking", "output_config", "container", "inference_geo", "cache_control"}
)
"""Unmodelled request fields passed to Anthropic (other unknown fields would be a 400 there)."""

_STATUS_BY_TYPE: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_CONTEXT_MARKERS = (
    "prompt is too long",
    "exceed context limit",
    "context window",
    "context length",
)
_POLICY_MARKERS = ("content filtering policy", "content policy", "usage policy")


class AnthropicConfig(ProviderConfig, tag="anthropic", frozen=True, forbid_unknown_fields=True):
    """An Anthropic Messages API upstream.

    ``api_key`` is required (empty or absent: the provider is not ready). ``anthropic_version``
    is sent as the ``anthropic-version`` header; ``max_tokens_default`` is the ``max_tokens``
    sent when the client gives none (the API requires one); ``headers`` go with every request.
    """

    base_url: str = "https://api.anthropic.com"
    api_key: str | None = None
    anthropic_version: str = "2023-06-01"
    max_tokens_default: Annotated[int, Meta(ge=1)] = 4096
    headers: dict[str, str] = msgspec.field(default_factory=dict)


# --- request -----------------------------------------------------------------------------------


class _Source(Struct, omit_defaults=True):
    type: str
    media_type: str | UnsetType = UNSET
    data: str | UnsetType = UNSET
    url: str | UnsetType = UNSET


class _TextBlock(Struct, tag="text", tag_field="type"):
    text: str


class _ImageBlock(Struct, tag="image", tag_field="type"):
    source: _Source


class _DocumentBlock(Struct, tag="document", tag_field="type"):
    source: _Source


class _ToolUseBlock(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: Raw


class _ToolResultBlock(Struct, tag="tool_result", tag_field="type", omit_defaults=True):
    tool_use_id: str
    content: str | list[_TextBlock | _ImageBlock | _DocumentBlock] | UnsetType = UNSET


_Block = _TextBlock | _ImageBlock | _DocumentBlock | _ToolUseBlock | _ToolResultBlock


class _Turn(Struct):
    role: str
    content: list[_Block]


class _ToolSpec(Struct, omit_defaults=True):
    name: str
    input_schema: dict[str, Any]
    description: str | UnsetType = UNSET


class _ToolChoice(Struct, omit_defaults=True):
    type: str
    name: str | UnsetType = UNSET
    disable_parallel_tool_use: bool | UnsetType = UNSET


class _Thinking(Struct):
    type: str
    budget_tokens: int


class _Metadata(Struct):
    user_id: str


class _OutputFormat(Struct):
    type: str
    schema: dict[str, Any]


class _OutputConfig(Struct):
    format: _OutputFormat


class _Request(Struct, omit_defaults=True):
    model: str
    max_tokens: int
    messages: list[_Turn]
    system: list[_TextBlock] | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    tools: list[_ToolSpec] | UnsetType = UNSET
    tool_choice: _ToolChoice | UnsetType = UNSET
    thinking: _Thinking | UnsetType = UNSET
    metadata: _Metadata | UnsetType = UNSET
    output_config: _OutputConfig | UnsetType = UNSET
    stream: bool = False


class _CountRequest(Struct, omit_defaults=True):
    model: str
    messages: list[_Turn]
    system: list[_TextBlock] | UnsetType = UNSET
    tools: list[_ToolSpec] | UnsetType = UNSET
    tool_choice: _ToolChoice | UnsetType = UNSET
    thinking: _Thinking | UnsetType = UNSET


class _TokenCount(Struct):
    input_tokens: Annotated[int, Meta(ge=0)]


# --- response and stream -----------------------------------------------------------------------


class _WireUsage(Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def canonical(self) -> Usage:
        return Usage(
            input=self.input_tokens or 0,
            cache_read=self.cache_read_input_tokens or 0,
            cache_write=self.cache_creation_input_tokens or 0,
            output=self.output_tokens or 0,
        )

    def update(self, later: _WireUsage) -> None:
        """Take ``later``'s counts where it has them (``message_delta`` counts are cumulative)."""
        for field in self.__struct_fields__:
            value = getattr(later, field)
            if value is not None:
                setattr(self, field, value)


class _WireBlock(Struct):
    type: str
    text: str = ""
    thinking: str = ""
    id: str = ""
    name: str = ""
    input: Raw | UnsetType = UNSET


class _WireMessage(Struct):
    id: str = ""
    model: str = ""
    content: list[_WireBlock] = msgspec.field(default_factory=list)
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: _WireUsage | None = None


class _WireDelta(Struct):
    type: str = ""
    text: str = ""
    partial_json: str = ""
    thinking: str = ""
    stop_reason: str | None = None
    stop_sequence: str | None = None


class _WireError(Struct):
    type: str = ""
    message: str = ""


class _Event(Struct):
    """Any stream event: which fields are set depends on ``type``."""

    type: str
    message: _WireMessage | None = None
    index: int = 0
    content_block: _WireBlock | None = None
    delta: _WireDelta | None = None
    usage: _WireUsage | None = None
    error: _WireError | None = None


class _ErrorEnvelope(Struct):
    error: _WireError | None = None


_ENCODER = msgspec.json.Encoder()
_MESSAGE_DECODER = msgspec.json.Decoder(_WireMessage)
_EVENT_DECODER = msgspec.json.Decoder(_Event)
_ERROR_DECODER = msgspec.json.Decoder(_ErrorEnvelope)
_COUNT_DECODER = msgspec.json.Decoder(_TokenCount)
_OBJECT_DECODER = msgspec.json.Decoder(dict[str, Any])


class AnthropicProvider:
    """Pure translation between canonical calls and the Anthropic Messages API."""

    def __init__(self, name: str, config: AnthropicConfig) -> None:
        self.name = name
        self.config = config
        self.ready = bool(config.api_key)
        self.secrets: tuple[str, ...] = (config.api_key,) if config.api_key else ()
        self._url = config.base_url.rstrip("/") + "/v1/messages"
        self._count_url = self._url + "/count_tokens"
        self._headers = {
            "content-type": "application/json",
            **config.headers,
            "anthropic-version": config.anthropic_version,
            "x-api-key": config.api_key or "",
        }

    def build_request(self, call: Call, model: str) -> HttpRequest:
        """See :meth:`proxy.providers.base.HttpProvider.build_request`."""
        params = call.params
        if isinstance(params.n, int) and params.n > 1:
            raise BadRequest("the anthropic provider answers one choice only (n=1)", param="n")
        extra = {k: v for k, v in call.extra.items() if k in PASSED_THROUGH}
        system, turns = _conversation(call.messages)
        max_tokens = _first_int(params.max_completion_tokens, params.max_tokens)
        if max_tokens is None:
            max_tokens = self.config.max_tokens_default
        thinking: _Thinking | UnsetType = UNSET
        temperature = _number(params.temperature)
        budget = THINKING_BUDGETS.get(params.reasoning_effort or "")
        if budget is not None and "thinking" not in extra:
            thinking = _Thinking(type="enabled", budget_tokens=budget)
            temperature = UNSET  # the API rejects any temperature but 1 with thinking on
            if max_tokens <= budget:
                max_tokens += budget
        request = _Request(
            model=model,
            max_tokens=max_tokens,
            messages=turns,
            system=system or UNSET,
            stop_sequences=_stop_sequences(params.stop),
            temperature=temperature,
            top_p=_number(params.top_p),
            tools=_tools(call),
            tool_choice=_tool_choice(params.tool_choice, params.parallel_tool_calls),
            thinking=thinking,
            metadata=_Metadata(user_id=params.user) if params.user else UNSET,
            output_config=UNSET if "output_config" in extra else _output(params.response_format),
            stream=call.stream,
        )
        body = merge_json_objects(_ENCODER.encode(request), encode_raw_fields(extra))
        headers = with_plugin_headers(self._headers, call.upstream_headers)
        return HttpRequest(url=self._url, headers=headers, body=body)

    def count_tokens_request(self, call: Call, model: str) -> HttpRequest:
        """``POST /v1/messages/count_tokens`` for ``call``'s input: what :meth:`build_request`
        would send (system, turns, tools, tool choice, thinking), without generation settings.
        Raises :class:`BadRequest` as :meth:`build_request` does."""
        system, turns = _conversation(call.messages)
        params = call.params
        budget = THINKING_BUDGETS.get(params.reasoning_effort or "")
        request = _CountRequest(
            model=model,
            messages=turns,
            system=system or UNSET,
            tools=_tools(call),
            tool_choice=_tool_choice(params.tool_choice, params.parallel_tool_calls),
            thinking=UNSET if budget is None else _Thinking(type="enabled", budget_tokens=budget),
        )
        headers = with_plugin_headers(self._headers, call.upstream_headers)
        return HttpRequest(url=self._count_url, headers=headers, body=_ENCODER.encode(request))

    def parse_token_count(self, body: bytes) -> int:
        """The ``input_tokens`` of a 2xx ``count_tokens`` body; :class:`UpstreamError` if it is
        not one."""
        try:
            return _COUNT_DECODER.decode(body).input_tokens
        except msgspec.DecodeError as exc:
            raise malformed(self.name, "token count", exc) from None

    def parse_response(self, body: bytes, model: str) -> Response:
        """See :meth:`proxy.providers.base.HttpProvider.parse_response`."""
        try:
            wire = _MESSAGE_DECODER.decode(body)
        except msgspec.DecodeError as exc:
            raise malformed(self.name, "response", exc) from None
        texts: list[str] = []
        thoughts: list[str] = []
        tool_calls: list[ToolCall] = []
        for block in wire.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "thinking":
                thoughts.append(block.thinking)
            elif block.type == "tool_use":
                arguments = bytes(block.input).decode() if block.input is not UNSET else "{}"
                tool_calls.append(
                    ToolCall(
                        id=block.id, function=FunctionCall(name=block.name, arguments=arguments)
                    )
                )
        message = Message(
            role="assistant",
            content="".join(texts) if texts or not tool_calls else None,
            tool_calls=tool_calls or UNSET,
            reasoning_content="".join(thoughts) if thoughts else UNSET,
        )
        return Response(
            id=wire.id,
            model=wire.model or model,
            choices=[
                Choice(
                    index=0,
                    message=message,
                    finish_reason=_finish(wire.stop_reason),
                    stop_sequence=_matched(wire.stop_reason, wire.stop_sequence),
                )
            ],
            usage=wire.usage.canonical() if wire.usage is not None else None,
        )

    def stream_parser(self) -> AnthropicStreamParser:
        """A parser for one stream (see :class:`proxy.providers.base.StreamParser`)."""
        return AnthropicStreamParser(self)

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """One event translated as if it opened a stream.

        Events that depend on earlier ones (which tool call an ``input_json_delta`` belongs
        to, the usage announced by ``message_start``) need :meth:`stream_parser`, which is
        what the transport uses.
        """
        return AnthropicStreamParser(self).parse_event(event, data)

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> UpstreamError:
        """See :meth:`proxy.providers.base.HttpProvider.parse_error`."""
        return self.classify(status, _error_message(body), retry_after=retry_after_seconds(headers))

    def classify(
        self, status: int, message: str, *, retry_after: float | None = None
    ) -> UpstreamError:
        """The gateway error for an Anthropic error ``status`` and ``message``."""
        message = message or f"upstream answered HTTP {status}"
        if status == 400:
            lowered = message.lower()
            if any(marker in lowered for marker in _CONTEXT_MARKERS):
                return ContextWindowExceeded(
                    message, upstream_status=status, status=400, provider=self.name
                )
            if any(marker in lowered for marker in _POLICY_MARKERS):
                return ContentPolicyViolation(
                    message, upstream_status=status, status=400, provider=self.name
                )
        return upstream_error_for_status(
            status, message, provider=self.name, retry_after=retry_after
        )


class AnthropicStreamParser:
    """Translates one Anthropic event stream; see :class:`proxy.providers.base.StreamParser`.

    ``message_start`` opens the reply: a role chunk carrying the usage it announced as
    ``input_usage``. Each tool-use content block becomes the next tool call (its block index
    mapped to a tool-call index); ``message_delta`` carries the stop reason and cumulative
    usage; ``message_stop`` ends the stream with a usage-only chunk. A body that ends before
    ``message_stop`` was cut.
    """

    __slots__ = ("_id", "_model", "_provider", "_stopped", "_tools", "_usage")

    def __init__(self, provider: AnthropicProvider) -> None:
        self._provider = provider
        self._id = ""
        self._model = ""
        self._usage = _WireUsage()
        self._tools: dict[int, int] = {}
        self._stopped = False

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """See :meth:`proxy.providers.base.StreamParser.parse_event`."""
        try:
            wire = _EVENT_DECODER.decode(data)
        except msgspec.DecodeError as exc:
            raise malformed(self._provider.name, "stream event", exc) from None
        kind = wire.type
        if kind == "content_block_delta" and wire.delta is not None:
            return self._block_delta(wire.index, wire.delta)
        if kind == "content_block_start" and wire.content_block is not None:
            return self._block_start(wire.index, wire.content_block)
        if kind == "message_start" and wire.message is not None:
            message = wire.message
            self._id = message.id
            self._model = message.model
            chunk = self._chunk(Delta(role="assistant", content=""))
            if message.usage is not None:
                self._usage.update(message.usage)
                chunk.input_usage = self._usage.canonical()
            return chunk
        if kind == "message_delta":
            if wire.usage is not None:
                self._usage.update(wire.usage)
            delta = wire.delta
            if delta is None or not delta.stop_reason:
                return None
            chunk = self._chunk(Delta(), _finish(delta.stop_reason))
            chunk.choices[0].stop_sequence = _matched(delta.stop_reason, delta.stop_sequence)
            return chunk
        if kind == "message_stop":
            self._stopped = True
            return Chunk(id=self._id, model=self._model, choices=[], usage=self._usage.canonical())
        if kind == "error":
            error = wire.error or _WireError()
            status = _STATUS_BY_TYPE.get(error.type, 500)
            raise self._provider.classify(status, error.message)
        return None  # ping, content_block_stop, and event types added later

    def end(self) -> Chunk | None:
        """See :meth:`proxy.providers.base.StreamParser.end`."""
        if not self._stopped:
            raise UpstreamUnavailable(
                "upstream closed the stream before message_stop", provider=self._provider.name
            )
        return None

    def _block_start(self, index: int, block: _WireBlock) -> Chunk | None:
        if block.type == "tool_use":
            position = self._tools[index] = len(self._tools)
            call = ToolCallDelta(
                index=position,
                id=block.id,
                type="function",
                function=FunctionCallDelta(name=block.name, arguments=""),
            )
            return self._chunk(Delta(tool_calls=[call]))
        if block.type == "text" and block.text:
            return self._chunk(Delta(content=block.text))
        if block.type == "thinking" and block.thinking:
            return self._chunk(Delta(reasoning_content=block.thinking))
        return None

    def _block_delta(self, index: int, delta: _WireDelta) -> Chunk | None:
        if delta.type == "text_delta":
            return self._chunk(Delta(content=delta.text))
        if delta.type == "input_json_delta":
            position = self._tools.get(index)
            if position is None or not delta.partial_json:
                return None
            fragment = FunctionCallDelta(arguments=delta.partial_json)
            return self._chunk(Delta(tool_calls=[ToolCallDelta(index=position, function=fragment)]))
        if delta.type == "thinking_delta":
            return self._chunk(Delta(reasoning_content=delta.thinking))
        return None  # signature_delta, citations_delta

    def _chunk(self, delta: Delta, finish: FinishReason | None = None) -> Chunk:
        return Chunk(
            id=self._id,
            model=self._model,
            choices=[ChunkChoice(index=0, delta=delta, finish_reason=finish)],
        )


# --- request helpers ---------------------------------------------------------------------------


def _conversation(messages: list[Message]) -> tuple[list[_TextBlock], list[_Turn]]:
    """The ``system`` blocks and the alternating turns for ``messages`` (see module docstring)."""
    system: list[_TextBlock] = []
    turns: list[_Turn] = []
    for position, message in enumerate(messages):
        role = message.role
        if role in ("system", "developer"):
            text = message.text()
            if text:
                system.append(_TextBlock(text=text))
            continue
        if role == "tool":
            blocks: list[_Block] = [_tool_result(message, position)]
            role = "user"
        elif role == "user":
            blocks = _blocks(message.content, position)
        elif role == "assistant":
            blocks = _blocks(message.content, position)
            blocks += _tool_uses(message, position)
        else:
            raise BadRequest(
                f"messages[{position}]: role {role!r} is not supported by the anthropic provider;"
                " use tool messages",
                param=f"messages[{position}].role",
            )
        if not blocks:
            continue
        if turns and turns[-1].role == role:
            merge_into_turn(turns[-1].content, blocks, _is_tool_result)
        else:
            turns.append(_Turn(role=role, content=blocks))
    return system, turns


def _is_tool_result(block: _Block) -> bool:
    return isinstance(block, _ToolResultBlock)


def _blocks(content: str | list[ContentPart] | None, position: int) -> list[_Block]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_TextBlock(text=content)] if content else []
    blocks: list[_Block] = []
    for index, part in enumerate(content):
        where = f"messages[{position}].content[{index}]"
        if isinstance(part, TextPart):
            if part.text:
                blocks.append(_TextBlock(text=part.text))
        elif isinstance(part, RefusalPart):
            blocks.append(_TextBlock(text=part.refusal))
        elif isinstance(part, ImagePart):
            blocks.append(_ImageBlock(source=_image_source(part.image_url.url, where)))
        elif isinstance(part, FilePart):
            blocks.append(_DocumentBlock(source=_file_source(part.file, where)))
        elif isinstance(part, AudioPart):
            raise BadRequest("the anthropic provider does not accept audio input", param=where)
    return blocks


def _image_source(url: str, where: str) -> _Source:
    if url.startswith("data:"):
        media_type, data = _data_url(url, where)
        return _Source(type="base64", media_type=media_type, data=data)
    if url.startswith(("http://", "https://")):
        return _Source(type="url", url=url)
    raise BadRequest("an image must be an http(s) URL or a base64 data: URL", param=where)


def _file_source(file: dict[str, Any], where: str) -> _Source:
    data_url = file.get("file_data")
    if isinstance(data_url, str) and data_url.startswith("data:"):
        media_type, data = _data_url(data_url, where)
        if media_type == "application/pdf":
            return _Source(type="base64", media_type=media_type, data=data)
    raise BadRequest(
        "the anthropic provider accepts files only as PDF data: URLs in file_data", param=where
    )


def _data_url(url: str, where: str) -> tuple[str, str]:
    """``(media_type, base64 data)`` of a ``data:<type>;base64,<data>`` URL."""
    header, comma, data = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    if not comma or encoding != "base64" or not media_type:
        raise BadRequest("a data: URL must be data:<media type>;base64,<data>", param=where)
    return media_type, data


def _tool_uses(message: Message, position: int) -> list[_Block]:
    if not message.tool_calls:
        return []
    blocks: list[_Block] = []
    for index, tool_call in enumerate(message.tool_calls):
        arguments = tool_call.function.arguments.strip() or "{}"
        try:
            _OBJECT_DECODER.decode(arguments)
        except msgspec.DecodeError:
            raise BadRequest(
                "tool call arguments must be a JSON object",
                param=f"messages[{position}].tool_calls[{index}].function.arguments",
            ) from None
        blocks.append(
            _ToolUseBlock(id=tool_call.id, name=tool_call.function.name, input=Raw(arguments))
        )
    return blocks


def _tool_result(message: Message, position: int) -> _ToolResultBlock:
    if not message.tool_call_id:
        raise BadRequest(
            "a tool message needs tool_call_id", param=f"messages[{position}].tool_call_id"
        )
    content: str | list[Any] | UnsetType = UNSET
    if isinstance(message.content, str):
        content = message.content or UNSET
    elif message.content:
        content = _blocks(message.content, position) or UNSET
    return _ToolResultBlock(tool_use_id=message.tool_call_id, content=content)


def _tools(call: Call) -> list[_ToolSpec] | UnsetType:
    tools = call.params.tools
    if not tools:
        return UNSET
    return [
        _ToolSpec(
            name=tool.function.name,
            description=tool.function.description,
            input_schema=tool.function.parameters or {"type": "object", "properties": {}},
        )
        for tool in tools
    ]


def _tool_choice(
    choice: str | dict[str, Any] | UnsetType | None, parallel: bool | UnsetType | None
) -> _ToolChoice | UnsetType:
    serial: bool | UnsetType = True if parallel is False else UNSET
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise BadRequest("tool_choice must name a function", param="tool_choice")
        return _ToolChoice(type="tool", name=name, disable_parallel_tool_use=serial)
    if choice == "none":
        return _ToolChoice(type="none")
    if choice == "required":
        return _ToolChoice(type="any", disable_parallel_tool_use=serial)
    if choice == "auto" or serial is True:
        return _ToolChoice(type="auto", disable_parallel_tool_use=serial)
    return UNSET


def _output(response_format: dict[str, Any] | UnsetType | None) -> _OutputConfig | UnsetType:
    """``json_schema`` structured output → ``output_config.format``; other formats: nothing."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return UNSET
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        raise BadRequest(
            "response_format json_schema needs a schema", param="response_format.json_schema"
        )
    return _OutputConfig(format=_OutputFormat(type="json_schema", schema=schema))


def _stop_sequences(stop: str | list[str] | UnsetType | None) -> list[str] | UnsetType:
    if isinstance(stop, str):
        return [stop]
    return list(stop) if stop else UNSET


def _number(value: float | UnsetType | None) -> float | UnsetType:
    return UNSET if value is None else value


def _first_int(*values: int | UnsetType | None) -> int | None:
    for value in values:
        if isinstance(value, int):
            return value
    return None


def _error_message(body: bytes) -> str:
    """The message of an Anthropic error envelope; the start of the raw text if it is not one."""
    try:
        error = _ERROR_DECODER.decode(body).error
    except msgspec.DecodeError:
        error = None
    return body[:500].decode("utf-8", "replace").strip() if error is None else error.message


def _matched(stop_reason: str | None, stop_sequence: str | None) -> str | UnsetType:
    """The stop sequence that ended the answer, when Anthropic says one did."""
    if stop_reason == "stop_sequence" and stop_sequence is not None:
        return stop_sequence
    return UNSET


def _finish(stop_reason: str | None) -> FinishReason | None:
    if stop_reason is None:
        return None
    return FINISH_REASONS.get(stop_reason, "stop")
