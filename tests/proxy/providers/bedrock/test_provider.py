"""proxy/providers/bedrock/provider.py: Converse translation, signing, streams and errors.

Table-driven from tests/fixtures/bedrock/: ``response`` (a Converse body in, the canonical
Response out — ids and times are generated, so they are left out) and ``errors`` (AWS error
answers in, gateway errors out); the ``request`` fixtures (the Converse body, from
:mod:`proxy.providers.bedrock.request`) are tested in ``test_bedrock_request.py``, the
``stream`` fixtures (the stream framing and parsing of :mod:`proxy.providers.bedrock.stream`)
in ``test_bedrock_stream.py``. Then end to end: the gateway in front of a Bedrock fake whose
stream fails in-band, and a signature botocore checks.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import openai
import pytest
import yaml
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from multidict import CIMultiDict

from proxy.core import errors
from proxy.core.canonical import Call, Message, Usage
from proxy.core.errors import BadRequest, UpstreamError
from proxy.providers.base import HttpProvider
from proxy.providers.bedrock.provider import BedrockConfig, BedrockProvider
from proxy.server.app import create_app
from tests.e2e.conftest import start_site

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "bedrock"
NOW = datetime(2025, 1, 15, 8, 30, 0, tzinfo=UTC)
CONFIG = {"region": "eu-west-3", "access_key_id": "AKIDTEST", "secret_access_key": "s3cr3t/KEY"}


def load_fixtures(kind: str) -> list[Any]:
    cases = []
    for path in sorted(FIXTURES.glob("*.json")):
        fixture = json.loads(path.read_text(encoding="utf-8"))
        if fixture["kind"] == kind:
            cases.append(pytest.param(fixture, id=path.stem))
    assert cases, f"no {kind} fixtures in {FIXTURES}"
    return cases


def provider(environ: dict[str, str] | None = None, **config: Any) -> BedrockProvider:
    settings = {**CONFIG, **config} if environ is None else config
    return BedrockProvider(
        "bedrock", BedrockConfig(**settings), environ=environ or {}, clock=lambda: NOW
    )


def simple_call(**fields: Any) -> Call:
    fields.setdefault("messages", [Message(role="user", content="hi")])
    return Call(request_id="req-1", dialect="openai", model="m", **fields)


def without_generated(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k not in ("id", "created", "model")}


def test_is_an_http_provider():
    assert isinstance(provider(), HttpProvider)


# ---------------------------------------------------------------------------------------------
# Table-driven translation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", load_fixtures("response"))
def test_response_translation(fixture: dict[str, Any]):
    body = json.dumps(fixture["body"], separators=(",", ":")).encode()  # AWS sends compact JSON
    response = provider().parse_response(body, fixture["requested_model"])
    built = msgspec.to_builtins(response)
    assert built["id"].startswith("chatcmpl-")
    assert built["created"] > 0
    assert without_generated(built) == without_generated(fixture["expected"])
    assert built["model"] == fixture["expected"]["model"]


def error_cases() -> list[Any]:
    (fixture,) = load_fixtures("errors")
    return [pytest.param(case, id=case["id"]) for case in fixture.values[0]["cases"]]


@pytest.mark.parametrize("case", error_cases())
def test_error_classification(case: dict[str, Any]):
    headers = CIMultiDict(case.get("headers", {}))
    if case["type"]:
        headers["x-amzn-ErrorType"] = case["type"] + ":http://internal.amazon.com/coral/x/"
    body = case["body"] if isinstance(case["body"], str) else json.dumps(case["body"])
    error = provider().parse_error(case["status"], headers, body.encode())
    expected = case["expected"]
    assert type(error) is getattr(errors, expected["class"])
    assert error.status == expected["status"]
    assert error.kind == expected["kind"]
    assert error.code == expected["code"]
    assert error.upstream_status == case["status"]
    assert error.provider == "bedrock"
    assert error.retry_after == expected.get("retry_after")
    message = expected.get("message")
    if message is None and isinstance(case["body"], dict):
        message = case["body"]["message"]
    assert error.message == message


# ---------------------------------------------------------------------------------------------
# Streams: the provider's stateless parse_event (the parser is test_bedrock_stream.py's)
# ---------------------------------------------------------------------------------------------


def test_provider_parse_event_translates_one_event():
    data = json.dumps({"contentBlockIndex": 3, "delta": {"toolUse": {"input": '{"a"'}}}).encode()
    chunk = provider().parse_event("contentBlockDelta", data)
    assert chunk is not None
    (call,) = chunk.choices[0].delta.tool_calls
    assert (call.index, call.function.arguments) == (0, '{"a"')


# ---------------------------------------------------------------------------------------------
# Requests: credentials, signing
# ---------------------------------------------------------------------------------------------


def test_credentials_and_region_from_the_environment():
    environ = {
        "AWS_ACCESS_KEY_ID": "AKIDENV",
        "AWS_SECRET_ACCESS_KEY": "env-secret",
        "AWS_SESSION_TOKEN": "env-token",
        "AWS_DEFAULT_REGION": "ap-south-1",
    }
    p = provider(environ)
    assert p.ready
    assert p.secrets == ("env-secret", "env-token")
    request = p.build_request(simple_call(), "m")
    assert request.url == "https://bedrock-runtime.ap-south-1.amazonaws.com/model/m/converse"
    assert (
        "Credential=AKIDENV/20250115/ap-south-1/bedrock/aws4_request"
        in (request.headers["authorization"])
    )
    assert request.headers["x-amz-security-token"] == "env-token"
    assert (
        provider({**environ, "AWS_REGION": "us-east-2"})
        .build_request(simple_call(), "m")
        .url.startswith("https://bedrock-runtime.us-east-2.")
    )


def test_a_key_in_the_config_is_never_mixed_with_the_environment():
    environ = {"AWS_SECRET_ACCESS_KEY": "env-secret", "AWS_SESSION_TOKEN": "env-token"}
    p = provider(environ, region="us-east-1", access_key_id="AKIDCONF")
    assert not p.ready  # the config names a key but not its secret
    assert p.secrets == ()


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"},  # no region
        {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AK"},  # no secret
        {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "SK"},
    ],
)
def test_not_ready_without_region_and_a_complete_key(environ):
    assert provider(environ).ready is False


def test_the_signature_is_botocores_and_covers_plugin_headers():
    p = provider(headers={"x-team": "search"})
    call = simple_call(upstream_headers={"x-trace-id": "abc"})
    request = p.build_request(call, "anthropic.claude-3-haiku-20240307-v1:0")
    assert request.headers["x-trace-id"] == "abc"
    assert request.headers["x-team"] == "search"
    assert request.headers["x-amz-date"] == "20250115T083000Z"
    signed = request.headers["authorization"].split("SignedHeaders=")[1].split(",")[0]
    assert signed == "content-type;host;x-amz-date;x-team;x-trace-id"
    boto = AWSRequest(
        method="POST",
        url=request.url,
        data=request.body,
        headers={
            k: v for k, v in request.headers.items() if k not in ("authorization", "x-amz-date")
        },
    )
    with mock.patch("botocore.auth.get_current_datetime", return_value=NOW.replace(tzinfo=None)):
        SigV4Auth(BotoCredentials("AKIDTEST", "s3cr3t/KEY"), "bedrock", "eu-west-3").add_auth(boto)
    assert boto.headers["Authorization"] == request.headers["authorization"]


def test_plugin_headers_never_replace_the_providers_own_or_the_signatures():
    plugin = {"Content-Type": "text/plain", "Authorization": "x", "X-Amz-Date": "y", "Host": "z"}
    request = provider().build_request(simple_call(upstream_headers=plugin), "m")
    assert {k.lower() for k in request.headers} == {"content-type", "x-amz-date", "authorization"}
    assert request.headers["content-type"] == "application/json"
    assert request.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDTEST/")


def test_config_validation():
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"type": "bedrock", "regoin": "x"}, BedrockConfig)


def test_usage_with_null_counts():
    body = {
        "output": {"message": {"content": [{"text": "x"}]}},
        "usage": {"inputTokens": 5, "outputTokens": None, "cacheReadInputTokens": None},
    }
    usage = provider().parse_response(json.dumps(body).encode(), "m").usage
    assert usage == Usage(input=5)


def test_malformed_response_body():
    with pytest.raises(UpstreamError, match="malformed response"):
        provider().parse_response(b'{"stopReason": "end_turn"}', "m")


# ---------------------------------------------------------------------------------------------
# End to end: the gateway in front of a stream that fails in-band
# ---------------------------------------------------------------------------------------------


async def collect(stream: Any, text: list[str]) -> None:
    async for chunk in stream:
        text += [choice.delta.content or "" for choice in chunk.choices]


async def test_an_in_band_exception_reaches_the_client_as_an_error_after_the_text(tmp_path):
    body = (FIXTURES / "stream_exception.bin").read_bytes()

    async def converse_stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"content-type": "application/vnd.amazon.eventstream"}
        )
        await response.prepare(request)
        await response.write(body)
        return response

    app = web.Application()
    app.router.add_post("/model/{model}/converse-stream", converse_stream)
    upstream, upstream_url = await start_site(app)
    config = {
        "server": {"access_log": False},
        "providers": {"aws": {"type": "bedrock", **CONFIG, "endpoint_url": upstream_url}},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    gateway, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        async with client:
            stream = await client.chat.completions.create(
                model="aws/amazon.nova-lite-v1:0",
                messages=[{"role": "user", "content": "Hi"}],
                stream=True,
            )
            text: list[str] = []
            with pytest.raises(openai.APIError, match="Too many tokens"):
                await collect(stream, text)
        assert "".join(text) == "Partial"
    finally:
        await gateway.cleanup()
        await upstream.cleanup()


def test_a_dot_segment_model_is_400():
    with pytest.raises(BadRequest) as caught:
        provider().build_request(simple_call(), "..")
    assert caught.value.param == "model"
