"""The admin API: JSON routes under ``/admin``, guarded by the master key.

One module per group of routes (``keys``, ``teams``, ``spend``, ``system``, ``overview``,
``models``, ``requests``, ``mcp``), each listing its
``ROUTES`` as (method, path, handler); :mod:`proxy.admin.guard` holds what they share (the
guard, JSON in and out, errors). A new group is one module plus one entry in :data:`GROUPS`.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from proxy.admin import keys, mcp, models, overview, requests, spend, system, teams
from proxy.admin.guard import ADMIN, AdminContext, Handler

GROUPS = (keys, teams, spend, system, overview, models, requests, mcp)


def add_admin_routes(
    app: web.Application,
    context: AdminContext,
    wrap: Callable[[str, Handler], Handler] = lambda route, handler: handler,
) -> None:
    """Serve the admin API on ``app`` with ``context``; ``wrap(path, handler)`` decorates each
    route (the app's request ids and route metrics)."""
    app[ADMIN] = context
    for group in GROUPS:
        for method, path, handler in group.ROUTES:
            app.router.add_route(method, path, wrap(path, handler))
