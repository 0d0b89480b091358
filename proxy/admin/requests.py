"""The request logs API: what the gateway kept of each request (``telemetry.request_logs``).

- ``GET /admin/requests?from=&to=[&key_id=&team=&model=&status=]&limit=&cursor=`` (master key)
  → ``{"data": [records without payloads], "next": <cursor or null>}``, newest first; ``limit``
  1 to 1000 (100); ``from``/``to``, ``status`` and the cursors as in ``GET /admin/spend/logs``.
- ``GET /admin/requests/{request_id}`` (master key) → one record with its payloads: the record
  of that id, else the newest whose request id (``x-request-id``) it is; 404 ``not_found``.

A record shows ``time`` in RFC 3339, ``cost_usd`` (null: unknown), the timing breakdown
(``duration_ms`` = ``upstream_ms`` + ``overhead_ms``; ``ttft_ms``), ``trace_id`` (the client's
``traceparent``), and, under ``store: payloads``, ``request`` and ``response`` as JSON values
(a payload cut at ``max_payload_bytes`` is its text, and ``truncated`` is true). Before reading,
this process's queued records are written. 503 ``database_unavailable`` when the database cannot
answer.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from proxy.admin.guard import admin_route, json_response
from proxy.admin.spend import page_limit, query_moment, rfc3339, status_range
from proxy.core.errors import BadRequest, NotFound
from proxy.governance.pricing import nanos_to_usd
from proxy.request_logs.logs_db import LogFilter
from proxy.request_logs.records import RequestLogRecord
from proxy.request_logs.service import RequestLogs

REQUEST_LOGS = web.AppKey("request_logs", RequestLogs)
_JSON = msgspec.json.Decoder()


@admin_route
async def list_requests(request: web.Request) -> web.Response:
    """``GET /admin/requests``."""
    query = request.query
    start = query_moment(query.get("from"), "from")
    end = query_moment(query.get("to"), "to")
    if start is not None and end is not None and end <= start:
        raise BadRequest("to: must be after from", param="to")
    where = LogFilter(
        start=start,
        end=end,
        key_id=query.get("key_id") or None,
        team=query.get("team") or None,
        model=query.get("model") or None,
        statuses=status_range(query.get("status")),
    )
    logs = request.app[REQUEST_LOGS]
    await logs.flush()
    try:
        records, cursor = await logs.repository.find(
            where, page_limit(query.get("limit")), query.get("cursor")
        )
    except ValueError:
        raise BadRequest("cursor: not a cursor of this API", param="cursor") from None
    return json_response({"data": [shown(record) for record in records], "next": cursor})


@admin_route
async def get_request(request: web.Request) -> web.Response:
    """``GET /admin/requests/{request_id}``."""
    wanted = request.match_info["request_id"]
    logs = request.app[REQUEST_LOGS]
    await logs.flush()
    record = await logs.repository.get(wanted)
    if record is None:
        raise NotFound(f"no request log record {wanted!r}", code="not_found")
    return json_response(shown(record, payloads=True))


def shown(record: RequestLogRecord, *, payloads: bool = False) -> dict[str, Any]:
    """A record as the API shows it (RFC 3339 time, USD cost; payloads as JSON values)."""
    fields = msgspec.structs.asdict(record)
    fields["time"] = rfc3339(record.time)
    cost = fields.pop("cost_nanos")
    fields["cost_usd"] = None if cost is None else nanos_to_usd(cost)
    request_text, response_text = fields.pop("request"), fields.pop("response")
    if payloads:
        fields["request"] = _payload(request_text, record.truncated)
        fields["response"] = _payload(response_text, record.truncated)
    return fields


def _payload(text: str | None, truncated: bool) -> Any:
    """A stored payload as a JSON value (its text when it was cut and does not parse)."""
    if text is None:
        return None
    try:
        return _JSON.decode(text)
    except msgspec.DecodeError:
        return text if truncated else None


ROUTES = (
    ("GET", "/admin/requests", list_requests),
    ("GET", "/admin/requests/{request_id}", get_request),
)
