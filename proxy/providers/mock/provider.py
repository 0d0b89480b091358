"""The built-in ``mock`` provider: offline, deterministic, and able to fail on demand.

It answers in-process, so the default config works with no network and no keys. With
``faults: true`` tests and benchmarks can also provoke every failure the gateway must survive by
choosing a model name (the fault models; without it, the default, they are ordinary names and
get the fixed reply, so that no client can hold a connection open or make the gateway fail):

==================  =========================================================================
model name          behaviour
==================  =========================================================================
``echo``            replies with the last user message verbatim
``tools``           calls the first tool offered (arguments built from its JSON schema); once
                    the conversation ends with a tool result, answers with that result
``error-<status>``  fails with that upstream HTTP status (``error-429`` carries Retry-After: 1)
``slow-<ms>``       waits ``ms`` milliseconds before the first byte, then answers normally
``hang``            never answers (the gateway's timeouts must end it)
``cut-<n>``         streams ``n`` chunks, then the connection drops (non-streamed: fails at once)
``stall-<n>``       streams ``n`` chunks, then sends nothing more (the idle clock must end it)
anything else       a fixed, deterministic reply that quotes the last user message
==================  =========================================================================

Embeddings calls get :mod:`proxy.providers.mock.vectors`' vectors (hashed words and character
n-grams, L2-normalised; 256 dimensions unless the client asks for ``dimensions``), under the
same fault models (``error-<status>``, ``slow-<ms>``, ``hang``); so do media calls (audio,
images, moderations, rerank), answered by :mod:`proxy.providers.mock.media`.

Token counts are deterministic: one token per whitespace-separated word. ``latency_ms`` delays
every first byte; ``tokens_per_second`` paces streamed tokens (0 streams as fast as possible).
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from proxy.core.canonical import (
    Call,
    FinishReason,
    FunctionCall,
    MediaOperation,
    Message,
    Tool,
    ToolCall,
    Usage,
)
from proxy.core.errors import UpstreamUnavailable, upstream_error_for_status
from proxy.core.reply import (
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    Embeddings,
    FunctionCallDelta,
    MediaAnswer,
    MediaStream,
    Response,
    ToolCallDelta,
)
from proxy.providers.base import ProviderConfig
from proxy.providers.mock.media import OPERATIONS, media_answer
from proxy.providers.mock.vectors import DEFAULT_DIMENSIONS, text_vector, token_vector

_FAULT = re.compile(r"^(?P<kind>error|slow|cut|stall)-(?P<arg>\d+)$")
_QUOTE_WORDS = 40


class MockConfig(ProviderConfig, tag="mock", frozen=True, forbid_unknown_fields=True):
    """The mock provider's knobs: first-byte latency, streaming pace, and whether the fault
    models (``error-<status>``, ``slow-<ms>``, ``hang``, ``cut-<n>``, ``stall-<n>``) act."""

    latency_ms: Annotated[float, Meta(ge=0)] = 0.0
    tokens_per_second: Annotated[float, Meta(ge=0)] = 0.0
    faults: bool = False


class _Plan(msgspec.Struct, frozen=True):
    """What one mock call will do, decided from its model name."""

    delay_s: float = 0.0
    error_status: int | None = None
    hang: bool = False
    cut_after: int | None = None
    stall_after: int | None = None


class MockProvider:
    """An in-process upstream; see the module docstring for the model names it understands.

    ``listed_models`` are what ``/v1/models`` shows for it: the mock accepts any model name,
    so it lists its two plain behaviours and ``*``, which stands for any other name.
    """

    listed_models = ("echo", "tools", "*")
    media_operations: frozenset[MediaOperation] = OPERATIONS

    def __init__(self, name: str, config: MockConfig) -> None:
        self.name = name
        self.config = config
        self.ready = True
        self.secrets: tuple[str, ...] = ()

    async def complete(self, call: Call, model: str) -> Response | AsyncIterator[Chunk]:
        """See :meth:`proxy.providers.base.LocalProvider.complete`."""
        plan = await self._act(model)
        if not call.stream and plan.cut_after is not None:
            raise UpstreamUnavailable("mock upstream dropped the connection", provider=self.name)
        message, finish = _truncate(_answer(call, model), _max_tokens(call))
        usage = Usage(input=_prompt_tokens(call), output=_count_tokens(message))
        response_id = f"chatcmpl-mock-{zlib.crc32(call.request_id.encode()):08x}"
        if not call.stream:
            n = _choices(call)
            return Response(
                id=response_id,
                model=model,
                created=_CREATED,
                choices=[Choice(index=i, message=message, finish_reason=finish) for i in range(n)],
                usage=Usage(input=usage.input, output=usage.output * n),
            )
        return self._stream(response_id, model, message, finish, usage, plan)

    async def _stream(
        self,
        response_id: str,
        model: str,
        message: Message,
        finish: FinishReason,
        usage: Usage,
        plan: _Plan,
    ) -> AsyncIterator[Chunk]:
        pause = 1.0 / self.config.tokens_per_second if self.config.tokens_per_second else 0.0
        for sent, delta in enumerate(_deltas(message)):
            if plan.cut_after is not None and sent >= plan.cut_after:
                raise UpstreamUnavailable("mock upstream cut the stream", provider=self.name)
            if plan.stall_after is not None and sent >= plan.stall_after:
                await asyncio.Event().wait()
            if pause and sent:
                await asyncio.sleep(pause)
            yield Chunk(
                id=response_id,
                model=model,
                created=_CREATED,
                choices=[ChunkChoice(index=0, delta=delta)],
            )
        yield Chunk(
            id=response_id,
            model=model,
            created=_CREATED,
            choices=[ChunkChoice(index=0, delta=Delta(), finish_reason=finish)],
        )
        yield Chunk(id=response_id, model=model, created=_CREATED, choices=[], usage=usage)

    async def embed(self, call: Call, model: str) -> Embeddings:
        """The vectors of an embeddings call (see the module docstring); one token per word
        (or per token id)."""
        await self._act(model)
        request = call.embedding
        assert request is not None
        size = request.dimensions or DEFAULT_DIMENSIONS
        if request.tokens is not None:
            vectors = [token_vector(tokens, size) for tokens in request.tokens]
            tokens = sum(len(tokens) for tokens in request.tokens)
        else:
            texts = request.texts or []
            vectors = [text_vector(text, size) for text in texts]
            tokens = sum(len(text.split()) for text in texts)
        return Embeddings(vectors=vectors, model=model, usage=Usage(input=tokens))

    async def media(self, call: Call, model: str) -> MediaAnswer | MediaStream:
        """The answer of a media call (:mod:`proxy.providers.mock.media`), under the fault
        models (a streamed one also under ``cut-<n>`` and ``stall-<n>``, counted in pieces;
        ``cut-<n>`` fails a whole one at once, as for chat)."""
        plan = await self._act(model)
        if not call.stream and plan.cut_after is not None:
            raise UpstreamUnavailable("mock upstream dropped the connection", provider=self.name)
        answer = media_answer(call, model)
        if isinstance(answer, MediaStream) and (
            plan.cut_after is not None or plan.stall_after is not None
        ):
            return MediaStream(answer.content_type, self._faulty(answer.pieces, plan))
        return answer

    async def _faulty(self, pieces: AsyncIterator[Any], plan: _Plan) -> AsyncIterator[Any]:
        """``pieces`` cut (``cut-<n>``) or stalled (``stall-<n>``) after ``n`` of them."""
        sent = 0
        async for piece in pieces:
            if plan.cut_after is not None and sent >= plan.cut_after:
                raise UpstreamUnavailable("mock upstream cut the stream", provider=self.name)
            if plan.stall_after is not None and sent >= plan.stall_after:
                await asyncio.Event().wait()
            yield piece
            sent += 1

    async def _act(self, model: str) -> _Plan:
        """Wait, hang or fail as ``model``'s fault plan says; the plan."""
        plan = self._plan(model)
        if plan.delay_s:
            await asyncio.sleep(plan.delay_s)
        if plan.hang:
            await asyncio.Event().wait()
        if plan.error_status is not None:
            retry_after = 1.0 if plan.error_status == 429 else None
            raise upstream_error_for_status(
                plan.error_status,
                f"mock upstream failure with status {plan.error_status}",
                provider=self.name,
                retry_after=retry_after,
            )
        return plan

    def count_tokens(self, call: Call, model: str) -> int:
        """The input tokens the mock reports for ``call`` (one per word, one more per message):
        exact, as a provider's counting endpoint is."""
        return _prompt_tokens(call)

    def _plan(self, model: str) -> _Plan:
        delay = self.config.latency_ms / 1000.0
        if not self.config.faults:
            return _Plan(delay_s=delay)
        if model == "hang":
            return _Plan(delay_s=delay, hang=True)
        match = _FAULT.match(model)
        if match is None:
            return _Plan(delay_s=delay)
        kind, arg = match["kind"], int(match["arg"])
        if kind == "error":
            return _Plan(delay_s=delay, error_status=arg)
        if kind == "slow":
            return _Plan(delay_s=delay + arg / 1000.0)
        if kind == "cut":
            return _Plan(delay_s=delay, cut_after=arg)
        return _Plan(delay_s=delay, stall_after=arg)


