"""OpenAI chat completions — ``POST /v1/chat/completions`` — the lingua franca.

The canonical types are shaped after this format, so decoding a request is one typed msgspec pass
over the body (:class:`_Body`: the envelope and every generation parameter, no other field). A body
with fields the gateway does not model fails that pass and is decoded again in three (the envelope,
the parameters, the other fields kept raw and passed to the provider), which also reports a
malformed body exactly as they always did. Credentials a client might smuggle in the body
(``api_key``, ``api_base``, ``base_url``) are dropped: a client never chooses where or as whom the
gateway connects.

Bifrost's chat route is this same format plus ``fallbacks``: a list of models (``provider/model``
or an alias) to try in order when the primary fails. It is accepted here, carried on
``Call.options.fallbacks`` for the fallback plugin, and never sent upstream. Bifrost's
``extra_fields`` are deliberately *not* added to chat responses: OpenAI SDKs ignore unknown
fields, but schema-strict OpenAI clients reject them, and this route must stay a drop-in for
OpenAI first. Bifrost clients that need ``extra_fields`` use ``/v1/text/completions``; the serving
provider is in the ``x-crossway-provider`` header on every route.

``store`` and ``metadata`` are the gateway's, never sent upstream: ``store: true`` keeps the
completion in the gateway's stored chat completions (:data:`STORE`; the routes that read them are
``proxy.http.stored_chat_routes``), with ``metadata`` (OpenAI's bounds: at most 16 pairs, keys of
at most 64 characters, values of 512; a 400 naming the field beyond). ``max_tokens`` and
``max_completion_tokens`` may be 0, as OpenAI's schema allows (:class:`ChatParams`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from proxy.core.canonical import (
    MAX_TOKENS_LIMIT,
    Call,
    GatewayOptions,
    Message,
    Params,
    Timings,
    Usage,
)
from proxy.core.errors import BadRequest, GatewayError
from proxy.core.reply import Choice, Chunk, ChunkChoice, RawFrames, Reply
from proxy.core.sse import encode_data_frame
from proxy.dialects.base import bad_request, invalid
from proxy.dialects.passthrough import merged, without_usage

NEVER_FORWARDED = frozenset({"api_key", "api_base", "base_url"})


class _StreamOptions(Struct):
    include_usage: bool = False


class ChatParams(Params, omit_defaults=True):
    """:class:`~proxy.core.canonical.Params` with OpenAI's chat bounds where they are wider than
    the canonical ones: ``max_tokens`` and ``max_completion_tokens`` may be 0, as OpenAI's schema
    allows (no minimum). Same fields in the same order, so ``astuple`` gives ``Params``'s."""

    max_tokens: Annotated[int, Meta(ge=0, le=MAX_TOKENS_LIMIT)] | UnsetType | None = UNSET
    max_completion_tokens: Annotated[int, Meta(ge=0, le=MAX_TOKENS_LIMIT)] | UnsetType | None = (
        UNSET
    )


METADATA_KEY_LENGTH = 64
Metadata = Annotated[dict[str, Annotated[str, Meta(max_length=512)]], Meta(max_length=16)]
"""OpenAI's ``metadata``: at most 16 pairs, values of at most 512 characters (keys of at most
:data:`METADATA_KEY_LENGTH`, checked after decoding so that the 400 names the field)."""


class _Envelope(Struct):
    model: str
    messages: Annotated[list[Message], Meta(min_length=1)]
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    fallbacks: list[Annotated[str, Meta(min_length=1)]] | None = None
    store: bool | None = False
    metadata: Metadata | None = None


class _Body(ChatParams, kw_only=True, forbid_unknown_fields=True):
    """A whole request without unmodelled fields, in one pass: :class:`_Envelope`'s fields
    (same types and defaults) and :class:`ChatParams`'s."""

    model: str
    messages: Annotated[list[Message], Meta(min_length=1)]
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    fallbacks: list[Annotated[str, Meta(min_length=1)]] | None = None
    store: bool | None = False
    metadata: Metadata | None = None


STORE = "store"
"""The :attr:`~proxy.core.canonical.Call.dialect_state` key of a ``store: true`` request: its
``metadata`` (a dict, empty when none was sent), for the stored chat completions."""

