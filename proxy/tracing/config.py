"""The ``telemetry.traces`` section: where spans go and what they hold.

Absent (the default), tracing is off. Present, it is on unless ``enabled: false``:

- ``endpoint``: the OTLP receiver. For ``http/protobuf`` a base URL (``http://collector:4318``,
  ``/v1/traces`` appended) or the full traces URL (kept when it already ends with
  ``/v1/traces``); for ``grpc`` the ``http://host:port`` of the receiver. Unset, the standard
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` variables apply, then
  the OTLP default (``http://localhost:4318`` or ``:4317``).
- ``protocol``: ``http/protobuf`` or ``grpc``; unset, ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` /
  ``OTEL_EXPORTER_OTLP_PROTOCOL``, then ``http/protobuf``.
- ``headers``: sent with every export (a back end's API key: write ``${VAR}``); unset,
  ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` / ``OTEL_EXPORTER_OTLP_HEADERS``. The values are
  secrets to the gateway's redactor.
- ``sample_ratio``: the share of new traces kept (0 to 1); a caller's sampled flag is obeyed
  (parent-based sampling), so a trace a caller keeps is kept whole.
- ``service_name``: the ``service.name`` resource attribute; unset, ``OTEL_SERVICE_NAME``, then
  ``crossway``. ``resource_attributes`` are added to the resource (over
  ``OTEL_RESOURCE_ATTRIBUTES``).
- ``capture_content``: put message content on the upstream attempt spans
  (``gen_ai.input.messages`` …) — off by default; when on, what is recorded is what the
  upstream was sent and what it answered, after the masking plugin replaced what it masks.
- ``export_timeout``: seconds one export may take (then the batch is dropped, and logged).

The attempt span's context goes to each upstream in ``traceparent``/``tracestate`` unless the
provider says ``propagate_trace: false`` (:class:`~proxy.providers.base.ProviderConfig`).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

Protocol = Literal["http/protobuf", "grpc"]


class TracesConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """``telemetry.traces`` (see the module docstring)."""

    enabled: bool = True
    endpoint: Annotated[str, Meta(pattern=r"^https?://[^\s/]+(/\S*)?$")] | None = None
    protocol: Protocol | None = None
    headers: dict[str, str] | None = None
    sample_ratio: Annotated[float, Meta(ge=0, le=1)] = 1.0
    service_name: Annotated[str, Meta(min_length=1, max_length=256)] | None = None
    resource_attributes: dict[str, str] = msgspec.field(default_factory=dict)
    capture_content: bool = False
    export_timeout: Annotated[float, Meta(gt=0, le=60)] = 10.0
