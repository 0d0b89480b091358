"""Key and team records as the admin API and the CLI show them — never a key or its hash.

A record's ``source`` says who owns it: ``api`` (created over the admin API or the CLI, kept in
the database, editable) or ``config`` (declared in the config file, read-only). ``models`` None
means every model; a limit None means unlimited; ``mcp`` None means every MCP server and tool.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from msgspec import Struct

from proxy.core.canonical import Budget, Principal, RateLimits

Source = Literal["api", "config"]
RequestLogMode = Literal["none", "metadata", "payloads"]
"""What the request logs keep of a key's or a team's requests (None: the config's default)."""


class TeamRecord(Struct, frozen=True):
    """A team: the models its keys may use and the limits all its keys share."""

    id: str
    models: list[str] | None
    rpm: int | None
    tpm: int | None
    max_parallel: int | None
    metadata: dict[str, Any] | None
    created_at: datetime
    source: Source = "api"
    budget: Budget | None = None
    request_logs: RequestLogMode | None = None
    mcp: dict[str, list[str] | Literal["*"]] | None = None


class KeyRecord(Struct, frozen=True):
    """A virtual key, without the key: ``key_prefix`` is its first characters."""

    id: str
    alias: str | None
    key_prefix: str
    team: str | None
    user: str | None
    models: list[str] | None
    rpm: int | None
    tpm: int | None
    max_parallel: int | None
    blocked: bool
    expires_at: datetime | None
    metadata: dict[str, Any] | None
    created_at: datetime
    source: Source = "api"
    budget: Budget | None = None
    request_logs: RequestLogMode | None = None
    mcp: dict[str, list[str] | Literal["*"]] | None = None


def principal_of(
    key: KeyRecord, team: TeamRecord | None, user_budget: Budget | None = None
) -> Principal:
    """The principal a request with ``key`` runs as: the key's and its team's model lists
    intersected, the key's and the team's limits and budgets each kept (the team's are counted
    for the whole team), and the budget of each end user (``auth.user_budget``)."""
    return Principal(
        key_id=key.id,
        key_alias=key.alias,
        team=key.team,
        user=key.user,
        models=_allowed(key.models, None if team is None else team.models),
        limits=_limits(key.rpm, key.tpm, key.max_parallel),
        team_limits=None if team is None else _limits(team.rpm, team.tpm, team.max_parallel),
        budget=key.budget,
        team_budget=None if team is None else team.budget,
        user_budget=user_budget,
        request_logs=key.request_logs
        if key.request_logs is not None or team is None
        else team.request_logs,
        guardrails=_guardrails(key.metadata, None if team is None else team.metadata),
        mcp=mcp_grants(key.mcp),
        team_mcp=None if team is None else mcp_grants(team.mcp),
    )


def mcp_grants(grants: dict[str, list[str] | Literal["*"]] | None) -> frozenset[str] | None:
    """A record's MCP allow-list (``{server: [tools] | "*"}``) as a principal holds it:
    ``server/tool`` and ``server/*`` grants; None (no list) allows every server."""
    if grants is None:
        return None
    return frozenset(
        f"{server}/{tool}"
        for server, tools in grants.items()
        for tool in (("*",) if tools == "*" else tools)
    )


def _guardrails(*metadata: dict[str, Any] | None) -> tuple[str, ...]:
    """The check names of each record's ``metadata.guardrails`` list, in order, once each
    (the admin API accepts only a list of names there)."""
    names: list[str] = []
    for record in metadata:
        listed = (record or {}).get("guardrails")
        if isinstance(listed, list):
            names += [name for name in listed if isinstance(name, str) and name not in names]
    return tuple(names)


def _allowed(key_models: list[str] | None, team_models: list[str] | None) -> frozenset[str] | None:
    if key_models is None:
        return None if team_models is None else frozenset(team_models)
    if team_models is None:
        return frozenset(key_models)
    team = Principal(models=frozenset(team_models))
    return frozenset(model for model in key_models if team.allows(model))


def _limits(rpm: int | None, tpm: int | None, max_parallel: int | None) -> RateLimits | None:
    if rpm is None and tpm is None and max_parallel is None:
        return None
    return RateLimits(rpm=rpm, tpm=tpm, max_parallel=max_parallel)
