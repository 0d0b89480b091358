"""The ``database:`` and ``auth:`` config sections."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from proxy.runtime.config import ConfigError, parse_config

MASTER = "m" * 32
KEY = "k" * 32


def errors_of(text: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, environ or {})
    return caught.value.errors


def test_defaults():
    config = parse_config("", {})
    assert config.database.url == "sqlite:///./data/crossway.db"
    assert config.auth.master_key == ""
    assert config.auth.cache_ttl == 5
    assert parse_config("", {"CROSSWAY_DATA_DIR": "/srv/cw"}).database.url == (
        "sqlite:////srv/cw/crossway.db"
    )
    assert parse_config("database: {}", {}).database.url == "sqlite:///./data/crossway.db"


def test_the_issue_example_parses():
    config = parse_config(
        """
        database:
          url: "sqlite:///${CROSSWAY_DATA_DIR:-./data}/crossway.db"
        auth:
          master_key: "${CROSSWAY_MASTER_KEY:-}"
          cache_ttl: 5
          teams:
            search: {models: [fast, default], rpm: 1200, tpm: 400000, max_parallel: 50}
          keys:
            - {key: "${SEARCH_CI_KEY}", alias: search-ci, team: search, models: [fast], rpm: 60,
               expires_at: 2027-01-31T00:00:00Z}
        """,
        {"CROSSWAY_MASTER_KEY": MASTER, "SEARCH_CI_KEY": KEY},
    )
    assert config.auth.master_key == MASTER
    assert config.auth.teams["search"].tpm == 400000
    declared = config.auth.keys[0]
    assert (declared.key, declared.alias, declared.models) == (KEY, "search-ci", ("fast",))
    assert declared.expires_at == datetime(2027, 1, 31, tzinfo=UTC)


def test_short_keys_are_refused_without_being_quoted():
    errors = errors_of(
        "auth: {master_key: '${M}', keys: [{key: '${K}', alias: a}]}",
        {"M": "short-master", "K": "short-key"},
    )
    assert errors == [
        "$.auth.master_key: must be at least 32 printable ASCII characters without spaces "
        "(or empty: the admin API is off)",
        "$.auth.keys[0].key: must be 32 to 512 printable ASCII characters without spaces",
    ]
    assert not any("short" in error for error in errors)


def test_declared_keys_are_unique_and_never_the_master_key():
    errors = errors_of(
        f"""
        auth:
          master_key: {MASTER}
          teams: {{t: {{}}}}
          keys:
            - {{key: {MASTER}, alias: a}}
            - {{key: {KEY}, alias: b}}
            - {{key: {KEY}, alias: b}}
            - {{key: {"x" * 32}, alias: c, team: nope}}
        """
    )
    assert errors == [
        "$.auth.keys[0].key: the master key cannot be a declared key",
        "$.auth.keys[2].key: the same key is declared twice",
        "$.auth.keys[2].alias: 'b' is declared twice",
        "$.auth.keys[3].team: unknown team 'nope' (declare it under auth.teams)",
    ]


def test_bad_fields_name_their_path():
    assert errors_of("auth: {teams: {t: {rpm: 0}}}") == ["$.auth.teams.t.rpm: Expected `int` >= 1"]
    assert errors_of("auth: {cache_ttl: -1}") == ["$.auth.cache_ttl: Expected `float` >= 0.0"]
    assert errors_of("auth: {keys: [{key: x}]}") == [
        "$.auth.keys[0]: Object missing required field `alias`"
    ]
    assert errors_of("database: {url: 42}") == ["$.database.url: Expected `str`, got `int`"]


def test_the_database_url_is_a_sqlite_file_or_postgresql():
    assert parse_config("database: {url: 'postgresql://u:p@db/x'}", {}).database.url
    [error] = errors_of("database: {url: 'mysql://db/x'}")
    assert error.startswith("$.database.url: Expected `str` matching regex")
