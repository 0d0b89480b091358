"""The HTTP layer below the routes: what aiohttp answers on its own, answered as the gateway.

aiohttp answers a request its parser rejects (a control byte in a header, a bad request line, a
line too long) — and a handler exception that escapes — from ``RequestHandler.handle_error``:
``text/plain``, the offending bytes echoed back, a traceback on stderr that may hold the
client's ``Authorization`` header. :class:`GatewayRunner` serves the app with a request handler
that answers those in OpenAI's error shape instead (``invalid_http_request``, or
``internal_error`` for a 500) without echoing a byte of the input, with an ``x-request-id``,
counts them in ``crossway_http_rejected_total{status}`` and logs one line (the exception's
class, never its text). These answers carry ``Server: crossway`` (:data:`SERVER_NAME`) instead
of aiohttp's version banner, as routed ones do: the routes name it in their own headers
(:mod:`proxy.http.answer`, :mod:`proxy.http.dialect_route`, :mod:`proxy.http.edges`), which aiohttp
then leaves as it is, rather than through an ``on_response_prepare`` signal that every response
would pay for. The server's request handler is :class:`~proxy.aiohttp_ext.exact_routes.ExactRoutes`:
the dialect routes without aiohttp's router walk, everything else through the app's own handler.
Request bodies reach the routes as the client sent them: aiohttp's parser does not inflate a
``Content-Encoding`` (it would inflate a bomb whole before any limit applied, and fail on a body
that is not the gzip it claims inside the parser); the routes do, bounded
(:mod:`proxy.http.request_body`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from proxy.aiohttp_ext.exact_routes import ExactRoutes
from proxy.aiohttp_ext.flow_control import ResumeWhenPaused
from proxy.core.errors import BadRequest, GatewayError, InternalError
from proxy.dialects.openai_chat import error_json
from proxy.http.app_keys import DRAIN

SERVER_NAME = "crossway"
"""The ``Server`` header of every answer: the product, no version."""

Rejected = Callable[[int, BaseException | None], None]
"""Told of every request answered below the routes: its status and the exception, if any."""


def reporter(metrics: Any, logger: Callable[[], Any]) -> Rejected:
    """The :data:`Rejected` hook that counts in ``metrics.http_rejected`` and logs one warning
    through ``logger()`` (the current snapshot's): the status, the exception's class, the
    peer-independent facts only (the exception's text may quote the request)."""

    def report(status: int, exc: BaseException | None) -> None:
        metrics.http_rejected(str(status)).inc()
        reason = type(exc).__name__ if exc is not None else None
        logger().warning("http_rejected", status=status, reason=reason)

    return report


class GatewayRequestHandler(ResumeWhenPaused, RequestHandler):
    """aiohttp's connection protocol with the gateway's answer for rejected requests, resuming
    reading only when it was paused (:mod:`proxy.aiohttp_ext.flow_control`), and handing request
    bodies on as they were sent: a content coding is undone by the routes, within the body limit
    (:mod:`proxy.http.request_body`), never by aiohttp's parser."""

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
        """See the module docstring; like aiohttp's, the answer closes the connection."""
        self._on_rejected(status, exc)
        if request.writer.output_size > 0:  # an answer has started: nothing more can be said
            raise ConnectionError("the answer had started; the connection is dropped")
        error: GatewayError
        if status >= 500:
            error = InternalError("internal gateway error")
        else:
            error = BadRequest("malformed HTTP request", code="invalid_http_request")
        response = web.Response(
            status=status,
            body=error_json(error),
            headers={
                "content-type": "application/json",
                "server": SERVER_NAME,
                "x-request-id": str(uuid.uuid4()),
            },
        )
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
    """``web.AppRunner`` serving through :class:`GatewayServer`; ``on_rejected`` is told of
    every request answered below the routes."""

    __slots__ = ("_on_rejected",)

    def __init__(self, app: web.Application, *, on_rejected: Rejected, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._on_rejected = on_rejected

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # the app's start-up runs here
        return GatewayServer(
            # the dialect routes without a walk; every request tracked for the stop's deadline
            ExactRoutes(self.app, plain.request_handler, self.app.get(DRAIN)),
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            on_rejected=self._on_rejected,
            **plain._kwargs,
        )
