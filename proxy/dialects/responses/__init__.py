"""OpenAI Responses API — ``POST /v1/responses`` — decoded into the canonical call like every
dialect, so it reaches every provider through the whole plugin chain.

- Requests: :mod:`proxy.dialects.responses.decode` (``input`` items, function tools, structured
  output, reasoning effort; built-in tools are a 400).
- Whole replies: the ``response`` object (:mod:`proxy.dialects.responses.objects`), output items
  per :mod:`proxy.dialects.responses.output`; a length or content-filter stop is ``incomplete``.
- Streams: named events with ``sequence_number`` (:mod:`proxy.dialects.responses.stream`).
- Errors: OpenAI's ``{"error": {message, type, param, code}}`` with the error's status.

The conversation state (``store``, ``previous_response_id``) is not translation and lives
outside the dialect (:mod:`proxy.stored.response_state`); the dialect leaves what it needs in the
call's :class:`~proxy.dialects.responses.objects.Envelope`.
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.core.canonical import Call
from proxy.core.errors import GatewayError
from proxy.core.reply import Reply
from proxy.dialects.openai_chat import error_json
from proxy.dialects.responses.decode import decode_request
from proxy.dialects.responses.objects import (
    ENCODER,
    Envelope,
    ResponseObject,
    new_response_id,
    response_object,
    status_of,
)
from proxy.dialects.responses.output import whole_output
from proxy.dialects.responses.stream import ResponsesStreamEncoder

__all__ = ["ResponsesDialect", "envelope_of", "whole_response"]


def envelope_of(call: Call) -> Envelope:
    """The envelope the decoder left in a Responses call."""
    envelope = call.dialect_state["envelope"]
    assert isinstance(envelope, Envelope)
    return envelope


class ResponsesDialect:
    """See the module docstring."""

    name = "responses"
    paths = ("/v1/responses", "/responses")

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`; every call gets a fresh ``resp_`` id."""
        return decode_request(
            body, headers, request_id, start, dialect=self.name, response_id=new_response_id()
        )

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_response`; the body the conversation
        state already encoded for this very reply (``dialect_state["encoded"]``) is reused."""
        encoded = call.dialect_state.get("encoded")
        if encoded is not None and encoded[0] is reply.response:
            body: bytes = encoded[1]  # (the reply, its encoded body); dialect_state holds Any
            return body
        return ENCODER.encode(whole_response(call, reply))

    def stream_encoder(self, call: Call, reply: Reply) -> ResponsesStreamEncoder:
        """See :meth:`proxy.dialects.base.Dialect.stream_encoder`; it frames the output the
        conversation state assembles (``dialect_state["builder"]``) when it records the
        stream."""
        builder = call.dialect_state.get("builder")
        return ResponsesStreamEncoder(envelope_of(call), reply.model, builder)

    def encode_error(self, error: GatewayError, request_id: str) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_error`: OpenAI's error body."""
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


def whole_response(call: Call, reply: Reply) -> ResponseObject:
    """The response object of a whole reply (choice 0)."""
    response = reply.response
    assert response is not None
    envelope = envelope_of(call)
    choice = response.choices[0]
    status, incomplete = status_of(choice.finish_reason)
    return response_object(
        envelope,
        model=response.model or reply.model,
        output=whole_output(envelope.id, choice.message),
        status=status,
        usage=response.usage,
        incomplete=incomplete,
    )
