"""proxy/governance/auth/registry.py: what may be created, changed and revoked, and what may not."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from proxy.core.errors import BadRequest, Conflict, NotFound
from proxy.governance.auth.registry import KeyChanges, NewKey, NewTeam, Registry, TeamChanges


async def test_config_records_are_listed_first_and_read_only(registry: Registry):
    record, _ = await registry.create_key(NewKey(alias="api-key", team="search"))
    listed = await registry.list_keys()
    assert [(k.id, k.source) for k in listed] == [("config:ci", "config"), (record.id, "api")]
    assert [k.id for k in await registry.list_keys("other")] == []
    assert (await registry.get_key("config:ci")).team == "search"
    with pytest.raises(Conflict, match="declared in the config"):
        await registry.update_key("config:ci", KeyChanges(rpm=1))
    with pytest.raises(Conflict):
        await registry.delete_key("config:ci")
    with pytest.raises(Conflict):
        await registry.update_team("search", TeamChanges(rpm=1))
    with pytest.raises(Conflict):
        await registry.create_team(NewTeam(id="search"))
    assert [t.id for t in await registry.list_teams()] == ["search"]


async def test_a_key_must_stay_within_its_team(registry: Registry):
    with pytest.raises(BadRequest) as caught:
        await registry.create_key(NewKey(team="nope"))
    assert caught.value.param == "team"
    with pytest.raises(BadRequest) as caught:
        await registry.create_key(NewKey(team="search", models=["fast", "mock/echo"]))
    assert caught.value.param == "models[1]"
    record, _ = await registry.create_key(NewKey(team="search", models=["fast"]))
    with pytest.raises(BadRequest):
        await registry.update_key(record.id, KeyChanges(models=["other"]))
    changed = await registry.update_key(record.id, KeyChanges(models=None, blocked=True))
    assert changed.models is None
    assert changed.blocked


async def test_patch_changes_only_what_it_names(registry: Registry):
    record, _ = await registry.create_key(NewKey(alias="a", rpm=5, metadata={"x": 1}))
    changed = await registry.update_key(record.id, KeyChanges(tpm=100))
    assert (changed.alias, changed.rpm, changed.tpm, changed.metadata) == ("a", 5, 100, {"x": 1})
    cleared = await registry.update_key(record.id, KeyChanges(rpm=None, alias=None))
    assert cleared.rpm is None
    assert cleared.alias is None
    assert cleared.tpm == 100


async def test_expiry_must_be_in_the_future(registry: Registry):
    with pytest.raises(BadRequest) as caught:
        await registry.create_key(NewKey(expires_at=datetime(2020, 1, 1, tzinfo=UTC)))
    assert caught.value.param == "expires_at"


async def test_teams_with_keys_cannot_be_deleted(registry: Registry):
    await registry.create_team(NewTeam(id="eng", rpm=3))
    with pytest.raises(Conflict, match="exists"):
        await registry.create_team(NewTeam(id="eng"))
    record, _ = await registry.create_key(NewKey(team="eng"))
    with pytest.raises(Conflict, match="1 key"):
        await registry.delete_team("eng")
    await registry.delete_key(record.id)
    await registry.delete_team("eng")
    with pytest.raises(NotFound):
        await registry.get_team("eng")
    with pytest.raises(NotFound):
        await registry.delete_key(record.id)


def test_a_keys_request_log_mode_wins_over_its_teams() -> None:
    from proxy.governance.auth.records import KeyRecord, TeamRecord, principal_of

    now = datetime.now(UTC)
    team = TeamRecord("t", None, None, None, None, None, now, request_logs="payloads")
    key = KeyRecord("k", None, "sk-cw-x", "t", None, None, None, None, None, False, None, None, now)
    assert principal_of(key, team).request_logs == "payloads"  # the team's
    own = KeyRecord(
        "k", None, "sk-cw-x", "t", None, None, None, None, None, False, None, None, now,
        request_logs="none",
    )  # fmt: skip
    assert principal_of(own, team).request_logs == "none"
    assert principal_of(key, None).request_logs is None  # the config's


async def test_metadata_guardrails_must_be_a_list_of_check_names(registry: Registry):
    record, _ = await registry.create_key(NewKey(metadata={"guardrails": ["house", "no-pii"]}))
    team = await registry.create_team(NewTeam(id="legal", metadata={"guardrails": ["ticket"]}))
    assert team.metadata == {"guardrails": ["ticket"]}
    for metadata, param in (
        ({"guardrails": "house"}, "metadata.guardrails"),
        ({"guardrails": ["ok", "not ok!"]}, "metadata.guardrails[1]"),
        ({"guardrails": ["x"] * 33}, "metadata.guardrails"),
    ):
        with pytest.raises(BadRequest) as caught:
            await registry.update_key(record.id, KeyChanges(metadata=metadata))
        assert caught.value.param == param
        with pytest.raises(BadRequest):
            await registry.create_team(NewTeam(id="other", metadata=metadata))
