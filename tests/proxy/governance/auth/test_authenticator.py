"""proxy/governance/auth/authenticator.py: keys to principals, from a cache of hashes in front of
the DB."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from multidict import CIMultiDict

from proxy.core.canonical import Principal, RateLimits
from proxy.core.errors import AuthenticationFailed
from proxy.core.metrics import Metrics
from proxy.db import Database
from proxy.governance.auth.authenticator import MASTER, Authenticator, AuthUnavailable
from proxy.governance.auth.config import AuthConfig
from proxy.governance.auth.keys_db import KeyRepository
from proxy.governance.auth.registry import KeyChanges, NewKey, NewTeam, Registry, TeamChanges
from tests.faults import FakeClock
from tests.plugins.scripted import sample
from tests.proxy.governance.auth.conftest import DECLARED, auth_config
from tests.proxy.governance.auth.conftest import MASTER as MASTER_KEY


def bearer(key: str) -> CIMultiDict[str]:
    return CIMultiDict({"Authorization": f"Bearer {key}"})


async def refusal(authenticator: Authenticator, headers: CIMultiDict[str]) -> str:
    with pytest.raises(AuthenticationFailed) as caught:
        await authenticator.authenticate(headers)
    assert caught.value.status == 401
    assert caught.value.code == "invalid_api_key"
    return caught.value.message


async def test_the_master_key_may_use_everything(authenticator: Authenticator):
    assert await authenticator.authenticate(bearer(MASTER_KEY)) is MASTER
    assert MASTER.models is None
    assert MASTER.limits is None
    assert MASTER.team is None
    assert authenticator.is_master(MASTER_KEY)
    assert not authenticator.is_master(DECLARED)


async def test_a_declared_key_gets_its_team_models_and_limits(authenticator: Authenticator):
    principal = await authenticator.authenticate(CIMultiDict({"x-api-key": DECLARED}))
    assert principal == Principal(
        key_id="config:ci",
        key_alias="ci",
        team="search",
        models=frozenset({"fast"}),
        limits=RateLimits(rpm=10),
        team_limits=RateLimits(rpm=100, max_parallel=3),
    )


async def test_refusals_name_no_key_and_are_counted(authenticator: Authenticator, metrics: Metrics):
    assert "Missing API key" in await refusal(authenticator, CIMultiDict())
    assert await refusal(authenticator, bearer("sk-cw-unknown")) == "Invalid API key"
    message = await refusal(authenticator, CIMultiDict({"Authorization": "Basic abc"}))
    assert "Bearer" in message
    for reason in ("missing", "invalid", "malformed"):
        assert sample(metrics, "crossway_auth_failures_total", reason=reason) == 1


async def test_a_minted_key_is_looked_up_once_per_cache_ttl(
    registry: Registry, authenticator: Authenticator, database: Database, clock: FakeClock
):
    await registry.create_team(NewTeam(id="eng", rpm=7))
    record, key = await registry.create_key(
        NewKey(alias="a", team="eng", user="ann", models=["fast"], tpm=500)
    )
    principal = await authenticator.authenticate(bearer(key))
    assert principal == Principal(
        key_id=record.id,
        key_alias="a",
        team="eng",
        user="ann",
        models=frozenset({"fast"}),
        limits=RateLimits(tpm=500),
        team_limits=RateLimits(rpm=7),
    )
    # Changed behind the authenticator's back (another process): the cache still answers...
    await KeyRepository(database).update(record.id, {"blocked": True})
    clock.advance(4.9)
    assert await authenticator.authenticate(bearer(key)) == principal
    clock.advance(0.1)  # ...until cache_ttl has passed
    assert await refusal(authenticator, bearer(key)) == "This API key is blocked"


async def test_changes_through_the_registry_apply_at_once(
    registry: Registry, authenticator: Authenticator
):
    record, key = await registry.create_key(NewKey(alias="a"))
    await authenticator.authenticate(bearer(key))
    await registry.update_key(record.id, KeyChanges(rpm=3))
    assert (await authenticator.authenticate(bearer(key))).limits == RateLimits(rpm=3)
    await registry.delete_key(record.id)
    assert await refusal(authenticator, bearer(key)) == "Invalid API key"


async def test_a_team_change_reaches_its_keys_at_once(
    registry: Registry, authenticator: Authenticator
):
    await registry.create_team(NewTeam(id="eng"))
    _, key = await registry.create_key(NewKey(team="eng"))
    assert (await authenticator.authenticate(bearer(key))).team_limits is None
    await registry.update_team("eng", TeamChanges(max_parallel=2))
    assert (await authenticator.authenticate(bearer(key))).team_limits == RateLimits(max_parallel=2)


async def test_expired_keys_are_refused(database: Database, metrics: Metrics):
    now = [datetime(2027, 1, 30, tzinfo=UTC).timestamp()]
    authenticator = Authenticator(auth_config(), database, metrics, wall=lambda: now[0])
    registry = Registry(database, authenticator)
    _, key = await registry.create_key(NewKey(expires_at=datetime(2027, 1, 31, tzinfo=UTC)))
    await authenticator.authenticate(bearer(key))
    now[0] += 86400
    assert await refusal(authenticator, bearer(key)) == "This API key has expired"
    assert sample(metrics, "crossway_auth_failures_total", reason="expired") == 1


async def test_concurrent_misses_share_one_query(
    registry: Registry, authenticator: Authenticator, monkeypatch: pytest.MonkeyPatch
):
    _, key = await registry.create_key(NewKey(alias="a"))
    queries = 0
    by_hash = KeyRepository.by_hash

    async def counted(self, key_hash):
        nonlocal queries
        queries += 1
        return await by_hash(self, key_hash)

    monkeypatch.setattr(KeyRepository, "by_hash", counted)
    principals = await asyncio.gather(*(authenticator.authenticate(bearer(key)) for _ in range(20)))
    assert queries == 1
    assert len({p.key_id for p in principals}) == 1
    await refusal(authenticator, bearer("sk-cw-nope"))
    await refusal(authenticator, bearer("sk-cw-nope"))  # unknown keys are cached too
    assert queries == 2


async def test_a_database_that_cannot_answer_refuses_with_503(
    tmp_path: Path, metrics: Metrics, monkeypatch: pytest.MonkeyPatch
):
    database = Database(f"sqlite:///{tmp_path}/crossway.db")
    never = asyncio.Event()

    async def hang(self, key_hash):
        await never.wait()

    monkeypatch.setattr(KeyRepository, "by_hash", hang)
    authenticator = Authenticator(AuthConfig(lookup_timeout=0.05), database, metrics)
    with pytest.raises(AuthUnavailable) as caught:
        await authenticator.authenticate(bearer("sk-cw-anything"))
    assert caught.value.status == 503
    assert caught.value.retry_after == 1
    assert sample(metrics, "crossway_auth_failures_total", reason="unavailable") == 1
    await database.close()


async def test_without_a_database_only_declared_keys_exist(metrics: Metrics):
    authenticator = Authenticator(auth_config(), None, metrics)
    assert (await authenticator.authenticate(bearer(DECLARED))).key_id == "config:ci"
    assert await refusal(authenticator, bearer("sk-cw-other")) == "Invalid API key"
