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
(:mod:`proxy.answer`, :mod:`proxy.dialect_route`, :mod:`proxy.middleware`), which aiohttp then
leaves as it is, rather than through an ``on_response_prepare`` signal that every response
would pay for. The server's request handler is :class:`~proxy.exact_routes.ExactRoutes`: the
dialect routes without aiohttp's router walk, everything else through the app's own handler.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from proxy.dialects.openai_chat import error_json
from proxy.errors import BadRequest, GatewayError, InternalError
from proxy.exact_routes import ExactRoutes
from proxy.flow_control import ResumeWhenPaused

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
    reading only when it was paused (:mod:`proxy.flow_control`)."""

    __slots__ = ("_on_rejected",)

    def __init__(self, manager: web.Server, *, on_rejected: Rejected, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._on_rejected = on_rejected

    def data_received(self, data: bytes) -> None:
        """As aiohttp's; and when the parser rejects the rest of a body that a handler is
        already reading, that read fails at once with ``RequestPayloadError`` (the route's 400)
        rather than waiting out its timeout for bytes that never come. aiohttp reports such a
        body — a ``deflate`` one that ends unfinished — only as a new, malformed message
        queued behind the request; a whole request in one read never reaches a handler."""
        request = self._current_request
        if request is None:
            super().data_received(data)
            return
        queued = len(self._messages)
        super().data_received(data)
        body = request.content
        if len(self._messages) > queued and not body.is_eof() and body.exception() is None:
            body.set_exception(web.RequestPayloadError("the request body is malformed"))

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """As aiohttp's, but silent for a body that nobody read and that turns out malformed
        when aiohttp discards it after the answer (a 401 sent before the body was read): the
        client has its answer, and the connection closes; no traceback for the client's bytes."""
        if isinstance(kwargs.get("exc_info"), web.RequestPayloadError):
            return
        super().log_exception(*args, **kwargs)

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
            ExactRoutes(self.app, plain.request_handler),  # the dialect routes without a walk
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            on_rejected=self._on_rejected,
            **plain._kwargs,
        )
