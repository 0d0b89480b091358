"""proxy/providers/gemini/stream.py: the SSE stream parser, table-driven from the ``stream``
fixtures of tests/fixtures/gemini/.

Streams are fed through the SSE decoder whole, in several byte splits and at random cut points,
and must translate the same; then how a stream ends and the events that carry nothing. Parsers
come from the provider's ``stream_parser()``, as the transport gets them; the provider itself
(and the tool-call id round trip through a request) is tested in ``test_gemini.py``, whose
helpers these tests share.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.proxy.providers.gemini.test_provider import provider
from tests.proxy.providers.translation_support import (
    SPLITS,
    assert_error,
    load_fixtures,
    run_stream,
    sse_bytes,
    sse_events,
    sse_events_at,
)

STREAMS = load_fixtures("gemini", "stream")


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


def test_a_stream_without_usage_ends_without_a_usage_chunk():
    parser = provider().stream_parser()
    data = b'{"candidates":[{"content":{"parts":[{"text":"ok"}]},"finishReason":"STOP"}]}'
    assert parser.parse_event("", data) is not None
    assert parser.end() is None


def test_events_with_nothing_new_carry_no_chunk():
    parser = provider().stream_parser()
    assert parser.parse_event("", b'{"usageMetadata":{"promptTokenCount":3}}') is None
    assert parser.parse_event("", b'{"candidates":[{"content":{"parts":[]}}]}') is None
