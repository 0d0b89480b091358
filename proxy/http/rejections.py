"""The answer to a request rejected below the routes (aiohttp's parser refused it, or a handler
exception escaped): OpenAI's error shape — ``invalid_http_request``, or ``internal_error`` for a
500 — without echoing a byte of the input, with an ``x-request-id`` and ``Server: crossway``;
counted in ``crossway_http_rejected_total{status}`` and logged as one line (the exception's
class, never its text, which may quote the request).
:class:`~proxy.aiohttp_ext.server.GatewayRunner` calls it; it closes the connection after sending
it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from proxy.aiohttp_ext.server import Rejected
from proxy.core.errors import BadRequest, GatewayError, InternalError
from proxy.core.headers import SERVER_NAME
from proxy.dialects.openai_chat import error_json


def rejection_answers(metrics: Any, logger: Callable[[], Any]) -> Rejected:
    """The :data:`~proxy.aiohttp_ext.server.Rejected` hook that counts in
    ``metrics.http_rejected``, logs one warning through ``logger()`` (the current snapshot's) and
    builds the answer; it never raises."""

    def answer(status: int, exc: BaseException | None) -> web.StreamResponse:
        metrics.http_rejected(str(status)).inc()
        reason = type(exc).__name__ if exc is not None else None
        logger().warning("http_rejected", status=status, reason=reason)
        error: GatewayError
        if status >= 500:
            error = InternalError("internal gateway error")
        else:
            error = BadRequest("malformed HTTP request", code="invalid_http_request")
        return web.Response(
            status=status,
            body=error_json(error),
            headers={
                "content-type": "application/json",
                "server": SERVER_NAME,
                "x-request-id": str(uuid.uuid4()),
            },
        )

    return answer
