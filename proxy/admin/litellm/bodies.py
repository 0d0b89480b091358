"""LiteLLM's ``/key/*`` bodies ↔ Crossway's key records (see :mod:`proxy.admin.litellm.routes`).

A ``/key/generate`` or ``/key/update`` body is decoded as :class:`LiteLLMKey` and mapped:
``models`` (``[]`` = every model, as in LiteLLM) → ``models``; ``max_budget`` +
``budget_duration`` (+ ``soft_budget``) → ``budget`` (no duration: ``lifetime``, as LiteLLM's
budget never resets without one; ``1d``/``24h``, ``7d``, ``30d``, ``1mo`` map to Crossway's
periods, any other is a 400); ``rpm_limit`` / ``tpm_limit`` / ``max_parallel_requests`` →
``rpm`` / ``tpm`` / ``max_parallel``; ``key_alias`` → ``alias``; ``team_id`` → ``team``;
``user_id`` → ``user``; ``metadata``; ``duration`` (``30s``, ``30m``, ``30h``, ``30d``) →
``expires_at`` from now; ``blocked``. Any other field (LiteLLM's ``aliases``, ``config``,
``permissions``, ``tags``, per-model limits, a ``key`` of the caller's choosing on generate …) is
accepted when empty (``null``, ``[]``, ``{}``, ``0``, ``false``, ``""``) and otherwise a 400
naming it — never ignored.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, Struct, UnsetType

from proxy.core.canonical import Budget, BudgetPeriod
from proxy.core.errors import BadRequest
from proxy.core.moments import moment_after
from proxy.governance.auth.records import KeyRecord
from proxy.governance.auth.registry import KeyChanges, NewKey

_DURATION = re.compile(r"^(\d+)([smhd])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PERIODS: dict[str, BudgetPeriod] = {
    "1d": "1d",
    "24h": "1d",
    "7d": "7d",
    "30d": "30d",
    "1mo": "1mo",
}
_EMPTY: tuple[object, ...] = (None, [], {}, 0, False, "")

T = TypeVar("T")


class LiteLLMKey(Struct, frozen=True, forbid_unknown_fields=False):
    """A ``/key/generate`` or ``/key/update`` body (unset fields are left alone)."""

    key: str | UnsetType | None = UNSET
    models: list[str] | UnsetType | None = UNSET
    max_budget: float | UnsetType | None = UNSET
    budget_duration: str | UnsetType | None = UNSET
    soft_budget: float | UnsetType | None = UNSET
    rpm_limit: int | UnsetType | None = UNSET
    tpm_limit: int | UnsetType | None = UNSET
    max_parallel_requests: int | UnsetType | None = UNSET
    key_alias: str | UnsetType | None = UNSET
    team_id: str | UnsetType | None = UNSET
    user_id: str | UnsetType | None = UNSET
    metadata: dict[str, Any] | UnsetType | None = UNSET
    duration: str | UnsetType | None = UNSET
    blocked: bool | UnsetType | None = UNSET


def decode_key_body(body: bytes, *, update: bool) -> LiteLLMKey:
    """The body as :class:`LiteLLMKey`; a 400 naming the field for a malformed or unsupported
    one (``key`` is the key to change on update, and unsupported on generate)."""
    if not body:
        raise BadRequest("a JSON body is required", code="invalid_json")
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise BadRequest("the body is not valid JSON", code="invalid_json") from None
    if not isinstance(raw, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_request")
    known = set(LiteLLMKey.__struct_fields__) - ({"key"} if not update else set())
    for name, value in raw.items():
        if name not in known and not any(value == empty for empty in _EMPTY):
            raise BadRequest(f"{name}: LiteLLM's {name} has no Crossway equivalent", param=name)
    try:
        return msgspec.convert(raw, LiteLLMKey)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid body: {exc}", param=_field_of(str(exc))) from None


def _field_of(message: str) -> str | None:
    match = re.search(r"`\$\.([A-Za-z_]+)", message)
    return None if match is None else match.group(1)


def new_key(body: LiteLLMKey, now: datetime) -> NewKey:
    """The :class:`NewKey` a ``/key/generate`` body asks for."""
    values = {
        "alias": _given(body.key_alias),
        "team": _given(body.team_id),
        "user": _given(body.user_id),
        "models": _models(body.models),
        "rpm": _given(body.rpm_limit),
        "tpm": _given(body.tpm_limit),
        "max_parallel": _given(body.max_parallel_requests),
        "expires_at": _expiry(body.duration, now),
        "metadata": _given(body.metadata),
        "budget": _budget(body),
    }
    return _convert(values, NewKey)


def key_changes(body: LiteLLMKey, current: KeyRecord, now: datetime) -> KeyChanges:
    """The :class:`KeyChanges` a ``/key/update`` body asks for (a 400 for a team or user
    change: a Crossway key keeps its owner)."""
    if body.team_id is not UNSET and body.team_id != current.team:
        raise BadRequest("team_id: a key's team cannot change", param="team_id")
    if body.user_id is not UNSET and body.user_id != current.user:
        raise BadRequest("user_id: a key's user cannot change", param="user_id")
    values: dict[str, Any] = {}
    pairs = (
        ("alias", body.key_alias),
        ("rpm", body.rpm_limit),
        ("tpm", body.tpm_limit),
        ("max_parallel", body.max_parallel_requests),
        ("metadata", body.metadata),
        ("blocked", body.blocked),
    )
    for name, value in pairs:
        if value is not UNSET:
            values[name] = value
    if body.models is not UNSET:
        values["models"] = _models(body.models)
    if body.duration is not UNSET:
        values["expires_at"] = _expiry(body.duration, now)
    if body.max_budget is not UNSET or body.budget_duration is not UNSET:
        merged = _merged_budget(body, current.budget)
        values["budget"] = merged
    if values.get("blocked") is None:
        values.pop("blocked", None)
    return _convert(values, KeyChanges)


def shown(record: KeyRecord, key: str | None = None) -> dict[str, Any]:
    """A key record in LiteLLM's field names (``key`` only when given: it is shown once)."""
    budget = record.budget
    info: dict[str, Any] = {
        "token": record.id,
        "key_name": f"{record.key_prefix}...",
        "key_alias": record.alias,
        "models": record.models or [],
        "max_budget": None if budget is None else budget.max_usd,
        "soft_budget": None if budget is None else budget.soft_usd,
        "budget_duration": None if budget is None or budget.period == "lifetime" else budget.period,
        "rpm_limit": record.rpm,
        "tpm_limit": record.tpm,
        "max_parallel_requests": record.max_parallel,
        "team_id": record.team,
        "user_id": record.user,
        "metadata": record.metadata or {},
        "blocked": record.blocked,
        "expires": None if record.expires_at is None else _iso(record.expires_at),
        "created_at": _iso(record.created_at),
    }
    if key is not None:
        info = {"key": key, **info}
    return info


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _given(value: Any) -> Any:
    return None if value is UNSET else value


