"""``/admin/teams``: teams, whose keys share the team's model list and limits.

- ``POST /admin/teams`` (:class:`~proxy.governance.auth.registry.NewTeam`) → 201, the record.
- ``GET /admin/teams`` → ``{"data": [records]}`` (config teams first).
- ``GET /admin/teams/{id}``; ``PATCH`` (:class:`~proxy.governance.auth.registry.TeamChanges`);
  ``DELETE`` → 204 (409 while the team has keys). Config teams are read-only (409).
"""

from __future__ import annotations

from aiohttp import web

from proxy.admin.guard import ADMIN, admin_route, json_response, read_body
from proxy.governance.auth.registry import NewTeam, TeamChanges


@admin_route
async def create_team(request: web.Request) -> web.Response:
    """``POST /admin/teams``."""
    new = await read_body(request, NewTeam)
    return json_response(await request.app[ADMIN].registry().create_team(new), status=201)


@admin_route
async def list_teams(request: web.Request) -> web.Response:
    """``GET /admin/teams``."""
    return json_response({"data": await request.app[ADMIN].registry().list_teams()})


@admin_route
async def get_team(request: web.Request) -> web.Response:
    """``GET /admin/teams/{id}``."""
    return json_response(await request.app[ADMIN].registry().get_team(request.match_info["id"]))


@admin_route
async def update_team(request: web.Request) -> web.Response:
    """``PATCH /admin/teams/{id}``."""
    changes = await read_body(request, TeamChanges)
    registry = request.app[ADMIN].registry()
    return json_response(await registry.update_team(request.match_info["id"], changes))


@admin_route
async def delete_team(request: web.Request) -> web.Response:
    """``DELETE /admin/teams/{id}``."""
    await request.app[ADMIN].registry().delete_team(request.match_info["id"])
    return web.Response(status=204)


ROUTES = (
    ("POST", "/admin/teams", create_team),
    ("GET", "/admin/teams", list_teams),
    ("GET", "/admin/teams/{id}", get_team),
    ("PATCH", "/admin/teams/{id}", update_team),
    ("DELETE", "/admin/teams/{id}", delete_team),
)
