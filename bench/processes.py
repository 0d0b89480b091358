"""Start, await and stop the server processes the benchmark measures.

Every child is registered on an :class:`contextlib.ExitStack` when spawned, so leaving
the stack (normally, on error or on Ctrl-C) terminates it: SIGTERM, then SIGKILL after a grace
period. Children run in their own session so that a terminal's Ctrl-C reaches only the harness,
which then stops them in order. A child leads the process group of its session, which holds
what it started too (a gateway's workers, or the gateway under a ``--gateway-cmd`` wrapper such
as a profiler), so the signals go to that group, by the child's PID: nothing the harness did not
start is signalled, and nothing it started outlives it, even when the child itself ended first.
"""

import asyncio
import os
import signal
import socket
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import aiohttp

_POLL_INTERVAL_S = 0.05
_STOP_GRACE_S = 5.0
_LOG_TAIL_LINES = 40


class HarnessError(RuntimeError):
    """A server the benchmark needs could not be started."""


@dataclass(frozen=True)
class Child:
    """A spawned server process and the file collecting its stdout and stderr."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def log_tail(self) -> str:
        """Return the last lines the child printed."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-_LOG_TAIL_LINES:])


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def spawn(
    stack: ExitStack,
    name: str,
    argv: list[str],
    cwd: Path,
    log_dir: Path,
    env: dict[str, str] | None = None,
) -> Child:
    """Start ``argv`` in ``cwd`` with output to ``log_dir/<name>.log``, with ``env`` added to
    this process's environment.

    The child is stopped (see :func:`stop`) when ``stack`` closes.
    """
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
    child = Child(name=name, process=process, log_path=log_path)
    stack.callback(stop, child)
    return child


def stop(child: Child) -> None:
    """Terminate ``child`` and the processes of its group (see the module docstring), and reap
    it; kill the group if any of it outlives the grace period."""
    group = child.pid  # the child leads its session's process group (spawn)
    if _signal_group(group, signal.SIGTERM) and not _group_ended(child, _STOP_GRACE_S):
        _signal_group(group, signal.SIGKILL)
        _group_ended(child, _STOP_GRACE_S)
    child.process.wait()


def _signal_group(group: int, signum: int) -> bool:
    """Send ``signum`` to process group ``group``; False when no process is left in it."""
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    return True


def _group_ended(child: Child, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``child``'s process group to be empty (reaping the child
    as it ends); whether it is."""
    deadline = time.monotonic() + timeout_s
    while True:
        child.process.poll()
        if not _signal_group(child.pid, 0):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL_S)


async def wait_ready(child: Child, url: str, timeout_s: float) -> None:
    """Poll ``GET url`` until it answers 200.

    Raises :class:`HarnessError` (with the child's log tail) if the child exits first or
    ``timeout_s`` passes.
    """
    deadline = time.monotonic() + timeout_s
    probe_timeout = aiohttp.ClientTimeout(total=1.0)
    async with aiohttp.ClientSession(timeout=probe_timeout) as session:
        while time.monotonic() < deadline:
            if child.process.poll() is not None:
                raise HarnessError(
                    f"{child.name} exited with status {child.process.returncode} before it"
                    f" was ready; its output:\n{child.log_tail()}"
                )
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass
            await asyncio.sleep(_POLL_INTERVAL_S)
    raise HarnessError(
        f"{child.name} was not ready at {url} within {timeout_s:.0f} s; its output:\n"
        f"{child.log_tail()}"
    )
