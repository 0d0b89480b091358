"""orq router completions — ``POST /v2/router/completions`` — legacy completions plus controls.

The request is OpenAI's legacy completion (decoded, checked and answered exactly as
:mod:`proxy.dialects.openai_completions` does: ``prompt`` string or one-element list, ``echo``,
penalties, ``seed``, ``stop`` up to 4, ``n``, ``user``, ``stream``, ``stream_options``), plus
orq's gateway controls. Each control may be given at the top level or, as older orq clients do,
inside ``orq``; when both are given the top-level one wins. Every control is validated with orq's
limits (a 400 naming the field, e.g. ``retry.count``) and carried on ``Call.options`` for the
plugins that honour it:

- ``retry {count 1-5 (3), on_codes [400-599]}`` → ``options.retry``;
- ``fallbacks [{model}]`` → ``options.fallbacks``, in order;
- ``cache {type: exact_match (the default: the only type), ttl 1-259200 s (1800)}`` →
  ``options.cache``;
- ``load_balancer {type: weight_based (the default: the only type), models [{model, weight
  0.001-1 (0.5)}]}``, or as older orq clients send it the ``models`` list alone →
  ``options.load_balancer``;
- ``timeout {call_timeout}`` (milliseconds) → ``options.timeout`` (seconds);
- ``identity`` (or its older name ``contact``), ``thread``, ``name`` →
  ``options.metadata["identity" | "thread" | "name"]`` (for logs, never metric labels);
- ``inputs {name: value}`` → each ``{{name}}`` in the prompt is replaced, here in the dialect;
- ``security {mask: [input | output | system | all]}`` → ``options.mask`` (else a 400);
- ``plugins [{id: pii_redaction, entities, on_failure: block | passthrough, language: en | nl,
  threshold 0-1}]`` → ``options.pii`` (one dict per entry, every key present: ``entities``,
  ``language`` and ``threshold`` null when not given);
- ``knowledge_bases`` → a 400: no knowledge base can be configured on this gateway.

A ``{{name}}`` with no matching input is left as written; non-string inputs are rendered as
JSON (``true``, ``3.5``). Unknown fields inside ``orq`` are ignored (orq adds controls over time);
unknown top-level fields are passed to the provider, as in the legacy dialect.

Response: ``text_completion`` with ``choices[].text`` and usage with
``prompt_tokens_details.cached_tokens`` and ``completion_tokens_details.reasoning_tokens``;
streams are ``data: {text_completion}`` frames ending with ``data: [DONE]``. Errors are
``{"error": {"code", "message", "doc_url"}}`` (``doc_url`` points at orq's reference for this
endpoint, which documents the request the client sent), in-band as one ``data:`` frame.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from proxy.core.canonical import (
    CacheOptions,
    Call,
    GatewayOptions,
    Message,
    RetryOptions,
    Timings,
    WeightedTarget,
)
from proxy.core.errors import BadRequest, GatewayError
from proxy.core.reply import Reply
from proxy.dialects.base import bad_request
from proxy.dialects.openai_chat import decode_extra
from proxy.dialects.openai_completions import (
    LEGACY_FIELDS,
    LEGACY_PARAMS,
    CompletionEnvelope,
    CompletionStreamEncoder,
    encode_completion,
    legacy_params,
    legacy_prompt,
)

DOC_URL = "https://docs.orq.ai/reference/completions/create-completion"
MAX_CACHE_TTL = 259_200

_PLACEHOLDER = re.compile(r"\{\{\s*([^{}\s]+)\s*\}\}")
_NonEmpty = Annotated[str, Meta(min_length=1)]
_Status = Annotated[int, Meta(ge=400, le=599)]


class _Retry(Struct, forbid_unknown_fields=True):
    count: Annotated[int, Meta(ge=1, le=5)] = 3
    on_codes: list[_Status] = msgspec.field(default_factory=lambda: [429, 500, 502, 503, 504])


class _Fallback(Struct, forbid_unknown_fields=True):
    model: _NonEmpty


class _Cache(Struct, forbid_unknown_fields=True):
    type: Literal["exact_match"] = "exact_match"
    ttl: Annotated[int, Meta(ge=1, le=MAX_CACHE_TTL)] = 1800


class _Weighted(Struct, forbid_unknown_fields=True):
    model: _NonEmpty
    weight: Annotated[float, Meta(ge=0.001, le=1)] = 0.5


class _LoadBalancer(Struct, forbid_unknown_fields=True):
    models: Annotated[list[_Weighted], Meta(min_length=1)]
    type: Literal["weight_based"] = "weight_based"


class _Timeout(Struct, forbid_unknown_fields=True):
    call_timeout: Annotated[float, Meta(gt=0)]


class _Identity(Struct, omit_defaults=True):
    id: _NonEmpty
    display_name: str | None = None
    email: str | None = None
    metadata: list[dict[str, Any]] | dict[str, Any] | None = None
    tags: list[str] | None = None


class _Thread(Struct, omit_defaults=True):
    id: _NonEmpty
    tags: list[str] | None = None


class _Security(Struct, forbid_unknown_fields=True):
    mask: list[Literal["input", "output", "system", "all"]] = msgspec.field(default_factory=list)


class _PiiRedaction(Struct, forbid_unknown_fields=True):
    id: Literal["pii_redaction"]
    entities: list[_NonEmpty] | None = None
    on_failure: Literal["block", "passthrough"] = "block"
    language: Literal["en", "nl"] | None = None
    threshold: Annotated[float, Meta(ge=0, le=1)] | None = None


class _Controls(Struct):
    """orq's gateway controls, as they appear at the top level and inside ``orq``."""

    name: str | None = None
    retry: _Retry | None = None
    fallbacks: list[_Fallback] | None = None
    cache: _Cache | None = None
    load_balancer: _LoadBalancer | Annotated[list[_Weighted], Meta(min_length=1)] | None = None
    timeout: _Timeout | None = None
    identity: _Identity | None = None
    contact: _Identity | None = None
    thread: _Thread | None = None
    inputs: dict[str, Any] | None = None
    security: _Security | None = None
    plugins: list[_PiiRedaction] | None = None
    knowledge_bases: list[Any] | None = None


