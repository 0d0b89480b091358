"""The Gemini stream: ``streamGenerateContent?alt=sse`` events in, canonical chunks out.

Each SSE event's data is a whole ``GenerateContentResponse`` carrying only the new parts.
:class:`GeminiStreamParser` (one per stream, from
:meth:`~proxy.providers.gemini.provider.GeminiProvider.stream_parser`) translates them in order into
canonical :class:`~proxy.core.reply.Chunk` values: text parts → content, ``thought`` parts →
``reasoning_content``, ``functionCall`` parts → whole tool calls (numbered per candidate across
events, ids per :func:`tool_call_id` when Gemini gives none, a ``thoughtSignature`` carried in the
id), finish reasons per :data:`FINISH_REASONS` (``STOP`` → ``tool_calls`` for a candidate that
called a function); the first chunk carries the role. Events with nothing new carry no chunk.

How it ends: Gemini sends no end marker, and the parser never raises
:class:`~proxy.providers.base.StreamEnd`. At the end of the body (:meth:`GeminiStreamParser.end`) a
stream that showed a finish reason is complete, and its latest ``usageMetadata`` is sent in a
usage-only chunk; any other end was a cut (:class:`~proxy.core.errors.UpstreamUnavailable`). In-band
errors: an event carrying Google's ``error`` object is raised as the provider's classification of
it (:meth:`~proxy.providers.gemini.provider.GeminiProvider.classify`), a prompt blocked by
``promptFeedback.blockReason`` as :class:`~proxy.core.errors.ContentPolicyViolation`; event data
that does not decode is an :class:`~proxy.core.errors.UpstreamError` (502, "upstream sent a
malformed stream event: …").

A stream event is a whole response, so the response wire types and their decoding
(:func:`decode_response`, :func:`split_parts`, :func:`finish_reason`, :class:`GoogleError`) serve
whole responses too: :mod:`proxy.providers.gemini.provider` imports them from here.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, NamedTuple

import msgspec
from msgspec import UNSET, Struct

from proxy.core.canonical import FinishReason, FunctionCall, ToolCall, Usage
from proxy.core.errors import ContentPolicyViolation, UpstreamUnavailable
from proxy.core.reply import Chunk, ChunkChoice, Delta, FunctionCallDelta, ToolCallDelta
from proxy.providers.base import malformed
from proxy.providers.gemini.request import SIGNATURE_MARK, Content

if TYPE_CHECKING:
    from proxy.providers.gemini.provider import GeminiProvider


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


# --- wire types (a stream event is a whole response; Content is gemini_request's) ----------------


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


_RESPONSE_DECODER = msgspec.json.Decoder(_WireResponse)


def tool_call_id(response_id: str, candidate: int, position: int, name: str) -> str:
    """The id of the ``position``-th function call of a candidate, when Gemini gave none."""
    digest = zlib.crc32(f"{response_id}:{candidate}:{position}:{name}".encode())
    return f"call_{digest:08x}{position}"


# --- the parser ----------------------------------------------------------------------------------


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
        wire = decode_response(self._provider, data, "stream event")
        self._id = self._id or wire.response_id
        self._model = self._model or wire.model_version
        if wire.usage_metadata is not None:
            self._usage = wire.usage_metadata.canonical()
        choices = []
        for candidate in wire.candidates:
            index = candidate.index
            texts, thoughts, calls = split_parts(candidate, self._id, self._calls.get(index, 0))
            if calls:
                self._calls[index] = self._calls.get(index, 0) + len(calls)
            finish = finish_reason(candidate.finish_reason, index in self._calls)
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


# --- helpers (whole responses use them too) ------------------------------------------------------


class _Call(NamedTuple):
    """A whole function call of a candidate, numbered (``position``) among the candidate's calls."""

    position: int  # not ``index``: that would shadow tuple.index
    id: str
    name: str
    arguments: str

    def whole(self) -> ToolCall:
        return ToolCall(id=self.id, function=FunctionCall(name=self.name, arguments=self.arguments))

    def delta(self) -> ToolCallDelta:
        function = FunctionCallDelta(name=self.name, arguments=self.arguments)
        return ToolCallDelta(index=self.position, id=self.id, type="function", function=function)


def split_parts(
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


def decode_response(provider: GeminiProvider, data: bytes, what: str) -> _WireResponse:
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


def finish_reason(reason: str | None, called: bool) -> FinishReason | None:
    if reason is None or reason == "FINISH_REASON_UNSPECIFIED":
        return None
    finish = FINISH_REASONS.get(reason, "stop")
    return "tool_calls" if called and finish == "stop" else finish