_CREATED = 1_700_000_000


def _last_user_text(call: Call) -> str:
    for message in reversed(call.messages):
        if message.role == "user":
            return message.text()
    return ""


def _answer(call: Call, model: str) -> Message:
    last = call.messages[-1] if call.messages else None
    if model == "tools" and last is not None and last.role == "tool":
        return Message(role="assistant", content=f"The tool said: {last.text()}")
    if model == "tools" and call.params.tools:
        tool = call.params.tools[0]
        arguments = msgspec.json.encode(_arguments_for(tool, _last_user_text(call))).decode()
        return Message(
            role="assistant",
            content=None,
            tool_calls=[
                ToolCall(
                    id=f"call_mock_{zlib.crc32(arguments.encode()):08x}",
                    function=FunctionCall(name=tool.function.name, arguments=arguments),
                )
            ],
        )
    said = _last_user_text(call)
    if model == "echo":
        return Message(role="assistant", content=said)
    quoted = " ".join(said.split()[:_QUOTE_WORDS])
    return Message(
        role="assistant", content=f"This is the Crossway mock provider. You said: {quoted}"
    )


def _arguments_for(tool: Tool, text: str) -> dict[str, Any]:
    """Deterministic arguments that satisfy the common shapes of a tool's JSON schema."""
    parameters = tool.function.parameters or {}
    properties = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    samples: dict[Any, Any] = {"string": text, "integer": 1, "number": 1.0, "boolean": True}
    return {
        name: samples.get(spec.get("type") if isinstance(spec, dict) else None)
        for name, spec in properties.items()
    }


