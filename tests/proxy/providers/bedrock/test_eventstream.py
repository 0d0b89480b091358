"""proxy/providers/bedrock/eventstream.py: the AWS event-stream framing.

Messages are built by a test encoder that covers every header type; botocore's own decoder
checks that the encoder writes the real format, so the decoder is tested against real frames.
The recorded Bedrock stream in tests/fixtures/bedrock/ is decoded in every split.
"""

from __future__ import annotations

import itertools
import struct
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.providers.bedrock.eventstream import (
    MAX_MESSAGE_LENGTH,
    EventStreamDecoder,
    EventStreamError,
    EventStreamMessage,
)

RECORDED = Path(__file__).resolve().parents[3] / "fixtures" / "bedrock" / "stream_tool_call.bin"


def header(name: str, value: Any) -> bytes:
    """One encoded header; the type follows the Python value (tuples name the integer width)."""
    encoded_name = name.encode()
    out = bytes([len(encoded_name)]) + encoded_name
    if value is True or value is False:
        return out + (b"\x00" if value else b"\x01")
    if isinstance(value, tuple):
        kind, number = value
        formats = {2: ">b", 3: ">h", 4: ">i", 5: ">q", 8: ">q"}
        return out + bytes([kind]) + struct.pack(formats[kind], number)
    if isinstance(value, bytes):
        return out + b"\x06" + struct.pack(">H", len(value)) + value
    if isinstance(value, uuid.UUID):
        return out + b"\x09" + value.bytes
    encoded = value.encode()
    return out + b"\x07" + struct.pack(">H", len(encoded)) + encoded


def message(headers: dict[str, Any], payload: bytes) -> bytes:
    encoded = b"".join(header(name, value) for name, value in headers.items())
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + encoded + payload
    return body + struct.pack(">I", zlib.crc32(body))


EVERY_TYPE = {
    "true": True,
    "false": False,
    "byte": (2, -7),
    "short": (3, -30000),
    "int": (4, 2_000_000_000),
    "long": (5, -(2**40)),
    "bytes": b"\x00\xffraw",
    "string": "héllo",
    "timestamp": (8, 1_700_000_000_123),
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
}
EXPECTED_VALUES = {
    name: value[1] if isinstance(value, tuple) else value for name, value in EVERY_TYPE.items()
}


def botocore_decode(data: bytes) -> list[tuple[dict[str, Any], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(m.headers, m.payload) for m in buffer]


def test_every_header_type():
    data = message(EVERY_TYPE, b'{"a":1}')
    assert EventStreamDecoder().feed(data) == [EventStreamMessage(EXPECTED_VALUES, b'{"a":1}')]


def test_the_test_encoder_writes_what_botocore_reads():
    data = message(EVERY_TYPE, b"payload") + message({":event-type": "x"}, b"")
    ((headers, payload), (second, empty)) = botocore_decode(data)
    assert payload == b"payload"
    assert headers["string"] == "héllo"
    assert headers["bytes"] == b"\x00\xffraw"
    assert headers["true"] is True
    assert headers["false"] is False
    assert headers["int"] == 2_000_000_000
    assert headers["long"] == -(2**40)
    assert (second, empty) == ({":event-type": "x"}, b"")


def test_empty_message():
    assert EventStreamDecoder().feed(message({}, b"")) == [EventStreamMessage({}, b"")]


def test_partial_messages_wait_for_more_bytes():
    data = message({"n": "1"}, b"abc") + message({"n": "2"}, b"defg")
    decoder = EventStreamDecoder()
    assert decoder.feed(data[:5]) == []
    assert decoder.pending == 5
    first = decoder.feed(data[5:30])
    assert first == [EventStreamMessage({"n": "1"}, b"abc")]
    assert decoder.feed(data[30:]) == [EventStreamMessage({"n": "2"}, b"defg")]
    assert decoder.pending == 0


def test_recorded_bedrock_stream_decodes_as_botocore_decodes_it():
    data = RECORDED.read_bytes()
    ours = [(m.headers, m.payload) for m in EventStreamDecoder().feed(data)]
    assert ours == botocore_decode(data)
    assert [h[":event-type"] for h, _ in ours][:2] == ["messageStart", "contentBlockDelta"]


def feed_in_pieces(data: bytes, cuts: list[int]) -> list[EventStreamMessage]:
    """Decode ``data`` fed in pieces cut at ``cuts``; nothing may be left pending."""
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    decoder = EventStreamDecoder()
    decoded: list[EventStreamMessage] = []
    for start, end in itertools.pairwise(points):
        decoded += decoder.feed(data[start:end])
    assert decoder.pending == 0
    return decoded


@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(
        st.tuples(
            st.dictionaries(
                st.text(min_size=1, max_size=10).filter(lambda s: len(s.encode()) < 256),
                st.text(max_size=20) | st.binary(max_size=20) | st.booleans(),
                max_size=4,
            ),
            st.binary(max_size=200),
        ),
        min_size=1,
        max_size=5,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
)
def test_any_split_gives_the_same_messages(messages, cuts):
    data = b"".join(message(headers, payload) for headers, payload in messages)
    assert feed_in_pieces(data, cuts) == [EventStreamMessage(h, p) for h, p in messages]


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=5000), max_size=10))
def test_recorded_stream_in_any_split(cuts):
    data = RECORDED.read_bytes()
    assert feed_in_pieces(data, cuts) == EventStreamDecoder().feed(data)


