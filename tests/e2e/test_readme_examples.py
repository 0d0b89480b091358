"""The README's examples work as written: its fenced shell and Python blocks, and the admin-API
example of the keys page it links to, are extracted and run — ``curl``, the ``crossway`` command
line and the ``openai`` SDK, as a reader would — against a real gateway serving the shipped
``config/gateway.yaml`` with ``CROSSWAY_MASTER_KEY`` set (the only changes: the gateway's address
for ``localhost:4000``, and ``python -m proxy`` for ``crossway``, so that no fixed port or
installed command is needed)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site

ROOT = Path(__file__).resolve().parents[2]
MASTER_KEY = "sk-readme-master-" + "0123456789" * 4
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
NOT_RUN = ("make run", "crossway serve")
"""Blocks that install, test or serve the gateway themselves: what the suite runs already."""


@dataclass
class Example:
    document: str
    language: str
    code: str

    def __str__(self) -> str:
        return f"{self.document}:{self.language}:{self.code.splitlines()[0][:40]}"


def examples(document: str, only: str | None = None) -> list[Example]:
    """The runnable ``sh`` and ``python`` blocks of ``document`` (those holding ``only``)."""
    found = []
    for language, code in BLOCK.findall((ROOT / document).read_text(encoding="utf-8")):
        if language not in ("sh", "python") or any(skip in code for skip in NOT_RUN):
            continue
        if only is None or only in code:
            found.append(Example(document, language, code))
    return found


README = examples("README.md")
ADMIN = examples("docs/keys-teams-limits.md", only="/admin/keys")


@dataclass
class Gateway:
    url: str
    environment: dict[str, str]

    async def run(self, example: Example) -> str:
        """Run ``example`` against this gateway; its output (it must exit 0)."""
        host = self.url.removeprefix("http://")
        code = example.code.replace("localhost:4000", host).replace("127.0.0.1:4000", host)
        if example.language == "python":
            argv = [sys.executable, "-c", code]
        else:
            code = re.sub(r"^crossway ", f"{sys.executable} -m proxy ", code, flags=re.MULTILINE)
            argv = ["bash", "-euo", "pipefail", "-c", code]
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=ROOT,
            env=self.environment,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
        assert process.returncode == 0, (out + err).decode()
        return out.decode()


@pytest.fixture
async def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Gateway]:
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI_", "CROSSWAY_"))
    }
    environment.update(CROSSWAY_MASTER_KEY=MASTER_KEY, CROSSWAY_DATA_DIR=str(tmp_path))
    for key in os.environ:
        if key.startswith(("OPENAI_", "CROSSWAY_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("CROSSWAY_MASTER_KEY", MASTER_KEY)
    monkeypatch.setenv("CROSSWAY_DATA_DIR", str(tmp_path))
    app = create_app(ROOT / "config" / "gateway.yaml", log_stream=io.StringIO())
    runner, url = await start_site(app)
    try:
        yield Gateway(url, environment)
    finally:
        await runner.cleanup()


def test_the_examples_are_found() -> None:
    assert [e.language for e in README] == ["sh", "python"]
    assert len(ADMIN) == 1


@pytest.mark.parametrize("example", README, ids=str)
async def test_a_readme_example_works_as_written(gateway: Gateway, example: Example) -> None:
    output = await gateway.run(example)
    if example.language == "sh":
        answer = json.loads(output)
        assert answer["object"] == "chat.completion"
        assert answer["choices"][0]["message"]["content"]
    else:
        assert output.strip() == "ping"


async def test_the_admin_api_example_works_as_written(gateway: Gateway) -> None:
    (example,) = ADMIN
    output = await gateway.run(example)
    assert "unknown team" not in output
    assert '"error"' not in output
    headers = {"authorization": f"Bearer {MASTER_KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{gateway.url}/admin/keys?team=search", headers=headers) as answer,
    ):
        keys = (await answer.json())["data"]
    assert sorted(key["alias"] for key in keys) == ["ci", "ci-cli"]
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{gateway.url}/admin/teams", headers=headers) as answer,
    ):
        teams = {team["id"] for team in (await answer.json())["data"]}
    assert {"search", "research"} <= teams
