"""The app's fixed-path ``POST`` routes, found by one dict lookup instead of aiohttp's router.

For every request, aiohttp's ``Application._handle`` asks the event loop for itself (on CPython
3.11 a ``getpid`` system call), walks the router's resource index with two coroutine levels per
candidate, builds a match-info object, stacks the application on it and freezes it, then looks
for middlewares. The dialect routes — the gateway's hot path — are ``POST`` routes on fixed
paths, with no middlewares (the gateway has none: :mod:`proxy.http.edges` wraps routes instead).
In a bare aiohttp app that answers a small body, that walk is about an eighth of a request's CPU.

:class:`ExactRoutes` is the server's request handler: a ``POST`` whose raw target is exactly the
path of a fixed-path ``POST`` route, and that does not ask for ``100-continue``, goes straight
to the route's handler, with a match-info built once per route at start-up (so
``request.match_info``, ``request.app`` and the ``on_response_prepare`` signals — CORS — see
what they always did). Everything else — another method, a query string, a percent-encoded or
dot-segment path, a variable route, ``Expect`` — takes aiohttp's own path, which answers it as
before (405, the catch-all route, 100-continue). A raw target that equals a route's path is a
path the router would have matched to that route, so no request is answered differently.

It leans on one aiohttp internal, the request's ``_match_info`` attribute, which ``_handle``
sets the same way; ``tests/proxy/aiohttp_ext/test_exact_routes.py`` pins the behaviour.

Every request, whichever path it takes, is entered into a :class:`RequestTracker` (the app's
:class:`~proxy.http.drain.Drain`) until its answer is written, so that a stop can end the ones
still running at its deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import hdrs, web
from aiohttp.web_urldispatcher import PlainResource, UrlMappingMatchInfo

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class RequestTracker(Protocol):
    """Tracks the current request's task until it is done (:class:`proxy.http.drain.Drain`)."""

    def enter(self) -> None:
        """Track the task running now, a request's."""
        ...


class _Untracked:
    """No tracking: for a server whose stop has no deadline to keep."""

    __slots__ = ()

    def enter(self) -> None:
        """Track nothing."""


class ExactRoutes:
    """The request handler for ``app``: its fixed-path ``POST`` routes directly, the rest
    through ``fallback`` (the application's own handler), each request entered into ``drain``
    (none when None). Build it once the app's routes are all added (its router
    frozen)."""

    __slots__ = ("_drain", "_fallback", "_routes")

    def __init__(
        self, app: web.Application, fallback: Handler, drain: RequestTracker | None = None
    ) -> None:
        self._drain: RequestTracker = _Untracked() if drain is None else drain
        self._fallback = fallback
        self._routes: dict[str, tuple[Handler, UrlMappingMatchInfo]] = {}
        for resource in app.router.resources():
            if not isinstance(resource, PlainResource):
                continue
            path = resource.canonical
            for route in resource:
                if route.method == hdrs.METH_POST and path not in self._routes:
                    match_info = UrlMappingMatchInfo({}, route)
                    match_info.add_app(app)
                    match_info.freeze()
                    self._routes[path] = (route.handler, match_info)

    @property
    def paths(self) -> frozenset[str]:
        """The paths answered directly."""
        return frozenset(self._routes)

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self._drain.enter()
        if request.method == hdrs.METH_POST:
            found = self._routes.get(request.raw_path)
            if found is not None and hdrs.EXPECT not in request.headers:
                handler, match_info = found
                request._match_info = match_info  # as Application._handle sets it
                return await handler(request)
        return await self._fallback(request)
