"""The tracing contract: what the pipeline, the chain and the upstream call ask of a tracer.

The gateway's parts open spans through a :class:`Tracer` and never import a tracing library:
:mod:`proxy.tracing` implements it with the OpenTelemetry SDK when ``telemetry.traces`` is
configured, and :data:`NO_TRACER` stands in otherwise. A part checks :attr:`Tracer.enabled`
once — when a chain is composed, once per request or per upstream attempt — and does nothing
more when it is False, so that with tracing off the hot path pays that one attribute check.

Spans form one tree per request: the request span (:meth:`Tracer.request_span`, a server span
that continues the caller's W3C ``traceparent``/``tracestate``), made current with
:meth:`Tracer.activate` for the request's duration, and the spans opened under it
(:meth:`Tracer.child_span`: a plugin's, an upstream attempt's), children of whichever span is
current in the running task. A span is ended exactly once, by whoever opened it; setting on an
ended span is ignored. None of these methods raises for a tracer or exporter failure: tracing
never fails a request.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int] | Sequence[float]
"""What a span attribute may hold (OpenTelemetry's primitive types and their sequences)."""


class Span(Protocol):
    """One timed operation of a request, with attributes.

    ``trace_id`` is the trace's id as 32 lowercase hex digits ("" for a span that records
    nothing and belongs to no trace). ``recording`` is False for a span that is not sampled:
    its attributes would be dropped, so a caller may skip computing them.
    """

    @property
    def trace_id(self) -> str:
        """The trace id, 32 lowercase hex digits (or "")."""
        ...

    @property
    def recording(self) -> bool:
        """Whether attributes set on this span are kept (it is sampled)."""
        ...

    def set(self, key: str, value: AttributeValue) -> None:
        """Set one attribute (a later value for the same key replaces it)."""
        ...

    def set_many(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Set several attributes at once (cheaper than one :meth:`set` each)."""
        ...

    def fail(self, error_type: str, message: str | None = None) -> None:
        """Mark the operation failed: attribute ``error.type`` and the span's error status."""
        ...

    def end(self) -> None:
        """The operation is over; later calls are ignored."""
        ...


class Tracer(Protocol):
    """Opens spans (see the module docstring). ``capture_content`` is the operator's opt-in to
    message content on the upstream attempt spans (always False when ``enabled`` is)."""

    enabled: bool
    capture_content: bool

    def request_span(
        self, name: str, headers: Mapping[str, str], attributes: Mapping[str, AttributeValue]
    ) -> Span:
        """A server span for one client request, continuing the trace that the request's
        ``traceparent``/``tracestate`` headers name (a new trace when they are absent or
        invalid). It is not made current: see :meth:`activate`."""
        ...

    def child_span(
        self, name: str, attributes: Mapping[str, AttributeValue], client: bool = False
    ) -> Span:
        """A span under the current one (a client span when ``client``: a call out of the
        gateway). It is not made current."""
        ...

    def activate(self, span: Span) -> AbstractContextManager[None]:
        """Make ``span`` the current span of the running task within the ``with`` block."""
        ...

    def inject(self, span: Span, headers: MutableMapping[str, str]) -> None:
        """Write ``span``'s W3C context into ``headers`` (``traceparent``, and ``tracestate``
        when the trace carries one), so that the receiver continues the trace under it."""
        ...

    async def close(self) -> None:
        """Export what is still buffered and release the exporter (idempotent)."""
        ...


class _NoSpan:
    """A span that records nothing."""

    __slots__ = ()

    trace_id = ""
    recording = False

    def set(self, key: str, value: AttributeValue) -> None:
        """Ignored."""

    def set_many(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Ignored."""

    def fail(self, error_type: str, message: str | None = None) -> None:
        """Ignored."""

    def end(self) -> None:
        """Ignored."""


NO_SPAN: Span = _NoSpan()
"""The span of :data:`NO_TRACER`: records nothing."""


class _NoTracer:
    """The tracer when tracing is off: ``enabled`` is False and every span is :data:`NO_SPAN`."""

    __slots__ = ()

    enabled = False
    capture_content = False

    def request_span(
        self, name: str, headers: Mapping[str, str], attributes: Mapping[str, AttributeValue]
    ) -> Span:
        """:data:`NO_SPAN`."""
        return NO_SPAN

    def child_span(
        self, name: str, attributes: Mapping[str, AttributeValue], client: bool = False
    ) -> Span:
        """:data:`NO_SPAN`."""
        return NO_SPAN

    def activate(self, span: Span) -> AbstractContextManager[None]:
        """A block that changes nothing."""
        return _nothing()

    def inject(self, span: Span, headers: MutableMapping[str, str]) -> None:
        """Writes nothing."""

    async def close(self) -> None:
        """Nothing to release."""


@contextmanager
def _nothing() -> Iterator[None]:
    yield


NO_TRACER: Tracer = _NoTracer()
"""The tracer of a gateway without ``telemetry.traces``: off, costs one attribute check."""
