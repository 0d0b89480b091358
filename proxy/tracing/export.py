"""The OTLP exporter and the resource of ``telemetry.traces``, from the config and the standard
``OTEL_*`` environment variables (the config wins where both say something).

The exporters are the OpenTelemetry SDK's own (``opentelemetry-exporter-otlp-proto-http`` and
``-grpc``), imported here only for the protocol in use. Nothing is sent while building: an
endpoint that is down shows only when the first batch is exported (the SDK logs it and drops
that batch after its retries; requests never wait on it).
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter

from proxy.tracing.config import Protocol, TracesConfig

DEFAULT_SERVICE_NAME = "crossway"
_TRACES_PATH = "/v1/traces"


def protocol_of(config: TracesConfig, environ: Mapping[str, str]) -> Protocol:
    """The export protocol: the config's, else ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``http/protobuf`` (an unknown value in the
    environment too: it is not the config's to refuse)."""
    if config.protocol is not None:
        return config.protocol
    named = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL"
    )
    return "grpc" if named == "grpc" else "http/protobuf"


def http_traces_url(endpoint: str) -> str:
    """The URL an HTTP exporter posts to: ``endpoint`` when it ends with ``/v1/traces``, else
    ``endpoint`` + ``/v1/traces``."""
    base = endpoint.rstrip("/")
    return base if base.endswith(_TRACES_PATH) else base + _TRACES_PATH


def build_exporter(config: TracesConfig, environ: Mapping[str, str]) -> SpanExporter:
    """The OTLP span exporter of ``config`` (the endpoint and headers it leaves unset are read
    from the environment by the exporter itself, as the OTLP spec says)."""
    headers = dict(config.headers) if config.headers is not None else None
    timeout = config.export_timeout
    if protocol_of(config, environ) == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=config.endpoint, headers=headers, timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    endpoint = None if config.endpoint is None else http_traces_url(config.endpoint)
    return HttpExporter(endpoint=endpoint, headers=headers, timeout=timeout)


def build_resource(config: TracesConfig, environ: Mapping[str, str]) -> Resource:
    """The resource of every span: ``OTEL_RESOURCE_ATTRIBUTES``, then the config's
    ``resource_attributes``, then ``service.name`` (the config's ``service_name``, else
    ``OTEL_SERVICE_NAME``, else ``crossway``)."""
    attributes: dict[str, str] = dict(config.resource_attributes)
    attributes["service.name"] = (
        config.service_name or environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    )
    return Resource.create(attributes)