def _deltas(message: Message) -> list[Delta]:
    """The stream deltas that rebuild ``message``: one word (or argument piece) per chunk."""
    if message.tool_calls:
        call = message.tool_calls[0]
        arguments = call.function.arguments
        pieces = [arguments[i : i + 8] for i in range(0, len(arguments), 8)] or [""]
        first = Delta(
            role="assistant",
            content=None,
            tool_calls=[
                ToolCallDelta(
                    index=0,
                    id=call.id,
                    type="function",
                    function=FunctionCallDelta(name=call.function.name, arguments=""),
                )
            ],
        )
        rest = [
            Delta(tool_calls=[ToolCallDelta(index=0, function=FunctionCallDelta(arguments=piece))])
            for piece in pieces
        ]
        return [first, *rest]
    words = message.text().split(" ")
    deltas = [Delta(role="assistant", content="")]
    deltas += [Delta(content=word if i == 0 else " " + word) for i, word in enumerate(words)]
    return deltas


def _count_tokens(message: Message) -> int:
    if message.tool_calls:
        return sum(len(c.function.arguments.split()) + 1 for c in message.tool_calls)
    return len(message.text().split())


def _prompt_tokens(call: Call) -> int:
    return sum(len(message.text().split()) + 1 for message in call.messages)


def _choices(call: Call) -> int:
    n = call.params.n
    return n if isinstance(n, int) and n > 0 else 1


def _max_tokens(call: Call) -> int | None:
    for limit in (call.params.max_completion_tokens, call.params.max_tokens):
        if isinstance(limit, int):
            return limit
    return None


def _truncate(message: Message, limit: int | None) -> tuple[Message, FinishReason]:
    """Cut a text answer to ``limit`` tokens, as a real model stops at ``max_tokens``."""
    if message.tool_calls:
        return message, "tool_calls"
    words = message.text().split(" ")
    if limit is None or len(words) <= limit:
        return message, "stop"
    return Message(role="assistant", content=" ".join(words[:limit])), "length"
