"""The Anthropic Messages provider: ``POST {base_url}/v1/messages``.

Request translation (canonical, OpenAI-shaped → Messages API): the messages, tools, tool
choice, stop sequences, ``temperature``, ``top_p`` and structured output are translated by
:mod:`proxy.providers.anthropic.request` (which says what it maps where, and what it refuses);
this module assembles the body and owns the rest:

- Auth is ``x-api-key`` plus ``anthropic-version`` (config, default ``2023-06-01``); configured
  ``headers`` (e.g. ``anthropic-beta``) go with every request.
- ``max_tokens`` (required by the API) is ``max_completion_tokens``, else ``max_tokens``, else the
  config's ``max_tokens_default``. ``user`` → ``metadata.user_id``.
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
``tool_use`` → ``tool_calls``; stop reasons per
:data:`~proxy.providers.anthropic.stream.FINISH_REASONS`, and the matched ``stop_sequence`` kept
on the choice (``Choice.stop_sequence``). Usage is already in disjoint buckets: ``input_tokens``
excludes cache reads (``cache_read_input_tokens``) and writes (``cache_creation_input_tokens``);
Anthropic does not report thinking tokens apart from ``output_tokens``, so ``reasoning`` stays
0. Streams (``message_start``, ``content_block_*``, ``message_delta``, ``message_stop``,
``ping``, ``error``) are translated by a per-stream
:class:`~proxy.providers.anthropic.stream.AnthropicStreamParser`, which maps each content
block's ``input_json_delta`` fragments to argument deltas of the right tool call. Errors: the
``{"type": "error", "error": {type, message}}`` envelope, classified by status and message
(prompt too long → context window, content filtering → content policy, 529
``overloaded_error`` → overloaded).

Token counting: :meth:`AnthropicProvider.count_tokens_request` asks the API's own
``POST /v1/messages/count_tokens`` for the exact input tokens of a call, translated as above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from proxy.core.canonical import Call, FunctionCall, Message, ToolCall
from proxy.core.errors import (
    BadRequest,
    ContentPolicyViolation,
    ContextWindowExceeded,
    UpstreamError,
    upstream_error_for_status,
)
from proxy.core.reply import Choice, Chunk, Response
from proxy.providers.anthropic.batches import AnthropicBatchAPI
from proxy.providers.anthropic.request import (
    CountRequest,
    Metadata,
    Request,
    Thinking,
    conversation,
    number_or_unset,
    output_config,
    stop_sequences,
    tool_choice,
    tools,
)
from proxy.providers.anthropic.stream import (
    AnthropicStreamParser,
    WireError,
    WireMessage,
    finish_reason,
    matched_stop,
)
from proxy.providers.base import (
    HoldsBatchAPI,
    HttpRequest,
    ProviderConfig,
    encode_raw_fields,
    malformed,
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

PASSED_THROUGH = frozenset(
    {"top_k", "thinking", "output_config", "container", "inference_geo", "cache_control"}
)
"""Unmodelled request fields passed to Anthropic (other unknown fields would be a 400 there)."""

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


# --- response (stream events and the structs both decode: anthropic_stream) ----------------------


class _TokenCount(Struct):
    input_tokens: Annotated[int, Meta(ge=0)]


class _ErrorEnvelope(Struct):
    error: WireError | None = None


_ENCODER = msgspec.json.Encoder()
_MESSAGE_DECODER = msgspec.json.Decoder(WireMessage)
_ERROR_DECODER = msgspec.json.Decoder(_ErrorEnvelope)
_COUNT_DECODER = msgspec.json.Decoder(_TokenCount)


class AnthropicProvider(HoldsBatchAPI):
    """Pure translation between canonical calls and the Anthropic Messages API; its Message
    Batches are :mod:`proxy.providers.anthropic.batches`'."""

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
        self.batch_api = AnthropicBatchAPI(config.base_url, self._headers)

    def build_request(self, call: Call, model: str) -> HttpRequest:
        """See :meth:`proxy.providers.base.HttpProvider.build_request`."""
        params = call.params
        if isinstance(params.n, int) and params.n > 1:
            raise BadRequest("the anthropic provider answers one choice only (n=1)", param="n")
        extra = {k: v for k, v in call.extra.items() if k in PASSED_THROUGH}
        system, turns = conversation(call.messages)
        max_tokens = _first_int(params.max_completion_tokens, params.max_tokens)
        if max_tokens is None:
            max_tokens = self.config.max_tokens_default
        thinking: Thinking | UnsetType = UNSET
        temperature = number_or_unset(params.temperature)
        budget = THINKING_BUDGETS.get(params.reasoning_effort or "")
        if budget is not None and "thinking" not in extra:
            thinking = Thinking(type="enabled", budget_tokens=budget)
            temperature = UNSET  # the API rejects any temperature but 1 with thinking on
            if max_tokens <= budget:
                max_tokens += budget
        request = Request(
            model=model,
            max_tokens=max_tokens,
            messages=turns,
            system=system or UNSET,
            stop_sequences=stop_sequences(params.stop),
            temperature=temperature,
            top_p=number_or_unset(params.top_p),
            tools=tools(call),
            tool_choice=tool_choice(params.tool_choice, params.parallel_tool_calls),
            thinking=thinking,
            metadata=Metadata(user_id=params.user) if params.user else UNSET,
            output_config=UNSET
            if "output_config" in extra
            else output_config(params.response_format),
            stream=call.stream,
        )
        body = merge_json_objects(_ENCODER.encode(request), encode_raw_fields(extra))
        headers = with_plugin_headers(self._headers, call.upstream_headers)
        return HttpRequest(url=self._url, headers=headers, body=body)

    def count_tokens_request(self, call: Call, model: str) -> HttpRequest:
        """``POST /v1/messages/count_tokens`` for ``call``'s input: what :meth:`build_request`
        would send (system, turns, tools, tool choice, thinking), without generation settings.
        Raises :class:`BadRequest` as :meth:`build_request` does."""
        system, turns = conversation(call.messages)
        params = call.params
        budget = THINKING_BUDGETS.get(params.reasoning_effort or "")
        request = CountRequest(
            model=model,
            messages=turns,
            system=system or UNSET,
            tools=tools(call),
            tool_choice=tool_choice(params.tool_choice, params.parallel_tool_calls),
            thinking=UNSET if budget is None else Thinking(type="enabled", budget_tokens=budget),
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
                    finish_reason=finish_reason(wire.stop_reason),
                    stop_sequence=matched_stop(wire.stop_reason, wire.stop_sequence),
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


# --- helpers -------------------------------------------------------------------------------------


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
