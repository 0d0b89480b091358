"""Entries: round trip, age, and every kind of corruption detected."""

from __future__ import annotations

import msgspec
import pytest

from proxy.cache.entry import (
    MAGIC,
    CorruptEntry,
    Entry,
    decode_entry,
    encode_entry,
    encode_with_frames,
)
from proxy.cache.replay import replay_frames
from proxy.canonical import Choice, FunctionCall, Message, Response, ToolCall, Usage


def entry() -> Entry:
    message = Message(
        role="assistant",
        content="Hello",
        reasoning_content="thought",
        tool_calls=[ToolCall(id="c1", function=FunctionCall(name="f", arguments='{"a":1}'))],
    )
    response = Response(
        id="r1",
        model="gpt-test",
        created=1_700_000_000,
        choices=[Choice(index=0, message=message, finish_reason="tool_calls")],
        usage=Usage(input=3, cache_read=2, output=4, reasoning=1),
        system_fingerprint="fp",
    )
    return Entry(
        created=100.0,
        expires=200.0,
        provider="up",
        model="gpt-test",
        response=response,
        cost_nanos=1234,
    )


def test_an_entry_round_trips() -> None:
    original = entry()
    assert decode_entry(encode_entry(original)) == original


def test_age_is_never_negative() -> None:
    assert entry().age(130.5) == 30.5
    assert entry().age(50.0) == 0.0


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not an entry",
        MAGIC,
        MAGIC + b"\x93\x01",
        b"CWC\x00" + encode_entry(entry())[len(MAGIC) :],
    ],
)
def test_anything_else_is_corrupt(data: bytes) -> None:
    with pytest.raises(CorruptEntry):
        decode_entry(data)


def test_a_truncated_entry_is_corrupt() -> None:
    data = encode_entry(entry())
    for end in range(len(MAGIC), len(data), 7):
        with pytest.raises(CorruptEntry):
            decode_entry(data[:end])


def test_an_entry_keeps_its_replay_frames_when_they_fit() -> None:
    original = entry()
    data = encode_entry(original)
    framed = encode_with_frames(original, data, 10_000)
    stored = decode_entry(framed)
    assert stored.frames == replay_frames(original.response)
    assert stored.frames
    assert msgspec.structs.replace(stored, frames=None) == decode_entry(data)


def test_frames_that_would_pass_the_bound_are_left_out() -> None:
    original = entry()
    data = encode_entry(original)
    assert encode_with_frames(original, data, len(data) + 10) == data
    no_time = msgspec.structs.replace(original.response, created=0)  # frames must name it
    plain = msgspec.structs.replace(original, response=no_time)
    assert encode_with_frames(plain, encode_entry(plain), 10_000) == encode_entry(plain)