_KNOWN_FIELDS = frozenset(_Envelope.__struct_fields__) | frozenset(Params.__struct_fields__)
_CANONICAL_FIELDS = frozenset({"model", "messages", "stream", "stream_options"}) | frozenset(
    Params.__struct_fields__
)
_BODY = msgspec.json.Decoder(_Body)
_PARAM_COUNT = len(Params.__struct_fields__)  # a subclass's fields follow its base's
_ENVELOPE = msgspec.json.Decoder(_Envelope)
_PARAMS = msgspec.json.Decoder(ChatParams)
_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENCODER = msgspec.json.Encoder()


class _PromptDetails(Struct):
    cached_tokens: int


class _CompletionDetails(Struct):
    reasoning_tokens: int


class OpenAIUsage(Struct):
    """OpenAI's usage object, built from the canonical buckets."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: _PromptDetails
    completion_tokens_details: _CompletionDetails

    @classmethod
    def of(cls, usage: Usage) -> OpenAIUsage:
        """OpenAI counts cache reads/writes inside prompt tokens, reasoning inside completion."""
        return cls(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
            prompt_tokens_details=_PromptDetails(cached_tokens=usage.cache_read),
            completion_tokens_details=_CompletionDetails(reasoning_tokens=usage.reasoning),
        )


class _Response(Struct, omit_defaults=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: OpenAIUsage | None = None
    system_fingerprint: str | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET


class _Chunk(Struct, omit_defaults=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: OpenAIUsage | None = None
    system_fingerprint: str | UnsetType | None = UNSET


class _ErrorBody(Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class _ErrorEnvelope(Struct):
    error: _ErrorBody


DONE_FRAME = b"data: [DONE]\n\n"


def decode_extra(body: bytes, known: frozenset[str]) -> dict[str, msgspec.Raw]:
    """Top-level fields of ``body`` outside ``known`` as raw JSON, to pass through.

    Credentials are dropped, and so is any key the canonical request itself encodes (model,
    messages, stream, every :class:`Params` field), so that an upstream body never has a key
    twice whatever the dialect.
    """
    fields = _FIELDS.decode(body)
    if len(fields) <= len(known) and fields.keys() <= known:
        return {}
    return {
        key: value
        for key, value in fields.items()
        if key not in known and key not in NEVER_FORWARDED and key not in _CANONICAL_FIELDS
    }


def error_json(error: GatewayError) -> bytes:
    """``{"error": {message, type, param, code}}``: OpenAI's error body."""
    return _ENCODER.encode(
        _ErrorEnvelope(
            _ErrorBody(message=error.message, type=error.type, param=error.param, code=error.code)
        )
    )


