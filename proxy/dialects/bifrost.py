"""Bifrost text completions — ``POST /v1/text/completions`` — served through chat models.

Request: ``model`` as ``provider/model`` (or the legacy pair ``provider`` + ``model``), ``text``
(the prompt, sent as one user message), ``max_tokens``, ``temperature``, ``stop_sequences``,
``fallbacks`` (``provider/model`` strings, carried on ``Call.options.fallbacks`` for the fallback
plugin) and ``stream``. Generation parameters the gateway models (``top_p``, penalties, ``user``,
``seed``, ``tools`` …) are decoded and bounds-checked like OpenAI chat's; any other field
(``top_k`` …) is passed to the provider verbatim. Credentials in the body are dropped. Plain
aliases are refused: Bifrost addresses models only as ``provider/model``.

Bad requests answer with Bifrost's four exact messages where they apply ("Model is required",
"Model must be in the format of 'provider/model'", "Text is required for text completion",
"Fallback must be in the format of 'provider/model'"); other invalid fields name themselves.
Every error is ``{"is_bifrost_error": true, "status_code", "error": {type, code, message,
param}}`` with the error's own HTTP status.

Response: a ``BifrostResponse`` (``object: "text.completion"``) whose text is in
``choices[].message.content`` (omitted, not null, on a tool-call-only message, as Bifrost's
schema has no null content) with the answer's ``annotations`` (OpenAI's url citations, which
Bifrost's message shares), and ``extra_fields``: ``provider`` (the configured name of the
provider that served, after any fallback — Bifrost's schema enumerates its own provider names,
so schema-strict clients need providers named after them), ``model_params`` (the sampling
parameters used), ``latency`` (seconds since the request arrived) and ``chat_history`` (the
prompt, then the answer). Header ``x-bf-retries``: upstream attempts beyond the first.

Streaming: ``data: {json}`` frames, each a ``BifrostResponse`` with ``object:
"text.completion.chunk"`` whose choices carry ``delta {role, content, thought, refusal,
tool_calls}`` (Bifrost's stream choice) and ``extra_fields {provider, model_params, latency}``;
usage rides on the last frame; ``data: [DONE]`` ends the stream. A failure mid-stream is one
``data: {BifrostError}`` frame and no ``[DONE]``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, Struct, UnsetType

from proxy.core.canonical import Call, GatewayOptions, Message, Params, Timings, ToolCall
from proxy.core.errors import BadRequest, GatewayError
from proxy.core.reply import Chunk, Delta, Reply, ToolCallDelta
from proxy.core.sse import encode_data_frame
from proxy.dialects.base import bad_request
from proxy.dialects.openai_chat import DONE_FRAME, OpenAIUsage, decode_extra

MODEL_REQUIRED = "Model is required"
MODEL_FORMAT = "Model must be in the format of 'provider/model'"
TEXT_REQUIRED = "Text is required for text completion"
FALLBACK_FORMAT = "Fallback must be in the format of 'provider/model'"


class _Envelope(Struct):
    model: str | None = None
    provider: str | None = None
    text: str | None = None
    stop_sequences: list[str] | None = None
    fallbacks: list[str] | None = None
    stream: bool | None = False


_T = TypeVar("_T")
_KNOWN_FIELDS = frozenset(_Envelope.__struct_fields__) | frozenset(Params.__struct_fields__)
_ENVELOPE = msgspec.json.Decoder(_Envelope)
_PARAMS = msgspec.json.Decoder(Params)
_ENCODER = msgspec.json.Encoder()


class _ModelParams(Struct, omit_defaults=True):
    """Bifrost's ``ModelParameters``: the sampling parameters a call was made with."""

    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    max_tokens: int | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    presence_penalty: float | UnsetType = UNSET
    frequency_penalty: float | UnsetType = UNSET

    @classmethod
    def of(cls, params: Params) -> _ModelParams:
        """The parameters given (an explicit null counts as not given)."""
        stop = params.stop
        return cls(
            temperature=_given(params.temperature),
            top_p=_given(params.top_p),
            max_tokens=_given(params.max_tokens),
            stop_sequences=[stop] if isinstance(stop, str) else (stop or UNSET),
            presence_penalty=_given(params.presence_penalty),
            frequency_penalty=_given(params.frequency_penalty),
        )


