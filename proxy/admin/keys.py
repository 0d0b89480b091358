"""``/admin/keys``: mint, list, read, change and revoke virtual keys.

- ``POST /admin/keys`` (:class:`~proxy.auth.registry.NewKey`) → 201, the record and ``key``,
  the key itself, shown this once.
- ``GET /admin/keys[?team=]`` → ``{"data": [records]}`` (config keys first).
- ``GET /admin/keys/{id}`` → the record; ``PATCH`` (:class:`~proxy.auth.registry.KeyChanges`)
  → the changed record; ``DELETE`` → 204, the key is revoked. Config keys are read-only (409).
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from proxy.admin.guard import ADMIN, admin_route, json_response, read_body
from proxy.auth.registry import KeyChanges, NewKey


@admin_route
async def create_key(request: web.Request) -> web.Response:
    """``POST /admin/keys``."""
    new = await read_body(request, NewKey)
    record, key = await request.app[ADMIN].registry().create_key(new)
    return json_response({"key": key, **msgspec.structs.asdict(record)}, status=201)


@admin_route
async def list_keys(request: web.Request) -> web.Response:
    """``GET /admin/keys[?team=]``."""
    team = request.query.get("team")
    return json_response({"data": await request.app[ADMIN].registry().list_keys(team)})


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
