"""Turning a request's key into a principal, from an in-process cache of key hashes.

:meth:`Authenticator.authenticate` reads the key from the request headers
(:func:`~proxy.governance.auth.tokens.key_from_headers`), hashes it, and looks the hash up in turn
among the master key, the keys declared in the config, and the cache of database lookups. Only a
cache miss (or an entry older than ``auth.cache_ttl``) reaches the database: one query, bounded
by ``auth.lookup_timeout``, shared by every request that misses on the same key meanwhile. Its
answer is cached either way — a key that does not exist too, so that a client repeating a bad
key costs one query per ``cache_ttl``. The cache holds at most :data:`MAX_CACHED` entries.

A change made on this process (admin API) calls :meth:`Authenticator.forget` (or
:meth:`Authenticator.forget_all` for a team) and takes effect at once; a change made elsewhere
(the CLI, another instance) takes effect here within ``cache_ttl`` — or at once with a shared
state store, whose key-change channel (:mod:`proxy.state.events`) ``on_change`` announces each
change to, and which calls :meth:`Authenticator.drop` on every process.

Failures raise :class:`~proxy.core.errors.AuthenticationFailed` (401 ``invalid_api_key``) for a
missing, malformed, unknown, revoked, blocked or expired key, and :class:`AuthUnavailable` (503)
when the database cannot answer in time: an unverifiable key is refused, never admitted. Each
failure counts ``crossway_auth_failures_total{reason}``. No message ever quotes a key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from proxy.core.canonical import Principal
from proxy.core.errors import AuthenticationFailed, GatewayError
from proxy.core.metrics import Metrics
from proxy.db import Database
from proxy.governance.auth.config import AuthConfig
from proxy.governance.auth.keys_db import KeyRepository
from proxy.governance.auth.records import KeyRecord, TeamRecord, principal_of
from proxy.governance.auth.tokens import (
    MalformedKey,
    hash_key,
    is_key_text,
    key_from_headers,
    shown_prefix,
)

MASTER = Principal(key_id="master", key_alias="master")
MAX_CACHED = 100_000
_MISSING = (
    "Missing API key: send it as 'Authorization: Bearer <key>' "
    "(or in x-api-key, api-key or x-bf-vk)"
)


class AuthUnavailable(GatewayError):
    """The key could not be verified: the database did not answer in time (503)."""

    status = 503
    type = "api_error"
    default_code = "auth_unavailable"
    kind = "internal"


class _Entry:
    """What a key hash resolves to: a principal, or the reason it is refused."""

    __slots__ = ("expires_at", "fetched", "principal", "refusal")

    def __init__(
        self,
        principal: Principal | None,
        refusal: str | None,
        expires_at: float | None,
        fetched: float,
    ) -> None:
        self.principal = principal
        self.refusal = refusal
        self.expires_at = expires_at
        self.fetched = fetched


class Authenticator:
    """Resolves keys to principals (module docstring). One per runtime snapshot.

    Not the chain's *authenticate* (:data:`proxy.core.plugin.Authenticate`, found by
    :func:`proxy.core.plugin.authentication`): that is a plugin's hook, which decides whether
    the gateway demands a key at all. This is the resolver of keys the ``auth`` plugin's hook
    uses, and the admin API's master-key check; it exists whether or not a plugin demands keys.

    ``clock`` (monotonic seconds) ages cache entries; ``wall`` (epoch seconds) expires keys.
    """

    def __init__(
        self,
        auth: AuthConfig,
        database: Database | None,
        metrics: Metrics,
        logger: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_change: Callable[[str | None], None] | None = None,
    ) -> None:
        self._ttl = auth.cache_ttl
        self._user_budget = auth.user_budget
        self._on_change = on_change
        self._timeout = auth.lookup_timeout
        self._database = database
        self._keys = None if database is None else KeyRepository(database)
        self._failures = metrics.auth_failures
        self._logger = logger
        self._clock = clock
        self._wall = wall
        self.loaded_at = datetime.now(UTC)
        self.master_hash = hash_key(auth.master_key) if auth.master_key else None
        self.config_teams = {
            team_id: TeamRecord(
                id=team_id,
                models=None if team.models is None else list(team.models),
                rpm=team.rpm,
                tpm=team.tpm,
                max_parallel=team.max_parallel,
                metadata=team.metadata,
                created_at=self.loaded_at,
                source="config",
                budget=team.budget,
                request_logs=team.request_logs,
                mcp=team.mcp,
            )
            for team_id, team in auth.teams.items()
        }
        self.config_keys: list[KeyRecord] = []
        self._declared: dict[str, _Entry] = {}
        if self.master_hash is not None:
            self._declared[self.master_hash] = _Entry(MASTER, None, None, 0.0)
        for declared in auth.keys:
            record = KeyRecord(
                id=f"config:{declared.alias}",
                alias=declared.alias,
                key_prefix=shown_prefix(declared.key),
                team=declared.team,
                user=declared.user,
                models=None if declared.models is None else list(declared.models),
                rpm=declared.rpm,
                tpm=declared.tpm,
                max_parallel=declared.max_parallel,
                blocked=declared.blocked,
                expires_at=declared.expires_at,
                metadata=declared.metadata,
                created_at=self.loaded_at,
                source="config",
                budget=declared.budget,
                request_logs=declared.request_logs,
                mcp=declared.mcp,
            )
            self.config_keys.append(record)
            self._declared[hash_key(declared.key)] = self._entry(record, None, 0.0)
        self._cache: dict[str, _Entry] = {}
        self._lookups: dict[str, asyncio.Future[_Entry | None]] = {}

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The principal of the key in ``headers``; raises as the module docstring says."""
        try:
            key = key_from_headers(headers)
        except MalformedKey as exc:
            raise self._refused("malformed", str(exc)) from None
        if key is None:
            raise self._refused("missing", _MISSING)
        digest = hash_key(key)
        entry = self._declared.get(digest)
        if entry is None:
            entry = self._cache.get(digest)
            if entry is None or self._clock() - entry.fetched >= self._ttl:
                entry = await self._lookup(digest)
        principal = entry.principal
        if principal is None:
            raise self._refused(entry.refusal or "invalid")
        if entry.expires_at is not None and self._wall() >= entry.expires_at:
            raise self._refused("expired")
        return principal

    def is_master(self, token: str) -> bool:
        """Whether ``token`` is the master key (compared by hash: no timing leak of the key);
        False for anything that cannot be a key
        (:func:`~proxy.governance.auth.tokens.is_key_text`)."""
        return (
            self.master_hash is not None
            and is_key_text(token)
            and hash_key(token) == self.master_hash
        )

    def forget(self, key_hash: str) -> None:
        """Drop what is cached for one key (its next request looks it up again), and announce
        the change to ``on_change``."""
        self._cache.pop(key_hash, None)
        if self._on_change is not None:
            self._on_change(key_hash)

    def forget_all(self) -> None:
        """Drop the whole cache (a team changed: every key of it must be looked up again), and
        announce it to ``on_change`` (as None)."""
        self._cache.clear()
        if self._on_change is not None:
            self._on_change(None)

    def drop(self, key_hash: str | None) -> None:
        """Drop one key's cache entry (None: all), without announcing: a change announced by
        another process."""
        if key_hash is None:
            self._cache.clear()
        else:
            self._cache.pop(key_hash, None)

    def _entry(self, key: KeyRecord, team: TeamRecord | None, fetched: float) -> _Entry:
        team = self.config_teams.get(key.team or "") or team
        expires = None if key.expires_at is None else key.expires_at.timestamp()
        if key.blocked:
            return _Entry(None, "blocked", expires, fetched)
        return _Entry(principal_of(key, team, self._user_budget), None, expires, fetched)

    async def _lookup(self, digest: str) -> _Entry:
        pending = self._lookups.get(digest)
        if pending is None:
            pending = asyncio.ensure_future(self._load(digest))
            self._lookups[digest] = pending
            pending.add_done_callback(lambda _: self._lookups.pop(digest, None))
        entry = await asyncio.shield(pending)  # a cancelled request leaves the lookup running
        if entry is None:
            raise self._refused("unavailable")
        return entry

    async def _load(self, digest: str) -> _Entry | None:
        """The entry for ``digest`` from the database, cached; None when it cannot answer."""
        fetched = self._clock()
        if self._keys is None or self._database is None:
            return _Entry(None, "invalid", None, fetched)
        try:
            async with asyncio.timeout(self._timeout):
                await self._database.open()
                found = await self._keys.by_hash(digest)
        except Exception as exc:  # any driver error: the key cannot be verified
            if self._logger is not None:
                self._logger.warning("auth_lookup_failed", error=type(exc).__name__)
            return None
        if found is None:
            entry = _Entry(None, "invalid", None, fetched)
        else:
            entry = self._entry(*found, fetched)
        cache = self._cache
        cache.pop(digest, None)
        cache[digest] = entry
        while len(cache) > MAX_CACHED:
            del cache[next(iter(cache))]
        return entry

    def _refused(self, reason: str, message: str | None = None) -> GatewayError:
        self._failures(reason).inc()
        if reason == "unavailable":
            return AuthUnavailable("The API key cannot be verified right now", retry_after=1)
        return AuthenticationFailed(message or _MESSAGES[reason])


_MESSAGES = {
    "invalid": "Invalid API key",
    "blocked": "This API key is blocked",
    "expired": "This API key has expired",
}
