"""OpenAI's embeddings wire format (``POST {base}/embeddings``), for every provider that speaks
it: OpenAI, the OpenAI-compatible presets, vLLM, Ollama, Azure (its own URL).

Pure translation. The request names the upstream model, the inputs (texts or token lists),
``dimensions`` and ``user`` when set, and the fields the client passed through; it never asks
for ``encoding_format`` (floats are every server's default; the client's choice is applied by
the dialect). The response may carry floats or base64 (float32, little-endian) per vector:
both are read, and the vectors are put back in ``index`` order.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from proxy.core.canonical import Call, Usage
from proxy.core.errors import UpstreamError
from proxy.core.reply import Embeddings
from proxy.providers.base import (
    HttpRequest,
    encode_raw_fields,
    malformed,
    merge_json_objects,
    with_plugin_headers,
)


class _Request(Struct, omit_defaults=True):
    model: str
    input: Any
    dimensions: int | None = None
    user: str | UnsetType = UNSET


class _Vector(Struct):
    embedding: list[float] | str
    index: int = 0


class _Usage(Struct):
    prompt_tokens: int | None = 0
    total_tokens: int | None = 0


class _Response(Struct):
    data: list[_Vector]
    model: str = ""
    usage: _Usage | None = None


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_Response)
_BIG_ENDIAN = sys.byteorder == "big"


def build_openai_embeddings(
    url: str, headers: Mapping[str, str], call: Call, model: str
) -> HttpRequest:
    """The upstream request for the embeddings ``call`` sent to ``model`` at ``url``."""
    request = call.embedding
    assert request is not None
    head = _Request(
        model=model,
        input=request.texts if request.texts is not None else request.tokens,
        dimensions=request.dimensions,
        user=call.params.user,
    )
    body = merge_json_objects(_ENCODER.encode(head), encode_raw_fields(call.extra))
    return HttpRequest(
        url=url, headers=with_plugin_headers(dict(headers), call.upstream_headers), body=body
    )


def parse_openai_embeddings(provider: str, body: bytes, model: str, expected: int) -> Embeddings:
    """The vectors of a 2xx ``CreateEmbeddingResponse`` body. Raises :class:`UpstreamError`
    (502) for a malformed body, or one without ``expected`` vectors."""
    try:
        wire = _DECODER.decode(body)
        vectors = [_floats(item.embedding) for item in sorted(wire.data, key=_index)]
    except (msgspec.DecodeError, ValueError) as exc:
        raise malformed(provider, "embeddings response", exc) from None
    if len(vectors) != expected:
        raise UpstreamError(
            f"upstream answered {len(vectors)} embeddings for {expected} inputs",
            upstream_status=200,
            provider=provider,
        )
    usage = wire.usage
    return Embeddings(
        vectors=vectors,
        model=wire.model or model,
        usage=None if usage is None else Usage(input=usage.prompt_tokens or 0),
    )


def _index(vector: _Vector) -> int:
    return vector.index


def _floats(embedding: list[float] | str) -> list[float]:
    if isinstance(embedding, list):
        return embedding
    packed = array("f")
    packed.frombytes(base64.b64decode(embedding, validate=True))
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tolist()
