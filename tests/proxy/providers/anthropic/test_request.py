"""proxy/providers/anthropic/request.py: the request translation, through the provider's
``build_request`` (table-driven from the ``request`` fixtures of tests/fixtures/anthropic/, then
the mappings and refusals the fixtures do not show).

The provider's own part of the request (auth headers, ``max_tokens``, thinking budgets, the URL)
is tested in ``test_anthropic.py``, whose helpers these tests share.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.canonical import (
    AudioPart,
    Call,
    FunctionCall,
    InputAudio,
    Message,
    ToolCall,
)
from proxy.core.errors import BadRequest
from tests.proxy.providers.anthropic.test_provider import KEY, body_of, call, provider
from tests.proxy.providers.translation_support import call_from, load_fixtures, strict_json


@pytest.mark.parametrize("fixture", load_fixtures("anthropic", "request"))
def test_request_translation(fixture: dict[str, Any]):
    request = provider().build_request(call_from(fixture["call"]), fixture["upstream_model"])
    assert request.url == fixture["expected_url"]
    assert strict_json(request.body) == fixture["expected_body"]
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"


def test_tool_choice_auto_and_serial_calls():
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = body_of(call(tools=tools, tool_choice="auto"))
    assert body["tool_choice"] == {"type": "auto"}
    body = body_of(call(tools=tools, parallel_tool_calls=False))
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert "tool_choice" not in body_of(call(tools=tools))


def test_json_object_response_format_is_not_sent():
    body = body_of(call(response_format={"type": "json_object"}))
    assert "output_config" not in body


@pytest.mark.parametrize(
    ("request_call", "param"),
    [
        (call(n=2), "n"),
        (
            call(
                Message(
                    role="user",
                    content=[AudioPart(input_audio=InputAudio(data="UklGR", format="wav"))],
                )
            ),
            "messages[0].content[0]",
        ),
        (
            call(
                Message(
                    role="assistant",
                    content=None,
                    tool_calls=[ToolCall(id="t1", function=FunctionCall("f", "[1, 2]"))],
                )
            ),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (call(Message(role="function", content="x", name="f")), "messages[0].role"),
        (call(Message(role="tool", content="x")), "messages[0].tool_call_id"),
        (call(tool_choice={"type": "function"}), "tool_choice"),
        (
            call(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
            "response_format.json_schema",
        ),
    ],
    ids=["n", "audio", "arguments", "function-role", "tool-id", "tool-choice", "schema"],
)
def test_requests_anthropic_cannot_express_are_400(request_call: Call, param: str):
    with pytest.raises(BadRequest) as caught:
        provider().build_request(request_call, "claude-x")
    assert caught.value.param == param


def test_image_must_be_a_url_or_base64_data_url():
    from proxy.core.canonical import ImagePart, ImageURL

    for url in ("ftp://x/y.png", "data:image/png,plain"):
        message = Message(role="user", content=[ImagePart(image_url=ImageURL(url=url))])
        with pytest.raises(BadRequest):
            provider().build_request(call(message), "claude-x")
