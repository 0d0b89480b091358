"""The project's installer, for tests that build or inspect what it installs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UV_VENV = ROOT / ".uv"
"""The Makefile's ``UV_VENV``: uv's own virtualenv, made from requirements/uv.txt."""


def uv() -> Path:
    """The uv the Makefile installed; fails the test (never skips) when it is missing."""
    path = UV_VENV / "bin" / "uv"
    if not path.exists():
        pytest.fail(f"no uv at {path.relative_to(ROOT)}: run the suite with `make test`")
    return path
