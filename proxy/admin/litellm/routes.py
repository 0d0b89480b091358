"""LiteLLM's proxy routes, as thin aliases over the admin API: scripts and dashboards written
for LiteLLM keep working. On unless ``compat: {litellm: false}`` (as the process started).

Master key (``Authorization: Bearer``; 401 otherwise, as LiteLLM answers):

- ``POST /key/generate`` — a LiteLLM key body (:mod:`proxy.admin.litellm.bodies`) → 200 with
  ``key`` (shown once) and the record in LiteLLM's field names (``token`` is the key's id).
- ``POST /key/update`` — ``{"key": <key or id>, …fields}`` → 200, the changed record.
- ``POST /key/delete`` — ``{"keys": [...]}`` and/or ``{"key_aliases": [...]}`` → 200
  ``{"deleted_keys": [...]}``; 404 naming the first key that does not exist (nothing deleted).
- ``POST /key/block`` / ``POST /key/unblock`` — ``{"key": …}`` → 200, the changed record.
- ``GET /spend/logs[?api_key=&user_id=&request_id=&start_date=&end_date=]`` → a JSON list of
  LiteLLM spend-log rows (``request_id``, ``api_key`` = the key's id, ``spend``, tokens,
  ``startTime``/``endTime``, ``model``, ``model_group``, ``custom_llm_provider``, ``user``,
  ``team_id``, ``cache_hit``, ``status``, ``metadata``: the key alias, the dialect and a media
  call's ``media_units``), newest first, at most 1000.

Any valid key (the master key sees everything): ``GET /key/info[?key=]`` → ``{"key", "info"}``
for the caller's own key (without ``key=``, or naming itself by its value or id; ``key`` is
what ``key=`` named, else the key's id), any key for the master key; 404 ``key_not_found``,
the same answer, for another key's and for an unknown one. ``GET /model/info`` →
``{"data": [{model_name, litellm_params: {model}, model_info: {id, mode}}]}``, one row per
deployment of every alias the caller may use (open when the gateway is); ``id`` is the
deployment's ``provider/model``, the value of ``x-litellm-model-id``.

Open: ``GET /health/liveliness`` → 200 ``"I'm alive!"``; ``GET /health/readiness`` → 200
``{"status": "healthy", "db": …, "cache": …}`` while a provider is ready, else 503.

A key is named by its value (``sk-cw-…``) or by its id (``key_…``, what ``token`` shows); a
value that cannot be a key (:func:`~proxy.governance.auth.tokens.checked_key`: not printable ASCII,
too long) is a 400 naming the field, never hashed. Database failures are 503
``database_unavailable``, as on the admin API.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web

from proxy import __version__
from proxy.admin.guard import ADMIN, admin_route, error_response, json_errors, json_response
from proxy.admin.litellm.bodies import decode_key_body, key_changes, new_key, shown
from proxy.core.errors import BadRequest, GatewayError, NotFound
from proxy.core.moments import parse_moment
from proxy.governance.auth.keys_db import KeyRepository
from proxy.governance.auth.records import KeyRecord
from proxy.governance.auth.registry import KeyChanges
from proxy.governance.auth.tokens import (
    MAX_KEY_LENGTH,
    MalformedKey,
    checked_key,
    hash_key,
    key_from_headers,
)
from proxy.governance.ledger.records import SpendRecord, billed_media
from proxy.governance.ledger.spend_db import SpendFilter, SpendRepository
from proxy.governance.pricing import nanos_to_usd

_MAX_LOGS = 1000


class LiteLLMRoutes:
    """What the routes need beyond the admin context: the current snapshot (a function: it
    changes on reload)."""

    def __init__(self, snapshot: Callable[[], Any]) -> None:
        self.snapshot = snapshot


LITELLM = web.AppKey("litellm", LiteLLMRoutes)


def add_litellm_routes(
    app: web.Application,
    routes: LiteLLMRoutes,
    wrap: Callable[[str, Any], Any] = lambda route, handler: handler,
) -> None:
    """Serve the routes on ``app`` (after :func:`proxy.admin.add_admin_routes`)."""
    app[LITELLM] = routes
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, wrap(path, handler))


# -- keys (master key) ------------------------------------------------------------------------


@admin_route
async def generate_key(request: web.Request) -> web.Response:
    """``POST /key/generate``."""
    body = decode_key_body(await request.read(), update=False)
    registry = request.app[ADMIN].registry()
    record, key = await registry.create_key(new_key(body, datetime.now(UTC)))
    if body.blocked:
        record = await registry.update_key(record.id, KeyChanges(blocked=True))
    return json_response(shown(record, key))


@admin_route
async def update_key(request: web.Request) -> web.Response:
    """``POST /key/update``."""
    body = decode_key_body(await request.read(), update=True)
    if not isinstance(body.key, str):
        raise BadRequest("key: the key to update is required", param="key")
    current = await _find(request, body.key, "key")
    changes = key_changes(body, current, datetime.now(UTC))
    record = await request.app[ADMIN].registry().update_key(current.id, changes)
    return json_response({"key": body.key, **shown(record)})


class _Delete(msgspec.Struct, frozen=True):
    keys: list[str] = []
    key_aliases: list[str] = []


@admin_route
async def delete_keys(request: web.Request) -> web.Response:
    """``POST /key/delete``."""
    body = _decode(await request.read(), _Delete)
    if not body.keys and not body.key_aliases:
        raise BadRequest("keys: name at least one key (or key_aliases)", param="keys")
    records = [await _find(request, key, f"keys[{i}]") for i, key in enumerate(body.keys)]
    if body.key_aliases:
        registry = request.app[ADMIN].registry()
        by_alias = {r.alias: r for r in await registry.list_keys() if r.alias is not None}
        for alias in body.key_aliases:
            if alias not in by_alias:
                raise NotFound(f"no key with alias {alias!r}", code="key_not_found")
            records.append(by_alias[alias])
    registry = request.app[ADMIN].registry()
    for record in records:
        await registry.delete_key(record.id)
    return json_response({"deleted_keys": [*body.keys, *body.key_aliases]})


class _KeyOnly(msgspec.Struct, frozen=True):
    key: str


@admin_route
async def block_key(request: web.Request) -> web.Response:
    """``POST /key/block``."""
    return await _set_blocked(request, True)


@admin_route
async def unblock_key(request: web.Request) -> web.Response:
    """``POST /key/unblock``."""
    return await _set_blocked(request, False)


async def _set_blocked(request: web.Request, blocked: bool) -> web.Response:
    body = _decode(await request.read(), _KeyOnly)
    current = await _find(request, body.key, "key")
    record = await request.app[ADMIN].registry().update_key(current.id, KeyChanges(blocked=blocked))
    return json_response(shown(record))


@json_errors
async def key_info(request: web.Request) -> web.Response:
    """``GET /key/info[?key=]``: the caller's own key, or any key for the master key. Another
    key's, for any other caller, is the same 404 as a key that does not exist: nothing about it
    is looked up."""
    context = request.app[ADMIN]
    authenticator = context.authenticator()
    named = request.query.get("key")
    if authenticator.is_master(_bearer(request)):
        record = await _find(request, named or "", "key")
    else:
        principal = await authenticator.authenticate(request.headers)
        if named not in (None, "", principal.key_id, key_from_headers(request.headers)):
            raise _no_such_key("key")
        record = await context.registry().get_key(principal.key_id or "")
    return json_response({"key": named or record.id, "info": shown(record)})


# -- spend (master key) -----------------------------------------------------------------------


@admin_route
async def spend_logs(request: web.Request) -> web.Response:
    """``GET /spend/logs``."""
    query = request.query
    key_id = None
    if query.get("api_key"):
        key_id = (await _find(request, query["api_key"], "api_key")).id
    where = SpendFilter(
        start=_date(query.get("start_date"), "start_date"),
        end=_date(query.get("end_date"), "end_date"),
        key_id=key_id,
        user=query.get("user_id") or None,
    )
    ledger = request.app[ADMIN].ledger
    if ledger is not None:
        await ledger.flush()
    records, _ = await SpendRepository(request.app[ADMIN].database).logs(where, _MAX_LOGS, None)
    wanted = query.get("request_id")
    rows = [_spend_row(r) for r in records if wanted is None or r.request_id == wanted]
    return json_response(rows)


CALL_TYPES = {
    "openai_completions": "atext_completion",
    "openai_embeddings": "aembedding",
    "anthropic": "anthropic_messages",
    "responses": "aresponses",
    "openai_speech": "aspeech",
    "openai_transcriptions": "atranscription",
    "openai_translations": "atranscription",
    "openai_images": "aimage_generation",
    "openai_image_edits": "aimage_edit",
    "openai_moderations": "amoderation",
    "rerank": "arerank",
}
"""LiteLLM's ``call_type`` of a record's dialect (its ``CallTypes``); any other (chat in any
dialect) is ``acompletion``."""


def _spend_row(record: SpendRecord) -> dict[str, Any]:
    end = record.time
    start = end - record.duration_ms / 1000
    tokens = record.input_tokens + record.cache_read_tokens + record.cache_write_tokens
    return {
        "request_id": record.request_id,
        "call_type": CALL_TYPES.get(record.dialect, "acompletion"),
        "api_key": record.key_id,
        "spend": 0.0 if record.cost_nanos is None else nanos_to_usd(record.cost_nanos),
        "total_tokens": tokens + record.output_tokens,
        "prompt_tokens": tokens,
        "completion_tokens": record.output_tokens,
        "startTime": _iso(start),
        "endTime": _iso(end),
        "model": None if record.provider is None else f"{record.provider}/{record.upstream_model}",
        "model_group": record.model,
        "custom_llm_provider": record.provider,
        "user": record.user,
        "team_id": record.team,
        "metadata": _metadata(record),
        "cache_hit": "True" if record.cache == "hit" else "False",
        "status": "success" if record.status < 400 else "failure",
    }


def _metadata(record: SpendRecord) -> dict[str, Any]:
    """A row's ``metadata``: the key's alias, the dialect and a media call's billed units."""
    metadata: dict[str, Any] = {"key_alias": record.key_alias, "dialect": record.dialect}
    units = billed_media(record)
    if units is not None:
        metadata["media_units"] = units
    return metadata


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def _date(value: str | None, param: str) -> datetime | None:
    return parse_moment(value, param) if value else None


