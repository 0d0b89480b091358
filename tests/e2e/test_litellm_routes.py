"""LiteLLM's admin and health routes and its response headers, through the HTTP server: what a
script written for LiteLLM's proxy calls, with LiteLLM's bodies, statuses and master-key
rules; and ``compat: {litellm: false}`` turning all of it off."""

from __future__ import annotations

import io
import json
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import FakeOpenAI

MASTER = "sk-master-" + "0123456789abcdef" * 2
HI = [{"role": "user", "content": "hi"}]


def config_text(tmp_path: Path, upstream_url: str, compat: str = "") -> str:
    return (
        textwrap.dedent(
            f"""
        server: {{access_log: false}}
        database: {{url: "sqlite:///{tmp_path}/crossway.db"}}
        auth: {{master_key: "{MASTER}", cache_ttl: 0}}
        providers:
          up: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
        models:
          chat: [{{target: up/gpt-test, prices: {{input: 10, output: 20}}}}]
          other: [{{target: up/gpt-other}}]
        plugins:
          - auth: {{}}
          - limits: {{}}
          - cost: {{}}
        """
        )
        + compat
    )


class Gateway:
    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.session = session

    async def call(
        self, method: str, path: str, key: str | None = MASTER, **kwargs: Any
    ) -> tuple[int, Any, dict[str, str]]:
        headers = {} if key is None else {"authorization": f"Bearer {key}"}
        async with self.session.request(
            method, f"{self.url}{path}", headers=headers, **kwargs
        ) as response:
            body = await response.json(content_type=None)
            return response.status, body, dict(response.headers)

    def client(self, key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)


async def _gateway(tmp_path: Path, compat: str = "") -> AsyncIterator[Gateway]:
    fake = FakeOpenAI()
    upstream, upstream_url = await start_site(fake.app())
    path = tmp_path / "gateway.yaml"
    path.write_text(config_text(tmp_path, upstream_url, compat))
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        async with aiohttp.ClientSession() as session:
            yield Gateway(url, session)
    finally:
        await runner.cleanup()
        await upstream.cleanup()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async for running in _gateway(tmp_path):
        yield running


async def test_generate_maps_litellm_fields_to_the_key_record(gateway: Gateway) -> None:
    body = {
        "models": ["chat"],
        "max_budget": 5.0,
        "budget_duration": "30d",
        "soft_budget": 4.0,
        "rpm_limit": 60,
        "tpm_limit": 10000,
        "max_parallel_requests": 4,
        "key_alias": "ci",
        "user_id": "alice",
        "metadata": {"env": "ci"},
        "duration": "1d",
    }
    status, generated, _ = await gateway.call("POST", "/key/generate", json=body)
    assert status == 200, generated
    assert generated["key"].startswith("sk-cw-")
    status, record, _ = await gateway.call("GET", f"/admin/keys/{generated['token']}")
    assert status == 200
    assert record["alias"] == "ci"
    assert record["user"] == "alice"
    assert record["models"] == ["chat"]
    assert (record["rpm"], record["tpm"], record["max_parallel"]) == (60, 10000, 4)
    assert record["budget"] == {"max_usd": 5.0, "period": "30d", "soft_usd": 4.0}
    assert record["metadata"] == {"env": "ci"}
    assert record["expires_at"] is not None
    assert generated["max_budget"] == 5.0
    assert generated["budget_duration"] == "30d"


async def test_key_routes_demand_the_master_key(gateway: Gateway) -> None:
    _, generated, _ = await gateway.call("POST", "/key/generate", json={})
    key = generated["key"]
    for method, path, body in [
        ("POST", "/key/generate", {}),
        ("POST", "/key/update", {"key": key, "rpm_limit": 1}),
        ("POST", "/key/delete", {"keys": [key]}),
        ("POST", "/key/block", {"key": key}),
        ("POST", "/key/unblock", {"key": key}),
        ("GET", "/spend/logs", None),
    ]:
        for caller in (None, key):
            status, error, _ = await gateway.call(method, path, key=caller, json=body)
            assert status == 401, (method, path, caller, error)
            assert error["error"]["code"] == "invalid_api_key"


