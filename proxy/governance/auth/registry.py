"""Creating, changing, listing and revoking keys and teams: what the admin API and the CLI do.

Both call a :class:`Registry` over the same database, so a key minted by one is seen by the
other. Records declared in the config are listed beside the database's (``source: config``)
and cannot be changed here (:class:`~proxy.core.errors.Conflict`, 409). Every change made through a
registry that has an :class:`~proxy.governance.auth.authenticator.Authenticator` is applied to its
cache at once.

Inputs are msgspec Structs that forbid unknown fields; a PATCH body leaves absent fields
unchanged, and ``null`` clears a field (``models: null`` = every model, ``rpm: null`` =
unlimited). Limits fit their columns (``rpm`` and ``max_parallel`` at most 2**31 - 1, ``tpm``
at most 2**63 - 1) and ``expires_at`` lies in :mod:`proxy.core.moments`' range. Errors are gateway
errors: :class:`~proxy.core.errors.BadRequest` naming the field,
:class:`~proxy.core.errors.NotFound`, :class:`~proxy.core.errors.Conflict`. A database that cannot
answer raises what its driver raises; the caller maps it.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
import sqlalchemy as sa
from msgspec import UNSET, Meta, Struct, UnsetType

from proxy.core.canonical import Budget, Principal
from proxy.core.errors import BadRequest, Conflict, NotFound
from proxy.core.moments import utc_moment
from proxy.db import Database
from proxy.governance.auth.authenticator import Authenticator
from proxy.governance.auth.config import (
    Alias,
    McpGrants,
    ModelName,
    Moment,
    Positive,
    PositiveBig,
    TeamId,
)
from proxy.governance.auth.keys_db import KeyFilter, KeyRepository
from proxy.governance.auth.records import KeyRecord, RequestLogMode, TeamRecord
from proxy.governance.auth.teams_db import TeamRepository
from proxy.governance.auth.tokens import hash_key, mint_key, shown_prefix

Metadata = dict[str, Any]
User = Annotated[str, Meta(min_length=1, max_length=256)]


class NewKey(Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /admin/keys``: every field optional."""

    alias: Alias | None = None
    team: TeamId | None = None
    user: User | None = None
    models: list[ModelName] | None = None
    rpm: Positive | None = None
    tpm: PositiveBig | None = None
    max_parallel: Positive | None = None
    expires_at: Moment | None = None
    metadata: Metadata | None = None
    budget: Budget | None = None
    request_logs: RequestLogMode | None = None
    mcp: McpGrants | None = None


class KeyChanges(Struct, frozen=True, forbid_unknown_fields=True):
    """``PATCH /admin/keys/{id}``: the fields to change."""

    alias: Alias | UnsetType | None = UNSET
    models: list[ModelName] | UnsetType | None = UNSET
    rpm: Positive | UnsetType | None = UNSET
    tpm: PositiveBig | UnsetType | None = UNSET
    max_parallel: Positive | UnsetType | None = UNSET
    blocked: bool | UnsetType = UNSET
    expires_at: Moment | UnsetType | None = UNSET
    metadata: Metadata | UnsetType | None = UNSET
    budget: Budget | UnsetType | None = UNSET
    request_logs: RequestLogMode | UnsetType | None = UNSET
    mcp: McpGrants | UnsetType | None = UNSET


class NewTeam(Struct, frozen=True, forbid_unknown_fields=True):
    """``POST /admin/teams``."""

    id: TeamId
    models: list[ModelName] | None = None
    rpm: Positive | None = None
    tpm: PositiveBig | None = None
    max_parallel: Positive | None = None
    metadata: Metadata | None = None
    budget: Budget | None = None
    request_logs: RequestLogMode | None = None
    mcp: McpGrants | None = None


class TeamChanges(Struct, frozen=True, forbid_unknown_fields=True):
    """``PATCH /admin/teams/{id}``: the fields to change."""

    models: list[ModelName] | UnsetType | None = UNSET
    rpm: Positive | UnsetType | None = UNSET
    tpm: PositiveBig | UnsetType | None = UNSET
    max_parallel: Positive | UnsetType | None = UNSET
    metadata: Metadata | UnsetType | None = UNSET
    budget: Budget | UnsetType | None = UNSET
    request_logs: RequestLogMode | UnsetType | None = UNSET
    mcp: McpGrants | UnsetType | None = UNSET


