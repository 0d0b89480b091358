"""Traces: the OpenTelemetry implementation of :mod:`proxy.core.tracing`'s contract.

:func:`build_tracer` is the room's entry: :data:`~proxy.core.tracing.NO_TRACER` when
``telemetry.traces`` is absent or disabled — the OpenTelemetry SDK is then never imported —
else an :class:`~proxy.tracing.otel.OtelTracer` exporting over OTLP (:mod:`proxy.tracing.export`).
:mod:`proxy.tracing.genai` turns canonical calls and replies into the GenAI conventions'
attributes; :mod:`proxy.tracing.config` is the config section.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from proxy.core.tracing import NO_TRACER, Tracer
from proxy.tracing.config import TracesConfig


def build_tracer(
    config: TracesConfig | None,
    environ: Mapping[str, str] | None = None,
    *,
    schedule_delay: float | None = None,
) -> Tracer:
    """The tracer of a ``telemetry.traces`` section (see the module docstring); ``environ``
    (the process's by default) supplies the ``OTEL_*`` variables the config leaves to it.
    ``schedule_delay`` overrides the batch processor's export delay, in seconds."""
    if config is None or not config.enabled:
        return NO_TRACER
    from proxy.tracing.export import build_exporter, build_resource
    from proxy.tracing.otel import OtelTracer

    variables = os.environ if environ is None else environ
    return OtelTracer(
        config,
        build_exporter(config, variables),
        build_resource(config, variables),
        schedule_delay=schedule_delay,
    )
