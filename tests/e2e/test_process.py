"""The gateway as a real process: the CLI, SIGHUP reloads, and several workers on one port."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy import __version__
from tests.e2e.processes import (
    REPO,
    Served,
    eventually,
    free_port,
    http,
    kill_tree,
    listeners,
    wait_ready,
    worker_pids,
)
from tests.e2e.processes import serve as _serve

CONFIG = """
server: {{port: {port}, workers: {workers}, access_log: false, client_idle_timeout: 1}}
providers:
  mock: {{type: mock}}
models:
  {alias}: [{{target: mock/echo}}]
"""


def _crossway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Served]:
    workers = getattr(request, "param", 1)
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(port=port, workers=workers, alias="first"))
    with _serve(config, port, workers, tmp_path / "gateway.log") as gateway:
        yield gateway


def _chat(url: str, model: str) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    return http(url + "/v1/chat/completions", body.encode())[0]


TRICKLE_SECONDS = 30.0


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


def test_sighup_reloads_and_a_broken_file_keeps_the_old_config(served: Served) -> None:
    assert _chat(served.url, "first") == 200
    served.config.write_text(CONFIG.format(port=served.port, workers=1, alias="second"))
    os.kill(served.pid, signal.SIGHUP)
    eventually(lambda: _reloads(served.url)["ok"] == 1.0, what="the reload to be counted")
    assert _chat(served.url, "second") == 200
    assert _chat(served.url, "first") == 404
    served.config.write_text("providers: [this is: broken")
    os.kill(served.pid, signal.SIGHUP)
    # The failed reload has been processed once it is counted (and logged): only then does
    # "still serving" say anything about it.
    eventually(lambda: _reloads(served.url)["error"] == 1.0, what="the failed reload")
    eventually(lambda: served.log_lines("config_reload_failed"), what="its log line")
    (failure,) = served.log_lines("config_reload_failed")
    assert any("not valid YAML" in error for error in failure["errors"])
    assert _chat(served.url, "second") == 200, "a broken file must not stop serving"
    assert _reloads(served.url) == {"ok": 1.0, "error": 1.0}


@pytest.mark.parametrize("served", [2], indirect=True)
def test_sighup_reaches_every_worker(served: Served) -> None:
    served.config.write_text(CONFIG.format(port=served.port, workers=2, alias="second"))
    os.kill(served.pid, signal.SIGHUP)  # to the supervisor, which forwards it
    # The counter is summed over the workers: 2 means each of them reloaded.
    eventually(lambda: _reloads(served.url)["ok"] == 2.0, what="both workers to reload")
    # New connections are spread over the workers by the kernel: all of them serve the new file.
    assert [_chat(served.url, "second") for _ in range(20)] == [200] * 20
    assert _chat(served.url, "first") == 404


@pytest.mark.parametrize("served", [2], indirect=True)
def test_workers_share_one_port_and_metrics(served: Served) -> None:
    for _ in range(20):
        assert _chat(served.url, "first") == 200
    text = http(served.url + "/metrics")[1]
    line = next(
        x for x in text.splitlines() if x.startswith("crossway_requests_total{") and "first" in x
    )
    assert float(line.rsplit(" ", 1)[1]) == 20.0, "every worker's requests are counted"


def _reloads(url: str) -> dict[str, float]:
    """``crossway_config_reloads_total`` by result, from ``/metrics``."""
    counts = {}
    for line in http(url + "/metrics")[1].splitlines():
        if line.startswith("crossway_config_reloads_total{"):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            counts[result] = float(line.rsplit(" ", 1)[1])
    return counts


@pytest.mark.parametrize("served", [2], indirect=True)
def test_the_supervisor_restarts_a_worker_that_died(served: Served) -> None:
    before = worker_pids(served.pid)
    assert len(before) == 2
    dead, survivor = before
    os.kill(dead, signal.SIGKILL)

    def replaced() -> bool:
        now = worker_pids(served.pid)
        return len(now) == 2 and dead not in now and survivor in now

    eventually(replaced, what="a replacement worker")
    eventually(lambda: listeners(served.port) == 2, what="the replacement to listen")
    assert [_chat(served.url, "first") for _ in range(20)] == [200] * 20


def test_sigterm_while_a_dead_worker_is_being_replaced_still_stops(tmp_path: Path) -> None:
    # The supervisor pauses (1 s for a worker that lived under 10 s) before restarting a dead
    # worker; a SIGTERM in that pause must not leave the replacement running (and the
    # supervisor waiting for it forever).
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(port=port, workers=2, alias="first"))
    with _serve(config, port, 2, tmp_path / "gateway.log") as served:
        victim, survivor = worker_pids(served.pid)
        for _ in range(4):
            os.kill(victim, signal.SIGKILL)
            # Reaped (gone from the children): the supervisor saw the death and is pausing.
            eventually(lambda v=victim: v not in worker_pids(served.pid), what="the reap")
            workers = worker_pids(served.pid)
            if workers == [survivor]:
                break  # inside the pause: the race this test is about
            # A loaded machine let the pause pass: kill the replacement, whose quick death
            # doubles the next pause (1, 2, 4, 8 s).
            (victim,) = (pid for pid in workers if pid != survivor)
        assert worker_pids(served.pid) == [survivor], "never inside the restart pause"
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=60) == 0
        with pytest.raises(ProcessLookupError):
            os.kill(survivor, 0)  # the survivor stopped too (it was the supervisor's child)


def test_serve_refuses_a_port_out_of_range() -> None:
    result = _crossway("serve", "--config", "config/gateway.yaml", "--port", "70000")
    assert result.returncode == 2
    assert "--port" in result.stderr


def test_a_client_trickling_its_request_head_is_disconnected(served: Served) -> None:
    # client_idle_timeout is 1 s here. The head is trickled a byte every 0.25 s, never ending
    # it: were each byte to reset the timer, the connection would outlive the trickle. The
    # server must close it while bytes are still arriving. The trickle lasts up to 30 s, not a
    # handful of idle timeouts: on a loaded machine the server's timer may fire late, and what
    # is checked is that it fires at all.
    deadline = time.monotonic() + TRICKLE_SECONDS
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as slow:
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                slow.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            readable, _, _ = select.select([slow], [], [], 0.25)  # the pace, and the watch
            if readable:
                try:
                    closed = slow.recv(1024) == b""
                except ConnectionResetError:
                    closed = True
                break
        assert closed, "the connection outlived a 30 s trickle with a 1 s idle timeout"
    assert _chat(served.url, "first") == 200, "other clients are served meanwhile and after"


@pytest.mark.parametrize("workers", [1, 2])
def test_one_start_up_line_says_where_it_listens(tmp_path: Path, workers: int) -> None:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, workers: {workers}, access_log: false}}\n"
        "providers:\n  mock: {type: mock}\n  openai: {type: openai, api_key: ''}\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    announced = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if '"listening on' in line:
                announced.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_ready(f"http://127.0.0.1:{port}")
        assert announced.wait(timeout=90), "no start-up line"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            kill_tree(process)
            raise
        reader.join(timeout=10)
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    started = [line for line in logged if line["event"].startswith("listening on")]
    assert len(started) == 1, lines
    (line,) = started
    assert line["event"] == f"listening on http://127.0.0.1:{port}"
    assert (line["workers"], line["config"]) == (workers, str(config))
    assert (line["providers_ready"], line["providers_not_ready"]) == (["mock"], ["openai"])


_STOP_WHEN_ANNOUNCED = """
import os, signal, sys
from pathlib import Path

import proxy.server.supervisor as server

announce = server.log_listening


def announce_then_stop(*args):
    announce(*args)
    os.kill(os.getpid(), signal.SIGTERM)


server.log_listening = announce_then_stop
server.run_worker(Path(sys.argv[1]), "127.0.0.1", int(sys.argv[2]), reuse_port=False)
"""


def test_a_worker_stops_on_a_sigterm_that_comes_as_soon_as_it_listens(tmp_path: Path) -> None:
    # The signal arrives right after the start-up line, as a supervisor's SIGTERM does when a
    # test stops the gateway the moment it is ready. uvloop drops a signal that comes while its
    # loop is not running, so a worker that ran its loop once to listen and again to serve
    # kept serving forever.
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG.format(port=port, workers=1, alias="first"))
    process = subprocess.Popen(
        [sys.executable, "-c", _STOP_WHEN_ANNOUNCED, str(config), str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.wait(timeout=60) == 0
    except subprocess.TimeoutExpired:
        kill_tree(process)
        pytest.fail("the worker did not stop on a SIGTERM that came once it listened")
