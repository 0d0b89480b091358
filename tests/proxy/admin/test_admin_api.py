"""The admin API through the HTTP server: the guard, bodies, status codes and records."""

from __future__ import annotations

import io
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import ClientSession

from proxy.server.app import create_app
from tests.e2e.conftest import start_site

MASTER = "master-" + "m" * 32
ADMIN = {"Authorization": f"Bearer {MASTER}"}
RECORD_FIELDS = {
    "id", "alias", "key_prefix", "team", "user", "models", "rpm", "tpm", "max_parallel",
    "blocked", "expires_at", "metadata", "created_at", "source", "budget", "request_logs", "mcp",
}  # fmt: skip


def write_config(tmp_path: Path, master: str = MASTER, extra: str = "") -> Path:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
            auth:
              master_key: "{master}"
              teams: {{search: {{models: [mock/echo], rpm: 10}}}}
              keys: [{{key: "{"d" * 40}", alias: ci, team: search}}]
            providers: {{mock: {{type: mock}}}}
            """
        )
        + extra
    )
    return config


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[tuple[ClientSession, str]]:
    app = create_app(write_config(tmp_path), log_stream=io.StringIO())
    runner, url = await start_site(app)
    async with ClientSession() as session:
        yield session, url
    await runner.cleanup()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {MASTER}"},
        {"x-api-key": MASTER},
        {"Authorization": "Bearer " + "d" * 40},  # a client key is not the master key
    ],
)
async def test_anything_but_the_master_key_is_401(admin, headers):
    session, url = admin
    for method, path in [
        ("GET", "/admin/keys"),
        ("POST", "/admin/keys"),
        ("POST", "/admin/reload"),
    ]:
        async with session.request(method, url + path, headers=headers, json={}) as response:
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "invalid_api_key"


async def test_keys_lifecycle(admin):
    session, url = admin
    async with session.post(
        url + "/admin/keys",
        headers=ADMIN,
        json={"alias": "a", "team": "search", "user": "ann", "models": ["mock/echo"],
              "rpm": 5, "tpm": 1000, "max_parallel": 2, "expires_at": "2099-01-31T00:00:00Z",
              "metadata": {"owner": "x"}},
    ) as response:  # fmt: skip
        assert response.status == 201
        created = await response.json()
    key = created.pop("key")
    assert key.startswith("sk-cw-")
    assert created["key_prefix"] == key[:10]
    assert set(created) == RECORD_FIELDS
    assert created["expires_at"] == "2099-01-31T00:00:00Z"
    assert created["source"] == "api"
    key_id = created["id"]
    async with session.get(url + "/admin/keys", headers=ADMIN) as response:
        listed = (await response.json())["data"]
    assert [k["id"] for k in listed] == ["config:ci", key_id]
    assert all(set(k) == RECORD_FIELDS for k in listed)
    assert key not in str(listed)
    async with session.get(url + "/admin/keys?team=nope", headers=ADMIN) as response:
        assert (await response.json())["data"] == []
    async with session.get(url + f"/admin/keys/{key_id}", headers=ADMIN) as response:
        assert await response.json() == created
    async with session.patch(
        url + f"/admin/keys/{key_id}", headers=ADMIN, json={"blocked": True, "rpm": None}
    ) as response:
        patched = await response.json()
    assert patched["blocked"] is True
    assert patched["rpm"] is None
    assert patched["tpm"] == 1000
    async with session.delete(url + f"/admin/keys/{key_id}", headers=ADMIN) as response:
        assert response.status == 204
    async with session.get(url + f"/admin/keys/{key_id}", headers=ADMIN) as response:
        assert response.status == 404
        assert (await response.json())["error"]["code"] == "key_not_found"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"not json", None),
        (b"", None),
        (b'{"rpm": "many"}', "rpm"),
        (b'{"rpm": 0}', "rpm"),
        (b'{"color": "red"}', "color"),
        (b'{"expires_at": "tomorrow"}', "expires_at"),
        (b'{"expires_at": "2099-01-31T00:00:00"}', "expires_at"),  # no zone
        (b'{"team": "no such team"}', "team"),
        (b'{"models": ["ok", ""]}', "models[1]"),
        (b'{"expires_at": "9999-12-31T23:59:59-14:00"}', "expires_at"),  # past 9999 in UTC
        (b'{"rpm": 2147483648}', "rpm"),  # beyond an SQL INTEGER
        (b'{"max_parallel": 1180591620717411303424}', "max_parallel"),
        (b'{"tpm": 9223372036854775808}', "tpm"),  # beyond an SQL BIGINT
        (b'{"budget": {"max_usd": 1e300}}', "budget.max_usd"),  # nano-dollars beyond 64 bits
        (b'{"budget": {"max_usd": 1e400}}', "budget.max_usd"),
    ],
)
async def test_bad_bodies_are_400_naming_the_field(admin, body: bytes, param: str | None):
    session, url = admin
    async with session.post(url + "/admin/keys", headers=ADMIN, data=body) as response:
        assert response.status == 400
        error = (await response.json())["error"]
    assert error["param"] == param, error


async def test_config_records_are_read_only(admin):
    session, url = admin
    paths = ["/admin/keys/config:ci", "/admin/teams/search"]
    for method, path in [(method, path) for path in paths for method in ("PATCH", "DELETE")]:
        async with session.request(method, url + path, headers=ADMIN, json={}) as response:
            assert response.status == 409, (method, path)
            assert (await response.json())["error"]["code"] == "read_only"


async def test_teams_lifecycle(admin):
    session, url = admin
    async with session.post(
        url + "/admin/teams", headers=ADMIN, json={"id": "eng", "rpm": 3, "models": ["a"]}
    ) as response:
        assert response.status == 201
        team = await response.json()
    assert set(team) == {"id", "models", "rpm", "tpm", "max_parallel", "metadata",
                         "created_at", "source", "budget", "request_logs", "mcp"}  # fmt: skip
    async with session.post(url + "/admin/teams", headers=ADMIN, json={"id": "eng"}) as response:
        assert response.status == 409
    async with session.post(url + "/admin/teams", headers=ADMIN, json={"rpm": 1}) as response:
        assert response.status == 400
        assert (await response.json())["error"]["param"] == "id"
    async with session.get(url + "/admin/teams", headers=ADMIN) as response:
        assert [t["id"] for t in (await response.json())["data"]] == ["search", "eng"]
    async with session.post(url + "/admin/keys", headers=ADMIN, json={"team": "eng"}) as response:
        key_id = (await response.json())["id"]
    async with session.patch(url + "/admin/teams/eng", headers=ADMIN, json={"tpm": 9}) as response:
        assert (await response.json())["tpm"] == 9
    async with session.delete(url + "/admin/teams/eng", headers=ADMIN) as response:
        assert response.status == 409
        assert (await response.json())["error"]["code"] == "team_not_empty"
    async with session.delete(url + f"/admin/keys/{key_id}", headers=ADMIN) as response:
        assert response.status == 204
    async with session.delete(url + "/admin/teams/eng", headers=ADMIN) as response:
        assert response.status == 204
    async with session.get(url + "/admin/teams/eng", headers=ADMIN) as response:
        assert response.status == 404


async def test_reload_rereads_the_config(tmp_path: Path):
    config = write_config(tmp_path)
    app = create_app(config, log_stream=io.StringIO())
    runner, url = await start_site(app)
    try:
        async with ClientSession() as session:
            config.write_text(config.read_text() + "models: {fast: [{target: mock/echo}]}\n")
            async with session.post(url + "/admin/reload", headers=ADMIN) as response:
                assert response.status == 200
                assert await response.json() == {"status": "reloaded"}
            async with session.get(url + "/v1/models") as response:
                assert "fast" in {m["id"] for m in (await response.json())["data"]}
            config.write_text("providers: [broken")
            async with session.post(url + "/admin/reload", headers=ADMIN) as response:
                assert response.status == 400
                assert (await response.json())["error"]["code"] == "config_invalid"
    finally:
        await runner.cleanup()


async def test_without_a_master_key_the_admin_api_is_off(tmp_path: Path):
    app = create_app(write_config(tmp_path, master=""), log_stream=io.StringIO())
    runner, url = await start_site(app)
    try:
        async with (
            ClientSession() as session,
            session.get(url + "/admin/keys", headers=ADMIN) as response,
        ):
            assert response.status == 401
            assert (await response.json())["error"]["code"] == "admin_disabled"
        assert not (tmp_path / "crossway.db").exists()  # nothing demanded the database
    finally:
        await runner.cleanup()


async def test_metrics_can_require_the_master_key(tmp_path: Path):
    config = write_config(tmp_path, extra="server: {require_auth_for_metrics: true}\n")
    app = create_app(config, log_stream=io.StringIO())
    runner, url = await start_site(app)
    try:
        async with ClientSession() as session:
            async with session.get(url + "/metrics") as response:
                assert response.status == 401
            async with session.get(url + "/metrics", headers=ADMIN) as response:
                assert response.status == 200
                assert "crossway_auth_failures_total" in await response.text()
            async with session.get(url + "/health/live") as response:
                assert response.status == 200
    finally:
        await runner.cleanup()
