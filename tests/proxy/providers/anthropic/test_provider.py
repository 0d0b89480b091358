"""proxy/providers/anthropic/provider.py: pure translation, table-driven from
tests/fixtures/anthropic/.

See :mod:`tests.proxy.providers.translation_support` for the fixture kinds. The request
translation (:mod:`proxy.providers.anthropic.request`) is tested in ``test_anthropic_request.py``,
the stream parser (:mod:`proxy.providers.anthropic.stream`, the ``stream`` fixtures) in
``test_anthropic_stream.py``.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from proxy.core.canonical import (
    Call,
    Message,
    Params,
)
from proxy.core.errors import UpstreamError
from proxy.providers import build_provider
from proxy.providers.anthropic.provider import (
    THINKING_BUDGETS,
    AnthropicConfig,
    AnthropicProvider,
)
from proxy.providers.base import HttpProvider
from proxy.runtime.config import parse_config
from tests.proxy.providers.translation_support import (
    assert_error,
    error_input,
    load_fixtures,
    strict_json,
)

KEY = "sk-ant-test-0123456789abcdef"


def provider(**config: Any) -> AnthropicProvider:
    config.setdefault("api_key", KEY)
    return AnthropicProvider("anthropic", AnthropicConfig(**config))


def call(*messages: Message, **params: Any) -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model="claude",
        messages=list(messages) or [Message(role="user", content="hi")],
        params=msgspec.convert(params, Params),
    )


def body_of(request_call: Call, **config: Any) -> dict[str, Any]:
    return strict_json(provider(**config).build_request(request_call, "claude-x").body)


def test_is_an_http_provider_with_a_stream_parser():
    built = provider()
    assert isinstance(built, HttpProvider)
    assert built.stream_parser() is not built.stream_parser(), "one parser per stream"


def test_config_from_yaml_builds_the_provider():
    config = parse_config(
        """
        providers:
          claude:
            type: anthropic
            api_key: sk-ant-yaml
            max_tokens_default: 1000
            headers: {anthropic-beta: "prompt-caching-2024-07-31"}
        """
    )
    built = build_provider("claude", config.providers["claude"])
    assert isinstance(built, AnthropicProvider)
    assert built.ready
    assert built.secrets == ("sk-ant-yaml",)
    request = built.build_request(call(), "claude-x")
    assert request.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert strict_json(request.body)["max_tokens"] == 1000


@pytest.mark.parametrize("api_key", [None, ""])
def test_not_ready_without_a_key(api_key: str | None):
    built = AnthropicProvider("a", AnthropicConfig(api_key=api_key))
    assert not built.ready
    assert built.secrets == ()


# ---------------------------------------------------------------------------------------------
# Table-driven translation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", load_fixtures("anthropic", "response"))
def test_response_translation(fixture: dict[str, Any]):
    body = json.dumps(fixture["body"]).encode()
    response = provider().parse_response(body, fixture["requested_model"])
    assert msgspec.to_builtins(response) == fixture["expected"]


@pytest.mark.parametrize("fixture", load_fixtures("anthropic", "error"))
def test_error_classification(fixture: dict[str, Any]):
    status, headers, body = error_input(fixture)
    assert_error(provider().parse_error(status, headers, body), fixture["expected"])


# ---------------------------------------------------------------------------------------------
# Request details
# ---------------------------------------------------------------------------------------------


def test_configured_base_url_version_and_headers():
    built = provider(
        base_url="http://127.0.0.1:9999/",
        anthropic_version="2024-01-01",
        headers={"anthropic-beta": "b1", "x-api-key": "not-this"},
    )
    plugin_call = call()
    plugin_call.upstream_headers = {"x-trace": "t1", "x-api-key": "nor-this"}
    request = built.build_request(plugin_call, "claude-x")
    assert request.url == "http://127.0.0.1:9999/v1/messages"
    assert request.headers["anthropic-version"] == "2024-01-01"
    assert request.headers["anthropic-beta"] == "b1"
    assert request.headers["x-trace"] == "t1"
    assert request.headers["x-api-key"] == KEY, "credentials are never overridden"


@pytest.mark.parametrize(("effort", "budget"), sorted(THINKING_BUDGETS.items()))
def test_reasoning_effort_budgets(effort: str, budget: int):
    body = body_of(call(max_tokens=64000, reasoning_effort=effort, temperature=0.3))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == 64000, "a max_tokens above the budget is kept"
    assert "temperature" not in body, "the API allows no temperature but 1 with thinking"


def test_reasoning_effort_none_sends_no_thinking():
    assert "thinking" not in body_of(call(reasoning_effort="none"))


def test_max_tokens_default_leaves_room_for_the_budget():
    body = body_of(call(reasoning_effort="medium"), max_tokens_default=1024)
    assert body["max_tokens"] == 1024 + THINKING_BUDGETS["medium"]


# ---------------------------------------------------------------------------------------------
# Response and stream details
# ---------------------------------------------------------------------------------------------


def test_malformed_response_is_an_upstream_error():
    with pytest.raises(UpstreamError, match="malformed response"):
        provider().parse_response(b"{not json", "claude-x")


def test_stateless_parse_event_translates_a_text_delta():
    data = b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}'
    chunk = provider().parse_event("content_block_delta", data)
    assert chunk is not None
    assert chunk.choices[0].delta.content == "Hi"


# --- token counting --------------------------------------------------------------------------


def test_a_count_request_is_the_input_of_a_messages_request():
    counted = call(
        Message(role="system", content="Be brief."),
        Message(role="user", content="hi"),
        max_tokens=50,
        temperature=0.5,
        stop=["END"],
        reasoning_effort="medium",
        tool_choice="required",
        parallel_tool_calls=False,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    )
    request = provider(base_url="https://api.example/").count_tokens_request(counted, "claude-x")
    assert request.url == "https://api.example/v1/messages/count_tokens"
    assert request.headers["x-api-key"] == KEY
    assert strict_json(request.body) == {
        "model": "claude-x",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "system": [{"type": "text", "text": "Be brief."}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 8192},
    }


def test_a_token_count_is_read_or_the_upstream_is_malformed():
    assert provider().parse_token_count(b'{"input_tokens": 17}') == 17
    for bad in (b"{}", b'{"input_tokens": -1}', b"not json"):
        with pytest.raises(UpstreamError) as info:
            provider().parse_token_count(bad)
        assert info.value.status == 502
