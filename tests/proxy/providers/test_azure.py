"""proxy/providers/azure.py: Azure OpenAI, table-driven from tests/fixtures/azure/*.json.

Fixture kinds: ``request`` (a canonical call in, the upstream URL and JSON body out),
``response`` (an Azure body in, the canonical Response out), ``events`` (stream event data in,
the canonical Chunk — or none — out) and ``errors`` (Azure error answers in, gateway errors
out). The translation itself is the OpenAI provider's; these tests pin what Azure changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from multidict import CIMultiDict

from proxy.core import errors
from proxy.core.canonical import Call, MediaFile, MediaRequest, Message, Params
from proxy.providers.azure import DEFAULT_API_VERSION, AzureConfig, AzureProvider
from proxy.providers.base import HttpProvider

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "azure"
KEY = "0123456789abcdef0123456789abcdef"
ENDPOINT = "https://contoso.openai.azure.com/"


def load_fixtures(kind: str) -> list[Any]:
    cases = []
    for path in sorted(FIXTURES.glob("*.json")):
        fixture = json.loads(path.read_text(encoding="utf-8"))
        if fixture["kind"] == kind:
            cases.append(pytest.param(fixture, id=path.stem))
    assert cases, f"no {kind} fixtures in {FIXTURES}"
    return cases


def table(kind: str) -> list[Any]:
    (fixture,) = load_fixtures(kind)
    return [pytest.param(case, id=case["id"]) for case in fixture.values[0]["cases"]]


def provider(**config: Any) -> AzureProvider:
    if "azure_ad_token" not in config:
        config.setdefault("api_key", KEY)
    config.setdefault("endpoint", ENDPOINT)
    config.setdefault("deployments", {"gpt-4o": "prod-gpt4o"})
    return AzureProvider("azure", AzureConfig(**config))


def call_from(spec: dict[str, Any]) -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model=spec["model"],
        messages=msgspec.convert(spec["messages"], list[Message]),
        stream=spec.get("stream", False),
        params=msgspec.convert(spec.get("params", {}), Params),
        extra={k: msgspec.Raw(json.dumps(v).encode()) for k, v in spec.get("extra", {}).items()},
    )


def simple_call(**fields: Any) -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content="hi")],
        **fields,
    )


def test_is_an_http_provider():
    assert isinstance(provider(), HttpProvider)


@pytest.mark.parametrize("fixture", load_fixtures("request"))
def test_request_translation(fixture: dict[str, Any]):
    request = provider().build_request(call_from(fixture["call"]), fixture["upstream_model"])
    assert request.url == fixture["expected_url"]
    assert json.loads(request.body) == fixture["expected_body"]


@pytest.mark.parametrize("fixture", load_fixtures("response"))
def test_response_translation(fixture: dict[str, Any]):
    body = json.dumps(fixture["body"]).encode()
    response = provider().parse_response(body, fixture["requested_model"])
    assert response.raw in (None, body)  # a complete body is kept whole, for OpenAI clients
    response.raw = response.raw_fingerprint = None
    assert msgspec.to_builtins(response) == fixture["expected"]


@pytest.mark.parametrize("case", table("events"))
def test_event_translation(case: dict[str, Any]):
    data = json.dumps(case["data"]).encode()
    chunk = provider().parse_event("", data)
    if chunk is not None:
        assert chunk.raw in (None, data), "raw, when kept, is the upstream's own JSON"
        chunk.raw = None
    expected = case["expected"]
    assert (msgspec.to_builtins(chunk) if chunk is not None else None) == expected


@pytest.mark.parametrize("case", table("errors"))
def test_error_classification(case: dict[str, Any]):
    body = json.dumps(case["body"]).encode()
    error = provider().parse_error(case["status"], CIMultiDict(case["headers"]), body)
    expected = case["expected"]
    assert type(error) is getattr(errors, expected["class"])
    assert (error.status, error.kind, error.code) == (
        expected["status"],
        expected["kind"],
        expected["code"],
    )
    assert error.retry_after == expected.get("retry_after")
    assert error.message == case["body"]["error"]["message"]
    assert error.provider == "azure"


# ---------------------------------------------------------------------------------------------
# Credentials, readiness, configuration
# ---------------------------------------------------------------------------------------------


def test_api_key_is_sent_as_api_key_header():
    request = provider().build_request(simple_call(), "gpt-4o")
    assert request.headers["api-key"] == KEY
    assert "authorization" not in request.headers
    assert request.headers["content-type"] == "application/json"


def test_entra_token_is_sent_as_bearer():
    request = provider(azure_ad_token="eyJ0eXAiOiJKV1Qi.token").build_request(simple_call(), "m")
    assert request.headers["authorization"] == "Bearer eyJ0eXAiOiJKV1Qi.token"
    assert "api-key" not in request.headers


@pytest.mark.parametrize(
    ("credentials", "ready", "secrets"),
    [
        ({"api_key": KEY}, True, (KEY,)),
        ({"api_key": ""}, False, ()),
        ({"azure_ad_token": "tok"}, True, ("tok",)),
        ({"azure_ad_token": ""}, False, ()),
    ],
)
def test_readiness_and_secrets(credentials, ready, secrets):
    p = provider(**credentials)
    assert p.ready is ready
    assert p.secrets == secrets


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"endpoint": ENDPOINT}, "api_key or azure_ad_token is required"),
        ({"endpoint": ENDPOINT, "api_key": "k", "azure_ad_token": "t"}, "not both"),
        ({"api_key": "k"}, "endpoint"),
    ],
)
def test_config_validation(config, message):
    with pytest.raises(msgspec.ValidationError, match=message):
        msgspec.convert({"type": "azure", **config}, AzureConfig)


def test_api_version_default_and_override():
    assert (
        provider()
        .build_request(simple_call(), "x")
        .url.endswith(f"?api-version={DEFAULT_API_VERSION}")
    )
    url = provider(api_version="2025-04-01-preview").build_request(simple_call(), "x").url
    assert url == f"{ENDPOINT}openai/deployments/x/chat/completions?api-version=2025-04-01-preview"


def test_configured_headers_and_plugin_headers_never_replace_the_key():
    p = provider(headers={"x-ms-client-request-id": "abc"})
    call = simple_call(upstream_headers={"api-key": "stolen", "x-trace-id": "t"})
    headers = p.build_request(call, "m").headers
    assert headers["api-key"] == KEY
    assert headers["x-trace-id"] == "t"
    assert headers["x-ms-client-request-id"] == "abc"


def test_stream_usage_off_sends_no_stream_options():
    body = provider(stream_usage=False).build_request(simple_call(stream=True), "m").body
    assert "stream_options" not in json.loads(body)


def test_deployment_lookup():
    p = provider(deployments={"gpt-4o": "prod-gpt4o", "o3": "reasoning"})
    assert (p.deployment("gpt-4o"), p.deployment("o3"), p.deployment("other")) == (
        "prod-gpt4o",
        "reasoning",
        "other",
    )


@pytest.mark.parametrize("deployment", ["..", "."])
def test_a_dot_segment_deployment_is_400(deployment: str):
    # yarl resolves dot segments: ".." would post to /openai/chat/completions instead.
    with pytest.raises(errors.BadRequest) as caught:
        provider().build_request(simple_call(), deployment)
    assert caught.value.param == "model"


def test_media_goes_to_the_deployments_audio_and_image_paths() -> None:
    provider = AzureProvider(
        "az",
        AzureConfig(endpoint=ENDPOINT, api_key=KEY, deployments={"whisper-1": "whisper-prod"}),
    )
    assert "moderation" not in provider.media_operations
    assert "rerank" not in provider.media_operations
    media = MediaRequest("transcription", {}, [MediaFile("file", "a.wav", "audio/wav", b"R")])
    call = Call(request_id="r", dialect="d", model="whisper-1", messages=[], media=media)
    request = provider.build_media(call, "whisper-1")
    assert request.url == (
        "https://contoso.openai.azure.com/openai/deployments/whisper-prod/audio/transcriptions"
        f"?api-version={DEFAULT_API_VERSION}"
    )
    assert request.headers["api-key"] == KEY
    assert request.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert b'name="model"\r\n\r\nwhisper-prod\r\n' in b"".join(request.body)
