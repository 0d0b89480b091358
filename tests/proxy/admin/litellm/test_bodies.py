"""LiteLLM's key bodies mapped to Crossway's key records, without a server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from msgspec import UNSET

from proxy.admin.litellm.bodies import decode_key_body, key_changes, new_key, shown
from proxy.core.canonical import Budget
from proxy.core.errors import BadRequest
from proxy.governance.auth.records import KeyRecord

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def record(**changes: object) -> KeyRecord:
    values: dict[str, object] = {
        "id": "key_1",
        "alias": None,
        "key_prefix": "sk-cw-abcd",
        "team": None,
        "user": None,
        "models": None,
        "rpm": None,
        "tpm": None,
        "max_parallel": None,
        "blocked": False,
        "expires_at": None,
        "metadata": None,
        "created_at": NOW,
        **changes,
    }
    return KeyRecord(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("duration", "period"),
    [(None, "lifetime"), ("1d", "1d"), ("24h", "1d"), ("7d", "7d"), ("30d", "30d"), ("1mo", "1mo")],
)
def test_budget_durations(duration: str | None, period: str) -> None:
    fields: dict[str, object] = {"max_budget": 2.5}
    if duration is not None:
        fields["budget_duration"] = duration
    new = new_key(decode_key_body(body(**fields), update=False), NOW)
    assert new.budget == Budget(max_usd=2.5, period=period)  # type: ignore[arg-type]


def test_durations_become_expiry_and_empty_models_mean_all() -> None:
    new = new_key(decode_key_body(body(duration="30m", models=[]), update=False), NOW)
    assert new.expires_at == NOW + timedelta(minutes=30)
    assert new.models is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tags": ["a"]}, "tags"),
        ({"model_rpm_limit": {"m": 1}}, "model_rpm_limit"),
        ({"key": "sk-mine"}, "key"),
        ({"budget_duration": "30d"}, "budget_duration"),
        ({"max_budget": 1, "budget_duration": "90d"}, "budget_duration"),
        ({"duration": "1y"}, "duration"),
        ({"rpm_limit": "fast"}, "rpm_limit"),
        ({"tpm_limit": -1}, "tpm_limit"),
    ],
)
def test_what_cannot_be_honoured_is_a_400_naming_the_field(
    fields: dict[str, object], param: str
) -> None:
    with pytest.raises(BadRequest) as error:
        new_key(decode_key_body(body(**fields), update=False), NOW)
    assert error.value.param == param


def test_empty_unsupported_fields_are_accepted() -> None:
    decode_key_body(body(aliases={}, tags=[], config=None, spend=0), update=False)


def test_bodies_that_are_not_objects() -> None:
    for raw in (b"", b"[1]", b"{"):
        with pytest.raises(BadRequest):
            decode_key_body(raw, update=False)


def test_update_changes_only_what_is_given_and_keeps_the_budget_period() -> None:
    current = record(budget=Budget(max_usd=5, period="7d", soft_usd=4))
    changes = key_changes(
        decode_key_body(body(key="sk", max_budget=9, rpm_limit=None), update=True), current, NOW
    )
    assert changes.budget == Budget(max_usd=9, period="7d", soft_usd=4)
    assert changes.rpm is None
    assert changes.tpm is UNSET
    assert changes.alias is UNSET


def test_update_cannot_move_a_key_to_another_team() -> None:
    with pytest.raises(BadRequest) as error:
        key_changes(decode_key_body(body(key="k", team_id="x"), update=True), record(), NOW)
    assert error.value.param == "team_id"


def test_records_are_shown_in_litellm_names_without_the_key() -> None:
    current = record(alias="ci", rpm=5, budget=Budget(max_usd=1, period="lifetime"))
    info = shown(current)
    assert "key" not in info
    assert info["token"] == "key_1"
    assert info["key_alias"] == "ci"
    assert info["rpm_limit"] == 5
    assert info["max_budget"] == 1
    assert info["budget_duration"] is None
    assert shown(current, "sk-cw-x")["key"] == "sk-cw-x"


def test_a_field_litellm_has_and_crossway_does_not_is_never_ignored() -> None:
    with pytest.raises(BadRequest) as error:
        decode_key_body(body(send_invite_email=True), update=False)
    assert error.value.param == "send_invite_email"
    decode_key_body(body(send_invite_email=False, key="sk-cw-x"), update=True)
