"""Replay and folding: a whole answer told as a stream folds back into the same answer."""

from __future__ import annotations

import msgspec
import pytest
from msgspec import UNSET

from proxy.cache.assemble import assemble
from proxy.cache.replay import ReplayStream, replay_chunks, replay_frames, usage_json
from proxy.core.canonical import FunctionCall, Message, ToolCall, Usage
from proxy.core.reply import (
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    RawFrames,
    Response,
    ToolCallDelta,
)
from proxy.dialects.openai_chat import ChatStreamEncoder

USAGE = Usage(input=5, cache_read=1, output=7, reasoning=2)


def response(*choices: Choice, usage: Usage | None = USAGE) -> Response:
    return Response(
        id="chatcmpl-1",
        model="gpt-test",
        created=1_700_000_000,
        choices=list(choices),
        usage=usage,
        system_fingerprint="fp_1",
    )


TEXT = Choice(
    index=0,
    message=Message(
        role="assistant",
        content="Hello there",
        annotations=[{"type": "url_citation", "url_citation": {"url": "https://example.com"}}],
    ),
    finish_reason="stop",
    logprobs={"content": [{"token": "Hello", "logprob": -0.1}], "refusal": None},
    stop_sequence="END",
)
TOOLS = Choice(
    index=0,
    message=Message(
        role="assistant",
        content=None,
        reasoning_content="Look it up.",
        tool_calls=[
            ToolCall(id="c1", function=FunctionCall(name="weather", arguments='{"city":"Paris"}')),
            ToolCall(id="c2", function=FunctionCall(name="time", arguments="{}")),
        ],
    ),
    finish_reason="tool_calls",
)
REFUSAL = Choice(
    index=1,
    message=Message(role="assistant", content="", refusal="I cannot."),
    finish_reason="content_filter",
)


@pytest.mark.parametrize(
    "answer",
    [response(TEXT), response(TOOLS), response(TEXT, REFUSAL)],
    ids=["text", "tools", "two-choices"],
)
def test_a_replayed_answer_folds_back_into_itself(answer: Response) -> None:
    assert assemble(replay_chunks(answer)) == answer


def test_replay_opens_the_turn_and_ends_with_usage() -> None:
    chunks = replay_chunks(response(TEXT))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == []
    assert chunks[-1].usage == USAGE
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-2].choices[0].stop_sequence == "END"
    assert chunks[0].input_usage == Usage(input=5, cache_read=1)
    assert all(c.id == "chatcmpl-1" and c.system_fingerprint == "fp_1" for c in chunks)


def test_no_usage_chunk_without_usage() -> None:
    assert all(c.usage is None for c in replay_chunks(response(TEXT, usage=None)))


def _chunk(delta: Delta, finish: str | None = None, usage: Usage | None = None, index: int = 0):
    choices = (
        [] if usage is not None else [ChunkChoice(index=index, delta=delta, finish_reason=finish)]
    )  # type: ignore[arg-type]
    return Chunk(id="s1", model="m", created=5, choices=choices, usage=usage)


def test_fragments_of_a_stream_are_joined() -> None:
    chunks = [
        _chunk(Delta(role="assistant", content="")),
        _chunk(Delta(content="Hel")),
        _chunk(Delta(content="lo")),
        _chunk(
            Delta(
                tool_calls=[
                    ToolCallDelta(
                        index=0,
                        id="c1",
                        type="function",
                        function=FunctionCallDelta(name="f", arguments='{"a"'),
                    )
                ]
            )
        ),
        _chunk(
            Delta(tool_calls=[ToolCallDelta(index=0, function=FunctionCallDelta(arguments=":1}"))])
        ),
        _chunk(Delta(), finish="tool_calls"),
        _chunk(Delta(), usage=USAGE),
    ]
    answer = assemble(chunks)
    assert answer is not None
    message = answer.choices[0].message
    assert message.content == "Hello"
    assert message.tool_calls == [
        ToolCall(id="c1", function=FunctionCall(name="f", arguments='{"a":1}'))
    ]
    assert message.reasoning_content is UNSET
    assert answer.choices[0].finish_reason == "tool_calls"
    assert answer.usage == USAGE


