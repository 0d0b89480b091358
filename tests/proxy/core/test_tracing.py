"""The tracing contract (proxy.core.tracing) and the chain's spans (proxy.core.plugin.compose):
the no-op tracer changes nothing, a tracer that is on gets one span per link, nested, failed
with the error's code, described by a plugin's ``span_attributes``."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager

import pytest

from proxy.core.canonical import Call
from proxy.core.errors import RateLimited
from proxy.core.plugin import compose
from proxy.core.reply import Reply
from proxy.core.tracing import NO_SPAN, NO_TRACER, AttributeValue, Span
from tests.proxy.core.test_plugin import Recorder, make_call, text_reply


class FakeSpan:
    def __init__(self, name: str, parent: FakeSpan | None, attributes: Mapping) -> None:
        self.name = name
        self.parent = parent
        self.attributes: dict[str, AttributeValue] = dict(attributes)
        self.ended = 0
        self.error: str | None = None
        self.trace_id = "0" * 31 + "1"
        self.recording = True

    def set(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value

    def set_many(self, attributes: Mapping[str, AttributeValue]) -> None:
        self.attributes.update(attributes)

    def fail(self, error_type: str, message: str | None = None) -> None:
        self.error = error_type

    def end(self) -> None:
        self.ended += 1


class FakeTracer:
    """A tracer that keeps its spans, with the current one in a context variable."""

    enabled = True
    capture_content = False

    def __init__(self) -> None:
        self.spans: list[FakeSpan] = []
        self.current: contextvars.ContextVar[FakeSpan | None] = contextvars.ContextVar(
            "current", default=None
        )

    def request_span(self, name: str, headers: Mapping, attributes: Mapping) -> Span:
        return self._open(name, None, attributes)

    def child_span(self, name: str, attributes: Mapping, client: bool = False) -> Span:
        return self._open(name, self.current.get(), attributes)

    def _open(self, name: str, parent: FakeSpan | None, attributes: Mapping) -> FakeSpan:
        span = FakeSpan(name, parent, attributes)
        self.spans.append(span)
        return span

    def activate(self, span: Span) -> AbstractContextManager[None]:
        return self._activated(span)

    @contextmanager
    def _activated(self, span: Span) -> Iterator[None]:
        assert isinstance(span, FakeSpan)
        token = self.current.set(span)
        try:
            yield
        finally:
            self.current.reset(token)

    def inject(self, span: Span, headers: MutableMapping[str, str]) -> None:
        headers["traceparent"] = "fake"

    async def close(self) -> None:
        pass


class Cache:
    """A plugin that answers itself and says so on its span."""

    async def __call__(self, call: Call, next) -> Reply:
        call.accounting.cache = "hit"
        return text_reply("cached")

    def span_attributes(self, call: Call) -> dict[str, str]:
        return {"crossway.cache": str(call.accounting.cache)}


class BadDescription(Recorder):
    def span_attributes(self, call: Call) -> dict[str, str]:
        raise RuntimeError("a description that fails")


class Refuses:
    async def __call__(self, call: Call, next) -> Reply:
        raise RateLimited("busy", code="too_busy")


async def upstream(call: Call) -> Reply:
    return text_reply()


def test_the_no_op_tracer_is_off_and_records_nothing() -> None:
    assert NO_TRACER.enabled is False
    assert NO_TRACER.capture_content is False
    span = NO_TRACER.request_span("r", {"traceparent": "x"}, {})
    assert span is NO_SPAN
    assert NO_TRACER.child_span("c", {}, client=True) is NO_SPAN
    assert span.trace_id == ""
    assert span.recording is False
    span.set("k", 1)
    span.set_many({"k": 2})
    span.fail("e")
    span.end()
    headers: dict[str, str] = {}
    NO_TRACER.inject(span, headers)
    assert headers == {}
    with NO_TRACER.activate(span):
        pass


async def test_with_tracing_off_the_links_are_the_plain_ones() -> None:
    log: list[str] = []
    chain = compose([Recorder("a", log)], upstream, NO_TRACER, ["a"])
    plain = compose([Recorder("a", log)], upstream)
    assert chain.__qualname__ == plain.__qualname__ == "_link.<locals>.link"
    assert (await chain(make_call())).response is not None


async def test_each_link_is_a_span_under_the_one_outside_it() -> None:
    tracer = FakeTracer()
    log: list[str] = []
    chain = compose([Recorder("a", log), Recorder("b", log)], upstream, tracer, ["auth"])
    reply = await chain(make_call())
    assert reply.response is not None
    assert log == ["a>", "b>", "<b", "<a"]
    outer, inner = tracer.spans
    assert (outer.name, inner.name) == ("crossway.plugin auth", "crossway.plugin Recorder")
    assert inner.parent is outer
    assert outer.attributes == {"crossway.plugin": "auth"}
    assert outer.ended == inner.ended == 1
    assert tracer.current.get() is None  # nothing left current


async def test_a_refusal_fails_its_span_and_the_ones_outside() -> None:
    tracer = FakeTracer()
    chain = compose([Recorder("a", []), Refuses()], upstream, tracer, ["outer", "limits"])
    with pytest.raises(RateLimited):
        await chain(make_call())
    outer, limits = tracer.spans
    assert limits.error == "too_busy"
    assert outer.error == "too_busy"
    assert outer.ended == limits.ended == 1


async def test_a_plugin_describes_its_span_and_a_failing_description_is_ignored() -> None:
    tracer = FakeTracer()
    chain = compose([BadDescription("a", []), Cache()], upstream, tracer, ["bad", "cache"])
    reply = await chain(make_call())
    assert reply.response is not None
    bad, cache = tracer.spans
    assert cache.attributes["crossway.cache"] == "hit"
    assert bad.attributes == {"crossway.plugin": "bad"}
    assert bad.ended == 1
