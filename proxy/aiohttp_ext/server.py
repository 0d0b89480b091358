"""The server side below the routes: aiohttp's connection handler and runner, with the gateway's
own answer for what aiohttp would answer itself.

aiohttp answers a request its parser rejects (a control byte in a header, a bad request line, a
line too long) — and a handler exception that escapes — from ``RequestHandler.handle_error``:
``text/plain``, the offending bytes echoed back, a traceback on stderr that may hold the
client's ``Authorization`` header. :class:`GatewayRunner` serves the app with a request handler
that hands those to its ``on_rejected`` hook instead, which returns the answer
(:func:`proxy.http.rejections.rejection_answers`: OpenAI's error shape, nothing of the input
echoed); the answer closes the connection. The server's request handler is
:class:`~proxy.aiohttp_ext.exact_routes.ExactRoutes`: the dialect routes without aiohttp's router
walk, everything else through the app's own handler, every request tracked for the stop's
deadline. Request bodies reach the routes as the client sent them: aiohttp's parser does not
inflate a ``Content-Encoding`` (it would inflate a bomb whole before any limit applied, and fail
on a body that is not the gzip it claims inside the parser); the routes do, bounded
(:mod:`proxy.http.request_body`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from proxy.aiohttp_ext.exact_routes import ExactRoutes, RequestTracker
from proxy.aiohttp_ext.flow_control import ResumeWhenPaused

Rejected = Callable[[int, BaseException | None], web.StreamResponse]
"""Told of every request answered below the routes — its status and the exception, if any — and
returns the answer to send."""


class GatewayRequestHandler(ResumeWhenPaused, RequestHandler):
    """aiohttp's connection protocol answering rejected requests through ``on_rejected``,
    resuming reading only when it was paused (:mod:`proxy.aiohttp_ext.flow_control`), and handing
    request bodies on as they were sent: a content coding is undone by the routes, within the
    body limit (:mod:`proxy.http.request_body`), never by aiohttp's parser."""

    __slots__ = ("_on_rejected",)

    def __init__(self, manager: web.Server, *, on_rejected: Rejected, **kwargs: Any) -> None:
        super().__init__(manager, **{**kwargs, "auto_decompress": False})
        self._on_rejected = on_rejected

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """See the module docstring; like aiohttp's, the answer closes the connection. When an
        answer has already started, nothing more can be said: the connection is dropped."""
        response = self._on_rejected(status, exc)
        if request.writer.output_size > 0:
            raise ConnectionError("the answer had started; the connection is dropped")
        response.force_close()
        return response


class GatewayServer(web.Server):
    """``web.Server`` whose connections use :class:`GatewayRequestHandler`."""

    def __init__(self, handler: Any, *, on_rejected: Rejected, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._on_rejected = on_rejected

    def __call__(self) -> RequestHandler:
        # As web.Server.__call__, with the gateway's handler class.
        return GatewayRequestHandler(
            self, loop=self._loop, on_rejected=self._on_rejected, **self._kwargs
        )


class GatewayRunner(web.AppRunner):
    """``web.AppRunner`` serving through :class:`GatewayServer`; ``on_rejected`` answers every
    request rejected below the routes, ``drain`` tracks every request (a private tracker when
    None)."""

    __slots__ = ("_drain", "_on_rejected")

    def __init__(
        self,
        app: web.Application,
        *,
        on_rejected: Rejected,
        drain: RequestTracker | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self._on_rejected = on_rejected
        self._drain = drain

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # the app's start-up runs here
        return GatewayServer(
            ExactRoutes(self.app, plain.request_handler, self._drain),
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            on_rejected=self._on_rejected,
            **plain._kwargs,
        )
