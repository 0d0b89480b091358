"""The cache behind the real ``auth`` plugin: declared keys in two teams, one teamless key.

Under ``scope: team`` a team's keys share entries and no other team's; under ``scope: key``
nobody shares; a teamless key never shares with another teamless key.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import openai
import pytest
from aiohttp import web

from plugins.cache import CachePlugin
from proxy.server.app import RUNTIME, create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import ANSWER, FakeOpenAI

KEYS = {
    "a1": "sk-cw-team-a-one-" + "abcdefghij" * 4,
    "a2": "sk-cw-team-a-two-" + "abcdefghij" * 4,
    "b1": "sk-cw-team-b-one-" + "abcdefghij" * 4,
    "solo1": "sk-cw-teamless-1-" + "abcdefghij" * 4,
    "solo2": "sk-cw-teamless-2-" + "abcdefghij" * 4,
}
HI = [{"role": "user", "content": "hi"}]

Ask = Callable[[str], Awaitable[str]]
Launch = Callable[[str], Awaitable[Ask]]


@pytest.fixture
async def launch(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Launch]:
    _, upstream_url = upstream
    runners: list[web.AppRunner] = []

    async def start(scope: str) -> Ask:
        config = tmp_path / f"gateway-{scope}.yaml"
        config.write_text(
            textwrap.dedent(
                f"""
                server: {{access_log: false}}
                database: {{url: "sqlite:///{tmp_path}/crossway-{scope}.db"}}
                auth:
                  teams: {{team-a: {{}}, team-b: {{}}}}
                  keys:
                    - {{key: "{KEYS["a1"]}", alias: a1, team: team-a}}
                    - {{key: "{KEYS["a2"]}", alias: a2, team: team-a}}
                    - {{key: "{KEYS["b1"]}", alias: b1, team: team-b}}
                    - {{key: "{KEYS["solo1"]}", alias: solo1}}
                    - {{key: "{KEYS["solo2"]}", alias: solo2}}
                providers:
                  up: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
                models:
                  chat: [{{target: up/gpt-test}}]
                plugins:
                  - auth: {{}}
                  - cache: {{scope: {scope}}}
                """
            )
        )
        app = create_app(config, log_stream=io.StringIO())
        runner, url = await start_site(app)
        runners.append(runner)

        async def ask(who: str) -> str:
            """One request with ``who``'s key: the cache's verdict."""
            async with openai.AsyncOpenAI(
                base_url=f"{url}/v1", api_key=KEYS[who], max_retries=0
            ) as client:
                raw = await client.chat.completions.with_raw_response.create(
                    model="chat", messages=HI
                )
            assert raw.parse().choices[0].message.content == ANSWER
            cache = next(p for p in app[RUNTIME].snapshot.plugins if isinstance(p, CachePlugin))
            await cache.close()  # the entry is written once the reply was handed on
            return raw.headers["x-crossway-cache"]

        return ask

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_team_scope_shares_within_a_team_only(
    launch: Launch, upstream: tuple[FakeOpenAI, str]
) -> None:
    ask = await launch("team")
    assert [await ask(who) for who in ("a1", "a2", "b1", "solo1", "solo2", "b1")] == [
        "miss",
        "hit",  # same team, another key
        "miss",  # another team
        "miss",  # teamless: its own
        "miss",  # another teamless key shares nothing with the first
        "hit",
    ]
    assert len(upstream[0].requests) == 4


async def test_key_scope_shares_nothing_between_keys(
    launch: Launch, upstream: tuple[FakeOpenAI, str]
) -> None:
    ask = await launch("key")
    assert [await ask(who) for who in ("a1", "a2", "a1")] == ["miss", "miss", "hit"]
    assert len(upstream[0].requests) == 2


async def test_global_scope_shares_between_teams(
    launch: Launch, upstream: tuple[FakeOpenAI, str]
) -> None:
    ask = await launch("global")
    assert [await ask(who) for who in ("a1", "b1", "solo1")] == ["miss", "hit", "hit"]