@pytest.mark.parametrize(
    "chunks",
    [
        [],
        [_chunk(Delta(content="Hi")), _chunk(Delta(), usage=USAGE)],  # no finish reason
        [_chunk(Delta(content="Hi")), _chunk(Delta(), finish="stop")],  # no usage
        [  # one choice of two unfinished
            _chunk(Delta(content="a"), finish="stop"),
            _chunk(Delta(content="b"), index=1),
            _chunk(Delta(), usage=USAGE),
        ],
    ],
    ids=["empty", "no-finish", "no-usage", "one-choice-open"],
)
def test_an_incomplete_stream_is_no_answer(chunks: list[Chunk]) -> None:
    assert assemble(chunks) is None


async def test_a_replay_stream_hands_everything_over_in_one_batch() -> None:
    answer = response(TEXT)
    stream = ReplayStream(answer)
    assert stream.ended
    assert await stream.next_batch(True) == replay_chunks(answer)
    assert await stream.next_batch(True) == []


async def test_a_replay_stream_iterates_and_closes() -> None:
    answer = response(TEXT)
    stream = ReplayStream(answer, replay_frames(answer))
    assert [c async for c in stream] == replay_chunks(answer)
    stream = ReplayStream(answer)
    await stream.aclose()
    assert [c async for c in stream] == []
    assert await stream.next_batch(True) == []


def _without_raw(chunks: list[Chunk]) -> list[Chunk]:
    return [msgspec.structs.replace(chunk, raw=None) for chunk in chunks]


@pytest.mark.parametrize(
    "answer",
    [response(TEXT), response(TOOLS), response(TEXT, REFUSAL), response(TEXT, usage=None)],
    ids=["text", "tools", "two-choices", "no-usage"],
)
async def test_kept_frames_read_back_as_the_replay(answer: Response) -> None:
    """A raw read of a replay with frames: one run of verbatim frames, then the usage chunk;
    parsed, the frames are the replay's chunks, input usage and stop sequences included, and
    each carries its frame's JSON for the OpenAI chat dialect to send as it is."""
    frames = replay_frames(answer)
    assert frames is not None
    batch = await ReplayStream(answer, frames).next_batch(True)
    run = batch[0]
    assert isinstance(run, RawFrames)
    assert run.data == frames
    parsed = [run.parse(payload) for payload in run.payloads()]
    assert all(
        chunk is not None and chunk.raw == payload
        for chunk, payload in zip(parsed, run.payloads(), strict=True)
    )
    assert _without_raw(parsed + batch[1:]) == replay_chunks(answer)  # type: ignore[arg-type, operator]


async def test_a_replay_read_as_chunks_ignores_its_frames() -> None:
    answer = response(TEXT)
    assert await ReplayStream(answer, replay_frames(answer)).next_batch(False) == replay_chunks(
        answer
    )


def test_frames_are_the_openai_chat_encoding_of_the_replay() -> None:
    answer = response(TEXT)
    encoder = ChatStreamEncoder(include_usage=False)
    expected = b"".join(encoder.chunk(chunk) for chunk in replay_chunks(answer)[:-1])
    assert replay_frames(answer) == expected


@pytest.mark.parametrize(
    "answer",
    [
        msgspec.structs.replace(response(TEXT), created=0),
        msgspec.structs.replace(response(TEXT), id=""),
        response(),
    ],
    ids=["no-creation-time", "no-id", "no-choice"],
)
def test_no_frames_for_an_answer_they_could_not_describe(answer: Response) -> None:
    assert replay_frames(answer) is None


@pytest.mark.parametrize("include_usage", [True, False])
async def test_a_kept_usage_chunk_is_written_as_the_chat_encoder_writes_it(
    include_usage: bool,
) -> None:
    """The usage chunk of a raw read carries its kept JSON, which the OpenAI chat encoder
    sends as it is to a client that asked for usage, and drops for one that did not: the bytes
    it would write for the chunk built afresh."""
    answer = response(TEXT)
    kept = usage_json(answer)
    assert kept is not None
    batch = await ReplayStream(answer, replay_frames(answer), kept).next_batch(True)
    usage = batch[1]
    assert isinstance(usage, Chunk)
    assert usage.raw == kept
    fresh = replay_chunks(answer)[-1]
    assert fresh.raw is None
    encoder = ChatStreamEncoder(include_usage=include_usage)
    assert encoder.chunk(usage) == encoder.chunk(fresh)
    assert usage_json(response(TEXT, usage=None)) is None
