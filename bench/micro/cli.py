"""``python -m bench.micro [COMMAND] [OPTIONS]``: one in-process measurement per command.

Each command is a module of its own, imported only when it runs (so that one measurement's
process holds none of another's modules), with its own ``--help``. Without a command, or with an
option first, the command is ``plugins``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

COMMANDS = {
    "plugins": (
        "bench.micro.plugins",
        "what plugins add per request: CPU, instructions (callgrind) or Python opcodes",
    ),
    "dialects": ("bench.micro.dialects", "what a client dialect's translation costs per request"),
    "pii": ("bench.micro.pii", "the PII masking pieces: scanning, masking, restoring streams"),
    "cache-lookup": ("bench.micro.cache_lookup", "the response cache's work on a miss"),
    "semantic": ("bench.micro.semantic", "the semantic cache's search and embedding call"),
    "ledger": ("bench.micro.ledger", "spend records per second into the ledger's database"),
}
DEFAULT = "plugins"


def usage() -> str:
    lines = [
        "usage: python -m bench.micro [COMMAND] [OPTIONS]  (COMMAND --help for its options)",
        "",
        f"commands (default: {DEFAULT}):",
    ]
    lines += [f"  {name:<13} {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names with the rest of ``argv``; its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not args or args[0].startswith("-"):
        args.insert(0, DEFAULT)
    if args[0] not in COMMANDS:
        print(f"{usage()}\n\nunknown command {args[0]!r}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[args[0]][0])
    return int(module.main(args[1:]) or 0)
