"""A whole answer told again as a stream: the chunks a client would have received.

For each choice, in index order: a chunk opening the assistant turn (role, and an empty text, or
null for a turn without text as OpenAI sends before tool calls), then the reasoning, the text
(with its logprobs and annotations), the refusal and each complete tool call, each in a chunk of
its own, then a chunk with the finish reason (and the stop sequence that matched); after every
choice, a usage chunk with no choices. The first chunk also carries the input part of the usage
as ``input_usage``, for dialects that announce it at the start. The ids, model, creation time
and fingerprint are the answer's own. Dialect encoders turn these into valid frames of their own
kind (and drop the usage chunk when the client did not ask for it), and the app adds the end
marker.

:class:`ReplayStream` hands all of them over in one batch, so the whole replay leaves in one
write.
"""

from __future__ import annotations

from msgspec import UNSET

from proxy.canonical import (
    Chunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    RawFrames,
    Response,
    ToolCallDelta,
    Usage,
)


def replay_chunks(response: Response) -> list[Chunk]:
    """The stream that carries ``response`` (see the module docstring)."""
    chunks: list[Chunk] = []

    def add(choices: list[ChunkChoice], usage: Usage | None = None) -> None:
        chunks.append(
            Chunk(
                id=response.id,
                model=response.model,
                created=response.created,
                system_fingerprint=response.system_fingerprint,
                choices=choices,
                usage=usage,
            )
        )

    for choice in response.choices:
        message = choice.message
        index = choice.index
        opening = Delta(role="assistant", content="" if message.content is not None else None)
        add([ChunkChoice(index=index, delta=opening)])
        if message.reasoning_content:
            add(
                [ChunkChoice(index=index, delta=Delta(reasoning_content=message.reasoning_content))]
            )
        text = message.text()
        if text or choice.logprobs is not None or message.annotations:
            delta = Delta(content=text, annotations=message.annotations or UNSET)
            add([ChunkChoice(index=index, delta=delta, logprobs=choice.logprobs)])
        if message.refusal:
            add([ChunkChoice(index=index, delta=Delta(refusal=message.refusal))])
        for position, call in enumerate(message.tool_calls or ()):
            fragment = ToolCallDelta(
                index=position,
                id=call.id,
                type=call.type,
                function=FunctionCallDelta(
                    name=call.function.name, arguments=call.function.arguments
                ),
            )
            add([ChunkChoice(index=index, delta=Delta(tool_calls=[fragment]))])
        finish = ChunkChoice(
            index=index, finish_reason=choice.finish_reason, stop_sequence=choice.stop_sequence
        )
        add([finish])
    usage = response.usage
    if usage is not None:
        add([], usage)
        # Dialects that announce the input at the start (Anthropic's message_start) can.
        chunks[0].input_usage = Usage(
            input=usage.input, cache_read=usage.cache_read, cache_write=usage.cache_write
        )
    return chunks


class ReplayStream:
    """A reply stream over fixed chunks: one batch with all of them, then the end.

    It is the :class:`~proxy.canonical.BatchedStream` of a cache hit; iterating it yields the
    same chunks one by one. Nothing is held open, so ``aclose`` only drops what is left.
    """

    __slots__ = ("_chunks",)

    def __init__(self, chunks: list[Chunk]) -> None:
        self._chunks = chunks

    @property
    def ended(self) -> bool:
        """Always True: every chunk is already here."""
        return True

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """Every chunk not handed over yet; ``[]`` after the first call."""
        chunks, self._chunks = self._chunks, []
        return chunks  # type: ignore[return-value]

    def __aiter__(self) -> ReplayStream:
        return self

    async def __anext__(self) -> Chunk:
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        """Drop the chunks not read."""
        self._chunks = []