class Registry:
    """Keys and teams of one database and one config (module docstring)."""

    def __init__(self, database: Database, authenticator: Authenticator) -> None:
        self._database = database
        self._keys = KeyRepository(database)
        self._teams = TeamRepository(database)
        self._auth = authenticator

    # -- keys ---------------------------------------------------------------------------------

    async def create_key(self, new: NewKey) -> tuple[KeyRecord, str]:
        """Mint and store a key; returns its record and the key itself (shown this once)."""
        await self._database.open()
        _check_guardrails(new.metadata)
        now = datetime.now(UTC)
        if new.expires_at is not None and utc_moment(new.expires_at, "expires_at") <= now:
            raise BadRequest("expires_at is in the past", param="expires_at")
        if new.team is not None:
            team = await self._team(new.team, param="team")
            _check_models(new.models, team)
        key = mint_key()
        record = KeyRecord(
            id=f"key_{secrets.token_hex(8)}",
            alias=new.alias,
            key_prefix=shown_prefix(key),
            team=new.team,
            user=new.user,
            models=new.models,
            rpm=new.rpm,
            tpm=new.tpm,
            max_parallel=new.max_parallel,
            blocked=False,
            expires_at=new.expires_at,
            metadata=new.metadata,
            created_at=now,
            budget=new.budget,
            request_logs=new.request_logs,
            mcp=new.mcp,
        )
        await self._keys.insert(record, hash_key(key))
        return record, key

    async def list_keys(self, team: str | None = None) -> list[KeyRecord]:
        """The config's keys, then the database's (of ``team`` when given)."""
        await self._database.open()
        declared = [k for k in self._auth.config_keys if team is None or k.team == team]
        return declared + await self._keys.list(team)

    async def page_keys(
        self, where: KeyFilter, limit: int, cursor: str | None = None
    ) -> tuple[list[KeyRecord], str | None, int]:
        """One page of keys, newest first (see :meth:`KeyRepository.page`); the matching config
        keys lead the first page and are counted in the total. Raises :class:`ValueError` for
        a bad cursor."""
        await self._database.open()
        declared = [k for k in self._auth.config_keys if where.admits(k)]
        records, following, total = await self._keys.page(where, limit, cursor)
        if cursor is None:
            records = declared + records
        return records, following, total + len(declared)

    async def get_key(self, key_id: str) -> KeyRecord:
        """The key ``key_id``; raises :class:`NotFound`."""
        for record in self._auth.config_keys:
            if record.id == key_id:
                return record
        await self._database.open()
        stored = await self._keys.get(key_id)
        if stored is None:
            raise NotFound(f"no key {key_id!r}", code="key_not_found")
        return stored

    async def update_key(self, key_id: str, changes: KeyChanges) -> KeyRecord:
        """Apply ``changes``; raises :class:`NotFound`, :class:`Conflict` (a config key),
        :class:`BadRequest` (models outside the team's)."""
        current = await self._editable_key(key_id)
        values = _given(changes)
        if values.get("expires_at") is not None:
            utc_moment(values["expires_at"], "expires_at")
        if "models" in values and current.team is not None:
            _check_models(values["models"], await self._team(current.team, param="team"))
        updated = await self._keys.update(key_id, values)
        if updated is None:
            raise NotFound(f"no key {key_id!r}", code="key_not_found")
        record, key_hash = updated
        self._auth.forget(key_hash)
        return record

    async def delete_key(self, key_id: str) -> None:
        """Revoke the key: it is removed; raises :class:`NotFound`, :class:`Conflict`."""
        await self._editable_key(key_id)
        key_hash = await self._keys.delete(key_id)
        if key_hash is None:
            raise NotFound(f"no key {key_id!r}", code="key_not_found")
        self._auth.forget(key_hash)

    async def _editable_key(self, key_id: str) -> KeyRecord:
        record = await self.get_key(key_id)
        if record.source == "config":
            raise Conflict(
                f"the key {key_id!r} is declared in the config file: change it there",
                code="read_only",
            )
        return record

    # -- teams --------------------------------------------------------------------------------

    async def create_team(self, new: NewTeam) -> TeamRecord:
        """Store a new team; raises :class:`Conflict` when the id is taken."""
        await self._database.open()
        if new.id in self._auth.config_teams:
            raise Conflict(f"the team {new.id!r} is declared in the config file", code="exists")
        _check_guardrails(new.metadata)
        record = TeamRecord(
            id=new.id,
            models=new.models,
            rpm=new.rpm,
            tpm=new.tpm,
            max_parallel=new.max_parallel,
            metadata=new.metadata,
            created_at=datetime.now(UTC),
            budget=new.budget,
            request_logs=new.request_logs,
            mcp=new.mcp,
        )
        try:
            await self._teams.insert(record)
        except sa.exc.IntegrityError:
            raise Conflict(f"the team {new.id!r} exists", code="exists") from None
        return record

    async def list_teams(self) -> list[TeamRecord]:
        """The config's teams, then the database's."""
        await self._database.open()
        return [*self._auth.config_teams.values(), *await self._teams.list()]

    async def get_team(self, team_id: str) -> TeamRecord:
        """The team ``team_id``; raises :class:`NotFound`."""
        return await self._team(team_id)

    async def update_team(self, team_id: str, changes: TeamChanges) -> TeamRecord:
        """Apply ``changes``; raises :class:`NotFound`, :class:`Conflict` (a config team)."""
        await self._editable_team(team_id)
        record = await self._teams.update(team_id, _given(changes))
        if record is None:
            raise NotFound(f"no team {team_id!r}", code="team_not_found")
        self._auth.forget_all()
        return record

    async def delete_team(self, team_id: str) -> None:
        """Remove a team that has no keys; raises :class:`NotFound`, :class:`Conflict`."""
        await self._editable_team(team_id)
        members = await self._keys.count_in_team(team_id)
        members += sum(1 for key in self._auth.config_keys if key.team == team_id)
        if members:
            raise Conflict(
                f"the team {team_id!r} still has {members} key(s): revoke them first",
                code="team_not_empty",
            )
        if not await self._teams.delete(team_id):
            raise NotFound(f"no team {team_id!r}", code="team_not_found")
        self._auth.forget_all()

    async def _team(self, team_id: str, *, param: str | None = None) -> TeamRecord:
        record = self._auth.config_teams.get(team_id)
        if record is not None:
            return record
        await self._database.open()
        record = await self._teams.get(team_id)
        if record is None:
            if param is not None:
                raise BadRequest(f"unknown team {team_id!r}", param=param)
            raise NotFound(f"no team {team_id!r}", code="team_not_found")
        return record

    async def _editable_team(self, team_id: str) -> TeamRecord:
        record = await self._team(team_id)
        if record.source == "config":
            raise Conflict(
                f"the team {team_id!r} is declared in the config file: change it there",
                code="read_only",
            )
        return record


