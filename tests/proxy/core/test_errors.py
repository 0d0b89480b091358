"""proxy/core/errors.py: the error hierarchy, upstream status mapping and response headers."""

from __future__ import annotations

import pytest

from proxy.core import errors as e
from proxy.core.errors import upstream_error_for_status


@pytest.mark.parametrize(
    ("upstream", "cls", "client_status", "kind"),
    [
        (400, e.UpstreamClientError, 400, "upstream_client"),
        (401, e.UpstreamAuthError, 502, "auth"),
        (403, e.UpstreamAuthError, 502, "auth"),
        (404, e.UpstreamClientError, 404, "upstream_client"),
        (409, e.UpstreamClientError, 409, "upstream_client"),
        (413, e.UpstreamClientError, 413, "upstream_client"),
        (422, e.UpstreamClientError, 422, "upstream_client"),
        (429, e.UpstreamRateLimited, 429, "rate_limited"),
        (500, e.UpstreamError, 502, "upstream_server"),
        (502, e.UpstreamError, 502, "upstream_server"),
        (503, e.UpstreamOverloaded, 503, "overloaded"),
        (504, e.UpstreamError, 502, "upstream_server"),
        (529, e.UpstreamOverloaded, 503, "overloaded"),
    ],
)
def test_upstream_error_for_status(upstream, cls, client_status, kind):
    error = upstream_error_for_status(upstream, "upstream said no", provider="p")
    assert type(error) is cls
    assert error.status == client_status
    assert error.upstream_status == upstream
    assert error.kind == kind
    assert error.provider == "p"
    assert error.message == "upstream said no"
    assert str(error) == "upstream said no"
    assert isinstance(error, e.UpstreamError)
    assert isinstance(error, e.GatewayError)


def test_rate_limited_carries_retry_after():
    error = upstream_error_for_status(429, "slow down", provider="p", retry_after=7.0)
    assert isinstance(error, e.UpstreamRateLimited)
    assert error.retry_after == 7.0
    assert error.response_headers() == {"Retry-After": "7"}
    assert error.type == "rate_limit_error"
    assert error.code == "rate_limit_exceeded"


def test_codes_and_types():
    assert upstream_error_for_status(401, "m", provider="p").type == "authentication_error"
    assert upstream_error_for_status(401, "m", provider="p").code == "upstream_auth_failed"
    assert upstream_error_for_status(400, "m", provider="p").type == "invalid_request_error"
    assert upstream_error_for_status(400, "m", provider="p").code == "upstream_rejected"
    assert upstream_error_for_status(500, "m", provider="p").code == "upstream_error"
    assert upstream_error_for_status(503, "m", provider="p").code == "upstream_overloaded"
    assert upstream_error_for_status(400, "m", provider="p", code="x_y").code == "x_y"


def test_status_override_is_per_instance():
    error = upstream_error_for_status(404, "m", provider="p")
    assert error.status == 404
    assert e.UpstreamClientError.status == 502  # the class default is untouched
    assert e.UpstreamClientError("m", upstream_status=418).status == 502


def test_response_headers():
    assert e.GatewayError("m").response_headers() == {}
    assert e.GatewayError("m", retry_after=2.0).response_headers() == {"Retry-After": "2"}
    assert e.GatewayError("m", retry_after=0).response_headers() == {"Retry-After": "0"}
    assert e.GatewayError("m", retry_after=-5).response_headers() == {"Retry-After": "0"}
    assert e.GatewayError("m", should_retry=True).response_headers() == {"x-should-retry": "true"}
    assert e.GatewayError("m", should_retry=False).response_headers() == {"x-should-retry": "false"}
    assert e.GatewayError("m", retry_after=30, should_retry=True).response_headers() == {
        "Retry-After": "30",
        "x-should-retry": "true",
    }


def test_retry_after_is_a_whole_number_of_seconds():
    value = e.GatewayError("m", retry_after=12.7).response_headers()["Retry-After"]
    assert value.isdigit()
    assert int(value) in (12, 13)


@pytest.mark.parametrize(
    ("cls", "status", "type_", "code", "kind"),
    [
        (e.GatewayError, 500, "api_error", "internal_error", "internal"),
        (e.BadRequest, 400, "invalid_request_error", "invalid_request", "bad_request"),
        (e.AuthenticationFailed, 401, "authentication_error", "invalid_api_key", "auth"),
        (e.PermissionDenied, 403, "permission_error", "permission_denied", "permission"),
        (e.NotFound, 404, "invalid_request_error", "not_found", "not_found"),
        (e.ModelNotFound, 404, "invalid_request_error", "model_not_found", "not_found"),
        (e.MethodNotAllowed, 405, "invalid_request_error", "method_not_allowed", "bad_request"),
        (e.RequestTimeout, 408, "invalid_request_error", "request_timeout", "bad_request"),
        (e.PayloadTooLarge, 413, "invalid_request_error", "request_too_large", "too_large"),
        (e.RateLimited, 429, "rate_limit_error", "rate_limit_exceeded", "rate_limited"),
        (e.NoReadyDeployment, 503, "api_error", "no_ready_deployment", "not_ready"),
        (e.UpstreamUnavailable, 502, "api_error", "upstream_unavailable", "connection"),
        (e.UpstreamTimeout, 504, "api_error", "upstream_timeout", "timeout"),
        (e.InternalError, 500, "api_error", "internal_error", "internal"),
    ],
)
def test_gateway_error_classes(cls, status, type_, code, kind):
    error = cls("message", param="model")
    assert (error.status, error.type, error.code, error.kind) == (status, type_, code, kind)
    assert error.param == "model"
    assert error.retry_after is None
    assert error.should_retry is None


@pytest.mark.parametrize(
    ("cls", "code", "kind"),
    [
        (e.ContextWindowExceeded, "context_length_exceeded", "context_window"),
        (e.ContentPolicyViolation, "content_policy_violation", "content_policy"),
    ],
)
def test_upstream_client_subclasses(cls, code, kind):
    error = cls("too long", upstream_status=400, status=400, provider="p")
    assert isinstance(error, e.UpstreamClientError)
    assert (error.status, error.code, error.kind) == (400, code, kind)
    assert error.type == "invalid_request_error"


def test_code_override():
    assert e.UpstreamTimeout("m", code="idle_timeout").code == "idle_timeout"
    assert e.BadRequest("m", code="invalid_json").code == "invalid_json"
