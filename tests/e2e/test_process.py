"""The gateway as a real process: the CLI, SIGHUP reloads, and several workers on one port."""

from __future__ import annotations

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

import pytest

from proxy import __version__

REPO = Path(__file__).resolve().parents[2]
CONFIG = """
server: {{port: {port}, workers: {workers}, access_log: false, client_idle_timeout: 1}}
providers:
  mock: {{type: mock}}
models:
  {alias}: [{{target: mock/echo}}]
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _crossway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _http(url: str, body: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=body, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _wait_ready(url: str, deadline: float = 20.0) -> None:
    stop = time.monotonic() + deadline
    while time.monotonic() < stop:
        try:
            if _http(url + "/health/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("gateway did not become ready")


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path, int]]:
    workers = getattr(request, "param", 1)
    port = _free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(port=port, workers=workers, alias="first"))
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url)
        yield url, config, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _chat(url: str, model: str) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    return _http(url + "/v1/chat/completions", body.encode())[0]


def test_version() -> None:
    result = _crossway("--version")
    assert result.stdout.strip() == f"crossway {__version__}"


def test_check_prints_the_resolved_config() -> None:
    result = _crossway("check", "--config", "config/gateway.yaml")
    assert result.returncode == 0, result.stderr
    assert "mock (mock): ready" in result.stdout
    assert "headers: plugins.headers.HeadersPlugin" in result.stdout


def test_check_lists_every_error_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "server: {port: nope}\nproviders:\n  x: {type: openai, api_ky: 1}\n"
        "models:\n  a: [{target: y/z}]\nplugins: [nothing]\n"
    )
    result = _crossway("check", "--config", str(bad))
    assert result.returncode == 1
    for path in ("$.server.port", "$.providers.x", "$.models.a[0].target", "$.plugins[0]"):
        assert path in result.stderr


def test_sighup_reloads_and_a_broken_file_keeps_the_old_config(
    served: tuple[str, Path, int],
) -> None:
    url, config, pid = served
    assert _chat(url, "first") == 200
    port = url.rsplit(":", 1)[1]
    config.write_text(CONFIG.format(port=port, workers=1, alias="second"))
    os.kill(pid, signal.SIGHUP)
    _eventually(lambda: _chat(url, "second") == 200)
    assert _chat(url, "first") == 404
    config.write_text("providers: [this is: broken")
    os.kill(pid, signal.SIGHUP)
    time.sleep(0.5)
    assert _chat(url, "second") == 200, "a broken file must not stop serving"


@pytest.mark.parametrize("served", [2], indirect=True)
def test_workers_share_one_port_and_metrics(served: tuple[str, Path, int]) -> None:
    url, _, _ = served
    for _ in range(20):
        assert _chat(url, "first") == 200
    text = _http(url + "/metrics")[1]
    line = next(
        x for x in text.splitlines() if x.startswith("crossway_requests_total{") and "first" in x
    )
    assert float(line.rsplit(" ", 1)[1]) == 20.0, "every worker's requests are counted"


def _eventually(condition, timeout: float = 10.0) -> None:
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def _worker_pids(supervisor: int) -> list[int]:
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return [
        int(pid)
        for pid in children
        if "resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    ]


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_sigterm_while_a_dead_worker_is_being_replaced_still_stops(tmp_path: Path) -> None:
    # The supervisor pauses before restarting a dead worker; a SIGTERM in that pause must not
    # leave the replacement running (and the supervisor waiting for it forever).
    port = _free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(port=port, workers=2, alias="first"))
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_ready(f"http://127.0.0.1:{port}")
        workers = _worker_pids(process.pid)
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        time.sleep(0.3)  # the supervisor has seen it die and is pausing before the restart
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            for pid in _worker_pids(process.pid):
                os.kill(pid, signal.SIGKILL)
            process.kill()
            process.wait()


def test_serve_refuses_a_port_out_of_range() -> None:
    result = _crossway("serve", "--config", "config/gateway.yaml", "--port", "70000")
    assert result.returncode == 2
    assert "--port" in result.stderr


def test_a_client_trickling_its_request_head_is_disconnected(
    served: tuple[str, Path, int],
) -> None:
    url, _, _ = served
    port = int(url.rsplit(":", 1)[1])
    # client_idle_timeout is 1 s here; the default (60 s) would outlast the socket's 10 s.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(3):  # a byte at a time, never the blank line that ends the head
            time.sleep(0.2)
            slow.sendall(b"X")
        assert slow.recv(1024) == b"", "the server closed the connection"
    assert _chat(url, "first") == 200, "other clients are served meanwhile and after"
