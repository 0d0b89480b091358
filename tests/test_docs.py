"""The repository's own documents: every file they link to or name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    "README.md",
    "ARCHITECTURE.md",
    "THREAT_MODEL.md",
    "deploy/README.md",
    "bench/README.md",
    "docs/dependencies.md",
    "docs/migrating-from-litellm.md",
    "docs/performance-log.md",
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
NAMED = re.compile(r"\b([A-Za-z0-9_./-]+\.md)\b")


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_linked_or_named_file_exists(document: str) -> None:
    path = ROOT / document
    text = path.read_text()
    targets = {m for m in LINK.findall(text) if not m.startswith(("http://", "https://"))}
    missing = [t for t in sorted(targets) if not (path.parent / t).exists()]
    named = [n for n in NAMED.findall(text) if not (path.parent / n).exists()]
    missing += [n for n in named if not (ROOT / n).exists()]
    assert not missing, f"{document} refers to files that do not exist: {missing}"
