"""proxy/core/sse.py: the incremental SSE decoder and the frame encoders."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.core.sse import SSEDecoder, SSEEvent, encode_data_frame, encode_named_frame


def decode_whole(data: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return decoder.feed(data) + decoder.close()


def decode_pieces(pieces: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for piece in pieces:
        events += decoder.feed(piece)
    return events + decoder.close()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# ---------------------------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------------------------


def test_basic_events():
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a":1}\n\ndata: [DONE]\n\n') == [
        SSEEvent("", b'{"a":1}'),
        SSEEvent("", b"[DONE]"),
    ]
    assert decoder.close() == []


def test_event_is_dispatched_only_at_the_blank_line():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n") == []
    assert decoder.feed(b"\n") == [SSEEvent("", b"one")]


def test_named_events_and_name_reset():
    data = b"event: message_start\ndata: {}\n\ndata: plain\n\n"
    assert decode_whole(data) == [SSEEvent("message_start", b"{}"), SSEEvent("", b"plain")]


def test_event_name_whitespace_is_stripped():
    assert decode_whole(b"event:ping\ndata: x\n\nevent:   pong  \ndata: y\n\n") == [
        SSEEvent("ping", b"x"),
        SSEEvent("pong", b"y"),
    ]


def test_multi_line_data_is_joined_with_lf():
    assert decode_whole(b"data: first\ndata: second\ndata:third\n\n") == [
        SSEEvent("", b"first\nsecond\nthird")
    ]


def test_only_one_leading_space_is_removed():
    assert decode_whole(b"data:  two spaces\n\n") == [SSEEvent("", b" two spaces")]
    assert decode_whole(b"data:no space\n\n") == [SSEEvent("", b"no space")]


def test_comments_and_unused_fields_are_ignored():
    data = b": keep-alive\n\n:another\nid: 7\nretry: 1000\ndata: x\nfoo: bar\n\n"
    assert decode_whole(data) == [SSEEvent("", b"x")]


def test_blank_lines_without_data_dispatch_nothing():
    assert decode_whole(b"\n\n\n: ping\n\nevent: lonely\n\n") == []


def test_event_name_without_data_does_not_leak_into_next_event():
    assert decode_whole(b"event: lonely\n\ndata: x\n\n") == [SSEEvent("", b"x")]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes):
    data = eol.join([b"event: e", b"data: a", b"data: b", b"", b"data: c", b"", b""])
    assert decode_whole(data) == [SSEEvent("e", b"a\nb"), SSEEvent("", b"c")]


def test_mixed_line_endings():
    data = b"data: a\r\ndata: b\rdata: c\n\r\ndata: d\r\r"
    assert decode_whole(data) == [SSEEvent("", b"a\nb\nc"), SSEEvent("", b"d")]


def test_crlf_split_between_cr_and_lf():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == []
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [SSEEvent("", b"a"), SSEEvent("", b"b")]
    assert decoder.close() == []


def test_cr_at_end_of_feed_then_a_new_line():
    # A held CR followed by something other than LF is a line ending on its own.
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\rdata: b\r\r") == [SSEEvent("", b"a")]
    assert decoder.close() == [SSEEvent("", b"b")]


def test_close_flushes_an_unterminated_event():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: tail") == []
    assert decoder.close() == [SSEEvent("", b"tail")]
    assert decoder.close() == []


def test_close_flushes_an_event_missing_only_its_blank_line():
    decoder = SSEDecoder()
    assert decoder.feed(b"event: e\ndata: x\n") == []
    assert decoder.close() == [SSEEvent("e", b"x")]


def test_close_on_an_empty_decoder():
    assert SSEDecoder().close() == []


def test_byte_by_byte_feeding():
    data = b"event: a\r\ndata: 1\r\n\r\ndata: 2\r\rdata: 3\n\n"
    assert decode_pieces([bytes([b]) for b in data]) == decode_whole(data)


def test_utf8_split_inside_a_character():
    data = "data: héllo ☃\n\n".encode()
    assert decode_pieces(split_at(data, [8, 13])) == [SSEEvent("", "héllo ☃".encode())]


def test_encode_frames_round_trip():
    frames = encode_data_frame(b'{"x":1}') + encode_named_frame("ping", b"{}")
    assert frames == b'data: {"x":1}\n\nevent: ping\ndata: {}\n\n'
    assert decode_whole(frames) == [SSEEvent("", b'{"x":1}'), SSEEvent("ping", b"{}")]


# ---------------------------------------------------------------------------------------------
# Property: any split of the bytes yields the same events as the whole
# ---------------------------------------------------------------------------------------------

_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)
_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.", min_size=1, max_size=8)


@st.composite
def sse_streams(draw) -> tuple[bytes, list[SSEEvent]]:
    """Bytes of a random event stream, and the events it encodes."""
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    lines: list[bytes] = []
    expected: list[SSEEvent] = []
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        if draw(st.booleans()):
            lines.append(b":" + draw(_TEXT).encode())
        name = draw(st.none() | _NAME)
        if name is not None:
            lines.append(b"event: " + name.encode())
        data = [value.encode() for value in draw(st.lists(_TEXT, min_size=1, max_size=3))]
        lines += [b"data: " + value for value in data]
        lines.append(b"")
        expected.append(SSEEvent(name or "", b"\n".join(data)))
    return b"".join(line + eol for line in lines), expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=sse_streams(), data=st.data())
@example(stream=(b"data: a\r\n\r\n", [SSEEvent("", b"a")]), data=None)
def test_any_split_yields_the_same_events(stream, data):
    raw, expected = stream
    whole = decode_whole(raw)
    assert whole == expected
    if data is None:  # the explicit example: try every two-piece split
        cut_sets = [[i] for i in range(len(raw) + 1)]
    else:
        cuts = data.draw(
            st.lists(st.integers(min_value=0, max_value=len(raw)), max_size=max(1, len(raw)))
        )
        cut_sets = [cuts]
    for cuts in cut_sets:
        assert decode_pieces(split_at(raw, cuts)) == whole, cuts


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_two_piece_split(eol: bytes):
    raw = eol.join([b"event: e", b"data: a", b": c", b"data: b", b"", b"data: z", b"", b""])
    whole = decode_whole(raw)
    assert whole == [SSEEvent("e", b"a\nb"), SSEEvent("", b"z")]
    for i in range(len(raw) + 1):
        assert decode_pieces([raw[:i], raw[i:]]) == whole, i