def _given(changes: Struct) -> dict[str, Any]:
    """The fields a PATCH body set (``null`` included); a ``metadata`` among them is checked
    (:func:`_check_guardrails`)."""
    values = {
        name: value for name, value in msgspec.structs.asdict(changes).items() if value is not UNSET
    }
    _check_guardrails(values.get("metadata"))
    return values


_GUARDRAIL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


def _check_guardrails(metadata: Metadata | None) -> None:
    """``metadata.guardrails``, when given, must be a list of at most 32 check names: the checks
    the ``guardrails`` plugin runs on every request of the key (or of the team's keys)."""
    listed = (metadata or {}).get("guardrails")
    if listed is None:
        return
    if not isinstance(listed, list) or len(listed) > 32:
        raise BadRequest(
            "metadata.guardrails must be a list of at most 32 check names",
            param="metadata.guardrails",
        )
    for index, name in enumerate(listed):
        if not isinstance(name, str) or not _GUARDRAIL_NAME.match(name):
            raise BadRequest(
                "a guardrail check name is 1-64 letters, digits, '_', '.', '-'",
                param=f"metadata.guardrails[{index}]",
            )


def _check_models(models: list[str] | None, team: TeamRecord) -> None:
    """A key's models must each be allowed to its team."""
    if team.models is None:
        return
    allowed = Principal(models=frozenset(team.models))
    if models is None:
        return
    for index, model in enumerate(models):
        if not allowed.allows(model):
            raise BadRequest(
                f"the team {team.id!r} may not use {model!r}", param=f"models[{index}]"
            )
