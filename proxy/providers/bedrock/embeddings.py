"""Amazon Bedrock's embedding models, reached with ``InvokeModel`` (``POST /model/{id}/invoke``).

Two families, told apart by the model id (a region prefix such as ``us.`` is allowed):

- **Titan Text Embeddings** (``amazon.titan-embed-text-v2:0``, v1): one text per request,
  ``{"inputText", "dimensions", "normalize": true}`` → ``{"embedding": [...],
  "inputTextTokenCount": n}``. A batch is one request per text, sent together; the token
  counts are summed. ``dimensions`` is v2's (256, 512 or 1,024; Bedrock refuses others).
- **Cohere Embed** (``cohere.embed-english-v3``, ``cohere.embed-multilingual-v3``): up to 96
  texts per request, ``{"texts", "input_type": "search_document"}`` → ``{"embeddings":
  [[...]], ...}`` (or ``{"embeddings": {"float": [[...]]}}`` when types were asked for); a
  longer batch is split into requests of 96. Cohere reports no token counts here: usage is
  the gateway's estimate (:meth:`~proxy.core.canonical.EmbeddingRequest.estimated_tokens`).
  ``dimensions`` is not supported (a 400).

Token-id inputs are a 400 for both; so is any other model. Pure translation: the provider
signs each body.
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

from proxy.core.canonical import Call, Usage
from proxy.core.errors import BadRequest, UpstreamError
from proxy.core.reply import Embeddings
from proxy.providers.base import malformed

Family = Literal["titan", "cohere"]
COHERE_BATCH = 96
"""The most texts Bedrock's Cohere Embed takes in one request."""


class _TitanRequest(Struct, omit_defaults=True, rename="camel"):
    input_text: str
    normalize: bool  # always sent: unit vectors, whatever the default
    dimensions: int | UnsetType = UNSET


class _TitanResponse(Struct, rename="camel"):
    embedding: list[float]
    input_text_token_count: int | None = None


class _CohereRequest(Struct):
    texts: list[str]
    input_type: str = "search_document"


class _ByType(Struct):
    floats: list[list[float]] = msgspec.field(name="float")


class _CohereResponse(Struct):
    embeddings: list[list[float]] | _ByType


_ENCODER = msgspec.json.Encoder()
_TITAN = msgspec.json.Decoder(_TitanResponse)
_COHERE = msgspec.json.Decoder(_CohereResponse)


def family(model: str) -> Family:
    """The embedding family of the Bedrock ``model``; a 400 naming ``model`` if none."""
    if "titan-embed" in model:
        return "titan"
    if "cohere.embed" in model:
        return "cohere"
    raise BadRequest(
        f"the Bedrock model {model!r} is not an embedding model the gateway knows "
        "(Titan Text Embeddings, Cohere Embed)",
        code="embeddings_not_supported",
        param="model",
    )


def embedding_bodies(call: Call, model: str) -> list[bytes]:
    """The ``InvokeModel`` bodies of the embeddings ``call`` to ``model``, in input order.
    Raises :class:`BadRequest` for what the family cannot express."""
    request = call.embedding
    assert request is not None
    if request.texts is None:
        raise BadRequest("Bedrock embedding models take text, not token ids", param="input")
    if family(model) == "titan":
        dimensions = UNSET if request.dimensions is None else request.dimensions
        return [
            _ENCODER.encode(_TitanRequest(input_text=text, normalize=True, dimensions=dimensions))
            for text in request.texts
        ]
    if request.dimensions is not None:
        raise BadRequest("Cohere Embed on Bedrock does not take 'dimensions'", param="dimensions")
    texts = request.texts
    return [
        _ENCODER.encode(_CohereRequest(texts=texts[start : start + COHERE_BATCH]))
        for start in range(0, len(texts), COHERE_BATCH)
    ]


def parse_embedding_bodies(
    provider: str, bodies: list[bytes], call: Call, model: str
) -> Embeddings:
    """The vectors of the 2xx answers to :func:`embedding_bodies` for ``call``, in order
    (Cohere's usage: the call's estimate). Raises :class:`UpstreamError` (502) for a
    malformed answer or a wrong number of vectors."""
    request = call.embedding
    assert request is not None
    expected = request.count
    vectors: list[list[float]] = []
    tokens: int | None = None
    try:
        if family(model) == "titan":
            tokens = 0
            for body in bodies:
                titan = _TITAN.decode(body)
                vectors.append(titan.embedding)
                tokens += titan.input_text_token_count or 0
        else:
            for body in bodies:
                embeddings = _COHERE.decode(body).embeddings
                vectors += embeddings.floats if isinstance(embeddings, _ByType) else embeddings
    except msgspec.DecodeError as exc:
        raise malformed(provider, "embeddings response", exc) from None
    if len(vectors) != expected:
        raise UpstreamError(
            f"upstream answered {len(vectors)} embeddings for {expected} inputs",
            upstream_status=200,
            provider=provider,
        )
    usage = Usage(input=request.estimated_tokens() if tokens is None else tokens)
    return Embeddings(vectors=vectors, model=model, usage=usage)