class _Envelope(CompletionEnvelope):
    """The legacy envelope plus ``orq`` (top-level controls are decoded as :class:`_Controls`)."""

    orq: _Controls | None = None


_CONTROLS = tuple(_Controls.__struct_fields__)
_KNOWN_FIELDS = LEGACY_FIELDS | frozenset(_CONTROLS) | frozenset(_Envelope.__struct_fields__)
_ENVELOPE = msgspec.json.Decoder(_Envelope)
_TOP_LEVEL = msgspec.json.Decoder(_Controls)
_ENCODER = msgspec.json.Encoder()


class _ErrorBody(Struct):
    code: str
    message: str
    doc_url: str


class _ErrorEnvelope(Struct):
    error: _ErrorBody


def error_json(error: GatewayError) -> bytes:
    """``{"error": {code, message, doc_url}}``: orq's error body."""
    return _ENCODER.encode(
        _ErrorEnvelope(_ErrorBody(code=error.code, message=error.message, doc_url=DOC_URL))
    )


def _merged(top: _Controls, nested: _Controls | None) -> tuple[_Controls, dict[str, str]]:
    """The effective controls (top level over ``orq``) and the path each one came from."""
    if nested is None:
        return top, {field: field for field in _CONTROLS}
    values: dict[str, Any] = {}
    paths: dict[str, str] = {}
    for field in _CONTROLS:
        value = getattr(top, field)
        if value is not None:
            values[field], paths[field] = value, field
        else:
            values[field], paths[field] = getattr(nested, field), f"orq.{field}"
    return _Controls(**values), paths


