"""The OpenTelemetry tracer (proxy.tracing): built from the config and the OTEL_* environment,
continuing and propagating W3C context, sampling, closing; and the telemetry config section."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from proxy.core.tracing import NO_TRACER
from proxy.runtime.config import ConfigError, parse_config
from proxy.tracing import build_tracer
from proxy.tracing.config import TracesConfig
from proxy.tracing.export import (
    build_exporter,
    build_resource,
    http_traces_url,
    protocol_of,
)
from proxy.tracing.otel import SCHEMA_URL, OtelTracer

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def tracer(config: TracesConfig | None = None) -> tuple[OtelTracer, InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    config = config or TracesConfig()
    return OtelTracer(config, exported, build_resource(config, {})), exported


def test_tracing_is_off_without_the_section_or_when_disabled() -> None:
    assert build_tracer(None) is NO_TRACER
    assert build_tracer(TracesConfig(enabled=False)) is NO_TRACER


async def test_an_enabled_section_builds_an_otlp_tracer() -> None:
    built = build_tracer(TracesConfig(endpoint="http://127.0.0.1:9"), {})
    assert isinstance(built, OtelTracer)
    assert built.enabled is True
    assert built.capture_content is False
    await built.close()
    await built.close()  # idempotent


def test_the_protocol_comes_from_the_config_then_the_environment() -> None:
    assert protocol_of(TracesConfig(), {}) == "http/protobuf"
    assert protocol_of(TracesConfig(), {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    environ = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "x"}
    assert protocol_of(TracesConfig(), environ) == "grpc"
    assert protocol_of(TracesConfig(protocol="http/protobuf"), environ) == "http/protobuf"
    assert protocol_of(TracesConfig(), {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}) == (
        "http/protobuf"
    )


def test_the_http_endpoint_is_a_base_or_the_traces_url() -> None:
    assert http_traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert http_traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert http_traces_url("https://x.example/otlp/v1/traces") == (
        "https://x.example/otlp/v1/traces"
    )


def test_the_exporter_follows_the_protocol_and_leaves_the_rest_to_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    http = build_exporter(TracesConfig(endpoint="http://collector:4318"), {})
    assert isinstance(http, Http)
    assert http._endpoint == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://from-env:4318")
    from_env = build_exporter(TracesConfig(), {})
    assert isinstance(from_env, Http)
    assert from_env._endpoint == "http://from-env:4318/v1/traces"
    grpc = build_exporter(TracesConfig(endpoint="http://127.0.0.1:4317", protocol="grpc"), {})
    assert isinstance(grpc, Grpc)
    grpc.shutdown()


def test_the_resource_names_the_service() -> None:
    assert build_resource(TracesConfig(), {}).attributes["service.name"] == "crossway"
    named = build_resource(TracesConfig(), {"OTEL_SERVICE_NAME": "edge"})
    assert named.attributes["service.name"] == "edge"
    config = TracesConfig(service_name="gw", resource_attributes={"region": "eu"})
    resource = build_resource(config, {"OTEL_SERVICE_NAME": "edge"})
    assert resource.attributes["service.name"] == "gw"
    assert resource.attributes["region"] == "eu"


async def test_a_request_span_continues_the_caller_and_its_children_propagate() -> None:
    traced, exported = tracer()
    request = traced.request_span("POST /v1/chat/completions", {"traceparent": PARENT}, {"a": 1})
    assert request.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    with traced.activate(request):
        attempt = traced.child_span("chat m", {"gen_ai.operation.name": "chat"}, client=True)
    outside = traced.child_span("outside", {})
    headers: dict[str, str] = {}
    traced.inject(attempt, headers)
    attempt.fail("upstream_error")
    for span in (attempt, outside, request):
        span.end()
    assert traced.flush()
    spans = {span.name: span for span in exported.get_finished_spans()}
    server, client = spans["POST /v1/chat/completions"], spans["chat m"]
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None
    assert server.parent.span_id == 0x00F067AA0BA902B7
    assert client.kind is SpanKind.CLIENT
    assert client.parent is not None
    assert client.parent.span_id == server.context.span_id
    assert client.status.status_code is StatusCode.ERROR
    assert client.attributes is not None
    assert client.attributes["error.type"] == "upstream_error"
    assert spans["outside"].context.trace_id != server.context.trace_id  # nothing current
    assert headers["traceparent"] == (
        f"00-4bf92f3577b34da6a3ce929d0e0e4736-{client.context.span_id:016x}-01"
    )
    assert client.instrumentation_scope is not None
    assert client.instrumentation_scope.schema_url == SCHEMA_URL
    await traced.close()


async def test_an_unsampled_trace_still_has_an_id_and_propagates_its_flag() -> None:
    traced, exported = tracer(TracesConfig(sample_ratio=0))
    span = traced.request_span("GET /", {}, {})
    assert span.recording is False
    assert len(span.trace_id) == 32
    headers: dict[str, str] = {}
    traced.inject(span, headers)
    assert int(headers["traceparent"].rsplit("-", 1)[1], 16) & 1 == 0  # not sampled
    span.end()
    caller_kept = traced.request_span("GET /", {"traceparent": PARENT}, {})
    assert caller_kept.recording is True  # parent-based: the caller sampled it
    caller_kept.end()
    traced.flush()
    assert [s.name for s in exported.get_finished_spans()] == ["GET /"]
    await traced.close()


def test_the_telemetry_section_parses_and_refuses_what_it_does_not_know() -> None:
    assert parse_config("").telemetry.traces is None
    config = parse_config(
        "telemetry: {traces: {endpoint: 'http://c:4318', sample_ratio: 0.25,"
        " capture_content: true, headers: {authorization: 'Bearer x'}}}"
    )
    traces = config.telemetry.traces
    assert traces is not None
    assert traces.sample_ratio == 0.25
    assert traces.capture_content is True
    with pytest.raises(ConfigError) as unknown:
        parse_config("telemetry: {traces: {endpoint: 'http://c', colour: blue}}")
    assert "$.telemetry.traces" in str(unknown.value)
    with pytest.raises(ConfigError) as ratio:
        parse_config("telemetry: {traces: {sample_ratio: 2}}")
    assert "sample_ratio" in str(ratio.value)
    with pytest.raises(ConfigError):
        parse_config("telemetry: {traces: {endpoint: 'collector:4318'}}")
    with pytest.raises(ConfigError):
        parse_config("telemetry: {traces: {protocol: http/json}}")