# -- models and health ------------------------------------------------------------------------


async def model_info(request: web.Request) -> web.Response:
    """``GET /model/info``: the configured aliases the caller may use."""
    snapshot = request.app[LITELLM].snapshot()
    try:
        principal = None
        if snapshot.demands_key:
            principal = await snapshot.authenticate(request.headers)
    except GatewayError as error:
        return error_response(error)
    data = []
    for alias, deployments in snapshot.router.aliases().items():
        if principal is not None and not principal.allows(alias):
            continue
        data += [
            {
                "model_name": alias,
                "litellm_params": {"model": deployment.target},
                "model_info": {"id": deployment.target, "mode": "chat", "db_model": False},
            }
            for deployment in deployments
        ]
    return json_response({"data": data})


async def liveliness(request: web.Request) -> web.Response:
    """``GET /health/liveliness``."""
    return json_response("I'm alive!")


async def readiness(request: web.Request) -> web.Response:
    """``GET /health/readiness``: 200 while a provider is ready, else 503."""
    snapshot = request.app[LITELLM].snapshot()
    ready = any(provider.ready for provider in snapshot.providers.values())
    database = request.app[ADMIN].database
    state = snapshot.config.state
    body = {
        "status": "healthy" if ready else "unhealthy",
        "db": "connected" if database.is_open else "Not connected",
        "cache": "redis" if state.backend == "redis" else None,
        "litellm_version": None,
        "crossway_version": __version__,
    }
    return json_response(body, status=200 if ready else 503)


