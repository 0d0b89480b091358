"""A small OTLP trace receiver on 127.0.0.1 for end-to-end tests: OTLP/HTTP (``POST
/v1/traces``, protobuf) served by aiohttp, and OTLP/gRPC (the ``TraceService``) served by
``grpc.aio``, both decoding ``ExportTraceServiceRequest`` with the official
``opentelemetry-proto`` package. Every span received is kept, flattened, in ``spans``; the
headers of every HTTP export in ``headers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import grpc
from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

SERVER, CLIENT, INTERNAL = 2, 3, 1  # Span.SpanKind values
STATUS_ERROR = 2  # Status.StatusCode.STATUS_CODE_ERROR


class ReceivedSpan(NamedTuple):
    """One span as received: ids in lowercase hex ("" for a root's parent)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    status: int
    resource: dict[str, Any]
    scope: str
    schema_url: str


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind is not None else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


class OtlpReceiver:
    """The received spans, and the servers that receive them (see the module docstring)."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.headers: list[dict[str, str]] = []
        self._arrived = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/traces", self._http)
        return app

    async def start_grpc(self) -> tuple[grpc.aio.Server, int]:
        """A gRPC receiver on a free port of 127.0.0.1; stop it with ``server.stop(None)``."""
        server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(self), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    async def _http(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf", request.content_type
        export = trace_service_pb2.ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        self.headers.append(dict(request.headers))
        self.collect(export)
        answer = trace_service_pb2.ExportTraceServiceResponse()
        return web.Response(body=answer.SerializeToString(), content_type="application/x-protobuf")

    def collect(self, export: trace_service_pb2.ExportTraceServiceRequest) -> None:
        for resource_spans in export.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            status=span.status.code,
                            resource=resource,
                            scope=scope_spans.scope.name,
                            schema_url=scope_spans.schema_url,
                        )
                    )
        self._arrived.set()

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        """The spans received so far of one trace."""
        return [span for span in self.spans if span.trace_id == trace_id]

    async def wait_for(
        self, trace_id: str, done: Callable[[list[ReceivedSpan]], bool], within: float = 10.0
    ) -> list[ReceivedSpan]:
        """The spans of ``trace_id`` once ``done`` says they are all there; fails the test with
        what did arrive when ``within`` seconds pass first."""
        deadline = time.monotonic() + within
        while not done(spans := self.trace(trace_id)):
            left = deadline - time.monotonic()
            if left <= 0:
                names = [span.name for span in spans]
                raise AssertionError(f"trace {trace_id} incomplete after {within} s: {names}")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), min(left, 0.2))
        return spans


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self._receiver.collect(request)
        return trace_service_pb2.ExportTraceServiceResponse()
