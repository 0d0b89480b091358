"""proxy/http/edges.py through a real gateway: request ids on every answer, 404/405 with
``Allow``, the other routes and unknown paths counted under a bounded ``route`` label, and CORS
only when configured."""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from proxy.http.edges import RequestIds
from proxy.server.app import create_app
from tests.e2e.conftest import start_site

BASE = """\
server: {{access_log: false{server}}}
providers:
  mock: {{type: mock}}
models:
  default: [{{target: mock/echo}}]
"""
CORS = ", cors: {allow_origins: ['https://app.example.com']}"
CHAT = {"model": "default", "messages": [{"role": "user", "content": "hi"}]}
PLAIN_ROUTES = ["/v1/models", "/models", "/metrics", "/health/live", "/health/ready"]


@pytest.fixture
async def gateway(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    path = tmp_path / "gateway.yaml"
    path.write_text(BASE.format(server=getattr(request, "param", "")))
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        yield url
    finally:
        await runner.cleanup()


async def fetch(
    url: str, method: str = "GET", body: object = None, **headers: str
) -> tuple[int, CIMultiDict[str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=data, headers=headers) as response,
    ):
        return response.status, response.headers.copy(), await response.read()


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        *(("GET", route, 200) for route in PLAIN_ROUTES),
        ("GET", "/no/such/route", 404),
        ("GET", "/v1/embeddings", 405),
        ("POST", "/metrics", 405),
        ("POST", "/v1/chat/completions", 200),
    ],
)
async def test_every_answer_carries_a_request_id(
    gateway: str, method: str, path: str, status: int
) -> None:
    body = CHAT if method == "POST" else None
    got, headers, _ = await fetch(gateway + path, method, body, **{"x-request-id": "trace-7"})
    assert (got, headers["x-request-id"]) == (status, "trace-7")
    got, headers, _ = await fetch(gateway + path, method, body)
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", headers["x-request-id"]
    )
    assert headers.getall("Server") == ["crossway"]  # never aiohttp's version banner


@pytest.mark.parametrize(
    "body",
    [
        {**CHAT, "stream": True},
        {**CHAT, "model": "nowhere/nothing"},  # an error answer of the dialect
        {"model": "default"},  # a 400 before any model is resolved
    ],
)
async def test_dialect_answers_name_the_server_without_a_version(
    gateway: str, body: object
) -> None:
    _, headers, _ = await fetch(gateway + "/v1/chat/completions", "POST", body)
    assert headers.getall("Server") == ["crossway"]


async def test_a_body_over_aiohttps_own_limit_is_answered_without_its_banner(
    tmp_path: Path,
) -> None:
    """aiohttp itself answers 413 when a route reads more than ``client_max_size``."""
    path = tmp_path / "gateway.yaml"
    path.write_text(
        BASE.format(server=", max_body_bytes: 1024")
        + "auth: {master_key: sk-master-test-0123456789abcdefghijklmnop}\n"
    )
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        status, headers, _ = await fetch(
            url + "/admin/teams",
            "POST",
            {"name": "x" * 4096},
            Authorization="Bearer sk-master-test-0123456789abcdefghijklmnop",
        )
    finally:
        await runner.cleanup()
    assert (status, headers.getall("Server")) == (413, ["crossway"])


def test_fresh_request_ids_stay_unique_past_the_last_groups_range() -> None:
    ids = RequestIds()
    ids._counter = itertools.count(0xFFFFFFFFFFFF)
    request = make_mocked_request("POST", "/v1/chat/completions")
    below, above = ids(request), ids(request)
    assert below.endswith("-0000-ffffffffffff")
    assert above.endswith("-0001-000000000000")
    assert below[:19] == above[:19]


async def test_405_says_which_methods_the_route_takes(gateway: str) -> None:
    status, headers, body = await fetch(gateway + "/v1/embeddings")
    assert (status, headers["Allow"]) == (405, "POST")
    assert json.loads(body)["error"]["code"] == "method_not_allowed"
    status, headers, _ = await fetch(gateway + "/health/live", "DELETE")
    assert (status, headers["Allow"]) == (405, "GET, HEAD")
    status, headers, _ = await fetch(gateway + "/v1/responses/resp_1", "POST")
    assert (status, headers["Allow"]) == (405, "DELETE, GET, HEAD")
    status, headers, body = await fetch(gateway + "/nowhere", "POST")
    assert (status, "Allow" in headers) == (404, False)
    assert json.loads(body)["error"]["code"] == "not_found"


