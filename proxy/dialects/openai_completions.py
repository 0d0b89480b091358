"""OpenAI legacy completions — ``POST /v1/completions`` — served through chat models.

The prompt becomes one user message; the answer's text comes back as ``choices[].text``.
``max_tokens`` defaults to 16 as in OpenAI's API. ``echo`` prepends the prompt to the text.
``logprobs`` (an integer here) asks for that many top log-probabilities upstream; they are not
translated back into the legacy shape (``logprobs`` is null in the answer). Not supported, with a
clear 400: several prompts in one request, token-array prompts, ``suffix``, ``best_of`` > 1
(0 and 1, which OpenAI's schema allows, ask for no extra candidates and are accepted).
Sampling parameters are bounded as in OpenAI's API (``temperature`` 0 to 2, ``top_p`` 0 to 1,
penalties -2 to 2, at most 4 ``stop`` sequences); a value outside is a 400 naming the field.

The request envelope, parameter decoding, response and stream encoding are public so that other
legacy-completion dialects (orq's router) reuse them with their own controls and error JSON.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from proxy.core.canonical import MAX_TOKENS_LIMIT, Call, Message, Params, Seed, Timings
from proxy.core.errors import BadRequest, GatewayError
from proxy.core.reply import Chunk, Reply
from proxy.core.sse import encode_data_frame
from proxy.dialects.base import bad_request
from proxy.dialects.openai_chat import (
    DONE_FRAME,
    OpenAIErrors,
    OpenAIUsage,
    decode_extra,
    error_json,
)

DEFAULT_MAX_TOKENS = 16

LegacyFinish = Literal["stop", "length", "content_filter"]


class _StreamOptions(Struct):
    include_usage: bool = False


class CompletionEnvelope(Struct):
    """The legacy request fields that are not generation parameters (subclass to add more)."""

    model: str
    prompt: str | list[str | int | list[int]] | None = None
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    echo: bool | None = False
    suffix: str | None = None
    best_of: Annotated[int, Meta(ge=0, le=20)] | None = None
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None = None


class LegacyParams(Struct, omit_defaults=True):
    """The chat parameters that keep their meaning in the legacy API, with OpenAI's bounds."""

    temperature: Annotated[float, Meta(ge=0, le=2)] | UnsetType | None = UNSET
    top_p: Annotated[float, Meta(ge=0, le=1)] | UnsetType | None = UNSET
    max_tokens: Annotated[int, Meta(ge=0, le=MAX_TOKENS_LIMIT)] | UnsetType | None = UNSET
    n: Annotated[int, Meta(ge=1, le=128)] | UnsetType | None = UNSET
    stop: str | Annotated[list[str], Meta(max_length=4)] | UnsetType | None = UNSET
    seed: Seed | UnsetType | None = UNSET
    presence_penalty: Annotated[float, Meta(ge=-2, le=2)] | UnsetType | None = UNSET
    frequency_penalty: Annotated[float, Meta(ge=-2, le=2)] | UnsetType | None = UNSET
    logit_bias: dict[str, float] | UnsetType | None = UNSET
    user: str | UnsetType = UNSET


LEGACY_FIELDS = frozenset(CompletionEnvelope.__struct_fields__) | frozenset(
    LegacyParams.__struct_fields__
)
LEGACY_PARAMS = msgspec.json.Decoder(LegacyParams)
_ENVELOPE = msgspec.json.Decoder(CompletionEnvelope)
_ENCODER = msgspec.json.Encoder()

ErrorBody = Callable[[GatewayError], bytes]


class _Choice(Struct):
    text: str
    index: int
    logprobs: None
    finish_reason: LegacyFinish | None


class _Completion(Struct, omit_defaults=True):
    id: str
    object: str
    created: int
    model: str
    choices: list[_Choice]
    usage: OpenAIUsage | None = None
    system_fingerprint: str | UnsetType | None = UNSET


def legacy_finish(reason: str | None) -> LegacyFinish | None:
    """Chat finish reasons in the legacy vocabulary (a tool call counts as a stop)."""
    if reason is None:
        return None
    if reason == "length":
        return "length"
    if reason == "content_filter":
        return "content_filter"
    return "stop"


def prompt_text(prompt: str | list[str | int | list[int]] | None) -> str:
    """The single text prompt of a legacy request. Raises :class:`BadRequest` otherwise."""
    if isinstance(prompt, str):
        return prompt
    if prompt is None:
        raise BadRequest("you must provide a prompt", param="prompt")
    if len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    if prompt and all(isinstance(p, str) for p in prompt):
        raise BadRequest(
            "several prompts in one request are not supported: send one request per prompt",
            param="prompt",
        )
    raise BadRequest("token-array prompts are not supported: send text", param="prompt")


