"""``crossway keys …`` and ``crossway teams …``: the admin API's key and team operations on the
config's database, without a server.

```
crossway keys create --config F [--alias A --team T --user U --models a,b --rpm N --tpm N
                                 --max-parallel N --expires-at 2027-01-31T00:00:00Z] [--json]
crossway keys list --config F [--team T] [--json]
crossway keys revoke --config F ID
crossway teams create --config F ID [--models a,b --rpm N --tpm N --max-parallel N] [--json]
crossway teams list --config F [--json]
crossway teams delete --config F ID
```

``keys create`` prints the key alone on stdout (shown this once; the record goes to stderr), or
with ``--json`` the admin API's answer. A running gateway sees the change within its
``auth.cache_ttl``. Exit status 1 on an error (its message on stderr), 0 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import msgspec

from proxy.core.errors import GatewayError
from proxy.core.metrics import Metrics
from proxy.db import Database, DatabaseError
from proxy.governance.auth.authenticator import Authenticator
from proxy.governance.auth.registry import NewKey, NewTeam, Registry
from proxy.state.events import announce_changes
from proxy.state.redis import RedisStore

_COLUMNS = ("id", "alias", "team", "models", "rpm", "tpm", "max_parallel", "blocked", "source")
_TEAM_COLUMNS = ("id", "models", "rpm", "tpm", "max_parallel", "source")


def add_commands(commands: Any, default_config: Path) -> None:
    """Add ``keys`` and ``teams`` to the ``crossway`` subcommands (an argparse subparsers)."""
    keys = commands.add_parser("keys", help="mint, list and revoke virtual keys")
    key_actions = keys.add_subparsers(dest="action", required=True)
    create = _action(key_actions, "create", "mint a key (printed once)", default_config)
    create.add_argument("--alias")
    create.add_argument("--team")
    create.add_argument("--user")
    _limit_arguments(create)
    create.add_argument("--expires-at", help="RFC 3339, e.g. 2027-01-31T00:00:00Z")
    listing = _action(key_actions, "list", "list keys", default_config)
    listing.add_argument("--team")
    revoke = _action(key_actions, "revoke", "revoke a key", default_config)
    revoke.add_argument("id")

    teams = commands.add_parser("teams", help="create, list and delete teams")
    team_actions = teams.add_subparsers(dest="action", required=True)
    create_team = _action(team_actions, "create", "create a team", default_config)
    create_team.add_argument("id")
    _limit_arguments(create_team)
    _action(team_actions, "list", "list teams", default_config)
    delete_team = _action(team_actions, "delete", "delete a team without keys", default_config)
    delete_team.add_argument("id")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run a ``keys`` or ``teams`` command; returns the exit status."""
    from proxy.runtime.config import load_config

    config = load_config(args.config)  # a ConfigError is the caller's to print
    try:
        database = Database(config.database.url)
    except DatabaseError as exc:
        print(f"crossway: {exc}", file=err)
        return 1
    changes: list[str | None] = []
    authenticator = Authenticator(config.auth, database, Metrics(), on_change=changes.append)
    registry = Registry(database, authenticator)
    action = _ACTIONS[(args.command, args.action)]
    redis = RedisStore(config.state.redis) if config.state.backend == "redis" else None
    try:
        asyncio.run(_with_database(database, action(registry, args, out, err)))
        asyncio.run(announce_changes(redis, changes))
    except (GatewayError, DatabaseError, ValueError) as exc:
        print(f"crossway: {getattr(exc, 'message', exc)}", file=err)
        return 1
    return 0


async def _with_database(database: Database, work: Awaitable[None]) -> None:
    try:
        await database.open()
        await work
    finally:
        await database.close()


def _action(actions: Any, name: str, help_text: str, default_config: Path) -> Any:
    parser = actions.add_parser(name, help=help_text)
    parser.add_argument("--config", type=Path, default=default_config, help="YAML config")
    if name in ("create", "list"):
        parser.add_argument("--json", action="store_true", help="print JSON")
    return parser


def _limit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", help="comma-separated models (default: all)")
    parser.add_argument("--rpm", type=int)
    parser.add_argument("--tpm", type=int)
    parser.add_argument("--max-parallel", type=int)


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    models = None if args.models is None else [m for m in args.models.split(",") if m]
    return {"models": models, "rpm": args.rpm, "tpm": args.tpm, "max_parallel": args.max_parallel}


def _validated(fields: dict[str, Any], target: type[Any]) -> Any:
    """``fields`` as ``target``, checked as the admin API checks a body."""
    try:
        return msgspec.convert(fields, target, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc).replace("$.", "--").replace("_", "-")) from None


async def _create_key(
    registry: Registry, args: argparse.Namespace, out: TextIO, err: TextIO
) -> None:
    fields = {"alias": args.alias, "team": args.team, "user": args.user, **_limits(args)}
    fields["expires_at"] = args.expires_at
    new = _validated({k: v for k, v in fields.items() if v is not None}, NewKey)
    record, key = await registry.create_key(new)
    if args.json:
        print(
            msgspec.json.encode({"key": key, **msgspec.structs.asdict(record)}).decode(), file=out
        )
        return
    print(key, file=out)
    print(
        f"created {record.id} ({record.alias or 'no alias'}): the key is shown only once", file=err
    )


async def _list_keys(
    registry: Registry, args: argparse.Namespace, out: TextIO, err: TextIO
) -> None:
    records = await registry.list_keys(args.team)
    _print(records, _COLUMNS, args.json, out)


async def _revoke_key(
    registry: Registry, args: argparse.Namespace, out: TextIO, err: TextIO
) -> None:
    await registry.delete_key(args.id)
    print(f"revoked {args.id}", file=out)


async def _create_team(
    registry: Registry, args: argparse.Namespace, out: TextIO, err: TextIO
) -> None:
    new = _validated(
        {"id": args.id, **{k: v for k, v in _limits(args).items() if v is not None}}, NewTeam
    )
    record = await registry.create_team(new)
    _print([record], _TEAM_COLUMNS, args.json, out)


async def _list_teams(
    registry: Registry, args: argparse.Namespace, out: TextIO, err: TextIO
) -> None:
    _print(await registry.list_teams(), _TEAM_COLUMNS, args.json, out)


async def _delete_team(
    registry: Registry, args: argparse.Namespace, out: TextIO, err: TextIO
) -> None:
    await registry.delete_team(args.id)
    print(f"deleted {args.id}", file=out)


_ACTIONS: dict[tuple[str, str], Callable[..., Awaitable[None]]] = {
    ("keys", "create"): _create_key,
    ("keys", "list"): _list_keys,
    ("keys", "revoke"): _revoke_key,
    ("teams", "create"): _create_team,
    ("teams", "list"): _list_teams,
    ("teams", "delete"): _delete_team,
}


def _print(records: list[Any], columns: tuple[str, ...], as_json: bool, out: TextIO) -> None:
    if as_json:
        print(msgspec.json.encode({"data": records}).decode(), file=out)
        return
    rows = [columns] + [tuple(_cell(getattr(r, c)) for c in columns) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip(),
            file=out,
        )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value).lower() if isinstance(value, bool) else str(value)
