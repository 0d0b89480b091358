"""proxy/providers/gemini/provider.py: pure translation, table-driven from tests/fixtures/gemini/.

See :mod:`tests.proxy.providers.translation_support` for the fixture kinds. The request
translation (:mod:`proxy.providers.gemini.request`) is tested in ``test_gemini_request.py``, the
stream parser (:mod:`proxy.providers.gemini.stream`, the ``stream`` fixtures) in
``test_gemini_stream.py``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from proxy.core.canonical import Call, FunctionCall, Message, Params, ToolCall
from proxy.core.errors import BadRequest, GatewayError, UpstreamError
from proxy.providers import build_provider
from proxy.providers.base import HttpProvider
from proxy.providers.gemini.provider import GeminiConfig, GeminiProvider
from proxy.providers.gemini.request import SIGNATURE_MARK
from proxy.providers.gemini.stream import tool_call_id
from proxy.runtime.config import parse_config
from tests.proxy.providers.translation_support import (
    assert_error,
    error_input,
    load_fixtures,
    strict_json,
)

KEY = "AIzaSyTestKey0123456789abcdef"


def provider(**config: Any) -> GeminiProvider:
    config.setdefault("api_key", KEY)
    return GeminiProvider("gemini", GeminiConfig(**config))


def call(*messages: Message, **params: Any) -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model="gemini",
        messages=list(messages) or [Message(role="user", content="hi")],
        params=msgspec.convert(params, Params),
    )


def body_of(request_call: Call) -> dict[str, Any]:
    return strict_json(provider().build_request(request_call, "gemini-2.5-flash").body)


def test_is_an_http_provider_with_a_stream_parser():
    built = provider()
    assert isinstance(built, HttpProvider)
    assert built.stream_parser() is not built.stream_parser(), "one parser per stream"


def test_config_from_yaml_builds_the_provider():
    config = parse_config(
        """
        providers:
          google:
            type: gemini
            api_key: AIza-yaml
            base_url: http://127.0.0.1:9/v1beta/
            headers: {x-goog-user-project: my-project}
        """
    )
    built = build_provider("google", config.providers["google"])
    assert isinstance(built, GeminiProvider)
    assert built.ready
    assert built.secrets == ("AIza-yaml",)
    request = built.build_request(call(), "gemini-2.5-flash")
    assert request.url == "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:generateContent"
    assert request.headers["x-goog-api-key"] == "AIza-yaml"
    assert request.headers["x-goog-user-project"] == "my-project"


@pytest.mark.parametrize("api_key", [None, ""])
def test_not_ready_without_a_key(api_key: str | None):
    built = GeminiProvider("g", GeminiConfig(api_key=api_key))
    assert not built.ready
    assert built.secrets == ()


# ---------------------------------------------------------------------------------------------
# Table-driven translation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", load_fixtures("gemini", "response"))
def test_response_translation(fixture: dict[str, Any]):
    body = json.dumps(fixture["body"]).encode()
    if "expected_error" in fixture:
        with pytest.raises(GatewayError) as caught:
            provider().parse_response(body, fixture["requested_model"])
        assert_error(caught.value, fixture["expected_error"])
        return
    response = provider().parse_response(body, fixture["requested_model"])
    assert msgspec.to_builtins(response) == fixture["expected"]


@pytest.mark.parametrize("fixture", load_fixtures("gemini", "error"))
def test_error_classification(fixture: dict[str, Any]):
    status, headers, body = error_input(fixture)
    assert_error(provider().parse_error(status, headers, body), fixture["expected"])


# ---------------------------------------------------------------------------------------------
# Details
# ---------------------------------------------------------------------------------------------


def test_tool_call_ids_round_trip_with_their_signature():
    parser = provider().stream_parser()
    data = (
        b'{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f",'
        b'"args":{"a":1}},"thoughtSignature":"c2ln"}]},"finishReason":"STOP"}],'
        b'"responseId":"r1"}'
    )
    chunk = parser.parse_event("", data)
    assert chunk is not None
    (delta,) = chunk.choices[0].delta.tool_calls  # type: ignore[misc]
    assert delta.id == tool_call_id("r1", 0, 0, "f") + SIGNATURE_MARK + "c2ln"
    assert chunk.choices[0].finish_reason == "tool_calls"
    assert isinstance(delta.id, str)
    back = call(
        Message(role="user", content="go"),
        Message(
            role="assistant",
            content=None,
            tool_calls=[ToolCall(id=delta.id, function=FunctionCall("f", '{"a":1}'))],
        ),
        Message(role="tool", tool_call_id=delta.id, content="done"),
    )
    contents = body_of(back)["contents"]
    assert contents[1]["parts"] == [
        {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "c2ln"}
    ]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "f", "response": {"output": "done"}}}
    ]


def test_stateless_parse_event_translates_one_event():
    data = b'{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"}}]}'
    chunk = provider().parse_event("", data)
    assert chunk is not None
    assert chunk.choices[0].delta.content == "Hi"
    assert chunk.choices[0].delta.role == "assistant"


def test_plugin_headers_never_override_the_key():
    plugin_call = call()
    plugin_call.upstream_headers = {"x-goog-api-key": "stolen", "x-trace": "t"}
    request = provider().build_request(plugin_call, "gemini-2.5-flash")
    assert request.headers["x-goog-api-key"] == KEY
    assert request.headers["x-trace"] == "t"


def test_malformed_bodies_are_upstream_errors():
    with pytest.raises(UpstreamError, match="malformed response"):
        provider().parse_response(b"[not json", "gemini-2.5-flash")
    with pytest.raises(UpstreamError, match="malformed stream event"):
        provider().stream_parser().parse_event("", b"{")


def test_non_json_error_body_keeps_its_text():
    error = provider().parse_error(502, {}, b"<html>Bad Gateway</html>")
    assert error.message == "<html>Bad Gateway</html>"
    assert error.status == 502


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ("gemini-2.5-flash", "/v1beta/models/gemini-2.5-flash"),
        ("tunedModels/my-model", "/v1beta/tunedModels/my-model"),
        ("gemini?x=1#", "/v1beta/models/gemini?x=1#"),
    ],
)
def test_the_model_is_one_encoded_path_per_segment(model: str, path: str):
    """A client picks the upstream model (``gemini/<anything>``): it must stay in the path."""
    from yarl import URL

    url = URL(provider().build_request(call(), model).url)
    assert url.path == path + ":generateContent"  # decoded: "?" and "#" stayed in the path
    assert url.query_string == ""
    assert url.fragment == ""


@pytest.mark.parametrize("model", ["..", "../cachedContents", "models/../../files", "a//b", ""])
def test_a_model_that_would_leave_its_path_is_400(model: str):
    # HTTP clients resolve dot segments: the key would be sent to another Gemini endpoint.
    with pytest.raises(BadRequest) as caught:
        provider().build_request(call(), model)
    assert caught.value.param == "model"


def test_a_response_without_candidates_is_an_upstream_error():
    # Dialects answer from choice 0: an empty answer must be a 502 here, not an IndexError later.
    with pytest.raises(UpstreamError, match="no candidates") as caught:
        provider().parse_response(b'{"usageMetadata": {"promptTokenCount": 3}}', "gemini-2.5-flash")
    assert caught.value.status == 502
