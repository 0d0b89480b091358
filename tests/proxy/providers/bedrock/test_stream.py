"""proxy/providers/bedrock/stream.py: Converse event-stream framing and parsing.

Table-driven from the ``stream`` fixtures of tests/fixtures/bedrock/ (event-stream bytes in, in
any split, canonical chunks out, then the end or the error), then the parts the recorded
streams do not show: cuts, corrupt frames, in-band exceptions and error frames, malformed
payloads, unknown events. Decoders and parsers come from the provider's ``stream_decoder()``
and ``stream_parser()``, as the transport gets them; the provider itself (and the gateway in
front of a stream that fails in-band) is tested in ``test_bedrock.py``, whose helpers these
tests share.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import GatewayError, UpstreamError, UpstreamUnavailable
from proxy.core.reply import Chunk
from proxy.providers.bedrock.provider import BedrockProvider
from tests.proxy.providers.bedrock.test_provider import FIXTURES, load_fixtures, provider
from tests.proxy.providers.fakes.bedrock import encode_message, event

# ---------------------------------------------------------------------------------------------
# Table-driven translation
# ---------------------------------------------------------------------------------------------


def run_stream(p: BedrockProvider, data: bytes, cuts: list[int]) -> tuple[list[Chunk], Any]:
    """Frame and parse ``data`` fed in pieces, as the transport does; (chunks, end or error)."""
    decoder, parser = p.stream_decoder(), p.stream_parser()
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    chunks: list[Chunk] = []
    try:
        for start, end in itertools.pairwise(points):
            for frame in decoder.feed(data[start:end]):
                chunk = parser.parse_event(frame.event, frame.data)
                if chunk is not None:
                    chunks.append(chunk)
        assert decoder.close() == []
        return chunks, parser.end()
    except GatewayError as error:
        return chunks, error


def chunk_view(chunk: Chunk) -> dict[str, Any]:
    return {k: v for k, v in msgspec.to_builtins(chunk).items() if k in ("choices", "usage")}


@pytest.mark.parametrize("fixture", load_fixtures("stream"))
@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=3000), max_size=12))
def test_stream_translation_in_any_split(fixture: dict[str, Any], cuts: list[int]):
    data = (FIXTURES / fixture["frames"]).read_bytes()
    chunks, outcome = run_stream(provider(), data, cuts)
    assert [chunk_view(c) for c in chunks] == fixture["expected_chunks"]
    assert len({c.id for c in chunks}) == 1
    assert all(c.id.startswith("chatcmpl-") for c in chunks)
    if fixture.get("complete"):
        assert outcome is None
    else:
        expected = fixture["error"]
        assert type(outcome).__name__ == expected["class"]
        assert (outcome.status, outcome.kind) == (expected["status"], expected["kind"])
        assert outcome.message == expected["message"]
        assert outcome.provider == "bedrock"


# ---------------------------------------------------------------------------------------------
# The parts the recorded streams do not show
# ---------------------------------------------------------------------------------------------


def frames(*names_and_payloads: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(event(name, payload) for name, payload in names_and_payloads)


def test_a_stream_cut_before_its_metadata_event_is_an_error():
    data = frames(
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
        ("messageStop", {"stopReason": "end_turn"}),
    )
    chunks, outcome = run_stream(provider(), data, [])
    assert len(chunks) == 3
    assert isinstance(outcome, UpstreamUnavailable)
    assert "metadata" in outcome.message


def test_a_stream_cut_mid_frame_is_an_error():
    data = frames(("messageStart", {"role": "assistant"}))
    decoder = provider().stream_decoder()
    assert len(decoder.feed(data + data[:20])) == 1
    with pytest.raises(UpstreamUnavailable, match="middle of an event"):
        decoder.close()


def test_corrupt_frames_are_an_upstream_error():
    data = bytearray(frames(("messageStart", {"role": "assistant"})))
    data[-1] ^= 0xFF
    with pytest.raises(UpstreamError, match="malformed event stream") as info:
        provider().stream_decoder().feed(bytes(data))
    assert info.value.provider == "bedrock"


@pytest.mark.parametrize(
    ("exception", "cls", "status"),
    [
        ("validationException", "UpstreamClientError", 400),
        ("modelStreamErrorException", "UpstreamError", 502),
        ("internalServerException", "UpstreamError", 502),
        ("serviceUnavailableException", "UpstreamOverloaded", 503),
    ],
)
def test_in_band_exceptions_are_classified(exception: str, cls: str, status: int):
    headers = {
        ":exception-type": exception,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    data = encode_message(headers, b'{"message":"it broke"}')
    chunks, outcome = run_stream(provider(), data, [])
    assert chunks == []
    assert type(outcome).__name__ == cls
    assert outcome.status == status
    assert outcome.message == "it broke"


def test_error_message_frames_are_raised():
    headers = {
        ":message-type": "error",
        ":error-code": "InternalFailure",
        ":error-message": "An internal error occurred",
    }
    _, outcome = run_stream(provider(), encode_message(headers, b""), [])
    assert type(outcome) is UpstreamError
    assert outcome.message == "An internal error occurred"


def test_malformed_event_payload_is_an_upstream_error():
    data = encode_message(
        {":event-type": "contentBlockDelta", ":message-type": "event"}, b'{"delta": 5}'
    )
    _, outcome = run_stream(provider(), data, [])
    assert type(outcome) is UpstreamError
    assert "malformed contentBlockDelta event" in outcome.message


def test_unknown_events_and_metadata_without_usage_give_nothing():
    data = frames(
        ("messageStart", {"role": "assistant"}),
        ("contentBlockStart", {"contentBlockIndex": 0, "start": {"image": {"format": "png"}}}),
        ("someFutureEvent", {"x": 1}),
        ("messageStop", {"stopReason": "stop_sequence"}),
        ("metadata", {"metrics": {"latencyMs": 3}}),
    )
    chunks, outcome = run_stream(provider(), data, [])
    assert [c.choices[0].finish_reason for c in chunks] == [None, "stop"]
    assert outcome is None
