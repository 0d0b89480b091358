"""Gateway processes for end-to-end tests: ``crossway serve`` started on a free port, waited
for, stopped by its PID (SIGTERM, then SIGKILL of the process and its workers)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(url: str, body: bytes | None = None, timeout: float = 60) -> tuple[int, str]:
    """One request; ``timeout`` generous by default, for a loaded machine."""
    request = urllib.request.Request(url, data=body, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


START_DEADLINE = 120.0
"""Seconds a gateway may take to start: generous, for a machine that other test runs load (two
instances of two workers each, connecting to PostgreSQL and Redis, took over 60 s on a 2-core
machine running two other test runs)."""


def wait_ready(url: str, deadline: float = START_DEADLINE) -> None:
    """Poll ``/health/ready`` until it answers 200; each probe waits at most 5 s, so that one
    probe sent before the server listened cannot use up the deadline."""
    stop = time.monotonic() + deadline
    while time.monotonic() < stop:
        try:
            if http(url + "/health/ready", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"gateway did not become ready within {deadline:.0f} s")


class Served:
    """A gateway process started by a test: its URL, config file, supervisor pid and logs."""

    def __init__(self, url: str, config: Path, process: subprocess.Popen, logs: Path) -> None:
        self.url = url
        self.config = config
        self.process = process
        self.pid = process.pid
        self.logs = logs

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def log_lines(self, event: str) -> list[dict]:
        """The JSON log lines (of every worker) whose event is ``event``."""
        lines = []
        for text in self.logs.read_text(errors="replace").splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue  # not a log line (a traceback printed before logging was set up)
            if isinstance(line, dict) and line.get("event") == event:
                lines.append(line)
        return lines


@contextlib.contextmanager
def serve(
    config: Path,
    port: int,
    workers: int,
    logs: Path,
    env: dict[str, str] | None = None,
    stderr: Path | None = None,
) -> Iterator[Served]:
    """Start ``crossway serve`` (with ``env`` added to the environment); yield once every
    worker listens; stop it (SIGTERM) after.

    Output goes to the ``logs`` file (standard error too, unless ``stderr`` names a file of its
    own), never to an unread pipe (which would block the gateway once it had logged a pipe's
    worth)."""
    with logs.open("wb") as sink, contextlib.ExitStack() as files:
        errors = sink if stderr is None else files.enter_context(stderr.open("wb"))
        process = subprocess.Popen(
            [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
            cwd=REPO,
            stdout=sink,
            stderr=errors,
            env={**os.environ, **(env or {})},
        )
    served = Served(f"http://127.0.0.1:{port}", config, process, logs)
    try:
        wait_ready(served.url)
        eventually(
            lambda: listeners(port) == workers,
            timeout=START_DEADLINE,
            what=f"{workers} listening worker(s)",
        )
        yield served
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            kill_tree(process)


def eventually(condition, timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``condition`` until it holds, for at most ``timeout`` seconds."""
    stop = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > stop:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def proc_file(path: str) -> str:
    """A file of Linux's /proc, which these tests read to see sockets and worker processes."""
    if not Path("/proc/self/task").is_dir():
        raise AssertionError("the process tests need Linux /proc (workers, listening sockets)")
    return Path(path).read_text(errors="replace")


def listeners(port: int) -> int:
    """How many sockets listen on 127.0.0.1:``port`` (one per worker, with SO_REUSEPORT)."""
    local = f"0100007F:{port:04X}"
    rows = proc_file("/proc/net/tcp").splitlines()[1:]
    return sum(1 for row in rows if row.split()[1] == local and row.split()[3] == "0A")


def worker_pids(supervisor: int) -> list[int]:
    children = proc_file(f"/proc/{supervisor}/task/{supervisor}/children").split()
    workers = []
    for pid in children:
        try:
            cmdline = proc_file(f"/proc/{pid}/cmdline")
        except (FileNotFoundError, ProcessLookupError):  # gone between the two reads
            continue
        if "resource_tracker" not in cmdline:
            workers.append(int(pid))
    return workers


def kill_tree(process: subprocess.Popen) -> None:
    """Last resort for a test that failed with the gateway still up: kill it and its workers."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for pid in worker_pids(process.pid):
            os.kill(pid, signal.SIGKILL)
    process.kill()
    process.wait()
