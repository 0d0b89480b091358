"""What every admin route shares: the master-key guard, JSON bodies in and out, errors.

An admin handler is ``async (request) -> web.Response`` wrapped by :func:`admin_route`, which
refuses any request without ``Authorization: Bearer <master key>`` (401; the admin API is off
while ``auth.master_key`` is empty), turns a :class:`~proxy.core.errors.GatewayError` into OpenAI's
error JSON with its status, and a database that cannot answer (or answers later than
:data:`DATABASE_TIMEOUT`) into 503 ``database_unavailable``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import sqlalchemy as sa
from aiohttp import web

from proxy.core.errors import AuthenticationFailed, BadRequest, GatewayError, UndecodableBody
from proxy.db import Database, DatabaseError
from proxy.dialects.base import bad_request
from proxy.dialects.openai_chat import error_json
from proxy.governance.auth.authenticator import Authenticator
from proxy.governance.auth.registry import Registry
from proxy.governance.ledger.writer import LedgerWriter
from proxy.state.store import Store

if TYPE_CHECKING:
    from proxy.admin.overview import Overview
    from proxy.runtime.snapshot import Snapshot

DATABASE_TIMEOUT = 10.0
_JSON = "application/json"
_UNKNOWN_FIELD = re.compile(r"unknown field `([^`]+)`")
_ENCODER = msgspec.json.Encoder()
_T = TypeVar("_T")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AdminContext:
    """What the admin routes need from the app: the process's database, the current
    snapshot's authenticator (a function: it changes on reload), how to reload, the process's
    spend ledger writer (None without one), the overview of its counters, the current snapshot
    and the health view of the shared state (None where the app keeps none)."""

    def __init__(
        self,
        database: Database,
        authenticator: Callable[[], Authenticator],
        reload: Callable[[], bool],
        ledger: LedgerWriter | None = None,
        *,
        overview: Overview | None = None,
        snapshot: Callable[[], Snapshot] | None = None,
        health: Store | None = None,
    ) -> None:
        self.database = database
        self.authenticator = authenticator
        self.reload = reload
        self.ledger = ledger
        self.overview = overview
        self.snapshot = snapshot
        self.health = health

    def registry(self) -> Registry:
        """A registry over the database and the current config."""
        return Registry(self.database, self.authenticator())


ADMIN = web.AppKey("admin", AdminContext)


class DatabaseUnavailable(GatewayError):
    """The database did not answer an admin request (503)."""

    status = 503
    type = "api_error"
    default_code = "database_unavailable"
    kind = "internal"


def admin_route(handler: Handler) -> Handler:
    """``handler`` behind the master-key guard, with errors as JSON (module docstring)."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        _check_master_key(request, request.app[ADMIN].authenticator())
        return await handler(request)

    return json_errors(guarded)


def json_errors(handler: Handler) -> Handler:
    """``handler`` with its errors as JSON and without a guard (a route that authenticates its
    caller itself): a :class:`~proxy.core.errors.GatewayError` with its status, a body that does not
    decode as its ``Content-Encoding`` says as 400, a database that cannot answer within
    :data:`DATABASE_TIMEOUT` as 503 ``database_unavailable``."""

    async def answered(request: web.Request) -> web.StreamResponse:
        try:
            async with asyncio.timeout(DATABASE_TIMEOUT):
                return await handler(request)
        except GatewayError as error:
            return error_response(error)
        except web.RequestPayloadError:  # a gzip or deflate body that does not inflate
            return error_response(UndecodableBody())
        except (sa.exc.SQLAlchemyError, DatabaseError, OSError, TimeoutError):
            return error_response(DatabaseUnavailable("the database cannot answer right now"))

    return answered


def _check_master_key(request: web.Request, authenticator: Authenticator) -> None:
    if authenticator.master_hash is None:
        raise AuthenticationFailed(
            "the admin API is off: set auth.master_key to use it", code="admin_disabled"
        )
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not authenticator.is_master(token.strip()):
        raise AuthenticationFailed("the admin API needs 'Authorization: Bearer <master key>'")


async def read_body(request: web.Request, body_type: type[_T]) -> _T:
    """The JSON body as ``body_type``; raises :class:`BadRequest` naming the bad field."""
    body = await request.read()
    if not body:
        raise BadRequest("a JSON body is required", code="invalid_json")
    try:
        return msgspec.json.decode(body, type=body_type)
    except msgspec.DecodeError as exc:
        error = bad_request(exc)
        unknown = _UNKNOWN_FIELD.search(str(exc))
        if unknown is not None:
            error.param = unknown.group(1)
        raise error from None


def json_response(value: Any, status: int = 200) -> web.Response:
    """``value`` (Structs, lists, dicts) as a JSON response."""
    return web.Response(body=_ENCODER.encode(value), status=status, content_type=_JSON)


def error_response(error: GatewayError) -> web.Response:
    """``error`` as OpenAI's error JSON with its status and headers."""
    return web.Response(
        body=error_json(error),
        status=error.status,
        content_type=_JSON,
        headers=error.response_headers(),
    )
