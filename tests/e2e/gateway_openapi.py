"""The gateway's own OpenAPI document: every route the public specs in tests/specs/ do not
describe — the admin API, LiteLLM's routes, the spend API, health, metrics, the UI, Cohere's
rerank, and any other path (the catch-all) — for the schemathesis job
(tests/e2e/test_schemathesis.py).

Request bodies are the JSON schemas of the very msgspec Structs the routes decode
(:func:`msgspec.json.schema_components`), so their bounds are the code's; query parameters are
listed here, from the routes' docstrings. :func:`route_templates` names the routes an app
serves, so that the job can prove no route is left out.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from aiohttp import web

from proxy.admin.litellm.bodies import LiteLLMKey
from proxy.governance.auth.registry import KeyChanges, NewKey, NewTeam, TeamChanges

_TEXT = {"type": "string"}
_TIME = {"type": "string", "format": "date-time"}
_LIMIT = {"type": "integer", "minimum": 1, "maximum": 1000}
_KEY_NAMED = {
    "type": "object",
    "properties": {"key": _TEXT},
    "required": ["key"],
}  # /key/block and /key/unblock
_KEYS_NAMED = {
    "type": "object",
    "properties": {
        "keys": {"type": "array", "items": _TEXT},
        "key_aliases": {"type": "array", "items": _TEXT},
    },
}  # /key/delete
_RERANK = {
    "type": "object",
    "properties": {
        "model": _TEXT,
        "query": _TEXT,
        "documents": {
            "type": "array",
            "items": {"anyOf": [_TEXT, {"type": "object", "properties": {"text": _TEXT}}]},
        },
        "top_n": {"type": "integer"},
        "return_documents": {"type": "boolean"},
        "max_tokens_per_doc": {"type": "integer"},
    },
    "required": ["model", "query", "documents"],
}  # Cohere's rerank request (no public OpenAPI file of it is kept in tests/specs/)
_SPEND = {"from": _TIME, "to": _TIME}
_QUERIES: dict[str, dict[str, dict[str, Any]]] = {
    "GET /v1/messages/batches": {"limit": _LIMIT, "after_id": _TEXT},
    "GET /admin/keys": {
        "team": _TEXT,
        "limit": _LIMIT,
        "cursor": _TEXT,
        "q": _TEXT,
        "status": {"enum": ["active", "blocked", "expired"]},
    },
    "GET /admin/spend": {
        **_SPEND,
        "group_by": {"type": "string", "pattern": "^(key|team|model|provider|user|day|batch)$"},
        "team": _TEXT,
        "key_id": _TEXT,
    },
    "GET /admin/spend/logs": {
        **_SPEND,
        "team": _TEXT,
        "key_id": _TEXT,
        "user": _TEXT,
        "model": _TEXT,
        "status": {"type": "string", "pattern": "^([1-5]xx|[1-9][0-9][0-9])$"},
        "cache": {"enum": ["hit", "miss", "bypass", "coalesced"]},
        "limit": _LIMIT,
        "cursor": _TEXT,
    },
    "GET /admin/requests": {
        **_SPEND,
        "key_id": _TEXT,
        "team": _TEXT,
        "model": _TEXT,
        "status": {"type": "string", "pattern": "^([1-5]xx|[1-9][0-9][0-9])$"},
        "limit": _LIMIT,
        "cursor": _TEXT,
    },
    "GET /v1/spend": {**_SPEND, "limit": _LIMIT, "cursor": _TEXT},
    "GET /key/info": {"key": _TEXT},
    "GET /spend/logs": {
        "api_key": _TEXT,
        "user_id": _TEXT,
        "request_id": _TEXT,
        "start_date": _TIME,
        "end_date": _TIME,
    },
}
_BODIES: dict[str, Any] = {
    "POST /admin/keys": NewKey,
    "PATCH /admin/keys/{id}": KeyChanges,
    "POST /admin/teams": NewTeam,
    "PATCH /admin/teams/{id}": TeamChanges,
    "POST /key/generate": LiteLLMKey,
    "POST /key/update": LiteLLMKey,
    "POST /key/delete": _KEYS_NAMED,
    "POST /key/block": _KEY_NAMED,
    "POST /key/unblock": _KEY_NAMED,
    "POST /v1/messages/batches": {
        "type": "object",
        "properties": {
            "requests": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"custom_id": _TEXT, "params": {"type": "object"}},
                    "required": ["custom_id", "params"],
                },
            }
        },
        "required": ["requests"],
    },
    "POST /v1/rerank": _RERANK,
    "POST /v2/rerank": _RERANK,
    "POST /rerank": _RERANK,
}
ROUTES = (
    "POST /admin/keys",
    "GET /admin/keys",
    "GET /admin/keys/{id}",
    "PATCH /admin/keys/{id}",
    "DELETE /admin/keys/{id}",
    "POST /admin/teams",
    "GET /admin/teams",
    "GET /admin/teams/{id}",
    "PATCH /admin/teams/{id}",
    "DELETE /admin/teams/{id}",
    "GET /admin/spend",
    "GET /admin/spend/logs",
    "POST /admin/reload",
    "GET /admin/overview",
    "GET /admin/models",
    "GET /admin/requests",
    "GET /admin/requests/{id}",
    "GET /admin/mcp",
    "GET /v1/spend",
    "POST /key/generate",
    "POST /key/update",
    "POST /key/delete",
    "POST /key/block",
    "POST /key/unblock",
    "GET /key/info",
    "GET /spend/logs",
    "GET /model/info",
    "GET /health/liveliness",
    "GET /health/readiness",
    "GET /health/live",
    "GET /health/ready",
    "GET /metrics",
    "GET /ui",
    "GET /ui/{path}",
    "POST /v1/messages/batches",
    "GET /v1/messages/batches",
    "GET /v1/messages/batches/{id}",
    "DELETE /v1/messages/batches/{id}",
    "POST /v1/messages/batches/{id}/cancel",
    "GET /v1/messages/batches/{id}/results",
    "POST /v1/rerank",
    "POST /v2/rerank",
    "POST /rerank",
    "GET /{tail}",
    "POST /{tail}",
)
"""The operations of the document, as ``METHOD /path``."""


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of :data:`ROUTES`."""
    structs = sorted({t for t in _BODIES.values() if isinstance(t, type)}, key=lambda t: t.__name__)
    refs, components = msgspec.json.schema_components(
        structs, ref_template="#/components/schemas/{name}"
    )
    schema_of = dict(zip(structs, refs, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        method, path = route.split(" ", 1)
        operation: dict[str, Any] = {"responses": {"default": {"description": "any"}}}
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": _TEXT}
            for name in re.findall(r"{(\w+)}", path)
        ]
        parameters += [
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in _QUERIES.get(route, {}).items()
        ]
        if parameters:
            operation["parameters"] = parameters
        body = _BODIES.get(route)
        if body is not None:
            schema = schema_of[body] if isinstance(body, type) else body
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema}},
            }
        paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "Crossway's own routes", "version": "1"},
        "paths": paths,
        "components": {"schemas": components},
    }


def route_templates(app: web.Application) -> set[str]:
    """The routes ``app`` serves, as ``METHOD /path`` with every path parameter written
    ``{}`` (``HEAD`` left out: aiohttp adds it beside each ``GET``; ``*`` as ``GET`` and
    ``POST``)."""
    found = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if route.method == "HEAD" or path is None:
            continue
        methods = ("GET", "POST") if route.method == "*" else (route.method,)
        found |= {f"{method} {template(path)}" for method in methods}
    return found


def template(path: str) -> str:
    """``path`` with each parameter written ``{}`` (``{model:.+}`` and ``{model_id}`` alike)."""
    return re.sub(r"{[^}]*}", "{}", path)
