"""Config reloads in a running gateway (what SIGHUP runs): a good file is swapped in; a broken
file, or any failure while building the new snapshot, keeps the old one serving, is counted as
``crossway_config_reloads_total{result="error"}`` and logged — with no secret in the log.

A reload never weakens security silently: with the full chain serving, no file whatever (cut at
any line or byte, empty, its plugins dropped or reordered, its master key gone, garbage) lets a
request without a key through (to a dialect route, or to a /metrics that demands the master
key); a weaker valid file is refused, logged (``config_reload_refused``) and counted by reason
(``crossway_config_reload_refused_total{reason}``) unless the serving config allows it
(``server.allow_weaker_reload``). The generated files are applied in-process
through the function SIGHUP runs; one test sends real SIGHUPs to ``crossway serve``."""

from __future__ import annotations

import io
import json
import os
import signal
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.server.app import METRICS, RUNTIME, create_app, reload_runtime
from tests.e2e.conftest import UPSTREAM_KEY, Running, gateway_config, start_site
from tests.e2e.full_chain import CLIENT_KEY, MASTER_KEY, full_chain_config
from tests.e2e.processes import eventually, free_port, serve


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

    def exhausted(providers, capabilities=None):
        raise OSError(24, f"Too many open files (while connecting with {UPSTREAM_KEY})")

    monkeypatch.setattr("proxy.runtime.snapshot.HttpTransport", exhausted)
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


# -- A reload never weakens security silently -------------------------------------------------

CHAT = {"model": "backup", "messages": [{"role": "user", "content": "hi"}]}
REFUSED = ("auth_removed", "master_key_removed", "metrics_opened", "no_providers", "no_models")


