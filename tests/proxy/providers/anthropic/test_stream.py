"""proxy/providers/anthropic/stream.py: the Messages stream parser, table-driven from the
``stream`` fixtures of tests/fixtures/anthropic/.

Streams are fed through the SSE decoder whole, in several byte splits and at random cut points,
and must translate the same; then the events the recorded streams do not show (malformed data,
pings and unknown types, in-band errors). Parsers come from the provider's ``stream_parser()``,
as the transport gets them; the provider itself is tested in ``test_anthropic.py``, whose
helpers these tests share.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import UpstreamError
from tests.proxy.providers.anthropic.test_provider import provider
from tests.proxy.providers.translation_support import (
    SPLITS,
    assert_error,
    load_fixtures,
    run_stream,
    sse_bytes,
    sse_events,
    sse_events_at,
)

STREAMS = load_fixtures("anthropic", "stream")


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("fixture", STREAMS)
def test_stream_translation_in_any_split(fixture: dict[str, Any], split: int | None):
    events = sse_events(sse_bytes(fixture), split)
    chunks, error = run_stream(provider().stream_parser(), events)
    assert chunks == fixture["expected_chunks"]
    if fixture["expected_error"] is None:
        assert error is None
    else:
        assert_error(error, fixture["expected_error"])


@settings(max_examples=30, derandomize=True, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_streams_translate_the_same_at_random_cut_points(cuts: list[int]):
    for case in STREAMS:
        fixture = case.values[0]
        events = sse_events_at(sse_bytes(fixture), cuts)
        chunks, _ = run_stream(provider().stream_parser(), events)
        assert chunks == fixture["expected_chunks"], fixture["sse"]


def test_malformed_stream_event_is_an_upstream_error():
    with pytest.raises(UpstreamError, match="malformed stream event"):
        provider().stream_parser().parse_event("content_block_delta", b"[")


def test_ping_stop_and_unknown_events_carry_nothing():
    parser = provider().stream_parser()
    assert parser.parse_event("ping", b'{"type": "ping"}') is None
    assert parser.parse_event("content_block_stop", b'{"type":"content_block_stop"}') is None
    assert parser.parse_event("future", b'{"type":"future_event","x":1}') is None


def test_in_band_errors_are_classified_by_type():
    parser = provider().stream_parser()
    data = b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}'
    with pytest.raises(UpstreamError) as caught:
        parser.parse_event("error", data)
    assert caught.value.kind == "rate_limited"
    assert caught.value.status == 429
