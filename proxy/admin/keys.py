"""``/admin/keys``: mint, list, read, change and revoke virtual keys.

- ``POST /admin/keys`` (:class:`~proxy.governance.auth.registry.NewKey`) → 201, the record and
``key``,
  the key itself, shown this once.
- ``GET /admin/keys[?team=]`` → ``{"data": [records]}`` (config keys first, then the
  database's, oldest first).
- ``GET /admin/keys?limit=[&cursor=&team=&q=&status=]`` → one page, newest first:
  ``{"data": [records], "next": <cursor or null>, "total": <keys matching>}``; ``limit`` 1 to
  1000, ``q`` a piece of the alias, id, prefix or user, ``status`` ``active``, ``blocked`` or
  ``expired``. The matching config keys lead the first page (beyond ``limit``; ``total``
  counts them). Each record also has ``spend_usd`` (ever charged, from the ledger) and
  ``last_used_at`` (its newest ledger record; null when none).
- ``GET /admin/keys/{id}`` → the record; ``PATCH``
(:class:`~proxy.governance.auth.registry.KeyChanges`)
  → the changed record; ``DELETE`` → 204, the key is revoked. Config keys are read-only (409).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from aiohttp import web

from proxy.admin.guard import ADMIN, admin_route, json_response, read_body
from proxy.core.errors import BadRequest
from proxy.governance.auth.keys_db import KeyFilter
from proxy.governance.auth.records import KeyRecord
from proxy.governance.auth.registry import KeyChanges, NewKey
from proxy.governance.ledger.spend_db import SpendRepository
from proxy.governance.pricing import nanos_to_usd

_MAX_LIMIT = 1000
_STATUSES = ("active", "blocked", "expired")


@admin_route
async def create_key(request: web.Request) -> web.Response:
    """``POST /admin/keys``."""
    new = await read_body(request, NewKey)
    record, key = await request.app[ADMIN].registry().create_key(new)
    return json_response({"key": key, **msgspec.structs.asdict(record)}, status=201)


@admin_route
async def list_keys(request: web.Request) -> web.Response:
    """``GET /admin/keys[?team=]``, or one page of them with ``limit``."""
    query = request.query
    team = query.get("team") or None
    if "limit" not in query and "cursor" not in query:
        return json_response({"data": await request.app[ADMIN].registry().list_keys(team)})
    status = query.get("status") or None
    if status not in (None, *_STATUSES):
        raise BadRequest(f"status: expected one of {', '.join(_STATUSES)}", param="status")
    where = KeyFilter(team=team, text=query.get("q") or None, status=status)
    try:
        records, cursor, total = (
            await request.app[ADMIN]
            .registry()
            .page_keys(where, _limit(query.get("limit")), query.get("cursor"))
        )
    except ValueError:
        raise BadRequest("cursor: not a cursor of this API", param="cursor") from None
    ledger = request.app[ADMIN].ledger
    if ledger is not None:  # a request a client just made shows as the key's last use
        await ledger.flush()
    usage = await SpendRepository(request.app[ADMIN].database).key_usage([r.id for r in records])
    return json_response(
        {"data": [_with_usage(r, usage.get(r.id)) for r in records], "next": cursor, "total": total}
    )


def _limit(value: str | None) -> int:
    try:
        limit = int(value or "")
    except ValueError:
        limit = 0
    if not 1 <= limit <= _MAX_LIMIT:
        raise BadRequest(f"limit: expected an integer from 1 to {_MAX_LIMIT}", param="limit")
    return limit


def _with_usage(record: KeyRecord, usage: tuple[int, datetime] | None) -> dict[str, Any]:
    shown = msgspec.structs.asdict(record)
    shown["spend_usd"] = nanos_to_usd(usage[0]) if usage else 0.0
    shown["last_used_at"] = usage[1] if usage else None
    return shown


@admin_route
async def get_key(request: web.Request) -> web.Response:
    """``GET /admin/keys/{id}``."""
    return json_response(await request.app[ADMIN].registry().get_key(request.match_info["id"]))


@admin_route
async def update_key(request: web.Request) -> web.Response:
    """``PATCH /admin/keys/{id}``."""
    changes = await read_body(request, KeyChanges)
    registry = request.app[ADMIN].registry()
    return json_response(await registry.update_key(request.match_info["id"], changes))


@admin_route
async def delete_key(request: web.Request) -> web.Response:
    """``DELETE /admin/keys/{id}``."""
    await request.app[ADMIN].registry().delete_key(request.match_info["id"])
    return web.Response(status=204)


ROUTES = (
    ("POST", "/admin/keys", create_key),
    ("GET", "/admin/keys", list_keys),
    ("GET", "/admin/keys/{id}", get_key),
    ("PATCH", "/admin/keys/{id}", update_key),
    ("DELETE", "/admin/keys/{id}", delete_key),
)
