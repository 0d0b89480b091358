"""Anthropic's Message Batches (``/v1/messages/batches``) over the same batches: the requests
of one are the lines of a batch whose endpoint is ``/v1/messages``, run by the same executor
through the same chain, answered in Anthropic's shapes. Every error is in Anthropic's shape.

- ``POST /v1/messages/batches`` (``{"requests": [{"custom_id", "params"}]}``; a ``custom_id``
  of 1 to 64 letters, digits, ``-`` and ``_``, each once; at most ``batches.max_lines``
  requests, within ``server.max_body_bytes``): the ``message_batch``, ``in_progress``. A
  request's ``params`` are checked when it runs: a bad one is an ``errored`` result.
- ``GET /v1/messages/batches`` (``limit`` 1 to 1,000, default 20; ``after_id``; newest first),
  ``GET /v1/messages/batches/{id}`` (its ``request_counts`` as they stand),
  ``POST /v1/messages/batches/{id}/cancel`` (``canceling``, then ``ended`` with the requests that
  did not run ``canceled``), ``DELETE /v1/messages/batches/{id}`` (an ended batch only: a 400
  otherwise), ``GET /v1/messages/batches/{id}/results`` (an ended batch's results as JSONL, in
  request order; a 400 before it ended).

A batch whose ``expires_at`` (24 h after creation) passed before all its requests ran ends
with them ``expired`` (``request_counts.expired``, ``{"type": "expired"}`` results); an ended
batch is deleted ``batches.retention_days`` after it ended (:mod:`proxy.batches.retention`).

``results_url`` is absolute, built from the URL the client reached the gateway at (scheme and
``Host``), as the SDK follows it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

from proxy.batches.batches_db import missing_batch
from proxy.batches.executor import PAGE
from proxy.batches.native import plan_of
from proxy.batches.objects import (
    COMPLETION_WINDOW,
    ENCODER,
    MESSAGES,
    RUNNABLE,
    WINDOW_SECONDS,
    Batch,
    RequestCounts,
    new_batch_id,
)
from proxy.batches.routes import Handler, RouteParts, add_routes
from proxy.core.canonical import Principal
from proxy.core.errors import BadRequest

BASE = "/v1/messages/batches"
MAX_LIST = 1000
DEFAULT_LIST = 20
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class _Request(msgspec.Struct):
    custom_id: str
    params: dict[str, Any]


class _Create(msgspec.Struct):
    requests: list[_Request]


_CREATE = msgspec.json.Decoder(_Create)


class Counts(msgspec.Struct):
    processing: int = 0
    succeeded: int = 0
    errored: int = 0
    canceled: int = 0
    expired: int = 0


class MessageBatch(msgspec.Struct):
    """Anthropic's ``message_batch`` object."""

    id: str
    processing_status: str
    request_counts: Counts
    created_at: str
    expires_at: str
    ended_at: str | None = None
    archived_at: str | None = None
    cancel_initiated_at: str | None = None
    results_url: str | None = None
    type: str = "message_batch"


