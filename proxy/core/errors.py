"""The gateway's one error hierarchy.

Every failure a client can see is a :class:`GatewayError`: it carries the HTTP status, a stable
machine-readable ``code``, an OpenAI-style ``type``, the offending ``param`` where there is one,
and retry hints. Each dialect maps these once to its own error JSON; nothing else formats errors.
Messages must never contain secrets: upstream text is sanitised before it becomes a message.

``kind`` classifies failures for the reliability plugins (retry, fallback): it says *what went
wrong*, independent of the status code a dialect shows.

This module imports nothing else of the project.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

ErrorKind = Literal[
    "bad_request",
    "auth",
    "permission",
    "not_found",
    "too_large",
    "rate_limited",
    "overloaded",
    "context_window",
    "content_policy",
    "upstream_client",
    "upstream_server",
    "connection",
    "timeout",
    "not_ready",
    "internal",
]


class GatewayError(Exception):
    """Base of every error the gateway reports to a client.

    ``retry_after`` (seconds) becomes a ``Retry-After`` header; ``should_retry`` becomes
    ``x-should-retry`` when not None. Subclasses fix ``status``, ``type``, ``code`` and ``kind``;
    an instance may override ``status`` and ``code``.
    """

    status: ClassVar[int] = 500
    type: ClassVar[str] = "api_error"
    default_code: ClassVar[str] = "internal_error"
    kind: ClassVar[ErrorKind] = "internal"
    attempts: int = 1
    """Upstream calls made before this error was raised; retry and fallback set the total."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        should_retry: bool | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.default_code
        if status is not None:
            self.status = status  # type: ignore[misc]  # instance override of the class default
        self.retry_after = retry_after
        self.should_retry = should_retry
        self.provider = provider

    def response_headers(self) -> dict[str, str]:
        """Headers that go with this error in any dialect."""
        headers: dict[str, str] = {}
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(0, math.ceil(self.retry_after)))
        if self.should_retry is not None:
            headers["x-should-retry"] = "true" if self.should_retry else "false"
        return headers


def drop_tracebacks(error: BaseException) -> None:
    """Drop the traceback of ``error`` and of every exception in its chain (``__cause__``,
    ``__context__``, a group's members); call it once a request's failure is answered (and
    logged, if it is: a dropped traceback cannot be formatted), or when an error is replaced by
    the gateway's own.

    A traceback holds the frames the exception went through, and they hold their locals: the
    request's body, an upstream's buffered bytes, the object that kept the exception. An error
    kept where one of those frames can reach it (a shared stream's failure, re-raised to each of
    its readers; a retry's last error; a library's error kept in its own frames) is then a
    reference cycle that only the garbage collector frees, rarely once the worker has raised
    its thresholds (``proxy.server.supervisor.tune_gc``), with megabytes behind a few objects.
    Without the tracebacks every frame is freed by reference counting when the request ends.
    """
    pending = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:  # a chain may loop back on itself
            continue
        seen.add(id(current))
        current.__traceback__ = None
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)


class BadRequest(GatewayError):
    """The request is malformed or invalid (400); ``param`` names the field."""

    status = 400
    type = "invalid_request_error"
    default_code = "invalid_request"
    kind = "bad_request"


class AuthenticationFailed(GatewayError):
    """The client's credentials are missing or wrong (401)."""

    status = 401
    type = "authentication_error"
    default_code = "invalid_api_key"
    kind = "auth"


class PermissionDenied(GatewayError):
    """The client may not do this (403)."""

    status = 403
    type = "permission_error"
    default_code = "permission_denied"
    kind = "permission"


class NotFound(GatewayError):
    """The route does not exist (404)."""

    status = 404
    type = "invalid_request_error"
    default_code = "not_found"
    kind = "not_found"


class ModelNotFound(NotFound):
    """No alias, and no configured provider, matches the requested model (404)."""

    default_code = "model_not_found"


class MethodNotAllowed(GatewayError):
    """The route exists but not for this HTTP method (405)."""

    status = 405
    type = "invalid_request_error"
    default_code = "method_not_allowed"
    kind = "bad_request"


class Conflict(GatewayError):
    """The request conflicts with what exists (409): an id already taken, a record the
    config file owns."""

    status = 409
    type = "invalid_request_error"
    default_code = "conflict"
    kind = "bad_request"


class RequestTimeout(GatewayError):
    """The client did not send its body in time (408)."""

    status = 408
    type = "invalid_request_error"
    default_code = "request_timeout"
    kind = "bad_request"


class UndecodableBody(BadRequest):
    """The request body does not decode as its ``Content-Encoding`` says (400): the message
    is fixed, for the body is never quoted."""

    default_code = "invalid_content_encoding"

    def __init__(self) -> None:
        super().__init__("the request body does not decode as its Content-Encoding says")


class PayloadTooLarge(GatewayError):
    """The request body exceeds the configured limit (413)."""

    status = 413
    type = "invalid_request_error"
    default_code = "request_too_large"
    kind = "too_large"


class RateLimited(GatewayError):
    """Too many requests (429), from the gateway's limits or an upstream's."""

    status = 429
    type = "rate_limit_error"
    default_code = "rate_limit_exceeded"
    kind = "rate_limited"


