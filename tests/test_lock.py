"""uv.lock is the one source of what gets installed: the test virtualenv holds exactly its
versions, and a pyproject.toml that no longer matches it stops ``make`` before anything is
installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.utils import canonicalize_name

from tests.installer import ROOT, UV_VENV, uv


def locked_for_tests() -> dict[str, str]:
    """Name -> version of every package uv.lock installs with the ``test`` extra, here."""
    exported = subprocess.run(
        [
            *(uv(), "export", "--locked", "--offline", "--extra", "test", "--no-hashes"),
            *("--no-emit-project", "--format", "requirements-txt", "--no-header"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wanted = {}
    for line in exported.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        requirement, _, marker = line.partition(";")
        name, _, version = requirement.strip().partition("==")
        if not marker.strip() or Marker(marker).evaluate():
            wanted[canonicalize_name(name)] = version
    return wanted


def installed() -> dict[str, str]:
    """Name -> version of every distribution in this interpreter's environment, but the
    project itself."""
    found = {
        canonicalize_name(d.metadata["Name"]): d.version
        for d in metadata.distributions(path=[p for p in sys.path if "site-packages" in p])
    }
    found.pop("crossway", None)
    return found


def test_the_virtualenv_holds_exactly_the_locked_versions() -> None:
    wanted, have = locked_for_tests(), installed()
    assert {n: v for n, v in wanted.items() if have.get(n) != v} == {}, "not as locked"
    assert sorted(set(have) - set(wanted)) == [], "installed but not locked"


def test_a_dependency_changed_without_relocking_stops_make_before_installing(
    tmp_path: Path,
) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.fail("this test needs GNU make on PATH")
    for name in ("Makefile", "uv.lock", "README.md", "requirements/uv.txt", "proxy/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    pyproject = (ROOT / "pyproject.toml").read_text()
    changed = re.sub(r'"msgspec>=[^"]*"', '"msgspec>=0.19.1"', pyproject, count=1)
    assert changed != pyproject
    (tmp_path / "pyproject.toml").write_text(changed)
    venv = tmp_path / "venv"
    done = subprocess.run(
        [make, "-C", str(tmp_path), "setup-test", f"UV_VENV={UV_VENV}", f"VENV={venv}", "-o", uv()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "uv.lock does not match pyproject.toml: run 'make lock'" in done.stderr
    assert not venv.exists()


def test_the_docker_image_installs_from_the_same_lock() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "COPY pyproject.toml uv.lock" in dockerfile
    assert "COPY requirements/uv.txt" in dockerfile
    assert "--require-hashes" in dockerfile
    syncs = re.findall(r"uv sync [^\n]*", dockerfile)
    assert syncs
    assert all("--locked" in sync and "--extra" not in sync for sync in syncs)
    assert "pip install ." not in dockerfile


def test_the_versions_the_docs_call_tested_are_the_locked_ones() -> None:
    locked = {
        canonicalize_name(package["name"]): package["version"]
        for package in tomllib.loads((ROOT / "uv.lock").read_text())["package"]
        if "version" in package
    }
    table = (ROOT / "docs" / "dependencies.md").read_text()
    rows = re.findall(r"\| ([A-Za-z][\w-]*)(?: \([^)]*\))? \| (\d[\w.]*) \|", table)
    assert len(rows) >= 16
    assert {
        name: version for name, version in rows if locked[canonicalize_name(name)] != version
    } == {}
