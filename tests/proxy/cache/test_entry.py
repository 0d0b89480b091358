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
    with_frames,
)
from proxy.cache.replay import replay_frames, usage_json
from proxy.core.canonical import FunctionCall, Message, ToolCall, Usage
from proxy.core.reply import Choice, Response


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


def test_an_entry_takes_its_replay_frames_when_they_fit() -> None:
    original = entry()
    plain = decode_entry(encode_entry(original))
    framed = with_frames(original, 10_000)
    assert framed is not None
    assert original.frames == replay_frames(original.response)
    assert original.frames
    assert original.usage_json == usage_json(original.response)
    assert original.usage_json
    stored = decode_entry(framed)
    assert stored == original
    assert msgspec.structs.replace(stored, frames=None, usage_json=None) == plain


def test_frames_that_would_pass_the_bound_are_not_taken() -> None:
    original = entry()
    assert with_frames(original, len(encode_entry(original)) + 10) is None
    assert (original.frames, original.usage_json) == (None, None)
    no_time = msgspec.structs.replace(original.response, created=0)  # frames must name it
    assert with_frames(msgspec.structs.replace(original, response=no_time), 10_000) is None
