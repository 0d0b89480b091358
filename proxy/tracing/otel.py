"""The :class:`~proxy.core.tracing.Tracer` of :mod:`proxy.core.tracing` on the OpenTelemetry SDK.

Imported only when ``telemetry.traces`` is on (:func:`proxy.tracing.build_tracer`). One
:class:`OtelTracer` per runtime snapshot owns its own ``TracerProvider`` — never the process's
global one — with a batch span processor in front of an OTLP exporter
(:mod:`proxy.tracing.export`): spans are queued on the request path and exported by the SDK's
thread, so an exporter that is slow or down costs a request nothing; when the queue is full the
SDK drops the newest spans (and logs it) rather than wait. Sampling is parent-based over a
trace-id ratio: a caller's sampled flag is obeyed, a new trace is kept with ``sample_ratio``.
The caller's context is read and the upstream's written with the W3C Trace Context propagator
(``traceparent``/``tracestate``). Spans follow the OpenTelemetry semantic conventions at
:data:`SCHEMA_URL`; the version is the tracer's schema URL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from proxy.core.tracing import AttributeValue, Span
from proxy.tracing.config import TracesConfig

SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"
"""The semantic conventions the spans follow (their GenAI part is still "Development")."""

SCOPE = "crossway"
"""The instrumentation scope's name on every span."""

_PROPAGATOR = TraceContextTextMapPropagator()


class OtelSpan:
    """A :class:`~proxy.core.tracing.Span` over an SDK span."""

    __slots__ = ("_span", "recording", "trace_id")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self.recording = span.is_recording()
        self.trace_id = trace.format_trace_id(span.get_span_context().trace_id)

    @property
    def otel(self) -> trace.Span:
        """The SDK span."""
        return self._span

    def set(self, key: str, value: AttributeValue) -> None:
        """Set one attribute (ignored on a span that is not recording, or has ended)."""
        self._span.set_attribute(key, value)

    def set_many(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Set several attributes under one lock of the SDK span."""
        self._span.set_attributes(attributes)

    def fail(self, error_type: str, message: str | None = None) -> None:
        """``error.type`` and the error status (with ``message`` as its description)."""
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, message))

    def end(self) -> None:
        """End the span (the SDK ignores a second end, with a warning: we end once)."""
        self._span.end()


class OtelTracer:
    """A :class:`~proxy.core.tracing.Tracer` exporting through ``exporter`` (see the module
    docstring). ``capture_content`` comes from the config."""

    enabled = True

    def __init__(
        self,
        config: TracesConfig,
        exporter: SpanExporter,
        resource: Resource,
        *,
        schedule_delay: float | None = None,
    ) -> None:
        """``schedule_delay`` (seconds) overrides the batch processor's (else
        ``OTEL_BSP_SCHEDULE_DELAY``, then 5 s)."""
        self.capture_content = config.capture_content
        self._provider = TracerProvider(
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            resource=resource,
            shutdown_on_exit=False,  # one per snapshot: closed with it, not at exit
        )
        self._provider.add_span_processor(
            BatchSpanProcessor(
                exporter,
                schedule_delay_millis=None if schedule_delay is None else schedule_delay * 1000,
                export_timeout_millis=config.export_timeout * 1000,
            )
        )
        self._tracer = self._provider.get_tracer(SCOPE, schema_url=SCHEMA_URL)
        self._closed: asyncio.Future[None] | None = None

    def request_span(
        self, name: str, headers: Mapping[str, str], attributes: Mapping[str, AttributeValue]
    ) -> Span:
        """A server span continuing the W3C context of ``headers`` (a new trace without one)."""
        parent = _PROPAGATOR.extract(headers)
        return OtelSpan(
            self._tracer.start_span(
                name, context=parent, kind=SpanKind.SERVER, attributes=attributes
            )
        )

    def child_span(
        self, name: str, attributes: Mapping[str, AttributeValue], client: bool = False
    ) -> Span:
        """A span under the current one."""
        kind = SpanKind.CLIENT if client else SpanKind.INTERNAL
        return OtelSpan(self._tracer.start_span(name, kind=kind, attributes=attributes))

    def activate(self, span: Span) -> AbstractContextManager[None]:
        """``span`` current in the running task within the block."""
        return _current(span)

    def inject(self, span: Span, headers: MutableMapping[str, str]) -> None:
        """``traceparent`` (and ``tracestate``) of ``span`` into ``headers``."""
        if isinstance(span, OtelSpan):
            _PROPAGATOR.inject(headers, context=trace.set_span_in_context(span.otel))

    async def close(self) -> None:
        """Export the spans still queued (within the export timeout) and stop the exporter's
        thread; off the event loop, since the SDK blocks. Idempotent."""
        if self._closed is None:
            self._closed = asyncio.ensure_future(asyncio.to_thread(self._provider.shutdown))
        await asyncio.shield(self._closed)

    def flush(self, timeout: float = 5.0) -> bool:
        """Export what is queued now (blocks up to ``timeout`` seconds); True when done."""
        return self._provider.force_flush(int(timeout * 1000))


@contextmanager
def _current(span: Span) -> Iterator[None]:
    if not isinstance(span, OtelSpan):
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(span.otel))
    try:
        yield
    finally:
        otel_context.detach(token)
