"""The routes of files and batches, each scoped to the caller's key, every error in OpenAI's
shape (the caller is authenticated before any body is read):

- ``POST /v1/files`` (multipart: ``purpose``, then ``file``; ``expires_after[anchor]`` and
  ``expires_after[seconds]`` when given, before or after the file — a bad one after it removes
  the file): stores the upload as it arrives (never whole in memory) and answers its file
  object. Only ``purpose: batch`` is kept (a 400 names
  ``purpose`` otherwise). An upload past ``batches.max_file_bytes`` is a 413: refused on
  its ``Content-Length`` before it is read when that says so, else as soon as the bound is
  passed, nothing kept.
- ``GET /v1/files`` (``purpose``, ``limit`` 1 to 10,000, ``order`` ``desc`` by default,
  ``after``), ``GET /v1/files/{file_id}``, ``DELETE /v1/files/{file_id}``,
  ``GET /v1/files/{file_id}/content`` (the bytes, streamed).
- ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window: 24h``,
  ``metadata``, ``output_expires_after``): reads the input file into lines
  (:mod:`proxy.batches.submit`; a file with problems makes a ``failed`` batch listing them, as
  OpenAI's does) and answers the batch, ``validating``; the executor runs it
  (:mod:`proxy.batches.executor`).
- ``GET /v1/batches`` (``after``, ``limit`` 1 to 100, newest first), ``GET /v1/batches/{id}``
  (a running batch's ``request_counts`` as they stand), ``POST /v1/batches/{id}/cancel``.

Another key's file or batch is a 404, as one that does not exist. An unexpected failure is a
logged 500 ``internal gateway error``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

import msgspec
from aiohttp import BodyPartReader, MultipartReader, web

from proxy.batches.batches_db import BatchStore, missing_batch
from proxy.batches.contents import too_large
from proxy.batches.executor import BatchExecutor
from proxy.batches.files import (
    EXPIRES_AFTER_FIELDS,
    FileObject,
    FileStore,
    encode_file,
    expires_after_seconds,
    is_id,
    output_expires_after_seconds,
)
from proxy.batches.native import plan_of
from proxy.batches.objects import (
    COMPLETION_WINDOW,
    ENCODER,
    ENDPOINTS,
    MESSAGES,
    RUNNABLE,
    WINDOW_SECONDS,
    Batch,
    BatchErrors,
    RequestCounts,
    new_batch_id,
)
from proxy.batches.submit import read_lines
from proxy.core.canonical import Principal
from proxy.core.errors import BadRequest, GatewayError, InternalError
from proxy.http.edges import error_response
from proxy.runtime.config import BatchesConfig
from proxy.runtime.snapshot import Snapshot
from proxy.stored.pages import page_of, query_limit

MULTIPART_SLACK = 64 * 1024
"""Bytes a multipart upload may carry beyond its file (boundaries, headers, small fields)."""
PIECE_BYTES = 256 * 1024
MAX_FILES_LIMIT = 10_000
MAX_BATCHES_LIMIT = 100
_PURPOSES = ("batch",)

Handler = Callable[[web.Request, Principal], Awaitable[web.StreamResponse]]


class _CreateBatch(msgspec.Struct):
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    output_expires_after: dict[str, Any] | None = None


_CREATE = msgspec.json.Decoder(_CreateBatch)


class RouteParts(NamedTuple):
    """What the batch routes work with: the ``batches`` config, the stores and the executor;
    ``snapshot()`` gives the current runtime snapshot, ``read_body`` reads a JSON body under the
    server's limits, ``request_id`` names a request as the dialect routes do."""

    config: BatchesConfig
    files: FileStore
    batches: BatchStore
    executor: BatchExecutor
    snapshot: Callable[[], Snapshot]
    read_body: Callable[[web.Request], Awaitable[bytes]]
    request_id: Callable[[web.Request], str]


def add_routes(
    app: web.Application,
    plain: Callable[[str, Any], Any],
    parts: RouteParts,
    table: list[tuple[str, str, Handler]],
    *,
    prefix: str = "",
    anthropic_shape: bool,
) -> None:
    """Route each ``(method, path, handler)`` of ``table`` under ``prefix``, each handler given
    the caller's principal (:func:`answering`) and wrapped by ``plain``."""
    for method, path, handler in table:
        route = plain(
            prefix + path,
            answering(parts.snapshot, parts.request_id, handler, anthropic_shape=anthropic_shape),
        )
        if method == "GET":  # with HEAD, as every GET route
            app.router.add_get(prefix + path, route)
        else:
            app.router.add_route(method, prefix + path, route)