class BudgetExceeded(GatewayError):
    """A key, team or end user has spent its budget (429, never worth retrying before the
    reset the message names: ``x-should-retry: false``)."""

    status = 429
    type = "budget_exceeded"
    default_code = "budget_exceeded"
    kind = "rate_limited"

    def __init__(self, message: str, *, scope: str) -> None:
        super().__init__(message, should_retry=False)
        self.scope = scope

    def response_headers(self) -> dict[str, str]:
        """``x-should-retry: false`` and the scope that refused (``key``, ``team``, ``user``)."""
        headers = super().response_headers()
        headers["x-crossway-budget-scope"] = self.scope
        return headers


class BudgetUnavailable(GatewayError):
    """A budget cannot be checked because the state store is down, and budgets fail closed
    (503)."""

    status = 503
    type = "api_error"
    default_code = "state_unavailable"  # as limits answer, and as the scale-out issue names it
    kind = "internal"


class NoReadyDeployment(GatewayError):
    """The model is known but none of its providers is ready (no credentials, ejected) (503)."""

    status = 503
    type = "api_error"
    default_code = "no_ready_deployment"
    kind = "not_ready"


class ShuttingDown(GatewayError):
    """The process stopped before the request finished: ``server.shutdown_timeout`` passed
    (503; another instance, or this one restarted, can serve a retry)."""

    status = 503
    type = "api_error"
    default_code = "server_shutting_down"
    kind = "not_ready"


class UpstreamError(GatewayError):
    """An upstream answered with an error. ``status`` is what the client sees.

    Upstream 4xx pass through with their status; 5xx become 502 (or 503 when the upstream says
    it is overloaded). The message is the upstream's, sanitised.
    """

    status = 502
    type = "api_error"
    default_code = "upstream_error"
    kind: ClassVar[ErrorKind] = "upstream_server"

    def __init__(
        self,
        message: str,
        *,
        upstream_status: int,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        should_retry: bool | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(
            message,
            param=param,
            code=code,
            status=status,
            retry_after=retry_after,
            should_retry=should_retry,
            provider=provider,
        )
        self.upstream_status = upstream_status


class UpstreamClientError(UpstreamError):
    """The upstream rejected the request (a 4xx other than 429)."""

    type = "invalid_request_error"
    default_code = "upstream_rejected"
    kind: ClassVar[ErrorKind] = "upstream_client"


class UpstreamAuthError(UpstreamClientError):
    """The upstream rejected the gateway's provider credentials (401/403)."""

    type = "authentication_error"
    default_code = "upstream_auth_failed"
    kind = "auth"


class UpstreamRateLimited(UpstreamError):
    """The upstream rate-limited us (429); ``retry_after`` carries its hint."""

    status = 429
    type = "rate_limit_error"
    default_code = "rate_limit_exceeded"
    kind = "rate_limited"


class UpstreamOverloaded(UpstreamError):
    """The upstream is overloaded or unavailable (503, 529)."""

    status = 503
    default_code = "upstream_overloaded"
    kind = "overloaded"


class ContextWindowExceeded(UpstreamClientError):
    """The prompt is too long for the model (400)."""

    default_code = "context_length_exceeded"
    kind = "context_window"


class ContentPolicyViolation(UpstreamClientError):
    """The upstream refused the content (400)."""

    default_code = "content_policy_violation"
    kind = "content_policy"


class UpstreamResponseTooLarge(UpstreamError):
    """An upstream's answer (decompressed), or one of its stream events, exceeds the
    provider's ``max_response_bytes`` / ``max_event_bytes`` (502)."""

    default_code = "upstream_response_too_large"


class UpstreamUnavailable(GatewayError):
    """The upstream could not be reached: connection refused, reset, DNS (502)."""

    status = 502
    type = "api_error"
    default_code = "upstream_unavailable"
    kind = "connection"


class UpstreamTimeout(GatewayError):
    """One of the upstream clocks expired (504); ``code`` names which."""

    status = 504
    type = "api_error"
    default_code = "upstream_timeout"
    kind = "timeout"


class DeadlineExceeded(UpstreamTimeout):
    """The request's deadline (all attempts included) passed before an answer (504)."""

    default_code = "deadline_exceeded"


class InternalError(GatewayError):
    """A bug in the gateway or a plugin (500). The message never includes internals."""

    status = 500
    type = "api_error"
    default_code = "internal_error"
    kind = "internal"


_BY_STATUS: dict[int, type[UpstreamError]] = {
    401: UpstreamAuthError,
    403: UpstreamAuthError,
    429: UpstreamRateLimited,
    503: UpstreamOverloaded,
    529: UpstreamOverloaded,
}


def upstream_error_for_status(
    status: int,
    message: str,
    *,
    provider: str,
    retry_after: float | None = None,
    code: str | None = None,
) -> UpstreamError:
    """The error class an upstream HTTP status maps to, with the status the client should see.

    4xx keep their status (an upstream 401/403 is the *gateway's* credential problem and is shown
    as 502 so that a client never believes its own key was rejected); 5xx become 502, except
    overload (503/529) which stays 503. The upstream's ``code`` is kept only for the 4xx that
    keep their status; every other class carries the gateway's own code
    (``upstream_auth_failed``, ``rate_limit_exceeded``, ``upstream_overloaded``,
    ``upstream_error``), so that an upstream's ``invalid_api_key`` never reads as the client's.
    """
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = UpstreamClientError if 400 <= status < 500 else UpstreamError
    client_status: int
    if cls is UpstreamAuthError:
        client_status = 502
    elif cls is UpstreamClientError:
        client_status = status
    else:
        client_status = cls.status
    return cls(
        message,
        upstream_status=status,
        status=client_status,
        provider=provider,
        retry_after=retry_after,
        code=code if cls is UpstreamClientError else None,
    )
