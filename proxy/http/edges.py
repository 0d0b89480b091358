"""What every HTTP answer gets, whatever the route: a request id, CORS, and metrics.

- **Request ids.** Every response carries ``x-request-id``: the client's, if it sent a sane one
  (printable ASCII, at most 128 characters), else a fresh one (:class:`RequestIds`). The dialect
  routes set it themselves (their pipeline logs it); every other route gets it here.
- **Routes outside the dialects** (``/v1/models``, ``/metrics``, ``/health/*``) and requests no
  route takes are counted in ``crossway_http_requests_total{route, status_class}``. ``route`` is
  a registered path, or ``unmatched`` for a path no route has, so clients cannot grow the label
  set. An unknown path is a 404, a known path with the wrong method a 405 whose ``Allow`` header
  lists the methods it takes (:meth:`HttpEdges.unmatched`), both as OpenAI error bodies — or
  Anthropic's, for an Anthropic client (:func:`is_anthropic_request`).
- **CORS**, only when ``server.cors`` is configured: a preflight (``OPTIONS`` with ``Origin``
  and ``Access-Control-Request-Method``) on a known path is answered 204 with the allowed
  methods, headers and max age, or 403 for an origin not allowed; every response to an allowed
  origin, streams included, carries ``Access-Control-Allow-Origin`` (and the exposed headers).
  Without the setting no CORS header is ever sent and ``OPTIONS`` is a 405.

- **``Server: crossway``** (:data:`~proxy.core.headers.SERVER_NAME`) on every answer of these
  routes, aiohttp's own included (an ``HTTPException`` such as a body over the size limit),
  instead of aiohttp's version banner; the dialect routes name it themselves.

These are route wrappers and a response-prepare hook rather than aiohttp middlewares, so that
the dialect routes, the hot path, pay nothing for them (CORS costs one hook per response, and
only when configured).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web

from proxy.core.errors import GatewayError, MethodNotAllowed, NotFound, PermissionDenied
from proxy.core.headers import SERVER_NAME
from proxy.core.metrics import Metrics
from proxy.dialects import anthropic_replies
from proxy.dialects.openai_chat import error_json
from proxy.runtime.config import CorsConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REQUEST_ID = "x-request-id"
SERVER_HEADER = "server"
UNMATCHED = "unmatched"
MAX_REQUEST_ID = 128
_LOW_COUNT = 0xFFFFFFFFFFFF  # the last group's 12 hex digits
_JSON = "application/json"


class RequestIds:
    """Request ids: the client's when sane, else a random per-process prefix and a counter
    (unique, cheap, not secret)."""

    __slots__ = ("_counter", "_prefix", "_short_prefix")

    def __init__(self) -> None:
        prefix = uuid.uuid4().hex[:16]
        self._prefix = f"{prefix[:8]}-{prefix[8:12]}-{prefix[12:]}-"
        self._short_prefix = f"{self._prefix}0000-"  # for counts below 2**48: one format
        self._counter = itertools.count(1)

    def __call__(self, request: web.Request) -> str:
        """The client's ``x-request-id`` if it is sane, else a fresh one in UUID form
        (8-4-4-4-12 hex digits, as Fabro's schema asks of its ``request_id``)."""
        given = request.headers.get(REQUEST_ID)
        if given and len(given) <= MAX_REQUEST_ID and given.isascii() and given.isprintable():
            return given
        n = next(self._counter)
        if n <= _LOW_COUNT:
            return f"{self._short_prefix}{n:012x}"
        return f"{self._prefix}{n >> 48 & 0xFFFF:04x}-{n & _LOW_COUNT:012x}"


class HttpEdges:
    """The request ids, route metrics and CORS of one app; see the module docstring."""

    def __init__(self, metrics: Metrics, cors: CorsConfig | None) -> None:
        self.request_id = RequestIds()
        self._metrics = metrics
        self._cors = cors

    def install(self, app: web.Application) -> None:
        """Add the CORS hook to ``app`` when CORS is configured (else nothing)."""
        if self._cors is not None:
            app.on_response_prepare.append(self._add_cors)

    def plain(self, route: str, handler: Handler) -> Handler:
        """``handler`` with ``x-request-id`` on its answer, counted under ``route``."""

        async def serve(request: web.Request) -> web.StreamResponse:
            request_id = self.request_id(request)
            try:
                response = await handler(request)
            except web.HTTPException as answer:  # aiohttp's own (a body over its size limit)
                answer.headers[SERVER_HEADER] = SERVER_NAME
                raise
            return self._finish(response, route, request_id)

        return serve

    async def unmatched(self, request: web.Request) -> web.StreamResponse:
        """The catch-all route: a CORS preflight, a 405 with ``Allow`` on a known path, or a
        404 (see the module docstring)."""
        request_id = self.request_id(request)
        route, methods = await _route_of(request)
        if route is None:
            error = NotFound(f"no route for {request.method} {request.path}")
            return self._finish(_error(error, request), UNMATCHED, request_id)
        if self._cors is not None and _is_preflight(request):
            return self._finish(self._preflight(request, methods), route, request_id)
        not_allowed = MethodNotAllowed(f"{request.method} is not allowed on {request.path}")
        response = _error(not_allowed, request)
        response.headers["Allow"] = ", ".join(methods)
        return self._finish(response, route, request_id)

    def _finish(
        self, response: web.StreamResponse, route: str, request_id: str
    ) -> web.StreamResponse:
        if not response.prepared:
            headers = response.headers
            headers[SERVER_HEADER] = SERVER_NAME
            if REQUEST_ID not in headers:  # unless the handler named it already
                headers[REQUEST_ID] = request_id
        self._metrics.http_requests(route, f"{response.status // 100}xx").inc()
        return response

    def _preflight(self, request: web.Request, methods: list[str]) -> web.Response:
        cors = self._cors
        assert cors is not None
        if _allowed_origin(cors, request.headers["Origin"]) is None:
            error = PermissionDenied(f"origin {request.headers['Origin']!r} is not allowed")
            return _error(error, request)
        asked = request.headers.get("Access-Control-Request-Headers", "")
        headers = asked if cors.allow_headers == ("*",) else ", ".join(cors.allow_headers)
        response = web.Response(status=204)
        response.headers["Access-Control-Allow-Methods"] = ", ".join([*methods, "OPTIONS"])
        if headers:
            response.headers["Access-Control-Allow-Headers"] = headers
        response.headers["Access-Control-Max-Age"] = str(cors.max_age)
        return response

    async def _add_cors(self, request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get("Origin")
        if origin is None:
            return
        cors = self._cors
        assert cors is not None
        allowed = _allowed_origin(cors, origin)
        headers = response.headers
        vary = headers.get("Vary")
        headers["Vary"] = "Origin" if not vary else f"{vary}, Origin"
        if allowed is None:
            return
        headers["Access-Control-Allow-Origin"] = allowed
        if cors.allow_credentials:
            headers["Access-Control-Allow-Credentials"] = "true"
        if cors.expose_headers:
            headers["Access-Control-Expose-Headers"] = ", ".join(cors.expose_headers)


def _allowed_origin(cors: CorsConfig, origin: str) -> str | None:
    """The ``Access-Control-Allow-Origin`` value for ``origin``, or None if it is not allowed."""
    if "*" in cors.allow_origins:
        return origin if cors.allow_credentials else "*"
    return origin if origin in cors.allow_origins else None


def _is_preflight(request: web.Request) -> bool:
    headers = request.headers
    return (
        request.method == "OPTIONS"
        and "Origin" in headers
        and "Access-Control-Request-Method" in headers
    )


async def _route_of(request: web.Request) -> tuple[str | None, list[str]]:
    """The route template that ``request.path`` matches (``/v1/responses/{response_id}``) and
    the methods its routes take (sorted), or ``(None, [])`` if no route but the catch-all has
    that path."""
    catch_all = request.match_info.route.resource
    route: str | None = None
    methods: set[str] = set()
    for resource in request.app.router.resources():
        if resource is catch_all:
            continue
        _, allowed = await resource.resolve(request)
        if allowed:
            route = route or resource.canonical
            methods |= allowed
    return route, sorted(methods)


def is_anthropic_request(request: web.Request) -> bool:
    """Whether an Anthropic client sent ``request``: an Anthropic path (``/v1/messages…``), or
    the ``anthropic-version`` header every Anthropic SDK sends. Its errors use Anthropic's shape."""
    return request.path.startswith("/v1/messages") or "anthropic-version" in request.headers


def error_response(
    error: GatewayError, *, anthropic_shape: bool, request_id: str | None = None
) -> web.Response:
    """``error`` in OpenAI's or Anthropic's error shape, with its status and retry headers, and
    ``request_id`` (when given) as ``x-request-id`` and, for Anthropic's SDKs, ``request-id``."""
    headers = error.response_headers()
    if request_id is not None:
        headers[REQUEST_ID] = request_id
    if anthropic_shape:
        body = anthropic_replies.error_json(error, request_id)
        if request_id is not None:
            headers["request-id"] = request_id
    else:
        body = error_json(error)
    return web.Response(status=error.status, body=body, content_type=_JSON, headers=headers)


def _error(error: GatewayError, request: web.Request) -> web.Response:
    return error_response(error, anthropic_shape=is_anthropic_request(request))
