"""The OpenAI embeddings dialect: ``POST /v1/embeddings`` (and ``/embeddings``).

Requests are OpenAI's ``CreateEmbeddingRequest``: ``input`` is a string, a list of strings, a
token list or a list of token lists (at most 2,048 inputs, none empty); ``encoding_format`` is
``float`` (the default) or ``base64`` (little-endian float32 bytes, as OpenAI sends them and
its SDK asks for by default); ``dimensions`` shortens the vectors on models that support it;
``user`` names the end user. Other fields pass through to OpenAI-compatible upstreams
(``Call.extra``). The call is canonical with :attr:`~proxy.core.canonical.Call.embedding` set and no
messages; the reply's :class:`~proxy.core.reply.Embeddings` become ``CreateEmbeddingResponse``.
Errors are OpenAI's error JSON. Embeddings are never streamed.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Mapping
from typing import Annotated, Literal, TypeGuard

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from proxy.core.canonical import Call, EmbeddingRequest, Params, Timings
from proxy.core.errors import BadRequest
from proxy.core.reply import Reply
from proxy.dialects.base import StreamEncoder, bad_request
from proxy.dialects.openai_chat import OpenAIErrors, decode_extra

MAX_INPUTS = 2048
"""OpenAI's bound on the inputs of one request."""

_Input = str | list[str | int | list[int]]


class _Envelope(Struct):
    model: str
    input: _Input
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Meta(ge=1, le=65536)] | None = None
    user: str | UnsetType = UNSET


_KNOWN = frozenset(_Envelope.__struct_fields__)
_ENVELOPE = msgspec.json.Decoder(_Envelope)


class _Usage(Struct):
    prompt_tokens: int
    total_tokens: int


class _Vector(Struct):
    index: int
    embedding: list[float] | str
    object: str = "embedding"


class _Response(Struct):
    data: list[_Vector]
    model: str
    usage: _Usage
    object: str = "list"


_ENCODER = msgspec.json.Encoder()
_BIG_ENDIAN = sys.byteorder == "big"


class OpenAIEmbeddingsDialect(OpenAIErrors):
    """See the module docstring."""

    name = "openai_embeddings"
    paths = ("/v1/embeddings", "/embeddings")

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """See :meth:`proxy.dialects.base.Dialect.decode`."""
        try:
            envelope = _ENVELOPE.decode(body)
        except msgspec.DecodeError as exc:
            raise bad_request(exc) from None
        texts, tokens = _inputs(envelope.input)
        extra = decode_extra(body, _KNOWN)
        return Call(
            request_id=request_id,
            dialect=self.name,
            model=envelope.model,
            messages=[],
            params=Params(user=envelope.user),
            extra=extra,
            client_headers=headers,
            timings=Timings(start=start),
            embedding=EmbeddingRequest(
                texts=texts,
                tokens=tokens,
                encoding_format=envelope.encoding_format,
                dimensions=envelope.dimensions,
            ),
        )

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """See :meth:`proxy.dialects.base.Dialect.encode_response`: ``CreateEmbeddingResponse``,
        each vector as floats or base64 as the client asked."""
        embeddings = reply.embeddings
        assert embeddings is not None
        assert call.embedding is not None
        as_base64 = call.embedding.encoding_format == "base64"
        data = [
            _Vector(index=index, embedding=_base64(vector) if as_base64 else vector)
            for index, vector in enumerate(embeddings.vectors)
        ]
        usage = embeddings.usage
        tokens = usage.prompt_tokens if usage is not None else 0
        return _ENCODER.encode(
            _Response(
                data=data,
                model=embeddings.model,
                usage=_Usage(prompt_tokens=tokens, total_tokens=tokens),
            )
        )

    def stream_encoder(self, call: Call, reply: Reply) -> StreamEncoder:
        """Never used: an embeddings reply is whole (the app asks only for streams)."""
        raise TypeError("embeddings are never streamed")


def _inputs(value: _Input) -> tuple[list[str] | None, list[list[int]] | None]:
    """The texts or the token lists of ``input``; a 400 naming ``input`` for anything else."""
    if isinstance(value, str):
        value = [value]
    if not value:
        raise BadRequest("'input' must not be empty", param="input")
    if len(value) > MAX_INPUTS:
        raise BadRequest(f"'input' may hold at most {MAX_INPUTS} items", param="input")
    first = value[0]
    if isinstance(first, str):
        if not _all_texts(value):
            raise BadRequest(
                "'input' must be a non-empty string, or a list of non-empty strings",
                param="input",
            )
        return value, None
    if isinstance(first, int):
        if not _all_token_ids(value):
            raise BadRequest("'input' mixes token ids with other values", param="input")
        return None, [value]
    if not _all_token_lists(value):
        raise BadRequest(
            "'input' must be a list of non-empty token lists, or of strings", param="input"
        )
    return None, value


def _all_texts(items: list[str | int | list[int]]) -> TypeGuard[list[str]]:
    return all(isinstance(item, str) and item for item in items)


def _all_token_ids(items: list[str | int | list[int]]) -> TypeGuard[list[int]]:
    return all(type(item) is int for item in items)


def _all_token_lists(items: list[str | int | list[int]]) -> TypeGuard[list[list[int]]]:
    """Non-empty lists all (their items were decoded as ints: :data:`_Input`)."""
    return all(isinstance(item, list) and item for item in items)


def _base64(vector: list[float]) -> str:
    """``vector`` as OpenAI's base64: little-endian float32 bytes."""
    packed = array("f", vector)
    if _BIG_ENDIAN:
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")
