"""The spend API: what was spent, by whom, on what — read from the ledger.

- ``GET /admin/spend?group_by=key|team|model|provider|user|day|batch[,…]&from=&to=[&team=&key_id=]``
  (master key) → ``{"data": [{<group fields>, requests, input_tokens, cache_read_tokens,
  cache_write_tokens, output_tokens, reasoning_tokens, cost_usd, saved_usd, audio_seconds,
  characters, images, search_units}], "total": {…}}``,
  groups largest cost first; group fields are named ``key_id``, ``team``, ``model``,
  ``provider``, ``user``, ``day``, ``batch_id``. Without ``group_by``, ``data`` holds one row: the
  total.
- ``GET /admin/spend/logs?from=&to=[&team=&key_id=&user=&model=&status=&cache=]&limit=&cursor=``
  (master key) → ``{"data": [records], "next": <cursor or null>}``, newest first; ``limit`` 1
  to 1000 (100). ``model`` is the name the client asked for, ``status`` a code (``429``) or a
  class (``4xx``), ``cache`` a cache result (``hit``, ``miss``, ``bypass``, ``coalesced``).
- ``GET /v1/spend?from=&to=&limit=&cursor=`` with a virtual key → that key's own records and
  totals: ``{"key_id", "total": {…}, "data": [records], "next"}``; nothing of other keys.

``from`` (inclusive) and ``to`` (exclusive) are RFC 3339 times (``2026-12-01T00:00:00Z``) or
UTC dates (``2026-12-01``) from 1970 to 9998 (:mod:`proxy.core.moments`; else a 400 naming them).
Records are those of :class:`~proxy.governance.ledger.records.SpendRecord` with ``time`` in RFC 3339
and money in USD (``cost_usd``, ``saved_usd``; null when unknown), a media call's billed units
as ``media_units`` (null for any other request).
Before reading, this process's queued records are written (a response a client just got is
counted); other instances' queues are at most ``interval`` (1 s) behind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from proxy.admin.guard import ADMIN, admin_route, json_errors, json_response
from proxy.core.errors import BadRequest
from proxy.core.moments import parse_moment
from proxy.governance.ledger.records import SpendRecord, billed_media
from proxy.governance.ledger.spend_db import GROUPS, SpendFilter, SpendRepository
from proxy.governance.pricing import nanos_to_usd

_DEFAULT_LIMIT = 100
_MAX_LIMIT = 1000


@admin_route
async def spend_totals(request: web.Request) -> web.Response:
    """``GET /admin/spend``."""
    query = request.query
    groups = _group_by(query.get("group_by"))
    where = _filter(query, team=query.get("team"), key_id=query.get("key_id"))
    await _flush(request)
    data, total = await _repository(request).totals(where, groups)
    return json_response({"data": [_money(row) for row in data], "total": _money(total)})


@admin_route
async def spend_logs(request: web.Request) -> web.Response:
    """``GET /admin/spend/logs``."""
    query = request.query
    where = _filter(
        query, team=query.get("team"), key_id=query.get("key_id"), user=query.get("user")
    )
    where.model = query.get("model") or None
    where.cache = query.get("cache") or None
    where.statuses = status_range(query.get("status"))
    await _flush(request)
    records, cursor = await _page(request, where)
    return json_response({"data": [shown(record) for record in records], "next": cursor})


@json_errors
async def own_spend(request: web.Request) -> web.Response:
    """``GET /v1/spend``: the calling key's own spend (401 without a valid key; 503 when the
    database cannot answer)."""
    principal = await request.app[ADMIN].authenticator().authenticate(request.headers)
    where = _filter(request.query, key_id=principal.key_id)
    await _flush(request)
    _, total = await _repository(request).totals(where, [])
    records, cursor = await _page(request, where)
    return json_response(
        {
            "key_id": principal.key_id,
            "total": _money(total),
            "data": [shown(record) for record in records],
            "next": cursor,
        }
    )


def _repository(request: web.Request) -> SpendRepository:
    return SpendRepository(request.app[ADMIN].database)


async def _flush(request: web.Request) -> None:
    """Write this process's queued records first: a charge a client saw is counted."""
    ledger = request.app[ADMIN].ledger
    if ledger is not None:
        await ledger.flush()


