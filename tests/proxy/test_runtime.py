"""proxy/runtime.py: snapshots are swapped on reload and closed once, even at shutdown."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from plugins import BUILTINS
from proxy.canonical import Call, Reply
from proxy.config import ConfigError
from proxy.metrics import Metrics
from proxy.runtime import Loader, Runtime, Snapshot

CLOSED: list[str] = []


class Closing:
    """A plugin that records its ``close``; ``fail`` makes the close raise."""

    async def __call__(self, call: Call, next) -> Reply:
        return await next(call)

    async def close(self) -> None:
        CLOSED.append("closing")


class FailingClose(Closing):
    async def close(self) -> None:
        CLOSED.append("failing")
        raise RuntimeError("cannot close")


def config(tmp_path: Path, *plugins: str) -> Path:
    path = tmp_path / "gateway.yaml"
    entries = "".join(f"\n  - {{plugin: '{__name__}:{p}'}}" for p in plugins)
    path.write_text(f"providers:\n  mock: {{type: mock}}\nplugins:{entries or ' []'}\n")
    return path


def runtime(path: Path, logs: io.StringIO | None = None) -> Runtime:
    loader = Loader(path, BUILTINS, Metrics(), logs or io.StringIO())

    def hook(provider, error) -> None:
        pass

    return Runtime(loader, Snapshot(loader.load(), hook), hook)


@pytest.fixture(autouse=True)
def _clear():
    CLOSED.clear()


async def test_a_retired_snapshot_closes_when_its_last_request_leaves(tmp_path):
    rt = runtime(config(tmp_path, "Closing"))
    first = rt.snapshot
    first.enter()
    rt.reload()
    assert rt.snapshot is not first
    assert CLOSED == []
    first.leave()
    await first.close()
    assert CLOSED == ["closing"]
    await rt.close()
    assert CLOSED == ["closing", "closing"]


async def test_closing_the_runtime_closes_retired_snapshots_still_in_use(tmp_path):
    # At shutdown a request may still hold an old snapshot: its sessions and plugins must be
    # closed too, not left to a task the loop never runs.
    rt = runtime(config(tmp_path, "Closing"))
    rt.snapshot.enter()  # never leaves
    rt.reload()
    await rt.close()
    assert CLOSED == ["closing", "closing"]


async def test_retired_snapshots_are_not_kept_once_closed(tmp_path):
    rt = runtime(config(tmp_path))
    for _ in range(5):
        old = rt.snapshot
        rt.reload()
        await old.close()
    rt.reload()
    assert len(rt._retired) <= 2


async def test_one_plugin_failing_to_close_does_not_keep_the_others_open(tmp_path):
    logs = io.StringIO()
    rt = runtime(config(tmp_path, "FailingClose", "Closing"), logs)
    await rt.close()  # does not raise
    assert CLOSED == ["failing", "closing"]
    assert "plugin_close_failed" in logs.getvalue()


@pytest.mark.parametrize(
    "plugins",
    [
        "[{balance: {strategy: '${PLUGIN_SECRET}'}}]",
        "[{plugin: 'no_such_module_${PLUGIN_SECRET}:Guard'}]",
        "[{retry: {}}, {fallback: {on_kinds: ['${PLUGIN_SECRET}']}}]",
    ],
)
@pytest.mark.parametrize("config_also_broken", [False, True])
def test_plugin_errors_never_show_environment_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugins: str, config_also_broken: bool
) -> None:
    secret = "correct-horse-battery-staple"  # no key shape: only the value itself is known
    monkeypatch.setenv("PLUGIN_SECRET", secret)
    broken = "server: {port: -1}\n" if config_also_broken else ""
    path = tmp_path / "gateway.yaml"
    path.write_text(f"{broken}providers:\n  mock: {{type: mock}}\nplugins: {plugins}\n")
    loader = Loader(path, BUILTINS, Metrics(), io.StringIO())
    with pytest.raises(ConfigError) as info:
        loader.load()
    plugin_errors = [e for e in info.value.errors if e.startswith("$.plugins")]
    assert plugin_errors, info.value.errors
    assert all(secret not in error for error in info.value.errors)
    assert any("[REDACTED]" in error for error in plugin_errors)
