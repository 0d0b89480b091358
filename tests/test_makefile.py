"""Makefile and pyproject.toml: ``make run`` installs only what serving needs, ``make test`` the
test tools too, both only from uv.lock (read from ``make -n``, which prints the commands without
running them)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("pytest", "hypothesis", "botocore", "ruff", "py-spy", "pyinstrument", "openai")


def planned(target: str, tmp_path: Path) -> list[str]:
    """The commands ``make <target>`` would run on a machine without a virtualenv."""
    make = shutil.which("make")
    if make is None:
        pytest.fail("these tests need GNU make on PATH")
    done = subprocess.run(
        [make, "-n", "-B", "-C", str(ROOT), target, f"VENV={tmp_path / 'venv'}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def installs(commands: list[str]) -> list[str]:
    """The commands that install into the project's virtualenv."""
    return [c for c in commands if re.search(r"\buv (sync|pip install)\b", c)]


def test_uv_is_installed_from_its_pinned_hashes(tmp_path: Path) -> None:
    (bootstrap,) = [c for c in planned("run", tmp_path) if re.search(r"/pip install ", c)]
    assert "--require-hashes" in bootstrap
    assert "requirements/uv.txt" in bootstrap
    pins = (ROOT / "requirements" / "uv.txt").read_text()
    assert re.search(r"^uv==\d+\.\d+\.\d+ \\$", pins, re.MULTILINE)
    assert "--hash=sha256:" in pins


@pytest.mark.parametrize("target", ["run", "test", "setup-dev"])
def test_every_install_is_a_locked_sync_after_a_lock_check(target: str, tmp_path: Path) -> None:
    commands = planned(target, tmp_path)
    (install,) = installs(commands)
    assert " sync --locked " in install
    check = commands.index(next(c for c in commands if " lock --locked " in c))
    assert check < commands.index(install)
    assert "make lock" in commands[check]


def test_run_installs_the_package_without_extras(tmp_path: Path) -> None:
    commands = planned("run", tmp_path)
    (install,) = installs(commands)
    assert "--extra" not in install
    assert any("crossway serve" in command for command in commands)


def test_test_installs_the_test_extra_exactly(tmp_path: Path) -> None:
    commands = planned("test", tmp_path)
    (install,) = installs(commands)
    assert install.endswith("--extra test")
    assert "--inexact" not in install
    assert any("pytest" in command for command in commands)


def test_only_lock_resolves_and_only_test_latest_installs_unlocked(tmp_path: Path) -> None:
    (relock,) = [c for c in planned("lock", tmp_path) if " lock " in c]
    assert "--upgrade" in relock
    latest = planned("test-latest", tmp_path)
    (install,) = installs(latest)
    assert "uv pip install" in install
    assert "--python .venv-latest/bin/python" in install
    assert not any(" sync " in c or " lock " in c for c in latest)


def test_sbom_and_audit_read_the_lock(tmp_path: Path) -> None:
    (export,) = [c for c in planned("sbom", tmp_path) if " export " in c]
    assert "--locked" in export
    assert "--format cyclonedx" in export
    (audit,) = [c for c in planned("audit", tmp_path) if " audit" in c]
    assert "--locked" in audit


def test_serving_dependencies_hold_no_test_or_profiling_tool() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [
        re.split(r"[<>=;\[ ]", dependency)[0].lower() for dependency in project["dependencies"]
    ]
    assert not set(names) & set(TOOLS)
    test_extra = " ".join(project["optional-dependencies"]["test"])
    assert "py-spy" not in test_extra
    assert "pyinstrument" not in test_extra


def test_the_suite_runs_under_coverage_on_xdist_workers(tmp_path: Path) -> None:
    (run,) = [command for command in planned("test", tmp_path) if "-m pytest" in command]
    assert "coverage run" in run
    assert "--numprocesses auto" in run
    assert "--dist loadfile" in run
    test_extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["test"]
    assert any(dependency.startswith("pytest-xdist") for dependency in test_extra)
