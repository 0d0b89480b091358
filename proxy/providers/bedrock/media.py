"""Bedrock's media: rerank through the Agents for Amazon Bedrock runtime's ``Rerank`` and image
generation through ``InvokeModel`` with Amazon's image models (Nova Canvas, Titan Image
Generator), answered in Cohere's and OpenAI's shapes. Pure translation; the provider signs.

**Rerank** (``POST /v1/rerank`` → ``{agent runtime}/rerank``): Cohere's request becomes
``{"queries": [{"type": "TEXT", "textQuery": {"text": query}}], "sources": [{"type": "INLINE",
"inlineDocumentSource": …}], "rerankingConfiguration": {"type": "BEDROCK_RERANKING_MODEL",
"bedrockRerankingConfiguration": {"numberOfResults", "modelConfiguration": {"modelArn"}}}}``: a
string document (or ``{"text": …}`` alone) is a ``TEXT`` source, any other object a ``JSON``
one; ``numberOfResults`` is ``top_n`` (at most the documents); ``max_tokens_per_doc`` goes in
``additionalModelRequestFields``. The model is a foundation model's id (``amazon.rerank-v1:0``,
``cohere.rerank-v3-5:0``), made the ARN ``arn:aws:bedrock:{region}::foundation-model/{id}``, or
an ARN already. Bedrock takes at most 1,000 documents (more is a 400 naming ``documents``). The
answer ``{"results": [{"index", "relevanceScore"}]}`` becomes Cohere's ``{"id", "results":
[{"index", "relevance_score", "document"?}], "meta": {"billed_units": {"search_units"}}}``
(``document`` from the request when ``return_documents`` is true). Bedrock bills a query per
100 documents, as Cohere's search units: usage is the request's search units.

**Images** (``POST /v1/images/generations`` → ``/model/{model}/invoke``): ``{"taskType":
"TEXT_IMAGE", "textToImageParams": {"text": prompt}, "imageGenerationConfig":
{"numberOfImages": n, "width", "height", "quality"}}`` — ``n`` at most 5 (more is a 400),
``size`` ``WxH`` gives the width and height, OpenAI's ``hd`` / ``high`` quality is ``premium``
and ``standard`` / ``medium`` / ``low`` is ``standard``; ``negative_prompt`` (or
``negativeText``), ``seed``, ``cfg_scale`` (or ``cfgScale``) and Nova Canvas's ``style`` are
passed; OpenAI's other fields have no equivalent and are dropped. The images come back as bytes
only (``response_format: url`` is a 400). The answer ``{"images": [base64, …], "error"}``
becomes OpenAI's ``ImagesResponse``; an ``error`` in it is a 400 ``content_policy_violation``
(Amazon's image models report their content filters there). Usage: the images returned, of the
size and quality the request named.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import Struct

from proxy.core.canonical import Call, MediaOperation, MediaUnits, Usage
from proxy.core.errors import BadRequest, ContentPolicyViolation, UpstreamError
from proxy.core.reply import MediaAnswer
from proxy.providers.base import malformed

OPERATIONS: frozenset[MediaOperation] = frozenset({"rerank", "image_generation"})
"""The media operations a Bedrock provider serves."""

MAX_RERANK_DOCUMENTS = 1000
"""The most sources one Bedrock ``Rerank`` request takes."""

MAX_IMAGES = 5
"""The most images one ``InvokeModel`` of Amazon's image models makes (``numberOfImages``)."""

DOCUMENTS_PER_QUERY = 100
"""Bedrock bills a rerank query per this many documents."""

_QUALITIES = {"hd": "premium", "high": "premium", "premium": "premium"}
_STANDARD = frozenset({"standard", "medium", "low"})
_IMAGE_PARAMETERS = {
    "negative_prompt": ("textToImageParams", "negativeText"),
    "negativeText": ("textToImageParams", "negativeText"),
    "style": ("textToImageParams", "style"),
    "seed": ("imageGenerationConfig", "seed"),
    "cfg_scale": ("imageGenerationConfig", "cfgScale"),
    "cfgScale": ("imageGenerationConfig", "cfgScale"),
}
_ENCODER = msgspec.json.Encoder()


class _Ranked(Struct, rename="camel"):
    index: int
    relevance_score: float


class _Reranked(Struct):
    results: list[_Ranked] = msgspec.field(default_factory=list)


class _Images(Struct):
    images: list[str] | None = None
    error: str | None = None


_RERANKED = msgspec.json.Decoder(_Reranked)
_IMAGES = msgspec.json.Decoder(_Images)


def model_arn(model: str, region: str) -> str:
    """The ARN of the foundation model ``model`` in ``region`` (an ARN stays as it is)."""
    if model.startswith("arn:"):
        return model
    return f"arn:aws:bedrock:{region}::foundation-model/{model}"


