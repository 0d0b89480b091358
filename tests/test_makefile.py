"""Makefile and pyproject.toml: ``make run`` installs only what serving needs, ``make test`` the
test tools too (read from ``make -n``, which prints the commands without running them)."""

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
    venv = tmp_path / "venv"
    done = subprocess.run(
        [make, "-n", "-C", str(ROOT), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def installs(commands: list[str]) -> list[str]:
    """The commands that install the project (not the installer itself: uv, pinned)."""
    return [c for c in commands if re.search(r"\buv pip install\b", c)]


def test_the_installer_is_uv_pinned_from_pypi(tmp_path: Path) -> None:
    bootstrap = [c for c in planned("run", tmp_path) if re.search(r"/pip install .*'uv==", c)]
    assert len(bootstrap) == 1
    assert re.search(r"'uv==\d+\.\d+\.\d+'", bootstrap[0])


def test_run_installs_the_package_without_extras(tmp_path: Path) -> None:
    commands = planned("run", tmp_path)
    (install,) = installs(commands)
    assert install.endswith(" -e .")
    assert any("crossway serve" in command for command in commands)


def test_test_installs_the_test_extras_only(tmp_path: Path) -> None:
    (install,) = installs(planned("test", tmp_path))
    assert "'.[test]'" in install
    assert any("pytest" in command for command in planned("test", tmp_path))


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
