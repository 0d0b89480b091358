"""``crossway import litellm LITELLM_CONFIG [-o crossway.yaml]``.

Reads a LiteLLM proxy config, translates it (:func:`proxy.admin.migrate.litellm.translate`), writes
the Crossway config — to ``-o``, else to stdout — with every untranslated setting listed as a
comment at its end, and validates the result as ``crossway check`` does, printing what check
prints. Variables the new config reads (``${NAME}``) that are unset here are given placeholder
values for the check only, and named, so that the import works on a machine without the
production secrets. The report (untranslated settings, notes, the check) goes to stderr when
the config goes to stdout, else to stdout.

Exit status: 0 — everything translated and the result is valid; 3 — the result is valid but
something was not translated (listed); 1 — the source cannot be read, or the result is not
valid (every error listed); 2 — bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import yaml

from proxy.admin.migrate.litellm import translate
from proxy.admin.migrate.result import Translation, env_names

INCOMPLETE = 3
_PLACEHOLDER = "crossway-import-placeholder-0123456789abcdef"


def add_import(commands: Any) -> None:
    """Add ``import`` to the ``crossway`` subcommands (an argparse subparsers)."""
    command = commands.add_parser("import", help="translate another gateway's config")
    sources = command.add_subparsers(dest="source", required=True)
    litellm = sources.add_parser("litellm", help="a LiteLLM proxy config.yaml")
    litellm.add_argument("source_config", type=Path, metavar="LITELLM_CONFIG")
    litellm.add_argument(
        "-o", "--output", type=Path, help="where to write the Crossway config (default: stdout)"
    )


def run_import(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run ``crossway import litellm`` (module docstring); returns the exit status."""
    try:
        tree = yaml.safe_load(args.source_config.read_text(encoding="utf-8"))
    except OSError as exc:
        print(f"crossway: cannot read {args.source_config}: {exc.strerror}", file=err)
        return 1
    except yaml.YAMLError as exc:
        print(f"crossway: {args.source_config} is not valid YAML: {exc}", file=err)
        return 1
    translation = translate(tree)
    text = render(translation, args.source_config.name)
    if args.output is None:
        out.write(text)
        report = err
        target = Path.cwd() / "crossway.yaml"
    else:
        args.output.write_text(text, encoding="utf-8")
        report = out
        target = args.output
        print(f"wrote {args.output}", file=report)
    print_report(translation, report)
    valid = validate(text, target, os.environ, report)
    if not valid:
        return 1
    return 0 if translation.complete else INCOMPLETE


def render(translation: Translation, source_name: str) -> str:
    """The Crossway config as YAML, with a header and the untranslated settings at its end."""
    lines = [f"# Crossway config imported from LiteLLM's {source_name} by `crossway import`."]
    lines.append("# Check it with `crossway check --config <this file>`.")
    body = yaml.dump(translation.config, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    tail = [""]
    if translation.untranslated:
        tail.append("# Not translated (see docs/migrating-from-litellm.md):")
        tail += [f"#   {item.path}: {item.reason}" for item in translation.untranslated]
    if translation.notes:
        tail.append("# Translated, behaving differently on purpose:")
        tail += [f"#   {note}" for note in translation.notes]
    return "\n".join(lines) + "\n" + body + "\n".join(tail) + "\n"


class _Dumper(yaml.SafeDumper):
    """YAML without anchors: a value written twice is written out twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def print_report(translation: Translation, out: TextIO) -> None:
    """The untranslated settings (each with its reason) and the notes."""
    if translation.untranslated:
        print(f"not translated ({len(translation.untranslated)}):", file=out)
        for item in translation.untranslated:
            print(f"  {item.path}: {item.reason}", file=out)
    else:
        print("everything translated", file=out)
    for note in translation.notes:
        print(f"  note: {note}", file=out)


def validate(text: str, path: Path, environ: Mapping[str, str], out: TextIO) -> bool:
    """Check ``text`` as ``crossway check`` checks ``path`` and print what it prints; unset
    variables get placeholders (named in the output). False, with every error, if invalid."""
    from proxy.core.metrics import Metrics
    from proxy.runtime.config import ConfigError, parse_config
    from proxy.runtime.describe import describe
    from proxy.runtime.plugins import BUILTINS
    from proxy.runtime.snapshot import Blueprint, Loader

    missing = [name for name in env_names(yaml.safe_load(text)) if name not in environ]
    env = {**environ, **{name: placeholder(name) for name in missing}}
    if missing:
        print(f"checked with placeholders for unset variables: {', '.join(missing)}", file=out)
    try:
        blueprint = Blueprint(
            parse_config(text, env), Loader(path, BUILTINS, Metrics(), sys.stderr)
        )
    except ConfigError as exc:
        print(f"config {path}: {len(exc.errors)} error(s)", file=out)
        for error in exc.errors:
            print(f"  {error}", file=out)
        return False
    describe(blueprint, str(path), out)
    return True


def placeholder(name: str) -> str:
    """A value of the right shape for variable ``name``, for the check only."""
    upper = name.upper()
    if upper.endswith("PORT"):
        return "6379"
    if upper.endswith(("TIMEOUT", "TTL")):
        return "60"
    if "REDIS" in upper and upper.endswith("URL"):
        return "redis://127.0.0.1:6379/0"
    if "DATABASE" in upper or upper.endswith("DB_URL"):
        return "postgresql://placeholder@127.0.0.1/placeholder"
    if upper.endswith(("BASE", "ENDPOINT", "URL")):
        return "https://placeholder.invalid"
    if upper.endswith("HOST"):
        return "127.0.0.1"
    if upper.endswith(("REGION", "REGION_NAME")):
        return "us-east-1"
    return _PLACEHOLDER
