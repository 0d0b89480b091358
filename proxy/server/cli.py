"""The ``crossway`` command: serve, check, keys, teams, import and ``--version``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from proxy import __version__

DEFAULT_CONFIG = os.environ.get("CROSSWAY_CONFIG", "config/gateway.yaml")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crossway", description="Crossway: a fast, small, safe LLM gateway."
    )
    parser.add_argument("--version", action="version", version=f"crossway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", type=Path, default=Path(DEFAULT_CONFIG), help="YAML config")
    serve.add_argument("--host", help="listen address (default: server.host)")
    serve.add_argument("--port", type=int, help="listen port (default: server.port)")
    serve.add_argument("--workers", type=int, help="worker processes (default: server.workers)")
    check = commands.add_parser("check", help="validate a config and print what it resolves to")
    check.add_argument("--config", type=Path, default=Path(DEFAULT_CONFIG), help="YAML config")
    from proxy.admin.cli import add_commands
    from proxy.admin.migrate.cli import add_import

    add_commands(commands, Path(DEFAULT_CONFIG))
    add_import(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    from proxy.runtime.config import ConfigError

    args = _parser().parse_args(argv)
    try:
        if args.command == "check":
            return check(args.config, sys.stdout)
        if args.command == "import":
            from proxy.admin.migrate.cli import run_import

            return run_import(args, sys.stdout, sys.stderr)
        if args.command in ("keys", "teams"):
            from proxy.admin.cli import run

            return run(args, sys.stdout, sys.stderr)
        from proxy.server.supervisor import ServeOptions, serve

        if args.workers is not None and args.workers < 1:
            print("crossway: --workers must be at least 1", file=sys.stderr)
            return 2
        if args.port is not None and not 0 <= args.port <= 65535:
            print("crossway: --port must be between 0 and 65535", file=sys.stderr)
            return 2
        serve(ServeOptions(args.config, host=args.host, port=args.port, workers=args.workers))
    except ConfigError as exc:
        _print_errors(args.config, exc.errors, sys.stderr)
        return 1
    return 0


def check(config_path: Path, out: TextIO) -> int:
    """Validate ``config_path`` and print its providers, models and plugin chain.

    Raises :class:`proxy.runtime.config.ConfigError` if the config (or a plugin's options) is
    invalid.
    """
    from plugins import BUILTINS
    from proxy.core.metrics import Metrics
    from proxy.runtime.snapshot import Loader

    blueprint = Loader(config_path, BUILTINS, Metrics(), sys.stderr).load()
    describe(blueprint, str(config_path), out)
    return 0


def describe(blueprint: Any, label: str, out: TextIO) -> None:
    """What ``check`` prints of a valid config's ``blueprint`` (``label`` names the file)."""
    config = blueprint.config
    server = config.server
    print(f"config {label}: ok", file=out)
    print(f"server: {server.host}:{server.port}, {server.workers} worker(s)", file=out)
    print("providers:", file=out)
    for name, provider in blueprint.providers.items():
        state = "ready" if provider.ready else "NOT READY (missing credentials)"
        print(f"  {name} ({type(provider.config).__struct_config__.tag}): {state}", file=out)
    print("models:", file=out)
    if not config.models:
        print("  (none: address models as provider/model)", file=out)
    for alias, deployments in blueprint.router.aliases().items():
        targets = ", ".join(
            f"{d.target} (weight {d.weight:g}"
            + ("" if blueprint.router.is_ready(d.provider) else ", not ready")
            + ")"
            for d in deployments
        )
        print(f"  {alias} -> {targets}", file=out)
    _print_prices(blueprint, out)
    print("plugin chain (outermost first):", file=out)
    if not config.plugins:
        print("  (empty)", file=out)
    for spec, plugin in zip(config.plugins, blueprint.plugins, strict=True):
        print(f"  {spec.ref}: {type(plugin).__module__}.{type(plugin).__name__}", file=out)
    _print_auth(blueprint, out)
    _print_state(config, out)


def _print_state(config: Any, out: TextIO) -> None:
    """Where shared state lives, its policies, and what stays per worker."""
    from proxy.state.config import USES, RedisAddress, per_worker, per_worker_message

    state = config.state
    if state.backend == "redis":
        policies = ", ".join(f"{use}: {getattr(state.on_unavailable, use)}" for use in USES)
        where = RedisAddress(state.redis.url).description
        print(f"state: redis {where}; when unavailable: {policies}", file=out)
    else:
        print("state: memory (this process only)", file=out)
    workers = config.server.workers
    uses = per_worker(state, [spec.ref for spec in config.plugins], workers)
    if uses:
        print(f"  WARNING: {per_worker_message(uses, workers)}", file=out)


def _print_auth(blueprint: Any, out: TextIO) -> None:
    """Whether keys are demanded, the admin API, declared keys and teams, the database."""
    auth = blueprint.config.auth
    demanded = any(hasattr(plugin, "authenticate") for plugin in blueprint.plugins)
    admin = "on (master key set)" if auth.master_key else "off (no auth.master_key)"
    print(
        f"auth: {'keys demanded' if demanded else 'open (no auth plugin)'}; admin API {admin}; "
        f"{len(auth.keys)} declared key(s), {len(auth.teams)} declared team(s)",
        file=out,
    )
    from proxy.db import Database

    print(f"database: {Database(blueprint.config.database.url).description}", file=out)


def _print_prices(blueprint: Any, out: TextIO) -> None:
    """The catalog in use and every configured model it cannot price (its cost is unknown)."""
    prices = blueprint.prices
    catalog = prices.catalog
    where = catalog.path if catalog.path is not None else "none found"
    print(f"prices: catalog {where} ({len(catalog)} models)", file=out)
    targets = {d.target: d for ds in blueprint.router.aliases().values() for d in ds}
    for name, provider in blueprint.config.providers.items():
        if provider.default_model:
            targets.setdefault(f"{name}/{provider.default_model}", None)
    for target in sorted(targets):
        provider, _, model = target.partition("/")
        if prices.price(provider, model) is None:
            print(
                f"  NO PRICE: {target} (its cost is unknown; set prices on the deployment,"
                " the provider or in the catalog)",
                file=out,
            )


def _print_errors(config_path: Path, errors: Sequence[str], out: TextIO) -> None:
    print(f"config {config_path}: {len(errors)} error(s)", file=out)
    for error in errors:
        print(f"  {error}", file=out)
