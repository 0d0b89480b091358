"""What the semantic cache compares: the text it embeds, and the scope that must match exactly.

``cache: {semantic: {embedding_model, threshold, scope_by, last_messages}}`` lets a request that
missed the exact cache be answered by an earlier one that asked the same thing in other words.
Two calls can share an answer only when they are in the same *scope* — the same tenant (the
cache's ``scope``: team, key or global), the same embedding model, and the same values of every
field ``scope_by`` names — and their *query texts* are similar enough.

- Query text (:func:`query_text`): the text of the last ``last_messages`` user messages, in
  order, one per line. A call whose embedded messages carry anything but text (images, audio,
  files), or no text at all, or more than ``max_chars`` characters, has none: it is cached
  exactly only.
- Scope (:func:`semantic_scope`), a SHA-256 of: the tenant, the embedding model, and for each
  ``scope_by`` field: ``model`` — the model the client named; ``system`` — the system and
  developer messages; ``tools`` — the tools, tool choice and parallel-tool-calls flag;
  ``params`` — every other generation parameter but ``user``, the fields passed through
  unmodelled, a provider pin and load-balancer targets; ``history`` — the other messages
  before the embedded ones (without it, the earlier turns of a conversation do not matter).

Pure functions; the material is encoded as the exact key's is
(:func:`~proxy.cache.key.encode_material`: deterministic JSON, so that no number a client can
write makes it fail).
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta

from proxy.cache.key import Scope, encode_material, plain_fields, scope_of
from proxy.core.canonical import Call, Message, TextPart

ScopeField = Literal["model", "system", "tools", "params", "history"]

_SYSTEM_ROLES = frozenset({"system", "developer"})


class SemanticConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``cache.semantic``: see the module docstring and :mod:`proxy.cache.semantic_cache`.

    ``embedding_model`` is an alias (or ``provider/model``) routed through the rest of the
    chain; ``threshold`` the cosine similarity a hit needs; ``timeout`` the seconds an
    embedding may take before the request goes on as an exact miss; ``max_entries`` bounds
    each scope and ``max_vectors`` all of them (the oldest go first; a vector takes its
    dimensions times 4 bytes and 1/32 of that again: 20,000 of 1,536 dimensions about 127 MB);
    ``max_chars`` the query text that is embedded at all.
    """

    embedding_model: str
    threshold: Annotated[float, Meta(gt=0, le=1)] = 0.95
    scope_by: tuple[ScopeField, ...] = ("model", "system", "tools", "params")
    last_messages: Annotated[int, Meta(ge=1, le=100)] = 1
    timeout: Annotated[float, Meta(gt=0, le=60)] = 2.0
    max_entries: Annotated[int, Meta(ge=1)] = 10_000
    max_vectors: Annotated[int, Meta(ge=1)] = 20_000
    max_chars: Annotated[int, Meta(ge=1)] = 16_384


def query_text(call: Call, last_messages: int, max_chars: int) -> str | None:
    """The text to embed for ``call``, or None when it has none (see the module docstring)."""
    texts: list[str] = []
    for message in reversed(call.messages):
        if message.role != "user":
            continue
        if not _text_only(message):
            return None
        texts.append(message.text())
        if len(texts) == last_messages:
            break
    text = "\n".join(reversed(texts)).strip()
    if not text or len(text) > max_chars:
        return None
    return text


def semantic_scope(call: Call, config: SemanticConfig, tenant: Scope) -> str:
    """The scope of ``call``'s entries (64 hex digits; see the module docstring)."""
    material: list[object] = [scope_of(call.principal, tenant), config.embedding_model]
    for field in sorted(set(config.scope_by)):
        material += [field, _field(call, field, config.last_messages)]
    return hashlib.sha256(encode_material(material)).hexdigest()


def _field(call: Call, field: ScopeField, last_messages: int) -> object:
    params = call.params
    if field == "model":
        return call.model
    if field == "system":
        return [m for m in call.messages if m.role in _SYSTEM_ROLES]
    if field == "tools":
        return [_set(params.tools), _set(params.tool_choice), _set(params.parallel_tool_calls)]
    if field == "params":
        rest = msgspec.structs.replace(
            params, tools=UNSET, tool_choice=UNSET, parallel_tool_calls=UNSET, user=UNSET
        )
        return (rest, plain_fields(call.extra), call.options.provider, call.options.load_balancer)
    return _history(call.messages, last_messages)


def _set(value: object) -> object:
    """``value``, or None when it is UNSET (which cannot be encoded outside a Struct)."""
    return None if value is UNSET else value


def _history(messages: list[Message], last_messages: int) -> list[Message]:
    """The non-system messages before the embedded user messages."""
    seen = 0
    first = len(messages)
    for position in range(len(messages) - 1, -1, -1):
        if messages[position].role == "user":
            first = position
            seen += 1
            if seen == last_messages:
                break
    return [m for m in messages[:first] if m.role not in _SYSTEM_ROLES]


def _text_only(message: Message) -> bool:
    content = message.content
    return (
        content is None
        or isinstance(content, str)
        or all(isinstance(part, TextPart) for part in content)
    )