# -- shared -----------------------------------------------------------------------------------


async def _find(request: web.Request, key: str, param: str) -> KeyRecord:
    """The record of a key named (in ``param``) by its value or its id; a 404 when there is
    none, a 400 naming ``param`` for a value that cannot be a key (never hashed)."""
    registry = request.app[ADMIN].registry()
    if key.startswith(("key_", "config:")):
        return await registry.get_key(key)
    try:
        key_hash = hash_key(checked_key(key, param))
    except MalformedKey:
        raise BadRequest(
            f"{param}: not a key (printable ASCII, at most {MAX_KEY_LENGTH} characters)",
            param=param,
        ) from None
    database = request.app[ADMIN].database
    await database.open()
    found = await KeyRepository(database).by_hash(key_hash)
    if found is None:
        raise _no_such_key(param)
    return found[0]


def _no_such_key(param: str) -> NotFound:
    """What a caller learns of a key it may not read, and of one that does not exist."""
    return NotFound("no such key", code="key_not_found", param=param)


def _bearer(request: web.Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _decode(body: bytes, body_type: type[Any]) -> Any:
    if not body:
        raise BadRequest("a JSON body is required", code="invalid_json")
    try:
        return msgspec.json.decode(body, type=body_type)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"invalid body: {exc}", code="invalid_request") from None


ROUTES = (
    ("POST", "/key/generate", generate_key),
    ("POST", "/key/update", update_key),
    ("POST", "/key/delete", delete_keys),
    ("POST", "/key/block", block_key),
    ("POST", "/key/unblock", unblock_key),
    ("GET", "/key/info", key_info),
    ("GET", "/spend/logs", spend_logs),
    ("GET", "/model/info", model_info),
    ("GET", "/health/liveliness", liveliness),
    ("GET", "/health/readiness", readiness),
)
