"""The admin web UI at ``/ui``: static HTML, CSS and JavaScript modules shipped in the package.

There is no build step and nothing is rendered on the server: ``/ui/`` serves ``index.html``
and ``/ui/<file>`` the files of ``static/`` (read once, when the app is built), and the page's
scripts call the admin API with the master key the operator typed (kept in the tab's
``sessionStorage``, sent as ``Authorization: Bearer``), so the UI can do nothing a script with
that key cannot. ``/ui`` redirects to ``/ui/``; a file that is not in ``static/`` is a 404.

Every answer carries a strict Content-Security-Policy (scripts, styles, images and API calls
from this origin only; no inline script or style, no framing, no form posts elsewhere),
``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``, ``Referrer-Policy:
no-referrer`` and ``Cache-Control: no-cache`` with an ``ETag`` (a 304 when it matches), so an
upgraded gateway never serves a stale script.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from aiohttp import web

from proxy.core.errors import NotFound
from proxy.http.edges import Handler, error_response

STATIC = Path(__file__).resolve().parent / "static"
PREFIX = "/ui"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


class Asset(NamedTuple):
    """One static file, held in memory: its bytes, content type and entity tag."""

    body: bytes
    content_type: str
    etag: str


def load_assets(root: Path = STATIC) -> dict[str, Asset]:
    """Every file under ``root`` by its path relative to it (``js/app.js``); raises
    :class:`OSError` when ``root`` cannot be read (a broken install)."""
    assets: dict[str, Asset] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        body = path.read_bytes()
        kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "text/plain"
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        assets[path.relative_to(root).as_posix()] = Asset(body, kind, etag)
    return assets


def add_ui_routes(
    app: web.Application,
    wrap: Callable[[str, Handler], Handler] = lambda route, handler: handler,
    assets: dict[str, Asset] | None = None,
) -> None:
    """Serve the UI on ``app`` (module docstring); ``wrap(route, handler)`` decorates each
    route (the app's request ids and route metrics)."""
    files = load_assets() if assets is None else assets
    if "index.html" not in files:
        raise OSError(f"the UI's index.html is missing from {STATIC}")

    async def redirect(request: web.Request) -> web.StreamResponse:
        return web.Response(status=308, headers={"Location": f"{PREFIX}/", **SECURITY_HEADERS})

    async def serve(request: web.Request) -> web.StreamResponse:
        name = request.match_info.get("path") or "index.html"
        asset = files.get(name)
        if asset is None:
            error = error_response(NotFound(f"no file {name!r} in the UI"), anthropic_shape=False)
            error.headers.update(SECURITY_HEADERS)
            return error
        headers = {**SECURITY_HEADERS, "Cache-Control": "no-cache", "ETag": asset.etag}
        if request.headers.get("If-None-Match") == asset.etag:
            return web.Response(status=304, headers=headers)
        headers["Content-Type"] = asset.content_type
        return web.Response(body=asset.body, headers=headers)

    app.router.add_get(PREFIX, wrap(PREFIX, redirect))
    route = f"{PREFIX}/{{path:.*}}"
    app.router.add_get(route, wrap(route, serve))
