"""The Responses API's routes beside ``POST /v1/responses``: they answer without running the
plugin chain, each scoped to the caller's key, every error in OpenAI's shape.

- ``GET`` / ``DELETE /v1/responses/{id}``: the caller's stored response, or a 404 (a
  background one as it stands: ``queued``, ``in_progress``, then how it ended). With
  ``stream=true`` (the SDK's ``responses.retrieve(id, stream=True)``) and ``starting_after=N``
  (default: from the start), the events of a background response this process runs or ran,
  from ``sequence_number`` N+1, those kept then the rest live until it ends
  (:class:`proxy.stored.background.EventLog`); a 400 naming ``stream`` for a response that was
  not created with ``background: true`` (as OpenAI answers) or whose events this process does
  not hold (another process runs it, or they expired), a 400 naming ``starting_after`` when the
  events asked for are no longer kept.
- ``GET /v1/responses/{id}/input_items``: the input items of the caller's stored response
  (:mod:`proxy.dialects.responses.input_list`), with ``after`` / ``before`` / ``limit`` (1 to 100)
  / ``order`` (``asc`` / ``desc``) as OpenAI has them; ``include`` is accepted (the items carry
  what the gateway kept whatever it asks). A bad value is a 400 naming the parameter.
- ``POST /v1/responses/input_tokens``: ``{"object": "response.input_tokens", "input_tokens":
  N}`` for a Responses request body (``model`` optional: the router's default; a
  ``previous_response_id`` of the caller counts its conversation too). ``N`` is the provider's
  own count where it has one (an API's counting endpoint, the mock's), else the gateway's
  estimate (:func:`proxy.core.token_estimate.estimate_input_tokens`); the
  ``x-crossway-token-count`` header says which (``exact`` or ``estimate``).
- ``POST /v1/responses/compact``: a 400 ``compaction_unsupported``: compaction is OpenAI's own
  server-side operation, and no provider the gateway serves offers it.
- ``POST /v1/responses/{id}/cancel``: cancels the caller's queued or in-progress background
  response and answers it ``cancelled`` (again, idempotently, for one already cancelled); 404
  for a response the caller does not have; a 400 ``Cannot cancel a synchronous response.`` for
  one not created with ``background: true``, as OpenAI answers, and a 400 for one that already
  ended otherwise (:meth:`proxy.stored.background.BackgroundRunner.cancel`).

:func:`background_answer` is what ``POST /v1/responses`` answers for ``background: true``: the
``queued`` response object, or with ``stream: true`` its events as they come.

The caller is authenticated before any body is read (a request without a valid key is a 401,
its body unread). An unexpected failure is a logged 500 ``internal gateway error``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal

import msgspec
from aiohttp import web

from proxy.core.canonical import Principal
from proxy.core.errors import BadRequest, GatewayError, InternalError, PermissionDenied
from proxy.core.token_estimate import estimate_input_tokens
from proxy.dialects.responses import ResponsesDialect, envelope_of
from proxy.dialects.responses.input_list import DEFAULT_LIMIT, MAX_LIMIT, input_items, page
from proxy.http.edges import REQUEST_ID, error_response
from proxy.runtime.snapshot import Snapshot
from proxy.stored.background import BackgroundRunner, Job
from proxy.stored.response_state import ResponseState

TOKEN_COUNT_HEADER = "x-crossway-token-count"
_JSON = "application/json"
_ENCODER = msgspec.json.Encoder()
_DIALECT = ResponsesDialect()
_SSE_HEADERS = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
}


class _Head(msgspec.Struct):
    background: bool = False


_HEAD = msgspec.json.Decoder(_Head)

Handler = Callable[[web.Request, Principal], Awaitable[web.StreamResponse]]


class ResponsesRoutes:
    """The handlers (see the module docstring). ``snapshot()`` gives the current runtime
    snapshot; ``read_body`` reads a request body under the server's limits; ``request_id``
    names a request as the dialect routes do."""

    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        responses: ResponseState,
        background: BackgroundRunner,
        read_body: Callable[[web.Request], Awaitable[bytes]],
        request_id: Callable[[web.Request], str],
    ) -> None:
        self._snapshot = snapshot
        self._responses = responses
        self._background = background
        self._read_body = read_body
        self._request_id = request_id

    async def retrieve(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/responses/{response_id}``."""
        return await self._answer(request, self._retrieve)

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """``DELETE /v1/responses/{response_id}``."""
        return await self._answer(request, self._delete)

    async def input_items(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/responses/{response_id}/input_items``."""
        return await self._answer(request, self._input_items)

    async def input_tokens(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/responses/input_tokens``."""
        return await self._answer(request, self._input_tokens)

    async def compact(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/responses/compact``."""
        return await self._answer(request, _compact)

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/responses/{response_id}/cancel``."""
        return await self._answer(request, self._cancel)

    async def _answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        snapshot = self._snapshot()
        request_id = self._request_id(request)
        try:
            principal = await snapshot.authenticate(request.headers)
            return await handler(request, principal)
        except GatewayError as error:
            return error_response(error, anthropic_shape=False, request_id=request_id)
        except Exception:
            snapshot.logger.exception("unhandled_error", request_id=request_id, route="responses")
            internal = InternalError("internal gateway error")
            return error_response(internal, anthropic_shape=False, request_id=request_id)

    async def _retrieve(self, request: web.Request, principal: Principal) -> web.StreamResponse:
        response_id = request.match_info["response_id"]
        body = await self._responses.fetch(response_id, principal)
        if not _flag(request.query.get("stream"), "stream"):
            return _json(body)
        after = _starting_after(request.query.get("starting_after"))
        job = self._background.job(response_id, principal)
        if job is None:
            background = _HEAD.decode(body).background
            raise BadRequest(
                f"The events of {response_id!r} are not held by this gateway process: they "
                "expired, or another process runs it; poll it without stream."
                if background
                else "Streaming a stored response is only possible for a background response; "
                f"{response_id!r} was not created with background: true.",
                param="stream",
            )
        job.log.check(after)
        return await _events(request, job, after, self._request_id(request))

    async def _delete(self, request: web.Request, principal: Principal) -> web.Response:
        return _json(await self._responses.delete(request.match_info["response_id"], principal))

    async def _input_items(self, request: web.Request, principal: Principal) -> web.Response:
        query = request.query
        limit = _limit(query.get("limit"))
        order = _order(query.get("order"))
        response_id = request.match_info["response_id"]
        messages = await self._responses.input_of(response_id, principal)
        listed = page(
            input_items(response_id, messages),
            order=order,
            after=query.get("after"),
            before=query.get("before"),
            limit=limit,
        )
        return _json(_ENCODER.encode(listed))

    async def _input_tokens(self, request: web.Request, principal: Principal) -> web.Response:
        snapshot = self._snapshot()
        body = await self._read_body(request)
        call = _DIALECT.decode(
            body, request.headers, self._request_id(request), time.perf_counter()
        )
        if not call.model:
            call.model = snapshot.router.default_model()
        if not principal.allows(call.model):
            raise PermissionDenied(
                f"this key may not use model {call.model!r}", code="model_not_allowed"
            )
        previous = envelope_of(call).previous_response_id
        if previous is not None:
            at = 1 if envelope_of(call).instructions else 0
            call.messages[at:at] = await self._responses.history(previous, principal)
        count = await snapshot.upstream.count_tokens(call, snapshot.router.resolve(call.model))
        how = "exact"
        if count is None:
            count, how = estimate_input_tokens(call), "estimate"
        answer = {"object": "response.input_tokens", "input_tokens": count}
        return _json(_ENCODER.encode(answer), {TOKEN_COUNT_HEADER: how})

    async def _cancel(self, request: web.Request, principal: Principal) -> web.Response:
        return _json(await self._background.cancel(request.match_info["response_id"], principal))


async def background_answer(
    request: web.Request,
    streamed: bool,
    job: Job,
    queued: bytes,
    request_id: str,
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """What creating a background response answers: the ``queued`` response object, or with
    ``stream`` its events from the first, live until it ends. A client that goes away stops
    only its stream, never the response. ``headers`` are added to the answer's (the trace
    id)."""
    if not streamed:
        return _json(queued, {REQUEST_ID: request_id, **(headers or {})})
    return await _events(request, job, -1, request_id, headers)


async def _events(
    request: web.Request,
    job: Job,
    after: int,
    request_id: str,
    headers: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """An SSE answer of ``job``'s events after ``after`` (see
    :meth:`~proxy.stored.background.EventLog.follow`), with ``headers`` besides its own."""
    response = web.StreamResponse(
        headers={**_SSE_HEADERS, REQUEST_ID: request_id, **(headers or {})}
    )
    await response.prepare(request)
    with contextlib.suppress(ConnectionResetError):  # the client went away: the job runs on
        async for frames in job.log.follow(after):
            await response.write(frames)
        await response.write_eof()
    return response


async def _compact(request: web.Request, principal: Principal) -> web.Response:
    raise BadRequest(
        "compacting a response is not supported: no provider this gateway serves offers it",
        code="compaction_unsupported",
    )


def _json(body: bytes, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=body, headers={"content-type": _JSON, **(headers or {})})


def _flag(value: str | None, name: str) -> bool:
    if value is None or value in ("false", "0"):
        return False
    if value in ("true", "1"):
        return True
    raise BadRequest(f"Invalid value for {name!r}: expected true or false.", param=name)


def _starting_after(value: str | None) -> int:
    if value is None:
        return -1
    try:
        after = int(value)
    except ValueError:
        after = -2
    if after < -1:
        raise BadRequest(
            "Invalid 'starting_after': expected a sequence number (an integer from 0).",
            param="starting_after",
        )
    return after


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(
            f"Invalid 'limit': expected an integer from 1 to {MAX_LIMIT}.", param="limit"
        )
    return limit


def _order(value: str | None) -> Literal["asc", "desc"]:
    if value is None or value == "desc":
        return "desc"
    if value == "asc":
        return "asc"
    raise BadRequest("Invalid 'order': expected 'asc' or 'desc'.", param="order")