async def _page(request: web.Request, where: SpendFilter) -> tuple[list[SpendRecord], str | None]:
    limit = page_limit(request.query.get("limit"))
    try:
        return await _repository(request).logs(where, limit, request.query.get("cursor"))
    except ValueError:
        raise BadRequest("cursor: not a cursor of this API", param="cursor") from None


def _group_by(value: str | None) -> list[Any]:
    if not value:
        return []
    groups = [name.strip() for name in value.split(",") if name.strip()]
    for name in groups:
        if name not in GROUPS:
            raise BadRequest(
                f"group_by: {name!r} is not one of {', '.join(GROUPS)}", param="group_by"
            )
    if len(set(groups)) != len(groups):
        raise BadRequest("group_by: a field is named twice", param="group_by")
    return groups


def status_range(value: str | None) -> tuple[int, int] | None:
    """``429`` → (429, 429); ``4xx`` → (400, 499)."""
    if not value:
        return None
    if len(value) == 3 and value[0] in "12345" and value[1:].lower() == "xx":
        low = int(value[0]) * 100
        return low, low + 99
    if value.isdigit() and 100 <= int(value) <= 999:
        return int(value), int(value)
    raise BadRequest("status: expected a status code (429) or a class (4xx)", param="status")


def _filter(
    query: Mapping[str, str],
    *,
    team: str | None = None,
    key_id: str | None = None,
    user: str | None = None,
) -> SpendFilter:
    start = query_moment(query.get("from"), "from")
    end = query_moment(query.get("to"), "to")
    if start is not None and end is not None and end <= start:
        raise BadRequest("to: must be after from", param="to")
    return SpendFilter(start=start, end=end, team=team, key_id=key_id, user=user)


def query_moment(value: str | None, param: str) -> datetime | None:
    return parse_moment(value, param) if value else None


def page_limit(value: str | None) -> int:
    if value is None:
        return _DEFAULT_LIMIT
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if not 1 <= limit <= _MAX_LIMIT:
        raise BadRequest(f"limit: expected an integer from 1 to {_MAX_LIMIT}", param="limit")
    return limit


def _money(row: dict[str, Any]) -> dict[str, Any]:
    """Sums with money in USD instead of nano-dollars."""
    row["cost_usd"] = nanos_to_usd(row.pop("cost_nanos"))
    row["saved_usd"] = nanos_to_usd(row.pop("saved_nanos"))
    return row


def shown(record: SpendRecord) -> dict[str, Any]:
    """A record as the API shows it (RFC 3339 time, USD amounts)."""
    return {
        "request_id": record.request_id,
        "time": rfc3339(record.time),
        "key_id": record.key_id,
        "key_alias": record.key_alias,
        "team": record.team,
        "user": record.user,
        "dialect": record.dialect,
        "model": record.model,
        "provider": record.provider,
        "upstream_model": record.upstream_model,
        "input_tokens": record.input_tokens,
        "cache_read_tokens": record.cache_read_tokens,
        "cache_write_tokens": record.cache_write_tokens,
        "output_tokens": record.output_tokens,
        "reasoning_tokens": record.reasoning_tokens,
        "cost_usd": None if record.cost_nanos is None else nanos_to_usd(record.cost_nanos),
        "cost_source": record.cost_source,
        "saved_usd": None if record.saved_nanos is None else nanos_to_usd(record.saved_nanos),
        "status": record.status,
        "error_code": record.error_code,
        "duration_ms": record.duration_ms,
        "ttft_ms": record.ttft_ms,
        "attempts": record.attempts,
        "fallback": record.fallback,
        "cache": record.cache,
        "guardrails": None if record.guardrails is None else json.loads(record.guardrails),
        "mcp_server": record.mcp_server,
        "mcp_tool": record.mcp_tool,
        "mcp_bytes": record.mcp_bytes,
        "media_units": billed_media(record),
    }


def rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


ROUTES = (
    ("GET", "/admin/spend", spend_totals),
    ("GET", "/admin/spend/logs", spend_logs),
    ("GET", "/v1/spend", own_spend),
)