class MessageBatchRoutes:
    """The handlers (module docstring), over the parts the OpenAI routes use."""

    def __init__(self, parts: RouteParts) -> None:
        self._parts = parts
        self._config = parts.config
        self._batches = parts.batches
        self._executor = parts.executor
        self._read_body = parts.read_body

    def add_to(self, app: web.Application, plain: Callable[[str, Any], Any]) -> None:
        """Route every path, each wrapped by ``plain``."""
        table: list[tuple[str, str, Handler]] = [
            ("POST", "", self._create),
            ("GET", "", self._list),
            ("GET", "/{batch_id}/results", self._results),
            ("POST", "/{batch_id}/cancel", self._cancel),
            ("GET", "/{batch_id}", self._retrieve),
            ("DELETE", "/{batch_id}", self._delete),
        ]
        add_routes(app, plain, self._parts, table, prefix=BASE, anthropic_shape=True)

    async def _create(self, request: web.Request, principal: Principal) -> web.Response:
        try:
            asked = _CREATE.decode(await self._read_body(request))
        except msgspec.ValidationError as exc:
            raise BadRequest(f"invalid message batch: {exc}") from None
        except msgspec.DecodeError:
            raise BadRequest("the body is not a JSON object") from None
        if not asked.requests:
            raise BadRequest("requests: at least one request is needed", param="requests")
        if len(asked.requests) > self._config.max_lines:
            raise BadRequest(
                f"requests: at most {self._config.max_lines} in one batch", param="requests"
            )
        seen: set[str] = set()
        for index, item in enumerate(asked.requests):
            if not _CUSTOM_ID.match(item.custom_id):
                raise BadRequest(
                    f"requests.{index}.custom_id: 1 to 64 letters, digits, '-' or '_'",
                    param=f"requests.{index}.custom_id",
                )
            if item.custom_id in seen:
                raise BadRequest(
                    f"requests.{index}.custom_id: {item.custom_id!r} is used twice",
                    param=f"requests.{index}.custom_id",
                )
            seen.add(item.custom_id)
        now = self._batches.now()
        batch = Batch(
            id=new_batch_id("msgbatch_"),
            endpoint=MESSAGES,
            input_file_id="",
            completion_window=COMPLETION_WINDOW,
            status="validating",
            created_at=now,
            expires_at=now + WINDOW_SECONDS,
            request_counts=RequestCounts(total=len(asked.requests)),
        )
        lines = [(item.custom_id, ENCODER.encode(item.params)) for item in asked.requests]
        plan = plan_of(self._parts.snapshot(), MESSAGES, lines, principal)
        native = None if plan is None else ENCODER.encode(plan)
        await self._batches.create(batch, principal, lines, native)
        self._executor.wake()
        return await self._answer(request, batch)

    async def _list(self, request: web.Request, principal: Principal) -> web.Response:
        query = request.query
        if "before_id" in query:
            raise BadRequest("before_id is not supported: page with after_id", param="before_id")
        limit = _limit(query.get("limit"))
        found, more = await self._batches.page(
            principal, after=query.get("after_id"), limit=limit, messages=True
        )
        data = [self._view(request, batch, batch.request_counts) for batch in found]
        body = {
            "data": data,
            "has_more": more,
            "first_id": data[0].id if data else None,
            "last_id": data[-1].id if data else None,
        }
        return _json(ENCODER.encode(body))

    async def _retrieve(self, request: web.Request, principal: Principal) -> web.Response:
        return await self._answer(request, await self._mine(request, principal))

    async def _cancel(self, request: web.Request, principal: Principal) -> web.Response:
        batch = await self._mine(request, principal)
        batch = await self._batches.request_cancel(batch.id, principal)
        self._executor.cancel(batch.id)
        return await self._answer(request, batch)

    async def _delete(self, request: web.Request, principal: Principal) -> web.Response:
        batch = await self._mine(request, principal)
        if batch.status in RUNNABLE:
            raise BadRequest(
                "a message batch can be deleted once it ended: cancel it first", param="batch_id"
            )
        await self._batches.delete(batch.id, principal)
        return _json(ENCODER.encode({"id": batch.id, "type": "message_batch_deleted"}))

    async def _results(self, request: web.Request, principal: Principal) -> web.StreamResponse:
        batch = await self._mine(request, principal)
        if batch.status in RUNNABLE:
            raise BadRequest(f"message batch {batch.id} is still processing: no results yet")
        missing = b'{"type":"canceled"}' if batch.status == "cancelled" else b'{"type":"expired"}'
        response = web.StreamResponse(headers={"content-type": "application/binary"})
        await response.prepare(request)
        after = -1
        while outcomes := await self._batches.outcomes(batch.id, after, PAGE):
            lines = []
            for _, custom_id, result in outcomes:
                if result is None:
                    result = b'{"custom_id":' + ENCODER.encode(custom_id) + b',"result":'
                    result += missing + b"}"
                lines.append(result + b"\n")
            await response.write(b"".join(lines))
            after = outcomes[-1][0]
        await response.write_eof()
        return response

    async def _mine(self, request: web.Request, principal: Principal) -> Batch:
        batch = await self._batches.get(request.match_info["batch_id"], principal)
        if batch.endpoint != MESSAGES:  # an OpenAI batch is not a message batch
            raise missing_batch(batch.id)
        return batch

    async def _answer(self, request: web.Request, batch: Batch) -> web.Response:
        counts = batch.request_counts
        if batch.status in RUNNABLE:
            counts = await self._batches.counts(batch.id)
        return _json(ENCODER.encode(self._view(request, batch, counts)))

    def _view(self, request: web.Request, batch: Batch, counts: RequestCounts) -> MessageBatch:
        """``batch`` as Anthropic's object, with ``counts``."""
        status = batch.status
        ended = status not in RUNNABLE
        done = counts.completed + counts.failed
        left = counts.total - done
        shown = Counts(succeeded=counts.completed, errored=counts.failed)
        if not ended:
            shown.processing = left
        elif status == "cancelled":
            shown.canceled = left
        else:
            shown.expired = left
        ended_at = batch.completed_at or batch.expired_at or batch.cancelled_at or batch.failed_at
        results = None
        if ended:
            origin = request.url.origin()
            results = f"{origin}{BASE}/{batch.id}/results"
        return MessageBatch(
            id=batch.id,
            processing_status="canceling"
            if status == "cancelling"
            else ("ended" if ended else "in_progress"),
            request_counts=shown,
            created_at=_moment(batch.created_at),
            expires_at=_moment(batch.expires_at),
            ended_at=None if ended_at is None else _moment(ended_at),
            cancel_initiated_at=None
            if batch.cancelling_at is None
            else _moment(batch.cancelling_at),
            results_url=results,
        )


def _moment(seconds: int) -> str:
    """An RFC 3339 time, as Anthropic writes them."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIST
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIST:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_LIST}", param="limit")
    return limit


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, headers={"content-type": "application/json"})