def _models(models: Any) -> list[str] | None:
    """LiteLLM's empty list means every model, as Crossway's null does."""
    if models is UNSET or not models:
        return None
    return list(models)


def _expiry(duration: Any, now: datetime) -> datetime | None:
    if duration is UNSET or duration is None:
        return None
    match = _DURATION.match(str(duration))
    if match is None:
        raise BadRequest("duration: expected a number and s, m, h or d (30d)", param="duration")
    return moment_after(now, int(match.group(1)) * _SECONDS[match.group(2)], "duration")


def _period(duration: Any) -> BudgetPeriod:
    if duration is UNSET or duration is None:
        return "lifetime"
    period = _PERIODS.get(str(duration))
    if period is None:
        raise BadRequest(
            f"budget_duration: Crossway's budget periods are {', '.join(_PERIODS)} (or none)",
            param="budget_duration",
        )
    return period


def _budget(body: LiteLLMKey) -> dict[str, Any] | None:
    if body.max_budget is UNSET or body.max_budget is None:
        if body.budget_duration not in (UNSET, None):
            raise BadRequest("budget_duration: needs max_budget", param="budget_duration")
        return None
    budget: dict[str, Any] = {"max_usd": body.max_budget, "period": _period(body.budget_duration)}
    if body.soft_budget not in (UNSET, None):
        budget["soft_usd"] = body.soft_budget
    return budget


def _merged_budget(body: LiteLLMKey, current: Budget | None) -> dict[str, Any] | None:
    max_usd = current.max_usd if body.max_budget is UNSET and current else body.max_budget
    if max_usd is UNSET or max_usd is None:
        return None
    if body.budget_duration is UNSET:
        period = "lifetime" if current is None else current.period
    else:
        period = _period(body.budget_duration)
    budget: dict[str, Any] = {"max_usd": max_usd, "period": period}
    soft = body.soft_budget if body.soft_budget is not UNSET else (current and current.soft_usd)
    if soft:
        budget["soft_usd"] = soft
    return budget


def _convert(values: dict[str, Any], target: type[T]) -> T:
    try:
        return msgspec.convert(values, target)
    except msgspec.ValidationError as exc:
        field = _field_of(str(exc))
        litellm = _LITELLM_NAMES.get(field or "", field)
        raise BadRequest(f"{litellm}: {exc}".split(" - at ")[0], param=litellm) from None


_LITELLM_NAMES = {
    "alias": "key_alias",
    "team": "team_id",
    "user": "user_id",
    "rpm": "rpm_limit",
    "tpm": "tpm_limit",
    "max_parallel": "max_parallel_requests",
    "budget": "max_budget",
    "expires_at": "duration",
}