class Guarded:
    """A gateway serving the full chain in this process: its URL, app, config file and logs."""

    def __init__(self, url: str, app: web.Application, path: Path, logs: io.StringIO) -> None:
        self.url = url
        self.app = app
        self.path = path
        self.logs = logs
        self.original = path.read_text()
        self._read = 0

    async def status(self, key: str | None = None) -> int:
        """The status of a chat request (to the mock, through the whole chain) with ``key``."""
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{self.url}/v1/chat/completions", json=CHAT, headers=headers) as reply,
        ):
            await reply.read()
            return reply.status

    async def metrics_status(self) -> int:
        """The status of ``GET /metrics`` without a key (the config demands the master key)."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{self.url}/metrics") as reply,
        ):
            await reply.read()
            return reply.status

    async def reload(self, text: str) -> bool:
        """Write ``text`` as the config file and reload it, as SIGHUP does; wait for the start
        of a snapshot swapped in."""
        self.path.write_text(text)
        swapped = reload_runtime(self.app)
        starting = self.app[RUNTIME].starting
        if swapped and starting is not None:
            await starting
        return swapped

    def counts(self) -> dict[str, float]:
        """``config_reloads_total`` by result and ``config_reload_refused_total`` by reason."""
        counts = {}
        for line in self.app[METRICS].render().decode().splitlines():
            for family in (
                "crossway_config_reloads_total{",
                "crossway_config_reload_refused_total{",
            ):
                if line.startswith(family):
                    label = line.split('="', 1)[1].split('"', 1)[0]
                    counts[label] = float(line.rsplit(" ", 1)[1])
        return counts

    def new_lines(self) -> list[dict]:
        """The log lines written since the last call."""
        text = self.logs.getvalue()
        fresh, self._read = text[self._read :], len(text)
        return [json.loads(line) for line in fresh.splitlines() if line]


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[Guarded]:
    path = tmp_path / "gateway.yaml"
    # The upstream is never reached: the requests go to the mock through the whole chain.
    server = "access_log: false, require_auth_for_metrics: true"
    path.write_text(full_chain_config(tmp_path, "http://127.0.0.1:9", server))
    logs = io.StringIO()
    app = create_app(path, log_stream=logs)
    runner, url = await start_site(app)
    yield Guarded(url, app, path, logs)
    await runner.cleanup()
    assert UPSTREAM_KEY not in logs.getvalue()
    assert MASTER_KEY not in logs.getvalue()
    assert CLIENT_KEY not in logs.getvalue()


def _cut_before(text: str, marker: str) -> str:
    return text[: text.index(marker)]


async def test_a_file_cut_before_auth_is_refused(guarded: Guarded) -> None:
    # The reproduction: valid YAML with providers and models but no auth section and no
    # plugins. Before the fix, a request without a key got 200 on the operator's provider key.
    before = guarded.app[RUNTIME].snapshot
    guarded.new_lines()
    assert await guarded.reload(_cut_before(guarded.original, "auth:")) is False
    assert guarded.app[RUNTIME].snapshot is before
    assert await guarded.status() == 401
    assert await guarded.status(CLIENT_KEY) == 200
    counts = guarded.counts()
    assert (counts["ok"], counts["error"]) == (0, 1)
    assert [counts[reason] for reason in REFUSED] == [1, 1, 0, 0, 0]
    (line,) = [x for x in guarded.new_lines() if x["event"] == "config_reload_refused"]
    assert line["level"] == "error"
    assert line["reasons"] == ["auth_removed", "master_key_removed"]
    assert any("allow_weaker_reload" in error for error in line["errors"])


async def test_a_weaker_file_is_refused_through_the_admin_api_too(guarded: Guarded) -> None:
    guarded.path.write_text(_cut_before(guarded.original, "auth:"))
    headers = {"Authorization": f"Bearer {MASTER_KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{guarded.url}/admin/reload", headers=headers) as reply,
    ):
        assert reply.status == 400
        error = (await reply.json())["error"]
    assert error["code"] == "config_invalid"
    assert "weaker than the serving config" in error["message"]
    assert await guarded.status() == 401
    assert guarded.counts()["auth_removed"] == 1


@pytest.mark.parametrize("text", ["", "\n", "# nothing but a comment\n", "---\n"])
async def test_an_empty_file_is_always_an_error(guarded: Guarded, text: str) -> None:
    # Even when the serving config allows a weaker reload: an empty document is never a config.
    allowing = guarded.original.replace("access_log: false", "allow_weaker_reload: true")
    assert await guarded.reload(allowing) is True
    guarded.new_lines()
    assert await guarded.reload(text) is False
    assert await guarded.status() == 401
    (line,) = [x for x in guarded.new_lines() if x["event"] == "config_reload_failed"]
    assert line["errors"] == ["$: the config is empty (no YAML document)"]
    assert guarded.counts()["error"] == 1


async def test_an_empty_mapping_is_refused_for_every_reason(guarded: Guarded) -> None:
    assert await guarded.reload("{}\n") is False
    assert [guarded.counts()[reason] for reason in REFUSED] == [1, 1, 1, 1, 1]
    assert await guarded.status() == 401


async def test_the_consent_must_come_from_the_serving_config(guarded: Guarded) -> None:
    # The file being loaded cannot grant itself the right to weaken: a cut file keeps its first
    # lines, so a flag there would survive any truncation.
    cut = _cut_before(guarded.original, "auth:")
    flagged = cut.replace("access_log: false", "allow_weaker_reload: true")
    assert await guarded.reload(flagged) is False
    assert await guarded.status() == 401
    # The operator's consent: a serving config that allows it. Then the weaker file is swapped
    # in, with a warning naming what it dropped.
    allowing = guarded.original.replace("access_log: false", "allow_weaker_reload: true")
    assert await guarded.reload(allowing) is True
    guarded.new_lines()
    assert await guarded.reload(cut) is True
    (line,) = [x for x in guarded.new_lines() if x["event"] == "config_reloaded"]
    assert (line["level"], line["weakened"]) == ("warning", ["auth_removed", "master_key_removed"])
    assert await guarded.status() == 200  # open, as the operator chose
    # The consent is not carried on by a config that does not repeat it: restoring auth is
    # never weaker, and the next cut file is refused again.
    assert await guarded.reload(guarded.original) is True
    assert await guarded.reload(cut) is False
    assert await guarded.status() == 401


PLUGINS = ("auth", "limits", "masking", "cache", "cost", "fallback", "retry", "balance")
EMPTY = ("", "\n", "   \n", "# only a comment\n", "---\n", "...\n", "--- # c\n...\n")

Edit = tuple[Any, ...]
YAML_SYMBOLS = ":-[]{},#&*!|>'\"%@`?\n\t "


def _edits() -> st.SearchStrategy[Edit]:
    """Edits of the real config: each is applied to the file text by :func:`_apply`."""
    position = st.integers(min_value=0, max_value=10**6)
    return st.one_of(
        st.tuples(st.just("cut"), position),
        st.tuples(st.just("empty"), st.sampled_from(EMPTY)),
        st.tuples(st.just("plugins"), st.permutations(range(len(PLUGINS))), st.integers(0, 8)),
        st.tuples(st.just("drop_line"), position),
        st.tuples(st.just("master"), st.sampled_from(["", "null", "~", None])),
        st.tuples(
            st.just("garbage"),
            st.text(max_size=200) | st.text(YAML_SYMBOLS + "abcauth", max_size=200),
        ),
        st.tuples(st.just("splice"), position, position, st.text(max_size=40)),
    )


def _apply(edit: Edit, text: str) -> str:
    """The config text after ``edit`` (see :func:`_edits`)."""
    kind, *args = edit
    lines = text.splitlines(keepends=True)
    if kind == "cut":
        return text[: args[0] % (len(text) + 1)]
    if kind == "empty":
        return args[0]
    if kind == "plugins":
        order, count = args
        head = text[: text.index("plugins:\n")]
        entries = "".join(_plugin_line(text, PLUGINS[i]) for i in order[:count])
        return head + ("plugins:\n" + entries if entries else "plugins: []\n")
    if kind == "drop_line":
        del lines[args[0] % len(lines)]
        return "".join(lines)
    if kind == "master":
        value = args[0]
        old = next(line for line in lines if "master_key:" in line)
        new = "" if value is None else f"  master_key: {value or chr(34) * 2}\n"
        return text.replace(old, new)
    if kind == "garbage":
        return args[0]
    start, end, inserted = args
    start, end = sorted((start % (len(text) + 1), end % (len(text) + 1)))
    return text[:start] + inserted + text[end:]


def _plugin_line(text: str, name: str) -> str:
    return next(line for line in text.splitlines(keepends=True) if line.startswith(f"  - {name}:"))


async def _check_invariant(guarded: Guarded, text: str) -> tuple[bool, list[str]]:
    """Reload ``text``: a request without a key, to a dialect route or ``/metrics``, is still
    refused (401); a reload that did not take is counted as an error and logged, a refused one
    counted by reason too. Then the real config serves again. Returns whether ``text`` was
    swapped in, and the reasons it was refused for (none when it was invalid)."""
    before = guarded.counts()
    guarded.new_lines()
    swapped = await guarded.reload(text)
    refused: list[str] = []
    try:
        assert await guarded.status() == 401, text
        assert await guarded.metrics_status() == 401, text
        after = guarded.counts()
        # The reload's own lines: the log also carries what the test process's libraries log
        # through the stdlib bridge (asyncio's "Task exception was never retrieved" for another
        # test's client collected now, say), which says nothing about the reload.
        lines = [line for line in guarded.new_lines() if line["event"].startswith("config_")]
        events = [line["event"] for line in lines]
        if swapped:
            assert after["ok"] == before["ok"] + 1
            assert guarded.app[RUNTIME].snapshot.demands_key
        else:
            assert after["error"] == before["error"] + 1
            refused = [reason for reason in REFUSED if after[reason] > before[reason]]
            expected = "config_reload_refused" if refused else "config_reload_failed"
            assert events == [expected], (text, events)
            assert all(after[reason] == before[reason] + 1 for reason in refused)
            assert lines[0].get("reasons", []) == refused
    finally:  # every example starts from the real config, even after a failure
        if swapped:
            assert await guarded.reload(guarded.original) is True
    return swapped, refused


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(edit=_edits())
async def test_no_reload_lets_a_keyless_request_through(guarded: Guarded, edit: Edit) -> None:
    swapped, refused = await _check_invariant(guarded, _apply(edit, guarded.original))
    if edit[0] == "plugins":
        kept = [PLUGINS[i] for i in edit[1][: edit[2]]]
        if "auth" in kept:  # reordered, or other plugins dropped: no weaker
            assert "auth_removed" not in refused
        else:
            assert refused == ["auth_removed"], kept
    if edit[0] == "master":
        assert not swapped, "a config without the master key must be refused"


async def test_no_cut_at_any_byte_lets_a_keyless_request_through(guarded: Guarded) -> None:
    # Every prefix of the real config (921 of them; about 11 s on a 2-core machine).
    text = guarded.original
    swapped = [n for n in range(len(text) + 1) if (await _check_invariant(guarded, text[:n]))[0]]
    assert swapped, "cuts inside the plugin list after the auth plugin keep every protection"
    assert min(swapped) > text.index("  - auth")
    # At line ends: exactly the cuts after the auth plugin's line are swapped in.
    ends = [n for n in range(len(text) + 1) if n == 0 or text[n - 1] == "\n"]
    first = text.index("  - auth: {}\n") + len("  - auth: {}\n")
    assert [n in swapped for n in ends] == [n >= first for n in ends]


def _post(url: str, key: str | None = None) -> int:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    body = json.dumps(CHAT).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _served_counts(url: str) -> dict[str, float]:
    counts = {}
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        for family in ("crossway_config_reloads_total{", "crossway_config_reload_refused_total{"):
            if line.startswith(family):
                label = line.split('="', 1)[1].split('"', 1)[0]
                counts[label] = float(line.rsplit(" ", 1)[1])
    return counts


def test_sighup_to_a_real_gateway_never_switches_auth_off(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    original = full_chain_config(tmp_path, "http://127.0.0.1:9", f"port: {port}")
    config.write_text(original)
    with serve(config, port, 1, tmp_path / "gateway.log") as served:
        assert (_post(served.url), _post(served.url, CLIENT_KEY)) == (401, 200)
        # Cut just before `auth:`, then empty: both refused, the key still demanded.
        config.write_text(_cut_before(original, "auth:"))
        os.kill(served.pid, signal.SIGHUP)
        eventually(lambda: _served_counts(served.url)["error"] == 1, what="the refusal")
        eventually(lambda: served.log_lines("config_reload_refused"), what="its log line")
        (refused,) = served.log_lines("config_reload_refused")
        assert refused["reasons"] == ["auth_removed", "master_key_removed"]
        assert (_post(served.url), _post(served.url, CLIENT_KEY)) == (401, 200)
        config.write_text("")
        os.kill(served.pid, signal.SIGHUP)
        eventually(lambda: _served_counts(served.url)["error"] == 2, what="the empty file")
        assert (_post(served.url), _post(served.url, CLIENT_KEY)) == (401, 200)
        counts = _served_counts(served.url)
        assert [counts[reason] for reason in REFUSED] == [1, 1, 0, 0, 0]
        # The operator's consent, in the serving config; then the cut file is swapped in.
        config.write_text(
            original.replace(f"port: {port}", f"port: {port}, allow_weaker_reload: true")
        )
        os.kill(served.pid, signal.SIGHUP)
        eventually(lambda: _served_counts(served.url)["ok"] == 1, what="the consenting config")
        config.write_text(_cut_before(original, "auth:"))
        os.kill(served.pid, signal.SIGHUP)
        eventually(lambda: _served_counts(served.url)["ok"] == 2, what="the weaker config")
        weakened = [x for x in served.log_lines("config_reloaded") if x.get("weakened")]
        assert [x["weakened"] for x in weakened] == [["auth_removed", "master_key_removed"]]
        assert _post(served.url) == 200
    logs = served.logs.read_text()
    assert all(secret not in logs for secret in (UPSTREAM_KEY, MASTER_KEY, CLIENT_KEY))