def _given(value: _T | UnsetType | None) -> _T | UnsetType:
    return UNSET if value is None else value


class _Message(Struct, omit_defaults=True):
    """Bifrost's ``BifrostMessage`` (content omitted rather than null)."""

    role: str
    content: str | UnsetType = UNSET
    tool_calls: list[ToolCall] | UnsetType = UNSET
    refusal: str | UnsetType = UNSET
    thought: str | UnsetType = UNSET
    annotations: list[dict[str, Any]] | UnsetType = UNSET  # OpenAI's url citations, as they are

    @classmethod
    def of(cls, message: Message) -> _Message:
        text = message.text()
        return cls(
            role=message.role,
            content=text if text or not message.tool_calls else UNSET,
            tool_calls=message.tool_calls or UNSET,
            refusal=message.refusal or UNSET,
            thought=message.reasoning_content or UNSET,
            annotations=message.annotations or UNSET,
        )


class _Choice(Struct, omit_defaults=True):
    index: int
    message: _Message
    finish_reason: str | None = None


class _Delta(Struct, omit_defaults=True):
    """Bifrost's ``BifrostStreamDelta`` (empty strings and nulls omitted)."""

    role: str | UnsetType = UNSET
    content: str | UnsetType = UNSET
    thought: str | UnsetType = UNSET
    refusal: str | UnsetType = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET

    @classmethod
    def of(cls, delta: Delta) -> _Delta:
        return cls(
            role=delta.role,
            content=delta.content or UNSET,
            thought=delta.reasoning_content or UNSET,
            refusal=delta.refusal or UNSET,
            tool_calls=delta.tool_calls or UNSET,
        )


_EMPTY_DELTA = _Delta()


class _StreamChoice(Struct, omit_defaults=True):
    index: int
    delta: _Delta
    finish_reason: str | None = None


class _ExtraFields(Struct, omit_defaults=True):
    provider: str
    model_params: _ModelParams
    latency: float
    chat_history: list[_Message] | UnsetType = UNSET


class _Response(Struct, omit_defaults=True):
    id: str
    object: str
    model: str
    created: int
    choices: list[_Choice]
    extra_fields: _ExtraFields
    usage: OpenAIUsage | None = None
    system_fingerprint: str | UnsetType | None = UNSET


class _Chunk(Struct, omit_defaults=True):
    id: str
    object: str
    model: str
    created: int
    choices: list[_StreamChoice]
    extra_fields: _ExtraFields
    usage: OpenAIUsage | None = None
    system_fingerprint: str | UnsetType | None = UNSET


class _ErrorField(Struct, omit_defaults=True):
    message: str
    type: str | None = None
    code: str | None = None
    param: str | None = None


class _Error(Struct):
    is_bifrost_error: bool
    status_code: int
    error: _ErrorField


def error_json(error: GatewayError) -> bytes:
    """``{"is_bifrost_error": true, "status_code", "error": {...}}``: Bifrost's error body."""
    return _ENCODER.encode(
        _Error(
            is_bifrost_error=True,
            status_code=error.status,
            error=_ErrorField(
                message=error.message, type=error.type, code=error.code, param=error.param
            ),
        )
    )


def _is_provider_model(name: str) -> bool:
    """Whether ``name`` is ``provider/model`` with both parts non-empty."""
    provider, _, model = name.partition("/")
    return bool(provider) and bool(model)


def _model(envelope: _Envelope) -> str:
    """The ``provider/model`` a request addresses. Raises :class:`BadRequest` otherwise."""
    model, provider = envelope.model, envelope.provider
    if not model:
        raise BadRequest(MODEL_REQUIRED, param="model")
    if provider:
        return model if model.startswith(f"{provider}/") else f"{provider}/{model}"
    if not _is_provider_model(model):
        raise BadRequest(MODEL_FORMAT, param="model")
    return model


def _fallbacks(fallbacks: list[str] | None) -> list[str] | None:
    if not fallbacks:
        return None
    for index, target in enumerate(fallbacks):
        if not _is_provider_model(target):
            raise BadRequest(FALLBACK_FORMAT, param=f"fallbacks[{index}]")
    return fallbacks


