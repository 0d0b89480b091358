"""How a native batch's lines cross to the provider's batch API and its results come back.

A :class:`LineCodec` turns one line's request body (as the client wrote it, for the batch's
endpoint) into the body the provider's batch endpoint takes, and one
:class:`~proxy.providers.base.NativeResult` back into what the client's endpoint would have
answered (:class:`Answer`: status, body, usage, and for a failure its error code and message).

- :class:`Passthrough`: the provider takes the batch's own endpoint (an OpenAI batch to OpenAI
  or Azure, a message batch to Anthropic): bodies go as they are and answers come back as the
  provider wrote them. Usage is read from the answer (the provider's own parse for chat
  answers, OpenAI's ``usage`` object otherwise: :class:`~proxy.batches.usage.WireUsage`).
- :class:`Translated`: a chat batch whose provider takes the other chat wire (OpenAI's chat
  completions to Anthropic, Anthropic's messages to OpenAI or Azure): a line is decoded by the
  client's dialect into a canonical call and built by the provider, as an online request
  would be; an answer is parsed by the provider and encoded by the client's dialect, an error
  through the provider's error parsing and the dialect's error shape.

A line that cannot be translated raises the :class:`~proxy.core.errors.GatewayError` the
online request would have had (the caller fails that line without sending it).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import msgspec

from proxy.batches.usage import WireUsage
from proxy.core.canonical import Call, Usage
from proxy.core.errors import GatewayError, UpstreamError
from proxy.core.reply import Reply
from proxy.dialects.base import Dialect
from proxy.providers.base import HttpProvider, NativeResult

CHAT = ("/v1/chat/completions", "/v1/messages")
"""The chat endpoints a batch can be translated between."""
_NO_HEADERS: dict[str, str] = {}


class Answer(NamedTuple):
    """What one line's endpoint would have answered: ``status``, ``body`` (the client's
    shape), ``usage``, and for a failed line its error ``code`` and ``message``."""

    status: int
    body: bytes
    usage: Usage | None
    error: tuple[str, str] | None = None


class LineCodec(Protocol):
    """See the module docstring."""

    def request(self, body: bytes) -> dict[str, Any]:
        """The provider's request body for the client's line ``body``; raises
        :class:`GatewayError` for a line the provider's endpoint cannot take."""
        ...

    def answer(self, body: bytes, result: NativeResult) -> Answer:
        """What the client's endpoint answers for the line ``body`` whose result is
        ``result`` (one that ran: it has a body)."""
        ...


class _Usage(msgspec.Struct):
    usage: WireUsage | None = None


class _ErrorDetail(msgspec.Struct):
    message: str = ""
    type: str | None = None
    code: str | int | None = None


class _Error(msgspec.Struct):
    error: _ErrorDetail | None = None


_USAGE = msgspec.json.Decoder(_Usage)
_ERROR = msgspec.json.Decoder(_Error)


class Passthrough:
    """See the module docstring; ``http`` parses chat answers' usage for ``model`` (None: the
    provider is not reached over HTTP, usage is read from OpenAI's ``usage`` object)."""

    def __init__(self, wire: str, http: HttpProvider | None, model: str) -> None:
        self._chat = http if wire in CHAT else None
        self._model = model

    def request(self, body: bytes) -> dict[str, Any]:
        """See :meth:`LineCodec.request`."""
        decoded: dict[str, Any] = msgspec.json.decode(body)
        return decoded

    def answer(self, body: bytes, result: NativeResult) -> Answer:
        """See :meth:`LineCodec.answer`."""
        answer = result.body or b"{}"
        if result.outcome != "succeeded":
            return Answer(result.status, answer, None, _error_of(answer))
        return Answer(result.status, answer, self._usage(answer))

    def _usage(self, answer: bytes) -> Usage | None:
        if self._chat is not None:
            try:
                return self._chat.parse_response(answer, self._model).usage
            except UpstreamError:
                return None
        try:
            found = _USAGE.decode(answer).usage
        except msgspec.DecodeError:
            return None
        return None if found is None else found.canonical()


class Translated:
    """See the module docstring: lines of the client's ``dialect`` to the chat API of
    ``http``, for ``model``."""

    def __init__(self, dialect: Dialect, http: HttpProvider, provider: str, model: str) -> None:
        self._dialect = dialect
        self._http = http
        self._provider = provider
        self._model = model

    def _call(self, body: bytes) -> Call:
        call = self._dialect.decode(body, _NO_HEADERS, "batch", 0.0)
        call.stream = False
        return call

    def request(self, body: bytes) -> dict[str, Any]:
        """See :meth:`LineCodec.request`."""
        built = self._http.build_request(self._call(body), self._model)
        sent = built.body if isinstance(built.body, bytes) else b"".join(built.body)
        decoded: dict[str, Any] = msgspec.json.decode(sent)
        return decoded

    def answer(self, body: bytes, result: NativeResult) -> Answer:
        """See :meth:`LineCodec.answer`."""
        dialect, call = self._dialect, self._call(body)
        answer = result.body or b"{}"
        try:
            if result.outcome != "succeeded":
                raise self._http.parse_error(result.status, _NO_HEADERS, answer)
            response = self._http.parse_response(answer, self._model)
            reply = Reply(provider=self._provider, model=self._model, response=response)
            return Answer(200, dialect.encode_response(call, reply), response.usage)
        except GatewayError as failure:
            status = dialect.error_status(failure)
            encoded = dialect.encode_error(failure, call.request_id)
            return Answer(status, encoded, None, (failure.code, failure.message))


def _error_of(answer: bytes) -> tuple[str, str]:
    """The ``(code, message)`` of an error body in OpenAI's or Anthropic's shape."""
    try:
        detail = _ERROR.decode(answer).error
    except msgspec.DecodeError:
        detail = None
    if detail is None:
        return "upstream_error", "the provider answered an error"
    code = detail.code if detail.code is not None else detail.type
    return str(code or "upstream_error")[:64], detail.message
