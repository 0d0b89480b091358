"""Routes beside the dialect pipeline: they answer without running the plugin chain (the
Responses API's are :mod:`proxy.http.responses_routes`).

- ``GET /v1/models/{id}`` (ids contain ``/``): the model object — OpenAI's
  (``{id, object: "model", created, owned_by}``), or Anthropic's (``{type: "model", id,
  display_name, created_at}``) for a client that sends ``anthropic-version`` — when the id is an
  alias with a ready deployment or ``provider/model`` of a ready provider, and the caller may use
  it; else 404 ``model_not_found`` in the client's error shape.
- ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}`` for an Anthropic Messages request
  body — exact from the provider when it can count (Anthropic's own counting endpoint, the
  mock's), else :func:`proxy.core.token_estimate.estimate_input_tokens`; errors in Anthropic's
  shape.

The caller is identified by the snapshot's ``authenticate`` (the auth plugin's, or anonymous)
before anything else is read: a request without a valid key is a 401 whatever its body, which
is never read (so an unauthenticated client learns no field names and cannot make the gateway
read or inflate a body).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from proxy.core.errors import GatewayError, InternalError, ModelNotFound, PermissionDenied
from proxy.core.token_estimate import estimate_input_tokens
from proxy.dialects import anthropic
from proxy.http.edges import error_response, is_anthropic_request
from proxy.runtime.snapshot import Snapshot
from proxy.upstream.router import MAX_MODEL_NAME, Router

_JSON = "application/json"
_EPOCH = "1970-01-01T00:00:00Z"
_ENCODER = msgspec.json.Encoder()


class SideRoutes:
    """The handlers (see the module docstring). ``snapshot()`` gives the current runtime
    snapshot; ``read_body`` reads a request body under the server's limits; ``request_id``
    names a request as the dialect routes do (the route wrapper puts it on the answer as
    ``x-request-id``)."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        read_body: Callable[[web.Request], Awaitable[bytes]],
        request_id: Callable[[web.Request], str],
    ) -> None:
        self._snapshot = snapshot
        self._read_body = read_body
        self._request_id = request_id

    async def model(self, request: web.Request) -> web.Response:
        """``GET /v1/models/{model}``."""
        model = request.match_info["model"]
        anthropic_shape = is_anthropic_request(request)
        snapshot = self._snapshot()
        try:
            principal = await snapshot.authenticate(request.headers)
            owner = _owner(snapshot.router, model)
            if owner is None or not principal.allows(model):
                raise ModelNotFound(f"The model {model!r} does not exist", param="model")
        except GatewayError as error:
            return error_response(error, anthropic_shape=anthropic_shape)
        found: dict[str, Any]
        if anthropic_shape:
            found = {"type": "model", "id": model, "display_name": model, "created_at": _EPOCH}
        else:
            found = {"id": model, "object": "model", "created": 0, "owned_by": owner}
        return web.Response(body=_ENCODER.encode(found), headers={"content-type": _JSON})

    async def count_tokens(self, request: web.Request) -> web.Response:
        """``POST /v1/messages/count_tokens``."""
        start = time.perf_counter()
        request_id = self._request_id(request)
        snapshot = self._snapshot()
        try:
            principal = await snapshot.authenticate(request.headers)  # before the body is read
            body = await self._read_body(request)
            call = anthropic.decode_count_tokens(body, request.headers, request_id, start)
            if not principal.allows(call.model):
                raise PermissionDenied(
                    f"this key may not use model {call.model!r}", code="model_not_allowed"
                )
            deployments = snapshot.router.resolve(call.model)
            count = await snapshot.upstream.count_tokens(call, deployments)
        except GatewayError as error:
            return error_response(error, anthropic_shape=True, request_id=request_id)
        except Exception:
            snapshot.logger.exception("unhandled_error", request_id=request_id, route="count")
            internal = InternalError("internal gateway error")
            return error_response(internal, anthropic_shape=True, request_id=request_id)
        if count is None:
            count = estimate_input_tokens(call)
        headers = {"content-type": _JSON, "request-id": request_id, "x-request-id": request_id}
        return web.Response(body=anthropic.token_count_json(count), headers=headers)


def _owner(router: Router, model: str) -> str | None:
    """Who owns a routable ``model`` (``crossway`` for an alias, else its provider); None when
    it is not routable now."""
    if len(model) > MAX_MODEL_NAME or not model.isprintable():
        return None
    deployments = router.aliases().get(model)
    if deployments is not None:
        return "crossway" if any(router.is_ready(d.provider) for d in deployments) else None
    provider, _, upstream_model = model.partition("/")
    if upstream_model and router.is_ready(provider):
        return provider
    return None
