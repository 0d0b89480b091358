"""The ``crossway`` command: serve, check, keys, teams, import and ``--version``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from proxy import __version__
from proxy.runtime.describe import describe

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
    from proxy.core.metrics import Metrics
    from proxy.runtime.plugins import BUILTINS
    from proxy.runtime.snapshot import Loader

    blueprint = Loader(config_path, BUILTINS, Metrics(), sys.stderr).load()
    describe(blueprint, str(config_path), out)
    return 0


def _print_errors(config_path: Path, errors: Sequence[str], out: TextIO) -> None:
    print(f"config {config_path}: {len(errors)} error(s)", file=out)
    for error in errors:
        print(f"  {error}", file=out)
