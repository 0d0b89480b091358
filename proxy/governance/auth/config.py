"""The ``database:`` and ``auth:`` sections of the config file.

```yaml
database:
  url: "sqlite:///${CROSSWAY_DATA_DIR:-./data}/crossway.db"   # the default when omitted
auth:
  master_key: "${CROSSWAY_MASTER_KEY:-}"   # admin API + every model; empty = admin API off
  cache_ttl: 5                             # seconds a key lookup may be served from memory
  lookup_timeout: 2                        # seconds a cache miss may wait for the database
  user_budget: {max_usd: 5, period: 1d}    # each end user a request names (OpenAI `user`)
  teams:
    search: {models: [fast, default], rpm: 1200, tpm: 400000, max_parallel: 50,
             budget: {max_usd: 200, period: 1mo, soft_usd: 150},
             mcp: {github: [search_issues, get_issue], files: "*"}}   # MCP servers and tools
  keys:                                    # declared keys: hashed at load, read-only
    - {key: "${SEARCH_CI_KEY}", alias: search-ci, team: search, models: [fast], rpm: 60}
```

:func:`check_auth` adds what types cannot say: the master key and declared keys are at least
32 characters, no declared key is the master key or another declared key, aliases are unique,
and a declared key's team is declared too.
Errors never quote a key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from proxy.core.canonical import Budget
from proxy.governance.auth.tokens import MAX_KEY_LENGTH, MIN_DECLARED_KEY_LENGTH, is_key_text

DEFAULT_DATABASE_URL = "sqlite:///${CROSSWAY_DATA_DIR:-./data}/crossway.db"
MIN_MASTER_KEY_LENGTH = 32
_DATABASE_URL = r"^(sqlite:///.+|postgres(ql)?(\+asyncpg)?://.+)$"  # a SQLite file or PostgreSQL

Positive = Annotated[int, Meta(ge=1, le=2**31 - 1)]
"""A request count (``rpm``, ``max_parallel``): an SQL INTEGER holds it."""
PositiveBig = Annotated[int, Meta(ge=1, le=2**63 - 1)]
"""A token count (``tpm``): an SQL BIGINT holds it."""
ModelName = Annotated[str, Meta(min_length=1, max_length=256)]
TeamId = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Alias = Annotated[str, Meta(min_length=1, max_length=128)]
Moment = Annotated[datetime, Meta(tz=True)]
McpName = Annotated[str, Meta(min_length=1, max_length=128)]
McpGrants = dict[McpName, list[McpName] | Literal["*"]]
"""The MCP servers (and of each, its tools, or ``"*"`` for all) a key or team may use."""


class DatabaseConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """Where keys, teams and the spend ledger are kept: ``sqlite:///path`` (created and
    migrated on first use) or ``postgresql://…``. Applies as the process started. When the
    section is omitted, the file is ``crossway.db`` in ``$CROSSWAY_DATA_DIR`` (``./data``).
    ``journal_dir`` is where spend records wait while the database cannot take them
    (default: ``ledger-journal`` beside the SQLite file, or in ``$CROSSWAY_DATA_DIR``)."""

    url: Annotated[str, Meta(pattern=_DATABASE_URL)] = "sqlite:///./data/crossway.db"
    journal_dir: Annotated[str, Meta(min_length=1)] | None = None


class TeamConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """A team declared in the config: the models its keys may use (None: all) and limits
    shared by all its keys."""

    models: tuple[ModelName, ...] | None = None
    rpm: Positive | None = None
    tpm: PositiveBig | None = None
    max_parallel: Positive | None = None
    metadata: dict[str, Any] | None = None
    budget: Budget | None = None
    request_logs: Literal["none", "metadata", "payloads"] | None = None
    mcp: McpGrants | None = None


class DeclaredKey(Struct, frozen=True, forbid_unknown_fields=True):
    """A key declared in the config (GitOps). ``alias`` is required: its record id is
    ``config:<alias>``, stable across reloads."""

    key: str
    alias: Alias
    team: TeamId | None = None
    user: str | None = None
    models: tuple[ModelName, ...] | None = None
    rpm: Positive | None = None
    tpm: PositiveBig | None = None
    max_parallel: Positive | None = None
    blocked: bool = False
    expires_at: Moment | None = None
    metadata: dict[str, Any] | None = None
    budget: Budget | None = None
    request_logs: Literal["none", "metadata", "payloads"] | None = None
    mcp: McpGrants | None = None


class AuthConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring. ``cache_ttl`` 0 looks every request up in the database."""

    master_key: str = ""
    cache_ttl: Annotated[float, Meta(ge=0, le=3600)] = 5.0
    lookup_timeout: Annotated[float, Meta(gt=0, le=60)] = 2.0
    teams: dict[TeamId, TeamConfig] = msgspec.field(default_factory=dict)
    keys: tuple[DeclaredKey, ...] = ()
    user_budget: Budget | None = None


def check_auth(auth: AuthConfig, errors: list[str]) -> None:
    """Append to ``errors`` what is wrong with ``auth`` beyond its types (module docstring)."""
    master = auth.master_key
    if master and (len(master) < MIN_MASTER_KEY_LENGTH or not is_key_text(master)):
        errors.append(
            f"$.auth.master_key: must be at least {MIN_MASTER_KEY_LENGTH} printable ASCII "
            "characters without spaces (or empty: the admin API is off)"
        )
    seen_keys: set[str] = set()
    seen_aliases: set[str] = set()
    for index, declared in enumerate(auth.keys):
        path = f"$.auth.keys[{index}]"
        key = declared.key
        if len(key) < MIN_DECLARED_KEY_LENGTH or not is_key_text(key):
            errors.append(
                f"{path}.key: must be {MIN_DECLARED_KEY_LENGTH} to {MAX_KEY_LENGTH} printable "
                "ASCII characters without spaces"
            )
        elif master and key == master:
            errors.append(f"{path}.key: the master key cannot be a declared key")
        elif key in seen_keys:
            errors.append(f"{path}.key: the same key is declared twice")
        seen_keys.add(key)
        if declared.team is not None and declared.team not in auth.teams:
            errors.append(
                f"{path}.team: unknown team {declared.team!r} (declare it under auth.teams)"
            )
        if declared.alias in seen_aliases:
            errors.append(f"{path}.alias: {declared.alias!r} is declared twice")
        seen_aliases.add(declared.alias)