async def test_other_routes_and_unknown_paths_are_counted_under_a_bounded_label(
    gateway: str,
) -> None:
    for path in ("/secret-probe-1", "/secret-probe-2", "/admin/../x"):
        await fetch(gateway + path)
    await fetch(gateway + "/v1/embeddings")  # 405 on a known path
    await fetch(gateway + "/health/ready")
    _, _, text = await fetch(gateway + "/metrics")
    metrics = text.decode()
    assert 'crossway_http_requests_total{route="unmatched",status_class="4xx"} 3.0' in metrics
    assert 'crossway_http_requests_total{route="/v1/embeddings",status_class="4xx"} 1.0' in metrics
    assert 'crossway_http_requests_total{route="/health/ready",status_class="2xx"} 1.0' in metrics
    assert "secret-probe" not in metrics


async def test_cors_is_off_unless_configured(gateway: str) -> None:
    origin = {"Origin": "https://app.example.com"}
    status, headers, _ = await fetch(
        gateway + "/v1/chat/completions",
        "OPTIONS",
        **origin,
        **{"Access-Control-Request-Method": "POST"},
    )
    assert status == 405
    _, headers_after_post, _ = await fetch(gateway + "/v1/chat/completions", "POST", CHAT, **origin)
    for answer in (headers, headers_after_post):
        assert not [name for name in answer if name.lower().startswith("access-control-")]


@pytest.mark.parametrize("gateway", [CORS], indirect=True)
async def test_a_configured_origin_gets_preflights_and_cors_headers(gateway: str) -> None:
    preflight = {
        "Origin": "https://app.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    status, headers, _ = await fetch(gateway + "/v1/chat/completions", "OPTIONS", **preflight)
    assert status == 204
    assert headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert headers["Access-Control-Allow-Methods"] == "GET, HEAD, POST, OPTIONS"  # stored too
    assert headers["Access-Control-Allow-Headers"] == "authorization, content-type"
    assert headers["Access-Control-Max-Age"] == "600"
    assert headers["x-request-id"]

    origin = {"Origin": "https://app.example.com"}
    for stream in (False, True):
        status, headers, _ = await fetch(
            gateway + "/v1/chat/completions", "POST", {**CHAT, "stream": stream}, **origin
        )
        assert status == 200
        assert headers["Access-Control-Allow-Origin"] == "https://app.example.com"
        exposed = headers["Access-Control-Expose-Headers"].split(", ")
        assert {"x-request-id", "x-crossway-overhead-ms", "x-crossway-guardrails"} <= set(exposed)
        assert "Origin" in headers["Vary"]
    _, headers, _ = await fetch(gateway + "/v1/models", **origin)
    assert headers["Access-Control-Allow-Origin"] == "https://app.example.com"


@pytest.mark.parametrize("gateway", [CORS], indirect=True)
async def test_an_origin_not_listed_gets_no_cors_headers(gateway: str) -> None:
    other = {"Origin": "https://evil.example.net"}
    status, headers, body = await fetch(
        gateway + "/v1/chat/completions",
        "OPTIONS",
        **other,
        **{"Access-Control-Request-Method": "POST"},
    )
    assert status == 403
    assert json.loads(body)["error"]["type"] == "permission_error"
    _, headers_after_post, _ = await fetch(gateway + "/v1/chat/completions", "POST", CHAT, **other)
    for answer in (headers, headers_after_post):
        assert "Access-Control-Allow-Origin" not in answer
    status, _, _ = await fetch(
        gateway + "/nowhere", "OPTIONS", **other, **{"Access-Control-Request-Method": "GET"}
    )
    assert status == 404


@pytest.mark.parametrize(
    "gateway", [", cors: {allow_origins: ['*'], allow_credentials: true}"], indirect=True
)
async def test_credentials_echo_the_origin_instead_of_a_wildcard(gateway: str) -> None:
    _, headers, _ = await fetch(gateway + "/health/live", Origin="https://a.example.org")
    assert headers["Access-Control-Allow-Origin"] == "https://a.example.org"
    assert headers["Access-Control-Allow-Credentials"] == "true"
