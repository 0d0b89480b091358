"""Google Gemini's embeddings wire format: ``models/{model}:batchEmbedContents``.

One request carries every input: ``{"requests": [{"model": "models/{model}", "content":
{"parts": [{"text": ...}]}, "outputDimensionality": N}, ...]}``; the answer is
``{"embeddings": [{"values": [...]}, ...]}`` in the same order. (``embedContent`` is the same
thing for one text; the batch form serves one text as well, so only it is used.) Gemini embeds
text only: token-id inputs are a 400. Gemini reports no token usage for embeddings: usage is the
gateway's estimate (:meth:`~proxy.core.canonical.EmbeddingRequest.estimated_tokens`). Pure
translation.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, Struct, UnsetType

from proxy.core.canonical import Call, Usage
from proxy.core.errors import BadRequest, UpstreamError
from proxy.core.reply import Embeddings
from proxy.providers.base import malformed


class _Part(Struct):
    text: str


class _Content(Struct):
    parts: list[_Part]


class _EmbedRequest(Struct, omit_defaults=True, rename="camel"):
    model: str
    content: _Content
    output_dimensionality: int | UnsetType = UNSET


class _BatchRequest(Struct):
    requests: list[_EmbedRequest]


class _Values(Struct):
    values: list[float]


class _BatchResponse(Struct):
    embeddings: list[_Values]


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_BatchResponse)


def gemini_embeddings_body(call: Call, model_path: str) -> bytes:
    """The ``batchEmbedContents`` body for the embeddings ``call``; ``model_path`` is the
    model's resource name (``models/...``). Raises :class:`BadRequest` for token inputs."""
    request = call.embedding
    assert request is not None
    if request.texts is None:
        raise BadRequest("Gemini embeds text only, not token ids", param="input")
    dimensions = UNSET if request.dimensions is None else request.dimensions
    return _ENCODER.encode(
        _BatchRequest(
            requests=[
                _EmbedRequest(
                    model=model_path,
                    content=_Content(parts=[_Part(text=text)]),
                    output_dimensionality=dimensions,
                )
                for text in request.texts
            ]
        )
    )


def parse_gemini_embeddings(provider: str, body: bytes, call: Call, model: str) -> Embeddings:
    """The vectors of a 2xx ``batchEmbedContents`` body for ``call``. Raises
    :class:`UpstreamError` (502) for a malformed body, or one without a vector per input."""
    request = call.embedding
    assert request is not None
    expected = request.count
    try:
        wire = _DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise malformed(provider, "embeddings response", exc) from None
    if len(wire.embeddings) != expected:
        raise UpstreamError(
            f"upstream answered {len(wire.embeddings)} embeddings for {expected} inputs",
            upstream_status=200,
            provider=provider,
        )
    return Embeddings(
        vectors=[item.values for item in wire.embeddings],
        model=model,
        usage=Usage(input=request.estimated_tokens()),
    )
