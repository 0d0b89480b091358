"""proxy/providers/gemini/request.py: the request translation, through the provider's
``build_request`` (table-driven from the ``request`` fixtures of tests/fixtures/gemini/, then
the mappings and refusals the fixtures do not show).

The provider's own part of the request (the model path, the key header) and the tool-call id
round trip through a response are tested in ``test_gemini.py``, whose helpers these tests share.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from proxy.core.canonical import Call, FilePart, FunctionCall, Message, ToolCall
from proxy.core.errors import BadRequest
from proxy.providers.gemini.request import THINKING_BUDGETS
from tests.proxy.providers.gemini.test_provider import KEY, body_of, call, provider
from tests.proxy.providers.translation_support import call_from, load_fixtures, strict_json


@pytest.mark.parametrize("fixture", load_fixtures("gemini", "request"))
def test_request_translation(fixture: dict[str, Any]):
    request = provider().build_request(call_from(fixture["call"]), fixture["upstream_model"])
    assert request.url == fixture["expected_url"]
    assert strict_json(request.body) == fixture["expected_body"]
    assert request.headers["x-goog-api-key"] == KEY
    assert request.headers["content-type"] == "application/json"


@pytest.mark.parametrize(("effort", "budget"), sorted(THINKING_BUDGETS.items()))
def test_reasoning_effort_budgets(effort: str, budget: int):
    thinking = body_of(call(reasoning_effort=effort))["generationConfig"]["thinkingConfig"]
    assert thinking["thinkingBudget"] == budget
    assert thinking.get("includeThoughts", False) is (budget > 0)


@pytest.mark.parametrize(
    ("request_call", "param"),
    [
        (
            call(
                Message(
                    role="assistant",
                    content=None,
                    tool_calls=[ToolCall(id="c1", function=FunctionCall("f", "not json"))],
                )
            ),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            call(Message(role="tool", tool_call_id="nowhere", content="x")),
            "messages[0].tool_call_id",
        ),
        (call(Message(role="function", content="x", name="f")), "messages[0].role"),
        (
            call(Message(role="user", content=[FilePart(file={"file_id": "file-abc"})])),
            "messages[0].content[0]",
        ),
        (call(tool_choice={"type": "function"}), "tool_choice"),
        (
            call(response_format={"type": "json_schema", "json_schema": {}}),
            "response_format.json_schema",
        ),
    ],
    ids=["arguments", "tool-id", "function-role", "file-id", "tool-choice", "schema"],
)
def test_requests_gemini_cannot_express_are_400(request_call: Call, param: str):
    with pytest.raises(BadRequest) as caught:
        provider().build_request(request_call, "gemini-2.5-flash")
    assert caught.value.param == param


def test_top_k_must_be_an_integer():
    bad = call()
    bad.extra = {"top_k": msgspec.Raw(b'"many"')}
    with pytest.raises(BadRequest) as caught:
        provider().build_request(bad, "gemini-2.5-flash")
    assert caught.value.param == "top_k"
