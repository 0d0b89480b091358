"""proxy/governance/auth/records.py: the principal a key's and its team's records make."""

from __future__ import annotations

from datetime import UTC, datetime

from proxy.governance.auth.records import KeyRecord, TeamRecord, principal_of

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def key(metadata: dict[str, object] | None) -> KeyRecord:
    return KeyRecord(
        id="key_1",
        alias="bot",
        key_prefix="sk-cw-…",
        team="support",
        user=None,
        models=None,
        rpm=None,
        tpm=None,
        max_parallel=None,
        blocked=False,
        expires_at=None,
        metadata=metadata,
        created_at=NOW,
    )


def team(metadata: dict[str, object] | None) -> TeamRecord:
    return TeamRecord(
        id="support",
        models=None,
        rpm=None,
        tpm=None,
        max_parallel=None,
        metadata=metadata,
        created_at=NOW,
    )


def test_guardrails_of_the_key_then_its_team_once_each() -> None:
    principal = principal_of(
        key({"guardrails": ["a", "b"]}), team({"guardrails": ["b", "c"], "other": 1})
    )
    assert principal.guardrails == ("a", "b", "c")
    assert principal_of(key(None), None).guardrails == ()
    assert principal_of(key({"guardrails": "a"}), team(None)).guardrails == ()
