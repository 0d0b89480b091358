"""OpenAI's cursor pages: the ``{"object": "list", "data", "first_id", "last_id", "has_more"}``
body the list routes answer, and the ``limit`` and ``order`` query parameters they take.

An empty page has ``""`` as ``first_id`` and ``last_id`` (OpenAI's schema makes both required
strings). A ``limit`` that is not a whole number of at least 1, or an ``order`` other than
``asc`` / ``desc``, is a 400 naming it; a ``limit`` above the route's bound is served as the
bound (``has_more`` says what follows).
"""

from __future__ import annotations

import msgspec

from proxy.core.errors import BadRequest
from proxy.stored.chat_store import Order

DEFAULT_LIMIT = 20
_ENCODER = msgspec.json.Encoder()


def page_of(items: list[bytes], ids: list[str], more: bool) -> bytes:
    """The list body of ``items`` (each an encoded JSON object) whose ids are ``ids``."""
    first, last = (ids[0], ids[-1]) if ids else ("", "")
    return b"".join(
        (
            b'{"object":"list","data":[',
            b",".join(items),
            b'],"first_id":',
            _ENCODER.encode(first),
            b',"last_id":',
            _ENCODER.encode(last),
            b',"has_more":',
            b"true" if more else b"false",
            b"}",
        )
    )


def query_limit(raw: str | None, bound: int) -> int:
    """The ``limit`` query parameter (:data:`DEFAULT_LIMIT` when absent), at most ``bound``."""
    if raw is None:
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise BadRequest(f"limit must be an integer, not {raw[:32]!r}", param="limit") from None
    if limit < 1:
        raise BadRequest("limit must be at least 1", param="limit")
    return min(limit, bound)


def query_order(raw: str | None) -> Order:
    """The ``order`` query parameter: ``asc`` (the default) or ``desc``."""
    if raw is None or raw == "asc":
        return "asc"
    if raw == "desc":
        return "desc"
    raise BadRequest("order must be 'asc' or 'desc'", param="order")