async def test_a_key_lives_through_litellm_routes(gateway: Gateway) -> None:
    _, generated, _ = await gateway.call("POST", "/key/generate", json={"models": ["chat"]})
    key = generated["key"]
    answer = await gateway.client(key).chat.completions.with_raw_response.create(
        model="chat", messages=HI
    )
    assert answer.headers["x-litellm-response-cost"] == answer.headers["x-crossway-cost-usd"]
    assert answer.headers["x-litellm-model-id"] == "up/gpt-test"
    assert answer.headers["x-litellm-attempted-retries"] == "0"
    assert answer.headers["x-litellm-attempted-fallbacks"] == "0"

    status, info, _ = await gateway.call("GET", f"/key/info?key={key}", key=key)
    assert status == 200
    assert info["key"] == key
    assert info["info"]["models"] == ["chat"]
    status, info, _ = await gateway.call("GET", "/key/info", key=key)
    assert status == 200
    assert info["info"]["token"] == generated["token"]
    assert key not in str(info["info"])  # the key itself only where the caller named it

    status, updated, _ = await gateway.call(
        "POST", "/key/update", json={"key": key, "rpm_limit": 7, "models": []}
    )
    assert status == 200
    assert updated["rpm_limit"] == 7
    assert updated["models"] == []
    _, record, _ = await gateway.call("GET", f"/admin/keys/{generated['token']}")
    assert record["rpm"] == 7
    assert record["models"] is None

    status, blocked, _ = await gateway.call("POST", "/key/block", json={"key": key})
    assert status == 200
    assert blocked["blocked"] is True
    with pytest.raises(openai.AuthenticationError):
        await gateway.client(key).chat.completions.create(model="chat", messages=HI)
    await gateway.call("POST", "/key/unblock", json={"key": generated["token"]})
    await gateway.client(key).chat.completions.create(model="other", messages=HI)

    status, logs, _ = await gateway.call("GET", f"/spend/logs?api_key={key}")
    assert status == 200
    assert len(logs) == 2, logs  # a blocked key's request is nobody's
    newest, first = logs
    assert first["api_key"] == generated["token"]
    assert first["model_group"] == "chat"
    assert first["spend"] == float(answer.headers["x-crossway-cost-usd"])
    assert first["model"] == "up/gpt-test"
    assert first["status"] == "success"
    assert newest["model_group"] == "other"
    status, one, _ = await gateway.call("GET", f"/spend/logs?request_id={first['request_id']}")
    assert [row["request_id"] for row in one] == [first["request_id"]]

    status, deleted, _ = await gateway.call("POST", "/key/delete", json={"keys": [key]})
    assert status == 200
    assert deleted == {"deleted_keys": [key]}
    with pytest.raises(openai.AuthenticationError):
        await gateway.client(key).chat.completions.create(model="chat", messages=HI)
    status, missing, _ = await gateway.call("POST", "/key/delete", json={"keys": [key]})
    assert status == 404
    assert missing["error"]["code"] == "key_not_found"


async def test_key_info_is_a_keys_own_unless_master(gateway: Gateway) -> None:
    _, first, _ = await gateway.call("POST", "/key/generate", json={"key_alias": "one"})
    _, second, _ = await gateway.call("POST", "/key/generate", json={"key_alias": "two"})
    for named in (first["key"], first["token"]):  # itself, by its value or its id
        status, own, _ = await gateway.call("GET", f"/key/info?key={named}", key=first["key"])
        assert status == 200, own
        assert (own["key"], own["info"]["key_alias"]) == (named, "one")
    status, own, _ = await gateway.call("GET", "/key/info", key=first["key"])
    assert (status, own["key"], own["info"]["key_alias"]) == (200, first["token"], "one")
    assert first["key"] not in json.dumps(own), "a key it did not name is not echoed"
    status, info, _ = await gateway.call("GET", f"/key/info?key={second['key']}")
    assert status == 200
    assert info["info"]["key_alias"] == "two"
    status, _, _ = await gateway.call("GET", "/key/info?key=sk-cw-nosuchkey")
    assert status == 404
    status, _, _ = await gateway.call("GET", "/key/info", key=None)
    assert status == 401


async def test_a_key_holder_cannot_tell_another_key_from_no_key(gateway: Gateway) -> None:
    """Another key's info and a key that does not exist get the same answer, named by value or
    by id; so do the master-key routes that name keys (401 before anything is looked up)."""
    _, mine, _ = await gateway.call("POST", "/key/generate", json={})
    _, other, _ = await gateway.call("POST", "/key/generate", json={"key_alias": "other"})
    pairs = [
        (other["key"], "sk-cw-" + "N" * 43),
        (other["token"], "key_0000000000000000"),
        ("config:other", "config:nosuchkey"),
    ]
    for exists, missing in pairs:
        answers = [
            (await gateway.call("GET", "/key/info", key=mine["key"], params={"key": named}))[:2]
            for named in (exists, missing)
        ]
        assert answers[0] == answers[1], answers
        assert answers[0][0] == 404
        assert answers[0][1]["error"]["code"] == "key_not_found"
        for path, body in [
            ("/key/update", {"key": exists, "rpm_limit": 1}),
            ("/key/delete", {"keys": [exists]}),
            ("/key/block", {"key": exists}),
            ("/key/regenerate", {"key": exists}),
        ]:
            seen = [
                (await gateway.call("POST", path, key=mine["key"], json={**body, "key": named}))[:2]
                for named in (exists, missing)
            ]
            assert seen[0] == seen[1], (path, seen)
            assert seen[0][0] in (401, 404), (path, seen)