class OpenAIErrors:
    """What every OpenAI-shaped dialect answers beside its bodies: errors as OpenAI's error
    JSON with the error's own status, and no headers beyond the common ones."""

    def encode_error(self, error: GatewayError, request_id: str) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_error`: OpenAI's error JSON."""
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


class OpenAIChatDialect(OpenAIErrors):
    """See the module docstring."""

    name = "openai"
    paths = ("/v1/chat/completions", "/chat/completions")

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`."""
        envelope: _Body | _Envelope
        extra: dict[str, msgspec.Raw]
        try:
            envelope = _BODY.decode(body)
            params = Params(*msgspec.structs.astuple(envelope)[:_PARAM_COUNT])
            extra = {}
        except msgspec.DecodeError:  # unmodelled fields, or a malformed body: see the module
            try:
                envelope = _ENVELOPE.decode(body)
                params = Params(*msgspec.structs.astuple(_PARAMS.decode(body)))
                extra = decode_extra(body, _KNOWN_FIELDS)
            except msgspec.DecodeError as exc:
                raise bad_request(exc) from None
        if not envelope.model:
            raise BadRequest("you must provide a model parameter", param="model")
        stream_options = envelope.stream_options
        call = Call(
            request_id=request_id,
            dialect=self.name,
            model=envelope.model,
            messages=envelope.messages,
            stream=bool(envelope.stream),
            include_usage=stream_options is not None and stream_options.include_usage,
            params=params,
            extra=extra,
            options=GatewayOptions(fallbacks=envelope.fallbacks or None),
            client_headers=headers,
            timings=Timings(start=start),
        )
        metadata = envelope.metadata or {}
        if any(len(key) > METADATA_KEY_LENGTH for key in metadata):
            raise invalid(f"keys must be at most {METADATA_KEY_LENGTH} characters", "metadata")
        if envelope.store:
            call.dialect_state[STORE] = dict(metadata)
        return call

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_response`: the upstream's own body
        while nothing changed the answer, else the canonical fields plus the members of that
        body they do not model (:mod:`proxy.dialects.passthrough`)."""
        response = reply.response
        assert response is not None
        raw = response.raw
        if raw is not None and response.unchanged():  # (unchanged() implies a raw body)
            return raw
        usage = response.usage
        body = _Response(
            id=response.id,
            object="chat.completion",
            created=response.created or int(time.time()),
            model=response.model,
            choices=_openai_choices([_with_refusal(choice) for choice in response.choices]),
            usage=OpenAIUsage.of(usage) if usage is not None else None,
            system_fingerprint=response.system_fingerprint,
            service_tier=response.service_tier,
        )
        if response.raw is None:
            return _ENCODER.encode(body)
        return merged(msgspec.to_builtins(body), response.raw)

    def stream_encoder(self, call: Call, reply: Reply) -> ChatStreamEncoder:
        """See :meth:`proxy.dialects.base.Dialect.stream_encoder`."""
        return ChatStreamEncoder(include_usage=call.include_usage)


class ChatStreamEncoder:
    """``data: {chat.completion.chunk}`` frames, ``data: [DONE]`` at the end.

    The usage-only chunk is sent only when the client asked for it (``include_usage``); the
    gateway always asks upstreams for usage, for its own accounting.
    """

    __slots__ = ("_created", "_include_usage")
    keepalive = None

    def __init__(self, *, include_usage: bool) -> None:
        self._include_usage = include_usage
        self._created = int(time.time())

    def chunk(self, chunk: Chunk) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.chunk`."""
        usage = chunk.usage
        raw = chunk.raw
        if raw is not None:  # already an OpenAI chunk: as it came, usage details and all
            if usage is None or self._include_usage:
                return b"data: " + raw + b"\n\n"
            return b"data: " + without_usage(raw) + b"\n\n" if chunk.choices else b""
        if usage is not None and not self._include_usage:
            if not chunk.choices:
                return b""
            usage = None
        return encode_data_frame(
            _ENCODER.encode(
                _Chunk(
                    id=chunk.id,
                    object="chat.completion.chunk",
                    created=chunk.created or self._created,
                    model=chunk.model,
                    choices=_openai_choices(chunk.choices),
                    usage=OpenAIUsage.of(usage) if usage is not None else None,
                    system_fingerprint=chunk.system_fingerprint,
                )
            )
        )

    def relay(self, frames: RawFrames) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder`: ordinary OpenAI chunks, as they came
        (what :meth:`chunk` makes of each of them)."""
        return frames.data

    def end(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.end`."""
        return DONE_FRAME

    def ping(self) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.ping` (unused: no keep-alive)."""
        return b""

    def error(self, error: GatewayError) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.error`."""
        return encode_data_frame(error_json(error))


def _with_refusal(choice: Choice) -> Choice:
    """``choice`` with ``refusal`` on its message, as OpenAI always sends it (null when there
    is none): a copy when it lacks one, never a change in place (a cached answer is shared)."""
    message = choice.message
    if message.refusal is not UNSET:
        return choice
    return msgspec.structs.replace(choice, message=msgspec.structs.replace(message, refusal=None))


_AnyChoice = TypeVar("_AnyChoice", Choice, ChunkChoice)


def _openai_choices(choices: list[_AnyChoice]) -> list[_AnyChoice]:
    """``choices`` without ``stop_sequence``, which OpenAI's format does not have."""
    if all(choice.stop_sequence is UNSET for choice in choices):
        return choices
    return [msgspec.structs.replace(choice, stop_sequence=UNSET) for choice in choices]