class BifrostDialect:
    """See the module docstring."""

    name = "bifrost"
    paths = ("/v1/text/completions",)

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`."""
        try:
            envelope = _ENVELOPE.decode(body)
            params = _PARAMS.decode(body)
            extra = decode_extra(body, _KNOWN_FIELDS)
        except msgspec.DecodeError as exc:
            raise bad_request(exc) from None
        model = _model(envelope)
        if not envelope.text:
            raise BadRequest(TEXT_REQUIRED, param="text")
        if envelope.stop_sequences:
            params.stop = envelope.stop_sequences
        return Call(
            request_id=request_id,
            dialect=self.name,
            model=model,
            messages=[Message(role="user", content=envelope.text)],
            stream=bool(envelope.stream),
            include_usage=True,
            params=params,
            extra=extra,
            options=GatewayOptions(fallbacks=_fallbacks(envelope.fallbacks)),
            client_headers=headers,
            timings=Timings(start=start),
        )

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_response`."""
        response = reply.response
        assert response is not None
        choices = [
            _Choice(
                index=choice.index,
                message=_Message.of(choice.message),
                finish_reason=choice.finish_reason,
            )
            for choice in response.choices
        ]
        history = [_Message.of(message) for message in call.messages]
        if choices:
            history.append(choices[0].message)
        return _ENCODER.encode(
            _Response(
                id=response.id,
                object="text.completion",
                model=response.model,
                created=response.created or int(time.time()),
                choices=choices,
                extra_fields=_ExtraFields(
                    provider=reply.provider,
                    model_params=_ModelParams.of(call.params),
                    latency=time.perf_counter() - call.timings.start,
                    chat_history=history,
                ),
                usage=OpenAIUsage.of(response.usage) if response.usage is not None else None,
                system_fingerprint=response.system_fingerprint,
            )
        )

    def stream_encoder(self, call: Call, reply: Reply) -> BifrostStreamEncoder:
        """See :meth:`proxy.dialects.base.Dialect.stream_encoder`."""
        return BifrostStreamEncoder(
            provider=reply.provider,
            model_params=_ModelParams.of(call.params),
            start=call.timings.start,
        )

    def encode_error(self, error: GatewayError, request_id: str) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_error`."""
        return error_json(error)

    def response_headers(self, call: Call, reply: Reply) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.response_headers`: ``x-bf-retries``."""
        return {"x-bf-retries": str(max(reply.attempts - 1, 0))}

    def error_status(self, error: GatewayError) -> int:
        """See :meth:`proxy.dialects.base.Dialect.error_status`: the error's own."""
        return error.status

    def error_headers(self, error: GatewayError, request_id: str) -> dict[str, str]:
        """See :meth:`proxy.dialects.base.Dialect.error_headers`: ``x-bf-retries``."""
        return {"x-bf-retries": str(max(error.attempts - 1, 0))}


class BifrostStreamEncoder:
    """``data: {BifrostResponse chunk}`` frames, ``data: [DONE]`` at the end (module docstring)."""

    __slots__ = ("_created", "_model_params", "_provider", "_start")
    keepalive = None

    def __init__(self, *, provider: str, model_params: _ModelParams, start: float) -> None:
        self._provider = provider
        self._model_params = model_params
        self._start = start
        self._created = int(time.time())

    def chunk(self, chunk: Chunk) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.chunk`."""
        choices = [
            _StreamChoice(
                index=choice.index,
                delta=_Delta.of(choice.delta),
                finish_reason=choice.finish_reason,
            )
            for choice in chunk.choices
        ]
        choices = [c for c in choices if c.finish_reason is not None or c.delta != _EMPTY_DELTA]
        if not choices and chunk.usage is None:
            return b""
        return encode_data_frame(
            _ENCODER.encode(
                _Chunk(
                    id=chunk.id,
                    object="text.completion.chunk",
                    model=chunk.model,
                    created=chunk.created or self._created,
                    choices=choices,
                    extra_fields=_ExtraFields(
                        provider=self._provider,
                        model_params=self._model_params,
                        latency=time.perf_counter() - self._start,
                    ),
                    usage=OpenAIUsage.of(chunk.usage) if chunk.usage is not None else None,
                    system_fingerprint=chunk.system_fingerprint,
                )
            )
        )

    def end(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.end`."""
        return DONE_FRAME

    def ping(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.ping` (unused: no keep-alive)."""
        return b""

    def error(self, error: GatewayError) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.error`."""
        return encode_data_frame(error_json(error))
