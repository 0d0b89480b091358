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
write. An entry may also keep its replay pre-encoded (:func:`replay_frames`): every chunk but the
usage chunk as the OpenAI chat frames that dialect would write for them, which a reader that can
take verbatim frames (``next_batch(raw=True)``) receives as one
:class:`~proxy.core.reply.RawFrames` instead of chunks to encode again; read back with
:class:`FrameParser`, those frames give exactly the chunks :func:`replay_chunks` makes (the first
one's ``input_usage`` and the stop sequences, which OpenAI's format lacks, restored from the
answer).
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from proxy.core.canonical import Call, Usage
from proxy.core.reply import (
    Chunk,
    ChunkChoice,
    Delta,
    Encoded,
    FunctionCallDelta,
    RawFrames,
    Reply,
    Response,
    ToolCallDelta,
)
from proxy.core.streams import BatchedStream, ReplyStream
from proxy.dialects.openai_chat import ChatStreamEncoder, OpenAIChatDialect

CACHE_HEADER = "x-crossway-cache"
"""The reply header that says what the cache did: ``hit``, ``miss``, ``bypass``, ``semantic``."""
_CHUNK_DECODER = msgspec.json.Decoder(Chunk)
OPENAI = OpenAIChatDialect.name
"""The dialect whose encoder writes an answer's ``raw`` body as it is (and its frames)."""
_DATA = b"data: "
_FRAME_END = b"\n\n"
"""The dialect whose encoder writes an answer's ``raw`` body as it is (and its frames)."""


def hit_reply(
    call: Call,
    provider: str,
    model: str,
    response: Response,
    age: float,
    frames: bytes | None = None,
    verbatim: bool = False,
    usage: bytes | None = None,
) -> Reply:
    """A hit's reply, from ``provider``/``model``, ``age`` seconds old: ``response`` whole, or
    replayed (:class:`ReplayStream`, from ``frames`` and the ``usage`` chunk's JSON when the
    entry kept them) when ``call`` asked for a stream. A whole answer whose ``raw`` body is
    ``verbatim`` (its canonical fields say what it says) carries that body, for an OpenAI chat
    client, as its :class:`~proxy.core.reply.Encoded` one."""
    headers = {CACHE_HEADER: "hit", "age": str(int(age))}
    if call.stream:
        stream = ReplayStream(response, frames, usage)
        return Reply(provider=provider, model=model, stream=stream, headers=headers, attempts=0)
    raw = response.raw
    encoded = None
    if verbatim and raw is not None and call.dialect == OPENAI:
        encoded = Encoded(OPENAI, response, raw)
    return Reply(
        provider=provider,
        model=model,
        response=response,
        headers=headers,
        attempts=0,
        encoded=encoded,
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
        chunks.append(_usage_chunk(response, usage))
        # Dialects that announce the input at the start (Anthropic's message_start) can.
        chunks[0].input_usage = _input_usage(usage)
    return chunks


def replay_frames(response: Response) -> bytes | None:
    """Every chunk of ``response``'s replay but the usage chunk, as OpenAI chat frames; None
    when they could not be verbatim frames (an answer without an id, a model or a creation
    time, which :class:`~proxy.core.reply.RawFrames` must name, or without a choice)."""
    if not (response.id and response.model and response.created and response.choices):
        return None
    chunks = replay_chunks(response)
    if response.usage is not None:
        chunks.pop()
    encoder = ChatStreamEncoder(include_usage=False)
    return b"".join([encoder.chunk(chunk) for chunk in chunks])


def usage_json(response: Response) -> bytes | None:
    """The replay's usage chunk as the OpenAI chat chunk JSON that dialect writes for a client
    that asked for usage; None for an answer without usage."""
    usage = response.usage
    if usage is None:
        return None
    frame = ChatStreamEncoder(include_usage=True).chunk(_usage_chunk(response, usage))
    return frame[len(_DATA) : -len(_FRAME_END)]


class FrameParser:
    """Reads the frames of :func:`replay_frames` back into the chunks of :func:`replay_chunks`
    (with ``raw`` set to each frame's JSON): the opening chunk of the answer's first choice gets
    the input usage, and each finish chunk its choice's stop sequence."""

    __slots__ = ("_response",)

    def __init__(self, response: Response) -> None:
        self._response = response

    def __call__(self, payload: bytes) -> Chunk:
        """The chunk of one frame's JSON. Raises :class:`msgspec.DecodeError` for JSON that
        is not a chunk (never for frames :func:`replay_frames` made)."""
        chunk = _CHUNK_DECODER.decode(payload)
        chunk.raw = payload
        response = self._response
        for choice in chunk.choices:
            if choice.finish_reason is not None:
                for answered in response.choices:
                    if answered.index == choice.index:
                        choice.stop_sequence = answered.stop_sequence
            elif choice.delta.role is not UNSET and choice.index == response.choices[0].index:
                chunk.input_usage = _input_usage(response.usage)
        return chunk


class ReplayStream(ReplyStream, BatchedStream):
    """A reply stream over a whole answer's replay: one batch with all of it, then the end.

    It is the :class:`~proxy.core.streams.BatchedStream` of a cache hit, ``ended`` from the
    start (so the app sends it in one write); iterating it yields the chunks of
    :func:`replay_chunks` one by one. Given ``frames`` (:func:`replay_frames` of the same
    answer), a raw read gets them as one :class:`~proxy.core.reply.RawFrames` followed by
    the usage chunk (carrying ``usage``, its :func:`usage_json`, as its ``raw`` JSON when given),
    and the chunks are never built. Nothing is held open, so ``aclose`` only drops what is left.
    It takes no end hooks (:class:`~proxy.core.streams.EndObservable`): a plugin that observes
    a hit's stream wraps it.
    """

    __slots__ = ("_chunks", "_frames", "_response", "_usage")

    def __init__(
        self, response: Response, frames: bytes | None = None, usage: bytes | None = None
    ) -> None:
        self._response: Response | None = response
        self._frames = frames
        self._usage = usage
        self._chunks: list[Chunk] | None = None

    @property
    def ended(self) -> bool:
        """Always True: every chunk is already here."""
        return True

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """Everything not handed over yet; ``[]`` after the first call."""
        response, self._response = self._response, None
        chunks, self._chunks = self._chunks, None
        if response is None:
            return chunks or []  # type: ignore[return-value]
        frames = self._frames
        if not raw or frames is None:
            return replay_chunks(response)  # type: ignore[return-value]
        batch: list[Chunk | RawFrames] = [RawFrames(frames, FrameParser(response))]
        if response.usage is not None:
            usage = _usage_chunk(response, response.usage)
            usage.raw = self._usage
            batch.append(usage)
        return batch

    def __aiter__(self) -> ReplayStream:
        return self

    async def __anext__(self) -> Chunk:
        if self._response is not None:
            self._chunks = replay_chunks(self._response)
            self._response = None
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        """Drop the chunks not read."""
        self._response = None
        self._chunks = None


def _input_usage(usage: Usage | None) -> Usage | None:
    if usage is None:
        return None
    return Usage(input=usage.input, cache_read=usage.cache_read, cache_write=usage.cache_write)


def _usage_chunk(response: Response, usage: Usage) -> Chunk:
    return Chunk(
        id=response.id,
        model=response.model,
        created=response.created,
        system_fingerprint=response.system_fingerprint,
        choices=[],
        usage=usage,
    )