@pytest.mark.parametrize("named", ["ключ", "sk-cw-\u00e9", "sk cw", "k" * 513, "sk-\x7f"])
async def test_a_key_that_cannot_be_one_is_never_hashed(gateway: Gateway, named: str) -> None:
    _, mine, _ = await gateway.call("POST", "/key/generate", json={})
    status, error, _ = await gateway.call("GET", "/key/info", params={"key": named})
    assert (status, error["error"]["param"]) == (400, "key"), error
    status, error, _ = await gateway.call(
        "GET", "/key/info", key=mine["key"], params={"key": named}
    )
    assert (status, error["error"]["code"]) == (404, "key_not_found"), error
    for path, body, param in [
        ("/key/update", {"key": named, "rpm_limit": 1}, "key"),
        ("/key/block", {"key": named}, "key"),
        ("/key/delete", {"keys": [named]}, "keys[0]"),
    ]:
        status, error, _ = await gateway.call("POST", path, json=body)
        assert (status, error["error"]["param"]) == (400, param), (path, error)
    status, error, _ = await gateway.call("GET", "/spend/logs", params={"api_key": named})
    assert (status, error["error"]["param"]) == (400, "api_key"), error


async def test_key_delete_by_alias(gateway: Gateway) -> None:
    _, generated, _ = await gateway.call("POST", "/key/generate", json={"key_alias": "old"})
    status, deleted, _ = await gateway.call("POST", "/key/delete", json={"key_aliases": ["old"]})
    assert status == 200
    assert deleted == {"deleted_keys": ["old"]}
    status, _, _ = await gateway.call("GET", f"/admin/keys/{generated['token']}")
    assert status == 404


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"aliases": {"gpt-4": "chat"}}, "aliases"),
        ({"key": "sk-my-own-key"}, "key"),
        ({"max_budget": 5, "budget_duration": "2h"}, "budget_duration"),
        ({"duration": "forever"}, "duration"),
        ({"rpm_limit": 0}, "rpm_limit"),
        ({"team_id": "nosuchteam"}, "team"),
        ({"duration": "99999999999999d"}, "duration"),  # ends after year 9998
        ({"rpm_limit": 2**70}, "rpm_limit"),
        ({"tpm_limit": 2**63}, "tpm_limit"),
        ({"max_budget": 1e300}, "max_budget"),
    ],
)
async def test_generate_refuses_what_it_cannot_honour(
    gateway: Gateway, body: dict[str, Any], param: str
) -> None:
    status, error, _ = await gateway.call("POST", "/key/generate", json=body)
    assert status == 400, error
    assert error["error"]["param"] == param


async def test_model_info_and_health(gateway: Gateway) -> None:
    _, generated, _ = await gateway.call("POST", "/key/generate", json={"models": ["chat"]})
    status, models, _ = await gateway.call("GET", "/model/info", key=generated["key"])
    assert status == 200
    assert models["data"] == [
        {
            "model_name": "chat",
            "litellm_params": {"model": "up/gpt-test"},
            "model_info": {"id": "up/gpt-test", "mode": "chat", "db_model": False},
        }
    ]
    status, everything, _ = await gateway.call("GET", "/model/info")
    assert [row["model_name"] for row in everything["data"]] == ["chat", "other"]
    status, _, _ = await gateway.call("GET", "/model/info", key=None)
    assert status == 401
    status, alive, _ = await gateway.call("GET", "/health/liveliness", key=None)
    assert (status, alive) == (200, "I'm alive!")
    status, ready, _ = await gateway.call("GET", "/health/readiness", key=None)
    assert status == 200
    assert ready["status"] == "healthy"
    assert ready["db"] == "connected"


async def test_compat_off_removes_routes_and_headers(tmp_path: Path) -> None:
    async for gateway in _gateway(tmp_path, "compat: {litellm: false}\n"):
        for method, path in [("POST", "/key/generate"), ("GET", "/health/liveliness")]:
            status, _, _ = await gateway.call(method, path, json={})
            assert status == 404, path
        _, created, _ = await gateway.call("POST", "/admin/keys", json={})
        answer = await gateway.client(created["key"]).chat.completions.with_raw_response.create(
            model="chat", messages=HI
        )
        assert "x-crossway-cost-usd" in answer.headers
        assert not [name for name in answer.headers if name.startswith("x-litellm-")]