class BatchRoutes:
    """The handlers (module docstring)."""

    def __init__(self, parts: RouteParts) -> None:
        self._parts = parts
        self._config = parts.config
        self._files = parts.files
        self._batches = parts.batches
        self._executor = parts.executor
        self._read_body = parts.read_body

    def add_to(self, app: web.Application, plain: Callable[[str, Any], Any]) -> None:
        """Route every path, under ``/v1`` and without it, each wrapped by ``plain``."""
        for prefix in ("/v1", ""):
            table: list[tuple[str, str, Handler]] = [
                ("POST", "/files", self._upload),
                ("GET", "/files", self._list_files),
                ("GET", "/files/{file_id}/content", self._content),
                ("GET", "/files/{file_id}", self._file),
                ("DELETE", "/files/{file_id}", self._delete_file),
                ("POST", "/batches", self._create),
                ("GET", "/batches", self._list_batches),
                ("POST", "/batches/{batch_id}/cancel", self._cancel),
                ("GET", "/batches/{batch_id}", self._batch),
            ]
            add_routes(app, plain, self._parts, table, prefix=prefix, anthropic_shape=False)

    async def _upload(self, request: web.Request, principal: Principal) -> web.Response:
        limit = self._config.max_file_bytes
        length = request.content_length
        if length is not None and length > limit + MULTIPART_SLACK:
            raise too_large(limit)
        if request.content_type != "multipart/form-data":
            raise BadRequest("upload a file as multipart/form-data (purpose, then file)")
        try:
            return await self._store_upload(request, principal, limit)
        except (ValueError, AssertionError, LookupError) as exc:  # aiohttp's multipart parser
            raise BadRequest(f"the multipart body cannot be read: {type(exc).__name__}") from None

    async def _store_upload(
        self, request: web.Request, principal: Principal, limit: int
    ) -> web.Response:
        """Read the multipart upload (``purpose``, then ``file``) and store its file, expiring as
        its ``expires_after`` fields say."""
        reader = await request.multipart()
        purpose: str | None = None
        expiry: dict[str, str] = {}
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise BadRequest("nested multipart bodies are not supported")
            if part.name == "purpose":
                purpose = (await _small(part)).decode("utf-8", "replace").strip()
                if purpose not in _PURPOSES:
                    raise BadRequest(
                        f"purpose {purpose[:40]!r} is not supported: this gateway keeps files "
                        "for batches (purpose 'batch')",
                        param="purpose",
                    )
            elif part.name in EXPIRES_AFTER_FIELDS:
                expiry[part.name] = (await _small(part)).decode("utf-8", "replace").strip()
            elif part.name == "file":
                if purpose is None:
                    raise BadRequest("send the purpose field before the file", param="purpose")
                whole = len(expiry) == len(EXPIRES_AFTER_FIELDS)
                created = await self._files.create(
                    principal,
                    part.filename or "upload.jsonl",
                    purpose,
                    _pieces(part),
                    limit,
                    expires_after_seconds(expiry) if whole else None,
                )
                try:
                    created = await self._late_expiry(reader, expiry, created)
                except BaseException:
                    await self._files.remove(created.id)
                    raise
                self._executor.wake()  # a gateway that had not used its database: look now
                return _json(encode_file(created))
            else:
                await part.release()
        raise BadRequest("the upload has no file field", param="file")

    async def _late_expiry(
        self, reader: MultipartReader, fields: dict[str, str], created: FileObject
    ) -> FileObject:
        """Read the parts after the file: ``expires_after`` fields there (as OpenAI's own
        example sends them) complete ``fields`` and apply to ``created``; others are skipped.
        The file as it then stands; a 400 when the fields are not a valid ``expires_after``."""
        late = False
        while (part := await reader.next()) is not None:
            if isinstance(part, BodyPartReader) and part.name in EXPIRES_AFTER_FIELDS:
                fields[part.name] = (await _small(part)).decode("utf-8", "replace").strip()
                late = True
            else:
                await part.release()
        seconds = expires_after_seconds(fields) if late else None
        return created if seconds is None else await self._files.expire(created, seconds)

    async def _list_files(self, request: web.Request, principal: Principal) -> web.Response:
        query = request.query
        raw = query.get("limit")
        limit = MAX_FILES_LIMIT if raw is None else query_limit(raw, MAX_FILES_LIMIT)
        purpose = query.get("purpose")
        if purpose is not None and not is_id(purpose):
            raise BadRequest("purpose is not a file purpose", param="purpose")
        found, more = await self._files.page(
            principal,
            after=query.get("after"),
            limit=limit,
            purpose=purpose,
            desc=_descending(query.get("order")),
        )
        return _json(page_of([encode_file(f) for f in found], [f.id for f in found], more))

    async def _file(self, request: web.Request, principal: Principal) -> web.Response:
        found = await self._files.get(request.match_info["file_id"], principal)
        return _json(encode_file(found))

    async def _delete_file(self, request: web.Request, principal: Principal) -> web.Response:
        file_id = request.match_info["file_id"]
        await self._files.delete(file_id, principal)
        return _json(ENCODER.encode({"id": file_id, "object": "file", "deleted": True}))

    async def _content(self, request: web.Request, principal: Principal) -> web.StreamResponse:
        parts = await self._files.read(request.match_info["file_id"], principal)
        response = web.StreamResponse(headers={"content-type": "application/octet-stream"})
        await response.prepare(request)
        async for part in parts:
            await response.write(part)
        await response.write_eof()
        return response

    async def _create(self, request: web.Request, principal: Principal) -> web.Response:
        try:
            asked = _CREATE.decode(await self._read_body(request))
        except msgspec.ValidationError as exc:
            raise BadRequest(f"invalid batch: {exc}") from None
        except msgspec.DecodeError:
            raise BadRequest("the body is not a JSON object") from None
        if asked.endpoint not in ENDPOINTS:
            raise BadRequest(f"endpoint must be one of {', '.join(ENDPOINTS)}", param="endpoint")
        if asked.completion_window != COMPLETION_WINDOW:
            raise BadRequest("completion_window must be '24h'", param="completion_window")
        keep = output_expires_after_seconds(asked.output_expires_after)
        source = await self._files.get(asked.input_file_id, principal)
        if source.purpose != "batch":
            raise BadRequest("the input file's purpose must be 'batch'", param="input_file_id")
        content = b"".join([part async for part in await self._files.read(source.id, principal)])
        lines, errors = read_lines(content, asked.endpoint, self._config.max_lines)
        now = self._batches.now()
        batch = Batch(
            id=new_batch_id(),
            endpoint=asked.endpoint,
            input_file_id=source.id,
            completion_window=COMPLETION_WINDOW,
            status="validating",
            created_at=now,
            expires_at=now + WINDOW_SECONDS,
            request_counts=RequestCounts(total=len(lines)),
            metadata=asked.metadata,
        )
        native = None
        if errors:
            batch.status, batch.failed_at = "failed", now
            batch.errors, batch.request_counts = BatchErrors(errors), RequestCounts()
            lines = []
        else:
            plan = plan_of(self._parts.snapshot(), asked.endpoint, lines, principal)
            native = None if plan is None else ENCODER.encode(plan)
        await self._batches.create(batch, principal, lines, native, output_expires_after=keep)
        self._executor.wake()
        return _json(ENCODER.encode(batch))

    async def _list_batches(self, request: web.Request, principal: Principal) -> web.Response:
        query = request.query
        limit = query_limit(query.get("limit"), MAX_BATCHES_LIMIT)
        found, more = await self._batches.page(principal, after=query.get("after"), limit=limit)
        return _json(page_of([ENCODER.encode(b) for b in found], [b.id for b in found], more))

    async def _mine(self, request: web.Request, principal: Principal) -> Batch:
        """The caller's batch the path names (a message batch is not one: 404)."""
        batch = await self._batches.get(request.match_info["batch_id"], principal)
        if batch.endpoint == MESSAGES:
            raise missing_batch(batch.id)
        return batch

    async def _batch(self, request: web.Request, principal: Principal) -> web.Response:
        batch = await self._mine(request, principal)
        if batch.status in RUNNABLE:
            batch.request_counts = await self._batches.counts(batch.id)
        return _json(ENCODER.encode(batch))

    async def _cancel(self, request: web.Request, principal: Principal) -> web.Response:
        batch = await self._batches.request_cancel(
            (await self._mine(request, principal)).id, principal
        )
        self._executor.cancel(batch.id)
        return _json(ENCODER.encode(batch))


