"""A request log record: what the request logs keep of one request, and how it is built.

The metadata are the spend ledger's (who, which model and deployment, status, tokens, cost) plus
the request's timing — ``duration_ms`` in all, ``upstream_ms`` waiting on upstreams,
``overhead_ms`` the gateway's own (what ``x-crossway-overhead-ms`` said at the end), ``ttft_ms``
to the first streamed token — and the W3C trace id the client sent (``traceparent``), if any.
``request`` / ``response`` are the payloads as JSON text (None under ``store: metadata``, or
when the request never reached the point where they are taken: see
:mod:`proxy.request_logs.capture`), each at most ``max_payload_bytes`` (``truncated`` then says
that one was cut, and it is no longer valid JSON). ``id`` is unique per record (replaying a
journal never duplicates one); ``request_id`` is the id the client saw (``x-request-id``), the
one the spend ledger's record of the same request carries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from proxy.core.plugin import FinishedRequest
from proxy.core.redact import MASK, Redactor
from proxy.pii.secrets import find_secrets
from proxy.pii.text import TextView
from proxy.request_logs.config import StoreMode

_MAX_TEXT = 256
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


class RequestLogRecord(msgspec.Struct, gc=False, omit_defaults=False):
    """One request in the request logs (see the module docstring). None: not known."""

    id: str
    request_id: str
    time: float
    store: str
    key_id: str | None
    key_alias: str | None
    team: str | None
    dialect: str
    model: str | None
    provider: str | None
    upstream_model: str | None
    stream: bool
    status: int
    error_code: str | None
    duration_ms: float
    upstream_ms: float | None
    overhead_ms: float
    ttft_ms: float | None
    input_tokens: int | None
    output_tokens: int | None
    cost_nanos: int | None
    cache: str | None
    attempts: int
    trace_id: str | None
    request: str | None = None
    response: str | None = None
    truncated: bool = False


def metadata_record(
    finished: FinishedRequest, record_id: str, store: StoreMode
) -> RequestLogRecord:
    """The metadata of ``finished`` as a record (no payload yet)."""
    call = finished.call
    duration_ms = _ms(finished.duration)
    usage = finished.usage
    upstream_ms = ttft_ms = cost = cache = trace_id = model = None
    stream = False
    overhead_ms = duration_ms
    if call is not None:
        timings = call.timings
        upstream_ms = _ms(timings.upstream_wait)
        overhead_ms = max(_ms(finished.duration - timings.upstream_wait), 0.0)
        if timings.first_token is not None:
            ttft_ms = _ms(timings.first_token)
        accounting = call.accounting
        cost, cache = accounting.cost_nanos, accounting.cache
        if accounting.usage is not None:
            usage = accounting.usage
        stream = call.stream
        model = call.model[:_MAX_TEXT]
        trace_id = trace_id_of(call.client_headers.get("traceparent"))
    principal = finished.principal
    upstream_model = finished.upstream_model
    return RequestLogRecord(
        id=record_id,
        request_id=finished.request_id[:_MAX_TEXT],
        time=finished.ended_at,
        store=store,
        key_id=principal.key_id,
        key_alias=principal.key_alias,
        team=principal.team,
        dialect=finished.dialect,
        model=model,
        provider=finished.provider,
        upstream_model=None if upstream_model is None else upstream_model[:_MAX_TEXT],
        stream=stream,
        status=finished.status,
        error_code=finished.error_code,
        duration_ms=duration_ms,
        upstream_ms=upstream_ms,
        overhead_ms=overhead_ms,
        ttft_ms=ttft_ms,
        input_tokens=None if usage is None else usage.prompt_tokens,
        output_tokens=None if usage is None else usage.completion_tokens,
        cost_nanos=cost,
        cache=cache,
        attempts=finished.attempts,
        trace_id=trace_id,
    )


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a W3C ``traceparent`` header (None when absent or malformed, or the
    all-zero id the specification forbids)."""
    if not traceparent:
        return None
    match = _TRACEPARENT.match(traceparent.strip().lower())
    if match is None or match.group(1) == "0" * 32:
        return None
    return match.group(1)


def payload_text(
    value: Any, redactor: Redactor, limit: int, scrub: Callable[[str], str] | None = None
) -> tuple[str, bool]:
    """``value`` (JSON-ready builtins) as JSON text with every secret in its strings redacted
    (and ``scrub`` applied first, when given: the masking plugin's output scan), cut to
    ``limit`` bytes; and whether it was cut.

    The secrets are found in the JSON text at once (one pass of each detector instead of one per
    string): a secret never holds a quote or a backslash that JSON would leave bare, so a
    replacement stays inside its string. Where one did not — a private key block without its
    END line runs to the end of the text — the text no longer decodes, and the strings are
    redacted one by one instead (:func:`redact_secrets`). Credential-named fields are not blanked
    here: the caller walks the parts that may have them (the parameters) with the redactor's
    :meth:`~proxy.core.redact.Redactor.value`."""
    text = _ENCODER.encode(value).decode()
    if scrub is not None:
        text = scrub(text)
    text = _without_secrets(redactor.text(text))
    try:
        _DECODER.decode(text)
    except msgspec.DecodeError:
        text = _ENCODER.encode(redact_secrets(value, redactor, scrub)).decode()
    data = text.encode()
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


def redact_secrets(
    value: Any, redactor: Redactor, scrub: Callable[[str], str] | None = None
) -> Any:
    """``value`` with every secret replaced by ``[REDACTED]``: the configured credentials and
    the key shapes the log redactor knows (:class:`~proxy.core.redact.Redactor`, which also
    blanks the values of credential-named fields), then whatever the PII ``secret`` detector
    finds in a string (:func:`~proxy.pii.secrets.find_secrets`: tokens, private keys); each
    string ``scrub``-bed first when given."""
    if scrub is not None:
        value = _each_string(value, scrub)
    return _each_string(redactor.value(value), _without_secrets)


def _each_string(value: Any, rewrite: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return rewrite(value)
    if isinstance(value, dict):
        return {key: _each_string(item, rewrite) for key, item in value.items()}
    if isinstance(value, list):
        return [_each_string(item, rewrite) for item in value]
    return value


def _without_secrets(text: str) -> str:
    spans = find_secrets(TextView(text))
    if not spans:
        return text
    parts: list[str] = []
    at = 0
    for start, end in sorted(spans):
        if start < at:  # overlapping spans: the earlier one already covers it
            start = at
        if start >= end:
            continue
        parts.append(text[at:start])
        parts.append(MASK)
        at = end
    parts.append(text[at:])
    return "".join(parts)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
