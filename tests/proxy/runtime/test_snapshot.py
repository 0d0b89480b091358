"""proxy/runtime/snapshot.py: snapshots are swapped on reload and closed once, even at shutdown; a
reload that would weaken the gateway is refused unless the serving config allows it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from proxy.core.canonical import Call
from proxy.core.metrics import Metrics
from proxy.core.reply import Reply
from proxy.runtime.config import ConfigError
from proxy.runtime.plugins import BUILTINS
from proxy.runtime.snapshot import Loader, ReloadRefused, Runtime, Snapshot

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


class Hooked(Closing):
    """A plugin with every optional hook."""

    async def start(self) -> None:
        CLOSED.append("started")

    def finished(self, request) -> None:
        pass

    async def authenticate(self, headers):
        raise AssertionError("not called")


async def test_the_snapshot_sorts_the_plugins_by_their_hooks_once(tmp_path):
    rt = runtime(config(tmp_path, "Closing", "Hooked"))
    snapshot = rt.snapshot
    closing, hooked = snapshot.plugins
    assert snapshot.starters == [hooked]
    assert snapshot.closers == [closing, hooked]
    assert snapshot.finishers == [hooked.finished]
    assert snapshot.authenticate == hooked.authenticate
    assert snapshot.demands_key
    await snapshot.start()
    await rt.close()
    assert CLOSED == ["started", "closing", "closing"]


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


MASTER = "master-" + "m" * 32
KEY = "sk-cw-" + "k" * 40


class Gatekeeper:
    """A plugin of the project's own that demands a key, under another name than ``auth``."""

    async def __call__(self, call: Call, next) -> Reply:
        return await next(call)

    async def authenticate(self, headers):
        raise AssertionError("not called in these tests")


GUARDED = {
    "server": "server: {access_log: false, require_auth_for_metrics: true}\n",
    "auth": f"auth: {{master_key: '{MASTER}', keys: [{{key: '{KEY}', alias: k}}]}}\n",
    "providers": "providers:\n  mock: {type: mock}\n",
    "models": "models:\n  chat: [{target: mock/echo}]\n",
    "plugins": "plugins: [{auth: {}}, {retry: {}}]\n",
}


def write(path: Path, **sections: str) -> Path:
    """``GUARDED`` with some sections replaced (an empty string drops one)."""
    path.write_text("".join({**GUARDED, **sections}.values()))
    return path


@pytest.mark.parametrize(
    ("sections", "reasons"),
    [
        ({"plugins": "plugins: [{retry: {}}]\n"}, ("auth_removed",)),
        ({"plugins": ""}, ("auth_removed",)),
        ({"auth": f"auth: {{keys: [{{key: '{KEY}', alias: k}}]}}\n"}, ("master_key_removed",)),
        ({"auth": "auth: {master_key: ''}\n"}, ("master_key_removed",)),
        ({"server": "server: {access_log: false}\n"}, ("metrics_opened",)),
        ({"models": ""}, ("no_models",)),
        ({"providers": "providers: {}\n", "models": ""}, ("no_providers", "no_models")),
        (
            {"server": "server: {}\n", "auth": "", "plugins": "", "providers": "", "models": ""},
            ("auth_removed", "master_key_removed", "metrics_opened", "no_providers", "no_models"),
        ),
    ],
)
async def test_a_weaker_config_is_refused_and_the_old_one_keeps_serving(
    tmp_path: Path, sections: dict[str, str], reasons: tuple[str, ...]
) -> None:
    rt = runtime(write(tmp_path / "gateway.yaml"))
    serving = rt.snapshot
    write(tmp_path / "gateway.yaml", **sections)
    with pytest.raises(ReloadRefused) as info:
        rt.reload()
    assert info.value.reasons == reasons
    assert len(info.value.errors) == len(reasons) + 1  # each reason, then how to consent
    assert rt.snapshot is serving
    await rt.close()


@pytest.mark.parametrize(
    "sections",
    [
        {"plugins": "plugins: [{retry: {}}, {auth: {}}]\n"},  # reordered: still demands a key
        {
            "plugins": f"plugins: [{{plugin: '{__name__}:Gatekeeper'}}]\n"
        },  # another that authenticates
        {"auth": f"auth: {{master_key: '{'n' * 40}'}}\n"},  # another master key, no declared key
        {"models": "models:\n  other: [{target: mock/echo}]\n"},  # other aliases
        {"server": "server: {access_log: true, require_auth_for_metrics: true}\n"},
    ],
)
async def test_a_config_that_keeps_every_protection_is_swapped_in(
    tmp_path: Path, sections: dict[str, str]
) -> None:
    rt = runtime(write(tmp_path / "gateway.yaml"))
    write(tmp_path / "gateway.yaml", **sections)
    fresh = rt.reload()
    assert rt.snapshot is fresh
    assert fresh.demands_key
    assert fresh.weakened == ()
    await rt.close()


async def test_an_open_gateway_may_stay_open(tmp_path: Path) -> None:
    # Nothing is weakened that the serving config did not have.
    rt = runtime(write(tmp_path / "gateway.yaml", plugins="", auth="", models=""))
    write(tmp_path / "gateway.yaml", plugins="plugins: [{retry: {}}]\n", auth="", models="")
    assert rt.reload().weakened == ()
    await rt.close()


async def test_only_the_serving_config_can_allow_a_weaker_one(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    rt = runtime(write(path))
    allowing = "server: {allow_weaker_reload: true, require_auth_for_metrics: true}\n"
    write(path, server=allowing, plugins="")  # the new file's own flag counts for nothing
    with pytest.raises(ReloadRefused):
        rt.reload()
    write(path, server=allowing)
    assert rt.reload().weakened == ()
    write(path, plugins="")  # weaker, and no longer allowing the next one
    assert rt.reload().weakened == ("auth_removed",)
    assert not rt.snapshot.demands_key
    await rt.close()


async def test_each_snapshot_has_the_tracer_of_its_config_closed_with_it(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("providers:\n  mock: {type: mock}\n")
    rt = runtime(path)
    untraced = rt.snapshot
    assert untraced.tracer.enabled is False
    path.write_text(
        "providers:\n  mock: {type: mock}\n"
        "telemetry: {traces: {endpoint: 'http://127.0.0.1:9',"
        " headers: {x-api-key: otlp-secret-0123456789}}}\n"
    )
    traced = rt.reload()
    assert traced.tracer.enabled is True
    assert traced.redactor.text("key otlp-secret-0123456789") == "key [REDACTED]"
    path.write_text("providers:\n  mock: {type: mock}\n")
    rt.reload()
    assert rt.snapshot.tracer.enabled is False
    await traced.close()  # exports what it holds (nothing here) and stops its exporter
    assert traced.closed
    await rt.close()