# ---------------------------------------------------------------------------------------------
# Corrupt input
# ---------------------------------------------------------------------------------------------


def corrupt(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


GOOD = message({":event-type": "messageStart"}, b'{"role":"assistant"}')


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (corrupt(GOOD, 1), "prelude checksum"),
        (corrupt(GOOD, 9), "prelude checksum"),
        (corrupt(GOOD, len(GOOD) - 6), "message checksum"),
        (corrupt(GOOD, len(GOOD) - 1), "message checksum"),
    ],
    ids=["length", "prelude-crc", "payload", "message-crc"],
)
def test_checksum_mismatches_are_errors(data: bytes, reason: str):
    with pytest.raises(EventStreamError, match=reason):
        EventStreamDecoder().feed(data)


def with_prelude(total: int, headers_length: int, rest: bytes = b"") -> bytes:
    prelude = struct.pack(">II", total, headers_length)
    return prelude + struct.pack(">I", zlib.crc32(prelude)) + rest


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (with_prelude(15, 0), "length 15 is out of range"),
        (with_prelude(MAX_MESSAGE_LENGTH + 1, 0), "out of range"),
        (with_prelude(20, 5), "headers length 5 is invalid"),
    ],
    ids=["too-short", "too-long", "headers-exceed-message"],
)
def test_impossible_lengths_are_errors(data: bytes, reason: str):
    with pytest.raises(EventStreamError, match=reason):
        EventStreamDecoder().feed(data)


def raw_message(header_bytes: bytes, payload: bytes = b"") -> bytes:
    prelude = struct.pack(">II", 12 + len(header_bytes) + len(payload) + 4, len(header_bytes))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    body = prelude + header_bytes + payload
    return body + struct.pack(">I", zlib.crc32(body))


@pytest.mark.parametrize(
    ("header_bytes", "reason"),
    [
        (b"\x01a\x0a", "header type 10 is unknown"),
        (b"\x01a\x07\x00\x09abc", "truncated"),
        (b"\x01a\x09" + b"\x00" * 4, "truncated"),
        (b"\x01a\x04\x00", "malformed"),
        (b"\x05ab", "malformed"),
        (b"\x02\xff\xfe\x07\x00\x00", "malformed"),
    ],
    ids=["unknown-type", "short-string", "short-uuid", "short-int", "short-name", "bad-utf8"],
)
def test_malformed_headers_are_errors(header_bytes: bytes, reason: str):
    with pytest.raises(EventStreamError, match=reason):
        EventStreamDecoder().feed(raw_message(header_bytes))
