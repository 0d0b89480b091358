"""Cache keys: a hash of who may share an answer and of everything that changes it.

The key covers the scope (a team, a virtual key, or nobody for ``global``), the model as the
client named it, and the canonical request's content: messages (as the chain left them, so after
masking), every generation parameter except ``user``, fields the dialect passed through unmodelled,
and the routing choices a client made (a provider pin, load-balancer targets). Not in it:
``stream`` and ``stream_options`` (a stream and a whole answer are the same answer), ``user``,
metadata, request ids, headers, and gateway controls that do not change the answer (retries,
fallbacks, timeouts, the cache controls themselves).

The dialect is not in it either: the key is computed from the canonical call, which is exactly
what providers translate into an upstream request, so an OpenAI chat request and an Anthropic
Messages or Fabro request that decode to the same call hit the same entry, and each client gets
the answer in its own wire format.

The material is encoded with msgpack in msgspec's ``deterministic`` order (dict keys sorted;
struct fields in their fixed declaration order), so clients that send the same JSON with keys in
another order share an entry. Pass-through fields arrive as raw JSON and are decoded first, so
their nested key order does not matter either. The digest is BLAKE2b-256: as collision-resistant
as SHA-256, and for material this short it takes about 40 % fewer instructions than hashlib's
SHA-256, whose set-up costs more than hashing a few hundred bytes.
"""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec
from msgspec import UNSET

from proxy.canonical import Call, Principal

Scope = Literal["key", "team", "global"]

FORMAT = 2
"""Bumped whenever the key material or the entry encoding changes, so old entries never match."""

PREFIX = f"crossway:cache:v{FORMAT}:"

_ENCODER = msgspec.msgpack.Encoder(order="deterministic")


def scope_of(principal: Principal, scope: Scope) -> tuple[str, str | None]:
    """Who shares entries with ``principal`` under ``scope``.

    ``team`` falls back to the key when the key belongs to no team (teamless keys never share
    with each other), and ``key`` and ``team`` fall back to ``anonymous`` without an ``auth``
    plugin, where every caller is the same anonymous principal.
    """
    if scope == "global":
        return ("global", None)
    if scope == "team" and principal.team is not None:
        return ("team", principal.team)
    if principal.key_id is not None:
        return ("key", principal.key_id)
    return ("anonymous", None)


def cache_key(call: Call, scope: Scope) -> str:
    """The store key of ``call``'s answer under ``scope`` (``PREFIX`` + 64 hex digits).

    Raises :class:`msgspec.DecodeError` only if a pass-through field is not valid JSON, which
    a dialect never produces.
    """
    params = call.params
    if params.user is not UNSET:
        params = msgspec.structs.replace(params, user=UNSET)
    extra = call.extra
    options = call.options
    material = (  # a fixed order; a tuple encodes as a msgpack array
        scope_of(call.principal, scope),
        call.model,
        call.messages,
        params,
        {name: msgspec.json.decode(raw) for name, raw in extra.items()} if extra else None,
        options.provider,
        options.load_balancer,
    )
    return PREFIX + hashlib.blake2b(_ENCODER.encode(material), digest_size=32).hexdigest()
