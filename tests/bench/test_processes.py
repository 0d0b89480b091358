"""bench/processes.py: stopping a child stops what it started, even when the child itself ended
first (a wrapper such as a profiler with a duration), and kills what ignores SIGTERM."""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from bench import processes
from bench.processes import spawn, stop

# Starts a grandchild that sleeps (ignoring SIGTERM when asked), prints its PID, then the
# child either exits at once or sleeps too.
_PARENT = """
import subprocess, sys, time
code = "import signal, time\\n"
if sys.argv[1] == "stubborn":
    code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
code += "print('ready', flush=True)\\ntime.sleep(60)"
grandchild = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
grandchild.stdout.readline()  # its handlers are set
print(grandchild.pid, flush=True)
if sys.argv[2] == "stay":
    time.sleep(60)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _grandchild(tmp_path: Path, stack: ExitStack, *argv: str) -> tuple[processes.Child, int]:
    child = spawn(stack, "parent", [sys.executable, "-c", _PARENT, *argv], tmp_path, tmp_path)
    deadline = time.monotonic() + 20
    while not (text := child.log_path.read_text()).strip():
        assert time.monotonic() < deadline, "the parent never said its grandchild's PID"
        time.sleep(0.05)
    return child, int(text.split()[0])


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_what_a_child_that_already_ended_started_is_stopped(tmp_path: Path) -> None:
    with ExitStack() as stack:
        child, grandchild = _grandchild(tmp_path, stack, "plain", "leave")
        child.process.wait(timeout=20)  # the wrapper is gone; what it started is not
        assert _running(grandchild)
        stop(child)
        assert _gone(grandchild)
        assert child.process.returncode == 0  # and reaped


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "_STOP_GRACE_S", 0.5)
    with ExitStack() as stack:
        child, grandchild = _grandchild(tmp_path, stack, "stubborn", "stay")
        started = time.monotonic()
        stop(child)
        assert _gone(grandchild)
        assert child.process.returncode is not None
        assert time.monotonic() - started < 5  # the grace, not the sleep, bounded it


def test_stopping_twice_or_after_the_stack_does_nothing_more(tmp_path: Path) -> None:
    with ExitStack() as stack:
        child, grandchild = _grandchild(tmp_path, stack, "plain", "stay")
    assert _gone(grandchild)  # closing the stack stopped the group
    stop(child)
    assert child.process.returncode is not None