def legacy_prompt(envelope: CompletionEnvelope) -> str:
    """The prompt text of a legacy request, after the checks every legacy dialect shares.

    Raises :class:`BadRequest` for an empty model, ``suffix``, ``best_of`` > 1, and any prompt
    :func:`prompt_text` refuses.
    """
    if not envelope.model:
        raise BadRequest("you must provide a model parameter", param="model")
    if envelope.suffix:
        raise BadRequest("suffix is not supported by chat models", param="suffix")
    if envelope.best_of not in (None, 0, 1):
        raise BadRequest("best_of is not supported by chat models", param="best_of")
    return prompt_text(envelope.prompt)


def legacy_params(params: LegacyParams, logprobs: int | None) -> Params:
    """Canonical parameters for a legacy request (``max_tokens`` defaulting to 16)."""
    max_tokens = params.max_tokens if params.max_tokens is not UNSET else DEFAULT_MAX_TOKENS
    return Params(
        temperature=params.temperature,
        top_p=params.top_p,
        max_tokens=max_tokens,
        n=params.n,
        stop=params.stop,
        seed=params.seed,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        logit_bias=params.logit_bias,
        user=params.user,
        logprobs=True if logprobs else UNSET,
        top_logprobs=logprobs if logprobs else UNSET,
    )


class OpenAICompletionsDialect(OpenAIErrors):
    """See the module docstring."""

    name = "openai_completions"
    paths = ("/v1/completions", "/completions")

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`."""
        try:
            envelope = _ENVELOPE.decode(body)
            params = LEGACY_PARAMS.decode(body)
            extra = decode_extra(body, LEGACY_FIELDS)
        except msgspec.DecodeError as exc:
            raise bad_request(exc) from None
        text = legacy_prompt(envelope)
        options = envelope.stream_options
        return Call(
            request_id=request_id,
            dialect=self.name,
            model=envelope.model,
            messages=[Message(role="user", content=text)],
            stream=bool(envelope.stream),
            include_usage=options is not None and options.include_usage,
            params=legacy_params(params, envelope.logprobs),
            extra=extra,
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
            include_usage=call.include_usage, echo=call.dialect_state.get("echo", "")
        )


def encode_completion(call: Call, reply: Reply) -> bytes:
    """The ``text_completion`` JSON for a whole reply (the prompt prepended when echoing)."""
    response = reply.response
    assert response is not None
    echo = call.dialect_state.get("echo", "")
    return _ENCODER.encode(
        _Completion(
            id=response.id,
            object="text_completion",
            created=response.created or int(time.time()),
            model=response.model,
            choices=[
                _Choice(
                    text=echo + choice.message.text(),
                    index=choice.index,
                    logprobs=None,
                    finish_reason=legacy_finish(choice.finish_reason),
                )
                for choice in response.choices
            ],
            usage=OpenAIUsage.of(response.usage) if response.usage is not None else None,
            system_fingerprint=response.system_fingerprint,
        )
    )


class CompletionStreamEncoder:
    """``data: {text_completion}`` frames with text deltas, ``data: [DONE]`` at the end.

    With ``echo``, the first text of every choice is prefixed with the prompt.

    ``error_body`` renders the in-band error frame's JSON (OpenAI's error body by default).
    """

    __slots__ = ("_created", "_echo", "_echoed", "_error_body", "_include_usage")
    keepalive = None

    def __init__(
        self, *, include_usage: bool, echo: str = "", error_body: ErrorBody = error_json
    ) -> None:
        self._include_usage = include_usage
        self._echo = echo
        self._echoed: set[int] = set()  # choices whose text already starts with the echo
        self._error_body = error_body
        self._created = int(time.time())

    def chunk(self, chunk: Chunk) -> bytes:
        """See :meth:`proxy.dialects.base.StreamEncoder.chunk`."""
        choices = []
        for choice in chunk.choices:
            text = choice.delta.content
            finish = legacy_finish(choice.finish_reason)
            if not text and finish is None:
                continue
            if self._echo and choice.index not in self._echoed:
                self._echoed.add(choice.index)
                text = self._echo + (text or "")
            choices.append(
                _Choice(text=text or "", index=choice.index, logprobs=None, finish_reason=finish)
            )
        usage = chunk.usage if self._include_usage else None
        if not choices and usage is None:
            return b""
        return encode_data_frame(
            _ENCODER.encode(
                _Completion(
                    id=chunk.id,
                    object="text_completion",
                    created=chunk.created or self._created,
                    model=chunk.model,
                    choices=choices,
                    usage=OpenAIUsage.of(usage) if usage is not None else None,
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
        return encode_data_frame(self._error_body(error))
