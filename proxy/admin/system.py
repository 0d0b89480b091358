"""``POST /admin/reload``: re-read the config file, as SIGHUP does.

200 ``{"status": "reloaded"}`` when the new config serves; 400 ``config_invalid`` when it does
not — it is invalid, or weaker than the serving one without its consent
(:func:`proxy.runtime.snapshot.weakenings`) — and the old one keeps serving (the errors are in the
log, as for SIGHUP).
"""

from __future__ import annotations

from aiohttp import web

from proxy.admin.guard import ADMIN, admin_route, json_response
from proxy.core.errors import BadRequest


@admin_route
async def reload(request: web.Request) -> web.Response:
    """``POST /admin/reload``."""
    if not request.app[ADMIN].reload():
        raise BadRequest(
            "the config file was not loaded (invalid, or weaker than the serving config):"
            " the old config keeps serving (see the log)",
            code="config_invalid",
        )
    return json_response({"status": "reloaded"})


ROUTES = (("POST", "/admin/reload", reload),)
