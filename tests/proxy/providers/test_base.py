"""proxy/providers/base.py: helpers every provider shares, and their use by each provider."""

from __future__ import annotations

import pytest

from proxy.core.canonical import Call, Message
from proxy.core.errors import BadRequest
from proxy.providers.anthropic.provider import AnthropicConfig, AnthropicProvider
from proxy.providers.base import HttpProvider, path_segment, with_plugin_headers
from proxy.providers.gemini.provider import GeminiConfig, GeminiProvider
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider

KEY = "provider-secret-key"


def test_plugin_headers_never_replace_the_providers_own_whatever_their_case() -> None:
    own = {"x-api-key": KEY, "content-type": "application/json"}
    merged = with_plugin_headers(own, {"X-Api-Key": "stolen", "x-trace-id": "t1"})
    assert merged == {"x-trace-id": "t1", **own}
    assert with_plugin_headers(own, {}) is own


@pytest.mark.parametrize("value", ["", ".", ".."])
def test_dot_segments_are_refused(value: str) -> None:
    with pytest.raises(BadRequest) as caught:
        path_segment(value)
    assert caught.value.param == "model"


def test_path_segment_escapes_what_would_leave_the_segment() -> None:
    assert path_segment("a/b?c#d") == "a%2Fb%3Fc%23d"
    assert path_segment("us.anthropic.claude:0", safe=":") == "us.anthropic.claude:0"


@pytest.mark.parametrize(
    ("provider", "credential"),
    [
        (
            OpenAIProvider("o", OpenAIConfig(base_url="http://127.0.0.1:9/v1", api_key=KEY)),
            "Authorization",
        ),
        (AnthropicProvider("a", AnthropicConfig(api_key=KEY)), "X-Api-Key"),
        (GeminiProvider("g", GeminiConfig(api_key=KEY)), "X-Goog-Api-Key"),
    ],
    ids=["openai", "anthropic", "gemini"],
)
def test_a_plugin_cannot_send_a_second_credential(provider: HttpProvider, credential: str) -> None:
    call = Call(
        request_id="r",
        dialect="openai",
        model="p/m",
        messages=[Message(role="user", content="Hi")],
        upstream_headers={credential: "stolen", "x-trace-id": "t1"},
    )
    headers = provider.build_request(call, "m").headers
    values = [v for k, v in headers.items() if k.lower() == credential.lower()]
    assert len(values) == 1
    assert KEY in values[0]
    assert headers["x-trace-id"] == "t1"