def rerank_body(call: Call, arn: str) -> bytes:
    """The ``Rerank`` body of Cohere's rerank ``call`` to the model ``arn`` (see the module
    docstring). Raises :class:`BadRequest` for more documents than Bedrock takes."""
    fields = _fields(call)
    documents: list[Any] = fields["documents"]
    if len(documents) > MAX_RERANK_DOCUMENTS:
        raise BadRequest(
            f"Bedrock reranks at most {MAX_RERANK_DOCUMENTS} documents a request",
            param="documents",
        )
    top_n = fields.get("top_n") or len(documents)
    model: dict[str, Any] = {"modelArn": arn}
    if fields.get("max_tokens_per_doc") is not None:
        model["additionalModelRequestFields"] = {"max_tokens_per_doc": fields["max_tokens_per_doc"]}
    body = {
        "queries": [{"type": "TEXT", "textQuery": {"text": fields["query"]}}],
        "sources": [_source(document) for document in documents],
        "rerankingConfiguration": {
            "type": "BEDROCK_RERANKING_MODEL",
            "bedrockRerankingConfiguration": {
                "numberOfResults": min(top_n, len(documents)),
                "modelConfiguration": model,
            },
        },
    }
    return _ENCODER.encode(body)


def _source(document: str | dict[str, Any]) -> dict[str, Any]:
    """One rerank source: a text document, or a JSON one."""
    text = document if isinstance(document, str) else None
    if isinstance(document, dict) and set(document) == {"text"}:
        text = document["text"] if isinstance(document["text"], str) else None
    if text is not None:
        inline: dict[str, Any] = {"type": "TEXT", "textDocument": {"text": text}}
    else:
        inline = {"type": "JSON", "jsonDocument": document}
    return {"type": "INLINE", "inlineDocumentSource": inline}


def parse_rerank(provider: str, body: bytes, call: Call) -> MediaAnswer:
    """Cohere's rerank answer from Bedrock's (see the module docstring). Raises
    :class:`UpstreamError` for a body that does not decode or names a document not sent."""
    fields = _fields(call)
    documents: list[Any] = fields["documents"]
    try:
        ranked = _RERANKED.decode(body).results
    except msgspec.DecodeError as exc:
        raise malformed(provider, "rerank answer", exc) from None
    results: list[dict[str, Any]] = []
    for item in ranked:
        if not 0 <= item.index < len(documents):
            raise UpstreamError(
                f"upstream ranked document {item.index}, which was not sent",
                upstream_status=200,
                provider=provider,
            )
        result: dict[str, Any] = {"index": item.index, "relevance_score": item.relevance_score}
        if fields.get("return_documents"):
            document = documents[item.index]
            result["document"] = {"text": document} if isinstance(document, str) else document
        results.append(result)
    units = math.ceil(len(documents) / DOCUMENTS_PER_QUERY)
    answer = {
        "id": call.request_id,
        "results": results,
        "meta": {"billed_units": {"search_units": units}},
    }
    return MediaAnswer(
        body=_ENCODER.encode(answer),
        content_type="application/json",
        usage=Usage(media=MediaUnits(search_units=units)),
    )


def image_body(call: Call) -> bytes:
    """The ``InvokeModel`` body of an image generation (see the module docstring). Raises
    :class:`BadRequest` for a ``size``, ``quality`` or ``response_format`` it cannot express."""
    fields = _fields(call)
    if fields.get("response_format") == "url":
        raise BadRequest(
            "Bedrock answers images as bytes only: ask for response_format b64_json",
            param="response_format",
        )
    sections: dict[str, dict[str, Any]] = {
        "textToImageParams": {"text": fields["prompt"]},
        "imageGenerationConfig": {"numberOfImages": _count(fields.get("n") or 1)},
    }
    config = sections["imageGenerationConfig"]
    size = fields.get("size")
    if isinstance(size, str) and size != "auto":
        config["width"], config["height"] = _dimensions(size)
    quality = fields.get("quality")
    if isinstance(quality, str) and quality != "auto":
        if quality not in _QUALITIES and quality not in _STANDARD:
            raise BadRequest("expected a quality of standard or hd (premium)", param="quality")
        config["quality"] = _QUALITIES.get(quality, "standard")
    for name, (section, wire) in _IMAGE_PARAMETERS.items():
        if name in fields:
            sections[section][wire] = fields[name]
    return _ENCODER.encode({"taskType": "TEXT_IMAGE", **sections})


def _count(count: int) -> int:
    if count > MAX_IMAGES:
        raise BadRequest(f"Amazon's image models make at most {MAX_IMAGES} images", param="n")
    return count


def _dimensions(size: str) -> tuple[int, int]:
    width, _, height = size.lower().partition("x")
    if not (width.isdigit() and height.isdigit()):
        raise BadRequest(f"expected a size such as 1024x1024, not {size!r}", param="size")
    return int(width), int(height)


def parse_images(provider: str, body: bytes, call: Call) -> MediaAnswer:
    """OpenAI's ``ImagesResponse`` from an image model's answer (see the module docstring)."""
    media = call.media
    assert media is not None
    try:
        answer = _IMAGES.decode(body)
    except msgspec.DecodeError as exc:
        raise malformed(provider, "image answer", exc) from None
    if answer.error:
        raise ContentPolicyViolation(
            f"the provider refused the image: {answer.error}",
            upstream_status=200,
            status=400,
            provider=provider,
        )
    if not answer.images:
        raise UpstreamError("upstream answered no image", upstream_status=200, provider=provider)
    asked = media.worst or MediaUnits()
    units = MediaUnits(
        images=len(answer.images), image_size=asked.image_size, image_quality=asked.image_quality
    )
    images = {"created": int(time.time()), "data": [{"b64_json": data} for data in answer.images]}
    return MediaAnswer(
        body=_ENCODER.encode(images), content_type="application/json", usage=Usage(media=units)
    )


def _fields(call: Call) -> Mapping[str, Any]:
    media = call.media
    assert media is not None  # a media call
    return media.fields