def _fill_inputs(prompt: str, inputs: dict[str, Any] | None) -> str:
    """``prompt`` with each ``{{name}}`` that has an input replaced by its value."""
    if not inputs or "{{" not in prompt:
        return prompt

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in inputs:
            return match.group(0)
        found = inputs[name]
        return found if isinstance(found, str) else _ENCODER.encode(found).decode()

    return _PLACEHOLDER.sub(value, prompt)


def _options(controls: _Controls, paths: dict[str, str]) -> GatewayOptions:
    """The typed gateway options for validated controls. Raises :class:`BadRequest`."""
    if controls.knowledge_bases:
        field = paths["knowledge_bases"]
        raise BadRequest(
            f"{field}: no knowledge base is configured on this gateway, so knowledge-base "
            "retrieval cannot be done; remove knowledge_bases from the request",
            param=field,
            code="knowledge_base_not_configured",
        )
    metadata: dict[str, Any] = {}
    identity = controls.identity or controls.contact
    if identity is not None:
        metadata["identity"] = msgspec.to_builtins(identity)
    if controls.thread is not None:
        metadata["thread"] = msgspec.to_builtins(controls.thread)
    if controls.name:
        metadata["name"] = controls.name
    retry, cache, balancer = controls.retry, controls.cache, controls.load_balancer
    if isinstance(balancer, list):  # orq's older form: the weighted models alone
        balancer = _LoadBalancer(models=balancer)
    return GatewayOptions(
        fallbacks=[f.model for f in controls.fallbacks] if controls.fallbacks else None,
        retry=RetryOptions(count=retry.count, on_codes=tuple(retry.on_codes)) if retry else None,
        cache=CacheOptions(ttl=cache.ttl, type=cache.type) if cache else None,
        load_balancer=[WeightedTarget(model=m.model, weight=m.weight) for m in balancer.models]
        if balancer
        else None,
        timeout=controls.timeout.call_timeout / 1000.0 if controls.timeout else None,
        mask=frozenset(controls.security.mask) if controls.security else None,
        pii=[msgspec.to_builtins(p) for p in controls.plugins] if controls.plugins else None,
        metadata=metadata or None,
    )


class OrqDialect:
    """See the module docstring."""

    name = "orq"
    paths = ("/v2/router/completions",)

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`."""
        try:
            envelope = _ENVELOPE.decode(body)
            top = _TOP_LEVEL.decode(body)
            params = LEGACY_PARAMS.decode(body)
            extra = decode_extra(body, _KNOWN_FIELDS)
        except msgspec.DecodeError as exc:
            raise bad_request(exc) from None
        controls, paths = _merged(top, envelope.orq)
        options = _options(controls, paths)
        text = _fill_inputs(legacy_prompt(envelope), controls.inputs)
        stream_options = envelope.stream_options
        return Call(
            request_id=request_id,
            dialect=self.name,
            model=envelope.model,
            messages=[Message(role="user", content=text)],
            stream=bool(envelope.stream),
            include_usage=stream_options is not None and stream_options.include_usage,
            params=legacy_params(params, envelope.logprobs),
            extra=extra,
            options=options,
            dialect_state={"echo": text} if envelope.echo else {},
            client_headers=headers,
            timings=Timings(start=start),
        )

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_response`."""
        return encode_completion(call, reply)

    def stream_encoder(self, call: Call, reply: Reply) -> CompletionStreamEncoder:
        """See :meth:`proxy.dialects.base.Dialect.stream_encoder`."""
        return CompletionStreamEncoder(
            include_usage=call.include_usage,
            echo=call.dialect_state.get("echo", ""),
            error_body=error_json,
        )

    def encode_error(self, error: GatewayError, request_id: str) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_error`."""
        return error_json(error)

    def response_headers(self, call: Call, reply: Reply) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.response_headers`: none beyond the common."""
        return {}

    def error_status(self, error: GatewayError) -> int:
        """See :meth:`proxy.dialects.base.Dialect.error_status`: the error's own."""
        return error.status

    def error_headers(self, error: GatewayError, request_id: str) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.error_headers`: none."""
        return {}
