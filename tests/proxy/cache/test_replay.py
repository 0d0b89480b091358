"""Replay and folding: a whole answer told as a stream folds back into the same answer."""

from __future__ import annotations

import pytest
from msgspec import UNSET

from proxy.cache.assemble import assemble
from proxy.cache.replay import ReplayStream, replay_chunks
from proxy.canonical import (
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    FunctionCall,
    FunctionCallDelta,
    Message,
    Response,
    ToolCall,
    ToolCallDelta,
    Usage,
)

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
    chunks = replay_chunks(response(TEXT))
    stream = ReplayStream(list(chunks))
    assert stream.ended
    assert await stream.next_batch(True) == chunks
    assert await stream.next_batch(True) == []


async def test_a_replay_stream_iterates_and_closes() -> None:
    chunks = replay_chunks(response(TEXT))
    stream = ReplayStream(list(chunks))
    assert [c async for c in stream] == chunks
    stream = ReplayStream(list(chunks))
    await stream.aclose()
    assert [c async for c in stream] == []
