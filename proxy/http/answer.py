"""What a dialect route's answers share, whole or streamed: the request's :class:`Outcome`,
:data:`CLIENT_CLOSED`, and the headers every successful answer carries (:func:`reply_headers`).

A module of its own so that the request pipeline (:mod:`proxy.http.dialect_route`) and the streamed
answer (:mod:`proxy.http.sse_answer`) can both use them without importing each other.
"""

from __future__ import annotations

import time

from proxy.core.canonical import ANONYMOUS, Call, Principal, Usage
from proxy.core.errors import GatewayError, drop_tracebacks
from proxy.core.headers import OVERHEAD_HEADER, SERVER_NAME
from proxy.core.reply import Reply
from proxy.dialects.base import Dialect
from proxy.http.edges import REQUEST_ID, SERVER_HEADER

CLIENT_CLOSED = 499  # nginx's convention for "the client went away"


class Outcome:
    """What one request did, for its metrics, access line and finished hooks.

    A failure is kept as its code and message (:meth:`failed`), never as the exception: an
    exception's traceback holds the frames of the request's handler, whose locals hold this
    outcome (and the body, the call, what the upstream sent), a reference cycle that only the
    garbage collector's rare full passes would free. :meth:`failed` also lets go of the error's
    traceback (:func:`~proxy.core.errors.drop_tracebacks`), for the places that keep the exception
    itself.
    """

    __slots__ = (
        "attempts",
        "error_code",
        "error_message",
        "model",
        "principal",
        "provider",
        "status",
        "upstream_model",
        "usage",
    )

    def __init__(self) -> None:
        self.principal: Principal = ANONYMOUS  # known before the body is decoded
        self.status = 500
        self.model = "none"
        self.provider = "none"
        self.upstream_model: str | None = None
        self.attempts = 0
        self.usage: Usage | None = None
        self.error_code: str | None = None
        self.error_message: str | None = None

    def failed(self, error: GatewayError, status: int) -> None:
        """Record that the request ended with ``error``, answered with ``status``, and drop the
        tracebacks of ``error``'s chain (:func:`~proxy.core.errors.drop_tracebacks`)."""
        self.status = status
        self.error_code = error.code
        self.error_message = error.message
        drop_tracebacks(error)


def reply_headers(dialect: Dialect, call: Call, reply: Reply, request_id: str) -> dict[str, str]:
    """The headers of a successful answer: the server's name, the request id, the gateway's
    overhead so far (:func:`overhead_ms`), who served it, the dialect's own, and the reply's
    extra ones (a plugin's)."""
    timings = call.timings
    headers = {
        SERVER_HEADER: SERVER_NAME,  # instead of aiohttp's banner (see proxy.core.headers)
        REQUEST_ID: request_id,
        OVERHEAD_HEADER: overhead_ms(timings.start, timings.upstream_wait),
        "x-crossway-provider": reply.provider,
        "x-crossway-model": f"{reply.provider}/{reply.model}",
        **dialect.response_headers(call, reply),
    }
    if reply.headers:
        headers.update(reply.headers)
    return headers


def overhead_ms(start: float, upstream_wait: float) -> str:
    """The ``x-crossway-overhead-ms`` value now: milliseconds since ``start``
    (``time.perf_counter``) minus ``upstream_wait`` seconds, to the microsecond, never negative."""
    overhead = time.perf_counter() - start - upstream_wait
    return f"{overhead * 1000:.3f}" if overhead > 0 else "0.000"
