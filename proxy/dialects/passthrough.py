"""What an OpenAI-compatible upstream sent beyond the canonical types, for OpenAI clients.

An OpenAI chat answer is normally encoded from the canonical
:class:`~proxy.core.reply.Response`, which models what the gateway understands. An
OpenAI-compatible upstream may send more: a vendor's top-level fields (Perplexity's ``citations``,
Azure's ``prompt_filter_results``), choice fields (Azure's ``content_filter_results``, vLLM's
``stop_reason``), message fields (``audio``, ``function_call``, tomorrow's), usage fields and
details (``audio_tokens``, ``accepted_prediction_tokens``, OpenRouter's ``cost``). The provider
keeps its body (``Response.raw``), and the OpenAI chat dialect answers with it:

- verbatim, while nothing changed the answer since it was parsed
  (:meth:`~proxy.core.reply.Response.unchanged`) — the common case, which costs one encode;
- else (a plugin rewrote it) :func:`merged`: the canonical fields as the dialect encodes them,
  which win, plus every member of the upstream's body they do not model, at the level it came
  from (top, choice, message, usage and its details).

Streams need none of this: their chunks keep their own bytes (``Chunk.raw``); only the usage
member of a chunk the client did not ask usage for is cut out (:func:`without_usage`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from proxy.core.canonical import Message

_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ENCODER = msgspec.json.Encoder()

_RESPONSE_FIELDS = frozenset(
    {"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier"}
)
_CHOICE_FIELDS = frozenset({"index", "message", "finish_reason", "logprobs"})
_MESSAGE_FIELDS = frozenset(Message.__struct_fields__)
_USAGE_FIELDS = frozenset(
    {
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "prompt_tokens_details",
        "completion_tokens_details",
    }
)


def merged(ours: dict[str, Any], upstream_body: bytes) -> bytes:
    """``ours`` (the dialect's answer as plain JSON values) with the members of
    ``upstream_body`` that it does not model added, level by level, and encoded. A body that is
    not JSON, or a member of an unexpected shape, adds nothing at that level."""
    try:
        upstream = msgspec.json.decode(upstream_body)
    except msgspec.DecodeError:
        return _ENCODER.encode(ours)
    if type(upstream) is dict:
        _add(ours, upstream, _RESPONSE_FIELDS)
        theirs = upstream.get("choices")
        if type(theirs) is list:
            for mine, original in zip(ours.get("choices", ()), theirs, strict=False):
                if type(original) is dict:
                    _add(mine, original, _CHOICE_FIELDS)
                    _add_at(mine, original, "message", _MESSAGE_FIELDS)
        usage, original_usage = ours.get("usage"), upstream.get("usage")
        if type(usage) is dict and type(original_usage) is dict:
            _add(usage, original_usage, _USAGE_FIELDS)
            for details in ("prompt_tokens_details", "completion_tokens_details"):
                _add_at(usage, original_usage, details, frozenset())
    return _ENCODER.encode(ours)


def without_usage(chunk: bytes) -> bytes:
    """An upstream chunk's JSON without its ``usage`` member (every other member verbatim)."""
    members = _OBJECT.decode(chunk)
    members.pop("usage", None)
    return _ENCODER.encode(members)


def _add(ours: dict[str, Any], upstream: dict[str, Any], modelled: frozenset[str]) -> None:
    for key, value in upstream.items():
        if key not in modelled and key not in ours:
            ours[key] = value


def _add_at(
    ours: dict[str, Any], upstream: dict[str, Any], key: str, modelled: frozenset[str]
) -> None:
    mine, theirs = ours.get(key), upstream.get(key)
    if type(mine) is dict and type(theirs) is dict:
        _add(mine, theirs, modelled)