def answering(
    snapshot: Callable[[], Snapshot],
    request_id: Callable[[web.Request], str],
    handler: Handler,
    *,
    anthropic_shape: bool,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """``handler`` given the caller's principal (authenticated before any body is read), its
    errors answered in OpenAI's shape (or Anthropic's), an unexpected failure logged as a 500."""

    async def answer(request: web.Request) -> web.StreamResponse:
        current = snapshot()
        rid = request_id(request)
        try:
            principal = await current.authenticate(request.headers)
            return await handler(request, principal)
        except GatewayError as error:
            return error_response(error, anthropic_shape=anthropic_shape, request_id=rid)
        except Exception:
            current.logger.exception("unhandled_error", request_id=rid, route="batches")
            internal = InternalError("internal gateway error")
            return error_response(internal, anthropic_shape=anthropic_shape, request_id=rid)

    return answer


async def _pieces(part: BodyPartReader) -> AsyncIterator[bytes]:
    """The file part's bytes as they arrive (undoing a ``Content-Transfer-Encoding``)."""
    while piece := await part.read_chunk(PIECE_BYTES):
        yield part.decode(piece)


async def _small(part: BodyPartReader) -> bytes:
    """A small field's value, at most 256 bytes read (a 400 past them)."""
    value = b""
    while piece := await part.read_chunk(256):
        value += piece
        if len(value) > 256:
            raise BadRequest(f"the field {part.name!r} is too long")
    return value


def _descending(value: str | None) -> bool:
    if value is None or value == "desc":
        return True
    if value == "asc":
        return False
    raise BadRequest("order must be 'asc' or 'desc'", param="order")


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, headers={"content-type": "application/json"})
