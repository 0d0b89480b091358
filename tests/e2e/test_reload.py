"""Config reloads in a running gateway (what SIGHUP runs): a good file is swapped in; a broken
file, or any failure while building the new snapshot, keeps the old one serving, is counted as
``crossway_config_reloads_total{result="error"}`` and logged — with no secret in the log."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from proxy.app import RUNTIME, reload_runtime
from tests.e2e.conftest import UPSTREAM_KEY, Running, gateway_config


async def _chat(gateway: Running, model: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{gateway.url}/v1/chat/completions", json=body) as response,
    ):
        return response.status


async def _reloads(gateway: Running) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{gateway.url}/metrics") as response,
    ):
        text = await response.text()
    counts = {}
    for line in text.splitlines():
        if line.startswith("crossway_config_reloads_total{"):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            counts[result] = float(line.rsplit(" ", 1)[1])
    return counts


def _log_lines(gateway: Running, event: str) -> list[dict]:
    lines = [json.loads(line) for line in gateway.logs.getvalue().splitlines() if line]
    return [line for line in lines if line["event"] == event]


def _config_path(gateway: Running) -> Path:
    return gateway.app[RUNTIME].loader.config_path


def _rewrite(gateway: Running, alias: str) -> None:
    """The same config with the ``chat`` alias renamed to ``alias``."""
    path = _config_path(gateway)
    path.write_text(path.read_text().replace("chat: [", f"{alias}: [", 1))


async def test_a_good_file_is_swapped_in(gateway: Running) -> None:
    before = gateway.app[RUNTIME].snapshot
    _rewrite(gateway, "renamed")
    assert reload_runtime(gateway.app) is True
    assert gateway.app[RUNTIME].snapshot is not before
    assert await _chat(gateway, "renamed") == 200
    assert await _chat(gateway, "chat") == 404
    assert await _reloads(gateway) == {"ok": 1.0, "error": 0.0}
    assert [line["level"] for line in _log_lines(gateway, "config_reloaded")] == ["info"]


async def test_a_broken_file_keeps_the_old_config(gateway: Running) -> None:
    before = gateway.app[RUNTIME].snapshot
    _config_path(gateway).write_text("providers: [this is: broken")
    assert reload_runtime(gateway.app) is False
    assert gateway.app[RUNTIME].snapshot is before
    assert await _chat(gateway, "chat") == 200
    assert await _reloads(gateway) == {"ok": 0.0, "error": 1.0}
    (line,) = _log_lines(gateway, "config_reload_failed")
    assert line["level"] == "error"
    assert any("not valid YAML" in error for error in line["errors"])


async def test_a_failure_that_is_not_a_config_error_keeps_the_old_config(
    gateway: Running, upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Building the new snapshot fails for a reason no validation can foresee (here the process
    # is out of file descriptors when the new transport is made), with the provider key in the
    # message: the old snapshot keeps serving and the traceback is logged, redacted.
    _, upstream_url = upstream
    before = gateway.app[RUNTIME].snapshot
    _config_path(gateway).write_text(gateway_config(upstream_url).replace("chat: [", "next: ["))

    def exhausted(providers):
        raise OSError(24, f"Too many open files (while connecting with {UPSTREAM_KEY})")

    monkeypatch.setattr("proxy.runtime.HttpTransport", exhausted)
    assert reload_runtime(gateway.app) is False
    assert gateway.app[RUNTIME].snapshot is before
    assert await _chat(gateway, "chat") == 200
    assert await _reloads(gateway) == {"ok": 0.0, "error": 1.0}
    (line,) = _log_lines(gateway, "config_reload_failed")
    assert line["level"] == "error"
    assert "OSError" in line["exception"]
    assert "Too many open files" in line["exception"]
    assert UPSTREAM_KEY not in gateway.logs.getvalue()

    monkeypatch.undo()  # the cause goes away: the same file now reloads
    assert reload_runtime(gateway.app) is True
    assert await _chat(gateway, "next") == 200
    assert await _reloads(gateway) == {"ok": 1.0, "error": 1.0}
