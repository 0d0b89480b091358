"""A spend record: what the ledger keeps of one request, and how a finished request becomes one.

The fields are the admin API's (``GET /admin/spend/logs``), with money kept as exact integer
nano-dollars (``cost_nanos``, ``saved_nanos``; the API shows them as ``cost_usd`` /
``saved_usd``) and ``time`` as a UNIX timestamp (seconds, UTC) of the request's end. ``id`` is
the ledger's own key, unique per request whatever the client sent as ``x-request-id``
(``request_id`` is that id, as the client saw it): replaying a journal never duplicates a
record, and two requests reusing one ``x-request-id`` are both kept.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import msgspec

from proxy.canonical import Call
from proxy.chain import FinishedRequest

_MAX_TEXT = 256  # stored strings (model names, users) are bounded, as in the access log


class SpendRecord(msgspec.Struct, gc=False):
    """One request in the ledger (see the module docstring). None: not known or not applicable.

    ``user`` is the end user the request named (OpenAI ``user``, Anthropic ``metadata.user_id``,
    orq ``identity.id``), else the user the key belongs to. ``model`` is the model the client
    asked for (an alias or ``provider/model``), ``provider`` / ``upstream_model`` the deployment
    that answered. ``status`` is the HTTP status the client got (499: it went away first);
    ``cache`` the cache's verdict (``hit`` costs 0 and records what it saved).
    """

    id: str
    request_id: str
    time: float
    key_id: str | None
    key_alias: str | None
    team: str | None
    user: str | None
    dialect: str
    model: str | None
    provider: str | None
    upstream_model: str | None
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost_nanos: int | None
    cost_source: str | None
    saved_nanos: int | None
    status: int
    error_code: str | None
    duration_ms: float
    ttft_ms: float | None
    attempts: int
    fallback: str | None
    cache: str | None


class RecordIds:
    """Fresh ledger ids: a random prefix per process and a counter (32 hex digits, unique)."""

    __slots__ = ("_counter", "_prefix")

    def __init__(self) -> None:
        self._prefix = uuid.uuid4().hex[:16]
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        """The next id."""
        return f"{self._prefix}{next(self._counter):016x}"


def end_user(call: Call) -> str | None:
    """The end user ``call`` names, else the user its key belongs to (bounded in length)."""
    user = call.params.user
    if not isinstance(user, str) or not user:
        user = _identity(call.options.metadata)
    if not user:
        user = call.principal.user
    return user[:_MAX_TEXT] if user else None


def _identity(metadata: dict[str, Any] | None) -> str | None:
    identity = (metadata or {}).get("identity")
    if isinstance(identity, dict):
        found = identity.get("id")
        if isinstance(found, str):
            return found
    return None


def spend_record(request: FinishedRequest, record_id: str) -> SpendRecord:
    """The ledger's record of ``request``."""
    call = request.call
    principal = request.principal
    if call is None:
        accounting = None
        model = user = None
        ttft = None
    else:
        accounting = call.accounting
        model = call.model[:_MAX_TEXT]
        user = end_user(call)
        first = call.timings.first_token
        ttft = None if first is None else round(first * 1000, 3)
    usage = accounting.usage if accounting is not None and accounting.usage else request.usage
    upstream_model = request.upstream_model
    return SpendRecord(
        id=record_id,
        request_id=request.request_id,
        time=request.ended_at,
        key_id=principal.key_id,
        key_alias=principal.key_alias,
        team=principal.team,
        user=user,
        dialect=request.dialect,
        model=model,
        provider=request.provider,
        upstream_model=upstream_model[:_MAX_TEXT] if upstream_model else None,
        input_tokens=usage.input if usage else 0,
        cache_read_tokens=usage.cache_read if usage else 0,
        cache_write_tokens=usage.cache_write if usage else 0,
        output_tokens=usage.output if usage else 0,
        reasoning_tokens=usage.reasoning if usage else 0,
        cost_nanos=accounting.cost_nanos if accounting is not None else None,
        cost_source=accounting.cost_source if accounting is not None else None,
        saved_nanos=accounting.saved_nanos if accounting is not None else None,
        status=request.status,
        error_code=request.error_code,
        duration_ms=round(request.duration * 1000, 3),
        ttft_ms=ttft,
        attempts=request.attempts,
        fallback=accounting.fallback if accounting is not None else None,
        cache=accounting.cache if accounting is not None else None,
    )
